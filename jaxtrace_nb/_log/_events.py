"""The event log: an append-only, bounded store of trace and compile events.

Events are plain records (strings and numbers only). The log knows nothing of traces: the
`Lifecycle` hands it finished events, and is asked to hand over any it still holds before
the log is read (`before_read`). `_frames` builds their DataFrames.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import operator
import threading
from collections.abc import Callable

from .._core._vocabulary import Cause, EventKind, JitKind
from .._keys._records import Stage

DEFAULT_MAX_EVENTS = 100_000

# The DataFrame's columns, in order, by dtype; the first 17 are the documented contract.
_TEXT, _INT, _FLOAT, _BOOL = "text", "Int64", "float64", "bool"
COLUMN_TYPES = (
    ("time", "datetime"),
    ("cell", _INT),
    ("function", _TEXT),
    ("location", _TEXT),
    ("kind", "kind"),
    ("internal", _BOOL),
    ("nested", _BOOL),
    ("trace_number", _INT),
    ("cause", "cause"),
    ("leaf", _TEXT),
    ("before", _TEXT),
    ("after", _TEXT),
    ("explanation", _TEXT),
    ("hint", _TEXT),
    ("trace_s", _FLOAT),
    ("lower_s", _FLOAT),
    ("compile_s", _FLOAT),
    ("call_site", _TEXT),
    ("cache_hit", "boolean"),
    ("cache_saved_s", _FLOAT),
    ("eqns", _INT),
    ("eqns_total", _INT),
    ("loop_repeats", _INT),
    ("loop_line", _TEXT),
    ("flops", _FLOAT),
    ("arg_bytes", _INT),
    ("out_bytes", _INT),
    ("temp_bytes", _INT),
    ("compile_s_per_keqn", _FLOAT),
    ("jit", "jit"),
    ("thread", _INT),
    ("key", _TEXT),
    ("seq", _INT),
    ("host", _TEXT),
    ("process", _INT),
    ("signature", _TEXT),
    ("placements", _TEXT),  # a persisted lowering's {path: placement}, where one is committed
    ("hint_ids", _TEXT),
    ("persistent_cache", _TEXT),
    ("line_profile", _TEXT),
    ("precompiled", "boolean"),  # traced and compiled by `jt.precompile`'s workers
    ("test", _TEXT),
    ("created_at", _TEXT),
)
COLUMNS = tuple(name for name, _ in COLUMN_TYPES)
_TEXT_COLUMNS = tuple(name for name, kind in COLUMN_TYPES if kind == _TEXT)
# Where each timed stage's seconds go: the only place stages meet column names.
STAGE_COLUMNS = {
    Stage.TRACE: "trace_s",
    Stage.LOWER: "lower_s",
    Stage.COMPILE: "compile_s",
    Stage.CACHE_SAVED: "cache_saved_s",
}
_XLA_COST_COLUMNS = ("flops", "arg_bytes", "out_bytes", "temp_bytes")

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


class _EventMethods:
    """The behaviour of `Event` (its fields are the columns, `COLUMNS`)."""

    __slots__ = ()

    def set_diagnosis(self, d, hint: str | None, hint_ids: str | None) -> None:
        """The diagnosis `d`'s fields, with the event's hint and hint ids as given."""
        self.cause, self.leaf, self.before, self.after, self.explanation = (
            d.cause,
            d.leaf,
            d.before,
            d.after,
            d.explanation,
        )
        self.hint, self.hint_ids = hint, hint_ids

    def as_tuple(self) -> tuple:
        return _ALL_COLUMNS(self)

    def set_seconds(self, stage: Stage, seconds: float) -> None:
        setattr(self, STAGE_COLUMNS[stage], float(seconds))

    def set_xla_cost(self, cost) -> None:
        for name, value in zip(_XLA_COST_COLUMNS, cost):
            if value is not None:
                setattr(self, name, value)

    def share_texts(self) -> None:
        """Make the event's texts the copies recent events share (a log holds many alike)."""
        for name in _TEXT_COLUMNS:
            value = getattr(self, name)
            if type(value) is str:
                setattr(self, name, _shared(value))

    @property
    def total_s(self) -> float:
        return sum(v for v in (self.trace_s, self.lower_s, self.compile_s) if v is not None)

    def __repr__(self) -> str:
        return (
            f"Event({self.function!r}, {self.kind}, #{self.trace_number}, {self.cause}, "
            f"{self.leaf!r})"
        )


# Each column's values, by its kind in `COLUMN_TYPES` (a log read back from disk holds the enums'
# plain strings, equal to their members).
_FIELD_TYPES = {
    "datetime": datetime.datetime,
    _INT: int,
    _FLOAT: float,
    _BOOL: bool,
    "boolean": bool,
    _TEXT: str,
    "kind": EventKind,
    "cause": Cause,
    "jit": JitKind,
}

