"""The event log: an append-only, bounded store of trace and compile events.

Events are plain records (strings and numbers only); `_frames` builds their DataFrames.
"""

from __future__ import annotations

import collections
import datetime
import operator
import threading
from collections.abc import Callable

from ._diagnosis import join_hints, join_ids
from ._records import Stage

DEFAULT_MAX_EVENTS = 100_000
# Deferred diagnoses waiting for a reader: at most this many events, holding at most this many
# signature leaves, before they are settled anyway (memory stays bounded).
MAX_UNSETTLED_EVENTS = 4096
MAX_UNSETTLED_LEAVES = 200_000

# The DataFrame's columns, in order, by dtype; the first 17 are the documented contract.
_TEXT, _INT, _FLOAT, _BOOL = "text", "Int64", "float64", "bool"
COLUMN_TYPES = (
    ("time", "datetime"), ("cell", _INT), ("function", _TEXT), ("location", _TEXT), ("kind", "kind"),
    ("internal", _BOOL), ("nested", _BOOL), ("trace_number", _INT), ("cause", "cause"), ("leaf", _TEXT),
    ("before", _TEXT), ("after", _TEXT), ("explanation", _TEXT), ("hint", _TEXT), ("trace_s", _FLOAT),
    ("lower_s", _FLOAT), ("compile_s", _FLOAT), ("call_site", _TEXT), ("cache_hit", "boolean"),
    ("cache_saved_s", _FLOAT), ("eqns", _INT), ("eqns_total", _INT), ("loop_repeats", _INT),
    ("loop_line", _TEXT), ("flops", _FLOAT), ("arg_bytes", _INT), ("out_bytes", _INT), ("temp_bytes", _INT),
    ("compile_s_per_keqn", _FLOAT), ("jit", _TEXT), ("thread", _INT), ("key", _TEXT), ("seq", _INT),
    ("host", _TEXT), ("process", _INT), ("signature", _TEXT), ("hint_ids", _TEXT),
)
COLUMNS = tuple(name for name, _ in COLUMN_TYPES)
# Where each timed stage's seconds go: the only place stages meet column names.
STAGE_COLUMNS = {Stage.TRACE: "trace_s", Stage.LOWER: "lower_s", Stage.COMPILE: "compile_s",
                 Stage.CACHE_SAVED: "cache_saved_s"}
_XLA_COST_COLUMNS = ("flops", "arg_bytes", "out_bytes", "temp_bytes")
_DIAGNOSIS_COLUMNS = ("cause", "leaf", "before", "after", "explanation", "hint", "hint_ids")

_ALL_COLUMNS = operator.attrgetter(*COLUMNS)


_STRINGS: dict[str, str] = {}  # one copy of each text recent events repeat (names, paths, hints)
_MAX_STRINGS = 2048


def _shared(text: str) -> str:
    """`text`, as the copy recent events share. Not `sys.intern`: from Python 3.12 an interned
    string is never freed, and event texts (values, explanations) are unbounded."""
    shared = _STRINGS.get(text)
    if shared is None:
        if len(_STRINGS) >= _MAX_STRINGS:
            del _STRINGS[next(iter(_STRINGS))]  # the oldest
        shared = _STRINGS[text] = text
    return shared


def _event_init():
    """Event's ``__init__(self, *, time=None, ...)``, written out once: one plain assignment per
    column (an event is made at every trace), texts shared through `_shared`."""
    text = {name for name, kind in COLUMN_TYPES if kind == _TEXT}
    lines = [f"def __init__(self, *, {', '.join(f'{c}=None' for c in COLUMNS)}):"]
    lines += [f"    self.{c} = {c} if type({c}) is not str else _shared({c})" if c in text else f"    self.{c} = {c}"
              for c in COLUMNS]
    lines.append("    self.deferred = None")
    namespace = {"_shared": _shared}
    exec("\n".join(lines), namespace)
    return namespace["__init__"]


