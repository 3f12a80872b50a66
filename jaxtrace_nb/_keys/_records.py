"""The plain records the probe hands the lifecycle: a trace's, a lowering's, a cache key's.

Nothing here refers to JAX. A record carries strings, numbers, tuples, signatures and weak
references only, never an array, a tracer or a user object. The probe layer builds
them; everything downstream (signature diff, diagnosis, session, log, views) reads them.
"""

from __future__ import annotations

import enum
import weakref
from typing import TYPE_CHECKING, NamedTuple

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
    arg_names: (
        dict | None
    )  # JAX's name of each traced argument -> the user's path, where they differ
    binding: Binding | None = (
        None  # where the user's code bound the traced function object (its first trace)
    )
    evicted: bool = (
        False  # JAX's tracing cache held no key of the function object (`f.clear_cache()`)
    )


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
    # whether that line is the user's own code (`_installed`), not a library's: only theirs to fix
    loop_users: bool = False


class LoweringRecord(NamedTuple):
    """One lowering of a traced program for compilation (the key of JAX's compile cache)."""

    jax_name: str
    src_info: str  # "f at file:line" of the program's function
    signature: Signature | None  # the traced program, then one leaf per argument: type, placement
    thread: int
    identity: FunctionIdentity | None  # the function as JAX's debug info names it
    # the module it made, weakly: JAX compiles it again for other devices without lowering again
    module_ref: weakref.ref | None = None
    started: float | None = None  # `time.monotonic()` when the lowering began


class CompileRecord(NamedTuple):
    """A compile: a lowering's, or of a module lowered earlier (no lowering of its own)."""

    jax_name: str
    module_ref: weakref.ref | None  # the lowered module compiled (the lowering's reference to it)
    devices: tuple  # ("cpu:0", ...), in JAX's order
    thread: int
    options: tuple = ()  # the XLA compiler options given: ((name, value), ...)
    started: float | None = None  # `time.monotonic()` when the compile began (its end less its s)


class XlaCost(NamedTuple):
    """What XLA reports of a compiled program (None where the backend reports nothing)."""

    flops: float | None
    arg_bytes: int | None
    out_bytes: int | None
    temp_bytes: int | None


class EarlierKey(NamedTuple):
    """A key the index beside the cache remembers (`_cache_index`): who computed it, and its
    parts."""

    key: str
    run: str  # the recording run that last computed it ("host:pid:start")
    host: str
    pid: int
    first_seen: float  # time.time() of its first and last computation, by any run
    last_seen: float
    function: (
        str | None
    )  # the user's name and location of the function it was compiled for, when recorded
    location: str | None
    outcome: str  # the last lookup's outcome ("hit", "written", "not_written")
    reason: str  # why it was not written, when it was not
    written: bool  # some run wrote its entry
    components: tuple  # ((name, sha256 hex), ...), as `CacheKeyRecord.components`
    facts: dict  # as `CacheKeyRecord.facts`
    compile_options: bytes | None  # serialized compile options, as hashed
    module_bytes: bytes | None  # its canonical module, when asked for and kept


class CacheComparison(NamedTuple):
    """A miss's key against the index beside the cache (made by `_cache_index`, worded by
    `_cache_words`)."""

    same: EarlierKey | None  # this very key, computed before (by this run or another)
    closest: EarlierKey | None  # the other key of the same name whose parts differ least
    differing: tuple  # the names of the parts that differ from `closest`, in JAX's order
    entry_exists: (
        bool | None
    )  # whether the cache holds an entry for this key now (checked with `same`)
    module_bytes: (
        bytes | None
    )  # this key's canonical module (when the computation differs from `closest`'s)