# One trace (with the compile that followed it) or one compile without a trace: a field per column,
# each a keyword of its constructor, None by default.
Event = dataclasses.make_dataclass(
    "Event",
    [(name, _FIELD_TYPES[kind] | None, None) for name, kind in COLUMN_TYPES],
    bases=(_EventMethods,),
    slots=True,
    eq=False,
    repr=False,
)
Event.__module__ = __name__


class EventLog:
    """A bounded store of finished events, with subscribers; thread-safe.

    `before_read`, set by whoever feeds the log, hands over the events it still holds before
    any read. A subscriber may follow the log (`subscribe`): then events are handed over as they
    happen. A guard is a subscriber that may stop a trace: its exceptions reach the traced call.
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS):
        self._lock = threading.RLock()
        self._events: collections.deque[Event] = collections.deque(maxlen=max_events)
        self._next_seq = 0
        self._first_seq = 0
        self._reserved: set[int] = set()  # numbers given out by `reserve`, not appended yet
        self._subscribers: list[Callable[[Event, str], None]] = []
        self._guards: list[Callable[[Event], None]] = []
        self.followed = False  # some subscriber or guard reads every event as it comes
        self.guarded = False  # some guard may stop a trace
        self.before_read: Callable[[], None] | None = None
        self.on_fault: Callable[[BaseException], None] | None = None  # a subscriber failed

    @property
    def max_events(self) -> int:
        return self._events.maxlen or 0

    def set_max_events(self, n: int) -> None:
        if n < 1:
            raise ValueError("max_events must be at least 1")
        self._read()
        with self._lock:
            self._events = collections.deque(self._events, maxlen=n)

    @property
    def dropped(self) -> int:
        """How many events the cap has dropped since the last reset."""
        self._read()
        with self._lock:
            return self._next_seq - len(self._events) - self._first_seq

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def reserve(self) -> int:
        """The number of an event to be appended later (events are appended in number order)."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            self._reserved.add(seq)
            return seq

    def append(self, event: Event) -> Event:
        """Keep `event` (numbered now unless `reserve` numbered it) and tell the subscribers."""
        event.share_texts()
        with self._lock:
            if event.seq in self._reserved:
                self._reserved.discard(event.seq)
            else:
                event.seq = self._next_seq
                self._next_seq += 1
            self._events.append(event)
        self._notify(event, "append")
        return event

    def updated(self, event: Event) -> None:
        """Tell subscribers that `event` got more fields (compile seconds, cache hit)."""
        if self._subscribers:
            self._notify(event, "update")

    def guard(self, event: Event) -> None:
        """Show a trace's event to the guards before the trace runs; a guard's exception
        propagates."""
        __tracebackhide__ = True
        for check in list(self._guards):
            check(event)

    def fill_process(self, process: int) -> None:
        """Set the process of the events that have none (recorded before JAX knew it)."""
        with self._lock:
            for event in self._events:
                if event.process is None:
                    event.process = process

    def _notify(self, event: Event, what: str) -> None:
        for callback in list(self._subscribers):
            try:
                callback(event, what)
            except Exception as e:  # a broken view must not break recording
                if self.on_fault is not None:
                    self.on_fault(e)

    def subscribe(self, callback: Callable, *, guard: bool = False) -> Callable[[], None]:
        """Call `callback(event, "append" | "update")` on every change from now on (a `guard`:
        `callback(event)` at each trace's start, before the trace runs); returns an unsubscribe."""
        self._read()  # the events before: handed over unfollowed, like the events before them
        with self._lock:
            (self._guards if guard else self._subscribers).append(callback)
            self._followers_changed()

        def unsubscribe() -> None:
            with self._lock:
                for group in (self._guards, self._subscribers):
                    if callback in group:
                        group.remove(callback)
                self._followers_changed()

        return unsubscribe

    def _followers_changed(self) -> None:
        self.guarded = bool(self._guards)
        self.followed = bool(self._subscribers or self._guards)

    def reset(self) -> None:
        with self._lock:
            self._events.clear()
            self._reserved.clear()
            self._first_seq = self._next_seq

    def _read(self) -> None:
        if self.before_read is not None:
            self.before_read()

    def events(self, since: int = 0, until: int | None = None) -> list[Event]:
        self._read()
        with self._lock:
            events = list(self._events)
        if since or until is not None:
            events = [e for e in events if e.seq >= since and (until is None or e.seq < until)]
        return events


def now() -> datetime.datetime:
    return datetime.datetime.now()


def when(timestamp: float) -> datetime.datetime:
    """A `time.time()` timestamp as `now()` would have given it then (local time)."""
    return datetime.datetime.fromtimestamp(timestamp)
