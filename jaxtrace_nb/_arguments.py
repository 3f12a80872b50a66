"""The arguments of a traced call in the user's terms, and every leaf under the user's own path.

`DecodedCall` is a call read back from JAX: the user's function and each argument as a
`StaticArg`, a `TreeArg` (treedef and placeholders) or a `SkeletonArg` (an object).

A skeleton is the arguments rebuilt from their treedef with a `Placeholder` for each
array (its abstract value's `Leaf`) and the real static values elsewhere. `Walker`
flattens it with the user's paths (``opt_state[0].mu['w']``), records each custom
container's type (`owners`, evidence for the hints) and asks the library adapters
for what a node keeps in its metadata. Dict keys are written without running their
`repr`; no leaf keeps a reference to anything of the user's.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, NamedTuple

from ._signature import NODE_SUFFIX, NONE_LEAF, Leaf, Origin, array_leaf, node_leaf, static_leaf
from ._values import clip, summarize_static
from ._witness import Witness

_SRC_INFO = re.compile(r"^(?P<name>.*) at (?P<file>.*):(?P<line>\d+)$")


class Placeholder:
    """Stands for one dynamic leaf (flat position `index`) in a skeleton of the arguments."""

    __slots__ = ("leaf", "index")

    def __init__(self, leaf: Leaf, index: int = -1):
        self.leaf = leaf
        self.index = index


# ------------------------------------------------------------------- leaves
_AVAL_LEAVES: dict = {}  # aval -> Leaf: avals are abstract (shape, dtype), never user data
_MAX_AVAL_LEAVES = 4096


def aval_leaf(aval: Any) -> Leaf:
    """The leaf of one abstract value, with the value itself as its `witness` (JAX compares avals
    with its own ``==``; from JAX 0.9 they are interned, and ``==`` is identity)."""
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
        dtype = dtype_name(aval.dtype)
        weak = bool(getattr(aval, "weak_type", False))
    except Exception:
        return Leaf("array", clip(str(aval), 80), ("array", str(aval), "", False, None), witness=aval)
    return array_leaf(shape, dtype, weak, _explicit_sharding(aval, len(shape)), aval, _type_extras(aval))


def _type_extras(aval: Any) -> str:
    """The parts of an abstract value's type beyond shape, dtype, weak type and mesh axes, where they
    are not the default: its varying manual axes (under ``shard_map``) and its memory space."""
    parts = []
    try:
        manual = getattr(aval, "manual_axis_type", None)  # JAX 0.10
        varying = getattr(manual, "varying", None) if manual is not None else getattr(aval, "vma", None)
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


_DTYPE_NAMES: dict = {}  # dtype -> its name: numpy's str() of a dtype takes microseconds


def dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = str(dtype)
        if len(_DTYPE_NAMES) < 256:
            _DTYPE_NAMES[dtype] = name
    return name


def _explicit_sharding(aval: Any, ndim: int) -> tuple | None:
    """The mesh axes of each dimension when the type carries a sharding (explicit mesh axes)."""
    try:
        sharding = getattr(aval, "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        if sharding is None or mesh is None or getattr(mesh, "empty", True):
            return None
        spec = tuple(sharding.spec) + (None,) * ndim
        axes = tuple(None if s is None else "+".join(s) if isinstance(s, tuple) else str(s) for s in spec[:ndim])
        return axes if any(axes) else None
    except Exception:
        return None


def keystr(keypath: tuple) -> str:
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
        elif kind == "FlattenedIndexKey":
            parts.append(f"[{key.key}]")
        else:
            parts.append(f"[{_dict_key_text(getattr(key, 'key', '?'))}]")
    return "".join(parts)


def _dict_key_text(key: Any) -> str:
    if type(key) is str:
        return repr(key)
    if type(key) is int:
        return str(key)
    return summarize_static(key).text  # bounded, runs no user __repr__


_BUILTIN_CONTAINERS = (dict, list, tuple)


def _type_name(t: type) -> str:
    module = getattr(t, "__module__", "") or ""
    return f"{module}.{t.__qualname__}" if module not in ("builtins", "") else t.__qualname__


class Walker:
    """Collects the leaves of argument skeletons under the user's paths.

    `leaves`: path -> Leaf; `owners`: path -> type of each custom container (a module, a
    dataclass, a named tuple); `flat_paths`: flat position of each dynamic leaf -> path.
    """

    def __init__(self, adapters: tuple):
        self.leaves: dict[str, Leaf] = {}
        self.owners: dict[str, str] = {}
        self.flat_paths: dict[int, str] = {}
        self._adapters = adapters

    def emit(self, path: str, item: Any) -> None:
        if type(item) is Placeholder:
            self.leaves[path] = item.leaf
            if item.index >= 0:
                self.flat_paths[item.index] = path
        elif item is None:
            self.leaves[path] = NONE_LEAF
        else:
            self.walk(path, item)

    def static(self, path: str, value: Any, origin: str) -> None:
        """`value`, a value in JAX's key, as a static leaf (JAX's ``==`` decides its changes)."""
        self.leaves[path] = static_leaf(summarize_static(value), origin, value)

    def leaf(self, path: str) -> Leaf | None:
        """The leaf emitted at `path` so far, or None."""
        return self.leaves.get(path)

    def static_fields(self, prefix: str, obj: Any, names, origin: str) -> None:
        """Attributes `names` of `obj` as static leaves (read without running user code)."""
        for name in names:
            try:
                value = object.__getattribute__(obj, name)
            except AttributeError:
                continue
            self.static(f"{prefix}.{name}", value, origin)

    def tree(self, prefix: str, td: Any, vals: list, start: int = 0) -> None:
        """The leaves of one argument given its treedef; its leaves are `vals[start:]`, each an
        abstract value (flat position = its index) or a `Placeholder`.

        Dicts, lists, tuples and named tuples are read from the treedef itself (no object is
        rebuilt); a subtree under a custom node is rebuilt as a skeleton for the adapters. A
        treedef made of those containers only is read once, into a plan its next traces reuse.
        """
        found = argument_plan(td)
        if found is None:
            self.walk_tree(prefix, td, vals, start)
        else:
            self.apply_plan(prefix, found[0], vals, start)

    def apply_plan(self, prefix: str, plan: tuple | None, vals: list, start: int) -> None:
        """The leaves of one argument read through its treedef's plan (None: a single leaf)."""
        if plan is None:
            self._leaf(prefix, vals[start], start)
            return
        leaves, flat_paths = self.leaves, self.flat_paths
        for op in plan:
            path = prefix + op[1]
            kind = op[0]
            if kind == _LEAF:
                i = start + op[2]
                value = vals[i]
                if type(value) is Placeholder:
                    self.emit(path, value)
                else:
                    leaves[path] = aval_leaf(value)
                    flat_paths[i] = path
            elif kind == _CONST:
                leaves[path] = op[2]
            else:  # _SEQ
                _, _, name, n, first = op
                leaves[path] = _sequence_leaf(name, n, None if first is None
                                              else vals[start + first:start + first + n])

    def walk_tree(self, prefix: str, td: Any, vals: list, start: int = 0) -> None:
        """`tree`, read node by node from the treedef (no plan)."""
        stack = [(prefix, td, start)]
        while stack:
            path, td, start = stack.pop()
            if td.num_nodes == 1 and td.num_leaves == 1:
                self._leaf(path, vals[start], start)
                continue
            kind, aux = td.node_data()
            if kind is type(None):
                self.leaves[path] = NONE_LEAF
                continue
            if td.num_leaves == 0 and kind not in _BUILTIN_CONTAINERS:
                self._custom(path, td, vals, start)  # a static node (register_static), e.g. a GraphDef
                continue
            children = td.children()
            keys = _child_keys(kind, aux, len(children))
            if keys is None:
                self._custom(path, td, vals, start)
                continue
            if kind in _BUILTIN_CONTAINERS:
                self.leaves[path + NODE_SUFFIX] = _container_leaf(kind, keys, children, vals, start, aux)
            else:
                self.owners[path] = _type_name(kind)
                self.leaves[path + NODE_SUFFIX] = custom_node_leaf(kind, len(children))
            pending = []
            for key, child in zip(keys, children):
                pending.append((path + key, child, start))
                start += child.num_leaves
            stack.extend(reversed(pending))

    def _leaf(self, path: str, value: Any, index: int) -> None:
        if type(value) is Placeholder:
            self.emit(path, value)
        else:
            self.leaves[path] = aval_leaf(value)
            self.flat_paths[index] = path

    def _custom(self, path: str, td: Any, vals: list, start: int) -> None:
        """A subtree under a custom pytree node, rebuilt with placeholders and walked."""
        items = TreeArg(td, vals, start).placeholders()
        try:
            skeleton = td.unflatten(items)
        except Exception:  # a custom node refused placeholders
            for i, item in enumerate(items):
                self.emit(f"{path}<leaf {i}>", item)
            return
        self.walk(path, skeleton)

    def walk(self, prefix: str, obj: Any) -> None:
        """Leaves of `obj`, a skeleton made of placeholders and static values (depth first, in
        argument order, with an explicit stack: a pytree as deep as JAX accepts is walked)."""
        stack = [(prefix, obj)]
        while stack:
            path, node = stack.pop()
            if type(node) is Placeholder or node is None:
                self.emit(path, node)
            else:
                stack.extend(reversed(self._children(path, node)))

    def _children(self, path: str, node: Any) -> list:
        """Record what `node` itself holds (its kind, its metadata); return its children."""
        t = type(node)
        if t not in _BUILTIN_CONTAINERS:
            self.owners[path] = _type_name(t)
            for adapter in self._adapters:
                if adapter.walk_node(self, path, node):
                    return []
        import jax

        pairs, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)  # one level
        if len(pairs) == 1 and pairs[0][1] is node:  # not a pytree node: a value in the key
            self.static(path, node, Origin.NODE_METADATA)
            return []
        children = [(path + keystr(keypath), item) for keypath, item in pairs]
        if t in _BUILTIN_CONTAINERS:
            keys = [child_path[len(path):] for child_path, _ in children]
            items = [item for _, item in children]
            leaf_like = all(type(i) is Placeholder for i in items)
            text = (f"{t.__name__} of {len(items)}{_elements(items) if items and leaf_like else ''}"
                    if t is not dict else None)
            raw_keys = [keypath[0].key for keypath, _ in pairs] if t is dict else None
            self.leaves[path + NODE_SUFFIX] = _skeleton_container_leaf(t, keys, text, raw_keys)
        else:
            dict_keys = [getattr(keypath[0], "key", None) for keypath, _ in pairs
                         if keypath and type(keypath[0]).__name__ == "DictKey"]
            self.leaves.setdefault(path + NODE_SUFFIX, custom_node_leaf(t, len(pairs), dict_keys
                                                                        if len(dict_keys) == len(pairs) else None))
        return children


