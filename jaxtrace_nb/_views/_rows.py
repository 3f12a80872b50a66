"""A report's rows, groups and events as the views print them: display strings, and the full
value where the display shortens one (pure; the static HTML, the widget and the standalone
report all draw these dicts, keyed by the `_report` column names).

Each dict maps a column name to what the view shows; its ``"full"`` entry maps a column
name to the unshortened value, which the HTML views put in a hover title.

The wording of a retrace (the "why" of a function and of a group, an explanation with its
hint) is made here, once, as rich text (see "rich text" below); the terminal, the static HTML
and the widget only draw it (`_views`, `_widget.js`).
"""

from __future__ import annotations

import json
from typing import NamedTuple

from .._cache._cache_words import HIT, MISS, notable_miss, verdict_word
from .._core import _format as fmt
from .._core._missing import json_value
from .._core._vocabulary import EventKind
from .._log._events import Event
from ._report import EVENT_COLUMNS, GROUP_COLUMNS, TABLE_COLUMNS, Group, Report, is_shown

MAX_EVENTS_PER_GROUP = 500  # the newest ones; every event stays in jt.log()
_CHANGES_LISTED = 3
HINT_LABEL = "hint: "  # before a group's hint, below its explanation

# ----------------------------------------------------------------- rich text
# Rich text, as JSON carries it: a list of blocks ``[css_class, spans]`` (class "": the spans
# inline, in no block of their own); a span is ``[style, text]`` or ``[style, text, title]``.
# Styles: "" plain; "code" (a name, a path); "change" (before → after, as code); "count" (×N);
# "called" (where it was called). The views map a style to markup and escape the text.
WHY_LINE, HINT, CACHE = "jtnb-why-line", "jtnb-hint", "jtnb-cache"  # the blocks' CSS classes
CACHE_LABEL = "persistent cache "  # before a miss's words, below the explanation


def prose(text: str | None) -> list[list[str]]:
    """The spans of `text`, its backtick-quoted pieces as code."""
    return [["code" if code else "", piece] for code, piece in fmt.code_spans(text)]


def prose_cell(explanation: str | None, hint: str | None, cache: str | None = None) -> list:
    """An explanation, then (if any) the persistent cache's words and the hint, each in a block of
    its own, labelled."""
    blocks: list = [["", prose(explanation)]]
    if cache:
        blocks.append(cache_block(cache))
    if hint:
        blocks.append([HINT, [["", HINT_LABEL], *prose(hint)]])
    return blocks


def cache_block(cache: str) -> list:
    """A persistent cache miss's words as a block: "persistent cache miss: …"."""
    return [CACHE, [["cache", CACHE_LABEL + MISS], *prose(cache[len(MISS) :])]]


def cache_words(e: Event) -> str:
    """A notable persistent cache miss of `e`, shortened as the views show it ("" for none)."""
    return fmt.short_text(e.persistent_cache) if notable_miss(e.persistent_cache) else ""


def cache_verdict(e: Event) -> str:
    """ "hit", "miss" or "not cached" (an older log: its `cache_hit`), "" when the cache was off."""
    word = verdict_word(e.persistent_cache)
    if word or e.cache_hit is None:
        return word
    return HIT if e.cache_hit else MISS


def change_texts(events: tuple[Event, ...] | list[Event]) -> tuple[str, str]:
    """(shown, full) before → after of a group: all of them up to 3, else the first two, "…", the
    last."""
    pairs = [(e.before, e.after) for e in events if e.before is not None or e.after is not None]
    if not pairs:
        return "", ""
    listed = pairs if len(pairs) <= _CHANGES_LISTED else [*pairs[:2], None, pairs[-1]]
    short = ["…" if p is None else fmt.change(*fmt.short_numbers(*p)[:2]) for p in listed]
    full = [fmt.change(b, a) for b, a in pairs[:50]] + (["…"] if len(pairs) > 50 else [])
    return ", ".join(short), ", ".join(full)


def tests_texts(tests) -> tuple[str, str]:
    """(shown, full) of pytest node ids: the first two and how many more; every one, a line each,
    where the first are not all (else "")."""
    tests = list(tests)
    return fmt.listed(tests), "\n".join(tests) if len(tests) > 2 else ""


def _explained(e: Event) -> tuple[str, str]:
    """(explanation, hint) of an event, with paths and floats shortened alike."""
    digits = fmt.short_numbers(e.before, e.after)[2]
    return fmt.short_text(e.explanation, digits), fmt.short_text(e.hint, digits)


