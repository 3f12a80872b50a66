"""The report model, its views and the trace table widget's kernel side, for a known log; a real
kernel.

Sorting, filtering and paging happen in the browser (`_widget.js`); `tests/test_browser.py`
drives them in a real JupyterLab and in the self-contained report.
"""

import datetime
import json
import re

import nbformat
import pandas as pd
import pytest
from IPython.core.interactiveshell import InteractiveShell

from jaxtrace_nb._log._events import Event, EventLog
from jaxtrace_nb._views import _widget
from jaxtrace_nb._views._frames import summary_frame
from jaxtrace_nb._views._report import TABLE_COLUMNS, VISIBILITY_RULE, Report
from jaxtrace_nb._views._rows import SPECS, table_row
from jaxtrace_nb._views._standalone import events_from
from jaxtrace_nb._views._text import render_html, render_text
from jaxtrace_nb._views._widget import TraceTable

INJECTION = "<img src=x onerror=alert(1)>"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _event(
    seq,
    function,
    cause="first",
    leaf=None,
    *,
    trace_number=1,
    compile_s=0.1,
    internal=False,
    nested=False,
    eqns=None,
    before=None,
    after=None,
    cache_hit=None,
    hint="",
    call_site=None,
    cell=3,
):
    seconds = None if nested else 0.01
    return Event(
        time=datetime.datetime(2025, 1, 1, 12, 0, seq % 60),
        cell=cell,
        function=function,
        location=f"/home/someone/project/{function}.py:1",
        kind="trace",
        internal=internal,
        nested=nested,
        trace_number=trace_number,
        cause=cause,
        leaf=leaf,
        before=before,
        after=after,
        explanation=f"`{leaf}` changed {cause}: {before} → {after}."
        if leaf
        else "First trace of this function.",
        hint=hint,
        trace_s=seconds,
        lower_s=seconds,
        compile_s=None if nested else compile_s,
        eqns=eqns,
        eqns_total=None if eqns is None else eqns + 5,
        cache_hit=cache_hit,
        call_site=call_site,
        key=f"k:{function}",
        seq=seq,
    )


def _known_log():
    """step: 3 traces (shape at x), 0.7 s; loss: 2 traces (static at tag), 1.1 s; init: 1 trace;
    one JAX-internal helper, and one user function traced inside another jit."""
    return [
        _event(0, "step", eqns=40, call_site="In[3]:2"),
        _event(1, "loss", compile_s=0.1),
        _event(
            2,
            "step",
            "shape",
            "x",
            trace_number=2,
            compile_s=0.4,
            eqns=42,
            before="f32[2]",
            after="f32[3]",
            cache_hit=False,
            hint="Each new shape of `x` compiles again.",
            call_site="In[3]:2",
        ),
        _event(
            3,
            "loss",
            "static",
            "tag",
            trace_number=2,
            compile_s=0.9,
            before="'a'",
            after=repr(INJECTION),
        ),
        _event(
            4,
            "step",
            "shape",
            "x",
            trace_number=3,
            compile_s=0.1,
            before="f32[3]",
            after="f32[4]",
            hint="Each new shape of `x` compiles again.",
            call_site="In[3]:5",
            cell=4,
        ),
        _event(5, "init", compile_s=0.05),
        _event(6, "convert_element_type", internal=True, compile_s=2.0),
        _event(7, "inner", nested=True),
    ]


def _same(shown, stored) -> bool:
    """A view's value and the DataFrame's are the same quantity (missing: None vs NA / NaN)."""
    if shown is None:
        return stored is None or bool(pd.isna(stored))
    if isinstance(shown, float):
        return shown == pytest.approx(float(stored))
    return shown == stored


def _by_name(rows):
    return {r["function"]: r for r in rows}


