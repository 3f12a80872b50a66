"""The trace table widget: its kernel-side state for a known log, live updates, and a real kernel."""

import datetime

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell

from jaxtrace_nb import _widget
from jaxtrace_nb._log import Event, EventLog
from jaxtrace_nb._views import Report
from jaxtrace_nb._widget import TraceTable

INJECTION = "<img src=x onerror=alert(1)>"


def _event(seq, function, cause="first", leaf=None, *, trace_number=1, compile_s=0.1, internal=False,
           nested=False, eqns=None, before=None, after=None, cache_hit=None):
    return Event(
        time=datetime.datetime(2025, 1, 1, 12, 0, seq % 60), cell=3, function=function, location=f"{function}.py:1",
        kind="trace", internal=internal, nested=nested, trace_number=trace_number, cause=cause, leaf=leaf,
        before=before, after=after, explanation=f"{cause} changed", hint="", trace_s=0.01, lower_s=0.01,
        compile_s=compile_s, eqns_total=eqns, cache_hit=cache_hit, key=f"k:{function}", seq=seq)


def _known_log():
    """step: 3 traces (shape at x), 0.7 s; loss: 2 traces (static at tag), 1.1 s; init: 1 trace;
    one JAX-internal helper and one nested function."""
    return [
        _event(0, "step", eqns=40),
        _event(1, "loss", compile_s=0.1),
        _event(2, "step", "shape", "x", trace_number=2, compile_s=0.4, eqns=42, before="f32[2]", after="f32[3]",
               cache_hit=False),
        _event(3, "loss", "static", "tag", trace_number=2, compile_s=0.9, before="'a'", after=repr(INJECTION)),
        _event(4, "step", "shape", "x", trace_number=3, compile_s=0.1, before="f32[3]", after="f32[4]"),
        _event(5, "init", compile_s=0.05),
        _event(6, "convert_element_type", internal=True, compile_s=2.0),
        _event(7, "inner", nested=True, compile_s=3.0),
    ]


def _names(table):
    return [r["function"] for r in table.rows]


def test_rows_sort_filter_toggle_and_pages():
    table = TraceTable(Report(_known_log(), "t"))
    assert _names(table) == ["loss", "step", "init"]  # most total seconds first; internal, nested hidden
    step = table.rows[1]
    assert (step["traces"], step["compiles"], step["last_cause"], step["last_leaf"], step["eqns"]) == \
        (3, 3, "shape", "x", 42)
    assert step["compile_s"] == pytest.approx(0.6) and table.max_compile_s == pytest.approx(1.0)
    assert "3 function(s)" in table.headline and "2 JAX-internal or nested event(s) hidden" in table.headline

    table.sort_by = "traces"
    assert _names(table) == ["step", "loss", "init"]
    table.descending = False
    assert _names(table) == ["init", "loss", "step"]
    table.sort_by, table.descending = "eqns", True
    assert _names(table)[0] == "step"  # functions without eqns come last in either direction

    table.filter = "TAG"  # a leaf, any case
    assert _names(table) == ["loss"]
    table.filter = "st"
    assert _names(table) == ["step"]
    table.filter = ""
    table.show_all = True
    assert set(_names(table)) == {"step", "loss", "init", "convert_element_type", "inner"}

    table.page_size, table.sort_by, table.descending = 2, "function", False
    assert (_names(table), table.n_rows) == (["convert_element_type", "init"], 5)
    table.page = 2
    assert _names(table) == ["step"]
    table.page = 9  # past the end: the last page
    assert (table.page, _names(table)) == (2, ["step"])


def test_history_of_one_function_marks_the_slowest():
    table = TraceTable(Report(_known_log(), "t"))
    table.selected = "k:step"
    history = table.history
    assert [e["trace_number"] for e in history] == [1, 2, 3]
    assert [e["cause"] for e in history] == ["first", "shape", "shape"]
    second = history[1]
    assert (second["leaf"], second["change"], second["eqns"], second["cache_hit"], second["slowest"]) == \
        ("x", "f32[2] → f32[3]", 42, False, True)
    assert not history[0]["slowest"] and not history[2]["slowest"]
    assert table.history_title.startswith("step (step.py:1): 3 event(s)")
    assert "slowest: #2 trace (shape at x), 0.420 s" in table.history_note

    table.page_size = 2
    table.history_page = 1
    assert [e["trace_number"] for e in table.history] == [3]
    table.selected = "k:loss"  # another function opens on its first page
    assert table.history_page == 0 and [e["cause"] for e in table.history] == ["first", "static"]
    table.selected = ""
    assert table.history == [] and table.history_title == ""


def test_export_to_variable_and_csv(tmp_path, monkeypatch):
    shell = InteractiveShell.instance()
    table = TraceTable(Report(_known_log(), "t"))
    table.filter = "step"
    table._on_message(table, {"export": "variable", "name": "steps"}, [])
    df = shell.user_ns["steps"]
    assert df["function"].tolist() == ["step"] * 3 and df["seq"].tolist() == [0, 2, 4]
    assert table.status == "steps = DataFrame of 3 event(s) of 1 function(s)"

    table._on_message(table, {"export": "variable", "name": "not a name"}, [])
    assert table.status == "not a Python variable name: 'not a name'"

    monkeypatch.chdir(tmp_path)
    table.filter = ""
    table._on_message(table, {"export": "csv"}, [])
    (path,) = tmp_path.glob("jaxtrace-*.csv")
    assert table.status == f"wrote 6 event(s) of 3 function(s) to {path}"
    assert path.read_text().count("\n") == 7  # header + the 6 events of the 3 listed functions


