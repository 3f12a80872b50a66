"""Every hint jaxtrace_nb gives, by id, and which of them tell the user what to change.

A hint is a promise. One that instructs (`Hint.instruction`) names a change that
``tests/test_hints_proven.py`` applied to a program showing that very cause, with the result
that the function traced once and its outputs stayed the same; that test fails for any
instruction without such a proof. A situation without a proven fix gets an explanation only.

Which hint fits is read from the evidence in the signature: the changed leaf's origin (what made
a value static), its kind and dtype, the type of the container it lives in. The generic hints
are here; a library's own come with its adapter (`_adapters`), and `HINTS` holds them all. Pure,
no JAX.
"""

from __future__ import annotations

from .. import _adapters
from .._adapters import Evidence, Hint
from .._core._vocabulary import Cause, LeafKind
from .._keys._signature import Change, Leaf, Signature, owners_of
from ._changes import is_argument

_HINTS = (
    Hint(
        "weak_type.argument",
        "{p} was {then} and is now {now}: pass the same kind every call, e.g. "
        "`jnp.asarray({path}, jnp.{dtype})` "
        "at the call site.",
        True,
    ),
    Hint(
        "weak_type.inner",
        "{p} was {then} and is now {now}: give it one kind everywhere it is set, e.g. create it "
        "with "
        "`jnp.asarray(value, jnp.{dtype})`.",
        True,
    ),
    Hint(
        "dtype.x64",
        "{p} switched between float32 and float64 (a NumPy float64 array, or `jax_enable_x64`): "
        "cast it to one "
        "dtype {where}, e.g. `jnp.asarray(..., jnp.float32)`.",
        True,
    ),
    Hint("dtype.cast", "Give {p} one dtype every call: cast it {where}.", True),
    Hint(
        "dtype.key",
        "{p} changed kind of PRNG key: raw keys (`uint32` arrays from `jax.random.PRNGKey`) and "
        "typed keys "
        "(`jax.random.key`, one dtype per implementation) are different types. Create every key "
        "the same way, "
        "e.g. always with `jax.random.key(seed)`.",
        True,
    ),
    Hint(
        "shape",
        "Each new shape of {p} compiles again: pad to a fixed shape (e.g. pad the last partial "
        "batch), or "
        "bucket the sizes into a few shapes.",
        True,
    ),
    Hint(
        "new_function",
        "JAX caches per function object: define (and jit) the function once, outside any loop, "
        "and reuse it. A "
        "cell re-run re-creates it once, which is expected.",
        True,
    ),
    Hint(
        "identity.lambda",
        "{p} is a lambda created anew each time, compared by identity: define the function once "
        "(e.g. at "
        "module level) and reuse it.",
        True,
    ),
    Hint(
        "identity.partial",
        "{p} is a `functools.partial` re-created each time; partials compare by identity: create "
        "it once and "
        "reuse it, or use `jax.tree_util.Partial` (a pytree) instead.",
        True,
    ),
    Hint(
        "identity.jit",
        "{p} holds a `jax.jit(...)` created anew (e.g. in `__init__`); jitted callables compare "
        "by identity: "
        "create it once at module level and reuse it, or store the plain function.",
        True,
    ),
    Hint(
        "identity.same_name",
        "{p} is compared by identity and was re-created with the same name: create it once and "
        "reuse it.",
        True,
    ),
    Hint(
        "identity.instance",
        "{p} is a `{kind}` object hashed by identity (its class defines no `__eq__`/`__hash__`), "
        "so every new "
        "instance compiles again: reuse one instance, or define `__eq__` and `__hash__` on "
        "`{kind}`.",
        True,
    ),
    Hint(
        "identity.other",
        "{p} now holds a different object, compared by identity (JAX's `==` on it is identity).",
        False,
    ),
    Hint(
        "static.value",
        "{p} is static{mechanism}: JAX compiles once for each distinct value, which is expected "
        "for a flag or a "
        "mode that Python code branches on, and costs when the value changes often.",
        False,
    ),
    Hint(
        "kind.static_to_array",
        "{p} was a static Python value and is now an array: pass the same kind every call, an "
        "array like this one (`{convert}`).",
        True,
    ),
    Hint(
        "kind.array_to_static",
        "{p} was an array and is now a static Python value: pass an array like the earlier one "
        "every call (`{convert}`).",
        True,
    ),
    Hint(
        "structure.not_passed",
        "{p} was passed in one call and not in the other: a keyword left to its default and one "
        "given explicitly "
        "are different call structures. Pass it always, or never.",
        True,
    ),
    Hint(
        "structure.not_passed_value",
        "{p} was left to its default in one call and given a value unlike the default in the "
        "other: the value changed as well as the call's structure, and passing it always would "
        "still trace again for each new value.",
        False,
    ),
    Hint(
        "structure.none",
        "{p} switched between an array and None: pass the same structure every call (e.g. zeros "
        "of the same "
        "shape and dtype, `jnp.zeros_like(...)`, instead of None, or None always).",
        True,
    ),
    Hint(
        "structure.container_kind",
        "{p} changed kind (an array, a list, a tuple or a dict are different pytrees): pass the "
        "same kind every "
        "call, e.g. always `jnp.asarray(...)`.",
        True,
    ),
    Hint(
        "structure.container_type",
        "{p} was a `{before}` and is now a `{after}`: different pytree node types, so a different "
        "structure "
        "even with the same contents. Convert it to one type before the call{example}.",
        True,
    ),
    Hint(
        "structure.changed",
        "The pytree structure changed at {p} (a key, a list length or a field): JAX traces each "
        "structure "
        "once.",
        False,
    ),
    Hint(
        "structure.call",
        "Pass {p} the same way every call (always by keyword, or always by position).",
        True,
    ),
    Hint(
        "sharding",
        "Keep each argument's placement the same across calls: either always committed to one "
        "device "
        "(`jax.device_put(x, device)`) or never, with the same sharding and layout.",
        True,
    ),
    Hint(
        "sharding.mesh",
        "{p} is placed on a mesh in one call and not the same way in the other: put it on the "
        "same mesh with the same sharding every call (`jax.device_put(x, NamedSharding(mesh, "
        "spec))`), the one it is used with. Committing it to one device instead would not match "
        "the mesh.",
        True,
    ),
    # An `nnx.jit` writes its outputs back into the module's Variables: a placement given to one
    # argument reaches the module's state after the call, so the module is placed too
    # (`tests/test_hints_by_library.py`, flax_nnx × committed and mesh).
    Hint(
        "sharding.nnx",
        "Keep each argument's placement the same across calls, the module's state included: an "
        "`nnx.jit` writes its outputs back into the module, so committing {p} to a device commits "
        "the module's Variables after the call. Either commit nothing, or commit the module's "
        "state too before the first call (`nnx.update(model, jax.device_put(nnx.state(model), "
        "device))`).",
        True,
    ),
    Hint(
        "sharding.mesh_nnx",
        "{p} is placed on a mesh in one call and not the same way in the other: put it on the "
        "same mesh with the same sharding every call (`jax.device_put(x, NamedSharding(mesh, "
        "spec))`), and place the module's state on that mesh before the first call "
        "(`nnx.update(model, jax.device_put(nnx.state(model), NamedSharding(mesh, "
        "PartitionSpec())))`): an `nnx.jit` writes its outputs back into the module, placed as "
        "its inputs were.",
        True,
    ),
    Hint(
        "context",
        "A JAX config value or context manager (e.g. `jax_enable_x64`, "
        "`default_matmul_precision`, a mesh, a "
        "default device) differs from the earlier trace: set it once, before the first "
        "call.",
        True,
    ),
    # The persistent compilation cache: a miss across runs (`_cache_words`).
    Hint(
        "cache.xla_flags",
        "The runs that share this cache set different `XLA_FLAGS`: set the same flags in every "
        "run (e.g. in "
        "the environment every job starts with), and they share entries again.",
        True,
    ),
    Hint(
        "cache.devices",
        "The runs that share this cache see different devices: give every run the same ones (the "
        "same "
        "`--xla_force_host_platform_device_count`, `CUDA_VISIBLE_DEVICES`, …), and they share "
        "entries again.",
        True,
    ),
    Hint(
        "cache.options",
        "Set {options} the same way in every run that shares this cache (once, at the top of the "
        "program, "
        "before the first compile), and they share entries again.",
        True,
    ),
    Hint(
        "cache.compiler_options",
        "Pass the same `compiler_options` to `jax.jit` in every run that shares this cache.",
        True,
    ),
    Hint(
        "cache.jax_version",
        "Each jaxlib version keys the cache anew: entries written by another JAX version are "
        "never read, "
        "which is expected once after an upgrade.",
        False,
    ),
    Hint(
        "cache.constant",
        "{where} puts a value captured from Python (a closure or a global) into the program as a "
        "constant: "
        "each new value is a new program, in every run.",
        False,
    ),
    Hint(
        "unrolled_loop",
        "A Python loop of about {repeats} iterations was unrolled into the graph{at}: {equations} "
        "of its {total} "
        "top-level equations repeat a block of {period}. `jax.lax.scan` or `jax.lax.fori_loop` "
        "would trace and "
        "compile the body once.",
        True,
    ),
)


