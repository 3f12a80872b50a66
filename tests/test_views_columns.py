"""Columns that give way, the test column in every view, the filter's words, wrapping, and the
widget's module form (pure: no JAX; `tests/test_browser.py` checks them drawn in a browser)."""

import datetime
import json
import pathlib
import re

from jaxtrace_nb._core._format import breakable
from jaxtrace_nb._log._events import COLUMNS, Event
from jaxtrace_nb._views import _widget
from jaxtrace_nb._views._report import EVENT_COLUMNS, GROUP_COLUMNS, TABLE_COLUMNS, Report
from jaxtrace_nb._views._rows import SPECS, history_view, table_row
from jaxtrace_nb._views._text import render_html, render_text, shown_columns

SCRIPT = (pathlib.Path(_widget.__file__).parent / "_widget.js").read_text(encoding="utf-8")


def _event(
    seq,
    cause="first",
    leaf=None,
    *,
    test=None,
    cell=None,
    explanation=None,
    before=None,
    after=None,
):
    return Event(
        time=datetime.datetime(2025, 1, 1, 12, 0, seq),
        cell=cell,
        function="step",
        location="/home/someone/project/step.py:1",
        kind="trace",
        internal=False,
        nested=False,
        trace_number=seq + 1,
        cause=cause,
        leaf=leaf,
        before=before,
        after=after,
        explanation=explanation or "First trace of this function.",
        hint="",
        trace_s=0.01,
        lower_s=0.01,
        compile_s=0.1,
        key="k:step",
        seq=seq,
        test=test,
        call_site="/home/someone/project/test_a.py:9",
    )


def _pytest_log():
    return [
        _event(0, test="tests/test_a.py::test_one"),
        _event(
            1,
            "shape",
            "x",
            test="tests/test_a.py::test_one",
            before="f32[2]",
            after="f32[3]",
            explanation="`x` changed shape: f32[2] → f32[3]. Also changed: `opt_state[0].mu['w']` "
            "(shape), `mask` (dtype).",
        ),
        _event(
            2,
            "shape",
            "x",
            test="tests/test_a.py::test_two[0.0375]",
            before="f32[3]",
            after="f32[4]",
            explanation="`x` changed shape: f32[3] → f32[4].",
        ),
    ]


def test_the_test_and_created_at_columns_are_the_last_columns_of_the_log():
    assert COLUMNS[-2:] == ("test", "created_at") and COLUMNS.index("hint_ids") < COLUMNS.index(
        "test"
    )


def test_the_filter_matches_tests_and_every_changed_leaf():
    (row,) = [table_row(r) for r in Report(_pytest_log()).rows()]
    words = row["search"].split("\n")
    for word in (
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two[0.0375]",
        "x",
        "mask",
        "opt_state[0].mu['w']",
    ):
        assert word.lower() in words, word
    assert "f32[2]" not in row["search"] and "/home/someone" not in row["search"]


def test_groups_and_events_name_their_tests():
    report = Report(_pytest_log(), "pytest session")
    text = render_text(report)
    assert (
        "step #2–#3 trace in tests/test_a.py::test_one, tests/test_a.py::test_two[0.0375]: ×2 "
        "shape at `x`" in text
    ), text
    html = render_html(report)
    assert (
        "<th class='jtnb-c-tests' title='the pytest tests (node ids) whose calls traced'>test</th>"
        in html
    )
    assert "<th class='jtnb-c-cells'" not in html  # no notebook cell: the column is left out
    history = history_view(report, report.functions()[0]["id"])
    (group,) = [g for g in history["groups"] if g["cause"] == "shape"]
    assert group["tests"] == "tests/test_a.py::test_one, tests/test_a.py::test_two[0.0375]"
    assert [e["test"] for e in group["events"]] == [
        "tests/test_a.py::test_one",
        "tests/test_a.py::test_two[0.0375]",
    ]
    many = [_event(i, "shape", "x", test=f"t.py::test_{i}") for i in range(1, 5)]
    (group,) = [g for g in history_view(Report(many), Report(many).functions()[0]["id"])["groups"]]
    assert group["tests"] == "t.py::test_1, t.py::test_2 +2 more"
    assert group["full"]["tests"] == "t.py::test_1\nt.py::test_2\nt.py::test_3\nt.py::test_4"


