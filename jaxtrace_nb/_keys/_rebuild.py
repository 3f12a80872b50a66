"""A call rebuilt from one real call's arguments (the example) and a recorded signature.

A recorded signature is the log's ``{path: leaf text}``. Each of the example's leaves at a path
the signature names is rebuilt when it can be: a dynamic leaf written as a plain array type
(``f32[8,3]``, ``f32[] (weak)``) gets that shape, dtype and weak type; a plain Python value (int,
float, bool, str, None, tuples of these) written as one gets the recorded value; a committed
placement is given to the rebuilt leaf (`Example.place`). What else the signature says (a static
field of a module, a function, a container's structure) stays the example's, and is compared with
the example's own signature by the caller.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from typing import Any, Callable

from .._core._values import summarize_static
from ._leaves import aval_leaf, keystr
from ._lowering import UNCOMMITTED
from ._signature import _DTYPE_SHORT

# an array leaf's text: dtype, dims (an Explicit mesh axis as ``8@d``), weak type, Auto mesh axes
_AVAL = re.compile(r"^([a-z0-9]+)\[([0-9a-zA-Z_@+,]*)\]( \(weak\))?( \{mesh [^{}]*\})?$")
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
    return None if m is None or m.group(4) or "@" in m.group(2) else _aval_parts(m)


def placed_array_type(text: str) -> tuple[tuple[int, ...], str, bool] | None:
    """(shape, dtype, weak) of an array leaf's text that may carry mesh axes (``f32[8@d,3]``,
    ``f32[8,3] {mesh d=2}``); the sharding itself comes from the recorded placement.

    >>> placed_array_type("f32[8@d,3]"), placed_array_type("f32[8,3] {mesh d=2}")
    (((8, 3), 'float32', False), ((8, 3), 'float32', False))
    """
    m = _AVAL.match(text)
    return None if m is None else _aval_parts(m)


def _aval_parts(m: re.Match) -> tuple[tuple[int, ...], str, bool] | None:
    try:
        shape = tuple(int(d.partition("@")[0]) for d in m.group(2).split(",") if d)
    except ValueError:
        return None
    return shape, _DTYPE_LONG.get(m.group(1), m.group(1)), bool(m.group(3))


def placed(text: str | None) -> bool:
    """Whether a recorded placement commits the argument (to a device, or sharded)."""
    return text is not None and text.split(", ")[0] != UNCOMMITTED


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
    keywords: frozenset = frozenset()  # the names the example passed by keyword

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
        for name, value, _ in _named(bound):
            flat, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=is_box)
            for kp, leaf in flat:
                path = name + keystr(kp)
                inside = unbox(leaf) if unbox is not None else ()
                if inside:
                    (leaf,) = inside
                    held.add(path)
                leaves[path] = leaf
        return cls(jit, bound, leaves, frozenset(held), frozenset(kwargs))

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

    def plan(self, recorded: dict[str, str], placements: dict[str, str] | None = None):
        """The rebuilt leaves for a recorded signature: path -> `jax.ShapeDtypeStruct` (for
        `jax.jit`), a zero-stride NumPy view of one element (for `eqx.filter_jit`, whose partition
        keeps only arrays dynamic; not for a weak-typed leaf, which NumPy cannot write) or a plain
        value. The paths not in it stay the example's; each rebuilt leaf is written as recorded,
        so a rebuilt call JAX already holds is the recorded one where the rest agrees. A leaf
        with a committed placement (`placements`) is planned without one: `place` gives it."""
        import jax
        import numpy as np

        placements = placements or {}
        out: dict[str, Any] = {}
        for path, text in recorded.items():
            if path not in self.leaves or path in self.held:
                continue
            value = self.leaves[path]
            found = array_type(text)
            if found is None and placed(placements.get(path)):
                found = placed_array_type(text)
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

    def place(
        self, plan: dict[str, Any], placements: dict[str, str], recorded: dict[str, str]
    ) -> str | None:
        """Gives each planned array leaf its recorded placement (in place): a device (``committed
        to cpu:1``, the device of that name here), or a `PartitionSpec` on a mesh (`_mesh`) that
        has its axes. A `jax.ShapeDtypeStruct` gets the sharding; an `eqx.filter_jit` leaf (a
        NumPy view, which Equinox keeps dynamic) is to become an array of zeros put there, since
        Equinox stages only arrays (`call` puts it: memory of its size until the trace and
        lowering end). Returns why a placement cannot be rebuilt, naming the argument, else
        None."""
        import jax
        import numpy as np

        for path, text in placements.items():
            if not placed(text):
                continue
            where = text.removesuffix(", donated")  # donation is the jitted function's own
            if ", layout " in where:
                return f"`{path}`: placement {text} (a layout is not rebuilt)"
            planned = plan.get(path)
            if not isinstance(planned, (jax.ShapeDtypeStruct, np.ndarray)):
                if path in self.leaves and self.text(path, "f32[]") is not None:
                    continue  # the example's own array, with its own placement: compared later
                return f"`{path}`: placement {text} of a leaf not rebuilt"
            sharding = self._sharding(where, recorded.get(path, ""))
            if isinstance(sharding, str):
                return f"`{path}`: {sharding}"
            if isinstance(planned, jax.ShapeDtypeStruct):
                plan[path] = jax.ShapeDtypeStruct(
                    planned.shape, planned.dtype, weak_type=planned.weak_type, sharding=sharding
                )
            else:
                plan[path] = _ToPlace(planned, sharding)
        return None

    def _sharding(self, where: str, leaf: str) -> Any:
        """The sharding a placement's text writes (`leaf`: the recorded type's text, which may
        name the mesh's axes and sizes), else why not (text)."""
        import jax

        device_text = where.removeprefix("committed to ")
        if device_text != where:
            for device in jax.devices():
                if summarize_static(device).text == device_text:
                    return jax.sharding.SingleDeviceSharding(device)
            return f"no device {device_text} here"
        spec = _spec(where.removeprefix("sharded "))
        if where.startswith("sharded ") and spec is not None:
            axes = {a for part in spec if part is not None for a in _names(part)}
            mesh = self._mesh(axes, leaf)
            if mesh is None:
                return (
                    f"no mesh with axes {sorted(axes)} as recorded ({leaf}) among the "
                    "example's arrays"
                )
            return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
        return f"placement {where} not rebuilt (only a device or a PartitionSpec is)"

    def _mesh(self, axes: set[str], leaf: str) -> Any:
        """A concrete mesh for the spec's `axes` and the recorded type `leaf`: one the example's
        arrays are placed on, with those axes and, where the type names them (``{mesh d=2}``), the
        same axes, sizes and Auto axis types (an Explicit axis a dimension uses is written
        ``8@d``); else, where the type names the mesh and the spec uses each of its axes (so each
        is Auto), ``jax.make_mesh`` of them (its device order: a mesh the program made otherwise
        compiles again). None where neither."""
        import jax

        sizes = _mesh_sizes(leaf)
        auto = getattr(getattr(jax.sharding, "AxisType", None), "Auto", None)
        for value in self.leaves.values():
            mesh = getattr(getattr(value, "sharding", None), "mesh", None)
            names = tuple(getattr(mesh, "axis_names", None) or ())
            if not names or not axes <= set(names) or getattr(mesh, "devices", None) is None:
                continue
            if sizes:
                types = tuple(getattr(mesh, "axis_types", None) or ())
                if dict(getattr(mesh, "shape", {})) != sizes:
                    continue
                if auto is not None and types and any(types[names.index(a)] != auto for a in axes):
                    continue
            return mesh
        if sizes and set(sizes) == axes:
            more = {"axis_types": (auto,) * len(sizes)} if auto is not None else {}
            try:
                return jax.make_mesh(tuple(sizes.values()), tuple(sizes), **more)
            except Exception:
                return None
        return None

    def call(self, plan: dict[str, Any]) -> tuple[tuple, dict]:
        """(args, kwargs) of the example with the planned leaves in place, each argument passed
        as the example passed it, by position or by keyword (JAX's key keeps them apart). A leaf
        to place (`eqx.filter_jit`'s) is put on its devices here, after every check before the
        trace."""
        import jax

        def planned(kp, value, name):
            found = plan.get(name + keystr(kp), value)
            return found.put() if isinstance(found, _ToPlace) else found

        args: list = []
        kwargs: dict = {}
        for name, value, kind in _named(self.bound):
            value = jax.tree_util.tree_map_with_path(
                lambda kp, v, name=name: planned(kp, v, name), value
            )
            if kind is inspect.Parameter.VAR_POSITIONAL:
                args.extend(value)
            elif kind is inspect.Parameter.POSITIONAL_ONLY or (
                kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and name not in self.keywords
            ):
                args.append(value)
            else:  # by keyword, keyword-only, or an entry of ``**kwargs``
                kwargs[name] = value
        return tuple(args), kwargs

    def committed(self) -> bool:
        """Whether an array of the example is committed (to a device, or sharded)."""
        return any(getattr(v, "committed", False) is True for v in self.leaves.values())

    def is_its_signature(self, recorded: dict[str, str]) -> bool:
        """Whether a recorded signature agrees with the example at every leaf of the example."""
        return all(
            path in recorded and self.text(path, recorded[path]) == recorded[path]
            for path in self.leaves
        )


