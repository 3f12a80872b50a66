"""The plain records the probe hands the session, and the session's interface (`Sink`).

Nothing here refers to JAX. A record carries strings, numbers, tuples, signatures and weak
references only, never an array, a tracer or a user object. The probe layer builds
them; everything downstream (signature diff, diagnosis, session, log, views) reads them.
"""

from __future__ import annotations

import enum
import weakref
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from ._signature import Signature


class Stage(enum.Enum):
    """A timed stage of a compilation, as JAX's `jax.monitoring` events report it."""

    TRACE = "trace"
    LOWER = "lower"
    COMPILE = "compile"
    CACHE_SAVED = "cache_saved"  # seconds the persistent compilation cache saved


class FunctionIdentity(NamedTuple):
    """Which function a trace or a compile belongs to, in the user's terms."""

    name: str  # the user's qualified name, printable and bounded
    filename: str
    line: int
    location: str  # "file:line", or "In[5]:3" for a notebook cell
    key: str  # groups traces of one function across re-definitions (a re-run cell)
    in_cell: bool  # defined in a notebook cell
    internal: bool  # JAX's (or a library's) own jitted helper
    jit_kind: str  # "jit" | "equinox" | "nnx"
    jax_name: str  # the name JAX's monitoring events use ("f" for "jit(f)")
    src_info: str  # JAX's own "f at file:line", to recognise the function at lowering


class TraceRecord(NamedTuple):
    """One real trace (a miss of JAX's tracing cache) of a jitted function."""

    identity: FunctionIdentity
    nested: bool  # traced inside another trace
    signature: Signature | None  # None when the arguments could not be decoded
    function_ref: weakref.ref | None  # the traced function object, to tell a re-created one
    thread: int
    call_site: str | None  # innermost user frame of the call that traced ("file:line", "In[5]:3")
    cache_generation: int  # counts the times JAX's trace cache was seen emptied (jax.clear_caches)
    arg_names: dict | None  # JAX's name of each traced argument -> the user's path, where they differ
    binding: Binding | None = None  # where the user's code bound the traced function object (its first trace)


class Binding(NamedTuple):
    """Where the user's code bound a jitted function object: the variable that held it when it was
    called, and the lines of the user's code that assign that variable (`CallSites.binding`)."""

    name: str
    lines: tuple[str, ...]  # "file:line" (or "In[5]:3") of each assignment, in the code's order


class Unrolled(NamedTuple):
    """A block of `period` jaxpr equations repeated `repeats` times from equation `start` on."""

    repeats: int
    period: int
    start: int

    @property
    def equations(self) -> int:
        return self.repeats * self.period


class GraphStats(NamedTuple):
    """What is measured of one traced jaxpr."""

    eqns: int  # top-level equations
    eqns_total: int  # including every sub-jaxpr (scan / cond / while bodies, nested jits)
    unrolled: Unrolled | None
    loop_where: str | None  # "file:line" of the unrolled loop's body


class LoweringRecord(NamedTuple):
    """One lowering of a traced program for compilation (the key of JAX's compile cache)."""

    jax_name: str
    src_info: str  # "f at file:line" of the program's function
    signature: Signature | None  # the traced program, then one leaf per argument: type, placement
    thread: int
    identity: FunctionIdentity | None  # the function as JAX's debug info names it


class XlaCost(NamedTuple):
    """What XLA reports of a compiled program (None where the backend reports nothing)."""

    flops: float | None
    arg_bytes: int | None
    out_bytes: int | None
    temp_bytes: int | None


class Sink(Protocol):
    """What the probe calls; the session implements it. `handle` is the sink's own
    token for a recorded event, opaque to the probe."""

    def fault(self, stage: str, exc: BaseException) -> None:
        """A failure inside jaxtrace_nb: count it, report it once, never raise."""

    def on_trace(self, record: TraceRecord) -> object | None:
        """A real trace began: diagnose it; returns its handle. May raise RetraceError, by design."""

    def on_trace_end(self, handle: object, seconds: float | None, graph: GraphStats | None) -> object | None:
        """The trace finished (JAX's seconds, the traced program's size): record it. A trace that
        raised never ends, and is not recorded. Returns the handle its compile belongs to."""

    def on_trace_failed(self, handle: object) -> None:
        """The trace raised: JAX cached nothing; count the attempt."""

    def on_lowering(self, handle: object | None, record: LoweringRecord) -> object | None:
        """A program is lowered for compilation; `handle` is the trace it follows, or None for
        a compile without a new trace. Returns the handle the compile belongs to."""

    def on_timing(self, handle: object, stage: Stage, seconds: float) -> None:
        """JAX's seconds for one stage."""

    def on_xla_cost(self, handle: object, cost: XlaCost) -> None:
        """XLA's cost analysis of the compiled program."""

    def on_line_profile(self, handle: object, rows: tuple) -> None:
        """Equations per user line of the traced program: ((location, self, inclusive), ...)."""

    def on_cache(self, handle: object, hit: bool) -> None:
        """Whether the persistent compilation cache served the compile."""

    def on_public_trace(self, jax_name: str, seconds: float, thread: int) -> object | None:
        """Reduced mode: a trace seen only through `jax.monitoring`."""