def test_one_visibility_rule_for_every_view_and_the_summary():
    report = Report(_known_log(), "t")
    shown = [r["function"] for r in report.rows()]
    assert shown == [
        "loss",
        "step",
        "init",
        "inner",
    ]  # internal hidden; nested shown, no seconds: last
    assert [r["function"] for r in report.rows(internal=True)][0] == "convert_element_type"
    c = report.counts()
    assert (c.functions, c.traces, c.compiles, c.retraces, c.hidden_functions, c.hidden_events) == (
        4,
        7,
        6,
        3,
        1,
        1,
    )
    assert report.headline().startswith(
        "t: 7 trace(s), 6 compile(s) of 4 function(s), 3 retrace(s); "
    )
    assert report.headline().endswith("(1 event(s) of 1 internal function(s) hidden)")
    assert "nested" in VISIBILITY_RULE and "internal" in VISIBILITY_RULE

    summary = summary_frame([e for e in _known_log() if not e.internal])  # what jt.summary() shows
    assert sorted(summary["function"]) == sorted(shown)
    text, page = render_text(report), render_html(report)
    assert report.headline() in text and report.headline() in page
    table = TraceTable(report)
    assert table.headline == report.headline() and "internal" not in table.headline_all
    assert [r["function"] for r in table.rows if not r["hidden"]] == shown
    assert [r["function"] for r in table.rows if r["hidden"]] == ["convert_element_type"]
    inner = _by_name(table.rows)["inner"]
    assert inner["nested"] and inner["trace_s"] is None  # JAX reports no seconds for a nested trace


def test_each_label_means_one_quantity_in_every_view_and_the_frame():
    events = [e for e in _known_log() if not e.internal]
    frame = summary_frame(events).set_index("function")
    table = TraceTable(Report(events, "t"))
    assert table.columns == SPECS["columns"] and [c["name"] for c in table.columns] == [
        c.name for c in TABLE_COLUMNS
    ]
    step = _by_name(table.rows)["step"]
    for column in TABLE_COLUMNS:
        if column.in_frame and column.name not in ("function", "location"):  # (location: shortened)
            assert _same(step[column.name], frame.loc["step", column.name]), column.name
    assert (
        step["eqns_total"] == frame.loc["step", "eqns_total"] == 47
    )  # sub-jaxprs included: not `eqns` (42)
    assert frame.loc["step", "eqns"] == 42
    assert step["location"] == "…/project/step.py:1" and "/home/" not in json.dumps(
        table.rows
    )  # no machine path
    text = render_text(Report(events, "t"))
    header = text.splitlines()[2]
    assert [c.label for c in TABLE_COLUMNS if c.text_width] == [
        "function",
        "test",
        "traces",
        "compiles",
        "eqns total",
        "trace s",
        "lower s",
        "compile s",
        "last cause",
        "leaf",
    ]
    assert " test" not in header  # no test traced: no test column
    assert all(label in header for label in ("eqns total", "trace s", "last cause"))


def test_repeats_grouped_in_every_view_with_the_why_at_a_glance():
    lr = [0.01 * 0.9999**n for n in range(16)]
    events = [_event(0, "train", eqns=3, call_site="In[4]:7", cell=4)] + [
        _event(
            n,
            "train",
            "static",
            "lr",
            trace_number=n + 1,
            before=repr(lr[n - 1]),
            after=repr(lr[n]),
            hint="`eqx.filter_jit` treats a Python float as static.",
            call_site="In[4]:7",
            cell=4,
        )
        for n in range(1, 16)
    ]
    report = Report(events, "t")
    (group,) = report.notable()
    assert len(group.events) == 15
    row = table_row(report.rows()[0])
    (line_class, line), (hint_class, hint) = row["why"]  # rich text: worded once, in `_rows`
    assert (line_class, hint_class) == ("jtnb-why-line", "jtnb-hint")
    count, space, cause, at, leaf, colon, change, called = line
    assert (count, space, cause, at, leaf, colon) == (
        ["count", "×15"],
        ["", " "],
        ["", "static"],
        ["", " at "],
        ["code", "lr"],
        ["", ": "],
    )
    assert change[0] == "change" and change[1].startswith(
        "0.01 → 0.009999, 0.009999 → 0.009998, …, "
    )
    assert (
        repr(lr[0]) in change[2] and repr(lr[15]) in change[2]
    )  # the full values: the hover title
    assert called == ["called", " · first called at In[4]:7"]
    assert hint == [["code", "eqx.filter_jit"], ["", " treats a Python float as static."]]
    text = render_text(report)
    why = "×15 static at `lr`: 0.01 → 0.009999, 0.009999 → 0.009998, …, "
    assert f"train #2–#16 trace: {why}" in text  # the same words as the widget's, code in backticks
    assert (
        " · first called at In[4]:7" in text and text.count("treats a Python float as static") == 1
    )
    page = render_html(report)
    assert page.count("treats a Python float as static") == 2  # the why cell, and the group's row
    assert "<code>eqx.<wbr>filter_jit</code>" in page and "`" not in page.split("</style>", 1)[1]
    assert (
        "<div class='jtnb-why-line'><span class='jtnb-count'>×15</span> static at <code>lr</code>: "
        "<code class='jtnb-change' title='"
    ) in page

    table = TraceTable(report)
    table.selected = row["key"]
    history = table.history
    assert history["title"] == "train (…/project/train.py:1): 16 event(s) in 2 group(s)"
    first, retraces = history["groups"]
    assert (first["cause"], first["count"], retraces["count"], len(retraces["events"])) == (
        "first",
        1,
        15,
        15,
    )
    assert (
        len(retraces["events"][0]["explanation"]) == 1
        and retraces["explanation"][1][0] == "jtnb-hint"
    )
    assert retraces["explanation"][1][1][:2] == [
        ["", "hint: "],
        ["code", "eqx.filter_jit"],
    ]  # once, on the group
    assert (
        retraces["events"][0]["call_site"] == "In[4]:7" and retraces["events"][0]["cell"] == "In[4]"
    )