class Event:
    """One trace (with the compile that followed it) or one compile without a trace.

    A retrace's diagnosis may be deferred: `deferred` then holds a pure function of plain
    records that returns it, and the log runs it before anyone reads the event (`settle`).
    """

    __slots__ = COLUMNS + ("deferred",)
    __init__ = _event_init()  # Event(**fields): every column a keyword, None by default

    def settle(self) -> None:
        """Run a deferred diagnosis (once); a hint already set (an unrolled loop's) follows its own."""
        deferred, self.deferred = self.deferred, None
        if deferred is None:
            return
        d = deferred()
        graph_hint, graph_ids = self.hint, self.hint_ids
        for name, value in zip(_DIAGNOSIS_COLUMNS, (d.cause, d.leaf, d.before, d.after, d.explanation,
                                                    join_hints(d.hint, graph_hint), join_ids(d.hint_id, graph_ids))):
            setattr(self, name, _shared(value) if type(value) is str else value)

    def as_tuple(self) -> tuple:
        return _ALL_COLUMNS(self)

    def set_seconds(self, stage: Stage, seconds: float) -> None:
        setattr(self, STAGE_COLUMNS[stage], float(seconds))

    def set_xla_cost(self, cost) -> None:
        for name, value in zip(_XLA_COST_COLUMNS, cost):
            if value is not None:
                setattr(self, name, value)

    @property
    def total_s(self) -> float:
        return sum(v for v in (self.trace_s, self.lower_s, self.compile_s) if v is not None)

    def __repr__(self) -> str:
        return f"Event({self.function!r}, {self.kind}, #{self.trace_number}, {self.cause}, {self.leaf!r})"