def test_empty_columns_give_way_and_narrow_ones_are_marked():
    notebook = [_event(0, cell=3), _event(1, "shape", "x", cell=4)]
    html = render_html(Report(notebook))
    assert "<th class='jtnb-c-cells'" in html and "<th class='jtnb-c-tests'" not in html
    assert [c.name for c in shown_columns(GROUP_COLUMNS, [{"cells": "", "tests": None}])] == [
        c.name for c in GROUP_COLUMNS if c.name not in ("cells", "tests")
    ]
    narrow = {c.name for c in TABLE_COLUMNS if c.collapse == "narrow"}
    assert narrow == {"eqns_total", "trace_s", "lower_s", "last_cause", "last_leaf"}
    assert not narrow & {
        "function",
        "why",
        "traces",
        "compiles",
        "compile_s",
        "total_s",
        "location",
    }
    assert "<th class='jtnb-c-trace_s jtnb-n jtnb-narrow'" in html
    assert all(
        c["collapse"] == column.collapse
        for spec, columns in (
            (SPECS["columns"], TABLE_COLUMNS),
            (SPECS["group_columns"], GROUP_COLUMNS),
            (SPECS["event_columns"], EVENT_COLUMNS),
        )
        for c, column in zip(spec, columns)
    )
    css = (pathlib.Path(_widget.__file__).parent / "_widget.css").read_text()
    assert re.search(
        r"@container \(max-width: \d+px\) \{\s*\.jtnb-narrow \{ display: none; \}", css
    )


def test_the_terminal_table_shows_a_long_name_whole_or_keeps_its_tail():
    """A name past 28 characters widens its column (up to 60), a longer one keeps its last 59 after
    "…", and every other column stays under its label."""
    names = [
        "make_train_step.<locals>.train_step",
        "Trainer.build.<locals>.make.<locals>." + "x" * 30 + ".loss",
    ]
    events = [_event(i) for i in range(2)]
    for e, name in zip(events, names):
        e.function, e.key = name, f"k:{name}"
    header, rule, *rows = render_text(Report(events)).split("\n\n")[1].splitlines()
    assert len(rule) == len(header)
    at = {label: header.index(label) for label in ("traces", "compiles", "last cause")}
    assert header.index("traces") == 61
    by_name = {line[:60].rstrip(): line for line in rows}
    assert set(by_name) == {names[0], "…" + names[1][-59:]}
    for line in rows:
        assert line[at["traces"] : at["traces"] + 6].strip() == "1" and line[
            at["last cause"] :
        ].startswith("first")


def test_code_wraps_but_never_inside_a_number():
    assert breakable("0.0375 → 0.04125") == "0.0375 → 0.04125"
    assert breakable("opt_state[0].mu") == "opt_state[<wbr>0].<wbr>mu"
    assert breakable("optax/_src/base.py:12") == "optax/<wbr>_src/<wbr>base.<wbr>py:12"
    assert breakable("1.5e-05 → 2.25") == "1.5e-05 → 2.25"


def test_the_widget_module_uses_anywidgets_default_export_only():
    """A named `render` export makes anywidget warn in the console, once per table."""
    exports = re.findall(r"^export .*$", SCRIPT, re.M)
    assert exports == ["export { LocalModel };", "export default { render };"]
    assert "export function render" not in SCRIPT


def test_persisted_and_framed_logs_keep_the_test(tmp_path):
    from jaxtrace_nb._log._persist import JsonlWriter, load_events
    from jaxtrace_nb._views._frames import events_frame
    from jaxtrace_nb._views._standalone import events_from

    events = _pytest_log()
    writer = JsonlWriter(tmp_path / "log.jsonl", on_fault=lambda e: (_ for _ in ()).throw(e))
    for e in events:
        writer(e, "append")
    writer.close()
    assert [e.test for e in load_events(tmp_path / "log.jsonl")] == [e.test for e in events]
    frame = events_frame(events)
    assert frame["test"].tolist() == [e.test for e in events]
    assert [e.test for e in events_from(frame)] == [e.test for e in events]
    assert (
        json.loads(frame.to_json(orient="records", date_format="iso"))[2]["test"]
        == "tests/test_a.py::test_two[0.0375]"
    )