def _named(bound: inspect.BoundArguments):
    """(name, value, kind) of each argument as the log names it: a parameter by its name, an
    entry of ``**kwargs`` by its key (kind `VAR_KEYWORD`)."""
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            for key, entry in value.items():
                yield key, entry, kind
        else:
            yield name, value, kind


@dataclasses.dataclass(frozen=True)
class _ToPlace:
    """A planned `eqx.filter_jit` leaf (a zero-stride NumPy view) and the sharding to put it on."""

    view: Any
    sharding: Any

    def put(self):
        import jax

        return jax.device_put(self.view, self.sharding)


_MESH = re.compile(r" \{mesh ([^{}]*)\}$")


def _mesh_sizes(leaf: str) -> dict[str, int]:
    """The mesh axes and sizes a type's text names (``f32[8,4] {mesh d=2,e=4}``), else {}."""
    m = _MESH.search(leaf)
    if m is None:
        return {}
    sizes = {}
    for part in m.group(1).split(","):
        name, _, size = part.partition("=")
        if not size.isdigit():
            return {}
        sizes[name] = int(size)
    return sizes


def _spec(text: str) -> tuple | None:
    """The parts of a `PartitionSpec`'s text (``P('d',)``, ``PartitionSpec(None, ('a', 'b'))``),
    else None (``unreduced=``, clipped text)."""
    for head in ("P(", "PartitionSpec("):
        if text.startswith(head) and text.endswith(")"):
            try:
                parts = ast.literal_eval("[" + text[len(head) : -1] + "]")
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None
            if isinstance(parts, list) and all(
                p is None or isinstance(p, str) or _all_str(p) for p in parts
            ):
                return tuple(parts)
    return None


