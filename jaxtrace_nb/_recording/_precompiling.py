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
    """Mark (or unmark) the running thread as one of `jt.precompile`'s; either forgets what was
    noted so far (an unmarked thread keeps nothing)."""
    _LOCAL.on = on
    _LOCAL.traces = [] if on else None
    _LOCAL.lowerings = [] if on else None


def _note(what: str, item: Any) -> None:
    noted = getattr(_LOCAL, what, None)
    if noted is not None:
        noted.append(item)


def _noted(what: str) -> list:
    noted = getattr(_LOCAL, what, None) or []
    if noted:
        setattr(_LOCAL, what, [])
    return noted


def note_trace(record: Any) -> None:
    """On a precompiling thread: a trace began (its `TraceRecord`)."""
    _note("traces", record)


def noted_traces() -> list:
    """The records of the traces this thread began since the last call (then forgotten)."""
    return _noted("traces")


def note_lowering(arguments: dict[str, tuple[str, str]] | None) -> None:
    """On a precompiling thread: JAX lowered a program (``{path: (type, placement)}`` of its
    arguments, as the log writes them; None where they were not read)."""
    _note("lowerings", arguments)


def noted_lowerings() -> list:
    """The arguments of the lowerings this thread made since the last call (then forgotten)."""
    return _noted("lowerings")