def _child_keys(kind: type, aux: Any, n: int) -> list[str] | None:
    """The path suffix of each child of a dict, list, tuple or named tuple node; None for others."""
    if kind is dict:
        return [f"[{_dict_key_text(k)}]" for k in aux]
    if kind is list or kind is tuple:
        return [f"[{i}]" for i in range(n)]
    if isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return [f".{name}" for name in kind._fields]
    return None


_LEAF, _CONST, _SEQ = 0, 1, 2  # plan steps: (kind, path suffix, ...)
_PLANS: dict = {}  # JAX's serialization of a treedef of dicts, lists, tuples and None -> its plan
_UNPLANNED: set = set()  # hashes of treedefs holding other nodes or keys (JAX hashes them on each call)
_MAX_PLANS = 512
_MAX_PLANNED_LEAVES = 500_000  # leaves of the planned treedefs, all together
_planned_leaves = 0


def tree_plan(td: Any) -> tuple | None:
    """The steps that `Walker.tree` takes for `td`, with paths relative to the argument and
    leaf positions relative to its first leaf; None unless `td` is made of dicts with string
    keys, lists, tuples and None.

    Plans are found by JAX's own serialization of the treedef (bytes): comparing treedefs
    would call a user's dict key's ``__eq__``, and no treedef is kept.
    """
    try:
        key = hash(td)
    except Exception:  # node data that cannot be hashed: walked
        return None
    if key in _UNPLANNED:  # (a plannable treedef of the same hash is walked instead: slower, the same leaves)
        return None
    try:
        proto = td.serialize_using_proto()
    except Exception:  # another node or key: JAX refuses to serialize it
        proto = None
    plan = _PLANS.get(proto) if proto is not None else None
    if plan is not None:
        return plan
    plan = _new_plan(td) if proto is not None else None
    if plan is None:
        if len(_UNPLANNED) >= 4 * _MAX_PLANS:
            _UNPLANNED.clear()
        _UNPLANNED.add(key)
        return None
    _keep_plan(_PLANS, proto, plan, td.num_leaves)
    return plan


