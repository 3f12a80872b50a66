"""A trace's one record from its start to its event (`Trace`), and what the probe calls with it
(`Sink`, the lifecycle's side).

The probe makes a `Trace` where JAX starts a trace and keeps each thread's stack of them; the
lifecycle and the measurer fill their parts; it becomes the `Event` the log keeps.
"""

from __future__ import annotations

from time import time as _time
from typing import Protocol

from .._jax._cache_key import CacheKeyRecord
from .._keys._records import (
    CompileRecord,
    GraphStats,
    LoweringRecord,
    Stage,
    TraceRecord,
    XlaCost,
)


class Trace:
    """One trace, from JAX's start of it to the `Event` it becomes: one object, carried through
    its end, lowering, compile and measurement, each part filled by its owner.

    The probe makes it at the trace's start (its record, and what pairs the trace with its end:
    JAX's token and the announcing frame's id and code); the lifecycle owns its life (its ticks,
    what its function's state says of it, its diagnosis, and its event once built); the measurer
    owns its program's size and profile (a weak reference to the program until they are made).
    A trace seen only through `jax.monitoring` (reduced mode) has no record; a compile without a
    trace is queued as one with its event only. Holds no user array, tracer or object: the
    program only weakly, and strongly (`held`) only from a persistent cache's load to its walk."""

    _PROBE = (
        "record",
        "name",
        "token",
        "frame",
        "code",
    )  # the trace, and what pairs its end with it
    _LIFECYCLE = (
        "time",
        "cell",
        "test",
        "start",
        "end",
        "seq",
        "new_object",
        "diagnosis",
        "pending",
        "trace_number",
        "retrace_number",
        "caller",
        "seconds",
        "graph",
        "profile",
        "event",
        "precompiled",
    )
    _MEASURER = ("program", "size", "sized", "queued", "held")
    __slots__ = _PROBE + _LIFECYCLE + _MEASURER

    def __init__(
        self,
        record: TraceRecord | None,
        name: str,
        token: int | None = None,
        frame: int | None = None,
        code: object = None,
    ):
        self.record, self.name, self.token, self.frame, self.code = record, name, token, frame, code
        self.time = _time()
        self.cell = self.test = None  # the notebook cell and pytest test it ran in
        self.precompiled = False  # traced by one of `jt.precompile`'s threads
        self.start = self.end = self.seq = None  # ticks; the log's number, reserved at its end
        self.new_object, self.diagnosis, self.pending = False, None, None  # read when it begins
        self.trace_number = self.retrace_number = None  # (the latter: its function traced before)
        self.caller: Trace | None = None  # the trace under way when this nested one started
        self.seconds = self.graph = self.profile = self.event = None  # from its end; its event
        self.program = self.size = self.held = None  # a weak reference; GraphStats; the program
        self.sized = self.queued = False  # `size` made; handed to the measurer's thread

    @property
    def leaves(self) -> int:
        """What it holds, for the bound on unpublished events."""
        signature = self.record.signature if self.record is not None else None
        return signature.n_leaves if signature is not None else 1


class Sink(Protocol):
    """What the probe calls; the lifecycle implements it. A trace is a `Trace` from its start to
    its lowering; a compile's `handle` is the sink's own token for its event, opaque to the
    probe."""

    def fault(self, stage: str, exc: BaseException) -> None:
        """A failure inside jaxtrace_nb: count it, report it once, never raise."""

    def on_trace(self, trace: Trace) -> bool:
        """A real trace began: diagnose it; whether it is recorded. May raise RetraceError, by
        design."""

    def on_trace_end(self, trace: Trace, seconds: float | None, graph: GraphStats | None) -> bool:
        """The trace finished (JAX's seconds, the traced program's size): record it; whether it
        is, to await its lowering. A trace that raised never ends, and is not recorded."""

    def on_trace_failed(self, trace: Trace) -> None:
        """The trace raised: JAX cached nothing; count the attempt."""

    def on_lowering(self, trace: Trace | None, record: LoweringRecord) -> object | None:
        """A program is lowered for compilation; `trace` is the trace it follows, or None for
        a compile without a new trace. Returns the handle the compile belongs to."""

    def on_compiled_for(self, handle: object, record: CompileRecord) -> None:
        """The compile of `handle` (a lowering's) received `record`'s module and devices."""

    def on_compile_only(self, record: CompileRecord) -> object | None:
        """A compile with no lowering of its own: JAX compiles a module it lowered before for other
        devices. Returns the handle the compile belongs to."""

    def on_timing(self, handle: object, stage: Stage, seconds: float) -> None:
        """JAX's seconds for one stage."""

    def on_xla_cost(self, handle: object, cost: XlaCost) -> None:
        """XLA's cost analysis of the compiled program."""

    def on_graph(self, trace: Trace, graph: GraphStats) -> None:
        """The traced program's size, measured after its trace ended (never when `on_trace_end`
        had it; twice at worst, by a read and our thread at once: the first counts)."""

    def on_line_profile(self, trace: Trace, rows: tuple) -> None:
        """Equations per user line of the traced program: ((location, self, inclusive), ...)."""

    def on_cache(self, handle: object, hit: bool) -> None:
        """Whether the persistent compilation cache served the compile."""

    def on_cache_key(self, handle: object | None, record: CacheKeyRecord) -> None:
        """The persistent compilation cache's key of a compile, with the outcome of its lookup
        (`handle`: the compile's event, or None for a compile not recorded)."""

    def on_public_trace(self, jax_name: str, seconds: float, thread: int) -> Trace | None:
        """Reduced mode: a trace seen only through `jax.monitoring`; it awaits its lowering."""