class GroupText(NamedTuple):
    """A group of events as every view words it: display strings (`change_full` unshortened)."""

    cells: str
    tests: str  # the pytest tests whose calls traced (node ids), the first few
    tests_full: (
        str  # every one of them, a line each, where `tests` lists only the first few (else "")
    )
    function: str
    numbers: str  # "#2", "#2–#16"
    kind: str
    count: int
    cause: str
    leaf: str | None
    change: str
    change_full: str
    call_site: str
    explanation: str
    hint: str
    created_at: str  # where a re-created function object was made ("" for any other group)
    cache: str = ""  # the first event's persistent cache miss, when notable (`cache_words`)


def group_text(g: Group) -> GroupText:
    first = g.first
    cells = list(dict.fromkeys(fmt.cell_label(e.cell) for e in g.events if e.cell is not None))
    tests = list(dict.fromkeys(e.test for e in g.events if e.test))
    numbers = {e.trace_number for e in g.events if e.trace_number is not None}
    span = (
        (f"#{min(numbers)}" + (f"–#{max(numbers)}" if len(numbers) > 1 else "")) if numbers else ""
    )
    shown, full = change_texts(g.events)
    explanation, hint = _explained(first)
    created = " or ".join(fmt.short_path(c) for c in (first.created_at or "").split(", ") if c)
    return GroupText(
        ", ".join(cells),
        *tests_texts(tests),
        first.function,
        span,
        first.kind,
        len(g.events),
        first.cause
        or ("across processes" if first.kind == EventKind.DIVERGENCE else "(not diagnosed)"),
        first.leaf,
        shown,
        full,
        fmt.short_path(first.call_site),
        explanation,
        hint,
        created,
        cache_words(first),
    )


def why_line(t: GroupText) -> list[list[str]]:
    """The one wording of a group's why: ×N cause at leaf: before → after · first called at where
    (· created at where, for a function object re-created)."""
    spans = [["count", f"×{t.count}"], ["", " "]] if t.count > 1 else []
    spans.append(["", t.cause])
    if t.leaf:
        spans += [["", " at "], ["code", t.leaf]]
    if t.change:
        spans += [["", ": "], ["change", t.change, t.change_full]]
    if t.call_site:
        spans.append(["called", f" · {'first ' if t.count > 1 else ''}called at {t.call_site}"])
    if t.created_at:
        spans.append(["called", f" · created at {t.created_at}"])
    return spans


def group_row(g: Group) -> dict:
    t = group_text(g)
    return {
        "cells": t.cells,
        "tests": t.tests,
        "function": t.function,
        "numbers": t.numbers,
        "kind": t.kind,
        "count": t.count,
        "cause": t.cause,
        "leaf": t.leaf,
        "change": t.change,
        "call_site": t.call_site,
        "explanation": prose_cell(t.explanation, t.hint, t.cache),
        "first_seq": g.first.seq,
        "last_seq": g.events[-1].seq,
        "full": {"change": t.change_full, "tests": t.tests_full},
    }


def event_row(e: Event, slowest_seq) -> dict:
    """One event of a group (its hint is the group's, shown once there)."""
    before, after, _ = fmt.short_numbers(e.before, e.after)
    explanation, _ = _explained(e)
    return {
        "seq": e.seq,
        "cell": fmt.cell_label(e.cell),
        "test": e.test,
        "time": e.time.strftime("%H:%M:%S") if e.time else None,
        "trace_number": e.trace_number,
        "kind": e.kind,
        "cause": e.cause,
        "leaf": e.leaf,
        "change": fmt.change(before, after),
        "call_site": fmt.short_path(e.call_site),
        "explanation": prose_cell(explanation, None, cache_words(e)),
        "eqns_total": json_value(e.eqns_total),
        "flops": json_value(e.flops),
        "persistent_cache": cache_verdict(e),
        "trace_s": json_value(e.trace_s),
        "lower_s": json_value(e.lower_s),
        "compile_s": json_value(e.compile_s),
        "total_s": e.total_s,
        "slowest": e.seq == slowest_seq,
        "full": {
            "change": fmt.change(e.before, e.after),
            "persistent_cache": fmt.short_text(e.persistent_cache),
        },
    }


def why(row: dict) -> list | None:
    """The latest notable group of a function, as the table's "why" cell shows it (rich text)."""
    notable = [g for g in row["groups"] if g.notable]
    if not notable:
        return None
    t = group_text(
        max(notable, key=lambda g: g.events[-1].seq if g.events[-1].seq is not None else 0)
    )
    return [
        [WHY_LINE, why_line(t)],
        *([cache_block(t.cache)] if t.cache else []),
        *([[HINT, prose(t.hint)]] if t.hint else []),
    ]


