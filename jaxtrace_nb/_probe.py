"""The probe: the only module that touches JAX internals.

Observation points, chosen by feature detection:

* ``jax._src.interpreters.partial_eval.trace_to_jaxpr``: every jit trace passes it (pjit
  looks it up at call time). It is wrapped by a forwarding function that only runs
  when JAX's C++ dispatch has already missed its cache; a cache-hit call of a jitted
  function never reaches Python, so it never reaches this code. A real trace (not a
  tracing-cache hit) is detected from the cache's own miss counter.
* ``jax.monitoring`` duration listeners (public API): JAX's own trace / lower / XLA
  compile seconds per function name, and persistent-compilation-cache events,
  attributed through the thread that is compiling.

Outside the supported JAX range, or where an internal is missing, only the public
monitoring listeners are installed (timings and counts per function name).
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
import sys
import threading
import time
import weakref
from typing import Any, NamedTuple

from ._graph import GraphStats, find_unrolled
from ._signature import NODE_SUFFIX, NONE_LEAF, Leaf, Signature, array_leaf, node_leaf, static_leaf
from ._summary import clip, printable, summarize_static

SUPPORTED_JAX = ((0, 9, 0), (0, 11, 0))  # [min, max) of versions the full probe is tested on

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
CACHE_MISS_EVENT = "/jax/compilation_cache/cache_misses"
CACHE_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"

_LIBRARY_PACKAGES = ("jax", "jaxlib", "equinox", "optax", "chex", "flax", "jaxtyping")
_CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|ipykernel_\d+[/\\]\d+\.py$")
_SRC_INFO = re.compile(r"^(?P<name>.*) at (?P<file>.*):(?P<line>\d+)$")


class RetraceError(RuntimeError):
    """Raised by ``watch(max_traces=N)`` at the (N+1)-th trace of one function."""


class TraceInfo(NamedTuple):
    """What the probe hands the session for one real trace: plain data only."""

    function: str  # the user's qualified name
    location: str  # "file:line" (or "In[5]:3" for a notebook cell)
    filename: str
    key: str  # groups traces of "the same" function across re-definitions
    internal: bool  # JAX's (or a library's) own jitted helper
    nested: bool  # traced inside another trace
    jit_kind: str  # "jit" | "equinox"
    jax_name: str  # the name JAX's monitoring events use
    signature: Signature | None
    function_ref: Any  # weakref to the function object, or None
    thread: int
    elapsed_s: float  # our own measure of the trace, used for nested traces
    graph: GraphStats | None = None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


class _Capabilities(NamedTuple):
    trace_hook: bool
    reason: str


def detect() -> _Capabilities:
    """Which observation points this JAX offers (no side effects)."""
    try:
        import jax
        from jax._src.interpreters import partial_eval as pe
    except Exception as e:  # pragma: no cover - jax always importable where tests run
        return _Capabilities(False, f"JAX internals not importable ({type(e).__name__})")
    version = _version_tuple(jax.__version__)
    lo, hi = SUPPORTED_JAX
    if not (lo <= version < hi):
        return _Capabilities(
            False,
            f"JAX {jax.__version__} is outside the tested range "
            f"{'.'.join(map(str, lo))}–<{'.'.join(map(str, hi))}",
        )
    target = getattr(pe, "trace_to_jaxpr", None)
    if target is None or not hasattr(target, "cache_info"):
        return _Capabilities(False, f"JAX {jax.__version__} has no cached partial_eval.trace_to_jaxpr to observe")
    return _Capabilities(True, "")


def _is_top_level_fn():
    from jax._src import core

    trace_ctx = getattr(core, "trace_ctx", None)
    if trace_ctx is not None and hasattr(trace_ctx, "is_top_level"):
        return trace_ctx.is_top_level
    if hasattr(core, "trace_state_clean"):
        return core.trace_state_clean
    return lambda: True


class _Placeholder:
    __slots__ = ("leaf",)

    def __init__(self, leaf: Leaf):
        self.leaf = leaf


_AVAL_LEAVES: dict = {}  # aval -> Leaf: avals are abstract (shape, dtype), never user data
_MAX_AVAL_LEAVES = 4096


def _aval_leaf(aval: Any) -> Leaf:
    try:
        return _AVAL_LEAVES[aval]
    except (KeyError, TypeError):
        pass
    leaf = _new_aval_leaf(aval)
    try:
        if len(_AVAL_LEAVES) >= _MAX_AVAL_LEAVES:
            _AVAL_LEAVES.clear()
        _AVAL_LEAVES[aval] = leaf
    except TypeError:  # an unhashable aval
        pass
    return leaf


def _new_aval_leaf(aval: Any) -> Leaf:
    try:
        shape = tuple(int(d) if isinstance(d, int) else str(d) for d in aval.shape)
        dtype = str(aval.dtype)
        weak = bool(getattr(aval, "weak_type", False))
    except Exception:
        return Leaf("array", clip(str(aval), 80), ("array", str(aval), "", False, None))
    sharding = None
    try:
        sh = getattr(aval, "sharding", None)
        mesh = getattr(sh, "mesh", None)
        if sh is not None and mesh is not None and not getattr(mesh, "empty", True):
            sharding = clip(str(getattr(sh, "spec", sh)), 80)
    except Exception:
        sharding = None
    return array_leaf(shape, dtype, weak, sharding)


def _keystr(keypath: tuple) -> str:
    """`jax.tree_util.keystr` of a key path, without running a dict key's own `repr`."""
    parts = []
    for key in keypath:
        kind = type(key).__name__
        if kind == "DictKey":
            parts.append(f"[{_dict_key_text(key.key)}]")
        elif kind == "SequenceKey":
            parts.append(f"[{key.idx}]")
        elif kind == "GetAttrKey":
            parts.append(f".{key.name}")
        else:
            parts.append(f"[{_dict_key_text(getattr(key, 'key', '?'))}]")
    return "".join(parts)