# ------------------------------------------------------------------ preconditions
# A hint that instructs is given only where its preconditions hold, checked where it is given:
# the code it asks to change is the user's own (`_installed`), and following it removes this
# retrace. Where one fails, the row explains without instructing.


def loop_hint_holds(loop_users: bool, internal: bool) -> bool:
    """Whether the unrolled-loop hint may be given: the loop's body line is in the user's own
    code (not an installed library's, e.g. Optax's tree map or Diffrax's step loop), in a function
    the user jitted (not a library's own helper). A library's loop stays named as the line its
    equations come from (`loop_line`), never as advice."""
    return loop_users and not internal


def hint_for_row(
    hint_id: str | None,
    *,
    internal: bool,
    passed_as_default: bool | None = None,
    placements: tuple = (),
    writes_back: bool = False,
) -> str:
    """The hint id a row keeps of the `hint_id` its diagnosis chose, its preconditions checked;
    "" for none.

    * A library's (or JAX's) own jitted helper (`internal`) gets no hint: nothing in it is the
      user's to change.
    * "Pass it always, or never" (`structure.not_passed`) removes the retrace only when the value
      passed is the parameter's default, as JAX compares them (`passed_as_default`; None: not
      known, e.g. no signature to read): otherwise the value changed too, which is said without
      an instruction (`structure.not_passed_value`).
    * "Committed to one device, or never" (`sharding`) is for a value off any mesh: where either
      placement (`placements`, the row's before and after) is sharded over a mesh, JAX accepts
      only the mesh's placement (`sharding.mesh`).
    * A function that writes its outputs back into its arguments (`writes_back`: an `nnx.jit`)
      passes a placement on to the module's state, which is placed too (``*_nnx``).
    """
    if not hint_id or internal:
        return ""
    if hint_id == "sharding" and any(_on_mesh(p) for p in placements):
        hint_id = "sharding.mesh"
    if writes_back and hint_id in ("sharding", "sharding.mesh"):
        return "sharding.nnx" if hint_id == "sharding" else "sharding.mesh_nnx"
    if hint_id == "structure.not_passed" and not passed_as_default:
        return "structure.not_passed_value"
    return hint_id


