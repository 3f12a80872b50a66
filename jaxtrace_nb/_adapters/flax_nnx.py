"""Flax NNX: ``nnx.jit`` calls and NNX modules in the module's own attribute names.

``nnx.jit(f)`` (``flax/nnx/transforms/compilation.py``; Flax 0.12.0 and 0.12.8 tested) jits a ``JitFn``
(``functools.update_wrapper``-ed to `f`, the user's function in ``.f``) called with the
user's arguments after ``extract.to_tree``: every graph node (a ``Module``, an
``Optimizer``, ``Rngs``, a ``Variable``) becomes an ``extract.NodeStates`` pytree whose
``_graphdef`` is a ``GraphDef`` (a static pytree, so node data in the treedef) and whose
``states`` is ``([leaf, ...],)``: the graph's leaves in the order ``graphlib.flatten``
met them. Static arguments are ``static_argnums`` of the ``jax.jit``, as for a plain jit.

A ``GraphDef`` is ``nodes`` (``NodeDef``, ``VariableDef``, ``NodeRef``, ``ArrayRefDef``
in depth-first order) and ``attributes`` (``(key, Static(value) | NodeAttr() |
LeafAttr())`` for each attribute of each node, in the same order). Reading both as
``graphlib._graph_unflatten`` does gives each leaf's attribute path: what NNX flattens to
``model.states[0][1]`` is ``model.l1.kernel``; a plain Python attribute (``model.count``,
a ``Static``) is shown as a static leaf of origin `Origin.NNX_ATTRIBUTE`; a ``Variable``'s
type and metadata, and each node's type, as a node leaf under its own path. A ``NodeRef``
(the same object reached twice, within or across arguments) is a node leaf naming the
first path.

``nnx.jit(..., graph_updates=False)`` jits a ``SimpleJitFn`` whose graph nodes are
``extract.TreeState``\\ s (a ``GraphDef`` as meta field, a nested ``State`` of the
leaves); in tree mode (``graph=False``) and under a plain ``jax.jit``, an NNX module is a
pytree: its static attributes are its node metadata and a ``Variable``'s one child is its
value. Both are read here too.

Nothing here imports Flax: types are recognised by module and name, and any structure
other than the expected one gives up (the plain jit reading applies).
"""

from __future__ import annotations

import collections.abc
import sys
from typing import Any

from .._arguments import DecodedCall, Placeholder, SkeletonArg, TreeArg, keystr
from .._signature import NODE_SUFFIX, Origin, node_leaf
from .._values import clip, summarize_static

_COMPILATION = "flax.nnx.transforms.compilation"
_GRAPHLIB = ("flax.nnx.graph", "flaxlib")  # graphlib from Flax 0.12.1, graph in 0.12.0
_HIDDEN_PREFIX = "_pytree__"  # NNX's bookkeeping attributes (which attributes are data; a lock state)
_DEFAULT_METADATA = frozenset({"hijax", "ref", "eager_sharding"})  # every Variable's, not worth showing


def available() -> bool:
    return "flax.nnx" in sys.modules


def _is(obj: Any, name: str, modules: tuple | str) -> bool:
    t = type(obj)
    module = getattr(t, "__module__", "") or ""
    return t.__name__ == name and (module.startswith(modules) if isinstance(modules, tuple) else module == modules)


def _jit_fn(fun: Any) -> Any:
    """The user's function when `fun` is ``nnx.jit``'s traced wrapper, else None."""
    if _is(fun, "JitFn", _COMPILATION) or _is(fun, "SimpleJitFn", _COMPILATION):
        try:
            f = object.__getattribute__(fun, "f")
        except AttributeError:
            return None
        return f if callable(f) else None
    return None


def wraps(fun: Any) -> bool:
    return _jit_fn(fun) is not None


# ------------------------------------------------------------------ the call
class _Refs:
    """Paths of the graph nodes and variables already met in one call, by NNX's index
    (one ``split_context`` numbers every argument's nodes)."""

    __slots__ = ("paths",)

    def __init__(self):
        self.paths: dict[int, str] = {}


class _Graph:
    """Stands for one graph node of the arguments: its GraphDef and the skeleton of its leaves."""

    __slots__ = ("graphdef", "refs", "states")

    def __init__(self, graphdef: Any, states: Any, refs: _Refs):
        self.graphdef = graphdef
        self.states = states
        self.refs = refs


