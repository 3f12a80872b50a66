"""Reading an NNX ``GraphDef`` into the attribute paths of its leaves (see `flax_nnx`).

A ``GraphDef`` is ``nodes`` (``NodeDef``, ``VariableDef``, ``NodeRef``, ``ArrayRefDef``
in depth-first order) and ``attributes`` (``(key, Static(value) | NodeAttr() |
LeafAttr())`` for each attribute of each node, in the same order). `read` reads both as
``graphlib._graph_unflatten`` does, into `Entry`\\ s: each leaf's attribute path, each
Python attribute's value, each node's type and metadata. Nothing here imports Flax: types
are recognised by module and name, and any structure other than the expected one raises
`Unexpected`.
"""

from __future__ import annotations

import collections.abc
from typing import Any, NamedTuple

from .._core._values import Local, clip, summarize_static
from .._core._vocabulary import StrEnum
from .._keys._signature import node_leaf

_GRAPHLIB = ("flax.nnx.graph", "flaxlib")  # graphlib from Flax 0.12.1, graph in 0.12.0
_HIDDEN_PREFIX = (
    "_pytree__"  # NNX's bookkeeping attributes (which attributes are data; a lock state)
)
DEFAULT_METADATA = frozenset(
    {"hijax", "ref", "eager_sharding"}
)  # every Variable's, not worth showing


def is_type(obj: Any, name: str, modules: tuple | str) -> bool:
    """Whether `obj`'s type is named `name` and defined in `modules` (a module, or prefixes of
    one)."""
    t = type(obj)
    module = getattr(t, "__module__", "") or ""
    return t.__name__ == name and (
        module.startswith(modules) if isinstance(modules, tuple) else module == modules
    )


class Unexpected(Exception):
    """The GraphDef is not shaped as this adapter expects."""


class Refs:
    """Paths of the graph nodes and variables already met in one call, by NNX's index
    (one ``split_context`` numbers every argument's nodes)."""

    __slots__ = ("paths",)

    def __init__(self):
        self.paths: dict[int, str] = {}


class EntryKind(StrEnum):
    """What an `Entry` read from a GraphDef is (its payload)."""

    LEAF = "leaf"  # the skeleton of one leaf
    STATIC = "static"  # a Python attribute's value
    NODE = "node"  # a node `Leaf`
    OWNER = "owner"  # the qualified type of the node at the path


class Entry(NamedTuple):
    """One thing read from a GraphDef, at `path` (relative to the graph's own)."""

    kind: EntryKind
    path: str
    payload: Any


def kind_of(obj: Any) -> str:
    """The name of a graphlib object's type ("NodeDef", "Static", ...), "" for anything else."""
    t = type(obj)
    module = getattr(t, "__module__", "") or ""
    if not module.startswith(_GRAPHLIB):
        return ""
    return t.__name__


def _type_of(nodedef: Any) -> Any:
    """The Python type a NodeDef stands for (a generic pytree's own type, e.g. a NamedTuple)."""
    t = getattr(nodedef, "type", None)
    if getattr(t, "__name__", "") == "GenericPytree":
        try:
            return nodedef.metadata.treedef.node_data()[0]
        except Exception:
            return t
    return t


def qualified(t: Any) -> str:
    if not isinstance(t, type):
        return type(t).__name__
    module = getattr(t, "__module__", "") or ""
    return f"{module}.{t.__qualname__}" if module not in ("builtins", "") else t.__qualname__


def key_style(t: Any) -> str:
    """How a child's key is written under a node of type `t`: ``['k']``, ``[0]`` or ``.k``."""
    if not isinstance(t, type):
        return "attr"
    try:
        if issubclass(t, collections.abc.Mapping):
            return "key"
        if (
            issubclass(t, collections.abc.Sequence)
            and not issubclass(t, (str, bytes))
            and "_fields" not in dir(t)
        ):
            return "index"  # a list, a tuple, an nnx.List; not a NamedTuple
    except Exception:  # a hostile metaclass
        pass
    return "attr"


def key_text(key: Any, style: str) -> str:
    if type(key) is int:
        return f"[{key}]"
    if type(key) is str:
        if style == "attr" and key.isidentifier():
            return f".{key}"
        return f"[{key!r}]"
    return f"[{summarize_static(key).text}]"


