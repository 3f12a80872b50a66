"""Every hint jaxtrace_nb gives, by id, and which of them tell the user what to change.

A hint is a promise. One that instructs (`Hint.instruction`) names a change that
``tests/test_hints_proven.py`` applied to a program showing that very cause, with the result
that the function traced once and its outputs stayed the same; that test fails for any
instruction without such a proof. A situation without a proven fix gets an explanation only.

Which hint fits is read from the evidence in the signature: the changed leaf's origin (what made
a value static), its kind and dtype, the type of the container it lives in. Pure, no JAX.
"""

from __future__ import annotations

from typing import NamedTuple

from ._signature import Change, Leaf, Origin, Signature, owners_of


class Hint(NamedTuple):
    id: str
    template: str  # str.format fields: p (the quoted path), path, and those `text` is given
    instruction: bool  # tells the user what to change (proven by tests/test_hints_proven.py)


_HINTS = (
    Hint("weak_type.argument",
         "{p} was {then} and is now {now}: pass the same kind every call, e.g. `jnp.asarray({path}, jnp.float32)` "
         "at the call site.", True),
    Hint("weak_type.inner",
         "{p} was {then} and is now {now}: give it one kind everywhere it is set, e.g. create it with "
         "`jnp.asarray(value, jnp.float32)`.", True),
    Hint("dtype.optax",
         "{p} lives in optax's `{owner}`, created by the optimizer's `init`: its dtype follows the parameters "
         "given to `init`. Initialise the optimizer with parameters of the dtype you train with.", True),
    Hint("dtype.x64",
         "{p} switched between float32 and float64 (a NumPy float64 array, or `jax_enable_x64`): cast it to one "
         "dtype {where}, e.g. `jnp.asarray(..., jnp.float32)`.", True),
    Hint("dtype.cast", "Give {p} one dtype every call: cast it {where}.", True),
    Hint("dtype.key",
         "{p} changed kind of PRNG key: raw keys (`uint32` arrays from `jax.random.PRNGKey`) and typed keys "
         "(`jax.random.key`, one dtype per implementation) are different types. Create every key the same way, "
         "e.g. always with `jax.random.key(seed)`.", True),
    Hint("shape",
         "Each new shape of {p} compiles again: pad to a fixed shape (e.g. pad the last partial batch), or "
         "bucket the sizes into a few shapes.", True),
    Hint("new_function",
         "JAX caches per function object: define (and jit) the function once, outside any loop, and reuse it. A "
         "cell re-run re-creates it once, which is expected.", True),
    Hint("identity.lambda",
         "{p} is a lambda created anew each time, compared by identity: define the function once (e.g. at "
         "module level) and reuse it.", True),
    Hint("identity.partial",
         "{p} is a `functools.partial` re-created each time; partials compare by identity: create it once and "
         "reuse it, or use `jax.tree_util.Partial` (a pytree) instead.", True),
    Hint("identity.jit",
         "{p} holds a `jax.jit(...)` created anew (e.g. in `__init__`); jitted callables compare by identity: "
         "create it once at module level and reuse it, or store the plain function.", True),
    Hint("identity.optax",
         "{p} is part of an optax transformation re-created with the same name; it compares by identity: build "
         "the optimizer once and reuse the same object.", True),
    Hint("identity.same_name",
         "{p} is compared by identity and was re-created with the same name: create it once and reuse it.", True),
    Hint("identity.instance",
         "{p} is a `{kind}` object hashed by identity (its class defines no `__eq__`/`__hash__`), so every new "
         "instance compiles again: reuse one instance, or define `__eq__` and `__hash__` on `{kind}`.", True),
    Hint("identity.other",
         "{p} now holds a different object, compared by identity (JAX's `==` on it is identity).", False),
    Hint("static.value",
         "{p} is static{mechanism}: JAX compiles once for each distinct value, which is expected for a flag or a "
         "mode that Python code branches on, and costs when the value changes often.", False),
    Hint("static.filter_jit_number",
         "`eqx.filter_jit` treats a Python {type} as static, so every new value of {p} compiles again: pass "
         "`jnp.asarray(...)` to make it a traced array.", True),
    Hint("static.eqx_field",
         "{p} is an `eqx.field(static=True)`: every new value compiles again. If it changes, make it an ordinary "
         "field holding an array.", True),
    Hint("static.dataclass_meta",
         "{p} is a meta field of a `jax.tree_util.register_dataclass` pytree, part of the tree's structure: every "
         "new value compiles again. Declare it a data field holding an array to trace it.", True),
    Hint("static.nnx_optax",
         "{p} holds an optax transformation, kept in the NNX graph's static part. One built again (e.g. a new "
         "`nnx.Optimizer` each epoch) compares unequal even when built alike: its functions compare by identity. "
         "Create the optimizer once and reuse it.", True),
    Hint("static.nnx_identity",
         "{p} is a plain Python attribute of an NNX module, kept in its static graph, and now holds a new object "
         "that looks the same but compares unequal (by identity): create it once and reuse it.", True),
    Hint("static.nnx_attribute",
         "{p} is a plain Python attribute of an NNX module, kept in its static graph: every new value compiles "
         "again. Hold it in an `nnx.Variable` to trace it instead.", True),
    Hint("kind.static_to_array",
         "{p} was a static Python value and is now an array: pass the same kind every call (e.g. always "
         "`jnp.asarray(...)`).", True),
    Hint("kind.array_to_static",
         "{p} was an array and is now a static Python value: pass an array every call (e.g. always "
         "`jnp.asarray(...)`).", True),
    Hint("structure.not_passed",
         "{p} was passed in one call and not in the other: a keyword left to its default and one given explicitly "
         "are different call structures. Pass it always, or never.", True),
    Hint("structure.optax_none",
         "{p} in optax's `{owner}` switched between an array and None: the optimizer state changes structure when "
         "gradients are None for some leaves (frozen parameters). Initialise the optimizer state with the same "
         "filter that selects the trainable leaves, e.g. `optim.init(eqx.filter(model, filter_spec))`.", True),
    Hint("structure.none",
         "{p} switched between an array and None: pass the same structure every call (e.g. zeros of the same "
         "shape and dtype, `jnp.zeros_like(...)`, instead of None, or None always).", True),
    Hint("structure.container_kind",
         "{p} changed kind (an array, a list, a tuple or a dict are different pytrees): pass the same kind every "
         "call, e.g. always `jnp.asarray(...)`.", True),
    Hint("structure.container_type",
         "{p} was a `{before}` and is now a `{after}`: different pytree node types, so a different structure "
         "even with the same contents. Convert it to one type before the call (e.g. `flax.core.unfreeze(...)` "
         "for a `FrozenDict`).", True),
    Hint("structure.changed",
         "The pytree structure changed at {p} (a key, a list length or a field): JAX traces each structure "
         "once.", False),
    Hint("structure.call",
         "Pass {p} the same way every call (always by keyword, or always by position).", True),
    Hint("sharding",
         "Keep each argument's placement the same across calls: either always committed to one device "
         "(`jax.device_put(x, device)`) or never, with the same sharding and layout.", True),
    Hint("context",
         "A JAX config value or context manager (e.g. `jax_enable_x64`, `default_matmul_precision`, a mesh, a "
         "default device) differs from the earlier trace: set it once, before the first call.", True),
    Hint("unrolled_loop",
         "A Python loop of about {repeats} iterations was unrolled into the graph{at}: {equations} of its {total} "
         "top-level equations repeat a block of {period}. `jax.lax.scan` or `jax.lax.fori_loop` would trace and "
         "compile the body once.", True),
)
HINTS: dict[str, Hint] = {h.id: h for h in _HINTS}


