"""JAX itself, the base entry: its packages, its own pytree kinds, its mechanisms of static values.

The packages of JAX, jaxlib, chex, jaxtyping and jaxtrace_nb are library code. A custom node's
auxiliary data is part of the treedef, hence of JAX's cache key: a change there retraces. It
is shown under the node's path: ``jax.tree_util.register_dataclass`` meta fields by name
(``cfg.depth``), a ``Partial``'s function as ``fn.func``, anything else as ``path (metadata)``.
This adapter comes last: it reads every custom node no other adapter claimed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._core._vocabulary import Cause, Origin, StrEnum
from ._registry import Evidence, Hint, Library, register

_MAX_METADATA_ITEMS = 16


class PytreeOrigin(StrEnum):
    """What makes a value static in JAX's own pytree kinds."""

    DATACLASS_META = "register_dataclass meta field"
    PARTIAL_FUNC = "Partial func"  # the function inside a jax.tree_util.Partial
    STRUCT_FIELD = "pytree_node=False field"  # flax.struct.field(pytree_node=False), and its kin


@register
class Jax(Library):
    name = "jax"
    packages = ("jax", "jaxlib", "jaxtrace_nb", "chex", "jaxtyping")
    precedence = 100
    origins = {
        Origin.STATIC_ARGNUMS: " (`static_argnums`/`static_argnames`)",
        Origin.NODE_METADATA: " (a custom pytree node's metadata)",
        PytreeOrigin.DATACLASS_META: " (a `register_dataclass` meta field)",
        PytreeOrigin.PARTIAL_FUNC: " (the function of a `jax.tree_util.Partial`)",
        PytreeOrigin.STRUCT_FIELD: " (a dataclass field declared `pytree_node=False`, e.g. "
        "`flax.struct.field`)",
    }
    hints = (
        Hint(
            "static.dataclass_meta",
            "{p} is a meta field of a `jax.tree_util.register_dataclass` pytree, part of the "
            "tree's structure: every "
            "new value compiles again. Declare it a data field holding an array to trace "
            "it.",
            True,
        ),
    )

    def walk_node(self, walker, path: str, obj: Any) -> bool:
        return _walk_node(walker, path, obj)

    def hint(self, evidence: Evidence):
        new = evidence.new
        if (
            evidence.cause == Cause.STATIC
            and not new.by_identity
            and new.origin == PytreeOrigin.DATACLASS_META
        ):
            return "static.dataclass_meta", {}
        return None


def _walk_node(walker, prefix: str, obj: Any) -> bool:
    import jax

    if isinstance(obj, jax.tree_util.Partial):
        walker.static(f"{prefix}.func", obj.func, PytreeOrigin.PARTIAL_FUNC)
        for i, arg in enumerate(obj.args):
            walker.emit(f"{prefix}.args[{i}]", arg)
        for key, arg in obj.keywords.items():
            walker.emit(
                f"{prefix}.keywords[{key!r}]" if type(key) is str else f"{prefix}.keywords[?]", arg
            )
        return True
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):  # a NamedTuple: no metadata
        return False
    try:
        node = jax.tree_util.tree_structure(obj, is_leaf=lambda x: x is not obj).node_data()
    except Exception:
        return False
    if node is None:
        return False
    _, aux = node
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Its fields that are not children are its metadata (``meta_fields=[...]``, or declared
        # ``field(metadata={"static": True})``), unless another adapter showed them already
        # (an ``eqx.Module``'s static fields).
        children = {
            _child_name(k)
            for k, _ in jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)[0]
        }
        meta = [
            f
            for f in dataclasses.fields(obj)
            if f.name not in children and walker.leaf(f"{prefix}.{f.name}") is None
        ]
        # `flax.struct.field(pytree_node=False)` is another mechanism than `register_dataclass`'s
        # meta fields, with another fix: the hint for the latter does not apply to it.
        struct = [f.name for f in meta if f.metadata.get("pytree_node", True) is False]
        walker.static_fields(prefix, obj, struct, PytreeOrigin.STRUCT_FIELD)
        walker.static_fields(
            prefix, obj, [f.name for f in meta if f.name not in struct], PytreeOrigin.DATACLASS_META
        )
        return False
    if aux is None or (type(aux) in (tuple, list) and not aux):
        return False
    if type(aux) is tuple and len(aux) <= _MAX_METADATA_ITEMS:
        # JAX compares a tuple by its items: each is a leaf of its own, so that the one that changed
        # is named, not its unchanged neighbour (an equal bound method is not an identical one).
        for i, item in enumerate(aux):
            walker.static(f"{prefix} (metadata)[{i}]", item, Origin.NODE_METADATA)
    else:
        walker.static(f"{prefix} (metadata)", aux, Origin.NODE_METADATA)
    return False


def _child_name(keypath: tuple) -> str | None:
    return getattr(keypath[0], "name", None) if keypath else None