def test_static_fallback_escapes_user_strings():
    events = _known_log()
    events[1].function = events[3].function = "</script><script>window.__pwned=1</script>"
    table = TraceTable(Report(events, "t"))
    data, _ = table._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == table.model_id
    html = data["text/html"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;/script&gt;&lt;script&gt;" in html
    assert "<img" not in html and "<script" not in html
    assert "</script><script>window.__pwned=1</script>" in data["text/plain"]
    assert table.rows[0]["function"] == "</script><script>window.__pwned=1</script>"  # raw: the view uses textContent


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
    table.observe(lambda change: renders.append(change["new"]), "rows")
    table.follow(log, since=log.next_seq)
    assert table.live and table.rows == []

    clock.now += 1
    for n in range(2000):  # a retrace storm inside one throttle interval
        log.append(_event(0, "storm", "shape", "x", trace_number=n + 1))
    assert len(renders) == 1 and renders[-1][0]["traces"] == 1  # rendered once, at the first event
    clock.now += _widget.THROTTLE_S
    log.append(_event(0, "storm", "shape", "x", trace_number=2001))
    assert len(renders) == 2 and renders[-1][0]["traces"] == 2001

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
    assert {r["function"] for r in session.rows} == {"before_the_cell", "storm", "late", "after_stop"}
    session.close()
    assert len(log._subscribers) == 0


@pytest.mark.kernel
def test_notebook_keeps_widget_state_and_static_fallback(tmp_path):
    """Executed headless, the notebook saves the widget's state and the static HTML for sharing."""
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    cells = [
        "%load_ext jaxtrace_nb\nimport jax, jax.numpy as jnp\nfrom functools import partial",
        "@partial(jax.jit, static_argnames='tag')\ndef step(x, tag):\n    return x * 2",
        f"%%tracewatch\nfor n in (1, 2, 3):\n    step(jnp.ones(n), tag='a')\nstep(jnp.ones(3), tag={INJECTION!r})",
        "%tracewatch",
        "later = jax.jit(lambda x: x + 1)\nlater(1.0)",
        "%tracewatch",  # the newest session table follows the log; the one before stops
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell in nb.cells:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs

    (cell_table,) = [o for o in nb.cells[2].outputs if o.output_type == "display_data"]
    data = cell_table.data
    assert "application/vnd.jupyter.widget-view+json" in data
    assert "step #3 trace: shape `x`: f32[2] → f32[3]" in data["text/plain"]
    assert "step #4 trace: static `tag`" in data["text/plain"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in data["text/html"] and "<img" not in data["text/html"]

    states = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    state = states[data["application/vnd.jupyter.widget-view+json"]["model_id"]]["state"]
    (row,) = state["rows"]
    assert (row["function"], row["traces"], row["last_cause"], row["last_leaf"]) == ("step", 4, "static", "tag")
    assert not state["live"] and "function" in state["_esm"]

    (session_table,) = [o for o in nb.cells[3].outputs if o.output_type == "display_data"]
    assert "<lambda>" in session_table.data["text/plain"]  # a later cell's trace reached the session table
    session_state = states[session_table.data["application/vnd.jupyter.widget-view+json"]["model_id"]]["state"]
    assert "<lambda>" in [r["function"] for r in session_state["rows"]] and not session_state["live"]
    (newest,) = [o for o in nb.cells[5].outputs if o.output_type == "display_data"]
    assert states[newest.data["application/vnd.jupyter.widget-view+json"]["model_id"]]["state"]["live"]

    exported, _ = HTMLExporter().from_notebook_node(nb)  # with the saved state: the interactive table
    assert exported.count('<script type="application/vnd.jupyter.widget-view+json">') == 3
    assert "<img src=x" not in exported
    del nb.metadata["widgets"]  # as JupyterLab saves by default: no widget state, the static table
    exported, _ = HTMLExporter().from_notebook_node(nb)
    assert "widget-view+json" not in exported and "<img src=x" not in exported
    assert "f32[2] → f32[3]" in exported and "&lt;img src=x onerror=alert(1)&gt;" in exported


def test_compile_cost_columns_unrolled_loop_and_flops():
    events = _known_log()
    events.append(Event(
        time=datetime.datetime(2025, 1, 1, 12, 0, 9), cell=4, function="simulate", location="sim.py:3", kind="trace",
        internal=False, nested=False, trace_number=1, cause="first", explanation="First trace of this function.",
        hint="A Python loop of about 100 iterations was unrolled", trace_s=0.04, lower_s=0.02, compile_s=3.3,
        eqns=1200, eqns_total=1200, loop_repeats=100, flops=2.5e6, key="k:simulate", seq=9))
    table = TraceTable(Report(events, "t"))
    table.sort_by, table.descending = "loop_repeats", True
    assert _names(table)[0] == "simulate" and table.rows[0]["loop_repeats"] == 100
    table.selected = "k:simulate"
    (only,) = table.history
    assert only["flops"] == 2.5e6 and "unrolled" in only["hint"]