def text(hint_id: str, path: str = "", **fields) -> str:
    """The hint `hint_id` for the leaf at `path`."""
    return HINTS[hint_id].template.format(p=f"`{path}`", path=path, **fields)


_MECHANISM = {
    Origin.STATIC_ARGNUMS: " (`static_argnums`/`static_argnames`)",
    Origin.FILTER_JIT: " (a non-array argument under `eqx.filter_jit`)",
    Origin.EQX_STATIC_FIELD: " (`eqx.field(static=True)`)",
    Origin.DATACLASS_META: " (a `register_dataclass` meta field)",
    Origin.NNX_ATTRIBUTE: " (a Python attribute of an NNX module)",
    Origin.NODE_METADATA: " (a custom pytree node's metadata)",
    Origin.PARTIAL_FUNC: " (the function of a `jax.tree_util.Partial`)",
}
_WEAK = "weakly typed (a Python scalar, or an array made from one without a dtype)"
_STRONG = "strongly typed (an array with its own dtype)"


def is_argument(path: str) -> bool:
    return path.isidentifier()


def for_change(cause: str, change: Change, sig: Signature) -> tuple[str | None, str]:
    """(hint id, text) for the change JAX's comparison found at one leaf; (None, "") for none."""
    path, old, new = change
    owners = owners_of(sig, path)
    owner = next((o for o in owners if o.startswith("optax")), owners[0] if owners else "")
    found = _choose(cause, path, old, new, owner)
    if found is None:
        return None, ""
    hint_id, fields = found
    return hint_id, text(hint_id, path, **fields)