def decode_call(start, static_type, decoder):
    user_fun = _jit_fn(start.fun)
    if user_fun is None:
        return None
    try:
        base = decoder._jit_call(start)  # names from `f` (JitFn is update_wrapper-ed to it), static args
    except Exception:
        return None
    refs = _Refs()
    arguments = []
    for name, part in base.arguments:
        if type(part) is TreeArg:
            part = _graph_arg(part, refs)
        arguments.append((name, part))
    return DecodedCall("nnx", user_fun, None, arguments, None, base.call)


def _graph_arg(part: TreeArg, refs: _Refs):
    """The argument with each of NNX's flattened graph nodes replaced by a `_Graph`."""
    td = part.td
    if td.num_nodes == 1:
        return part
    try:
        skeleton = td.unflatten(part.placeholders())
    except Exception:
        return part
    if _graph_parts(skeleton) is not None:
        return SkeletonArg(_Graph(*_graph_parts(skeleton), refs))
    import jax

    found = []

    def replace(x):
        parts = _graph_parts(x)
        if parts is None:
            return x
        found.append(x)
        return _Graph(*parts, refs)

    try:
        rebuilt = jax.tree_util.tree_map(replace, skeleton,
                                         is_leaf=lambda x: type(x) is Placeholder or _graph_parts(x) is not None)
    except Exception:
        return part
    return SkeletonArg(rebuilt) if found else part


def _graph_parts(x: Any) -> tuple | None:
    """(GraphDef, states) of NNX's ``NodeStates`` / ``TreeState``, else None."""
    try:
        if _is(x, "NodeStates", "flax.nnx.extract"):
            return object.__getattribute__(x, "_graphdef"), object.__getattribute__(x, "states")
        if _is(x, "TreeState", "flax.nnx.extract"):
            return object.__getattribute__(x, "graphdef"), (object.__getattribute__(x, "__state__"),)
    except AttributeError:
        return None
    return None


# ------------------------------------------------------------- GraphDef reading
class _Unexpected(Exception):
    """The GraphDef is not shaped as this adapter expects."""


def _kind(obj: Any) -> str:
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


def _qualified(t: Any) -> str:
    if not isinstance(t, type):
        return type(t).__name__
    module = getattr(t, "__module__", "") or ""
    return f"{module}.{t.__qualname__}" if module not in ("builtins", "") else t.__qualname__


def _style(t: Any) -> str:
    """How a child's key is written under a node of type `t`: ``['k']``, ``[0]`` or ``.k``."""
    if not isinstance(t, type):
        return "attr"
    try:
        if issubclass(t, collections.abc.Mapping):
            return "key"
        if issubclass(t, collections.abc.Sequence) and not issubclass(t, (str, bytes)) and "_fields" not in dir(t):
            return "index"  # a list, a tuple, an nnx.List; not a NamedTuple
    except Exception:  # a hostile metaclass
        pass
    return "attr"


def _key_text(key: Any, style: str) -> str:
    if type(key) is int:
        return f"[{key}]"
    if type(key) is str:
        if style == "attr" and key.isidentifier():
            return f".{key}"
        return f"[{key!r}]"
    return f"[{summarize_static(key).text}]"


def _variable_leaf(vdef: Any):
    var_type = getattr(vdef, "type", None)
    name = getattr(var_type, "__name__", "Variable")
    metadata = getattr(vdef, "metadata", None) or {}
    try:
        shown = {k: v for k, v in dict(metadata).items() if k not in _DEFAULT_METADATA}
    except Exception:
        shown = {}
    text = name + (f" {summarize_static(shown).text}" if shown else "")
    try:
        token = ("nnx variable", _qualified(var_type), hash(metadata))
    except Exception:
        token = ("nnx variable", _qualified(var_type), summarize_static(metadata).text)
    return node_leaf(token, clip(text, 120), _qualified(var_type))


def _node_leaf(t: Any, keys: list):
    name = getattr(t, "__name__", "?")
    style = _style(t)
    if style == "key":
        shown = [_key_text(k, "key")[1:-1] for k in keys]
        text = f"{name} with keys {', '.join(shown[:6])}{', …' if len(shown) > 6 else ''}" if shown else f"empty {name}"
        token = ("nnx node", _qualified(t), tuple(shown))
    elif style == "index":
        text, token = f"{name} of {len(keys)}", ("nnx node", _qualified(t), len(keys))
    else:
        text, token = name, ("nnx node", _qualified(t))
    return node_leaf(token, clip(text, 120), _qualified(t))