def argument_plan(td: Any, make: Callable[[Any], tuple | None] | None = None) -> tuple | None:
    """(the plan of one argument's treedef, or None for a single leaf; how many leaves its
    signature has) when the argument is plain (see `tree_plan`), else None. `make` builds the
    plan (default: `tree_plan`, which remembers it)."""
    if td.num_nodes == 1 and td.num_leaves == 1:
        return None, 1
    plan = (make or tree_plan)(td)
    return None if plan is None else (plan, len(plan))


def _keep_plan(plans: dict, key: Any, plan: Any, leaves: int) -> None:
    """Remember `plan` under `key`; all plans together stay within `_MAX_PLANNED_LEAVES`."""
    global _planned_leaves
    if len(plans) >= _MAX_PLANS or _planned_leaves + leaves > _MAX_PLANNED_LEAVES:
        _PLANS.clear()
        _CALL_PLANS.clear()
        _NAMED_CALL_PLANS.clear()
        _planned_leaves = 0
    plans[key] = plan
    _planned_leaves += leaves


_CALL_PLANS: dict = {}  # JAX's serialization of a call's (args, kwargs) treedef -> its `CallPlan` or False
# (hash of the treedef, its leaves, its nodes, JAX's argument names) -> `CallPlan`, for calls whose
# names show every dict key (see `call_plan`).
_NAMED_CALL_PLANS: dict = {}


