"""The leaves of a signature made from what JAX holds: abstract values, key paths, containers.

`aval_leaf` reads an abstract value (shape, dtype, weak type, sharding, the rest of its type)
once and keeps the leaf; `keystr` writes a key path as `jax.tree_util.keystr` does, without
running a dict key's own ``repr``; the node leaves say what a dict, list, tuple or custom node
is, as JAX's treedef compares it. A `Placeholder` stands for one array in a skeleton of the
arguments. No leaf keeps a reference to anything of the user's.
"""

from __future__ import annotations

from typing import Any

from .._core._bounded import Bounded
from .._core._values import clip, summarize_static
from .._core._vocabulary import LeafKind
from .._core._witness import Witness
from ._signature import CUSTOM_NODE, Leaf, array_leaf, node_leaf

BUILTIN_CONTAINERS = (dict, list, tuple)


class Placeholder:
    """Stands for one dynamic leaf (flat position `index`) in a skeleton of the arguments."""

    __slots__ = ("leaf", "index")

    def __init__(self, leaf: Leaf, index: int = -1):
        self.leaf = leaf
        self.index = index


def placeholders(td: Any, vals: list, start: int) -> list:
    """One `Placeholder` for each leaf of `td`, whose leaves are `vals[start:]` (abstract values,
    or placeholders already): the items to rebuild the argument from as a skeleton."""
    return [
        v if type(v) is Placeholder else Placeholder(aval_leaf(v), start + i)
        for i, v in enumerate(vals[start : start + td.num_leaves])
    ]


# ------------------------------------------------------------------- arrays
_AVAL_LEAVES = Bounded(4096)  # aval -> Leaf: avals are abstract (shape, dtype), never user data


def aval_leaf(aval: Any) -> Leaf:
    """The leaf of one abstract value, with the value itself as its `witness` (JAX compares avals
    with its own ``==``; from JAX 0.9 they are interned, and ``==`` is identity)."""
    try:
        return _AVAL_LEAVES[aval]
    except (KeyError, TypeError):
        pass
    leaf = _new_aval_leaf(aval)
    try:
        _AVAL_LEAVES.put(aval, leaf)
    except TypeError:  # an unhashable aval
        pass
    return leaf


def _new_aval_leaf(aval: Any) -> Leaf:
    try:
        shape = tuple(int(d) if isinstance(d, int) else str(d) for d in aval.shape)
        dtype = dtype_name(aval.dtype)
        weak = bool(getattr(aval, "weak_type", False))
    except Exception:
        return Leaf(
            LeafKind.ARRAY, clip(str(aval), 80), ("array", str(aval), "", False, None), witness=aval
        )
    return array_leaf(
        shape,
        dtype,
        weak,
        _explicit_sharding(aval, len(shape)),
        aval,
        _type_extras(aval),
        _abstract_kind(aval),
    )


_ARRAY_AVALS = frozenset({"ShapedArray", "DShapedArray", "ConcreteArray"})


def _abstract_kind(aval: Any) -> str:
    """JAX's kind of abstract value when it is not an array's: ``Ref`` for ``jax.new_ref``'s
    ``AbstractRef`` (JAX writes it ``Ref{f32[3]}``), else the type's own name."""
    name = type(aval).__name__
    if name in _ARRAY_AVALS:
        return ""
    return name.removeprefix("Abstract") or name


