"""Trace signatures and their diff: pure Python on plain records, no JAX.

A signature lists every component of the key JAX caches a trace on, in the user's terms:
each argument leaf under the user's own path (``model.fn``, ``opt_state[0].trace.b``) as
an array type, a summary of a static value, ``None`` or a container; how each argument
was passed (by position or keyword); the trace context; the function object. A retrace
is explained by diffing its signature against the closest earlier one of the same
function (`closest`); what the differences mean is `_diagnosis`'s business.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

from .._core._values import StaticInfo
from .._core._vocabulary import JitKind, LeafKind, Origin
from .._core._witness import Witness, values_equal

# The kinds as plain globals: made per leaf on the trace path, where an enum's attribute lookup
# costs.
_ARRAY, _STATIC, _NODE = LeafKind.ARRAY, LeafKind.STATIC, LeafKind.NODE


class Leaf(NamedTuple):
    kind: LeafKind
    text: str  # short display text: "f32[2]", "3", "<function f>", "None", "list of 2"
    token: tuple  # equal tokens <=> the same leaf for JAX's cache key
    type_name: str = ""  # static: the value's type; array: the dtype; node: the container type
    name: str | None = None  # static callables: stable name without an address
    by_identity: bool = False  # static values compared (hashed) by object identity
    origin: str = ""  # what made a static value static: an `Origin`, or a library adapter's own
    detail: str = ""  # an array's placement at a compile ("uncommitted", "committed to cpu:0")
    # What JAX's cache key compares at this leaf, compared as JAX compares it (`same_for_jax`): an
    # array's abstract value, a static value's `Witness`; None where `token` is exactly that (a
    # container of builtin kind with string keys, None).
    witness: object = None


_DTYPE_SHORT = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "complex64": "c64",
    "complex128": "c128",
    "bool": "bool",
}


def short_dtype(dtype: str) -> str:
    return _DTYPE_SHORT.get(dtype, dtype)


_NO_VALUE = object()


class ArrayToken(NamedTuple):
    """What an array leaf's abstract value is, by the attributes a diagnosis names."""

    kind: str  # "array"
    shape: tuple
    dtype: str
    weak: bool
    sharding: tuple | None  # the mesh axes of each dimension, where the type carries a sharding
    other: str = ""  # the rest of the type where it is not the default (memory space, varying axes)
    abstract: str = (
        ""  # JAX's kind of abstract value where it is not an array's (``Ref`` for a mutable ref)
    )


def array_leaf(
    shape: tuple,
    dtype: str,
    weak: bool = False,
    sharding: tuple | None = None,
    aval: object = None,
    other: str = "",
    abstract: str = "",
) -> Leaf:
    """An array leaf; `sharding` is the per-dimension mesh axes of an explicit sharding, if any;
    `aval` is JAX's abstract value itself (the leaf's `witness`)."""
    if sharding:
        dims = ",".join(f"{d}@{axes}" if axes else str(d) for d, axes in zip(shape, sharding))
    else:
        dims = ",".join(map(str, shape))
    text = f"{short_dtype(dtype)}[{dims}]"
    if weak:
        text += " (weak)"
    if other:
        text += f" {{{other}}}"
    if abstract:
        text = f"{abstract}{{{text}}}"
    return Leaf(
        _ARRAY,
        text,
        ArrayToken("array", tuple(shape), dtype, bool(weak), sharding, other, abstract),
        dtype,
        witness=aval,
    )


def static_leaf(
    info: StaticInfo, origin: str = "", value: object = _NO_VALUE, holder: object = None
) -> Leaf:
    """A static value's leaf; with `value` (the object itself), a `Witness` of it: JAX's ``==``
    decides whether it changed (with the same type too for a ``static_argnums`` value); `holder`
    reaches the value in JAX's key (`Witness.holder`)."""
    witness = (
        None
        if value is _NO_VALUE
        else Witness(value, typed=origin == Origin.STATIC_ARGNUMS, holder=holder)
    )
    return Leaf(
        _STATIC,
        info.text,
        info.token,
        info.type_name,
        info.name,
        info.by_identity,
        origin,
        witness=witness,
    )


