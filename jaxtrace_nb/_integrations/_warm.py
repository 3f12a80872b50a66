"""``python -m jaxtrace_nb run --warm LOG…``: each function's recorded signatures compiled ahead.

At the first trace of a ``jax.jit`` function in the run, the signatures that the logs recorded for
it are handed to `jt.precompile`, with that call as the example: the jitted function is made
again from JAX's own record of its parameters (`_internals.remade_jit`: the same traces and
compiles the user's jitted function looks up), and the call's arguments are kept as their
abstract values (an array as a ``jax.ShapeDtypeStruct``, read now: a donated array is gone once
the call returns) and its static values as they are. The call's own signature is the trace under
way (`held`); the others compile on the workers while the program goes on, once the program's
own compile of that call has ended (not to compete with it). Every process of a
``jax.distributed`` run given the same logs precompiles the same set.

Only what the probe sees at a trace is read there; the rest runs on one daemon thread, so that
the trace itself only pays for reading its arguments' shapes. An ``eqx.filter_jit`` function is
warmed through the user's own wrapper (read from Equinox's ``_call`` frame above the trace), with
the call's arrays made anew as NumPy views of one zero (`_filter_jit_example`). An ``nnx.jit``
function likewise, through ``JitWrapped.__call__``'s frame, with the call's graph nodes copied
abstractly (`_nnx_example`: each array of their state a
``jax.ShapeDtypeStruct``; NNX's own split and merge keep objects reached twice shared).
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Any

from .._adapters.equinox import filter_jit_call
from .._adapters.flax_nnx import nnx_jit_call
from .._core._vocabulary import JitKind
from .._jax._internals import remade_jit

_SAID: set[str] = set()
WAIT_S = 60.0  # the longest a function's warm-up waits for the program's own first compile


class Warm:
    """What `run --warm` holds: the logs' events (read once, on the warm thread), the functions
    already warmed, and the handles of their precompiles."""

    def __init__(self, logs: list[str], session):
        from . import _precompile  # (now: its exit hook runs before the program's end)

        self._exiting = _precompile.exiting
        self._lock = threading.Lock()
        self.logs = list(logs)
        self.session = session
        self.handles: list[tuple[str, Any]] = []  # (function, Precompile)
        self._seen: set[str] = set()
        self._events: list | None = None
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # -------------------------------------------------------------- at a trace (the probe)
    def on_trace(self, record, frame) -> None:
        """A top-level trace of a function of the user's: the first of its function starts its
        precompile (read now, done on the warm thread)."""
        identity = record.identity
        if identity is None or identity.internal:
            return
        with self._lock:
            if identity.key in self._seen:
                return
            self._seen.add(identity.key)
        if identity.jit_kind == JitKind.EQUINOX:
            found = filter_jit_call(frame)
            example = _filter_jit_example(*found[1:]) if found is not None else None
            if example is None:
                _say_once(
                    "equinox",
                    "jaxtrace_nb run --warm: an eqx.filter_jit call not read (this Equinox, or "
                    "a weak-typed array argument that is not a scalar); not warmed",
                )
                return
            self._todo.put((record, found[0], None, *example))
        elif identity.jit_kind == JitKind.NNX:
            found = nnx_jit_call(frame)
            try:
                example = _nnx_example(found[1:]) if found is not None else None
            except Exception:  # (NNX could not split the call's arguments)
                example = None
            if example is None:
                _say_once(
                    "nnx",
                    "jaxtrace_nb run --warm: an nnx.jit call not read (this Flax); not warmed",
                )
                return
            self._todo.put((record, found[0], None, *example))
        elif identity.jit_kind == JitKind.JIT:
            layout = self.session.probe.internals.layout
            call = layout.jit_call(frame) if layout is not None else None
            if call is None:
                _say_once(
                    "reads", "jaxtrace_nb run --warm: this JAX's jit calls are not read; not warmed"
                )
                return
            args, kwargs = _abstract_call(call)
            self._todo.put((record, call.fun, call.info, args, kwargs))
        else:
            _say_once(
                identity.jit_kind,
                f"jaxtrace_nb run --warm: functions jitted with {identity.jit_kind} are not "
                "warmed (only jax.jit's, eqx.filter_jit's and nnx.jit's)",
            )
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="jaxtrace_nb-warm", daemon=True
                )
                self._thread.start()

    # -------------------------------------------------------------- on the warm thread
    def _run(self) -> None:
        while not self._exiting():
            record, fun, info, args, kwargs = self._todo.get()
            try:
                self._start(record, fun, info, args, kwargs)
            except Exception as e:  # a failure here is ours: counted, never the program's
                self.session.fault("warm", e)

    def _start(self, record, fun, info, args, kwargs) -> None:
        from .._jax._layouts import JitCall
        from ._precompile import precompile

        if self._events is None:
            from .._log._persist import load_events

            self._events = [e for path in self.logs for e in load_events(path)]
        # (an eqx.filter_jit wrapper is the user's own: no jit parameters to make it again from)
        jitted = fun if info is None else remade_jit(JitCall(fun, info, args, kwargs))
        if jitted is None:
            _say_once(
                "maker", "jaxtrace_nb run --warm: this JAX cannot make a jit again; not warmed"
            )
            return
        self._after_its_compile(record.identity.key)
        if record.identity.jit_kind == JitKind.EQUINOX:  # (its keys and weak scalars: made here)
            try:
                args, kwargs = made(args, kwargs)
            except _NotMade as e:
                _say_once("made", f"jaxtrace_nb run --warm: {e} not made anew; not warmed")
                return
        own = None
        signature = getattr(record, "signature", None)
        if signature is not None:
            own = {path: leaf.text for path, leaf in signature.get().leaves.items()}
        handle = precompile(jitted, args, kwargs, log=self._events, own=own)
        self.handles.append((record.identity.name, handle))

    def _after_its_compile(self, key: str) -> None:
        """Wait (at most `WAIT_S`) until a compile of the function's trace has ended: the workers'
        traces and compiles would otherwise compete with the program's own first one."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not self._exiting():
            state = self.session.lifecycle.functions.get(key)
            if state is not None and len(state.compile_ends):
                return
            time.sleep(0.01)