def _on_mesh(placement: str | None) -> bool:
    """Whether a placement's text (`_lowering.placement`, or an abstract value's with its type's
    mesh, `_leaves`) is sharded over a mesh."""
    return bool(placement) and ("sharded" in placement or "{mesh " in placement)


def _registry(*groups) -> dict[str, Hint]:
    hints: dict[str, Hint] = {}
    for hint in (h for group in groups for h in group):
        if hint.id in hints:
            raise ValueError(f"two hints with the id {hint.id!r}")
        hints[hint.id] = hint
    return hints


HINTS: dict[str, Hint] = _registry(
    _HINTS, _adapters.hints()
)  # the generic hints, then the libraries'
_MECHANISM = _adapters.origins()  # each origin of a static value -> how `static.value` names it
_WEAK = "weakly typed (a Python scalar, or an array made from one without a dtype)"
_STRONG = "strongly typed (an array with its own dtype)"


def text(hint_id: str, path: str = "", **fields) -> str:
    """The hint `hint_id` for the leaf at `path`."""
    return HINTS[hint_id].template.format(p=f"`{path}`", path=path, **fields)


def for_change(
    cause: str, change: Change, sig: Signature, old: Signature | None = None
) -> tuple[str | None, str]:
    """(hint id, text) for the change JAX's comparison found at one leaf between the signature
    `old` and `sig`; (None, "") for none.

    The generic checks that always win come first (a kind of value replaced by another, a named
    callable re-created, a PRNG key, an argument not passed); then the library adapters, in their
    precedence order (`_adapters.choose_hint`); then the generic hints."""
    evidence = Evidence(
        cause=Cause(cause),
        path=change.path,
        old=change.old,
        new=change.new,
        owners=tuple(owners_of(sig, change.path)),
        library=sig.library,
    )
    found = _choose(evidence)
    if found is not None and found[0] == "structure.container_kind":
        if not _stacks_to_array(change, sig, old):
            found = ("structure.changed", {})
    if found is None:
        return None, ""
    hint_id, fields = found
    return hint_id, text(hint_id, change.path, **fields)


