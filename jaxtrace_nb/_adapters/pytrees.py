"""JAX's own pytree kinds: ``jax.tree_util.Partial``, ``register_dataclass`` meta fields, and
the metadata of any other custom node.

A custom node's auxiliary data is part of the treedef, hence of JAX's cache key: a change
there retraces. It is shown under the node's path: a dataclass's meta fields by name
(``cfg.depth``), a ``Partial``'s function as ``fn.func``, anything else as ``path (metadata)``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._signature import Origin

_MAX_METADATA_ITEMS = 16


def available() -> bool:
    return True


def wraps(fun) -> bool:
    return False


def decode_call(start, static_type, decoder):
    return None


def walk_node(walker, prefix: str, obj: Any) -> bool:
    import jax

    if isinstance(obj, jax.tree_util.Partial):
        walker.static(f"{prefix}.func", obj.func, Origin.PARTIAL_FUNC)
        for i, arg in enumerate(obj.args):
            walker.emit(f"{prefix}.args[{i}]", arg)
        for key, arg in obj.keywords.items():
            walker.emit(f"{prefix}.keywords[{key!r}]" if type(key) is str else f"{prefix}.keywords[?]", arg)
        return True
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):  # a NamedTuple: no metadata
        return False
    try:
        node = jax.tree_util.tree_structure(obj, is_leaf=lambda x: x is not obj).node_data()
    except Exception:
        return False
    if node is None:
        return False
    aux = node[1]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Its fields that are not children are its metadata (``meta_fields=[...]``, or declared
        # ``field(metadata={"static": True})``), unless another adapter showed them already
        # (an ``eqx.Module``'s static fields).
        children = {_child_name(k) for k, _ in
                    jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)[0]}
        meta = [f.name for f in dataclasses.fields(obj)
                if f.name not in children and walker.leaf(f"{prefix}.{f.name}") is None]
        walker.static_fields(prefix, obj, meta, Origin.DATACLASS_META)
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
