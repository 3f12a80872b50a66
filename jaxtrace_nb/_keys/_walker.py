"""Every leaf of a traced call's arguments under the user's own path.

A skeleton is an argument rebuilt from its treedef with a `Placeholder` for each array (its
abstract value's `Leaf`) and the real static values elsewhere. `Walker` flattens skeletons
and treedefs with the user's paths (``opt_state[0].mu['w']``), records each custom
container's type (`owners`, evidence for the hints) and asks the library adapters what a
node keeps in its metadata; adapters write through its public methods only. Dict keys are
written without running their `repr`.
"""

from __future__ import annotations

from typing import Any

from .._core._values import summarize_static
from .._core._witness import Witness
from ._leaves import (
    BUILTIN_CONTAINERS,
    Placeholder,
    aval_leaf,
    child_keys,
    container_leaf,
    custom_node_leaf,
    elements_text,
    keystr,
    placeholders,
    sequence_leaf,
    skeleton_container_leaf,
    type_name,
)
from ._plans import ConstStep, LeafStep, Plan, argument_plan
from ._signature import NODE_SUFFIX, NONE_LEAF, Leaf, Origin, static_leaf


class Walker:
    """Collects the leaves of argument skeletons under the user's paths.

    `leaves`: path -> Leaf; `owners`: path -> type of each custom container (a module, a
    dataclass, a named tuple); `flat_paths`: flat position of each dynamic leaf -> path. Read
    them once the walk is done; write only through the methods.
    """

    def __init__(self, adapters: tuple):
        self.leaves: dict[str, Leaf] = {}
        self.owners: dict[str, str] = {}
        self.flat_paths: dict[int, str] = {}
        self.live: list[str] = []  # paths of static values compared live (`Witness.compared_live`)
        self._adapters = adapters

    # ------------------------------------------------------ for adapters
    def emit(self, path: str, item: Any) -> None:
        """`item`, part of a skeleton (a `Placeholder`, None or a node), at `path`."""
        if type(item) is Placeholder:
            self.leaves[path] = item.leaf
            self._note_live(path, item.leaf)
            if item.index >= 0:
                self.flat_paths[item.index] = path
        elif item is None:
            self.leaves[path] = NONE_LEAF
        else:
            self.walk(path, item)

    def static(self, path: str, value: Any, origin: str, holder: Any = None) -> None:
        """`value`, a value in JAX's key, as a static leaf (JAX's ``==`` decides its changes);
        `holder` reaches it in JAX's key (`Witness.holder`)."""
        self.leaves[path] = leaf = static_leaf(summarize_static(value), origin, value, holder)
        self._note_live(path, leaf)

    def static_fields(self, prefix: str, obj: Any, names, origin: str) -> None:
        """Attributes `names` of `obj` as static leaves (read without running user code)."""
        for name in names:
            try:
                value = object.__getattribute__(obj, name)
            except AttributeError:
                continue
            self.static(f"{prefix}.{name}", value, origin)

    def set(self, path: str, leaf: Leaf) -> None:
        """`leaf` is the leaf at `path` (made by the caller, e.g. an adapter's own origin)."""
        self.leaves[path] = leaf
        self._note_live(path, leaf)

    def _note_live(self, path: str, leaf: Leaf) -> None:
        witness = leaf.witness
        if type(witness) is Witness and witness.compared_live():
            self.live.append(path)

    def node(self, path: str, leaf: Leaf) -> None:
        """`leaf`, a node leaf (`node_leaf`), is what the node at `path` is."""
        self.leaves[path + NODE_SUFFIX] = leaf

    def owner(self, path: str, qualified_type: str) -> None:
        """The custom container at `path` is of `qualified_type`."""
        self.owners[path] = qualified_type

    def forget_owner(self, path: str) -> None:
        """No custom container at `path` after all (the walker noted a stand-in's type)."""
        self.owners.pop(path, None)

    def leaf(self, path: str) -> Leaf | None:
        """The leaf emitted at `path` so far, or None."""
        return self.leaves.get(path)

    # ------------------------------------------------------ treedefs
    def tree(self, prefix: str, td: Any, vals: list, start: int = 0) -> None:
        """The leaves of one argument given its treedef; its leaves are `vals[start:]`, each an
        abstract value (flat position = its index) or a `Placeholder`.

        Dicts, lists, tuples and named tuples are read from the treedef itself (no object is
        rebuilt); a subtree under a custom node is rebuilt as a skeleton for the adapters. A
        treedef made of those containers only is read once, into a plan its next traces reuse.
        """
        plan = argument_plan(td)
        if plan is None:
            self.walk_tree(prefix, td, vals, start)
        else:
            self.apply_plan(prefix, plan, vals, start)

    def apply_plan(self, prefix: str, plan: Plan, vals: list, start: int) -> None:
        """The leaves of one argument read through its treedef's plan (`_plans`)."""
        leaves, flat_paths = self.leaves, self.flat_paths
        for step in plan:
            path = prefix + step.path
            kind = type(step)
            if kind is LeafStep:
                i = start + step.index
                value = vals[i]
                if type(value) is Placeholder:
                    self.emit(path, value)
                else:
                    leaves[path] = aval_leaf(value)
                    flat_paths[i] = path
            elif kind is ConstStep:
                leaves[path] = step.leaf
            else:  # SeqStep
                first = step.first
                leaves[path] = sequence_leaf(
                    step.name,
                    step.n,
                    None if first is None else vals[start + first : start + first + step.n],
                )

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
            if td.num_leaves == 0 and kind not in BUILTIN_CONTAINERS:
                self._custom(
                    path, td, vals, start
                )  # a static node (register_static), e.g. a GraphDef
                continue
            children = td.children()
            keys = child_keys(kind, aux, len(children))
            if keys is None:
                self._custom(path, td, vals, start)
                continue
            if kind in BUILTIN_CONTAINERS:
                self.leaves[path + NODE_SUFFIX] = container_leaf(
                    kind, keys, children, vals, start, aux
                )
            else:
                self.owners[path] = type_name(kind)
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
        items = placeholders(td, vals, start)
        try:
            skeleton = td.unflatten(items)
        except Exception:  # a custom node refused placeholders
            for i, item in enumerate(items):
                self.emit(f"{path}<leaf {i}>", item)
            return
        self.walk(path, skeleton)

    # ------------------------------------------------------ skeletons
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
        if t not in BUILTIN_CONTAINERS:
            self.owners[path] = type_name(t)
            for adapter in self._adapters:
                if adapter.walk_node(self, path, node):
                    return []
        import jax

        pairs, _ = jax.tree_util.tree_flatten_with_path(
            node, is_leaf=lambda x: x is not node
        )  # one level
        if len(pairs) == 1 and pairs[0][1] is node:  # not a pytree node: a value in the key
            self.static(path, node, Origin.NODE_METADATA)
            return []
        children = [(path + keystr(keypath), item) for keypath, item in pairs]
        if t in BUILTIN_CONTAINERS:
            keys = [child_path[len(path) :] for child_path, _ in children]
            items = [item for _, item in children]
            leaf_like = all(type(i) is Placeholder for i in items)
            text = (
                f"{t.__name__} of {len(items)}{elements_text(items) if items and leaf_like else ''}"
                if t is not dict
                else None
            )
            raw_keys = [keypath[0].key for keypath, _ in pairs] if t is dict else None
            self.leaves[path + NODE_SUFFIX] = skeleton_container_leaf(t, keys, text, raw_keys)
        else:
            dict_keys = [
                getattr(keypath[0], "key", None)
                for keypath, _ in pairs
                if keypath and type(keypath[0]).__name__ == "DictKey"
            ]
            self.leaves.setdefault(
                path + NODE_SUFFIX,
                custom_node_leaf(
                    t, len(pairs), dict_keys if len(dict_keys) == len(pairs) else None
                ),
            )
        return children
