"""Flax NNX: ``nnx.jit`` calls and NNX modules in the module's own attribute names.

``nnx.jit(f)`` (``flax/nnx/transforms/compilation.py``; Flax 0.12.0 and 0.12.8 tested) jits a
``JitFn`` (``functools.update_wrapper``-ed to `f`, the user's function in ``.f``) called with the
user's arguments after ``extract.to_tree``: every graph node (a ``Module``, an
``Optimizer``, ``Rngs``, a ``Variable``) becomes an ``extract.NodeStates`` pytree whose
``_graphdef`` is a ``GraphDef`` (a static pytree, so node data in the treedef) and whose
``states`` is ``([leaf, ...],)``: the graph's leaves in the order ``graphlib.flatten``
met them. Static arguments are ``static_argnums`` of the ``jax.jit``, as for a plain jit.

Reading the GraphDef (`_nnx_graph`) gives each leaf's attribute path: what NNX flattens to
``model.states[0][1]`` is ``model.l1.kernel``; a plain Python attribute (``model.count``,
a ``Static``) is shown as a static leaf of origin `NnxOrigin.ATTRIBUTE`; a ``Variable``'s
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

from typing import Any

from .._core._values import clip, summarize_static
from .._core._vocabulary import Cause, JitKind, Origin, StrEnum
from .._keys._calls import DecodedCall, SkeletonArg, TreeArg
from .._keys._leaves import Placeholder, keystr
from .._keys._signature import node_leaf
from ._nnx_graph import (
    DEFAULT_METADATA,
    EntryKind,
    Refs,
    graph_node_leaf,
    is_hidden,
    is_type,
    key_style,
    key_text,
    keyed_leaves,
    kind_of,
    metadata_token,
)
from ._nnx_graph import Unexpected as _Unexpected
from ._nnx_graph import read as _read
from ._registry import Evidence, Hint, JitWrapper, Library, register

_COMPILATION = "flax.nnx.transforms.compilation"


class NnxOrigin(StrEnum):
    """What makes a value static under Flax NNX."""

    ATTRIBUTE = "nnx attribute"  # a Python attribute in an NNX module's GraphDef


@register
class FlaxNnx(Library):
    name = module = "flax.nnx"  # (its package: flax)
    jit = JitWrapper(JitKind.NNX, "flax")
    precedence = 10
    origins = {NnxOrigin.ATTRIBUTE: " (a Python attribute of an NNX module)"}
    hints = (
        Hint(
            "static.nnx_optax",
            "{p} holds an optax transformation, kept in the NNX graph's static part. One built "
            "again (e.g. a new "
            "`nnx.Optimizer` each epoch) compares unequal even when built alike: its functions "
            "compare by "
            "identity. Create the optimizer once and reuse it.",
            True,
        ),
        Hint(
            "static.nnx_identity",
            "{p} is a plain Python attribute of an NNX module, kept in its static graph, and now "
            "holds a new object "
            "that looks the same but compares unequal (by identity): create it once and reuse "
            "it.",
            True,
        ),
        Hint(
            "static.nnx_library_attribute",
            "{p} is an attribute of `{owner}`, a module class of an installed library, kept in "
            "the NNX graph's static part: every new value compiles again. The library's code "
            "reads it as a Python value, so it stays static there.",
            False,
        ),
        Hint(
            "static.nnx_attribute",
            "{p} is a plain Python attribute of an NNX module, kept in its static graph: every "
            "new value compiles "
            "again. Hold it in an `nnx.Variable` to trace it instead.",
            True,
        ),
    )

    def wraps(self, fun: Any) -> bool:
        return _jit_fn(fun) is not None

    def decode_call(self, start, decoder) -> DecodedCall | None:
        user_fun = _jit_fn(start.fun)
        if user_fun is None:
            return None
        try:
            base = decoder.plain_call(
                start
            )  # names from `f` (JitFn is update_wrapper-ed to it), static args
        except Exception:
            return None
        refs = Refs()
        arguments = []
        for name, part in base.arguments:
            if type(part) is TreeArg:
                part = _graph_arg(part, refs)
            arguments.append((name, part))
        return DecodedCall(
            jit_kind=JitKind.NNX,
            user_fun=user_fun,
            identity=None,
            arguments=arguments,
            function_leaf=None,
            call=base.call,
        )

    def walk_node(self, walker, path: str, obj: Any) -> bool:
        return _walk_node(walker, path, obj)

    def hint(self, evidence: Evidence):
        old, new = evidence.old, evidence.new
        if evidence.cause != Cause.STATIC or new.by_identity or new.origin != NnxOrigin.ATTRIBUTE:
            return None
        if (
            old is not None and old.text == new.text
        ):  # alike, yet unequal: a new object compared by identity inside
            return (
                "static.nnx_optax" if new.type_name.startswith("optax") else "static.nnx_identity"
            ), {}
        if not evidence.owner:
            return None  # whose class declares it is not known: explained, not instructed
        if evidence.owner_is_library:
            # a library's module (``nnx.Dropout``'s ``rate``): its code reads the attribute as a
            # Python value, so neither an `nnx.Variable` nor `nnx.data` is accepted there
            return "static.nnx_library_attribute", {"owner": evidence.owner.rsplit(".", 1)[-1]}
        return "static.nnx_attribute", {}


def is_nnx_jit_wrapper(obj: Any) -> bool:
    """Whether `obj` is what ``nnx.jit`` returns (``JitWrapped``), told by its type."""
    return is_type(obj, "JitWrapped", _COMPILATION)


_CALL_FRAMES = 60  # how far above a trace's frame ``JitWrapped.__call__`` is looked for


def nnx_jit_call(frame: Any) -> tuple[Any, tuple, dict] | None:
    """(the ``nnx.jit`` wrapper, the call's args, kwargs) of the call that led to the trace
    announced at `frame`: the locals of ``JitWrapped.__call__(self, *args, **kwargs)`` above it
    (Flax 0.12); None where there is no such frame."""
    for _ in range(_CALL_FRAMES):
        if frame is None:
            return None
        if frame.f_code.co_name == "__call__" and frame.f_globals.get("__name__") == _COMPILATION:
            local = frame.f_locals
            wrapper, args, kwargs = (local.get(n) for n in ("self", "args", "kwargs"))
            if is_nnx_jit_wrapper(wrapper) and type(args) is tuple and type(kwargs) is dict:
                return wrapper, args, kwargs
        frame = frame.f_back
    return None


def variable_value(obj: Any) -> tuple:
    """``(value,)`` of an NNX ``Variable`` (the log names its value by the Variable's own path),
    ``()`` for anything else."""
    if not _is_variable(obj):
        return ()
    try:
        return (obj.get_value() if hasattr(obj, "get_value") else obj.value,)
    except Exception:
        return ()


def _jit_fn(fun: Any) -> Any:
    """The user's function when `fun` is ``nnx.jit``'s traced wrapper, else None."""
    if is_type(fun, "JitFn", _COMPILATION) or is_type(fun, "SimpleJitFn", _COMPILATION):
        try:
            f = object.__getattribute__(fun, "f")
        except AttributeError:
            return None
        return f if callable(f) else None
    return None


# ------------------------------------------------------------------ the call
class _Graph:
    """Stands for one graph node of the arguments: its GraphDef and the skeleton of its leaves."""

    __slots__ = ("graphdef", "refs", "states")

    def __init__(self, graphdef: Any, states: Any, refs: Refs):
        self.graphdef = graphdef
        self.states = states
        self.refs = refs


def _graph_arg(part: TreeArg, refs: Refs):
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
        rebuilt = jax.tree_util.tree_map(
            replace,
            skeleton,
            is_leaf=lambda x: type(x) is Placeholder or _graph_parts(x) is not None,
        )
    except Exception:
        return part
    return SkeletonArg(rebuilt) if found else part


def _graph_parts(x: Any) -> tuple | None:
    """(GraphDef, states) of NNX's ``NodeStates`` / ``TreeState``, else None."""
    try:
        if is_type(x, "NodeStates", "flax.nnx.extract"):
            return object.__getattribute__(x, "_graphdef"), object.__getattribute__(x, "states")
        if is_type(x, "TreeState", "flax.nnx.extract"):
            return object.__getattribute__(x, "graphdef"), (
                object.__getattribute__(x, "__state__"),
            )
    except AttributeError:
        return None
    return None


def _walk_graph(walker, prefix: str, graph: _Graph) -> None:
    walker.forget_owner(prefix)  # the walker's note of the `_Graph` stand-in itself
    states = graph.states
    flat = (
        states[0]
        if type(states) is tuple and len(states) == 1 and type(states[0]) is list
        else None
    )
    try:
        keyed = None if flat is not None else keyed_leaves(states)
        if flat is None and keyed is None:
            raise _Unexpected("states neither flat nor keyed")
        reader = _read(graph.graphdef, flat, graph.refs, prefix)
    except Exception:  # not the structure expected: NNX's own names, still every leaf
        walker.static(f"{prefix} (graphdef)", graph.graphdef, Origin.NODE_METADATA)
        walker.emit(f"{prefix}.states", list(states) if type(states) is tuple else states)
        return
    for entry in reader.entries:
        full = prefix + entry.path
        if entry.kind == EntryKind.LEAF:
            walker.emit(full, entry.payload)
        elif entry.kind == EntryKind.STATIC:
            walker.static(full, entry.payload, NnxOrigin.ATTRIBUTE)
        elif entry.kind == EntryKind.NODE:
            walker.node(full, entry.payload)
        else:
            walker.owner(full, entry.payload)
    if keyed is not None:
        for keys, item in keyed:
            path = reader.leaf_paths.get(keys)
            if path is None:
                path = "".join(key_text(k, "attr") for k in keys)
            walker.emit(prefix + path, item)


# --------------------------------------------------------------- pytree nodes
def _walk_node(walker, prefix: str, obj: Any) -> bool:
    if type(obj) is _Graph:
        _walk_graph(walker, prefix, obj)
        return True
    if (
        kind_of(obj) == "GraphDef"
    ):  # nnx.split's GraphDef under a plain jax.jit: its Python attributes
        try:
            entries = _read(obj, None, Refs(), prefix).entries
        except Exception:
            return False
        walker.forget_owner(prefix)
        for entry in entries:
            if entry.kind == EntryKind.STATIC:
                walker.static(prefix + entry.path, entry.payload, NnxOrigin.ATTRIBUTE)
            elif entry.kind == EntryKind.NODE:
                walker.node(prefix + entry.path, entry.payload)
            elif (
                entry.kind == EntryKind.LEAF
            ):  # (a None: the arrays are the State's, another argument)
                walker.emit(prefix + entry.path, entry.payload)
        return True
    if _is_variable(obj):
        return _walk_variable(walker, prefix, obj)
    if _is_pytree(obj):
        return _walk_pytree(walker, prefix, obj)
    if is_type(obj, "State", "flax.nnx.statelib"):
        return _walk_state(walker, prefix, obj)
    return False


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


def _node_data(obj: Any) -> Any:
    import jax

    try:
        node = jax.tree_util.tree_structure(obj, is_leaf=lambda x: x is not obj).node_data()
    except Exception:
        return None
    return None if node is None else node[1]


def _walk_variable(walker, prefix: str, obj: Any) -> bool:
    """A Variable as a pytree: its value under the variable's own path, its type and metadata as a
    node."""
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
        shown = {k: v for k, v in metadata if k not in DEFAULT_METADATA}
        text = t_name = type(obj).__name__
        if shown:
            text += f" {summarize_static(shown).text}"
        walker.node(
            prefix,
            node_leaf(
                metadata_token(type(obj), metadata),
                clip(text, 120),
                t_name,
            ),
        )
    walker.emit(prefix, value)
    return True


def _walk_pytree(walker, prefix: str, obj: Any) -> bool:
    """An NNX Pytree as a JAX pytree: its static attributes (its node metadata) and its data
    attributes, each under its own name, NNX's bookkeeping left out."""
    import jax

    aux = _node_data(obj)
    if (
        type(aux) is tuple and len(aux) == 2 and type(aux[1]) is tuple
    ):  # Flax 0.12.0: ((static key, value), ...)
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
    style = key_style(t)
    helper = (t.__module__ or "").startswith("flax.nnx.helpers")
    _, static_keys, static_values = aux
    shown = []
    for key, value in zip(static_keys, static_values):
        if not is_hidden(key, helper):
            walker.static(prefix + key_text(key, style), value, NnxOrigin.ATTRIBUTE)
            shown.append(key)
    for keypath, item in pairs:
        key = _jax_key(keypath[0]) if len(keypath) == 1 else None
        if key is None:
            walker.emit(prefix + keystr(keypath), item)
        elif not is_hidden(key, helper):
            walker.emit(prefix + key_text(key, style), item)
            shown.append(key)
    walker.node(prefix, graph_node_leaf(t, sorted(shown, key=_sort_key)))
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
            walker.emit(prefix + key_text(key, "key"), item)
            keys.append(key)
    walker.node(prefix, graph_node_leaf(type(obj), keys))
    return True


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
