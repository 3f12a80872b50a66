"""The report model (`_report`, `_rows`) against the history the test made: every field a view shows
of a function, of its groups and of their events, computed here from the changes the test applied.

A function `step` traced six times in three cells: its first trace; then `x` changing shape four
times (one group, the second of its events the slowest); then a static `n` changing once, with a
hint. Beside it, an internal helper (hidden unless asked for) and a second user function. Each
expected value below is written from those changes, not read back from the model.
"""

import datetime
import json
import os

from jaxtrace_nb._log._events import Event
from jaxtrace_nb._views._report import Report, function_id, group_events
from jaxtrace_nb._views._rows import HINT, WHY_LINE, change_texts, history_view, table_content
from jaxtrace_nb._views._text import render_text

HERE = os.getcwd()
KEY = "k:step"
SHAPES = ["f32[3]", "f32[4]", "f32[5]", "f32[6]", "f32[7]"]  # `x` before -> after, four changes
SECONDS = {
    0: (0.01, 0.02, 0.03),
    1: (0.01, 0.02, 0.5),
    2: (0.01, 0.02, 0.04),
    3: (0.01, 0.02, 0.05),
    4: (0.01, 0.02, 0.06),
    5: (0.02, 0.03, 0.07),
}  # (trace, lower, compile) per event; #2 the slowest
CELLS = {0: 3, 1: 3, 2: 4, 3: 4, 4: 4, 5: 5}
HINT_TEXT = "pass `n` as an array"


def _event(
    seq,
    *,
    cause,
    leaf=None,
    before=None,
    after=None,
    explanation="First trace.",
    hint="",
    function="step",
    key=KEY,
    internal=False,
    seconds=(0.01, 0.01, 0.01),
    cell=3,
    eqns=7,
):
    trace_s, lower_s, compile_s = seconds
    return Event(
        time=datetime.datetime(2025, 1, 1, 12, 0, seq),
        cell=cell,
        function=function,
        location=os.path.join(HERE, f"{function}.py") + ":3",
        kind="trace",
        internal=internal,
        nested=False,
        trace_number=None,
        cause=cause,
        leaf=leaf,
        before=before,
        after=after,
        explanation=explanation,
        hint=hint,
        trace_s=trace_s,
        lower_s=lower_s,
        compile_s=compile_s,
        eqns=eqns,
        eqns_total=eqns + 1,
        flops=100.0 + seq,
        cache_hit=False,
        call_site=os.path.join(HERE, "train.py") + f":{9 + seq}",
        key=key,
        seq=seq,
    )


def _history() -> list[Event]:
    events = [_event(0, cause="first", seconds=SECONDS[0], cell=CELLS[0])]
    for i in range(4):
        events.append(
            _event(
                1 + i,
                cause="shape",
                leaf="x",
                before=SHAPES[i],
                after=SHAPES[i + 1],
                explanation="`x` changed shape.",
                seconds=SECONDS[1 + i],
                cell=CELLS[1 + i],
            )
        )
    events.append(
        _event(
            5,
            cause="static",
            leaf="n",
            before="1",
            after="2",
            explanation="`n` changed.",
            hint=HINT_TEXT,
            seconds=SECONDS[5],
            cell=CELLS[5],
        )
    )
    for number, e in enumerate(events, start=1):
        e.trace_number = number
    return events


def _report() -> Report:
    helper = _event(
        6, cause="first", function="add", key="k:add", internal=True, seconds=(0.001, 0.002, 0.003)
    )
    other = _event(
        7, cause="first", function="other", key="k:other", seconds=(0.1, 0.1, 0.1), cell=6
    )
    return Report([*_history(), helper, other], "t")


def test_groups_are_the_changes_applied():
    groups = group_events(_history())
    assert [(g.first.cause, g.first.leaf, len(g.events)) for g in groups] == [
        ("first", None, 1),
        ("shape", "x", 4),
        ("static", "n", 1),
    ]
    assert [g.notable for g in groups] == [False, True, True]


def test_merged_runs_group_each_persistent_cache_miss_by_its_own_words():
    """Three runs' first traces of one function (merged logs): the first compile with the cache,
    then two misses with one hint in different words. Each miss is a group of its own, notable
    though the function's first event is not, and the headline says which miss needs no note."""
    words = [
        "miss: the first compile of `jit_step` with this cache (its index holds no earlier key of "
        "that name)",
        "miss: the computation differs first (`stablehlo.constant`): `0.5` → `0.7` (closest "
        "earlier key: run 1)",
        "miss: the computation differs first (`stablehlo.constant`): `0.7` → `0.9` (closest "
        "earlier key: run 2)",
        "hit",
    ]
    runs = [
        _event(i, cause="first", hint="a captured constant" if i in (1, 2) else "")
        for i in range(4)
    ]
    for e, said in zip(runs, words):
        e.trace_number, e.persistent_cache = 1, said
    groups = group_events(runs)
    assert [[e.seq for e in g.events] for g in groups] == [[0, 3], [1], [2]]
    assert [g.notable for g in groups] == [False, True, True]
    text = render_text(Report(runs, "3 logs"))
    assert text.splitlines()[0].endswith(
        "persistent cache: 1 hit(s), 3 miss(es) (1 of them a first compile with this cache)"
    )
    assert all(text.count(f"persistent cache miss{w[len('miss') :]}") == 1 for w in words[1:3])