def _choose(cause: str, path: str, old: Leaf | None, new: Leaf | None, owner: str) -> tuple[str, dict] | None:
    if cause == "weak_type":
        was_weak = old is not None and getattr(old.token, "weak", False) is True
        then, now = (_WEAK, _STRONG) if was_weak else (_STRONG, _WEAK)
        return ("weak_type.argument" if is_argument(path) else "weak_type.inner"), {"then": then, "now": now}
    if cause == "dtype":
        return _dtype(path, old, new, owner)
    if cause == "shape":
        return "shape", {}
    if cause == "new_function":
        return "new_function", {}
    if cause == "static":
        return _static(old, new, owner)
    if cause == "structure":
        return _structure(path, old, new, owner)
    if cause == "sharding":
        return "sharding", {}
    return None


def _dtype(path: str, old: Leaf | None, new: Leaf | None, owner: str) -> tuple[str, dict]:
    dtypes = {old.type_name, new.type_name} if old and new else set()
    if any(d.startswith("key<") for d in dtypes):
        return "dtype.key", {}
    if owner.startswith("optax"):
        return "dtype.optax", {"owner": owner.rsplit(".", 1)[-1]}
    where = ("at the call site" if is_argument(path)
             else "where it is created" + (f" (it lives in a `{owner.rsplit('.', 1)[-1]}`)" if owner else ""))
    if dtypes == {"float32", "float64"}:
        return "dtype.x64", {"where": where}
    return "dtype.cast", {"where": where}


def _static(old: Leaf | None, new: Leaf | None, owner: str) -> tuple[str, dict]:
    if old is not None and new is not None and old.kind != new.kind:
        return ("kind.static_to_array" if old.kind == "static" else "kind.array_to_static"), {}
    assert new is not None
    if new.by_identity:
        return _identity(old, new, owner)
    if old is not None and old.text == new.text and (new.type_name.startswith("optax") or owner.startswith("optax")):
        return "identity.optax", {}  # alike, yet unequal: its functions inside compare by identity
    mechanism = _MECHANISM.get(new.origin, "")
    if new.origin == Origin.NNX_ATTRIBUTE:
        if old is not None and old.text == new.text:  # alike, yet unequal: a new object compared by identity inside
            return ("static.nnx_optax" if new.type_name.startswith("optax") else "static.nnx_identity"), {}
        return "static.nnx_attribute", {}
    if new.origin == Origin.FILTER_JIT and new.type_name in ("int", "float", "complex"):
        return "static.filter_jit_number", {"type": new.type_name}
    if new.origin == Origin.EQX_STATIC_FIELD:
        return "static.eqx_field", {}
    if new.origin == Origin.DATACLASS_META:
        return "static.dataclass_meta", {}
    return "static.value", {"mechanism": mechanism}


def _identity(old: Leaf | None, new: Leaf, owner: str) -> tuple[str, dict]:
    same_name = old is not None and old.name is not None and old.name == new.name
    name = new.name or ""
    same_type = old is not None and old.type_name == new.type_name
    if not (same_name or (same_type and not name)):
        return "identity.other", {}
    if name == "<lambda>" or name.endswith(".<lambda>"):
        return "identity.lambda", {}
    if name.startswith("partial("):
        return "identity.partial", {}
    if name.startswith("jit("):
        return "identity.jit", {}
    if new.type_name.startswith("optax") or owner.startswith("optax"):
        return "identity.optax", {}
    if name:
        return "identity.same_name", {}
    return "identity.instance", {"kind": new.type_name.rsplit(".", 1)[-1]}


def _structure(path: str, old: Leaf | None, new: Leaf | None, owner: str) -> tuple[str, dict]:
    if (old is None or new is None) and is_argument(path):
        return "structure.not_passed", {}
    kinds = {old.kind if old else None, new.kind if new else None}
    if "none" in kinds and kinds & {"array", "node"}:
        if owner.startswith("optax"):
            return "structure.optax_none", {"owner": owner.rsplit(".", 1)[-1]}
        return "structure.none", {}
    if "node" in kinds and len(kinds - {None}) == 2:
        return "structure.container_kind", {}
    if old is not None and new is not None and old.kind == new.kind == "node" and old.type_name != new.type_name:
        return "structure.container_type", {"before": _short(old.type_name), "after": _short(new.type_name)}
    return "structure.changed", {}


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]
