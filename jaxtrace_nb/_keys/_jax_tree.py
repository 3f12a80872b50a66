"""Where two of JAX's argument treedefs differ, in JAX's own terms.

A retrace whose decoded arguments show no difference, while JAX's key does (its treedef's
hash differs), is stated in JAX's terms instead of being guessed at: the input path in
the ``(args, kwargs)`` tree and what JAX's treedef equality found different there (the node
type, the number of children, the node data by ``==``), as `jax.tree_util`'s
``equality_errors`` would, but without running any object's ``repr``.

`JaxTree` keeps a weak reference to JAX's own structure of a trace's arguments (a
``FlatTree``, alive while JAX's tracing cache holds the entry), never the treedef itself:
the treedef holds the user's static values.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

from .._core._values import clip, summarize_static

_MAX_NODES = 100_000  # nodes compared at most (a difference further in is not looked for)
_MAX_DEPTH = 6  # containers descended into inside a node's data


class TreeDifference(NamedTuple):
    """The first difference JAX's treedef equality finds, in JAX's terms."""

    path: str  # JAX's input path, e.g. "[0][2]" (argument 2), with a part inside the node data
    what: str  # "node type" | "number of children" | "node data"
    before: str
    after: str
    static: bool  # the node data of one of JAX's ``Static`` nodes (a static argument) differs

    def sentence(self) -> str:
        where = f"at input path {self.path}" if self.path else "at the root of the arguments"
        return (
            f"{where}, JAX's treedef equality finds the {self.what} different: {self.before} → "
            f"{self.after}"
        )


class JaxTree:
    """A weak handle on JAX's argument structure of one trace (see the module's docstring)."""

    __slots__ = ("_ref", "_attr")

    def __init__(self, owner: Any, attr: str = "tree"):
        self._ref = weakref.ref(owner)  # raises TypeError when it takes no weak reference
        self._attr = attr

    def treedef(self) -> Any:
        owner = self._ref()
        return None if owner is None else getattr(owner, self._attr, None)

    def difference(self, old: JaxTree | None) -> TreeDifference | None:
        """The first difference of this treedef from `old`'s; None when they are equal or either is
        no longer held by JAX."""
        if old is None:
            return None
        a, b = self.treedef(), old.treedef()
        if a is None or b is None:
            return None
        try:
            if a == b:
                return None
            return tree_difference(a, b)
        except Exception:
            return None


def handle(owner: Any, attr: str = "tree") -> JaxTree | None:
    """A `JaxTree` of `owner` (a FlatTree), or None when it takes no weak reference."""
    if owner is None:
        return None
    try:
        return JaxTree(owner, attr)
    except TypeError:
        return None


def tree_difference(new: Any, old: Any) -> TreeDifference | None:
    """The first place, depth first, where JAX's treedef equality finds `new` and `old`
    different."""
    stack = [("", new, old)]
    seen = 0
    while stack and seen < _MAX_NODES:
        path, a, b = stack.pop()
        seen += 1
        leaf_a, leaf_b = _is_leaf(a), _is_leaf(b)
        if leaf_a and leaf_b:
            continue
        node_a = None if leaf_a else a.node_data()
        node_b = None if leaf_b else b.node_data()
        kind_a = node_a[0] if node_a else None
        kind_b = node_b[0] if node_b else None
        if leaf_a != leaf_b or kind_a is not kind_b:
            return TreeDifference(
                path=path,
                what="node type",
                before=_kind(kind_b, leaf_b),
                after=_kind(kind_a, leaf_a),
                static=False,
            )
        children_a, children_b = a.children(), b.children()
        if len(children_a) != len(children_b):
            return TreeDifference(
                path=path,
                what="number of children",
                before=f"{_kind(kind_b)} of {len(children_b)}",
                after=f"{_kind(kind_a)} of {len(children_a)}",
                static=False,
            )
        data_a, data_b = node_a[1], node_b[1]
        if not _equal(data_a, data_b):
            inner, before, after = _inside(data_a, data_b)
            static = type(data_a).__name__ == "Static" and type(data_a).__module__.startswith("jax")
            return TreeDifference(
                path=path + (f" (node data){inner}" if inner else ""),
                what="node data",
                before=before,
                after=after,
                static=static,
            )
        keys = _child_paths(kind_a, data_a, len(children_a))
        stack.extend(
            reversed([(path + key, x, y) for key, x, y in zip(keys, children_a, children_b)])
        )
    return None


def _is_leaf(td: Any) -> bool:
    return td.num_nodes == 1 and td.num_leaves == 1


def _kind(kind: Any, leaf: bool = False) -> str:
    if leaf:
        return "a leaf"
    return getattr(kind, "__qualname__", None) or type(kind).__name__


def _equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


def _child_paths(kind: Any, data: Any, n: int) -> list[str]:
    if kind is dict and isinstance(data, (list, tuple)) and len(data) == n:
        return [f"[{_key_text(k)}]" for k in data]
    return [f"[{i}]" for i in range(n)]


def _key_text(key: Any) -> str:
    return repr(key) if type(key) is str else summarize_static(key).text


def _inside(a: Any, b: Any, depth: int = 0) -> tuple[str, str, str]:
    """(the path inside two unequal node data to their first unequal part, its text before, after).

    Descends through JAX's ``Static`` wrapper, tuples, lists, dicts and treedefs held in the data
    (Equinox keeps its static partition there), comparing each part with ``==`` as JAX does."""
    if depth < _MAX_DEPTH:
        va, vb = getattr(a, "val", _NOTHING), getattr(b, "val", _NOTHING)
        if type(a).__name__ == "Static" and va is not _NOTHING and vb is not _NOTHING:
            if type(va) is not type(vb):
                return ".val", _text(vb, True), _text(va, True)
            inner, before, after = _inside(va, vb, depth + 1)
            return ".val" + inner, before, after
        if type(a) is type(b) and type(a) in (tuple, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                if not _equal(x, y):
                    inner, before, after = _inside(x, y, depth + 1)
                    return f"[{i}]" + inner, before, after
        if type(a) is dict and type(b) is dict and a.keys() == b.keys():
            for key in a:
                if not _equal(a[key], b[key]):
                    inner, before, after = _inside(a[key], b[key], depth + 1)
                    return f"[{_key_text(key)}]" + inner, before, after
        if type(a).__name__ == "PyTreeDef" and type(b).__name__ == "PyTreeDef":
            try:
                found = tree_difference(a, b)
            except Exception:
                found = None
            if found is not None:
                return f" (treedef){found.path}", found.before, found.after
    return "", _text(b), _text(a)


def _text(value: Any, with_type: bool = False) -> str:
    text = summarize_static(value).text
    if with_type:
        text = f"{text} ({type(value).__name__})"
    return clip(text, 160)


_NOTHING = object()