class CallPlan(NamedTuple):
    """How to read a call whose every argument is a tree of dicts with string keys, lists, tuples
    and None: ((position or keyword name, the argument's `tree_plan` (None: one leaf), its first
    leaf), ...), positional arguments first, then keywords as JAX sorts them; and how many
    leaves its signature has (containers and None included)."""

    arguments: tuple
    n_leaves: int


def call_plan(td: Any, names: tuple | None = None) -> CallPlan | None:
    """The `CallPlan` of a traced call's whole ``(args, kwargs)`` treedef, found by JAX's own
    serialization of it (one call, bytes; see `tree_plan`); None for any other call (a static
    argument, a custom node, a dict key that is not a string).

    `names`, JAX's name of each leaf (``DebugInfo.arg_names``, e.g. ``"params['w']"``), find a
    plan seen before without serializing: the treedef's hash covers its nodes' kinds and
    arities (not dict keys, and no user code runs), and names made of every dict key (each
    ``repr``'d) tell the keys apart. Only a call whose every dict entry holds a leaf is found
    that way (an entry holding ``None`` or an empty container shows in no name)."""
    named = None
    if type(names) is tuple:
        named = (hash(td), td.num_leaves, td.num_nodes, names)
        plan = _NAMED_CALL_PLANS.get(named)
        if plan is not None:
            return plan
    try:
        proto = td.serialize_using_proto()
    except Exception:  # a node or key JAX cannot serialize: static arguments, custom nodes
        return None
    plan = _CALL_PLANS.get(proto)
    if plan is None:
        plan = _new_call_plan(td) or False
        _keep_plan(_CALL_PLANS, proto, plan, td.num_leaves if plan else 0)
    if plan and named is not None and len(names) == td.num_leaves and all(type(n) is str and n for n in names) \
            and _every_dict_entry_has_leaves(td):
        _keep_plan(_NAMED_CALL_PLANS, named, plan, td.num_leaves)
    return plan or None


def keys_are_str(td: Any) -> bool:
    """Whether every dict key in `td` is a ``str`` itself (not a subclass: then the treedef holds no
    user object, and may be kept)."""
    return all(type(k) is str for keys, _ in _dicts(td) for k in keys)


def _every_dict_entry_has_leaves(td: Any) -> bool:
    """Whether every entry of every dict in `td` holds at least one leaf (so its key is in a name)."""
    return not any(child.num_leaves == 0 for _, children in _dicts(td) for child in children)


