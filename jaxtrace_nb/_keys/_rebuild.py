"""A call rebuilt from one real call's arguments (the example) and a recorded signature.

A recorded signature is the log's ``{path: leaf text}``. Each of the example's leaves at a path
the signature names is rebuilt when it can be: a dynamic leaf written as a plain array type
(``f32[8,3]``, ``f32[] (weak)``) gets that shape, dtype and weak type; a plain Python value (int,
float, bool, str, None, tuples of these) written as one gets the recorded value. What else the
signature says (a static field of a module, a function, a container's structure, a placement)
stays the example's, and is compared with the example's own signature by the caller.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from typing import Any, Callable

from .._core._values import summarize_static
from ._leaves import aval_leaf, keystr
from ._signature import _DTYPE_SHORT

_AVAL = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]( \(weak\))?$")
_DTYPE_LONG = {short: long for long, short in _DTYPE_SHORT.items()}
_PLAIN = (int, float, bool, str, type(None))
_NOT_PLAIN = object()


class Jit:
    """How a jit wrapper splits a call: every leaf is dynamic for `jax.jit` and `nnx.jit` (their
    static arguments are written as values in the log; `nnx.jit` hands JAX its graph nodes'
    leaves); only arrays for `eqx.filter_jit`."""

    JAX = "jit"
    EQUINOX = "equinox"
    NNX = "nnx"


def staged_by_trace(jit: str) -> bool:
    """Whether the wrapper stages a call with ``.trace`` (then ``.lower()``, ``.compile()``), as
    `jax.jit` and `nnx.jit` do, with every leaf dynamic; `eqx.filter_jit` lowers directly."""
    return jit in (Jit.JAX, Jit.NNX)


def array_type(text: str) -> tuple[tuple[int, ...], str, bool] | None:
    """(shape, dtype, weak) of a plain array leaf's text, else None.

    >>> array_type("f32[8,3]"), array_type("i32[] (weak)"), array_type("f32[8@d,3]")
    (((8, 3), 'float32', False), ((), 'int32', True), None)
    """
    m = _AVAL.match(text)
    if m is None:
        return None
    shape = tuple(int(d) for d in m.group(2).split(",") if d)
    return shape, _DTYPE_LONG.get(m.group(1), m.group(1)), bool(m.group(3))


def plain_value(text: str) -> Any:
    """The plain Python value a static's text writes (``'relu'``, ``3``, ``(1, 2)``), else
    `NOT_PLAIN`."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_PLAIN
    return value if is_plain(value) else _NOT_PLAIN


NOT_PLAIN = _NOT_PLAIN


def is_plain(value: Any) -> bool:
    if type(value) is tuple:
        return all(is_plain(v) for v in value)
    return type(value) in _PLAIN


def _dynamic(jit: str, value: Any) -> bool:
    if staged_by_trace(jit):
        return True
    from equinox import is_array

    return is_array(value)


@dataclasses.dataclass
class Example:
    """The example call, bound to the function's parameters, and its leaves by the log's path."""

    jit: str
    bound: inspect.BoundArguments
    leaves: dict[str, Any]
    held: frozenset = frozenset()  # paths of values held in a library's box: never rebuilt

    @classmethod
    def of(
        cls, jit: str, function, args: tuple, kwargs: dict, unbox: Callable | None = None
    ) -> Example:
        """The example call; `unbox(leaf)` gives ``(value,)`` for a library's box (an NNX
        ``Variable``, which the log names by its own path), ``()`` for any other leaf."""
        import jax

        bound = inspect.signature(function).bind(*args, **kwargs)
        leaves: dict[str, Any] = {}
        held = set()
        is_box = (lambda x: bool(unbox(x))) if unbox is not None else None
        for name, value in bound.arguments.items():
            flat, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=is_box)
            for kp, leaf in flat:
                path = name + keystr(kp)
                inside = unbox(leaf) if unbox is not None else ()
                if inside:
                    (leaf,) = inside
                    held.add(path)
                leaves[path] = leaf
        return cls(jit, bound, leaves, frozenset(held))

    def text(self, path: str, like: str) -> str | None:
        """The example's own text at `path`, written as the recorded text `like` is (an array's
        type, or a static value's summary)."""
        if path not in self.leaves:
            return None
        value = self.leaves[path]
        try:
            if array_type(like) is not None and _dynamic(self.jit, value):
                import jax

                return aval_leaf(jax.typeof(value)).text
            return summarize_static(value).text
        except Exception:
            return None

    def plan(self, recorded: dict[str, str]) -> dict[str, Any]:
        """The rebuilt leaves for a recorded signature: path -> `jax.ShapeDtypeStruct` (for
        `jax.jit`), a zero-stride NumPy view of one element (for `eqx.filter_jit`, whose partition
        keeps only arrays dynamic; not for a weak-typed leaf, which NumPy cannot write) or a plain
        value. The paths not in it stay the example's; each rebuilt leaf is written as recorded,
        so a rebuilt call JAX already holds is the recorded one where the rest agrees."""
        import jax
        import numpy as np

        out: dict[str, Any] = {}
        for path, text in recorded.items():
            if path not in self.leaves or path in self.held:
                continue
            value = self.leaves[path]
            found = array_type(text)
            if found is not None and _dynamic(self.jit, value):
                shape, dtype, weak = found
                if staged_by_trace(self.jit):
                    out[path] = jax.ShapeDtypeStruct(shape, np.dtype(dtype), weak_type=weak)
                elif not weak:  # a NumPy array is never weak-typed: not rebuilt, compared
                    out[path] = np.broadcast_to(np.zeros((), dtype=np.dtype(dtype)), shape)
            elif found is None and is_plain(value):
                plain = plain_value(text)
                if plain is not _NOT_PLAIN:
                    out[path] = plain
        return out

    def call(self, plan: dict[str, Any]) -> tuple[tuple, dict]:
        """(args, kwargs) of the example with the planned leaves in place."""
        import jax

        bound = inspect.BoundArguments(self.bound.signature, dict(self.bound.arguments))
        for name, value in bound.arguments.items():
            bound.arguments[name] = jax.tree_util.tree_map_with_path(
                lambda kp, v, name=name: plan.get(name + keystr(kp), v), value
            )
        return bound.args, bound.kwargs

    def is_its_signature(self, recorded: dict[str, str]) -> bool:
        """Whether a recorded signature agrees with the example at every leaf of the example."""
        return all(
            path in recorded and self.text(path, recorded[path]) == recorded[path]
            for path in self.leaves
        )


def not_rebuilt(recorded: dict[str, str], plan: dict, own: dict[str, str]) -> list[str]:
    """The paths where a recorded signature differs from the example's own signature `own` and
    the plan does not rebuild them (a module's static field, a function, a structure)."""
    paths = dict.fromkeys([*recorded, *own])
    return [p for p in paths if p not in plan and recorded.get(p) != own.get(p)]


def differences(
    recorded: dict[str, str], other: dict[str, str], paths, what: str = "example", limit: int = 3
) -> str:
    """The reason a signature was not rebuilt: the first `limit` paths where it differs from
    `other`, the example's signature or the rebuilt call's (`what`)."""
    paths = list(paths)
    parts = [
        f"`{p}`: recorded {recorded.get(p, 'not passed')}, {what} {other.get(p, 'not passed')}"
        for p in paths[:limit]
    ]
    more = f" (and {len(paths) - limit} more)" if len(paths) > limit else ""
    return f"differs from the {what} at " + "; ".join(parts) + more