def same_for_jax(old: Leaf, new: Leaf) -> bool:
    """Whether JAX's cache-key comparison finds the two leaves equal: its ``==`` on the values it
    keeps (abstract values, static values through their `Witness`), the token where that is all
    JAX compares (containers of builtin kinds, None)."""
    if old is new:
        return True
    if old.kind != new.kind:
        return False
    a, b = old.witness, new.witness
    if a is None or b is None:
        return old.token == new.token
    if type(a) is Witness:
        return type(b) is Witness and a.equals(b)
    return values_equal(a, b)


def uncertain_paths(new: Signature, old: Signature) -> list[str]:
    """The static leaves found equal only by their hashes (`Witness.certain`): values jaxtrace_nb
    could not keep to compare as JAX does."""
    found = []
    old_leaves = old.leaves
    for path, leaf in new.leaves.items():
        prev = old_leaves.get(path)
        a, b = leaf.witness, getattr(prev, "witness", None)
        if type(a) is Witness and type(b) is Witness and not a.certain(b) and a.equals(b):
            found.append(path)
    return found


NONE_LEAF = Leaf(LeafKind.NONE, "None", ("none",))

# Paths of node leaves: the node's path plus this suffix (shown without it).
NODE_SUFFIX = " (structure)"

CUSTOM_NODE = (
    "custom"  # the first part of a custom node's `NodeToken.node`: ("custom", qualified type)
)


class NodeToken(NamedTuple):
    """A node leaf's token: what JAX's treedef compares of the node, besides its children."""

    kind: str  # "node"
    # ("dict", keys), (list or tuple name, length), (`CUSTOM_NODE`, qualified type), or an adapter's
    # own
    node: object

    @property
    def custom(self) -> bool:
        """Whether the node is a custom pytree node (compared by its type, which JAX holds)."""
        node = self.node
        return type(node) is tuple and len(node) == 2 and node[0] == CUSTOM_NODE


def node_leaf(token: object, what: str, type_name: str = "", witness: object = None) -> Leaf:
    """A pytree node: a container's kind and size, or a node's metadata (aux data). `witness`:
    what JAX compares of it where the token is not exactly that (a custom node's type)."""
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, and plans make these per
    # trace.
    return Leaf(_NODE, what, tuple.__new__(NodeToken, ("node", token)), type_name, witness=witness)


def is_custom_node(leaf: Leaf) -> bool:
    """Whether `leaf` is the node leaf of a custom pytree node (a module, a dataclass, ...)."""
    token = leaf.token
    return leaf.kind == _NODE and type(token) is NodeToken and token.custom


def function_token(fun: Any, compared: bool) -> tuple:
    """What JAX's tracing cache compares of the traced function object. Where JAX compares `fun`
    itself (`compared`: ``jax.jit``'s ``weakref_lru_cache`` key, whose ``==`` compares the objects
    while both live, then identity; Equinox's static leaf), a weak reference to it: ``obj.step``
    taken twice is one function. Otherwise, or where it takes no weak reference or has no hash,
    its identity (``nnx.jit`` hands JAX a wrapper of its own per call: two functions)."""
    if compared and fun is not None:
        try:
            ref = weakref.ref(fun)
            hash(ref)  # (JAX hashed it at its lookup; kept in the reference from now on)
            return ("fun", ref)
        except Exception:
            pass
    return ("id", id(fun))


def same_function(a: tuple, b: tuple) -> bool:
    """Whether two `function_token`s are one function to JAX's lookup: the same token, or weak
    references whose objects hash alike and are ``==`` (hash first, as JAX's dict lookup: an
    ``__eq__`` JAX never calls is never called here); an ``==`` that raises: two functions."""
    if a is b or a[1] is b[1]:
        return True
    if a[0] != "fun" or b[0] != "fun":
        return a == b
    try:
        return hash(a[1]) == hash(b[1]) and a[1] == b[1]
    except Exception:
        return False