def _choose(e: Evidence) -> tuple[str, dict] | None:
    cause = e.cause
    if cause == Cause.STATIC:
        return _static(e)
    if cause == Cause.DTYPE:
        return _dtype(e)
    if cause == Cause.STRUCTURE:
        return _structure(e)
    if cause not in (Cause.WEAK_TYPE, Cause.SHAPE, Cause.NEW_FUNCTION, Cause.SHARDING):
        return None
    found = _adapters.choose_hint(e)
    if found is not None:
        return found
    if cause == Cause.WEAK_TYPE:
        was_weak = e.old is not None and getattr(e.old.token, "weak", False) is True
        then, now = (_WEAK, _STRONG) if was_weak else (_STRONG, _WEAK)
        # The dtype both calls share (only weakness differs): `step` of a TrainState is an int32.
        dtype = getattr((e.new or e.old).token, "dtype", "float32")
        return ("weak_type.argument" if is_argument(e.path) else "weak_type.inner"), {
            "then": then,
            "now": now,
            "dtype": dtype,
        }
    if cause == Cause.SHAPE:
        return "shape", {}
    if cause == Cause.NEW_FUNCTION:
        return "new_function", {}
    return "sharding", {}


def _dtype(e: Evidence) -> tuple[str, dict] | None:
    old, new, owner = e.old, e.new, e.owner
    dtypes = {old.type_name, new.type_name} if old and new else set()
    if any(d.startswith("key<") for d in dtypes):
        return "dtype.key", {}
    if old and new and getattr(old.token, "abstract", "") != getattr(new.token, "abstract", ""):
        # an array and a mutable ref (or another kind): the explanation says which; no fix to give
        return None
    found = _adapters.choose_hint(e)
    if found is not None:
        return found
    where = (
        "at the call site"
        if is_argument(e.path)
        else "where it is created" + (f" (it lives in a `{_short(owner)}`)" if owner else "")
    )
    if dtypes == {"float32", "float64"}:
        return "dtype.x64", {"where": where}
    return "dtype.cast", {"where": where}


def _static(e: Evidence) -> tuple[str, dict] | None:
    old, new = e.old, e.new
    if old is not None and new is not None and old.kind != new.kind:
        return _kind_change(e.path, old, new)
    assert new is not None
    if new.by_identity:
        found = _named_identity(old, new)
        if found is not None:
            return found
    found = _adapters.choose_hint(e)
    if found is not None:
        return found
    if new.by_identity:
        return (
            ("identity.same_name", {})
            if new.name
            else ("identity.instance", {"kind": _short(new.type_name)})
        )
    return "static.value", {"mechanism": _MECHANISM.get(new.origin, "")}


_NUMBERS = frozenset(("int", "float", "complex", "bool"))