def variable_leaf(vdef: Any):
    var_type = getattr(vdef, "type", None)
    name = getattr(var_type, "__name__", "Variable")
    metadata = getattr(vdef, "metadata", None) or {}
    try:
        shown = {k: v for k, v in dict(metadata).items() if k not in DEFAULT_METADATA}
    except Exception:
        shown = {}
    text = name + (f" {summarize_static(shown).text}" if shown else "")
    return node_leaf(metadata_token(var_type, metadata), clip(text, 120), qualified(var_type))


def metadata_token(var_type: Any, metadata: Any) -> tuple:
    """A Variable's type and metadata as its node's token: the metadata's hash (within this process)
    and its text (what another process compares: a hash of strings differs between processes)."""
    try:
        items = dict(metadata)
    except Exception:
        items = metadata
    try:
        digest = Local(hash(metadata))
    except Exception:
        digest = None
    return ("nnx variable", qualified(var_type), digest, summarize_static(items).text)


def graph_node_leaf(t: Any, keys: list):
    name = getattr(t, "__name__", "?")
    style = key_style(t)
    if style == "key":
        shown = [key_text(k, "key")[1:-1] for k in keys]
        text = (
            f"{name} with keys {', '.join(shown[:6])}{', …' if len(shown) > 6 else ''}"
            if shown
            else f"empty {name}"
        )
        token = ("nnx node", qualified(t), tuple(shown))
    elif style == "index":
        text, token = f"{name} of {len(keys)}", ("nnx node", qualified(t), len(keys))
    else:
        text, token = name, ("nnx node", qualified(t))
    return node_leaf(token, clip(text, 120), qualified(t))


class _Reader:
    """Reads one GraphDef into `Entry`\\ s, in NNX's order. With `leaves` None (the leaves come
    keyed by path), `leaf_paths` maps each leaf's NNX path (a tuple of keys) to its written path
    instead of an entry."""

    def __init__(self, graphdef: Any, leaves: list | None, refs: dict[int, str], prefix: str):
        self.nodes = iter(graphdef.nodes)
        self.attributes = iter(graphdef.attributes)
        self.leaves = iter(leaves) if leaves is not None else None
        self.refs = refs  # NNX index -> path, this call's (a copy: committed only on success)
        self.prefix = prefix
        self.entries: list[Entry] = []
        self.leaf_paths: dict[tuple, str] = {}

    def leaf(self, keys: tuple, path: str, shown: bool) -> None:
        if self.leaves is None:
            if shown:
                self.leaf_paths[keys] = path
            return
        try:
            item = next(self.leaves)
        except StopIteration:
            raise Unexpected("fewer leaves than the GraphDef reads") from None
        if shown:
            self.entries.append(Entry(EntryKind.LEAF, path, item))

    def alias(self, path: str, index: Any, shown: bool) -> None:
        target = self.refs.get(index)
        if target is None:
            raise Unexpected(f"a reference to an unknown node {index!r}")
        if shown:
            self.entries.append(
                Entry(
                    EntryKind.NODE,
                    path,
                    node_leaf(("nnx ref", target), clip(f"the same object as {target}", 120)),
                )
            )

    def node(self, nodedef: Any, keys: tuple, path: str, shown: bool) -> None:
        kind = kind_of(nodedef)
        if kind == "NodeRef":
            self.alias(path, nodedef.index, shown)
        elif kind == "VariableDef":
            array_refdef = getattr(nodedef, "array_refdef", None)
            if kind_of(array_refdef) == "NodeRef":
                self.alias(path, array_refdef.index, shown)
            else:
                self.leaf(keys, path, shown)
                if kind_of(array_refdef) == "ArrayRefDef":
                    self.refs[array_refdef.index] = self.prefix + path
            self.refs[nodedef.index] = self.prefix + path
            if shown:
                self.entries.append(Entry(EntryKind.NODE, path, variable_leaf(nodedef)))
                self.entries.append(Entry(EntryKind.OWNER, path, qualified(nodedef.type)))
        elif kind == "ArrayRefDef":
            self.leaf(keys, path, shown)
            self.refs[nodedef.index] = self.prefix + path
        elif kind == "NodeDef":
            self.graph_node(nodedef, keys, path, shown)
        else:
            raise Unexpected(f"an unknown node definition {type(nodedef).__name__}")

    def graph_node(self, nodedef: Any, keys: tuple, path: str, shown: bool) -> None:
        if nodedef.index is not None:
            self.refs[nodedef.index] = self.prefix + path
        t = _type_of(nodedef)
        if t is type(None) and not int(
            nodedef.num_attributes
        ):  # None held by a graph node: a None leaf
            if shown:
                self.entries.append(Entry(EntryKind.LEAF, path, None))
            return
        style = key_style(t)
        helper = (getattr(t, "__module__", "") or "").startswith(
            "flax.nnx.helpers"
        )  # nnx.List, nnx.Dict
        shown_keys = []
        for _ in range(int(nodedef.num_attributes)):
            try:
                key, value = next(self.attributes)
            except StopIteration:
                raise Unexpected("fewer attributes than the GraphDef reads") from None
            hidden = is_hidden(key, helper)
            child, child_keys = path + key_text(key, style), keys + (key,)
            visible = shown and not hidden
            if visible:
                shown_keys.append(key)
            kind = kind_of(value)
            if kind == "Static":
                if visible:
                    self.entries.append(Entry(EntryKind.STATIC, child, value.value))
            elif kind in ("LeafAttr", "ArrayAttr"):  # ArrayAttr: Flax 0.12.0
                self.leaf(child_keys, child, visible)
            elif kind == "NodeAttr":
                try:
                    sub = next(self.nodes)
                except StopIteration:
                    raise Unexpected("fewer nodes than the GraphDef reads") from None
                self.node(sub, child_keys, child, visible)
            elif kind == "NodeRef":
                self.alias(child, value.index, visible)
            else:
                raise Unexpected(f"an unknown attribute kind {type(value).__name__}")
        if shown:
            self.entries.append(Entry(EntryKind.NODE, path, graph_node_leaf(t, shown_keys)))
            if isinstance(t, type) and t not in (dict, list, tuple):
                self.entries.append(Entry(EntryKind.OWNER, path, qualified(t)))