def _dicts(td: Any):
    """(keys, children) of every dict node in `td`."""
    stack = [td]
    while stack:
        node = stack.pop()
        if node.num_nodes == 1:
            continue
        kind, aux = node.node_data()
        children = node.children()
        if kind is dict:
            yield aux, children
        stack.extend(children)


def _new_call_plan(td: Any) -> CallPlan | None:
    if td.node_data()[0] is not tuple or td.num_nodes < 3:
        return None
    args_td, kwargs_td = td.children()
    kw_kind, kw_names = kwargs_td.node_data()
    if args_td.node_data()[0] is not tuple or kw_kind is not dict or not all(type(k) is str for k in kw_names):
        return None
    arguments, start, n_leaves = [], 0, 0
    for where, child in (*enumerate(args_td.children()), *zip(kw_names, kwargs_td.children())):
        found = argument_plan(child, _new_plan)  # (the call's plan is what is remembered)
        if found is None:
            return None
        arguments.append((where, found[0], start))
        start += child.num_leaves
        n_leaves += found[1]
    return CallPlan(tuple(arguments), n_leaves)


def _new_plan(td: Any) -> tuple | None:
    steps: list = []
    stack = [("", td, 0)]
    while stack:
        path, td, start = stack.pop()
        if td.num_nodes == 1 and td.num_leaves == 1:
            steps.append((_LEAF, path, start))
            continue
        kind, aux = td.node_data()
        if kind is type(None):
            steps.append((_CONST, path, NONE_LEAF))
            continue
        if kind is dict:
            if not all(type(k) is str for k in aux):
                return None
        elif not (kind is list or kind is tuple):
            return None
        children = td.children()
        keys = _child_keys(kind, aux, len(children))
        if kind is dict:
            steps.append((_CONST, path + NODE_SUFFIX, _container_leaf(kind, keys, children, [], start)))
        else:
            n = len(keys)
            all_leaves = n and all(c.num_nodes == 1 and c.num_leaves == 1 for c in children)
            steps.append((_SEQ, path + NODE_SUFFIX, kind.__name__, n, start if all_leaves else None))
        pending = []
        for key, child in zip(keys, children):
            pending.append((path + key, child, start))
            start += child.num_leaves
        stack.extend(reversed(pending))
    return tuple(steps)


def _container_leaf(kind: type, keys: list, children: list, vals: list, start: int, raw_keys=None) -> Leaf:
    """A dict, list or tuple: its kind, size (or keys), and what its elements are."""
    name = kind.__name__
    if kind is dict:
        return _dict_leaf(keys, raw_keys)
    n = len(keys)
    all_leaves = n and all(c.num_nodes == 1 and c.num_leaves == 1 for c in children)
    return _sequence_leaf(name, n, vals[start:start + n] if all_leaves else None)


def _sequence_leaf(name: str, n: int, elements: list | None) -> Leaf:
    """A list or tuple of `n` children; `elements`: its children's values when all are leaves."""
    return node_leaf((name, n), f"{name} of {n}{_elements(elements) if elements else ''}", name)


def _skeleton_container_leaf(kind: type, keys: list, text: str | None, raw_keys: list | None = None) -> Leaf:
    name = kind.__name__
    if kind is dict:
        return _dict_leaf(keys, raw_keys)
    return node_leaf((name, len(keys)), text, name)


def _dict_leaf(keys: list, raw_keys: list | None) -> Leaf:
    """A dict node: its keys (as path suffixes); where a key is not a ``str``, JAX compares the keys
    themselves (a `Witness` of them), not their texts."""
    shown = ", ".join(k[1:-1] for k in keys[:6]) + (", …" if len(keys) > 6 else "")
    witness = None
    if raw_keys is not None and not all(isinstance(k, str) for k in raw_keys):
        witness = Witness(tuple(raw_keys))
    return node_leaf(("dict", tuple(keys)), clip(f"dict with keys {shown}" if keys else "empty dict", 120), "dict",
                     witness)