def _all_str(part: Any) -> bool:
    return isinstance(part, tuple) and all(isinstance(a, str) for a in part)


def _names(part: Any) -> tuple:
    return (part,) if isinstance(part, str) else tuple(part)


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


_ROOT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*")


def _arguments(signature: dict[str, str]) -> list[str]:
    """The arguments of a signature's paths (``params['w']`` → ``params``), in its order."""
    roots = (_ROOT.match(path) for path in signature)
    return list(dict.fromkeys(m.group(0) for m in roots if m is not None))


def passed_otherwise(recorded: dict[str, str], other: dict[str, str], what: str) -> str | None:
    """Why two signatures of the same arguments are not one call's: their arguments come in
    another order. JAX's key holds the positional arguments first, then the keyword ones by
    name, so one call passed an argument by position that the other passed by keyword (where
    both orders agree, as when only the last arguments are passed by keyword, this cannot
    tell). None where the order agrees."""
    mine, theirs = _arguments(recorded), _arguments(other)
    if sorted(mine) != sorted(theirs) or mine == theirs:
        return None
    return (
        f"the recorded call passed its arguments otherwise than the {what} (by position or by "
        f"keyword: JAX's key keeps them apart): recorded ({', '.join(mine)}), {what} "
        f"({', '.join(theirs)})"
    )