class EventLog:
    """Bounded event store with subscribers; thread-safe.

    An event may come as a draft (`append_draft`: any object with `build()` -> Event and
    `leaves`), built in order when the log is next read; a draft takes its seq at once.
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS, lock: threading.RLock | None = None):
        # A draft's build may fill in the process of earlier events; a session shares its own lock.
        self._lock = lock if lock is not None else threading.RLock()
        self._events: collections.deque[Event] = collections.deque(maxlen=max_events)
        self._next_seq = 0
        self._subscribers: list[Callable[[Event, str], None]] = []
        self._drafts: list = []  # events not built yet, in seq order
        self._draft_leaves = 0
        self._unsettled: list[Event] = []  # events whose diagnosis is deferred until read
        self._unsettled_leaves = 0
        self._draft_cap = min(MAX_UNSETTLED_EVENTS, max_events)  # drafts kept before they are built anyway
        self.followed = False  # someone reads every event as it comes (then drafts are built at once)
        self.on_fault: Callable[[BaseException], None] | None = None  # a subscriber failed

    @property
    def max_events(self) -> int:
        return self._events.maxlen or 0

    def set_max_events(self, n: int) -> None:
        if n < 1:
            raise ValueError("max_events must be at least 1")
        with self._lock:
            self._build_drafts()
            self._events = collections.deque(self._events, maxlen=n)
            self._draft_cap = min(MAX_UNSETTLED_EVENTS, n)

    @property
    def dropped(self) -> int:
        """How many events the cap has dropped since the last reset."""
        with self._lock:
            self._build_drafts()
            return self._next_seq - len(self._events) - self._first_seq

    _first_seq = 0

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def append(self, event: Event) -> Event:
        with self._lock:
            self._build_drafts()  # they come first
            event.seq = self._next_seq
            self._next_seq += 1
            if self._store(event):
                return event
        self._notify(event, "append")
        return event

    def _store(self, event: Event) -> bool:
        """Keep `event`; True when its diagnosis waits for a reader (nobody to notify)."""
        self._events.append(event)
        deferred = event.deferred
        if deferred is None or self._subscribers:
            return False
        self._unsettled.append(event)
        self._unsettled_leaves += getattr(deferred, "leaves", 1)
        if len(self._unsettled) > MAX_UNSETTLED_EVENTS or self._unsettled_leaves > MAX_UNSETTLED_LEAVES:
            self._settle_all()
        return True

    def append_draft(self, draft):
        """Append an event to be built when the log is next read (nobody follows it now);
        returns `draft`. Drafts are bounded like deferred diagnoses, and by the cap."""
        with self._lock:
            draft.seq = self._next_seq
            self._next_seq += 1
            self._drafts.append(draft)
            self._draft_leaves += draft.leaves
            if len(self._drafts) >= self._draft_cap or self._draft_leaves > MAX_UNSETTLED_LEAVES:
                self._build_drafts()
        return draft

    def build_drafts(self) -> None:
        """Build every draft now, in order."""
        if self._drafts:
            with self._lock:
                self._build_drafts()

    def built(self, draft) -> Event | None:
        """`draft`'s event, built with every draft before it; None if the log was reset since."""
        with self._lock:
            self._build_drafts()
            return draft.event

    def _build_drafts(self) -> None:
        if not self._drafts:
            return
        drafts, self._drafts, self._draft_leaves = self._drafts, [], 0
        for draft in drafts:
            try:
                event = draft.build()
            except Exception as e:  # the session contains its own faults; this is a last resort
                if self.on_fault is not None:
                    self.on_fault(e)
                continue
            event.seq = draft.seq
            self._store(event)

    def fill_process(self, process: int) -> None:
        """Set the process of the events that have none (recorded before JAX knew it)."""
        with self._lock:
            for event in self._events:
                if event.process is None:
                    event.process = process

    def updated(self, event: Event) -> None:
        """Tell subscribers that `event` got more fields (compile seconds, cache hit)."""
        if self._subscribers:
            self._notify(event, "update")

    def settle(self) -> None:
        """Build every draft and run every deferred diagnosis (the log does before any event is read)."""
        with self._lock:
            self._build_drafts()
            self._settle_all()

    def _settle_all(self) -> None:
        unsettled, self._unsettled, self._unsettled_leaves = self._unsettled, [], 0
        for event in unsettled:
            self._settle(event)

    def _settle(self, event: Event) -> None:
        try:
            event.settle()
        except Exception as e:  # the deferred diagnosis contains its own faults; this is a last resort
            if self.on_fault is not None:
                self.on_fault(e)

    def _notify(self, event: Event, what: str) -> None:
        if event.deferred is not None:
            with self._lock:
                self._settle(event)
        for callback in list(self._subscribers):
            try:
                callback(event, what)
            except Exception as e:  # a broken view must not break recording
                if self.on_fault is not None:
                    self.on_fault(e)

    def subscribe(self, callback: Callable[[Event, str], None]) -> Callable[[], None]:
        """Call `callback(event, "append" | "update")` on every change; returns an unsubscribe."""
        with self._lock:
            self._build_drafts()  # appended before: built unfollowed, like the events before them
            self._subscribers.append(callback)
            self.followed = True

        def unsubscribe() -> None:
            with self._lock:
                try:
                    self._subscribers.remove(callback)
                except ValueError:
                    pass
                self.followed = bool(self._subscribers)

        return unsubscribe

    def reset(self) -> None:
        with self._lock:
            self._events.clear()
            self._drafts, self._draft_leaves = [], 0
            self._unsettled, self._unsettled_leaves = [], 0
            self._first_seq = self._next_seq

    def events(self, since: int = 0, until: int | None = None) -> list[Event]:
        with self._lock:
            self._build_drafts()
            if self._unsettled:
                self._settle_all()
            events = list(self._events)
        if since or until is not None:
            events = [e for e in events if e.seq >= since and (until is None or e.seq < until)]
        return events


# The DataFrames moved to `_frames`. These names stay importable from here, lazily (no import
# circle), until the modules that still import them from `_log` import `_frames` instead.
_MOVED_TO_FRAMES = ("events_frame", "export_frame", "function_row", "summary_frame")


def __getattr__(name: str):
    if name in _MOVED_TO_FRAMES:
        from . import _frames

        return getattr(_frames, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def now() -> datetime.datetime:
    return datetime.datetime.now()


def when(timestamp: float) -> datetime.datetime:
    """A `time.time()` timestamp as `now()` would have given it then (local time)."""
    return datetime.datetime.fromtimestamp(timestamp)