def _kind_change(path: str, old: Leaf, new: Leaf) -> tuple[str, dict] | None:
    """A Python number on one side and an array on the other: the array that matches is made with
    its dtype, or without one where it is weakly typed (as the number would be). Any other static
    value cannot be made that array: explained, not instructed."""
    static, array = (old, new) if old.kind == LeafKind.STATIC else (new, old)
    token = array.token
    if static.type_name not in _NUMBERS or getattr(token, "shape", None) != ():
        return None
    dtype = "" if token.weak else f", jnp.{token.dtype}"
    hint_id = "kind.static_to_array" if old is static else "kind.array_to_static"
    return hint_id, {"convert": f"jnp.asarray({path}{dtype})"}


def _stacks_to_array(change: Change, new: Signature, old: Signature | None) -> bool:
    """Whether `jnp.asarray` of the container side of `change` (a list or tuple) gives the array
    side's abstract value: its items are scalars of the array's dtype (scalar arrays, or Python
    numbers as `jax_enable_x64` widens them), one per element of a strongly typed vector. The
    items are read from the container side's signature."""
    if change.old is None or change.new is None or old is None:
        return False
    array, node, sig = (
        (change.old, change.new, new)
        if change.old.kind == LeafKind.ARRAY
        else (change.new, change.old, old)
    )
    token = array.token
    if token.weak or len(token.shape) != 1:
        return False
    if node.kind != LeafKind.NODE or node.token.node not in (
        ("list", token.shape[0]),
        ("tuple", token.shape[0]),
    ):  # a list or tuple with one item per element
        return False
    x64 = {"True": 1, "False": 0}.get(dict(sig.context).get("jax_enable_x64", ""))
    if x64 is None and array.type_name in ("float64", "int64"):
        x64 = 1  # no 64-bit abstract value exists without it (JAX 0.8.0 keeps it off the context)
    items = [sig.leaves.get(f"{change.path}[{i}]") for i in range(token.shape[0])]
    return all(item is not None and _scalar_dtype(item, x64) == array.type_name for item in items)


# A Python number's dtype in an array `jnp.asarray` makes, without and with `jax_enable_x64`.
_PYTHON_DTYPES = {
    "bool": ("bool", "bool"),
    "int": ("int32", "int64"),
    "float": ("float32", "float64"),
}


def _scalar_dtype(item: Leaf, x64: int | None) -> str | None:
    """The dtype `item` has in an array `jnp.asarray` makes of a list of such items; None where it
    is no scalar, or where that depends on `jax_enable_x64` and the trace context does not say."""
    if item.kind == LeafKind.ARRAY:
        return item.type_name if getattr(item.token, "shape", None) == () else None
    if item.kind == LeafKind.STATIC and x64 is not None and item.type_name in _PYTHON_DTYPES:
        return _PYTHON_DTYPES[item.type_name][x64]
    return None


def _named_identity(old: Leaf | None, new: Leaf) -> tuple[str, dict] | None:
    """The hint for a value compared by identity that is not the same object, when its kind says
    it all: another object altogether, or a lambda, partial or jitted function created anew."""
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
    return None


def _structure(e: Evidence) -> tuple[str, dict]:
    old, new = e.old, e.new
    if (old is None or new is None) and is_argument(e.path):
        return "structure.not_passed", {}
    found = _adapters.choose_hint(e)
    if found is not None:
        return found
    kinds = {old.kind if old else None, new.kind if new else None}
    if LeafKind.NONE in kinds and kinds & {LeafKind.ARRAY, LeafKind.NODE}:
        return "structure.none", {}
    if LeafKind.NODE in kinds and len(kinds - {None}) == 2:
        return "structure.container_kind", {}
    if (
        old is not None
        and new is not None
        and old.kind == new.kind == LeafKind.NODE
        and old.type_name != new.type_name
    ):
        before, after = _short(old.type_name), _short(new.type_name)
        example = (
            " (e.g. `flax.core.unfreeze(...)` for a `FrozenDict`)"
            if "FrozenDict" in (before, after)
            else ""
        )
        return "structure.container_type", {"before": before, "after": after, "example": example}
    return "structure.changed", {}


def _short(type_name: str) -> str:
    return type_name.rsplit(".", 1)[-1]