class _Reader:
    """Reads one GraphDef into entries: (kind, relative path, payload), in NNX's order.

    kind: "leaf" (payload: the skeleton of one leaf), "static" (a Python attribute's
    value), "node" (a node `Leaf`), "owner" (the qualified type of the node at the path).
    With `leaves` None (the leaves come keyed by path), `leaf_paths` maps each leaf's NNX
    path (a tuple of keys) to its written path instead.
    """

    def __init__(self, graphdef: Any, leaves: list | None, refs: dict[int, str], prefix: str):
        self.nodes = iter(graphdef.nodes)
        self.attributes = iter(graphdef.attributes)
        self.leaves = iter(leaves) if leaves is not None else None
        self.refs = refs  # NNX index -> path, this call's (a copy: committed only on success)
        self.prefix = prefix
        self.entries: list[tuple] = []
        self.leaf_paths: dict[tuple, str] = {}

    def leaf(self, keys: tuple, path: str, shown: bool) -> None:
        if self.leaves is None:
            if shown:
                self.leaf_paths[keys] = path
            return
        try:
            item = next(self.leaves)
        except StopIteration:
            raise _Unexpected("fewer leaves than the GraphDef reads") from None
        if shown:
            self.entries.append(("leaf", path, item))

    def alias(self, path: str, index: Any, shown: bool) -> None:
        target = self.refs.get(index)
        if target is None:
            raise _Unexpected(f"a reference to an unknown node {index!r}")
        if shown:
            self.entries.append(("node", path, node_leaf(("nnx ref", target), clip(f"the same object as {target}", 120))))

    def node(self, nodedef: Any, keys: tuple, path: str, shown: bool) -> None:
        kind = _kind(nodedef)
        if kind == "NodeRef":
            self.alias(path, nodedef.index, shown)
        elif kind == "VariableDef":
            array_refdef = getattr(nodedef, "array_refdef", None)
            if _kind(array_refdef) == "NodeRef":
                self.alias(path, array_refdef.index, shown)
            else:
                self.leaf(keys, path, shown)
                if _kind(array_refdef) == "ArrayRefDef":
                    self.refs[array_refdef.index] = self.prefix + path
            self.refs[nodedef.index] = self.prefix + path
            if shown:
                self.entries.append(("node", path, _variable_leaf(nodedef)))
                self.entries.append(("owner", path, _qualified(nodedef.type)))
        elif kind == "ArrayRefDef":
            self.leaf(keys, path, shown)
            self.refs[nodedef.index] = self.prefix + path
        elif kind == "NodeDef":
            self.graph_node(nodedef, keys, path, shown)
        else:
            raise _Unexpected(f"an unknown node definition {type(nodedef).__name__}")

    def graph_node(self, nodedef: Any, keys: tuple, path: str, shown: bool) -> None:
        if nodedef.index is not None:
            self.refs[nodedef.index] = self.prefix + path
        t = _type_of(nodedef)
        style = _style(t)
        helper = (getattr(t, "__module__", "") or "").startswith("flax.nnx.helpers")  # nnx.List, nnx.Dict
        shown_keys = []
        for _ in range(int(nodedef.num_attributes)):
            try:
                key, value = next(self.attributes)
            except StopIteration:
                raise _Unexpected("fewer attributes than the GraphDef reads") from None
            hidden = _hidden(key, helper)
            child, child_keys = path + _key_text(key, style), keys + (key,)
            visible = shown and not hidden
            if visible:
                shown_keys.append(key)
            kind = _kind(value)
            if kind == "Static":
                if visible:
                    self.entries.append(("static", child, value.value))
            elif kind in ("LeafAttr", "ArrayAttr"):  # ArrayAttr: Flax 0.12.0
                self.leaf(child_keys, child, visible)
            elif kind == "NodeAttr":
                try:
                    sub = next(self.nodes)
                except StopIteration:
                    raise _Unexpected("fewer nodes than the GraphDef reads") from None
                self.node(sub, child_keys, child, visible)
            elif kind == "NodeRef":
                self.alias(child, value.index, visible)
            else:
                raise _Unexpected(f"an unknown attribute kind {type(value).__name__}")
        if shown:
            self.entries.append(("node", path, _node_leaf(t, shown_keys)))
            if isinstance(t, type) and t not in (dict, list, tuple):
                self.entries.append(("owner", path, _qualified(t)))


_END = object()


