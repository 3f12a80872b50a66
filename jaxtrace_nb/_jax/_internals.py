"""Where and how JAX's internals are read: detection, stage frames, trace context, monitoring.

jaxtrace_nb wraps no JAX call. It reads JAX at two kinds of points, found by feature
detection (`detect`):

* **A trace starts.** JAX's tracing function runs its Python body only on a miss of its
  cache, and calls JAX's own test hook ``test_event`` first. That name is rebound, in
  the module that calls it, to a hook that forwards to JAX's and reads the trace's
  arguments from the caller's frame (`_layouts`: one layout per JAX range). The hook
  returns before the traced function runs: it adds no frame to any trace or call.
* **A stage ends.** JAX reports trace, lower and compile seconds through the public
  ``jax.monitoring``; the listener runs inside the JAX function that measured the stage,
  whose locals hold the traced program, the lowering's inputs or the executable
  (`stage_frame`).

Every read is defensive: a missing name gives None, and the caller degrades.
"""

from __future__ import annotations

import re
import sys
import weakref
from typing import Any, Callable, NamedTuple, Sequence

from ._layouts import JitCall, TraceLayout, detect_layout

SUPPORTED_JAX = ((0, 8, 0), (0, 11, 0))  # [min, max) of versions the full probe is tested on

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_MISS_EVENT = "/jax/compilation_cache/cache_misses"
CACHE_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"

# The JAX functions that report each duration event (the trace's: the layout's).
_STAGE_FRAMES = {
    LOWER_EVENT: ("_cached_lowering_to_hlo",),
    COMPILE_EVENT: ("_cached_compilation",),
}
_MAX_LISTENER_DEPTH = 10
# JAX's lowering functions (JAX 0.8–0.11, pxla.py and mlir.py): a trace that ends while one of them
# runs was made inside a lowering, and the trace whose lowering it is still awaits it.
LOWERING_FRAMES = frozenset(
    {"lower_sharding_computation", "_cached_lowering_to_hlo", "lower_jaxpr_to_module"}
)


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _text(version: tuple) -> str:
    return ".".join(map(str, version))


class Internals(NamedTuple):
    """What this JAX offers the probe; `full` False means public `jax.monitoring` only."""

    full: bool
    reason: str  # why not full ('' when full)
    tested: bool  # inside SUPPORTED_JAX (False: a newer JAX, recording after a self-check)
    version: str
    layout: TraceLayout | None
    fun_name: Callable[[Any], str]
    is_top_level: Callable[[], bool]
    # JAX's tracing cache's ``cache_info()`` (its ``.misses``, reset by clear_caches), or None
    trace_cache_info: Callable[[], Any] | None
    # The function objects JAX's tracing cache holds a key of (`Holders`), or None
    trace_cache_holders: Callable[[], Holders] | None = None


def _reduced(reason: str, version: str = "?") -> Internals:
    return Internals(
        full=False,
        reason=reason,
        tested=False,
        version=version,
        layout=None,
        fun_name=lambda f: getattr(f, "__name__", "?"),
        is_top_level=lambda: True,
        trace_cache_info=None,
        trace_cache_holders=None,
    )


def detect(version_range: tuple | None = None) -> Internals:
    """Which observation points this JAX offers (no side effects).

    Inside the tested range and with a layout that fits, the full probe; on a newer JAX
    whose layout fits, the full probe marked untested (the session self-checks it before
    recording); otherwise public `jax.monitoring` only, with the reason.
    """
    try:
        import jax
    except Exception as e:  # pragma: no cover - jax is importable wherever recording starts
        return _reduced(f"JAX is not importable ({type(e).__name__})")
    version = version_tuple(jax.__version__)
    lo, hi = version_range or SUPPORTED_JAX
    if version < lo:
        return _reduced(
            f"JAX {jax.__version__} is older than the supported {_text(lo)}", jax.__version__
        )
    try:
        layout = detect_layout()
    except Exception as e:
        layout = f"its internals could not be inspected ({type(e).__name__})"
    if isinstance(layout, str):
        return _reduced(
            f"JAX {jax.__version__} is not one jaxtrace_nb can read: {layout}", jax.__version__
        )
    tested = version < hi
    return Internals(
        full=True,
        reason="" if tested else f"JAX {jax.__version__} is newer than tested (<{_text(hi)})",
        tested=tested,
        version=jax.__version__,
        layout=layout,
        fun_name=_fun_name(),
        is_top_level=_is_top_level(),
        trace_cache_info=_cache_info(),
        trace_cache_holders=_cache_holders(),
    )


