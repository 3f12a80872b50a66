"""The one data model every view renders: which functions a report shows, their rows, their
retraces grouped, the headline counts, and the column spec (no JAX, no IPython, no probe).

The text report, the static HTML, the live widget, the self-contained HTML report and
``jt.summary()`` all follow one row-visibility rule, `VISIBILITY_RULE` (applied by `is_shown`).

Each column has one name, label and meaning (`Column`): the name is the key of the view
row and the column of the same name in ``jt.summary()`` (per function) or ``jt.log()``
(per event), so a label means the same quantity in every view and in the DataFrame.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import NamedTuple

from .._cache._cache_words import FIRST_COMPILE, HIT, MISS, NOT_CACHED, notable_miss, verdict_word
from .._core._vocabulary import Cause
from .._log._events import Event
from ._frames import function_row
from ._timeline import Span, span_of, spans_caption

SECONDS = ("trace_s", "lower_s", "compile_s")


class Column(NamedTuple):
    name: str  # key of the view row; the DataFrame column of that name (unless in_frame is False)
    label: str  # the header every view prints
    # how views draw it: code, path, int, seconds, bar, text, rich, change, cell, num, cache
    kind: str
    title: str  # what it means (the header's tooltip)
    text_width: int = 0  # its width in the terminal table; 0: not in the terminal table
    in_frame: bool = True
    # How it gives way, in the HTML views: "" never; "empty": left out where no row has a value (the
    # cells outside a notebook, the tests outside pytest); "narrow": hidden where the table has less
    # room than it needs (`_widget.css`: JupyterLab with its file browser open at 1,280 px): a part
    # of
    # the seconds (total s stays), a size, or what the why already says (last cause, leaf; an
    # event's
    # persistent cache verdict: a notable miss is worded under the why, the headline counts them
    # all).
    collapse: str = ""


# The views' table, one row per function (``jt.summary()``'s own columns:
# `_frames.SUMMARY_FRAME_COLUMNS`).
TABLE_COLUMNS = (
    Column(
        name="function",
        label="function",
        kind="code",
        title="the function's qualified name; click a row for its history",
        text_width=28,
    ),
    Column(
        name="tests",
        label="test",
        kind="text",
        title="the pytest tests (node ids) whose calls traced it",
        text_width=30,
        in_frame=False,
        collapse="empty",
    ),
    Column(
        name="why",
        label="why (latest retrace)",
        kind="rich",
        title="the latest group of retraces with the same cause and leaf: how "
        "many, before → after, where it was first called, and the hint",
        in_frame=False,
    ),
    Column(
        name="traces",
        label="traces",
        kind="int",
        title="traces: misses of JAX's tracing cache",
        text_width=6,
    ),
    Column(
        name="compiles",
        label="compiles",
        kind="int",
        title="XLA compiles, after a trace or without one",
        text_width=8,
    ),
    Column(
        name="eqns_total",
        label="eqns total",
        kind="int",
        title="jaxpr equations of its largest trace, sub-jaxprs (scan, cond and "
        "while bodies, nested jits) included",
        text_width=10,
        collapse="narrow",
    ),
    Column(
        name="loop_repeats",
        label="loop ×",
        kind="int",
        title="a block of equations repeated back to back this many times: a Python "
        "loop unrolled into the graph",
        collapse="empty",
    ),
    Column(
        name="trace_s",
        label="trace s",
        kind="seconds",
        title="seconds JAX spent tracing (blank when traced inside another jit: the "
        "outer function's trace seconds include it)",
        text_width=8,
        collapse="narrow",
    ),
    Column(
        name="lower_s",
        label="lower s",
        kind="seconds",
        title="seconds JAX spent lowering to XLA",
        text_width=8,
        collapse="narrow",
    ),
    Column(
        name="compile_s",
        label="compile s",
        kind="bar",
        title="seconds of XLA compile",
        text_width=9,
    ),
    Column(
        name="total_s", label="total s", kind="seconds", title="trace + lower + XLA compile seconds"
    ),
    Column(
        name="last_cause",
        label="last cause",
        kind="text",
        title="cause of the latest retrace (first: never retraced)",
        text_width=12,
        collapse="narrow",
    ),
    Column(
        name="last_leaf",
        label="leaf",
        kind="code",
        title="the leaf the latest retrace changed, in your names",
        text_width=1,
        collapse="narrow",
    ),
    Column(
        name="location",
        label="defined at",
        kind="path",
        title="where the function is defined: file:line, or In[n]:line for a cell",
    ),
)
GROUP_COLUMNS = (
    Column(
        name="cells",
        label="cell",
        kind="text",
        title="the cells (In[n]) whose calls traced",
        in_frame=False,
        collapse="empty",
    ),
    Column(
        name="tests",
        label="test",
        kind="text",
        title="the pytest tests (node ids) whose calls traced",
        in_frame=False,
        collapse="empty",
    ),
    Column(name="function", label="function", kind="code", title="the function's qualified name"),
    Column(
        name="numbers", label="#", kind="text", title="trace numbers of the group", in_frame=False
    ),
    Column(
        name="count",
        label="×",
        kind="int",
        title="how many traces (or compiles) the group holds",
        in_frame=False,
    ),
    Column(name="cause", label="cause", kind="text", title="what changed"),
    Column(name="leaf", label="leaf", kind="code", title="the changed leaf, in your names"),
    Column(
        name="change",
        label="before → after",
        kind="change",
        title="the values, shortened; hover for the full ones",
        in_frame=False,
    ),
    Column(
        name="explanation",
        label="why / hint",
        kind="rich",
        title="the explanation (of the group's first event) and the hint",
    ),
    Column(
        name="call_site",
        label="first called at",
        kind="path",
        title="the line of your code whose call traced, first in the group",
    ),
)
EVENT_COLUMNS = (
    Column(
        name="cell",
        label="cell",
        kind="cell",
        title="the cell (In[n]) whose call traced",
        collapse="empty",
    ),
    Column(
        name="test",
        label="test",
        kind="text",
        title="the pytest test (node id) whose call traced",
        collapse="empty",
    ),
    Column(name="time", label="time", kind="text", title="when it happened", collapse="narrow"),
    Column(name="trace_number", label="#", kind="int", title="the function's trace number"),
    Column(name="cause", label="cause", kind="text", title="what changed"),
    Column(name="leaf", label="leaf", kind="code", title="the changed leaf, in your names"),
    Column(
        name="change",
        label="before → after",
        kind="change",
        title="before → after; hover for the full values",
        in_frame=False,
    ),
    Column(
        name="explanation",
        label="why",
        kind="rich",
        title="the explanation of this event (the hint is the group's)",
    ),
    Column(
        name="call_site",
        label="called at",
        kind="path",
        title="the line of your code whose call traced",
    ),
    Column(
        name="eqns_total",
        label="eqns total",
        kind="int",
        title="jaxpr equations, sub-jaxprs included",
        collapse="narrow",
    ),
    Column(
        name="flops",
        label="FLOPs",
        kind="num",
        title="XLA's cost analysis of the compiled program",
        collapse="narrow",
    ),
    Column(
        name="persistent_cache",
        label="persistent cache",
        kind="cache",
        title="JAX's persistent compilation cache: hit, miss or not cached (hover: why)",
        collapse="narrow",
    ),
    Column(
        name="trace_s",
        label="trace s",
        kind="seconds",
        title="seconds JAX spent tracing",
        collapse="narrow",
    ),
    Column(
        name="lower_s",
        label="lower s",
        kind="seconds",
        title="seconds JAX spent lowering",
        collapse="narrow",
    ),
    Column(name="compile_s", label="compile s", kind="seconds", title="seconds of XLA compile"),
    Column(
        name="total_s",
        label="total s",
        kind="bar",
        title="trace + lower + XLA compile seconds",
        in_frame=False,
    ),
)
VISIBILITY_RULE = (
    "One row per function. A function that is `internal` (a jitted helper of JAX's own, or of a "
    "library, "
    "that the probe recorded) is hidden unless internal functions are asked for (`--internal`, the "
    "table's "
    "toggle, `jt.summary(internal=True)`); every other function is shown, including a user "
    "function traced "
    "inside another jit (`nested`: it did tracing work of its own, but JAX reports no seconds for "
    "a nested "
    "trace, so its seconds are blank and the outer function's trace seconds include them). The "
    "headline "
    'counts the shown rows\' traces, compiles, retraces and seconds; "hidden" counts the events '
    "and the "
    "functions of the rows not shown."
)


def function_id(key: str) -> str:
    """The id the views give a function: stable, short, and free of the file path its key holds."""
    return "f" + hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def is_shown(row: dict, internal: bool) -> bool:
    """The row-visibility rule (`VISIBILITY_RULE`): hide internal functions unless asked for."""
    return internal or not row["internal"]


class Counts(NamedTuple):
    """What a headline says, of the shown rows."""

    functions: int
    traces: int
    compiles: int
    retraces: int
    trace_s: float
    lower_s: float
    compile_s: float
    hidden_functions: int
    hidden_events: int
    dropped: int
    # persistent compilation cache: hits, misses, compiles not cached, misses that are a name's
    # first compile
    cache: tuple = (0, 0, 0, 0)
    # `jt.precompile`'s workers: their compiles, and their trace + lower + compile seconds
    precompiled: tuple = (0, 0.0)

    @property
    def total_s(self) -> float:
        return self.trace_s + self.lower_s + self.compile_s


class Group(NamedTuple):
    """A function's events with the same kind, cause, leaf, hint and persistent cache miss, in
    order."""

    events: tuple[Event, ...]

    @property
    def first(self) -> Event:
        return self.events[0]

    @property
    def notable(self) -> bool:
        """A retrace (or compile) to explain, a first trace with a hint (an unrolled loop), or one
        that missed the persistent compilation cache for a reason (not its first compile there)."""
        return any(
            e.cause != Cause.FIRST or e.hint or notable_miss(e.persistent_cache)
            for e in self.events
        )


def group_events(events: Iterable[Event]) -> list[Group]:
    """`events` of one function grouped by (kind, cause, leaf, hint, the words of a notable
    persistent cache miss), in order of first event: a miss is never told in another compile's
    words."""
    groups: dict[tuple, list[Event]] = {}
    for e in events:
        miss = e.persistent_cache if notable_miss(e.persistent_cache) else None
        groups.setdefault((e.kind, e.cause, e.leaf, e.hint, miss), []).append(e)
    return [Group(tuple(g)) for g in groups.values()]


class Report:
    """Events folded into one row per function, each function's history and groups.

    `internal` is the default of the visibility rule for `rows`, `counts` and `headline`.
    `add` and `touch` keep it current as events arrive or gain fields (the live widget);
    rows are re-aggregated lazily, only for the functions touched.
    """

    def __init__(
        self,
        events: Iterable[Event] = (),
        title: str = "",
        *,
        internal: bool = False,
        dropped: int = 0,
    ):
        self.title = title
        self.internal = internal
        self.dropped = dropped
        self.n_events = 0
        self._history: dict[str, list[Event]] = {}
        self._ids: dict[
            str, str
        ] = {}  # key -> a short id the views use (a key holds a file's path)
        self._rows: dict[str, dict] = {}
        self._spans: dict[str, Span | None] = {}  # key -> its compiles, for the timeline's caption
        self._verdicts: dict[str, tuple[int, ...]] = {}  # key -> `Counts.cache` of its events
        self._dirty: set[str] = set()
        for e in events:
            self.add(e)

    def add(self, event: Event) -> None:
        """Fold in a new event."""
        if event.key not in self._history:
            self._ids[event.key] = function_id(event.key)
        self._history.setdefault(event.key, []).append(event)
        self._dirty.add(event.key)
        self.n_events += 1

    def retain(self, kept: Iterable[Event]) -> None:
        """Forget every event not in `kept` (those the log's cap dropped); only the functions that
        lost events are re-aggregated, and a function left with none goes."""
        ids = {id(e) for e in kept}
        for key, history in list(self._history.items()):
            left = [e for e in history if id(e) in ids]
            if len(left) == len(history):
                continue
            self.n_events -= len(history) - len(left)
            if left:
                self._history[key] = left
                self._dirty.add(key)
            else:
                for held in (self._history, self._ids, self._rows, self._spans, self._verdicts):
                    held.pop(key, None)
                self._dirty.discard(key)

    def touch(self, event: Event) -> None:
        """Note that an event already added gained fields (compile seconds, cache hit)."""
        if event.key in self._history:
            self._dirty.add(event.key)

    def functions(self) -> list[dict]:
        """Every function's row (hidden ones included), in order of first trace."""
        for key in self._dirty:
            history = self._history[key]
            row = function_row(history)
            row["groups"] = group_events(history)
            row["id"] = self._ids[key]
            self._rows[key] = row
            self._spans[key] = span_of(history)
            verdicts = [verdict_word(e.persistent_cache) for e in history]
            firsts = sum(
                bool(e.persistent_cache) and e.persistent_cache.startswith(FIRST_COMPILE)
                for e in history
            )
            self._verdicts[key] = (
                verdicts.count(HIT),
                verdicts.count(MISS),
                verdicts.count(NOT_CACHED),
                firsts,
            )
        self._dirty.clear()
        return [self._rows[key] for key in self._history]

    def history(self, key: str) -> list[Event]:
        """One function's events in the order they happened."""
        return self._history.get(key, [])

    def key_of(self, view_id: str) -> str | None:
        """The log's key of the function the views call `view_id`."""
        return next((key for key, i in self._ids.items() if i == view_id), None)

    def groups(self, key: str) -> list[Group]:
        self.functions()
        row = self._rows.get(key)
        return row["groups"] if row else []

    def rows(self, internal: bool | None = None) -> list[dict]:
        """The shown rows, most total seconds first."""
        internal = self.internal if internal is None else internal
        shown = [f for f in self.functions() if is_shown(f, internal)]
        return sorted(shown, key=lambda f: -(f["total_s"] or 0.0))

    def notable(self, internal: bool | None = None) -> list[Group]:
        """The shown functions' groups of retraces and notes, in order of their first event."""
        groups = [g for f in self.rows(internal) for g in f["groups"] if g.notable]
        return sorted(groups, key=lambda g: g.first.seq if g.first.seq is not None else 0)

    def counts(self, internal: bool | None = None) -> Counts:
        rows = self.rows(internal)
        seconds = {c: sum(f[c] for f in rows if f[c] is not None and f[c] == f[c]) for c in SECONDS}
        shown_events = sum(len(self._history[f["key"]]) for f in rows)
        cache = tuple(sum(self._verdicts[f["key"]][i] for f in rows) for i in range(4))
        return Counts(
            functions=len(rows),
            traces=sum(f["traces"] for f in rows),
            compiles=sum(f["compiles"] for f in rows),
            retraces=sum(f["retraces"] for f in rows),
            trace_s=seconds["trace_s"],
            lower_s=seconds["lower_s"],
            compile_s=seconds["compile_s"],
            hidden_functions=len(self._history) - len(rows),
            hidden_events=self.n_events - shown_events,
            dropped=self.dropped,
            cache=cache,
            precompiled=(
                sum(f["precompiles"] for f in rows),
                sum(f["precompiled_s"] or 0.0 for f in rows),
            ),
        )

    def headline(self, internal: bool | None = None) -> str:
        """One line, the same in every view: the shown rows' counts and seconds, what is hidden."""
        return headline(self.title, self.counts(internal))

    def timeline_caption(self) -> str:
        """`caption(timeline(self.all_events()))`, from each function's compiles kept as they
        arrive ("" without a compile): a live table says it on every update."""
        self.functions()
        return spans_caption(self._spans.values())

    def processes(self) -> list:
        """The JAX process indices the events come from (a multi-process run has several)."""
        return sorted(
            {e.process for h in self._history.values() for e in h if e.process is not None}
        )

    def all_events(self) -> list[Event]:
        return sorted(
            (e for h in self._history.values() for e in h),
            key=lambda e: e.seq if e.seq is not None else 0,
        )


def headline(title: str, c: Counts) -> str:
    text = (
        f"{title}: {c.traces} trace(s), {c.compiles} compile(s) of {c.functions} function(s), "
        f"{c.retraces} retrace(s); {c.total_s:.3f} s = trace {c.trace_s:.3f} + lower "
        f"{c.lower_s:.3f} + "
        f"XLA compile {c.compile_s:.3f}"
    )
    if c.hidden_events:
        text += f" ({c.hidden_events} event(s) of {c.hidden_functions} internal function(s) hidden)"
    if c.dropped:
        text += f" ({c.dropped} oldest event(s) dropped by the log cap)"
    if any(c.cache):
        hits, misses, not_cached, firsts = c.cache
        text += (
            f"; persistent cache: {hits} hit(s), {misses} miss(es)"
            + (f" ({firsts} of them a first compile with this cache)" if firsts else "")
            + (f", {not_cached} not cached" if not_cached else "")
        )
    if c.precompiled[0]:
        text += (
            f"; jt.precompile: {c.precompiled[0]} compile(s) done ahead, "
            f"{c.precompiled[1]:.3f} s the program's calls at them did not wait for"
        )
    return text
