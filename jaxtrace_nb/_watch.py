"""A recording scope (`Watch`) and its retrace guard (`RetraceError`)."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ._diagnosis import retrace_message
from ._frames import events_frame, summary_frame
from ._log import Event

if TYPE_CHECKING:
    from ._session import Session


class RetraceError(RuntimeError):
    """Raised by ``watch(max_traces=N)`` or ``watch(max_retraces=N)`` past the limit."""


class Watch:
    """A recording scope; see :func:`jaxtrace_nb.watch`."""

    def __init__(self, session: Session, max_traces: int | None = None, max_retraces: int | None = None):
        if max_traces is not None and max_traces < 1:
            raise ValueError("max_traces must be a positive integer")
        if max_retraces is not None and max_retraces < 0:
            raise ValueError("max_retraces must be zero or a positive integer")
        self._session = session
        self.max_traces = max_traces
        self.max_retraces = max_retraces
        self._start: int | None = None
        self._end: int | None = None
        self._traces: collections.Counter = collections.Counter()
        self._retraces: collections.Counter = collections.Counter()
        self._unsubscribe = None

    def __enter__(self) -> Watch:
        self._session.acquire()
        self._start = self._session.log.next_seq
        if self.guards:  # each trace's event, diagnosed, at its start: past a limit, the trace stops
            self._unsubscribe = self._session.log.subscribe(self.check, guard=True)
        return self

    def __exit__(self, *exc) -> None:
        self._end = self._session.log.next_seq
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._session.release()

    @property
    def guards(self) -> bool:
        """Whether this scope may stop a trace (it then needs each trace's cause at once)."""
        return self.max_traces is not None or self.max_retraces is not None

    @property
    def records(self) -> list[Event]:
        """The events recorded inside this scope (so far, if still open)."""
        if self._start is None:
            return []
        return self._session.log.events(self._start, self._end)

    @property
    def events(self):
        """DataFrame: one row per trace (or compile without a trace) inside this scope."""
        return events_frame(self.records)

    def summary(self):
        """DataFrame: one row per function traced inside this scope."""
        return summary_frame(self.records)

    def check(self, event: Event) -> None:
        """Count a new trace; raise `RetraceError` past this scope's limits."""
        __tracebackhide__ = True  # IPython and pytest show the user's frame, not ours
        if event.internal or event.kind != "trace":
            return
        key = event.key
        if self.max_traces is not None:
            self._traces[key] += 1
            if self._traces[key] > self.max_traces:
                raise RetraceError(retrace_message(event, self._traces[key], f"max_traces={self.max_traces}"))
        if self.max_retraces is not None and (event.trace_number or 0) > 1:
            self._retraces[key] += 1
            if self._retraces[key] > self.max_retraces:
                raise RetraceError(retrace_message(event, event.trace_number, f"max_retraces={self.max_retraces}"))