def _read(graphdef: Any, leaves: list | None, refs: _Refs, prefix: str) -> _Reader:
    if _kind(graphdef) != "GraphDef":
        raise _Unexpected("not a GraphDef")
    paths = dict(refs.paths)
    reader = _Reader(graphdef, leaves, paths, prefix)
    root = next(reader.nodes, None)
    if root is None:
        raise _Unexpected("an empty GraphDef")
    reader.node(root, (), "", True)
    if reader.leaves is not None and next(reader.leaves, _END) is not _END:
        raise _Unexpected("more leaves than the GraphDef reads")
    refs.paths = paths
    return reader


def _keyed_leaves(states: tuple) -> list[tuple[tuple, Any]] | None:
    """(NNX path, leaf skeleton) of states kept keyed by path: ``FlatState``\\ s (with
    ``in_shardings``) or nested ``State``\\ s (``graph_updates=False``); None otherwise."""
    out: list = []
    for state in states:
        if _is(state, "FlatState", "flax.nnx.statelib"):
            try:
                keys = object.__getattribute__(state, "_keys")
                values = object.__getattribute__(state, "_values")
            except AttributeError:
                return None
            out.extend((tuple(k), v) for k, v in zip(keys, values))
        elif _is(state, "State", "flax.nnx.statelib"):
            _nested_items(state, (), out)
        else:
            return None
    return out


def _nested_items(state: Any, keys: tuple, out: list) -> None:
    mapping = state
    if _is(state, "State", "flax.nnx.statelib"):
        try:
            mapping = object.__getattribute__(state, "_mapping")
        except AttributeError:
            raise _Unexpected("a State without its mapping") from None
    if type(mapping) is dict:
        for key, value in dict.items(mapping):
            _nested_items(value, keys + (key,), out)
    else:
        out.append((keys, state))


def _walk_graph(walker, prefix: str, graph: _Graph) -> None:
    walker.owners.pop(prefix, None)  # the walker's note of the `_Graph` stand-in itself
    states = graph.states
    flat = states[0] if type(states) is tuple and len(states) == 1 and type(states[0]) is list else None
    try:
        keyed = None if flat is not None else _keyed_leaves(states)
        if flat is None and keyed is None:
            raise _Unexpected("states neither flat nor keyed")
        reader = _read(graph.graphdef, flat, graph.refs, prefix)
    except Exception:  # not the structure expected: NNX's own names, still every leaf
        walker.static(f"{prefix} (graphdef)", graph.graphdef, Origin.NODE_METADATA)
        walker.emit(f"{prefix}.states", list(states) if type(states) is tuple else states)
        return
    for kind, path, payload in reader.entries:
        full = prefix + path
        if kind == "leaf":
            walker.emit(full, payload)
        elif kind == "static":
            walker.static(full, payload, Origin.NNX_ATTRIBUTE)
        elif kind == "node":
            walker.leaves[full + NODE_SUFFIX] = payload
        else:
            walker.owners[full] = payload
    if keyed is not None:
        for keys, item in keyed:
            path = reader.leaf_paths.get(keys)
            if path is None:
                path = "".join(_key_text(k, "attr") for k in keys)
            walker.emit(prefix + path, item)


# --------------------------------------------------------------- pytree nodes
def _is_pytree(obj: Any) -> bool:
    """An NNX ``Pytree`` (a ``Module``, an ``Optimizer``, ``Rngs``) used as a JAX pytree."""
    for klass in type(obj).__mro__:
        if klass.__name__ == "Pytree" and (klass.__module__ or "") == "flax.nnx.pytreelib":
            return True
    return False


def _is_variable(obj: Any) -> bool:
    for klass in type(obj).__mro__:
        if klass.__name__ == "Variable" and (klass.__module__ or "") == "flax.nnx.variablelib":
            return True
    return False


def walk_node(walker, prefix: str, obj: Any) -> bool:
    t = type(obj)
    if t is _Graph:
        _walk_graph(walker, prefix, obj)
        return True
    if not available():
        return False
    if _kind(obj) == "GraphDef":  # nnx.split's GraphDef under a plain jax.jit: its Python attributes
        try:
            entries = _read(obj, None, _Refs(), prefix).entries
        except Exception:
            return False
        walker.owners.pop(prefix, None)
        for kind, path, payload in entries:
            if kind == "static":
                walker.static(prefix + path, payload, Origin.NNX_ATTRIBUTE)
            elif kind == "node":
                walker.leaves[prefix + path + NODE_SUFFIX] = payload
        return True
    if _is_variable(obj):
        return _walk_variable(walker, prefix, obj)
    if _is_pytree(obj):
        return _walk_pytree(walker, prefix, obj)
    if _is(obj, "State", "flax.nnx.statelib"):
        return _walk_state(walker, prefix, obj)
    return False