def _fun_name():
    try:
        from jax._src import pjit

        return pjit.fun_name
    except Exception:
        return lambda f: getattr(f, "__name__", type(f).__name__)


def _is_top_level():
    from jax._src import core

    trace_ctx = getattr(core, "trace_ctx", None)
    if trace_ctx is not None and hasattr(trace_ctx, "is_top_level"):
        return trace_ctx.is_top_level
    return getattr(core, "trace_state_clean", lambda: True)


def _cache_info() -> Callable[[], Any] | None:
    from jax._src.interpreters import partial_eval as pe

    cache_info = getattr(getattr(pe, "trace_to_jaxpr", None), "cache_info", None)
    return cache_info if callable(cache_info) else None


def _cache_holders() -> Callable[[], Holders] | None:
    """JAX 0.9+: ``trace_to_jaxpr`` is a ``WeakrefLRUCache`` keyed first by a weak reference to the
    traced function; `f.clear_cache()` (``jit_evict_fn``: ``trace_to_jaxpr.evict_weakref(f)``)
    drops that function's keys and moves no counter, so only its keys tell (checked on 0.10.2)."""
    from jax._src.interpreters import partial_eval as pe

    keys = getattr(getattr(pe, "trace_to_jaxpr", None), "cache_keys", None)
    if not callable(keys):
        return None

    def holders() -> Holders:
        held = Holders()
        for key in keys():
            try:
                ref = key[0]  # (JAX's weak reference to the function: its hash kept in it)
                target = ref()
                if target is not None:
                    held.ids.add(id(target))
                    held.refs.add(ref)
            except Exception:
                continue
        return held

    return holders


class Holders:
    """The function objects JAX's tracing cache holds keys of, as its lookup finds them: by their
    weak references, whose ``==`` compares the live objects (hash first), so that an object ``==``
    to one it holds (``obj.step`` taken again) is held too."""

    __slots__ = ("ids", "refs")

    def __init__(self):
        self.ids: set[int] = set()  # the objects themselves
        self.refs: set = set()  # their weak references, compared as JAX's lookup compares them

    def holds(self, fun: Any) -> bool:
        if id(fun) in self.ids:
            return True
        try:
            return weakref.ref(fun) in self.refs
        except Exception:  # (no weak reference, no hash, or an ``==`` that raises: not held)
            return False

    def add(self, fun: Any) -> None:
        self.ids.add(id(fun))
        try:
            self.refs.add(weakref.ref(fun))
        except Exception:
            pass


def remade_jit(call: JitCall) -> Any:
    """The jitted function of `call`, made again from its function and JAX's own record of the
    ``jax.jit`` parameters (``pjit._cpp_pjit(fun, jit_info)``, what ``jax.jit`` itself returns):
    its traces and compiles are the ones the user's jitted function looks up. None where this JAX
    has no such maker."""
    from jax._src import pjit

    make = getattr(pjit, "_cpp_pjit", None)
    if not callable(make):
        return None
    return make(call.fun, call.info)


def trace_end_locals(layout: TraceLayout, walk: bool = False) -> dict | None:
    """The locals of the JAX function reporting a trace's seconds, seen from inside a
    `jax.monitoring` listener (`TraceLayout.end_token` names the one it pairs by); None if that
    function is not found within a few frames. No other frame's locals are read.

    It is looked for where it was last time first, unless `walk`: then frame by frame
    from the listener (the nearest one, should a frame of that name be further up too)."""
    names = layout.trace_frames
    depth = 0 if walk else _TRACE_END_DEPTH[0]
    if (
        depth
    ):  # where it was last time: reached without making a frame object of every frame between
        try:
            frame = sys._getframe(depth)
        except ValueError:
            frame = None
        if frame is not None and frame.f_code.co_name in names:
            return frame.f_locals
    frame = sys._getframe(1)
    for depth in range(1, _MAX_LISTENER_DEPTH + 1):
        if frame is None:
            return None
        if frame.f_code.co_name in names:
            _TRACE_END_DEPTH[0] = depth
            return frame.f_locals
        frame = frame.f_back
    return None