def _type_extras(aval: Any) -> str:
    """The parts of an abstract value's type beyond shape, dtype, weak type and mesh axes, where
    they are not the default: its varying manual axes (under ``shard_map``) and its memory space."""
    parts = []
    try:
        manual = getattr(aval, "manual_axis_type", None)  # JAX 0.10
        varying = (
            getattr(manual, "varying", None) if manual is not None else getattr(aval, "vma", None)
        )
        if varying:
            parts.append("varying " + ",".join(sorted(map(str, varying))))
        for name in ("unreduced", "reduced"):
            axes = getattr(manual, name, None) if manual is not None else None
            if axes:
                parts.append(f"{name} " + ",".join(sorted(map(str, axes))))
        sharding = getattr(aval, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        shape = getattr(mesh, "shape_tuple", None) or ()
        if shape and not _explicit_sharding(aval, len(getattr(aval, "shape", ()))):
            parts.append("mesh " + ",".join(f"{name}={size}" for name, size in shape))
        space = getattr(aval, "memory_space", None)
        if space is not None and getattr(space, "name", "Device") != "Device":
            parts.append(f"memory {getattr(space, 'name', space)}")
    except Exception:
        return ""
    return clip(", ".join(parts), 60)


_DTYPE_NAMES = Bounded(256)  # dtype -> its name: numpy's str() of a dtype takes microseconds


def dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES.put(dtype, str(dtype))
    return name


def _explicit_sharding(aval: Any, ndim: int) -> tuple | None:
    """The mesh axes of each dimension when the type carries a sharding (explicit mesh axes)."""
    try:
        sharding = getattr(aval, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if sharding is None or mesh is None or getattr(mesh, "empty", True):
            return None
        spec = tuple(sharding.spec) + (None,) * ndim
        axes = tuple(
            None if s is None else "+".join(s) if isinstance(s, tuple) else str(s)
            for s in spec[:ndim]
        )
        return axes if any(axes) else None
    except Exception:
        return None


# ---------------------------------------------------------------- key paths
def keystr(keypath: tuple) -> str:
    """`jax.tree_util.keystr` of a key path, without running a dict key's own `repr`."""
    parts = []
    for key in keypath:
        kind = type(key).__name__
        if kind == "DictKey":
            parts.append(f"[{dict_key_text(key.key)}]")
        elif kind == "SequenceKey":
            parts.append(f"[{key.idx}]")
        elif kind == "GetAttrKey":
            parts.append(f".{key.name}")
        elif kind == "FlattenedIndexKey":
            parts.append(f"[{key.key}]")
        else:
            parts.append(f"[{dict_key_text(getattr(key, 'key', '?'))}]")
    return "".join(parts)


def dict_key_text(key: Any) -> str:
    """A dict key as a path writes it: a string's ``repr``, an int, else a bounded summary."""
    if type(key) is str:
        return repr(key)
    if type(key) is int:
        return str(key)
    return summarize_static(key).text  # bounded, runs no user __repr__


def child_keys(kind: type, aux: Any, n: int) -> list[str] | None:
    """The path suffix of each child of a dict, list, tuple or named tuple node; None for others."""
    if kind is dict:
        return [f"[{dict_key_text(k)}]" for k in aux]
    if kind is list or kind is tuple:
        return [f"[{i}]" for i in range(n)]
    if isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return [f".{name}" for name in kind._fields]
    return None


def type_name(t: type) -> str:
    """A type's qualified name (``module.Qualname``; a builtin's bare name)."""
    module = getattr(t, "__module__", "") or ""
    return f"{module}.{t.__qualname__}" if module not in ("builtins", "") else t.__qualname__


# -------------------------------------------------------------------- nodes
def container_leaf(
    kind: type, keys: list, children: list, vals: list, start: int, raw_keys=None
) -> Leaf:
    """A dict, list or tuple read from its treedef: its kind, size (or keys), and what its elements
    are."""
    name = kind.__name__
    if kind is dict:
        return dict_leaf(keys, raw_keys)
    n = len(keys)
    all_leaves = n and all(c.num_nodes == 1 and c.num_leaves == 1 for c in children)
    return sequence_leaf(name, n, vals[start : start + n] if all_leaves else None)


def sequence_leaf(name: str, n: int, elements: list | None) -> Leaf:
    """A list or tuple of `n` children; `elements`: its children's values when all are leaves."""
    return node_leaf((name, n), f"{name} of {n}{elements_text(elements) if elements else ''}", name)


def skeleton_container_leaf(
    kind: type, keys: list, text: str | None, raw_keys: list | None = None
) -> Leaf:
    """A dict, list or tuple met in a skeleton (its `text` made by the walker)."""
    name = kind.__name__
    if kind is dict:
        return dict_leaf(keys, raw_keys)
    return node_leaf((name, len(keys)), text, name)


def dict_leaf(keys: list, raw_keys: list | None) -> Leaf:
    """A dict node: its keys (as path suffixes); where a key is not a ``str``, JAX compares the keys
    themselves (a `Witness` of them), not their texts."""
    shown = ", ".join(k[1:-1] for k in keys[:6]) + (", …" if len(keys) > 6 else "")
    witness = None
    if raw_keys is not None and not all(isinstance(k, str) for k in raw_keys):
        witness = Witness(tuple(raw_keys))
    return node_leaf(
        ("dict", tuple(keys)),
        clip(f"dict with keys {shown}" if keys else "empty dict", 120),
        "dict",
        witness,
    )


def custom_node_leaf(kind: type, n: int, dict_keys: list | None = None) -> Leaf:
    """A custom pytree node (a module, a dataclass, a named tuple, a ``FrozenDict``): its type,
    which JAX compares by identity (a class defined again is another node type)."""
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "?")
    if dict_keys:
        shown = ", ".join(dict_key_text(k) for k in dict_keys[:6]) + (
            ", …" if len(dict_keys) > 6 else ""
        )
        text = f"{name} with keys {shown}"
    else:
        text = name
    return node_leaf(
        (CUSTOM_NODE, type_name(kind)), clip(text, 120), type_name(kind), Witness(kind)
    )


def elements_text(items: list) -> str:
    """What the elements of a list or tuple of leaves are (" Python floats", " f32[3] arrays")."""
    texts = {(i.leaf if type(i) is Placeholder else aval_leaf(i)).text for i in items}
    if len(texts) != 1:
        return " arrays"
    text = texts.pop()
    python = {
        "i32[] (weak)": "Python ints",
        "i64[] (weak)": "Python ints",
        "f32[] (weak)": "Python floats",
        "f64[] (weak)": "Python floats",
        "bool[]": "bools",
    }
    return f" {python.get(text, text + ' arrays')}"