def compared_by_equality(signature: Any) -> bool:
    """Whether JAX's cache compares the traced function object with ``==`` (`function_token`; a
    `Signature` or a `DeferredSignature`)."""
    return signature.function_token[0] == "fun"


class Signature(NamedTuple):
    function_token: tuple  # the traced function object, as JAX compares it (`function_token`)
    context: tuple  # ((name, value text), ...) of JAX's trace context
    leaves: dict  # path -> Leaf, in argument order
    function_path: str | None = None  # the leaf that *is* the user's function (Equinox)
    jit_kind: str = JitKind.JIT  # a `JitKind`, or a `LoweringKind` for a lowering's signature
    call: tuple = ()  # ((argument, "position" | "keyword"), ...): how each argument was passed
    owners: dict | None = None  # path -> qualified type of the custom container at that path
    key_parts: tuple = ()  # ((component, hash), ...) of JAX's own cache key: equal keys hash equal
    # JAX's trace-context values themselves (config values, compared with JAX's ``==``), or ()
    context_values: tuple = ()
    # A weak reference to JAX's own argument structure of this trace (alive while JAX caches it),
    # to say a difference the leaves do not name in JAX's terms; or None
    tree_ref: object = None
    library: bool = (
        False  # the traced function is a library's (its own hints cannot ask to change it)
    )

    @property
    def n_leaves(self) -> int:
        return len(self.leaves)

    def get(self) -> Signature:
        """This signature (a `DeferredSignature` builds its own here)."""
        return self


class Change(NamedTuple):
    """One leaf that JAX's comparison finds different between two signatures."""

    path: str  # the user's path (a node's without `NODE_SUFFIX`)
    old: Leaf | None  # None: not in the earlier signature
    new: Leaf | None  # None: not in the new one


def diff_leaves(new: Signature, old: Signature) -> list[Change]:
    """Leaves that differ between two signatures, in argument order, leaves before nodes."""
    changes: list[Change] = []
    old_leaves = old.leaves
    for path, leaf in new.leaves.items():
        prev = old_leaves.get(path)
        if prev is None or not same_for_jax(prev, leaf):
            changes.append(Change(path.removesuffix(NODE_SUFFIX), prev, leaf))
    if len(old_leaves) != len(new.leaves) or changes:
        new_leaves = new.leaves
        for path, prev in old_leaves.items():
            if path not in new_leaves:
                changes.append(Change(path.removesuffix(NODE_SUFFIX), prev, None))
    # A node's metadata change is the least specific explanation: list leaves first.
    changes.sort(key=lambda change: (change.new or change.old).kind == _NODE)
    return changes


def call_changes(new: Signature, old: Signature) -> list[tuple[str, str, str]]:
    """Arguments passed by position in one call and by keyword in the other: (name, old, new)."""
    if new.call == old.call:
        return []
    old_call = dict(old.call)
    return [
        (name, old_call[name], how)
        for name, how in new.call
        if name in old_call and old_call[name] != how
    ]


def context_changes(new: Signature, old: Signature) -> list[str]:
    """The names of the trace-context entries JAX's ``==`` finds different (by their values where
    both signatures keep them, else by their texts)."""
    a, b = old.context_values, new.context_values
    if a and b and len(a) == len(b) and len(b) == len(new.context):
        if values_equal(a, b):  # (tuple equality: each pair by identity, then ``==``)
            return []
        return [name for (name, _), x, y in zip(new.context, a, b) if not values_equal(x, y)] or [
            "trace context"
        ]
    if new.context == old.context:
        return []
    old_map = dict(old.context)
    changed = [name for name, value in new.context if old_map.get(name) != value]
    return changed or ["trace context"]


