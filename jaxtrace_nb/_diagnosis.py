"""The cause vocabulary, and every explanation and hint, in one place (pure, no JAX).

`diagnose` explains a trace from its signature and the function's earlier ones;
`diagnose_compile` explains a compile that followed no new trace from the lowering
signatures; `unrolled_loop_hint` and the fixed texts cover the rest. A hint names a
library or a mechanism only when the evidence in the signature says so: the changed
leaf's origin (what made a value static), the type of the object it lives in, the
kind of value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ._records import Unrolled
from ._signature import Change, Leaf, Origin, Signature, call_changes, closest, owners_of
from ._values import clip

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
_WHAT = {
    "shape": "shape", "dtype": "dtype", "weak_type": "weak type", "static": "static value",
    "structure": "structure", "sharding": "placement", "new_function": "function",
}
_EXPECTED_PER_VALUE = ("bool", "str", "NoneType")  # static flags and modes: one compile per value


class Diagnosis(NamedTuple):
    cause: str | None  # None: not diagnosed (reduced mode)
    leaf: str | None
    before: str | None
    after: str | None
    explanation: str
    hint: str
    distance: int = 0  # leaves that differ from the closest earlier trace


FIRST = Diagnosis("first", None, None, None, "First trace of this function.", "")
def first_after_failures(failed: int) -> Diagnosis:
    """The first completed trace of a function, after `failed` attempts that raised."""
    if not failed:
        return FIRST
    return FIRST._replace(explanation=f"First completed trace of this function ({failed} earlier attempt(s) "
                                      "raised while tracing, so JAX cached nothing for them).")


NO_SIGNATURE = "No signature was recorded for this trace (its arguments could not be decoded)."
REDUCED = Diagnosis(None, None, None, None,
                    "Reduced mode: the cause of a retrace is not available on this JAX version.", "")


def _q(path: str) -> str:
    return f"`{path}`"


def _is_argument(path: str) -> bool:
    return path.isidentifier()


def _root(path: str) -> str:
    return path.split("[")[0].split(".")[0]


# ------------------------------------------------------------------ classify
def classify(change: Change, function_path: str | None = None) -> str:
    path, old, new = change
    if old is None or new is None:
        return "structure"
    if old.kind != new.kind:
        if "static" in (old.kind, new.kind) and "none" not in (old.kind, new.kind) \
                and "node" not in (old.kind, new.kind):
            return "static"
        return "structure"
    if new.kind == "array":
        if old.token[1] != new.token[1]:
            return "shape"
        if old.token[2] != new.token[2]:
            return "dtype"
        if old.token[3] != new.token[3]:
            return "weak_type"
        return "sharding"
    if new.kind == "static":
        return "new_function" if path == function_path else "static"
    return "structure"


def _describe(change: Change, cause: str) -> tuple[str, str]:
    path, old, new = change
    absent = "(not passed)" if _is_argument(path) else "(absent)"
    if old is None or new is None:
        return (clip(old.text) if old is not None else absent), (clip(new.text) if new is not None else absent)
    if old.detail == new.detail:  # the placement (a compile's) did not change: show the types
        return clip(old.text), clip(new.text)
    if cause == "sharding":
        return old.detail or old.text, new.detail or new.text
    return clip(f"{old.text}, {old.detail}"), clip(f"{new.text}, {new.detail}")


def _collapse(changes: list[Change]) -> list[Change]:
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
    replaced = [path for path, (old, new) in merged.items()
                if (old is not None and new is not None and old.kind != new.kind)
                or ((old is None) != (new is None) and (old or new).kind == "node")]
    out = []
    for path, (old, new) in merged.items():
        if any(_under(path, p) for p in replaced):
            continue
        both_nodes = old is not None and new is not None and old.kind == new.kind == "node"
        if both_nodes and any(_under(other, path) for other in merged):
            continue
        out.append((path, old, new))
    out.sort(key=lambda c: c[0] not in replaced)
    return out


def _under(path: str, prefix: str) -> bool:
    return path != prefix and path.startswith(prefix) and path[len(prefix)] in ".["


# --------------------------------------------------------------------- hints
def _hint(cause: str, change: Change, sig: Signature) -> str:
    path, old, new = change
    p = _q(path)
    owners = owners_of(sig, path)
    owner = next((o for o in owners if o.startswith("optax")), owners[0] if owners else "")
    if cause == "weak_type":
        return _weak_type_hint(p, path, old)
    if cause == "dtype":
        return _dtype_hint(p, path, old, new, owner)
    if cause == "shape":
        return (f"Each new shape of {p} compiles again: pad to a fixed shape (e.g. drop or pad the last "
                "partial batch), or bucket the sizes into a few shapes.")
    if cause == "new_function":
        return NEW_FUNCTION_HINT
    if cause == "static":
        return _static_hint(p, old, new, owner)
    if cause == "structure":
        return _structure_hint(p, path, old, new, owner)
    if cause == "sharding":
        return SHARDING_HINT
    return ""


NEW_FUNCTION_HINT = ("JAX caches per function object: define (and jit) the function once, outside any loop, "
                     "and reuse it. A cell re-run re-creates it once, which is expected.")
SHARDING_HINT = ("Keep each argument's placement the same across calls: either always committed to one device "
                 "(`jax.device_put(x, device)`) or never, with the same sharding and layout.")


def _weak_type_hint(p: str, path: str, old: Leaf | None) -> str:
    was_weak = old is not None and "weak" in old.text
    then, now = ("a Python scalar", "an array") if was_weak else ("an array", "a Python scalar")
    fix = (f"e.g. `jnp.asarray({path}, jnp.float32)` at the call site" if _is_argument(path)
           else "e.g. create it with `jnp.asarray(value, jnp.float32)` where it is set")
    return (f"{p} was {then} (a Python scalar is weakly typed, an array is not) and is now {now}: "
            f"pass the same kind every call, {fix}.")


def _dtype_hint(p: str, path: str, old: Leaf | None, new: Leaf | None, owner: str) -> str:
    dtypes = {old.type_name, new.type_name} if old and new else set()
    if owner.startswith("optax"):
        return (f"{p} lives in optax's `{owner.rsplit('.', 1)[-1]}`, created by the optimizer's `init`: its "
                "dtype follows the parameters given to `init`. Initialise the optimizer with parameters of the "
                "dtype you train with, or cast the updates to that dtype before `apply_updates`.")
    where = ("at the call site" if _is_argument(path)
             else "where it is created" + (f" (it lives in a `{owner.rsplit('.', 1)[-1]}`)" if owner else ""))
    if dtypes == {"float32", "float64"}:
        return (f"{p} switched between float32 and float64 (a NumPy float64 array, or `jax_enable_x64`): "
                f"cast it to one dtype {where}, e.g. `jnp.asarray(..., jnp.float32)`.")
    return f"Give {p} one dtype every call: cast it {where}."


def _static_hint(p: str, old: Leaf | None, new: Leaf | None, owner: str) -> str:
    if old is not None and new is not None and old.kind != new.kind:
        if old.kind == "static":
            return (f"{p} was a static Python value and is now an array: pass the same kind every call "
                    "(e.g. always `jnp.asarray(...)`).")
        return f"{p} was an array and is now a static Python value: pass an array every call."
    assert new is not None
    if new.by_identity:
        return _identity_hint(p, old, new, owner)
    mechanism = _MECHANISM.get(new.origin, "")
    if new.type_name in _EXPECTED_PER_VALUE or new.type_name.startswith("enum"):
        return (f"{p} is static{mechanism}: JAX compiles once per value, which is expected for a flag or a "
                "mode that Python code branches on. It only costs when the value changes often.")
    if new.origin == Origin.FILTER_JIT and new.type_name in ("int", "float", "complex"):
        return (f"`eqx.filter_jit` treats a Python {new.type_name} as static, so every new value of {p} compiles "
                "again: pass `jnp.asarray(...)` to make it a traced array.")
    if new.origin == Origin.STATIC_ARGNUMS:
        return (f"{p} is a static argument (`static_argnums`/`static_argnames`): every new value compiles "
                "again. Make it a traced array argument unless its value must be known while tracing.")
    if new.origin == Origin.EQX_STATIC_FIELD:
        return (f"{p} is an `eqx.field(static=True)`: every new value compiles again. Keep it fixed, or make it "
                "an ordinary (array) field if it changes.")
    if new.origin == Origin.DATACLASS_META:
        return (f"{p} is a meta field of a `jax.tree_util.register_dataclass` pytree, part of the tree's "
                "structure: every new value compiles again. Declare it a data field to trace it.")
    if new.origin == Origin.NNX_ATTRIBUTE:
        if old is not None and old.text == new.text:  # alike, yet unequal: a new object compared by identity inside
            if new.type_name.startswith("optax"):
                return (f"{p} holds an optax transformation, kept in the NNX graph's static part. One built again "
                        "(e.g. a new `nnx.Optimizer` each epoch) compares unequal even when built alike: its "
                        "functions compare by identity. Create the optimizer once and reuse it.")
            return (f"{p} is a plain Python attribute of an NNX module, kept in its static graph, and now holds a "
                    "new object that looks the same but compares unequal (by identity): create it once and reuse it.")
        return (f"{p} is a plain Python attribute of an NNX module, kept in its static graph: every new value "
                "compiles again. Hold it in an `nnx.Variable` to trace it instead.")
    return f"Every distinct value of {p}{mechanism} compiles once: keep the set of values small or make it an array."


_MECHANISM = {
    Origin.STATIC_ARGNUMS: " (`static_argnums`/`static_argnames`)",
    Origin.FILTER_JIT: " (a non-array argument under `eqx.filter_jit`)",
    Origin.EQX_STATIC_FIELD: " (`eqx.field(static=True)`)",
    Origin.DATACLASS_META: " (a `register_dataclass` meta field)",
    Origin.NNX_ATTRIBUTE: " (a Python attribute of an NNX module)",
    Origin.NODE_METADATA: " (a custom pytree node's metadata)",
    Origin.PARTIAL_FUNC: " (the function of a `jax.tree_util.Partial`)",
}


def _identity_hint(p: str, old: Leaf | None, new: Leaf, owner: str) -> str:
    same_name = old is not None and old.name is not None and old.name == new.name
    name = new.name or ""
    same_type = old is not None and old.type_name == new.type_name
    if not (same_name or (same_type and not name)):
        return f"{p} now holds a different object, compared by identity: reuse one object if the program is the same."
    if name == "<lambda>" or name.endswith(".<lambda>"):
        return (f"{p} is a lambda created anew each time, compared by identity: define the function once "
                "(e.g. at module level) and reuse it.")
    if name.startswith("partial("):
        return (f"{p} is a `functools.partial` re-created each time; partials compare by identity: create it "
                "once and reuse it, or use `jax.tree_util.Partial` / `eqx.Partial` (pytrees) instead.")
    if name.startswith("jit("):
        return (f"{p} holds a `jax.jit(...)` created anew (e.g. in `__init__`); jitted callables compare by "
                "identity: create it once at module level and reuse it, or store the plain function.")
    if new.type_name.startswith("optax") or owner.startswith("optax"):
        return (f"{p} is part of an optax transformation re-created with the same name; it compares by identity: "
                "build the optimizer once and reuse the same object.")
    if name:
        return (f"{p} is compared by identity and was re-created with the same name: create it once and reuse "
                "it.")
    kind = new.type_name.rsplit(".", 1)[-1]
    return (f"{p} is a `{kind}` object hashed by identity (its class defines no `__eq__`/`__hash__`), so every "
            f"new instance compiles again: reuse one instance, define `__eq__` and `__hash__` on `{kind}`, or "
            "make it a pytree (e.g. an `eqx.Module`).")


def _structure_hint(p: str, path: str, old: Leaf | None, new: Leaf | None, owner: str) -> str:
    if (old is None or new is None) and _is_argument(path):
        return (f"{p} was passed in one call and not in the other: a keyword left to its default and one given "
                "explicitly are different call structures. Pass it always, or never.")
    kinds = {old.kind if old else None, new.kind if new else None}
    if "none" in kinds and kinds & {"array", "node"}:
        if owner.startswith("optax"):
            return (f"{p} in optax's `{owner.rsplit('.', 1)[-1]}` switched between an array and None: the "
                    "optimizer state changes structure when gradients are None for some leaves (frozen "
                    "parameters). Initialise the optimizer state with the same filter that selects the trainable "
                    "leaves, e.g. `optim.init(eqx.filter(model, filter_spec))`.")
        return (f"{p} switched between an array and None: pass the same structure every call (e.g. an array of "
                "zeros instead of None, or None always).")
    if "node" in kinds and len(kinds - {None}) == 2:
        return (f"{p} changed kind of container (an array, a list, a tuple or a dict are different pytrees): "
                "pass the same kind every call, e.g. always `jnp.asarray(...)`.")
    if "node" in kinds:
        return f"The pytree structure changed at {p} (a key, a list length or a field): pass the same structure every call."
    return f"The pytree structure changed at {p}: pass the same structure every call."


# ------------------------------------------------------------------ diagnose
def diagnose(new: Signature, previous: Sequence[Signature], *, new_object: bool = False,
             rerun_note: str | None = None, cache_cleared: bool = False) -> Diagnosis:
    """Explain the trace with signature `new` of a function traced before as `previous`.

    `new_object` says the function object is one not seen before (same name and place);
    `rerun_note`, if given, says why (e.g. "its cell In[5] was re-run"); `cache_cleared` that
    JAX's trace cache was emptied since the function's last trace.
    """
    if not previous:
        return FIRST
    old, changes, ctx = closest(new, previous)
    changes = _collapse(changes)
    function_change = [c for c in changes if c[0] == new.function_path]
    if new_object or function_change:
        return _new_function(new, changes, function_change, rerun_note)
    if ctx:
        return _context(new, old, ctx, len(changes))
    if changes:
        return _leaf_change(new, changes)
    moved = call_changes(new, old)
    if moved:
        name, was, now = moved[0]
        return Diagnosis(
            "structure", name, f"by {was}", f"by {now}",
            f"{_q(name)} was passed by {was} and is now passed by {now}: JAX's cache key keeps positional and "
            "keyword arguments apart, so the call has a new input structure.",
            f"Pass {_q(name)} the same way every call (always by keyword, or always by position).", len(moved))
    return _same_key(new, old, cache_cleared)


def _new_function(new: Signature, changes, function_change, rerun_note) -> Diagnosis:
    why = f" ({rerun_note})" if rerun_note else " (created again at the same place)"
    before, after = _describe(function_change[0], "new_function") if function_change else (None, None)
    explanation = f"A new function object{why}: JAX caches traces per object, so it traced again."
    others = [c for c in changes if c[0] != new.function_path]
    if others:
        explanation += " Inputs also changed: " + ", ".join(_q(c[0]) for c in others[:_MAX_LISTED]) + "."
    return Diagnosis("new_function", function_change[0][0] if function_change else None, before, after,
                     explanation, NEW_FUNCTION_HINT, len(changes))


def _context(new: Signature, old: Signature, ctx: list[str], n_changes: int) -> Diagnosis:
    names = ", ".join(ctx[:_MAX_LISTED])
    before, after = dict(old.context).get(ctx[0]), dict(new.context).get(ctx[0])
    return Diagnosis(
        "context", None, f"{ctx[0]}={before}" if before is not None else None,
        f"{ctx[0]}={after}" if after is not None else None,
        f"Same inputs, but JAX's trace context changed ({names}).",
        "A JAX config value or context manager (e.g. `jax_enable_x64`, `default_matmul_precision`, a mesh, "
        "a default device) differs from the earlier trace: set it once, before the first call.",
        n_changes + len(ctx))


def _leaf_change(new: Signature, changes: list[Change]) -> Diagnosis:
    first = changes[0]
    cause = classify(first, new.function_path)
    before, after = _describe(first, cause)
    explanation = f"{_q(first[0])} changed {_WHAT[cause]}: {before} → {after}."
    old_leaf, new_leaf = first[1], first[2]
    if cause == "static" and old_leaf is not None and new_leaf is not None and new_leaf.by_identity:
        if old_leaf.name is not None and old_leaf.name == new_leaf.name:
            explanation = f"{_q(first[0])} changed: a new object with the same name ({new_leaf.name})."
        elif old_leaf.type_name == new_leaf.type_name:
            kind = new_leaf.type_name.rsplit(".", 1)[-1]
            explanation = f"{_q(first[0])} changed: a new `{kind}` object, compared by identity."
    if len(changes) > 1:
        listed = ", ".join(f"{_q(c[0])} ({classify(c, new.function_path)})" for c in changes[1:_MAX_LISTED])
        more = len(changes) - _MAX_LISTED
        explanation += f" Also changed: {listed}" + (f" and {more} more." if more > 0 else ".")
    return Diagnosis(cause, first[0], before, after, explanation, _hint(cause, first, new), len(changes))


def _same_key(new: Signature, old: Signature, cache_cleared: bool) -> Diagnosis:
    parts = [name for (name, a), (_, b) in zip(new_parts(new), new_parts(old)) if a != b]
    if parts:  # JAX's key differs where the decoded arguments do not
        what = ", ".join(parts)
        cause = "new_function" if parts[0] in ("function", "debug info") else "structure"
        return Diagnosis(cause, None, None, None,
                         f"The decoded arguments match an earlier trace, but JAX's cache key differs in: {what}.",
                         NEW_FUNCTION_HINT if cause == "new_function" else "", 0)
    seen = "JAX's caches were cleared (`jax.clear_caches()`) since then" if cache_cleared else \
        "JAX's trace cache no longer held that entry"
    return Diagnosis(
        "unknown", None, None, None,
        f"Traced again with a cache key identical to an earlier trace of this function: {seen}.",
        "" if cache_cleared else "An entry leaves JAX's cache when its function object is garbage-collected or "
        "its cache is cleared (`f.clear_cache()`, `jax.clear_caches()`).", 0)


def new_parts(sig: Signature) -> tuple:
    return sig.key_parts or ()


# ------------------------------------------------------- compiles and loops
def diagnose_compile(new: Signature, previous: Sequence[Signature], *, traced: bool) -> Diagnosis:
    """Explain a compile that followed no new trace, from the lowering signatures of the
    function's earlier compiles. `traced` says whether jaxtrace_nb saw the function trace."""
    if not previous:
        if traced:
            return Diagnosis(
                "first", None, None, None,
                "First compile of this program: its trace was recorded, but it is compiled in a transformed "
                "form (e.g. batched by `jax.vmap`) or for other arguments than at its trace.", "")
        return Diagnosis(
            "first", None, None, None,
            "Compiled without a new trace: the function was traced before recording started, "
            "or its trace was served from JAX's cache.", "")
    old, changes, ctx = closest(new, previous)
    changes = _collapse(changes)
    if not changes and not ctx and new.function_token != old.function_token:
        return Diagnosis("new_function", None, None, None,
                         "Compiled another traced program under this name, for the same argument types: another "
                         "function of the same name, a new trace of it, or a transformed version of it "
                         "(e.g. under `jax.grad` or `jax.pmap`).", "", 0)
    if not changes and not ctx:
        return Diagnosis("unknown", None, None, None,
                         "Compiled again for arguments identical to an earlier compile of this function: "
                         "JAX's compile cache no longer held that program.", "")
    if ctx:
        return _context(new, old, ctx, len(changes))
    first = changes[0]
    cause = classify(first)
    before, after = _describe(first, cause)
    if cause == "sharding":
        explanation = (f"Compiled again without a new trace: {_q(first[0])} changed placement: {before} → {after} "
                       "(committed device, sharding or layout are part of the compile's key).")
    elif cause == "shape":
        explanation = (f"Compiled again without a new trace: {_q(first[0])} changed shape: {before} → {after} "
                       "(the traced program is compiled for new shapes, e.g. a new batch size under `jax.vmap`).")
    else:
        explanation = f"Compiled again without a new trace: {_q(first[0])} changed {_WHAT[cause]}: {before} → {after}."
    if len(changes) > 1:
        explanation += " Also changed: " + ", ".join(_q(c[0]) for c in changes[1:_MAX_LISTED]) + "."
    hint = SHARDING_HINT if cause == "sharding" else _hint(cause, first, new)
    return Diagnosis(cause, first[0], before, after, explanation, hint, len(changes))


