"""A recording scope (`Watch`), its retrace guard (`RetraceError`), and that error's traceback as
the user wants it (`user_traceback`: ending at the user's own line)."""

from __future__ import annotations

import collections
import os
import sys
import sysconfig
import types
from typing import TYPE_CHECKING

from .._core._vocabulary import EventKind
from .._diagnosis._diagnose import retrace_message
from .._log._events import Event
from .._views._frames import events_frame, summary_frame

if TYPE_CHECKING:
    from .._recording._session import Session


# The note JAX's traceback filtering adds to an exception that left a jitted call
# ("quiet_remove_frames",
# its default outside IPython): true of JAX's own errors, noise under a retrace guard's message.
_JAX_FRAMES_NOTE = "For simplicity, JAX has removed its internal frames"


class RetraceError(RuntimeError):
    """Raised by ``watch(max_traces=N)`` or ``watch(max_retraces=N)`` past the limit (and by the
    pytest plugin's guard and baseline). Public as ``jaxtrace_nb.RetraceError``.

    `event` is the trace (or compile) past the limit, as the log records it: its function,
    cause, leaf, before → after, and the user's line that called (`call_site`)."""

    def __init__(self, *args, event: Event | None = None):
        super().__init__(*args)
        self.event = event

    def add_note(self, note: str) -> None:
        """A note, except JAX's banner about the frames it removed: the message is ours, and the
        frames it speaks of are JAX's machinery between the user's call and our guard."""
        if isinstance(note, str) and _JAX_FRAMES_NOTE in note:
            return
        super().add_note(note)


RetraceError.__module__ = (
    "jaxtrace_nb"  # the public name: tracebacks read `jaxtrace_nb.RetraceError`
)


class Watch:
    """A recording scope; see :func:`jaxtrace_nb.watch`."""

    def __init__(
        self,
        session: Session,
        max_traces: int | None = None,
        max_retraces: int | None = None,
        scope: str = "in this scope",
    ):
        if max_traces is not None and max_traces < 1:
            raise ValueError("max_traces must be a positive integer")
        if max_retraces is not None and max_retraces < 0:
            raise ValueError("max_retraces must be zero or a positive integer")
        self._session = session
        self.max_traces = max_traces
        self.max_retraces = max_retraces
        self.scope = scope  # where the limits count, as their error says it ("in this cell")
        self._start: int | None = None
        self._end: int | None = None
        self._traces: collections.Counter = collections.Counter()
        self._retraces: collections.Counter = collections.Counter()
        self._unsubscribe = None

    def __enter__(self) -> Watch:
        self._session.acquire()
        self._start = self._session.log.next_seq
        if (
            self.guards
        ):  # each trace's event, diagnosed, at its start: past a limit, the trace stops
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
        if event.internal or event.kind != EventKind.TRACE or event.precompiled:
            return  # (`jt.precompile`'s traces are asked for: they spare the program its own)
        key = event.key
        if self.max_traces is not None:
            self._traces[key] += 1
            if self._traces[key] > self.max_traces:
                raise RetraceError(
                    retrace_message(
                        event, self._traces[key], f"max_traces={self.max_traces}", self.scope
                    ),
                    event=event,
                )
        if self.max_retraces is not None and (event.trace_number or 0) > 1:
            self._retraces[key] += 1
            if self._retraces[key] > self.max_retraces:
                raise RetraceError(
                    retrace_message(
                        event,
                        self._retraces[key],
                        f"max_retraces={self.max_retraces}",
                        self.scope,
                    ),
                    event=event,
                )


# ----------------------------------------------------------- the user's traceback
def library_frame(frame) -> bool:
    """A frame of JAX, of a library or of ours: hidden (`__tracebackhide__`), installed, or the
    stdlib's."""
    filename = frame.f_code.co_filename
    try:
        hidden = bool(frame.f_locals.get("__tracebackhide__"))
    except Exception:
        hidden = False
    return hidden or filename.startswith(_library_roots())


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = [os.path.normpath(paths[name]) for name in ("stdlib", "purelib", "platlib")]
    roots += [
        os.path.normpath(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))
    ]
    return tuple(root + os.sep for root in roots)


def user_traceback(tb):
    """`tb` ending at the innermost frame of the user's code (where the user called the jitted
    function): the library frames after it (a library's jit wrapper such as ``nnx.jit``'s, JAX's
    when its filtering is off, ours) left out. `tb` itself if every frame is a library's."""
    entries = []
    while tb is not None:
        entries.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    while len(entries) > 1 and library_frame(entries[-1][0]):
        entries.pop()
    out = None
    for frame, lasti, lineno in reversed(entries):
        out = types.TracebackType(out, frame, lasti, lineno)
    return out