def test_change_texts_list_three_and_shorten_more():
    pairs = [(SHAPES[i], SHAPES[i + 1]) for i in range(4)]
    events = [
        _event(i, cause="shape", leaf="x", before=b, after=a) for i, (b, a) in enumerate(pairs)
    ]
    full = ", ".join(f"{b} → {a}" for b, a in pairs)
    assert change_texts(events[:3]) == (", ".join(f"{b} → {a}" for b, a in pairs[:3]),) * 2
    assert change_texts(events) == (
        f"{pairs[0][0]} → {pairs[0][1]}, {pairs[1][0]} → {pairs[1][1]}, …, "
        f"{pairs[3][0]} → {pairs[3][1]}",
        full,
    )
    many = [
        _event(i, cause="shape", leaf="x", before=f"f32[{i}]", after=f"f32[{i + 1}]")
        for i in range(52)
    ]
    shown, listed = change_texts(many)
    assert listed.split(", ") == [f"f32[{i}] → f32[{i + 1}]" for i in range(50)] + ["…"]
    assert shown == "f32[0] → f32[1], f32[1] → f32[2], …, f32[51] → f32[52]"
    assert change_texts([_event(0, cause="first")]) == ("", "")


def test_history_view_is_the_history_applied():
    report = _report()
    view = history_view(report, function_id(KEY))
    totals = {seq: round(sum(s), 6) for seq, s in SECONDS.items()}
    slowest = max(totals, key=totals.get)
    assert view["key"] == function_id(KEY)
    assert view["title"] == "step (step.py:3): 6 event(s) in 3 group(s)"
    assert (
        view["note"]
        == f"slowest: #{slowest + 1} trace (shape at x), {totals[slowest]:.3f} s, event "
        f"{slowest + 1} of 6"
    )
    assert [
        (
            g["cells"],
            g["numbers"],
            g["count"],
            g["cause"],
            g["leaf"],
            g["kind"],
            g["first_seq"],
            g["last_seq"],
            g["omitted"],
        )
        for g in view["groups"]
    ] == [
        ("In[3]", "#1", 1, "first", None, "trace", 0, 0, 0),
        ("In[3], In[4]", "#2–#5", 4, "shape", "x", "trace", 1, 4, 0),
        ("In[5]", "#6", 1, "static", "n", "trace", 5, 5, 0),
    ]
    shape = view["groups"][1]
    assert shape["change"] == "f32[3] → f32[4], f32[4] → f32[5], …, f32[6] → f32[7]"
    assert shape["full"] == {
        "change": ", ".join(f"{SHAPES[i]} → {SHAPES[i + 1]}" for i in range(4)),
        "tests": "",
    }
    assert shape["tests"] == ""  # no event ran under pytest
    assert shape["call_site"] == "train.py:10"
    assert shape["explanation"] == [["", [["code", "x"], ["", " changed shape."]]]]
    assert view["groups"][2]["explanation"] == [
        ["", [["code", "n"], ["", " changed."]]],
        [HINT, [["", "hint: "], ["", "pass "], ["code", "n"], ["", " as an array"]]],
    ]
    events = [e for g in view["groups"] for e in g["events"]]
    assert [e["seq"] for e in events] == list(range(6))
    for e in events:
        seq = e["seq"]
        trace_s, lower_s, compile_s = SECONDS[seq]
        before, after = (
            (SHAPES[seq - 1], SHAPES[seq])
            if 1 <= seq <= 4
            else ("1", "2")
            if seq == 5
            else (None, None)
        )
        change = f"{before} → {after}" if before else ""
        assert e == {
            "seq": seq,
            "cell": f"In[{CELLS[seq]}]",
            "test": None,
            "time": f"12:00:{seq:02d}",
            "trace_number": seq + 1,
            "kind": "trace",
            "cause": ["first", "shape", "shape", "shape", "shape", "static"][seq],
            "leaf": [None, "x", "x", "x", "x", "n"][seq],
            "change": change,
            "call_site": f"train.py:{9 + seq}",
            "explanation": e["explanation"],
            "eqns_total": 8,
            "flops": 100.0 + seq,
            "persistent_cache": "miss",
            "trace_s": trace_s,
            "lower_s": lower_s,
            "compile_s": compile_s,
            "total_s": trace_s + lower_s + compile_s,
            "slowest": seq == slowest,
            "full": {"change": change, "persistent_cache": ""},
        }
        assert HINT not in json.dumps(
            e["explanation"]
        )  # an event shows no hint: its group does, once
    assert history_view(report, "no such id") == {"key": "", "title": "", "note": "", "groups": []}


