"""Whether the running thread is one of `jt.precompile`'s, and the traces it started: those are
marked ``precompiled`` in the log, and the thread reads back each trace's record (its full
signature, where the log's column is bounded). A flag read at the trace's start cannot be mistaken
for another thread's, as a thread's identity can be once it ends."""

from __future__ import annotations

import threading
from typing import Any

_LOCAL = threading.local()
PRECOMPILE_SITE = "jt.precompile's worker"  # the call site of a worker's trace


def precompiling() -> bool:
    """True on a thread that is compiling for `jt.precompile`."""
    return getattr(_LOCAL, "on", False)


def mark_precompiling(on: bool) -> None:
    """Mark (or unmark) the running thread as one of `jt.precompile`'s; either forgets the traces
    noted so far (an unmarked thread keeps none)."""
    _LOCAL.on = on
    _LOCAL.traces = [] if on else None


def note_trace(record: Any) -> None:
    """On a precompiling thread: a trace began (its `TraceRecord`)."""
    traces = getattr(_LOCAL, "traces", None)
    if traces is not None:
        traces.append(record)


def noted_traces() -> list:
    """The records of the traces this thread began since the last call (then forgotten)."""
    traces = getattr(_LOCAL, "traces", None) or []
    _LOCAL.traces = []
    return traces
