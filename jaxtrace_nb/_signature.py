"""Trace signatures and their diff: pure Python on plain records, no JAX.

A signature lists every leaf of a traced call's arguments under the user's own path
(``model.fn``, ``opt_state[0].trace.b``), each as an array type, a summary of a static
value, or ``None``. A retrace is explained by diffing its signature against the
closest earlier signature of the same function.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ._summary import StaticInfo, clip

CAUSES = (
    "first",
    "shape",
    "dtype",
    "weak_type",
    "static",
    "structure",
    "new_function",
    "context",
    "sharding",
    "unknown",
)

_MAX_LISTED = 5


class Leaf(NamedTuple):
    kind: str  # "array" | "static" | "none" | "node"
    text: str  # short display text: "f32[2]", "3", "<function f>", "None"
    token: tuple  # equal tokens <=> the same leaf for a trace cache
    type_name: str = ""  # static: the value's type; array: the dtype
    name: str | None = None  # static callables: stable name without an address
    by_identity: bool = False  # static values compared by object identity


def array_leaf(shape: tuple, dtype: str, weak: bool = False, sharding: str | None = None) -> Leaf:
    text = f"{_short_dtype(dtype)}[{','.join(map(str, shape))}]"
    if weak:
        text += " (weak)"
    return Leaf("array", text, ("array", tuple(shape), dtype, bool(weak), sharding), dtype)


def static_leaf(info: StaticInfo) -> Leaf:
    return Leaf("static", info.text, info.token, info.type_name, info.name, info.by_identity)


NONE_LEAF = Leaf("none", "None", ("none",))

# Paths of node leaves: the argument's path plus this suffix (shown without it).
NODE_SUFFIX = " (structure)"


def node_leaf(token: object, what: str) -> Leaf:
    """A pytree node's metadata (e.g. an Equinox static field set, a dict's keys)."""
    return Leaf("node", what, ("node", token))


_DTYPE_SHORT = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "complex64": "c64", "complex128": "c128", "bool": "bool",
}


def _short_dtype(dtype: str) -> str:
    return _DTYPE_SHORT.get(dtype, dtype)


class Signature(NamedTuple):
    function_token: tuple  # identity of the traced function object
    context: tuple  # ((name, value summary), ...) of JAX's trace context
    leaves: dict  # path -> Leaf, in argument order
    function_path: str | None = None  # the leaf that *is* the user's function (Equinox)
    jit_kind: str = "jit"  # "jit" | "equinox"


class Diagnosis(NamedTuple):
    cause: str
    leaf: str | None
    before: str | None
    after: str | None
    explanation: str
    hint: str
    distance: int = 0  # leaves that differ from the closest earlier trace


Change = tuple  # (path, old Leaf | None, new Leaf | None)


def diff_leaves(new: Signature, old: Signature) -> list[Change]:
    """Leaves that differ between two signatures, in argument order."""
    changes: list[Change] = []
    old_leaves = old.leaves
    for path, leaf in new.leaves.items():
        prev = old_leaves.get(path)
        if prev is None or prev.token != leaf.token:
            changes.append((path, prev, leaf))
    if len(old_leaves) != len(new.leaves) or changes:
        new_leaves = new.leaves
        for path, prev in old_leaves.items():
            if path not in new_leaves:
                changes.append((path, prev, None))
    # A node's metadata change is the least specific explanation: list leaves first.
    changes.sort(key=lambda c: (c[2] or c[1]).kind == "node")
    return [(path.removesuffix(NODE_SUFFIX), old, new) for path, old, new in changes]


def _context_changes(new: Signature, old: Signature) -> list[str]:
    if new.context == old.context:
        return []
    old_map = dict(old.context)
    changed = [name for name, value in new.context if old_map.get(name) != value]
    return changed or ["trace context"]


def closest(new: Signature, previous: Sequence[Signature]) -> tuple[Signature, list[Change], list[str]]:
    """The earlier signature with the fewest differences from `new`."""
    best = None
    for old in reversed(previous):  # newest first: ties go to the most recent trace
        changes = diff_leaves(new, old)
        ctx = _context_changes(new, old)
        fun_changed = new.function_token != old.function_token and new.function_path is None
        score = len(changes) + len(ctx) + int(fun_changed)
        if best is None or score < best[0]:
            best = (score, old, changes, ctx)
            if score <= 1:
                break
    assert best is not None
    return best[1], best[2], best[3]


def _quote(path: str) -> str:
    return f"`{path}`"


def _classify(change: Change, function_path: str | None) -> str:
    path, old, new = change
    if old is None or new is None:
        return "structure"
    if old.kind != new.kind:
        if "static" in (old.kind, new.kind) and "none" not in (old.kind, new.kind):
            return "static"
        return "structure"
    if new.kind == "array":
        _, old_shape, old_dtype, old_weak, old_sharding = old.token
        _, new_shape, new_dtype, new_weak, new_sharding = new.token
        if old_shape != new_shape:
            return "shape"
        if old_dtype != new_dtype:
            return "dtype"
        if old_weak != new_weak:
            return "weak_type"
        return "sharding"
    if new.kind == "static":
        return "new_function" if path == function_path else "static"
    return "structure"


def _is_argument(path: str) -> bool:
    return path.isidentifier()


def _describe(change: Change) -> tuple[str | None, str | None]:
    path, old, new = change
    absent = "(not passed)" if _is_argument(path) else "(absent)"
    before = clip(old.text) if old is not None else absent
    after = clip(new.text) if new is not None else absent
    return before, after


_NUMERIC_TYPES = ("int", "float", "bool", "complex")


def _hint(cause: str, change: Change, sig: Signature, jit_kind: str) -> str:
    path, old, new = change
    p = _quote(path)
    if cause == "weak_type":
        was_weak = old is not None and "weak" in old.text
        now = "a JAX/NumPy array" if was_weak else "a Python scalar"
        then = "a Python scalar" if was_weak else "a JAX/NumPy array"
        return (
            f"{p} was {then} (weak-typed scalars differ from arrays) and is now {now}: pass the same kind "
            f"every call, e.g. `jnp.asarray({path.split('[')[0].split('.')[0]}, jnp.float32)` at the call site."
        )
    if cause == "dtype":
        dtypes = {old.type_name, new.type_name} if old and new else set()
        if dtypes == {"float32", "float64"}:
            return (
                f"{p} switched between float32 and float64 (a NumPy float64 array, or "
                "`jax_enable_x64`): cast it once before the call, e.g. `jnp.asarray(x, jnp.float32)`."
            )
        return f"Cast {p} to one dtype before the call so that every call sees the same dtype."
    if cause == "shape":
        return (
            f"Each new shape of {p} compiles again: pad to a fixed shape (e.g. drop or pad the last "
            "partial batch), or bucket the sizes into a few shapes."
        )
    if cause == "new_function":
        return (
            "JAX caches per function object: define (and jit) the function once, outside any loop, "
            "and reuse it. A cell re-run re-creates it once, which is expected."
        )
    if cause == "static":
        if old is not None and new is not None and old.kind != new.kind:
            if old.kind == "static":
                return (
                    f"{p} was a static Python value and is now an array: pass the same kind every call "
                    f"(e.g. always `jnp.asarray(...)`)."
                )
            return f"{p} was an array and is now a static Python value: pass an array every call."
        if new is not None and new.by_identity:
            same_name = old is not None and old.name is not None and old.name == new.name
            name = new.name or ""
            if same_name or (old is not None and old.type_name == new.type_name and not name):
                if name == "<lambda>" or name.endswith(".<lambda>"):
                    return (
                        f"{p} is a lambda created anew each time, compared by identity: define the "
                        "function once (e.g. at module level) and reuse it."
                    )
                if name.startswith("partial("):
                    return (
                        f"{p} is a `functools.partial` re-created each time; partials compare by "
                        "identity: create it once and reuse it, or use `eqx.Partial` (a pytree) instead."
                    )
                if name.startswith("jit("):
                    return (
                        f"{p} holds a `jax.jit(...)` created anew (e.g. in `__init__`); jitted callables "
                        "compare by identity: create it once at module level and reuse it, or store the "
                        "plain function."
                    )
                if new.type_name.startswith("optax") or name.endswith(("init_fn", "update_fn")):
                    return (
                        f"{p} is an optax transformation re-created with the same name; it compares by "
                        "identity: build the optimizer once and reuse the same object."
                    )
                return (
                    f"{p} is compared by identity and was re-created with the same name: create it "
                    "once and reuse it, or mark the field static with a value that defines `__eq__`."
                )
            return f"{p} now holds a different object, compared by identity: reuse one object if the program is the same."
        if new is not None and new.type_name in _NUMERIC_TYPES:
            if jit_kind == "equinox":
                return (
                    f"`eqx.filter_jit` treats a Python {new.type_name} as static, so every new value of "
                    f"{p} compiles again: pass `jnp.asarray(...)` to make it a traced array."
                )
            return (
                f"{p} is a static argument (`static_argnums`/`static_argnames`): every new value "
                "compiles again. Make it a traced array argument unless its value must be known while tracing."
            )
        return f"Every distinct value of static {p} compiles once: keep the set of values small or make it an array."
    if cause == "structure":
        if (old is None or new is None) and _is_argument(path):
            return (f"{p} was passed in one call and not in the other: a keyword left to its default "
                    "and one given explicitly are different call structures. Pass it always, or never.")
        kinds = {old.kind if old else None, new.kind if new else None}
        if "none" in kinds:
            return (
                f"A leaf of {p} switched between an array and None. With Equinox + Optax this is usually "
                "gradients that are None for frozen leaves, so the optimizer state changes structure after "
                "the first update: initialise the optimizer state with the same filter that selects the "
                "trainable leaves, e.g. `optim.init(eqx.filter(model, filter_spec))` where `filter_spec` is "
                "what you partition or differentiate by."
            )
        if "node" in kinds:
            return (
                f"The pytree metadata of {p} changed (e.g. an `eqx.field(static=True)` value or a "
                "custom node's auxiliary data): keep static fields fixed or make them arrays."
            )
        return f"The pytree structure changed at {p} (a key, a list length or a field): pass the same structure every call."
    if cause == "sharding":
        return (
            "Same types, different placement: an argument became committed to a device "
            "(`jax.device_put(x, device)`) or its sharding/layout changed. Keep placement consistent."
        )
    return ""


def diagnose(new: Signature, previous: Sequence[Signature], *, new_object: bool = False,
             rerun_note: str | None = None) -> Diagnosis:
    """Explain the trace with signature `new` of a function traced before as `previous`.

    `new_object` says the function object is one not seen before (same name and place);
    `rerun_note`, if given, says why (e.g. "its cell In[5] was re-run").
    """
    if not previous:
        return Diagnosis("first", None, None, None, "First trace of this function.", "")
    old, changes, ctx = closest(new, previous)
    jit_kind = new.jit_kind

    function_change = [c for c in changes if c[0] == new.function_path]
    if new_object or function_change:
        name = new.function_path or "the function"
        why = f" ({rerun_note})" if rerun_note else " (created again at the same place)"
        before, after = _describe(function_change[0]) if function_change else (None, None)
        explanation = f"A new function object{why}: JAX caches traces per object, so it traced again."
        others = [c for c in changes if c[0] != new.function_path]
        if others:
            explanation += " Inputs also changed: " + ", ".join(_quote(c[0]) for c in others[:_MAX_LISTED]) + "."
        return Diagnosis("new_function", function_change[0][0] if function_change else None, before, after,
                         explanation, _hint("new_function", (name, None, None), new, jit_kind),
                         len(changes))
    if ctx:
        names = ", ".join(ctx[:_MAX_LISTED])
        before, after = dict(old.context).get(ctx[0]), dict(new.context).get(ctx[0])
        return Diagnosis(
            "context", None, f"{ctx[0]}={before}" if before is not None else None,
            f"{ctx[0]}={after}" if after is not None else None,
            f"Same inputs, but JAX's trace context changed ({names}).",
            "A JAX config value or context manager (e.g. `jax_enable_x64`, `default_matmul_precision`, "
            "a mesh) differs from the earlier trace: set it once, before the first call.",
            len(changes) + len(ctx),
        )
    if not changes:
        return Diagnosis(
            "unknown", None, None, None,
            "The inputs match an earlier trace exactly: the trace cache was probably cleared "
            "(`jax.clear_caches()`) or the entry was evicted.",
            "If this repeats, look for `jax.clear_caches()` or very many distinct inputs evicting entries.",
            0,
        )
    first = changes[0]
    cause = _classify(first, new.function_path)
    before, after = _describe(first)
    what = {
        "shape": "shape", "dtype": "dtype", "weak_type": "weak type", "static": "static value",
        "structure": "structure", "sharding": "sharding", "new_function": "function",
    }[cause]
    explanation = f"{_quote(first[0])} changed {what}: {before} → {after}."
    if cause == "static" and first[1] is not None and first[2] is not None and first[2].by_identity \
            and first[1].name is not None and first[1].name == first[2].name:
        explanation = f"{_quote(first[0])} changed: a new object with the same name ({first[2].name})."
    if len(changes) > 1:
        listed = ", ".join(_quote(c[0]) for c in changes[1:_MAX_LISTED])
        more = len(changes) - _MAX_LISTED
        explanation += f" Also changed: {listed}" + (f" and {more} more." if more > 0 else ".")
    return Diagnosis(cause, first[0], before, after, explanation, _hint(cause, first, new, jit_kind),
                     len(changes))