def test_static_html_and_widget_mark_up_rich_text_alike():
    """The why's wording is the kernel's (`_rows`); both renderers only map its styles to markup."""
    import pathlib

    from jaxtrace_nb._core import _format
    from jaxtrace_nb._views import _text as _views

    script = (pathlib.Path(_widget.__file__).parent / "_widget.js").read_text(encoding="utf-8")
    block = script[script.index("const STYLE_MARKUP = {") :]
    block = block[: block.index("};")]
    in_js = {
        style: (tag, css)
        for style, tag, css in re.findall(r'(\w+): \["(\w+)", "([\w-]*)"\]', block)
    }
    assert in_js == _views._STYLE_MARKUP
    assert "split(/(?<=[/[])|(?<=\\.)(?!\\d)/)" in script  # the same breaks
    assert _format._BREAK_AFTER.pattern == r"(?<=[/\[])|(?<=\.)(?!\d)"


def test_filter_words_cover_function_leaf_cause_cell_and_location():
    table = TraceTable(Report(_known_log(), "t"))
    step = _by_name(table.rows)["step"]
    for word in (
        "step",
        "x",
        "shape",
        "first",
        "in[3]",
        "in[4]",
        "in[3]:5",
        "project/step.py",
        "step.py:1",
    ):
        assert word in step["search"], word
    assert "nested" in _by_name(table.rows)["inner"]["search"]
    assert "tag" in _by_name(table.rows)["loss"]["search"] and "tag" not in step["search"]


def test_history_of_one_function_marks_the_slowest():
    table = TraceTable(Report(_known_log(), "t"))
    table.selected = _by_name(table.rows)["step"]["key"]
    groups = table.history["groups"]
    assert [(g["cause"], g["count"], g["numbers"]) for g in groups] == [
        ("first", 1, "#1"),
        ("shape", 2, "#2–#3"),
    ]
    second = groups[1]["events"][0]
    assert (
        second["leaf"],
        second["change"],
        second["eqns_total"],
        second["persistent_cache"],
        second["slowest"],
    ) == ("x", "f32[2] → f32[3]", 47, "miss", True)
    assert table.history["title"].startswith("step (…/project/step.py:1): 3 event(s)")
    assert "slowest: #2 trace (shape at x), 0.420 s" in table.history["note"]
    table.selected = ""
    assert table.history == {}


def test_export_to_variable_and_csv(tmp_path, monkeypatch):
    shell = InteractiveShell.instance()
    table = TraceTable(Report(_known_log(), "t"))
    step_id = _by_name(table.rows)["step"]["key"]
    table._on_message(
        table, {"export": "variable", "name": "steps", "keys": [step_id, "no such id"]}, []
    )
    df = shell.user_ns["steps"]
    assert df["function"].tolist() == ["step"] * 3 and df["seq"].tolist() == [0, 2, 4]
    assert table.status == "steps = DataFrame of 3 event(s) of 1 function(s)"
    table._on_message(table, {"export": "variable", "name": "not a name"}, [])
    assert table.status == "not a Python variable name: 'not a name'"

    monkeypatch.chdir(tmp_path)
    table._on_message(table, {"export": "csv"}, [])  # no keys: the shown functions
    (path,) = tmp_path.glob("jaxtrace-*.csv")
    assert table.status == f"wrote 7 event(s) of 4 function(s) to {path.name}"
    assert path.read_text().count("\n") == 8