_TRACE_END_DEPTH = [
    0
]  # frames from `trace_end_locals` to the trace's reporting function, last found


class StageFrame(NamedTuple):
    """The JAX function reporting a stage's seconds to a listener right now."""

    locals: dict  # its local variables: the traced program, the lowering's inputs, the executable
    raised: bool  # the stage ended with an exception (JAX reports its seconds all the same)


def stage_frame(event: str) -> StageFrame | None:
    """The frame reporting a lowering's or a compile's seconds (`event`), seen from inside a
    `jax.monitoring` listener; None if that function is not found within a few frames (another
    JAX layout, or another caller). A trace's: `trace_end_locals`."""
    names = _STAGE_FRAMES.get(event)
    if not names:
        return None
    frame = sys._getframe(1)
    raised = False
    for _ in range(_MAX_LISTENER_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        if code.co_name in names:
            return StageFrame(frame.f_locals, raised)
        if code.co_name == "__exit__":  # the context manager that measured the stage
            raised = raised or frame.f_locals.get("exc_type") is not None
        frame = frame.f_back
    return None


# JAX's names of its trace-context entries (fixed in a process), once read
_CONTEXT_NAMES: list = []


def trace_context_function() -> Callable[[], tuple]:
    """JAX's ``config.trace_context``: the values of every config option its caches key on
    (a function answering ``()`` where JAX has none)."""
    try:
        from jax._src import config

        return config.trace_context
    except Exception:
        return tuple


def trace_context_names(n: int) -> tuple:
    """The names of the `n` entries of JAX's trace context (``context[i]`` where JAX has none)."""
    names = _CONTEXT_NAMES[0] if _CONTEXT_NAMES else ()
    if len(names) != n:
        try:
            from jax._src import config

            names = tuple(config.trace_context_names())  # JAX >= 0.10.2
        except Exception:
            names = ()
        if len(names) != n:
            names = tuple(f"context[{i}]" for i in range(n))
        _CONTEXT_NAMES[:] = [names]
    return names


_ABSTRACT_TYPES: dict = {}  # type -> whether it is one of JAX's abstract values (avals)
_ABSTRACT: set = set()  # the types of `_ABSTRACT_TYPES` that are abstract values (one subset test)


def all_abstract(values: Sequence) -> bool:
    """Whether every value is an abstract value (a shape and dtype, never user data)."""
    if _ABSTRACT.issuperset(map(type, values)):  # (no set made: this runs at every retrace)
        return True
    types = set(map(type, values))
    for t in types:
        known = _ABSTRACT_TYPES.get(t)
        if known is None:
            try:
                from jax._src.core import AbstractValue

                known = issubclass(t, AbstractValue)
            except Exception:
                known = False
            if len(_ABSTRACT_TYPES) < 256:
                _ABSTRACT_TYPES[t] = known
                if known:
                    _ABSTRACT.add(t)
        if not known:
            return False
    return True


def user_frames(traceback: Any):
    """The user's frames of a jaxpr equation's source info, innermost first."""
    from jax._src import source_info_util

    return source_info_util.user_frames(traceback)


def traceback_lines() -> tuple[Callable[[Any, int], int], str]:
    """(the line of a raw traceback frame: ``Traceback.code_addr2line(code, offset)``, the file of
    JAX's partial_eval, whose ``trace_to_*`` frames start a trace): what `_lineprof` reads frames
    with."""
    from jax._src.interpreters import partial_eval
    from jax._src.lib import xla_client

    return xla_client.Traceback.code_addr2line, partial_eval.__file__


def traceback_type_hashes() -> bool:
    """Whether jaxlib's tracebacks can key a dict. They compare and hash by their frames (code
    objects and instruction offsets; jaxlib's ``traceback.cc``), so equal stacks share one key."""
    from jax._src.lib import xla_client

    return getattr(xla_client.Traceback, "__hash__", None) is not None


def exclude_from_tracebacks(directory: str) -> None:
    """Hide `directory`'s frames from JAX's filtered tracebacks."""
    from jax._src import traceback_util

    traceback_util.register_exclusion(directory)


# (register, public unregister, private unregister of JAX 0.8.0, which has no public one)
_LISTENER_KINDS = {
    "duration": (
        "register_event_duration_secs_listener",
        "unregister_event_duration_listener",
        "_unregister_event_duration_listener_by_callback",
    ),
    "event": (
        "register_event_listener",
        "unregister_event_listener",
        "_unregister_event_listener_by_callback",
    ),
}


def listener_api(kind: str) -> tuple[Callable, Callable] | None:
    """(register, unregister) of a `jax.monitoring` listener kind; None if it cannot be removed."""
    from jax import monitoring

    register_name, unregister_name, private_name = _LISTENER_KINDS[kind]
    register = getattr(monitoring, register_name, None)
    unregister = getattr(monitoring, unregister_name, None)
    if unregister is None:
        from jax._src import monitoring as private

        unregister = getattr(private, private_name, None)
    if register is None or unregister is None:
        return None
    return register, unregister


class Distributed(NamedTuple):
    """A `jax.distributed` run this process is part of: its coordination service's key-value store
    (JAX's ``DistributedRuntimeClient``), this process's index and the number of processes."""

    client: Any
    process: int
    processes: int


_DISTRIBUTED: list = []  # JAX's ``distributed`` module, once imported (or None: it has none)


def distributed() -> Distributed | None:
    """The `jax.distributed` run this process takes part in now, or None (not initialized, a single
    process, or a JAX whose ``jax._src.distributed.global_state`` reads otherwise). Read at each
    call: ``jax.distributed.initialize`` may come before or after recording starts."""
    if not _DISTRIBUTED:
        try:
            from jax._src import distributed as module

            _DISTRIBUTED.append(module)
        except Exception:
            _DISTRIBUTED.append(None)
    module = _DISTRIBUTED[0]
    state = getattr(module, "global_state", None)
    client = getattr(state, "client", None)
    if client is None:
        return None
    try:
        processes, process = int(state.num_processes), int(state.process_id)
    except Exception:
        return None
    needed = ("key_value_set", "key_value_increment", "blocking_key_value_get", "key_value_dir_get")
    if processes < 2 or not all(hasattr(client, name) for name in needed):
        return None
    return Distributed(client, process, processes)


def timed_out(error: BaseException) -> bool:
    """Whether a blocking get of the coordination service's key-value store ended because its
    time ran out (jaxlib raises its runtime error with the status ``DEADLINE_EXCEEDED``; checked
    on JAX 0.8.0 and 0.10.2), not because the store failed."""
    return "DEADLINE_EXCEEDED" in str(error)


# The JAX functions above the announcing frame that hold a jitted call's arguments, flat where they
# can: 0.9–0.11 ``_trace_for_jit`` (``args_ft``, a FlatTree whose values are the dynamic leaves),
# 0.8 ``_infer_params_impl`` (``explicit_args``); else any of them with ``args``, ``kwargs``.
_ARGUMENT_FRAMES = (
    "_trace_for_jit",
    "_infer_params_impl",
    "_infer_params",
    "_infer_params_internal",
)
_MAX_ARGUMENT_DEPTH = 4


def spans_processes(frame) -> bool:
    """Whether the jitted call whose trace `frame` announces has an argument array that is not fully
    addressable from this process (a global array over several processes' devices). The arguments
    are read from JAX's frames above `frame` and not kept; JAX's own flat list of them where the
    frame has one (flattening again would run the user's pytree code)."""
    import jax

    array = jax.Array
    f = frame.f_back
    for _ in range(_MAX_ARGUMENT_DEPTH):
        if f is None:
            return False
        if f.f_code.co_name in _ARGUMENT_FRAMES:
            local = f.f_locals
            flat = getattr(local.get("args_ft"), "vals", None)
            if flat is None:
                flat = local.get("explicit_args")
            if flat is None and "args" in local:
                flat = jax.tree_util.tree_leaves((local.get("args"), local.get("kwargs")))
            if flat is not None:
                return any(isinstance(x, array) and not x.is_fully_addressable for x in flat)
        f = f.f_back
    return False


_PROCESS_MODULES: list = []  # JAX's ``distributed`` and ``xla_bridge`` modules, once imported


def process_index() -> int | None:
    """JAX's process index, read without initializing JAX's backends (None until JAX knows it).

    Asking ``jax.process_index()`` before the program has run any computation would start the
    backends, after which the program's own ``jax.distributed.initialize()`` fails. So: the
    index ``jax.distributed.initialize`` set, else ``jax.process_index()`` once the backends
    are up."""
    try:
        if not _PROCESS_MODULES:
            from jax._src import distributed, xla_bridge

            _PROCESS_MODULES[:] = [distributed, xla_bridge]
        distributed, xla_bridge = _PROCESS_MODULES
        if distributed.global_state.client is not None:
            return int(distributed.global_state.process_id)
        if xla_bridge.backends_are_initialized():
            import jax

            return int(jax.process_index())
    except Exception:
        pass
    return None


def lowered_module(local: dict | None) -> Any:
    """The module a lowering made (``lowering_result.module`` in the lowering function's `local`s,
    `stage_frame`; JAX 0.8–0.11): the object JAX's compiles of it receive, or None."""
    return getattr(local.get("lowering_result"), "module", None) if local else None


class CompileInputs(NamedTuple):
    """What JAX's compile function (``pxla._cached_compilation``, JAX 0.8–0.11) received: the
    lowered module (the lowering's object: JAX compiles one lowering again for other devices
    without lowering it again) and the devices it is compiled for, in order."""

    program: Any
    devices: tuple  # ("cpu:0", ...): each device's platform and id
    options: (
        tuple  # the XLA compiler options given (``compiler_options_kvs``): ((name, value), ...)
    )


def compile_inputs(local: dict | None) -> CompileInputs | None:
    """`CompileInputs` from the compile function's `local`s (`stage_frame`); None when they hold
    no module or devices."""
    program = local.get("computation") if local else None
    assignment = local.get("da") if local else None
    if program is None or assignment is None:
        return None
    devices = tuple(
        f"{getattr(d, 'platform', '?')}:{getattr(d, 'id', '?')}" for d in list(assignment)
    )
    options = tuple(
        (str(k), v if type(v) in (str, int, float, bool) else repr(v))
        for k, v in (local.get("compiler_options_kvs") or ())
    )
    return CompileInputs(program, devices, options)


class LoweringInputs(NamedTuple):
    """What JAX's lowering function (``pxla._cached_lowering_to_hlo``, JAX 0.8–0.11) received, read
    from its locals: the traced program and, per argument (constants dropped), its abstract value,
    sharding, layout and donation."""

    program: Any  # the ClosedJaxpr: JAX's compile cache keys on this object itself
    debug_info: Any  # its DebugInfo (``arg_names`` None: a program JAX derived, e.g. a JVP)
    avals: list
    shardings: list
    layouts: list
    donated: list


def lowering_inputs(local: dict | None) -> LoweringInputs | None:
    """`LoweringInputs` from the lowering function's `local`s (`stage_frame`); None when they do
    not hold a program and its argument types."""
    closed = local.get("closed_jaxpr") if local else None
    in_avals = local.get("in_avals") if local else None
    if closed is None or in_avals is None:
        return None
    n_const = int(local.get("num_const_args") or 0)
    return LoweringInputs(
        program=closed,
        debug_info=getattr(getattr(closed, "jaxpr", None), "debug_info", None),
        avals=list(in_avals)[n_const:],
        shardings=list(getattr(local.get("semantic_in_shardings"), "shardings", ()) or ())[
            n_const:
        ],
        layouts=list(local.get("in_layouts") or ())[n_const:],
        donated=list(local.get("donated_invars") or ())[n_const:],
    )