def _dict_key_text(key: Any) -> str:
    if type(key) is str:
        return repr(key)
    if type(key) is int:
        return str(key)
    return summarize_static(key).text  # bounded, runs no user __repr__


_TRACEBACK_EXCLUDED: list = []


class Probe:
    """Installs and removes the observation points; forwards plain records to `sink`."""

    def __init__(self, sink: Any):
        self._sink = sink
        self._tls = threading.local()
        self._installed = False
        self._orig_trace = None
        self._wrapper = None
        self._orig_compile = None
        self._compile_wrapper = None
        self._listeners: list[tuple[str, Any]] = []
        self.capabilities = _Capabilities(False, "not installed")
        self._library_dirs: tuple[str, ...] = ()
        self.cell_label = None  # set by the IPython glue: filename -> "In[5]" or None
        self.capture_cost = True  # equation counts, unrolled loops, FLOPs and bytes of each compile

    # ----------------------------------------------------------------- install
    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> str:
        """Install; returns a one-line notice of what is degraded ('' when nothing is)."""
        if self._installed:
            return ""
        import jax
        from jax import monitoring

        self.capabilities = detect()
        self._library_dirs = self._find_library_dirs()
        self._register(monitoring, "register_event_duration_secs_listener",
                       "unregister_event_duration_listener", self._on_duration)
        self._register(monitoring, "register_event_listener", "unregister_event_listener", self._on_event)
        if self.capabilities.trace_hook:
            from jax._src.interpreters import partial_eval as pe

            self._is_top_level = _is_top_level_fn()
            self._fun_name = self._find_fun_name()
            self._static_type = self._find_static_type()
            self._orig_trace = pe.trace_to_jaxpr
            self._wrapper = self._make_wrapper(self._orig_trace)
            pe.trace_to_jaxpr = self._wrapper
            self._install_compile_hook()
            self._exclude_from_tracebacks()
        self._installed = True
        if self.capabilities.trace_hook:
            return ""
        if not self._listeners:  # JAX < 0.8.1: jax.monitoring cannot remove a listener again
            return (f"jaxtrace_nb: {self.capabilities.reason}, and its jax.monitoring cannot unregister "
                    "a listener; recording nothing.")
        return (f"jaxtrace_nb: {self.capabilities.reason}; recording traces and their seconds per "
                "function name only (no retrace causes, leaves or locations).")

    def uninstall(self) -> None:
        if not self._installed:
            return
        from jax import monitoring

        for unregister_name, callback in self._listeners:
            unregister = getattr(monitoring, unregister_name, None)
            if unregister is not None:
                try:
                    unregister(callback)
                except Exception:
                    pass
        self._listeners = []
        if self._wrapper is not None:
            from jax._src.interpreters import partial_eval as pe

            if pe.trace_to_jaxpr is self._wrapper:
                pe.trace_to_jaxpr = self._orig_trace
            else:  # someone wrapped on top of us: leave their wrapper, make ours a no-op
                self._wrapper.active = False
        self._wrapper = None
        if self._compile_wrapper is not None:
            from jax._src import compiler

            if compiler.compile_or_get_cached is self._compile_wrapper:
                compiler.compile_or_get_cached = self._orig_compile
            else:
                self._compile_wrapper.active = False
        self._compile_wrapper = None
        self._installed = False

    def _install_compile_hook(self) -> None:
        """Forward `compiler.compile_or_get_cached` and keep its executable for the cost analysis.

        The executable is analysed (FLOPs, bytes) in the compile-duration listener, that is
        after JAX has measured the compile, and dropped there.
        """
        try:
            from jax._src import compiler
        except Exception:
            return
        orig = getattr(compiler, "compile_or_get_cached", None)
        if orig is None or not callable(orig):
            return
        tls = self._tls
        probe = self

        class CompileOrGetCached:
            active = True

            def __call__(self, *args, **kwargs):
                executable = orig(*args, **kwargs)
                if self.active and probe.capture_cost and tls.__dict__.get("compiling") is not None:
                    tls.executable = executable
                return executable

            def __getattr__(self, name):
                return getattr(orig, name)

        self._orig_compile = orig
        self._compile_wrapper = CompileOrGetCached()
        compiler.compile_or_get_cached = self._compile_wrapper

    def _register(self, monitoring, register_name, unregister_name, callback) -> None:
        register = getattr(monitoring, register_name, None)
        if register is None or not hasattr(monitoring, unregister_name):
            return  # never register what we could not remove again
        register(callback)
        self._listeners.append((unregister_name, callback))

    @staticmethod
    def _find_library_dirs() -> tuple[str, ...]:
        dirs = []
        for name in _LIBRARY_PACKAGES:
            module = sys.modules.get(name)
            path = getattr(module, "__file__", None)
            if path:
                dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
        return tuple(dirs)

    @staticmethod
    def _find_fun_name():
        try:
            from jax._src import pjit

            return pjit.fun_name
        except Exception:
            return lambda f: getattr(f, "__name__", type(f).__name__)

    @staticmethod
    def _find_static_type():
        try:
            from jax._src.tree_util import Static

            return Static
        except Exception:
            return None

    @staticmethod
    def _exclude_from_tracebacks() -> None:
        """Hide our forwarding frames from JAX's filtered tracebacks, once per process: JAX
        cannot remove an exclusion, and each start would add one more."""
        if _TRACEBACK_EXCLUDED:
            return
        try:
            from jax._src import traceback_util

            traceback_util.register_exclusion(os.path.dirname(__file__))
            _TRACEBACK_EXCLUDED.append(True)
        except Exception:
            pass

    # --------------------------------------------------------------- the hook
    def _make_wrapper(self, orig):
        probe = self
        cache_info = orig.cache_info

        class TraceToJaxpr:
            """Forwards to JAX's `trace_to_jaxpr`; observes real (cache-missing) traces."""

            active = True

            def __call__(self, fun, in_type, dbg, *rest, **kwargs):
                if not self.active or getattr(dbg, "traced_for", None) != "jit":
                    return orig(fun, in_type, dbg, *rest, **kwargs)
                return probe._observe_jit(orig, cache_info, fun, in_type, dbg, rest, kwargs)

            def __getattr__(self, name):  # cache_info, cache_clear, evict_weakref, ...
                return getattr(orig, name)

        return TraceToJaxpr()

    def _observe_jit(self, orig, cache_info, fun, in_type, dbg, rest, kwargs):
        tls = self._tls
        stack = tls.__dict__.get("stack")
        if stack is None:
            stack = tls.stack = []
        try:
            top = not stack and self._is_top_level()
            misses_before = cache_info().misses
        except Exception:
            return orig(fun, in_type, dbg, *rest, **kwargs)
        frame = [0]
        stack.append(frame)
        start = time.perf_counter()
        try:
            out = orig(fun, in_type, dbg, *rest, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            stack.pop()
            delta = cache_info().misses - misses_before
            if stack:
                stack[-1][0] += delta
        if delta - frame[0] > 0:
            self._record_trace(fun, in_type, dbg, top, elapsed, out)
        elif top:
            tls.last_hit = self._safe(self._identity_only, fun, in_type, dbg)
        return out

    def _safe(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            self._sink.fault("probe", e)
            return None

    def _record_trace(self, fun, in_type, dbg, top: bool, elapsed: float, out) -> None:
        info = self._safe(self._trace_info, fun, in_type, dbg, not top, elapsed)
        if info is not None and self.capture_cost:
            info = info._replace(graph=self._safe(self._graph, out))
        if info is None:
            return
        event = self._sink.on_trace(info)  # may raise RetraceError, by design
        if event is not None and top:
            pending = self._tls.__dict__.setdefault("pending", {})
            pending[info.jax_name] = event

    def _graph(self, out) -> GraphStats | None:
        """Equation counts and an unrolled loop in the traced jaxpr (plain numbers and text)."""
        closed = out[0] if isinstance(out, tuple) else out
        jaxpr = getattr(closed, "jaxpr", closed)
        eqns = getattr(jaxpr, "eqns", None)
        if eqns is None:
            return None
        names = [eqn.primitive.name for eqn in eqns]
        found = find_unrolled(names)
        where = None
        if found is not None:
            where = self._loop_location(eqns[found.start:found.start + found.period])
        return GraphStats(len(eqns), _count_equations(jaxpr, {}), found, where)

    def _loop_location(self, body) -> str | None:
        """`file:line` of the statement that every equation of an unrolled loop's body came from.

        That is the innermost user frame shared by all of the body's equations: the loop's
        line in the traced function, not a line of a helper the loop calls.
        """
        try:
            from jax._src import source_info_util
        except Exception:
            return None
        stacks = []
        for eqn in body:
            frames = source_info_util.user_frames(getattr(eqn.source_info, "traceback", None))
            stacks.append([(f.file_name, f.start_line) for f in itertools.islice(frames, 64)])
        stacks = [stack for stack in stacks if stack]
        if not stacks:
            return None
        shared = set(stacks[0]).intersection(*stacks[1:])
        for filename, line in stacks[0]:  # innermost first
            if (filename, line) in shared:
                return self._location(filename, line)
        return self._location(*stacks[0][0])

    # ------------------------------------------------------------ decoding
    def _trace_info(self, fun, in_type, dbg, nested: bool, elapsed: float) -> TraceInfo:
        jit_kind, user_fun, parts = self._split(fun, in_type)
        function, filename, line = self._user_identity(user_fun, dbg, jit_kind, parts)
        try:
            signature = self._signature(fun, in_type, jit_kind, user_fun, parts, function)
        except Exception as e:  # the trace is still recorded, by name, without a cause
            self._sink.fault("signature", e)
            signature = None
        try:
            ref = weakref.ref(user_fun) if user_fun is not None and not parts.get("fun_is_module") else None
        except TypeError:
            ref = None
        return TraceInfo(
            function=function,
            location=self._location(filename, line),
            filename=filename,
            key=self._key(function, filename),
            internal=self._is_library(filename),
            nested=nested,
            jit_kind=jit_kind,
            jax_name=str(self._fun_name(fun)),
            signature=signature,
            function_ref=ref,
            thread=threading.get_ident(),
            elapsed_s=elapsed,
        )

    def _identity_only(self, fun, in_type, dbg):
        jit_kind, user_fun, parts = self._split(fun, in_type)
        function, filename, line = self._user_identity(user_fun, dbg, jit_kind, parts)
        return (str(self._fun_name(fun)), function, self._location(filename, line),
                self._key(function, filename), self._is_library(filename), jit_kind)

    def _split(self, fun, in_type):
        """("jit" | "equinox", the user's function, decoded Equinox parts)."""
        code = getattr(fun, "__code__", None)
        if code is not None and code.co_name == "fun_wrapped" and \
                code.co_filename.replace("\\", "/").endswith("equinox/_jit.py"):
            parts = self._equinox_parts(in_type)
            if parts is not None:
                return "equinox", parts["user_fun"], parts
        return "jit", fun, {}

    def _equinox_parts(self, in_type) -> dict | None:
        root = in_type.tree
        args_td = root.children()[0]
        children = args_td.children()
        if len(children) != 3:
            return None
        donate_td, nodonate_td, static_td = children
        node = static_td.node_data()
        if node is None or self._static_type is None or node[0] is not self._static_type:
            return None
        static_val = node[1].val
        (fun_leaves, fun_td), (first_leaves, first_td), (rest_leaves, rest_td) = static_val
        vals = iter(in_type.vals)
        dynamic: dict[str, list] = {}
        for dict_td in (donate_td, nodonate_td):
            keys = dict_td.node_data()[1]
            for key, part_td in zip(keys, dict_td.children()):
                dynamic[key] = [next(vals) if c.num_leaves == 1 else None for c in part_td.children()]
        fun_is_module = not (fun_td.num_leaves == 1 and fun_td.num_nodes == 1)
        user_fun = fun_leaves[0] if not fun_is_module else None
        return {
            "fun": (fun_leaves, fun_td, dynamic.get("fun", [])),
            "first": (first_leaves, first_td, dynamic.get("first", [])),
            "rest": (rest_leaves, rest_td, dynamic.get("rest", [])),
            "user_fun": user_fun,
            "fun_is_module": fun_is_module,
            "fun_type": (fun_td.node_data() or (None,))[0] if fun_is_module else None,
        }

    def _user_identity(self, user_fun, dbg, jit_kind, parts) -> tuple[str, str, int]:
        """The user's function name (printable, bounded), file and line."""
        name, filename, line = self._raw_identity(user_fun, dbg, jit_kind, parts)
        return printable(name), filename, line

    def _raw_identity(self, user_fun, dbg, jit_kind, parts) -> tuple[str, str, int]:
        target = user_fun
        if jit_kind == "equinox" and parts.get("fun_is_module"):
            # eqx.filter_jit(module): the function is the module's __call__
            call = getattr(parts.get("fun_type"), "__call__", None)
            code = getattr(call, "__code__", None)
            if code is not None:
                return call.__qualname__, code.co_filename, code.co_firstlineno
            return f"{getattr(dbg, 'func_name', None) or '?'}.__call__", *self._src_from_dbg(dbg)
        try:
            target = inspect.unwrap(user_fun)
        except Exception:
            target = user_fun
        code = getattr(target, "__code__", None)
        if code is None and not isinstance(target, type):
            call = getattr(type(target), "__call__", None)
            code = getattr(call, "__code__", None)
        qual = getattr(user_fun, "__qualname__", None) or getattr(target, "__qualname__", None)
        if not isinstance(qual, str):
            qual = getattr(dbg, "func_name", None) or type(user_fun).__name__
        if code is not None:
            return qual, code.co_filename, code.co_firstlineno
        return qual, *self._src_from_dbg(dbg)

    @staticmethod
    def _src_from_dbg(dbg) -> tuple[str, int]:
        match = _SRC_INFO.match(str(getattr(dbg, "func_src_info", "") or ""))
        if match:
            return match["file"], int(match["line"])
        return "?", 0

    def _location(self, filename: str, line: int) -> str:
        label = None
        if self.cell_label is not None and _CELL_FILE.search(filename):
            try:
                label = self.cell_label(filename)
            except Exception:
                label = None
        return printable(f"{label or filename}:{line}", 400)

    @staticmethod
    def _key(function: str, filename: str) -> str:
        # A function defined in a notebook cell keeps its key when the cell is re-run or edited.
        where = "<cell>" if _CELL_FILE.search(filename) else filename
        return f"{where}::{function}"

    def _is_library(self, filename: str) -> bool:
        return filename.startswith(self._library_dirs) if self._library_dirs else False

    # ------------------------------------------------------------- signature
    def _signature(self, fun, in_type, jit_kind, user_fun, parts, function) -> Signature:
        leaves: dict[str, Leaf] = {}
        function_path = None
        if jit_kind == "equinox":
            function_path = self._equinox_leaves(leaves, parts, user_fun, function)
        else:
            self._jit_leaves(leaves, fun, in_type)
        return Signature(
            function_token=("id", id(user_fun)),
            context=self._trace_context(),
            leaves=leaves,
            function_path=function_path,
            jit_kind=jit_kind,
        )

    @staticmethod
    def _parameters(fn, drop_first: bool = False) -> tuple[list[str], str | None]:
        """Positional parameter names, and the *args name if any."""
        try:
            params = list(inspect.signature(fn).parameters.values())
        except Exception:
            return [], None
        if drop_first and params:
            params = params[1:]
        positional = [p.name for p in params
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
        return positional, var

    @staticmethod
    def _arg_name(i: int, positional: list[str], var: str | None) -> str:
        if i < len(positional):
            return positional[i]
        return f"{var or 'args'}[{i - len(positional)}]"

    def _jit_leaves(self, leaves, fun, in_type) -> None:
        args_td, kwargs_td = in_type.tree.children()
        vals = list(in_type.vals)
        positional, var = self._parameters(fun)
        pos = 0
        for i, child in enumerate(args_td.children()):
            pos = self._arg_leaves(leaves, self._arg_name(i, positional, var), child, vals, pos)
        kw_node = kwargs_td.node_data()
        keys = kw_node[1] if kw_node else []
        for key, child in zip(keys, kwargs_td.children()):
            pos = self._arg_leaves(leaves, str(key), child, vals, pos)

    def _arg_leaves(self, leaves, name, td, vals, pos) -> int:
        node = td.node_data()
        if node is not None and self._static_type is not None and node[0] is self._static_type:
            leaves[name] = static_leaf(summarize_static(node[1].val))
            return pos
        n = td.num_leaves
        placeholders = [_Placeholder(_aval_leaf(v)) for v in vals[pos:pos + n]]
        self._tree_leaves(leaves, name, td, placeholders)
        return pos + n

    def _tree_leaves(self, leaves, prefix, td, placeholders) -> None:
        if td.num_nodes == 1:
            leaves[prefix] = placeholders[0].leaf if td.num_leaves == 1 else NONE_LEAF
            return
        try:
            skeleton = td.unflatten(placeholders)
        except Exception:
            for i, p in enumerate(placeholders):  # a custom node refused placeholders
                leaves[f"{prefix}<leaf {i}>"] = p.leaf
        else:
            self._walk(leaves, prefix, skeleton)
        try:
            leaves[prefix + NODE_SUFFIX] = node_leaf(hash(td), "pytree structure")
        except Exception:
            pass

    def _walk(self, leaves, prefix, obj) -> None:
        """Leaves of `obj` (a skeleton made of placeholders) under the user's paths."""
        import jax

        if isinstance(obj, _Placeholder):
            leaves[prefix] = obj.leaf
            return
        if obj is None:
            leaves[prefix] = NONE_LEAF
            return
        self._static_fields(leaves, prefix, obj)
        is_module = _module_type()

        def stop(x):
            return x is not obj and (x is None or isinstance(x, _Placeholder)
                                     or (is_module is not None and isinstance(x, is_module)))

        pairs, _ = jax.tree_util.tree_flatten_with_path(obj, is_leaf=stop)
        for keypath, item in pairs:
            path = prefix + _keystr(keypath)
            if isinstance(item, _Placeholder):
                leaves[path] = item.leaf
            elif item is None:
                leaves[path] = NONE_LEAF
            else:
                self._walk(leaves, path, item)

    @staticmethod
    def _static_fields(leaves, prefix, obj) -> None:
        """Equinox `field(static=True)` values: part of the treedef, shown as leaves."""
        module = _module_type()
        if module is None or not isinstance(obj, module):
            return
        import dataclasses

        for f in dataclasses.fields(obj):
            if f.metadata.get("static", False):
                try:
                    value = object.__getattribute__(obj, f.name)
                except AttributeError:
                    continue
                leaves[f"{prefix}.{f.name}"] = static_leaf(summarize_static(value))

    def _equinox_leaves(self, leaves, parts, user_fun, function) -> str | None:
        function_path = None
        fun_leaves, fun_td, fun_dyn = parts["fun"]
        if parts["fun_is_module"]:
            skeleton = fun_td.unflatten(self._merge(fun_leaves, fun_dyn))
            self._walk(leaves, "self", skeleton)
            positional, var = self._parameters(type(skeleton).__call__, drop_first=True)
        else:
            function_path = function
            leaves[function_path] = static_leaf(summarize_static(user_fun))
            positional, var = self._parameters(user_fun)
        first_leaves, first_td, first_dyn = parts["first"]
        if first_leaves or first_dyn:
            first = self._merge(first_leaves, first_dyn)
            self._tree_leaves(leaves, self._arg_name(0, positional, var), first_td, first)
        rest_leaves, rest_td, rest_dyn = parts["rest"]
        rest_args, kwargs = rest_td.unflatten(self._merge(rest_leaves, rest_dyn))
        for j, arg in enumerate(rest_args[:-1]):  # the last is Equinox's dummy None
            self._walk(leaves, self._arg_name(j + 1, positional, var), arg)
        for key, arg in kwargs.items():
            self._walk(leaves, str(key), arg)
        return function_path

    @staticmethod
    def _merge(static_leaves, dynamic_leaves) -> list:
        merged = []
        for i, static in enumerate(static_leaves):
            aval = dynamic_leaves[i] if i < len(dynamic_leaves) else None
            if aval is not None:
                merged.append(_Placeholder(_aval_leaf(aval)))
            else:
                merged.append(_Placeholder(static_leaf(summarize_static(static))))
        return merged

    @staticmethod
    def _trace_context() -> tuple:
        try:
            from jax._src import config

            values = config.trace_context()
        except Exception:
            return ()
        try:
            names = config.trace_context_names()  # JAX >= 0.10.2
        except Exception:
            names = None
        if names is None or len(names) != len(values):
            names = [f"context[{i}]" for i in range(len(values))]
        return tuple((str(n), _context_value(v)) for n, v in zip(names, values))

    # ---------------------------------------------------------- monitoring
    def _on_duration(self, event: str, duration: float, **kwargs) -> None:
        if not event.startswith("/jax/co"):
            return
        try:
            self._duration(event, duration, kwargs.get("fun_name"))
        except Exception as e:
            self._sink.fault("timing", e)

    def _duration(self, event: str, duration: float, fun_name) -> None:
        tls = self._tls
        if event == TRACE_EVENT:
            pending = tls.__dict__.get("pending")
            target = pending.get(str(fun_name)) if pending else None
            if target is not None:
                self._sink.on_timing(target, "trace_s", duration)
            elif not self.capabilities.trace_hook:
                event = self._sink.on_public_trace(str(fun_name), duration, threading.get_ident())
                if event is not None:
                    tls.__dict__.setdefault("pending", {})[str(fun_name)] = event
        elif event == LOWER_EVENT:
            name = _jit_inner_name(fun_name)
            if name is None:
                return
            pending = tls.__dict__.get("pending")
            target = pending.pop(name, None) if pending else None
            if target is None:
                last_hit = tls.__dict__.get("last_hit")
                identity = last_hit if last_hit is not None and last_hit[0] == name else None
                tls.last_hit = None
                target = self._sink.on_compile_without_trace(name, identity, threading.get_ident(),
                                                             self.capabilities.trace_hook)
            tls.compiling = target
            if target is not None:
                self._sink.on_timing(target, "lower_s", duration)
        elif event == COMPILE_EVENT:
            target = tls.__dict__.get("compiling")
            executable = tls.__dict__.pop("executable", None)
            tls.compiling = None
            if target is not None:
                self._sink.on_timing(target, "compile_s", duration)
                if executable is not None:
                    self._sink.on_cost(target, _executable_cost(executable))
        elif event == CACHE_SAVED_EVENT:
            target = tls.__dict__.get("compiling")
            if target is not None:
                self._sink.on_timing(target, "cache_saved_s", duration)

    def _on_event(self, event: str, **kwargs) -> None:
        if event not in (CACHE_HIT_EVENT, CACHE_MISS_EVENT):
            return
        try:
            target = self._tls.__dict__.get("compiling")
            if target is not None:
                self._sink.on_cache(target, event == CACHE_HIT_EVENT)
        except Exception as e:
            self._sink.fault("timing", e)


def _context_value(value) -> str:
    """A trace-context value as text; objects by type and hash, as JAX's cache key compares them."""
    if isinstance(value, (int, float, str, bool, type(None))):
        return clip(repr(value), 80)
    try:
        token = f"{hash(value) & 0xFFFFFFFF:08x}"
    except Exception:
        token = "unhashable"
    return f"<{type(value).__name__} {token}>"


def _executable_cost(executable) -> dict:
    """FLOPs and argument / output / temporary bytes XLA reports for a compiled program."""
    cost: dict = {}
    try:
        analysis = executable.cost_analysis()
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0] if analysis else {}
        flops = analysis.get("flops") if isinstance(analysis, dict) else None
        if flops is not None and flops >= 0:
            cost["flops"] = float(flops)
    except Exception:
        pass
    try:
        stats = executable.get_compiled_memory_stats()
        cost["arg_bytes"] = int(stats.argument_size_in_bytes)
        cost["out_bytes"] = int(stats.output_size_in_bytes)
        cost["temp_bytes"] = int(stats.temp_size_in_bytes)
    except Exception:
        pass
    return cost


def _count_equations(jaxpr, memo: dict) -> int:
    """Equations of `jaxpr` and, recursively, of every sub-jaxpr (scan, cond, while, nested jit)."""
    key = id(jaxpr)
    if key in memo:
        return memo[key]
    memo[key] = 0  # a cycle cannot happen in a jaxpr, but never recurse forever
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub) if type(sub).__name__ == "ClosedJaxpr" else sub
                if type(inner).__name__ == "Jaxpr":
                    total += _count_equations(inner, memo)
    memo[key] = total
    return total


def _jit_inner_name(fun_name) -> str | None:
    name = str(fun_name)
    if name.startswith("jit(") and name.endswith(")"):
        return name[4:-1]
    return None


_MODULE_TYPE: list = []


def _module_type():
    """`equinox.Module` if Equinox is imported, else None (never imports it)."""
    if _MODULE_TYPE:
        return _MODULE_TYPE[0]
    eqx = sys.modules.get("equinox")
    if eqx is None:
        return None
    _MODULE_TYPE.append(getattr(eqx, "Module", None))
    return _MODULE_TYPE[0]