def closest(
    new: Signature, previous: Sequence[Signature]
) -> tuple[Signature, list[Change], list[str]]:
    """The earlier signature with the fewest differences from `new`: (it, leaf changes, context
    changes)."""
    found = search(new, previous)
    return previous[found.index], found.changes, found.context


class Found(NamedTuple):
    """The closest earlier key (`search`): its index, its differences, and the other keys as
    close."""

    index: int
    changes: list[Change]
    context: list[str]
    score: int  # differing components: leaves, trace-context entries, ways of passing, the function
    ties: tuple  # indices of the other earlier keys with as few differences, newest first


def search(new: Signature, previous: Sequence[Signature]) -> Found:
    """The earlier key closest to `new` among all of `previous` (oldest first): the fewest differing
    components, ties broken as a person would (`_score`'s rank: the fewest trace-context
    differences, then the fewest input-pytree ones, then the fewest type ones, so a key that differs
    only in a type is closer than one that differs in structure, and that one closer than one that
    differs in context), then the most recent. Each key's count stops once it passes the best so
    far."""
    best, ranked = None, []  # ranked: (rank, -index) of each key as close as the best so far
    for i in range(len(previous) - 1, -1, -1):
        limit = best if best is not None else 1 << 30
        score, rank = _score(new, previous[i], limit)
        if score < limit:
            best, ranked = score, []
        if score <= limit:
            best = score
            ranked.append((rank, -i))
    assert best is not None
    ranked.sort()
    _, index = ranked[0]
    index = -index
    old = previous[index]
    ties = tuple(sorted((-i for _, i in ranked[1:]), reverse=True))
    return Found(
        index=index,
        changes=diff_leaves(new, old),
        context=context_changes(new, old),
        score=best,
        ties=ties,
    )


def same_key(new: Signature, old: Signature) -> bool:
    """Whether no component of the two keys differs by JAX's comparison."""
    return _score(new, old, 0)[0] == 0


def _score(new: Signature, old: Signature, limit: int) -> tuple[int, tuple[int, int, int]]:
    """The differing components of two keys, counted up to just past `limit`, and the rank of their
    difference among keys as far: (trace-context differences, input-pytree differences (structure,
    static values, ways of passing), input-type differences), lowest first. JAX's explainer
    (`partial_eval.explain`) ranks the other way, the key that differs at the lowest layer first
    (docs/design.md, "What 'closest' means")."""
    context = (
        0
        if new.context_values is old.context_values and new.context_values
        else len(context_changes(new, old))
    )
    tree = 0 if new.call == old.call else len(call_changes(new, old))
    n = (
        context
        + tree
        + (new.function_path is None and not same_function(new.function_token, old.function_token))
    )
    if n > limit:
        return n, _FAR
    types = 0
    old_leaves, new_leaves = old.leaves, new.leaves
    if old_leaves is not new_leaves:
        for path, leaf in new_leaves.items():
            prev = old_leaves.get(path)
            if prev is leaf:
                continue
            if prev is None or not same_for_jax(prev, leaf):
                n += 1
                if prev is not None and prev.kind == leaf.kind == LeafKind.ARRAY:
                    types += 1
                else:
                    tree += 1
                if n > limit:
                    return n, _FAR
        if len(old_leaves) != len(new_leaves) or n:
            for path in old_leaves:
                if path not in new_leaves:
                    n += 1
                    tree += 1
                    if n > limit:
                        return n, _FAR
    return n, (context, tree, types)


_FAR = (1 << 30, 0, 0)  # the rank of a key whose count passed the limit (never kept)


def owners_of(signature: Signature, path: str) -> list[str]:
    """The qualified types of the custom containers holding `path`, innermost first."""
    owners = signature.owners
    if not owners:
        return []
    found = [
        (len(prefix), type_name)
        for prefix, type_name in owners.items()
        if path.startswith(prefix) and path[len(prefix) : len(prefix) + 1] in (".", "[", "")
    ]
    return [type_name for _, type_name in sorted(found, reverse=True)]