def _search(row: dict) -> str:
    """Everything the filter matches: function, leaves (the one each retrace names, and every other
    its explanation names: "Also changed: `b` (shape)"), causes, cells, tests, locations and call
    sites (as shown: a path of the machine stays out of the views' data)."""
    words = [row["function"], fmt.short_path(row["location"])]
    cells, tests, call_sites, explanations = set(), set(), set(), set()
    for g in row["groups"]:
        words += [g.first.cause or "", g.first.leaf or ""]
        for e in g.events:
            cells.add(e.cell)
            tests.add(e.test)
            call_sites.add(e.call_site)
            explanations.add(e.explanation)
    words += [
        piece
        for text in sorted(t for t in explanations if t)
        for code, piece in fmt.code_spans(fmt.short_paths_in(text))
        if code
    ]
    words += [fmt.cell_label(c) for c in sorted(c for c in cells if c is not None)]
    words += sorted(t for t in tests if t)
    words += sorted(fmt.short_path(c) for c in call_sites if c)
    if row["nested"]:
        words.append("nested")
    return "\n".join(dict.fromkeys(w for w in words if w)).lower()


def table_row(row: dict) -> dict:
    """One function's summary row, as the table shows it (kept in `row`, which the report
    rebuilds when the function's events change)."""
    cached = row.get("_table_row")
    if cached is None:
        cached = row["_table_row"] = _table_row(row)
    return cached


def _table_row(row: dict) -> dict:
    tests, tests_full = tests_texts(row["tests"])
    return {
        "key": row["id"],
        "hidden": not is_shown(row, internal=False),
        "internal": row["internal"],
        "nested": row["nested"],
        "search": _search(row),
        "function": row["function"],
        "location": fmt.short_path(row["location"]),
        "traces": row["traces"],
        "compiles": row["compiles"],
        "eqns_total": json_value(row["eqns_total"]),
        "loop_repeats": json_value(row["loop_repeats"]),
        "trace_s": json_value(row["trace_s"]),
        "lower_s": json_value(row["lower_s"]),
        "compile_s": json_value(row["compile_s"]),
        "total_s": json_value(row["total_s"]),
        "last_cause": row["last_cause"],
        "last_leaf": row["last_leaf"],
        "why": why(row),
        "tests": tests,
        "full": {"tests": tests_full},
    }


def history_view(report: Report, function_id: str) -> dict:
    """One function's history (by the id its table row carries as `key`): a title, a note on its
    slowest event, and its groups with their events."""
    key = report.key_of(function_id)
    events = report.history(key) if key is not None else []
    if not events:
        return {"key": "", "title": "", "note": "", "groups": []}
    slowest = max(events, key=lambda e: e.total_s)
    groups = []
    for g in report.groups(key):
        shown = g.events[-MAX_EVENTS_PER_GROUP:]
        item = group_row(g)
        item["events"] = [event_row(e, slowest.seq) for e in shown]
        item["omitted"] = len(g.events) - len(shown)
        groups.append(item)
    first = events[0]
    from ._census import census
    from ._where import census_view, profile_view

    where = f" ({fmt.short_path(first.location)})" if first.location else ""
    cause = (
        f" ({slowest.cause}{' at ' + slowest.leaf if slowest.leaf else ''})"
        if slowest.cause
        else ""
    )
    return {
        "key": function_id,
        "title": f"{first.function}{where}: {len(events)} event(s) in {len(groups)} group(s)",
        "note": (
            f"slowest: #{slowest.trace_number} {slowest.kind}{cause}, {slowest.total_s:.3f} s, "
            f"event {events.index(slowest) + 1} of {len(events)}"
        ),
        "groups": groups,
        "profile": profile_view(events),
        "census": census_view(census(events, internal=True)),
    }


def column_spec(columns) -> list[dict]:
    """A column spec as the JS view receives it (the view holds no copy of its own)."""
    return [
        {"name": c.name, "label": c.label, "kind": c.kind, "title": c.title, "collapse": c.collapse}
        for c in columns
    ]


SPECS = {
    "columns": column_spec(TABLE_COLUMNS),
    "group_columns": column_spec(GROUP_COLUMNS),
    "event_columns": column_spec(EVENT_COLUMNS),
}


def table_content(report: Report, *, timeline_svg: bool = True) -> dict:
    """What the view draws of `report`, beside the columns: both headlines, and every row as one
    JSON text (ipywidgets walks nested lists and dicts on every send; a string it does not); the
    timeline's caption ("" without a compile) and, with `timeline_svg`, its drawing (megabytes for
    thousands of compiles: the live table draws it only while its box is open)."""
    from ._timeline import svg, timeline

    rows = ",".join(_row_json(row) for row in report.rows(internal=True))
    return {
        "headline": report.headline(internal=False),
        "headline_all": report.headline(internal=True),
        "rows_json": f"[{rows}]",
        "timeline_svg": svg(timeline(report.all_events())) if timeline_svg else "",
        "timeline_caption": report.timeline_caption(),
    }


def _row_json(row: dict) -> str:
    cached = row.get("_row_json")
    if cached is None:
        cached = row["_row_json"] = json.dumps(table_row(row), ensure_ascii=False, allow_nan=False)
    return cached