def join_hints(first: str | None, then: str | None) -> str | None:
    """Two hints of one event, the diagnosis's before the graph's (an unrolled loop)."""
    return f"{first} {then}" if first and then else (then or first)


def unrolled_loop_hint(found: Unrolled, total: int, where: str | None) -> str:
    """The hint for a trace whose top level holds an unrolled Python loop."""
    at = f" (loop body at {where})" if where else ""
    return (f"A Python loop of about {found.repeats} iterations was unrolled into the graph{at}: "
            f"{found.equations} of its {total} top-level equations repeat a block of {found.period}. "
            "`jax.lax.scan` or `jax.lax.fori_loop` would trace and compile the body once.")


REDUCED_COMPILE = "Compile recorded through jax.monitoring only (reduced mode)."


def retrace_message(event, count: int, limit: str) -> str:
    """The message of `RetraceError` for `event`, the trace past `limit` ("max_traces=1")."""
    where = f" at `{event.leaf}`" if event.leaf else ""
    change = f": {event.before} → {event.after}" if event.before is not None else ""
    hint = f" Hint: {event.hint}" if event.hint else ""
    called = f", called at {event.call_site}" if event.call_site else ""
    return (f"{event.function} ({event.location}{called}) was traced {count} times, past {limit}. "
            f"Trace #{event.trace_number} cause: {event.cause}{where}{change}. {event.explanation}{hint}")
