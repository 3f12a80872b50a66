"""What one change JAX's comparison found stands for, and how it reads.

`classify` names the cause a changed leaf stands for; `describe` gives its before and after;
`collapse` reduces a diff to one change per path, the most telling first (a container
replaced as a whole is one change, not one per element). Pure, no JAX.
"""

from __future__ import annotations

from .._core._values import clip
from .._core._vocabulary import Cause, LeafKind
from .._core._witness import Witness, differing_part
from .._keys._signature import ArrayToken, Change, Leaf, is_custom_node, same_for_jax


def is_argument(path: str) -> bool:
    """Whether `path` is a whole argument (a parameter's name), not a part of one."""
    return path.isidentifier()


def classify(change: Change, function_path: str | None = None) -> Cause:
    """The cause a change JAX's comparison found at one leaf stands for."""
    old, new = change.old, change.new
    if old is None or new is None:
        return Cause.STRUCTURE
    if old.kind != new.kind:
        if (
            LeafKind.STATIC in (old.kind, new.kind)
            and LeafKind.NONE not in (old.kind, new.kind)
            and LeafKind.NODE not in (old.kind, new.kind)
        ):
            return Cause.STATIC
        return Cause.STRUCTURE
    if new.kind == LeafKind.ARRAY:
        a, b = old.token, new.token
        if type(a) is not ArrayToken or type(b) is not ArrayToken:
            return Cause.SHAPE if a != b else Cause.SHARDING
        if a.abstract != b.abstract:
            return (
                Cause.DTYPE
            )  # another kind of abstract value (an array and a mutable ref): its type
        if a.dtype != b.dtype and (is_key_dtype(a.dtype) or is_key_dtype(b.dtype)):
            return (
                Cause.DTYPE
            )  # a PRNG key of another kind (a raw uint32 key, a typed key): not a shape to pad
        if a.shape != b.shape:
            return Cause.SHAPE
        if a.dtype != b.dtype:
            return Cause.DTYPE
        if a.weak != b.weak:
            return Cause.WEAK_TYPE
        return (
            Cause.SHARDING
        )  # the placement part of the type: mesh axes, varying axes, memory space
    if new.kind == LeafKind.STATIC:
        return Cause.NEW_FUNCTION if change.path == function_path else Cause.STATIC
    return Cause.STRUCTURE


def is_key_dtype(dtype: str) -> bool:
    """Whether a dtype name is one of JAX's typed PRNG key dtypes (``key<fry>``)."""
    return dtype.startswith("key<")


def describe(change: Change, cause: Cause) -> tuple[str, str]:
    """The texts of a change's leaf before and after (with its placement where that changed)."""
    old, new = change.old, change.new
    absent = "(not passed)" if is_argument(change.path) else "(absent)"
    if old is None or new is None:
        return (clip(old.text) if old is not None else absent), (
            clip(new.text) if new is not None else absent
        )
    if old.detail == new.detail:  # the placement (a compile's) did not change: show the types
        return alike_told_apart(old, new, clip(old.text), clip(new.text))
    if cause == Cause.SHARDING:
        return old.detail or old.text, new.detail or new.text
    return clip(f"{old.text}, {old.detail}"), clip(f"{new.text}, {new.detail}")


def alike_told_apart(old: Leaf, new: Leaf, before: str, after: str) -> tuple[str, str]:
    """`before` and `after` of two leaves JAX's comparison finds different, never reading alike:
    a NaN says so (no NaN equals another NaN object), then the values' qualified types, then a
    plain word that the texts only look alike. An earlier object changed in place after its trace
    reads as JAX compared it."""
    if type(old.witness) is Witness and type(new.witness) is Witness:
        now = new.witness.as_compared(old.witness)
        if now is not None:
            before = f"{clip(now)} (changed in place after its trace)"
    if before != after:
        return before, after
    if getattr(new.witness, "nan", False) or getattr(old.witness, "nan", False):
        return before, f"{after} (another NaN: NaN never equals NaN)"
    if old.type_name != new.type_name:
        return f"{before} ({old.type_name})", f"{after} ({new.type_name})"
    if type(old.witness) is Witness and type(new.witness) is Witness:
        part = differing_part(old.witness, new.witness)
        if part:
            return before, f"{after} ({part})"
    if old.by_identity or new.by_identity:
        return before, f"{after} (another object)"
    return before, f"{after} (unequal by ==, same summary)"


def collapse(changes: list[Change]) -> list[Change]:
    """One change per path, the most telling first.

    A path that changed kind (an array replaced by a list, a value by None), or a container
    added or removed as a whole, is one change, reported before and instead of the changes
    of its elements; a container's own change
    (its kind, length or keys) is dropped when its elements' changes already show it.
    """
    merged: dict[str, list] = {}
    for path, old, new in changes:
        if path in merged:
            entry = merged[path]
            entry[0] = entry[0] if entry[0] is not None else old
            entry[1] = entry[1] if entry[1] is not None else new
        else:
            merged[path] = [old, new]
    replaced = [
        path
        for path, (old, new) in merged.items()
        if (
            old is not None
            and new is not None
            and (old.kind != new.kind or replaced_container(old, new))
        )
        or ((old is None) != (new is None) and (old or new).kind == LeafKind.NODE)
    ]
    out = []
    for path, (old, new) in merged.items():
        if any(under(path, p) for p in replaced):
            continue
        both_nodes = old is not None and new is not None and old.kind == new.kind == LeafKind.NODE
        if both_nodes and path not in replaced and any(under(other, path) for other in merged):
            continue
        out.append(Change(path, old, new))
    out.sort(key=lambda c: c.path not in replaced)
    return out


def replaced_container(old: Leaf, new: Leaf) -> bool:
    """Two node leaves of different container types (a ``dict`` and a ``FrozenDict``, a ``list`` and
    a ``tuple``, two classes of one name): one container replaced by another, not changed."""
    return (
        old.kind == new.kind == LeafKind.NODE
        and old.type_name != new.type_name
        or (
            is_custom_node(old)
            and is_custom_node(new)
            and old.witness is not None
            and new.witness is not None
            and not same_for_jax(old, new)
        )
    )


def under(path: str, prefix: str) -> bool:
    """Whether `path` lies inside the value at `prefix` (an element, a field, its metadata)."""
    return (
        path != prefix
        and path.startswith(prefix)
        and (path[len(prefix)] in ".[" or path[len(prefix) :].startswith(" ("))
    )