def _node_data(obj: Any) -> Any:
    import jax

    try:
        node = jax.tree_util.tree_structure(obj, is_leaf=lambda x: x is not obj).node_data()
    except Exception:
        return None
    return None if node is None else node[1]


def _walk_variable(walker, prefix: str, obj: Any) -> bool:
    """A Variable as a pytree: its value under the variable's own path, its type and metadata as a node."""
    metadata = _node_data(obj)
    for name in ("_raw_value", "raw_value"):  # Flax 0.12.1 and later; 0.12.0
        try:
            value = object.__getattribute__(obj, name)
            break
        except AttributeError:
            continue
    else:
        return False
    if type(metadata) is tuple:
        shown = {k: v for k, v in metadata if k not in _DEFAULT_METADATA}
        text = t_name = type(obj).__name__
        if shown:
            text += f" {summarize_static(shown).text}"
        walker.leaves[prefix + NODE_SUFFIX] = node_leaf(("nnx variable", _qualified(type(obj)),
                                                         summarize_static(metadata).token), clip(text, 120), t_name)
    walker.emit(prefix, value)
    return True


def _walk_pytree(walker, prefix: str, obj: Any) -> bool:
    """An NNX Pytree as a JAX pytree: its static attributes (its node metadata) and its data
    attributes, each under its own name, NNX's bookkeeping left out."""
    import jax

    aux = _node_data(obj)
    if type(aux) is tuple and len(aux) == 2 and type(aux[1]) is tuple:  # Flax 0.12.0: ((static key, value), ...)
        try:
            aux = (aux[0], tuple(k for k, _ in aux[1]), tuple(v for _, v in aux[1]))
        except (TypeError, ValueError):
            return False
    if type(aux) is not tuple or len(aux) != 3:
        return False
    try:
        pairs = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)[0]
    except Exception:
        return False
    t = type(obj)
    style = _style(t)
    helper = (t.__module__ or "").startswith("flax.nnx.helpers")
    _, static_keys, static_values = aux
    shown = []
    for key, value in zip(static_keys, static_values):
        if not _hidden(key, helper):
            walker.static(prefix + _key_text(key, style), value, Origin.NNX_ATTRIBUTE)
            shown.append(key)
    for keypath, item in pairs:
        key = _jax_key(keypath[0]) if len(keypath) == 1 else None
        if key is None:
            walker.emit(prefix + keystr(keypath), item)
        elif not _hidden(key, helper):
            walker.emit(prefix + _key_text(key, style), item)
            shown.append(key)
    walker.leaves[prefix + NODE_SUFFIX] = _node_leaf(t, sorted(shown, key=_sort_key))
    return True


def _walk_state(walker, prefix: str, obj: Any) -> bool:
    """An ``nnx.State`` (a mapping of attribute names) as a JAX pytree: its entries as dict keys."""
    import jax

    try:
        pairs = jax.tree_util.tree_flatten_with_path(obj, is_leaf=lambda x: x is not obj)[0]
    except Exception:
        return False
    keys = []
    for keypath, item in pairs:
        key = _jax_key(keypath[0]) if len(keypath) == 1 else None
        if key is None:
            walker.emit(prefix + keystr(keypath), item)
        else:
            walker.emit(prefix + _key_text(key, "key"), item)
            keys.append(key)
    walker.leaves[prefix + NODE_SUFFIX] = _node_leaf(type(obj), keys)
    return True


def _hidden(key: Any, helper: bool) -> bool:
    return type(key) is str and (key.startswith(_HIDDEN_PREFIX) or (helper and key.startswith("_")))


def _jax_key(key: Any) -> Any:
    """The attribute name, index or dict key of one JAX key-path entry, else None."""
    kind = type(key).__name__
    if kind == "GetAttrKey":
        return key.name
    if kind == "SequenceKey":
        return key.idx
    if kind in ("DictKey", "FlattenedIndexKey"):
        return key.key
    return None


def _sort_key(key: Any) -> tuple:
    return (0, key, "") if type(key) is int else (1, 0, str(key))