def test_widget_output_and_static_output_escape_user_strings():
    events = _known_log()
    events[1].function = events[3].function = "</script><script>window.__pwned=1</script>"
    table = TraceTable(Report(events, "t"))
    data, _ = table._repr_mimebundle_()
    assert data[WIDGET_VIEW]["model_id"] == table.model_id and data["text/plain"] == ""
    static = table.static_bundle()
    assert "&lt;img src=x onerror=alert(1)&gt;" in static["text/html"]
    assert "<img" not in static["text/html"] and "<script" not in static["text/html"]
    assert "</script><script>window.__pwned=1</script>" in static["text/plain"]
    assert "</script><script>window.__pwned=1</script>" in [
        r["function"] for r in table.rows
    ]  # data: textContent


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_live_table_is_throttled_flushed_and_closed(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(_widget.time, "monotonic", clock)
    log = EventLog()
    log.append(_event(0, "before_the_cell"))
    table = TraceTable(Report((), "cell"))
    renders = []
    table.observe(lambda change: renders.append(json.loads(change["new"])), "rows_json")
    table.follow(log, since=log.next_seq)
    assert table.live and table.rows == []

    clock.now += 1
    for n in range(2000):  # a retrace storm inside one throttle interval
        log.append(_event(0, "storm", "shape", "x", trace_number=n + 1))
    assert len(renders) == 1 and renders[-1][0]["traces"] == 1  # rendered once, at the first event
    clock.now += _widget.THROTTLE_S
    log.append(_event(0, "storm", "shape", "x", trace_number=2001))
    assert (
        len(renders) == 2
        and renders[-1][0]["traces"] == 2001
        and renders[-1][0]["why"][0][1][0] == ["count", "×2001"]
    )

    event = log.append(_event(0, "late", compile_s=None))
    event.compile_s = 500.0  # more than the storm's 2001 x 0.12 s
    log.updated(event)
    table.stop()  # the final flush, at the end of the cell
    assert [r["function"] for r in table.rows] == ["late", "storm"] and not table.live
    log.append(_event(0, "after_stop"))
    assert "after_stop" not in [r["function"] for r in table.rows]
    assert len(log._subscribers) == 0

    session = TraceTable(Report((), "session"))
    session.follow(log, since=0)  # a session table: the whole log, until closed
    assert {r["function"] for r in session.rows} == {
        "before_the_cell",
        "storm",
        "late",
        "after_stop",
    }
    session.close()
    assert len(log._subscribers) == 0


def test_the_live_table_draws_the_timeline_only_while_its_box_is_open():
    """The SVG of thousands of compiles is megabytes: the table sends its caption always and draws
    it (the same SVG as `_timeline.svg`) only while the view's timeline box is open."""
    from jaxtrace_nb._views._timeline import svg, timeline

    log = EventLog()
    table = TraceTable(Report((), "session"))
    assert (table.timeline_caption, table.timeline_svg) == (
        "",
        "",
    )  # no compile: the view hides the box
    table.follow(log, since=0)
    for e in _known_log():
        log.append(e)
    table.flush()
    assert (
        table.timeline_caption.startswith("6 compile(s) of 3 function(s)")
        and table.timeline_svg == ""
    )
    table.timeline_open = True  # the user opens the box
    assert table.timeline_svg == svg(timeline(table._report.all_events()))
    log.append(_event(8, "late", compile_s=1.0))
    table.flush()
    assert table.timeline_svg.count("class='jtnb-mark'") == 7  # redrawn while open
    table.timeline_open = False
    log.append(_event(9, "later", compile_s=1.0))
    table.flush()
    assert table.timeline_svg == "" and table.timeline_caption.startswith("8 compile(s)")
    table.close()


def test_compile_cost_columns_unrolled_loop_and_flops():
    events = _known_log()
    events.append(
        Event(
            time=datetime.datetime(2025, 1, 1, 12, 0, 9),
            cell=4,
            function="simulate",
            location="sim.py:3",
            kind="trace",
            internal=False,
            nested=False,
            trace_number=1,
            cause="first",
            explanation="First trace of this function.",
            hint="A Python loop of about 100 iterations was unrolled",
            trace_s=0.04,
            lower_s=0.02,
            compile_s=3.3,
            eqns=1200,
            eqns_total=1200,
            loop_repeats=100,
            flops=2.5e6,
            key="k:simulate",
            seq=9,
        )
    )
    table = TraceTable(Report(events, "t"))
    simulate = _by_name(table.rows)["simulate"]
    assert simulate["loop_repeats"] == 100 and simulate["why"][1] == [
        "jtnb-hint",
        [["", "A Python loop of about 100 iterations was unrolled"]],
    ]
    table.selected = simulate["key"]
    ((only,),) = [g["events"] for g in table.history["groups"]]
    group_hint = table.history["groups"][0]["explanation"][1]
    assert only["flops"] == 2.5e6 and group_hint[1][1][1].startswith("A Python loop")


def test_events_from_a_frame_or_persisted_logs_round_trip(tmp_path):
    from jaxtrace_nb._log._persist import JsonlWriter
    from jaxtrace_nb._views._frames import events_frame

    events = _known_log()
    back = events_from(events_frame(events))
    assert [e.as_tuple() for e in back] == [e.as_tuple() for e in events]
    path = tmp_path / "log.jsonl"
    writer = JsonlWriter(path, on_fault=pytest.fail)
    for e in events:
        writer(e, "append")
    writer.close()
    loaded = events_from([path, path])  # two logs merged, numbered in order
    assert len(loaded) == 2 * len(events) and [e.seq for e in loaded] == list(range(len(loaded)))


def test_show_in_a_terminal_shell_prints_the_static_report(tmp_path, capsys):
    from IPython.core.displaypub import CapturingDisplayPublisher

    import jaxtrace_nb as jt
    from jaxtrace_nb._views._frames import events_frame

    shell = InteractiveShell.instance()
    old, shell.display_pub = shell.display_pub, CapturingDisplayPublisher()
    try:
        jt.show(events_frame(_known_log()))
        (data,) = [o["data"] for o in shell.display_pub.outputs]
    finally:
        shell.display_pub = old
    assert WIDGET_VIEW not in data  # a terminal shows no widget
    assert data["text/plain"].startswith("jaxtrace_nb log: 8 event(s): 7 trace(s)")


@pytest.mark.kernel
def test_notebook_keeps_widget_state_and_static_report(tmp_path):
    """Executed headless: each table is the widget's output, then its static report's output."""
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    cells = [
        "%load_ext jaxtrace_nb\nimport jax, jax.numpy as jnp\nfrom functools import partial",
        "@partial(jax.jit, static_argnames='tag')\ndef step(x, tag):\n    return x * 2",
        "%%tracewatch\nfor n in (1, 2, 3):\n    step(jnp.ones(n), tag='a')\nstep(jnp.ones(3), "
        f"tag={INJECTION!r})",
        "%tracewatch",
        "later = jax.jit(lambda x: x + 1)\nlater(1.0)",
        "%tracewatch",  # the newest session table follows the log; the one before stops
        "import jaxtrace_nb as jt\njt.show(jt.log())",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    for cell in nb.cells:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
    states = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]

    def table(index):
        widget, static = [o for o in nb.cells[index].outputs if o.output_type == "display_data"]
        assert set(widget.data) == {WIDGET_VIEW, "text/plain"} and set(static.data) == {
            "text/plain",
            "text/html",
        }
        return states[widget.data[WIDGET_VIEW]["model_id"]]["state"], static.data

    state, static = table(2)
    assert (
        "step #2–#3 trace: ×2 shape at `x`: f32[1] → f32[2], f32[2] → f32[3] · first called at "
        "In[3]:2" in static["text/plain"]
    )
    assert "step #4 trace: static at `tag`" in static["text/plain"]
    assert (
        "&lt;img src=x onerror=alert(1)&gt;" in static["text/html"]
        and "<img" not in static["text/html"]
    )
    (row,) = [r for r in json.loads(state["rows_json"]) if not r["hidden"]]
    assert (row["function"], row["traces"], row["last_cause"], row["last_leaf"]) == (
        "step",
        4,
        "static",
        "tag",
    )
    assert (
        state["headline"] in static["text/plain"]
        and not state["live"]
        and "function" in state["_esm"]
    )

    session_state, session_static = table(3)
    assert (
        "<lambda>" in session_static["text/plain"]
    )  # a later cell's trace reached the session table
    assert "<lambda>" in [r["function"] for r in json.loads(session_state["rows_json"])]
    assert not session_state["live"]
    assert table(5)[0]["live"]
    shown_state, _ = table(6)
    assert shown_state["headline"].startswith("jaxtrace_nb log: ")

    exported, _ = HTMLExporter().from_notebook_node(
        nb
    )  # with the saved state: widgets and static reports
    assert exported.count('<script type="application/vnd.jupyter.widget-view+json">') == 4
    outside_scripts = re.sub(
        r"<script[^>]*>.*?</script>", "", exported, flags=re.S
    )  # JSON state: data
    assert exported.count("jtnb-static jtnb-root") == 4 and "<img src=x" not in outside_scripts
    assert "f32[1] → f32[2]" in exported and json.dumps(state["headline"])[1:-1] in exported


def test_events_of_several_processes_add_the_cross_process_section(tmp_path):
    from jaxtrace_nb._diagnosis._processes import TITLE

    events = []
    for process, after in ((0, "f32[16]"), (1, "f32[4]")):
        for e in (
            _event(0, "step"),
            _event(1, "step", "shape", "x", trace_number=2, before="f32[8]", after=after),
        ):
            e.process, e.host = process, "localhost"
            events.append(e)
    report = Report(events, "two processes")
    assert report.processes() == [0, 1]
    text, page = render_text(report), render_html(report)
    assert (
        TITLE in text
        and "f32[16]" in text.split(TITLE, 1)[1]
        and "f32[4]" in text.split(TITLE, 1)[1]
    )
    assert (
        "<div class='jtnb-root'><div class=\"jtnb-processes\">" in page
    )  # after the static copy: a live
    assert page.rindex("jtnb-processes") > page.rindex(
        "jtnb-groups"
    )  # table hides that copy, not this
    single = Report(events[:2], "one process")
    assert TITLE not in render_text(single) and TITLE not in render_html(single)


# ------------------------------------------------------------------ the persistent compilation
# cache
_MISS = (
    "miss: XLA flags differ: `--xla_cpu_enable_fast_math=false` added (closest earlier key of "
    "`jit_train`: the run of 2025-01-01 11:00:00, pid 42 on host)"
)


def _cache_log():
    """train missed the persistent cache (XLA flags), eval hit it, init is its first compile there,
    warm was too fast to cache; an injection rides in the words."""
    train = _event(0, "train", hint="The runs that share this cache set different `XLA_FLAGS`.")
    train.persistent_cache, train.hint_ids = _MISS + " " + INJECTION, "cache.xla_flags"
    evaluate, init, warm = _event(1, "evaluate"), _event(2, "init"), _event(3, "warm")
    evaluate.persistent_cache = "hit"
    init.persistent_cache = (
        "miss: the first compile of `jit_init` with this cache (its index holds no earlier key)"
    )
    warm.persistent_cache = (
        "not cached: compiled in 0.010 s, under `jax_persistent_cache_min_compile_time_secs`=1"
    )
    return [train, evaluate, init, warm]


def test_a_persistent_cache_miss_is_shown_in_every_view():
    report = Report(_cache_log(), "t")
    text = render_text(report)
    assert text.splitlines()[0].endswith(
        "; persistent cache: 1 hit(s), 2 miss(es) (1 of them a first compile "
        "with this cache), 1 not cached"
    )
    assert (
        "      persistent cache miss: XLA flags differ: `--xla_cpu_enable_fast_math=false` added "
        "(closest earlier key of `jit_train`"
    ) in text
    assert "hint: The runs that share this cache set different `XLA_FLAGS`." in text
    assert (
        "jit_init" not in text and "not cached" not in text.split("\n", 1)[1]
    )  # a first compile, too fast: no note
    html = render_html(report)
    assert (
        "<div class='jtnb-cache'><span class='jtnb-cache-label'>persistent cache miss</span>"
        in html
    )
    assert INJECTION not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    rows = {r["function"]: r for r in json.loads(TraceTable(report).rows_json)}
    assert rows["train"]["why"][1] == [
        "jtnb-cache",
        [
            ["cache", "persistent cache miss"],
            ["", ": XLA flags differ: "],
            ["code", "--xla_cpu_enable_fast_math=false"],
            ["", " added (closest earlier key of "],
            ["code", "jit_train"],
            ["", ": the run of 2025-01-01 11:00:00, pid 42 on host) " + INJECTION],
        ],
    ]
    assert rows["evaluate"]["why"] is None and rows["init"]["why"] is None
    table = TraceTable(report)
    table.selected = rows["train"]["key"]
    (group,) = table.history["groups"]
    assert [block[0] for block in group["explanation"]] == ["", "jtnb-cache", "jtnb-hint"]
    (event,) = group["events"]
    assert (event["persistent_cache"], event["full"]["persistent_cache"]) == (
        "miss",
        _MISS + " " + INJECTION,
    )
    assert (
        event["explanation"][1] == rows["train"]["why"][1]
    )  # an expanded group says why each compile missed
    table.selected = rows["evaluate"]["key"]
    assert table.history["groups"][0]["events"][0]["persistent_cache"] == "hit"