def custom_node_leaf(kind: type, n: int, dict_keys: list | None = None) -> Leaf:
    """A custom pytree node (a module, a dataclass, a named tuple, a ``FrozenDict``): its type, which
    JAX compares by identity (a class defined again is another node type)."""
    name = getattr(kind, "__qualname__", None) or getattr(kind, "__name__", "?")
    if dict_keys:
        shown = ", ".join(_dict_key_text(k) for k in dict_keys[:6]) + (", …" if len(dict_keys) > 6 else "")
        text = f"{name} with keys {shown}"
    else:
        text = name
    return node_leaf(("custom", _type_name(kind)), clip(text, 120), _type_name(kind), Witness(kind))


def _elements(items: list) -> str:
    texts = {(i.leaf if type(i) is Placeholder else aval_leaf(i)).text for i in items}
    if len(texts) != 1:
        return " arrays"
    text = texts.pop()
    python = {"i32[] (weak)": "Python ints", "i64[] (weak)": "Python ints", "f32[] (weak)": "Python floats",
              "f64[] (weak)": "Python floats", "bool[]": "bools"}
    return f" {python.get(text, text + ' arrays')}"


class StaticArg(NamedTuple):
    """An argument that is static as a whole (static_argnums, a Partial's function, ...)."""

    value: Any
    origin: str

    def emit(self, walker: Walker, path: str) -> None:
        walker.static(path, self.value, self.origin)


class TreeArg(NamedTuple):
    """An argument given as its treedef; its leaves are `vals[start:]` (abstract values or
    `Placeholder`s)."""

    td: Any
    vals: list
    start: int = 0

    def emit(self, walker: Walker, path: str) -> None:
        walker.tree(path, self.td, self.vals, self.start)

    def placeholders(self) -> list:
        """One `Placeholder` per leaf, for rebuilding the argument as a skeleton."""
        return [v if type(v) is Placeholder else Placeholder(aval_leaf(v), self.start + i)
                for i, v in enumerate(self.vals[self.start:self.start + self.td.num_leaves])]


class SkeletonArg(NamedTuple):
    """An argument given as a skeleton object (placeholders and static values)."""

    obj: Any

    def emit(self, walker: Walker, path: str) -> None:
        walker.emit(path, self.obj)


class DecodedCall(NamedTuple):
    """A library adapter's reading of its own jit wrapper's traced call."""

    jit_kind: str
    user_fun: Any  # the user's function object, or None (e.g. a module's __call__)
    identity: tuple | None  # (qualname, filename, line) where `user_fun` does not give it
    arguments: list  # [(argument name, skeleton), ...] in the user's order
    function_leaf: tuple | None  # (path, Leaf): the function itself, a static part of the key
    call: tuple  # ((argument, "position" | "keyword"), ...)


def parameters(fn: Any, drop_first: bool = False) -> tuple[list[str], str | None]:
    """Positional parameter names, and the *args name if any."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except Exception:
        return [], None
    if drop_first and params:
        params = params[1:]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return positional, var


def arg_name(i: int, positional: list[str], var: str | None) -> str:
    if i < len(positional):
        return positional[i]
    return f"{var or 'args'}[{i - len(positional)}]"


def raw_identity(fun: Any, debug_info: Any) -> tuple[str, str, int]:
    try:
        target = inspect.unwrap(fun)
    except Exception:
        target = fun
    code = getattr(target, "__code__", None)
    if code is None and not isinstance(target, type):
        code = getattr(getattr(type(target), "__call__", None), "__code__", None)
    qual = getattr(fun, "__qualname__", None) or getattr(target, "__qualname__", None)
    if not isinstance(qual, str):
        qual = getattr(debug_info, "func_name", None) or type(fun).__name__
    if code is not None:
        return qual, code.co_filename, code.co_firstlineno
    return (qual, *src_from_debug(debug_info))


def src_from_debug(debug_info: Any) -> tuple[str, int]:
    match = _SRC_INFO.match(str(getattr(debug_info, "func_src_info", "") or ""))
    if match:
        return match["file"], int(match["line"])
    return "?", 0


def argument(part, vals: list, origin: str):
    """A `StaticArg` or a `TreeArg` for one argument (a layout's `ArgPart`) of a traced call."""
    if part.static:
        return StaticArg(part.value, origin)
    return TreeArg(part.tree, vals, part.start)