_END = object()


def read(graphdef: Any, leaves: list | None, refs: Refs, prefix: str) -> _Reader:
    """`graphdef` read with its `leaves` (None: they come keyed by path) for the graph at `prefix`;
    the paths of its nodes join `refs` only when the whole GraphDef was read."""
    if kind_of(graphdef) != "GraphDef":
        raise Unexpected("not a GraphDef")
    paths = dict(refs.paths)
    reader = _Reader(graphdef, leaves, paths, prefix)
    root = next(reader.nodes, None)
    if root is None:
        raise Unexpected("an empty GraphDef")
    reader.node(root, (), "", True)
    if reader.leaves is not None and next(reader.leaves, _END) is not _END:
        raise Unexpected("more leaves than the GraphDef reads")
    refs.paths = paths
    return reader


def keyed_leaves(states: tuple) -> list[tuple[tuple, Any]] | None:
    """(NNX path, leaf skeleton) of states kept keyed by path: ``FlatState``\\ s (with
    ``in_shardings``) or nested ``State``\\ s (``graph_updates=False``); None otherwise."""
    out: list = []
    for state in states:
        if is_type(state, "FlatState", "flax.nnx.statelib"):
            try:
                keys = object.__getattribute__(state, "_keys")
                values = object.__getattribute__(state, "_values")
            except AttributeError:
                return None
            out.extend((tuple(k), v) for k, v in zip(keys, values))
        elif is_type(state, "State", "flax.nnx.statelib"):
            _nested_items(state, (), out)
        else:
            return None
    return out


def _nested_items(state: Any, keys: tuple, out: list) -> None:
    mapping = state
    if is_type(state, "State", "flax.nnx.statelib"):
        try:
            mapping = object.__getattribute__(state, "_mapping")
        except AttributeError:
            raise Unexpected("a State without its mapping") from None
    if type(mapping) is dict:
        for key, value in dict.items(mapping):
            _nested_items(value, keys + (key,), out)
    else:
        out.append((keys, state))


def is_hidden(key: Any, helper: bool) -> bool:
    """Whether an attribute is NNX's bookkeeping (or a helper container's private one), not
    shown."""
    return type(key) is str and (key.startswith(_HIDDEN_PREFIX) or (helper and key.startswith("_")))