def test_the_table_is_the_history_applied():
    report = _report()
    rows = json.loads(table_content(report)["rows_json"])
    assert [r["function"] for r in rows] == [
        "step",
        "other",
        "add",
    ]  # most total seconds first, internal last
    step = rows[0]
    assert (step["key"], step["hidden"], step["internal"], step["nested"]) == (
        function_id(KEY),
        False,
        False,
        False,
    )
    assert (step["traces"], step["compiles"], step["last_cause"], step["last_leaf"]) == (
        6,
        6,
        "static",
        "n",
    )
    assert (step["location"], step["eqns_total"]) == ("step.py:3", 8)
    for stage, at in (("trace_s", 0), ("lower_s", 1), ("compile_s", 2)):
        assert abs(step[stage] - sum(s[at] for s in SECONDS.values())) < 1e-9
    words = step["search"].split("\n")
    assert words[:10] == [
        "step",
        "step.py:3",
        "first",
        "shape",
        "x",
        "static",
        "n",
        "in[3]",
        "in[4]",
        "in[5]",
    ]
    assert sorted(words[10:]) == sorted(
        f"train.py:{9 + seq}" for seq in range(6)
    )  # every call site
    assert step["why"] == [
        [
            WHY_LINE,
            [
                ["", "static"],
                ["", " at "],
                ["code", "n"],
                ["", ": "],
                ["change", "1 → 2", "1 → 2"],
                ["called", " · called at train.py:14"],
            ],
        ],
        [HINT, [["", "pass "], ["code", "n"], ["", " as an array"]]],
    ]
    assert rows[2]["hidden"] is True and rows[2]["internal"] is True and rows[1]["why"] is None


def test_counts_and_headline_are_the_events_applied():
    report = _report()
    shown = [s for s in SECONDS.values()] + [
        (0.1, 0.1, 0.1)
    ]  # step's and other's, not the helper's
    trace_s, lower_s, compile_s = (sum(s[i] for s in shown) for i in range(3))
    total = trace_s + lower_s + compile_s
    assert report.headline() == (
        f"t: 7 trace(s), 7 compile(s) of 2 function(s), 5 retrace(s); {total:.3f} s = "
        f"trace {trace_s:.3f} + lower {lower_s:.3f} + XLA compile "
        f"{compile_s:.3f} "
        "(1 event(s) of 1 internal function(s) hidden)"
    )
    everything = report.counts(internal=True)
    assert (
        everything.functions,
        everything.traces,
        everything.hidden_functions,
        everything.hidden_events,
    ) == (3, 8, 0, 0)
    assert [(g.first.seq, g.first.cause) for g in report.notable()] == [(1, "shape"), (5, "static")]
    assert [e.seq for e in report.all_events()] == list(range(8))
    assert (
        Report(_history(), "t", dropped=4)
        .headline()
        .endswith("(4 oldest event(s) dropped by the log cap)")
    )


def test_a_report_made_with_internal_shows_the_internal_rows_by_default():
    """`Report(..., internal=True).rows()` is the rows with `internal=True`: the helper the report
    was given, shown. (mutant `Report.rows__mutmut_2` of benchmarks/mutation.py)"""
    events = _report().all_events()
    with_internal = Report(events, "t", internal=True)
    assert [r["function"] for r in with_internal.rows()] == ["step", "other", "add"]
    assert [r["function"] for r in Report(events, "t").rows()] == ["step", "other"]


def test_a_report_that_forgets_the_logs_dropped_events_is_the_report_of_what_the_log_kept():
    """A live table at the log's cap drops what the log dropped (`Report.retain`) instead of
    starting over: the same rows, counts, headline and timeline caption as a report of the log."""
    import random

    from jaxtrace_nb._log._events import EventLog

    for seed in range(40):
        rng = random.Random(seed)
        log, live = EventLog(max_events=rng.randrange(1, 30)), Report(title="t")
        log.subscribe(lambda e, what: live.add(e) if what == "append" else live.touch(e))
        t0 = datetime.datetime(2026, 1, 1)
        for i in range(rng.randrange(1, 80)):
            fn = rng.choice("abcdef")
            log.append(
                Event(
                    function=fn,
                    key=f"k::{fn}",
                    kind="trace",
                    time=t0 + datetime.timedelta(seconds=i),
                    trace_number=i,
                    cause=rng.choice(["first", "shape"]),
                    compile_s=rng.choice([None, 0.5]),
                    persistent_cache=rng.choice([None, "hit", "miss: flags"]),
                    internal=fn == "f",
                )
            )
            if rng.random() < 0.3:
                live.retain(log.events())
            if rng.random() < 0.5:
                live.headline()  # a flush: rows aggregated, the keys no longer pending
        live.retain(log.events())
        fresh = Report(log.events(), title="t")
        by_key = lambda report: {
            r["key"]: {k: v for k, v in r.items() if k != "_row_json"}  # noqa: E731
            for r in report.rows(internal=True)
        }
        assert by_key(live) == by_key(fresh), seed
        assert live.n_events == fresh.n_events == len(log.events())
        for internal in (False, True):
            assert live.counts(internal) == fresh.counts(internal)
        assert live.timeline_caption() == fresh.timeline_caption()