def _abstract_call(call) -> tuple[tuple, dict]:
    """The call's arguments with every array of a traced argument as its abstract value (read
    now), static arguments and Python values as they are."""
    import jax

    static_nums = set(call.static_argnums)
    static_names = set(call.static_argnames)
    args = tuple(
        value if i in static_nums else jax.tree_util.tree_map(_abstract, value)
        for i, value in enumerate(call.args)
    )
    kwargs = {
        name: value if name in static_names else jax.tree_util.tree_map(_abstract, value)
        for name, value in call.kwargs.items()
    }
    return args, kwargs


class _Later:
    """An array of an ``eqx.filter_jit`` call to make on the warm thread (JAX ops run there, not on
    the program's thread): a weak-typed scalar (`dtype`) or PRNG keys (`impl`) of `shape`."""

    __slots__ = ("shape", "dtype", "impl")

    def __init__(self, shape: tuple, dtype: Any = None, impl: Any = None):
        self.shape, self.dtype, self.impl = shape, dtype, impl

    def make(self) -> Any:
        import jax

        if self.impl is not None:  # keys of that implementation (their values never matter)
            key = jax.random.key(0, impl=self.impl)
            return jax.random.split(key, self.shape) if self.shape else key
        zero = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}.get(self.dtype.kind)
        made = jax.numpy.asarray(zero) if zero is not None else None
        if made is None or made.dtype != self.dtype or not made.weak_type:
            raise _NotMade(f"a weak-typed {self.dtype} array")
        return made


class _NotMade(Exception):
    pass


def _filter_jit_example(args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """An ``eqx.filter_jit`` call's arguments with every array made anew, holding none of the
    user's: a read-only zero-stride NumPy view of one element (Equinox keeps it dynamic, of the
    same type); a weak-typed scalar, or PRNG keys, as a `_Later` made on the warm thread
    (`made`); None where an array cannot be made so (a weak-typed array that is not a scalar)."""
    import equinox as eqx
    import jax
    import numpy as np

    failed = []

    def anew(leaf: Any) -> Any:
        if not eqx.is_array(leaf):
            return leaf
        shape = tuple(leaf.shape)
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            return _Later(shape, impl=jax.random.key_impl(leaf))
        dtype = np.dtype(leaf.dtype)
        if not getattr(leaf, "weak_type", False):
            return np.broadcast_to(np.zeros((), dtype=dtype), shape)
        if shape:
            failed.append(shape)
            return None
        return _Later(shape, dtype)

    example = jax.tree_util.tree_map(anew, (args, kwargs))
    return None if failed else example


def _nnx_example(value: Any) -> Any:
    """`value` (an argument) with each NNX graph node in it copied, every array of its state as
    a ``jax.ShapeDtypeStruct`` (``nnx.split``, then ``nnx.merge``): no array of the original is
    held. Raises where NNX cannot split it."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(value)
    return nnx.merge(graphdef, jax.tree_util.tree_map(_abstract, state))


def made(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with each `_Later` made (on the warm thread); `_NotMade` where one cannot be."""
    import jax

    return jax.tree_util.tree_map(
        lambda v: v.make() if isinstance(v, _Later) else v, (args, kwargs)
    )


def _abstract(leaf: Any) -> Any:
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is None or dtype is None or isinstance(leaf, (int, float, complex, bool)):
        return leaf
    import jax

    return jax.ShapeDtypeStruct(
        tuple(shape), dtype, weak_type=bool(getattr(leaf, "weak_type", False))
    )


def _say_once(what: str, text: str) -> None:
    if what not in _SAID:
        _SAID.add(what)
        print(text, file=sys.stderr)
