"""The causes of a trace, and every explanation, in one place (pure, no JAX).

`diagnose` explains a trace from its signature and the function's earlier ones;
`diagnose_compile` explains a compile that followed no new trace from the lowering
signatures; `unrolled_loop_hint` and the fixed texts cover the rest. A hint names a
library or a mechanism only when the evidence in the signature says so: the changed
leaf's origin (what made a value static), the type of the object it lives in, the
kind of value. A `Diagnosis` carries its cause as a plain string, a `Cause`'s value: the log
holds exactly the strings it always did.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .._core._values import clip
from .._core._vocabulary import Cause, LoweringKind
from .._core._witness import Witness, values_equal
from .._keys._key_index import HeldKeys, closest_held
from .._keys._records import Unrolled
from .._keys._signature import (
    NODE_SUFFIX,
    Change,
    Signature,
    call_changes,
    closest,
    context_changes,
    diff_leaves,
    same_for_jax,
    same_key,
    uncertain_paths,
)
from . import _hints as hints
from ._changes import classify, collapse, describe, under

CAUSES = tuple(cause.value for cause in Cause)  # the DataFrame's categories, in this order

_MAX_LISTED = 5
_WHAT = {
    Cause.SHAPE: "shape",
    Cause.DTYPE: "dtype",
    Cause.WEAK_TYPE: "weak type",
    Cause.STATIC: "static value",
    Cause.STRUCTURE: "structure",
    Cause.SHARDING: "placement",
    Cause.NEW_FUNCTION: "function",
}


class Diagnosis(NamedTuple):
    cause: Cause | None  # None: not diagnosed (reduced mode)
    leaf: str | None
    before: str | None
    after: str | None
    explanation: str
    hint: str
    distance: int = 0  # leaves that differ from the closest earlier trace
    hint_id: str | None = None  # the hint's id in `_hints.HINTS` (None: no hint)


FIRST = Diagnosis(
    cause=Cause.FIRST,
    leaf=None,
    before=None,
    after=None,
    explanation="First trace of this function.",
    hint="",
)


def first_after_failures(failed: int) -> Diagnosis:
    """The first completed trace of a function, after `failed` attempts that raised."""
    if not failed:
        return FIRST
    return FIRST._replace(
        explanation=f"First completed trace of this function ({failed} earlier attempt(s) "
        "raised while tracing, so JAX cached nothing for them)."
    )


NOT_DIAGNOSED = Diagnosis(
    cause=None,
    leaf=None,
    before=None,
    after=None,
    explanation="jaxtrace_nb could not diagnose this trace (an internal error, "
    "counted in jt.faults()).",
    hint="",
)


class InvariantError(Exception):
    """A diagnosis that JAX's own comparison does not back (a bug in jaxtrace_nb, never said)."""


NO_SIGNATURE = "No signature was recorded for this trace (its arguments could not be decoded)."
REDUCED = Diagnosis(
    cause=None,
    leaf=None,
    before=None,
    after=None,
    explanation="Reduced mode: the cause of a retrace is not available on this JAX version.",
    hint="",
)


def _q(path: str) -> str:
    return f"`{path}`"


# --------------------------------------------------------------------- hints
NEW_FUNCTION_HINT = hints.text("new_function")
SHARDING_HINT = hints.text("sharding")


# ------------------------------------------------------------------ diagnose
def diagnose(
    new: Signature,
    previous: Sequence[Signature],
    *,
    new_object: bool = False,
    rerun_note: str | None = None,
    cache_cleared: bool = False,
    dropped: Sequence[Signature] = (),
    numbers: Sequence[int] = (),
    dropped_numbers: Sequence[int] = (),
    forgotten: int = 0,
    evicted: bool = False,
) -> Diagnosis:
    """Explain the trace with signature `new` of a function whose keys JAX still holds are
    `previous` (oldest first).

    `dropped` are the function's earlier keys JAX no longer holds (an earlier function object's,
    or from before `jax.clear_caches()`); `numbers` and `dropped_numbers` the trace numbers of
    both, to name them. `new_object` says the function object is one not seen before (same name
    and place); `rerun_note`, if given, says why (e.g. "its cell In[5] was re-run");
    `cache_cleared` that JAX's trace cache was emptied since the function's last trace;
    `forgotten` that the session's bound dropped that many keys JAX may still hold; `evicted` that
    JAX's cache held no key of this function object, though it is the one traced before (its
    keys went with `f.clear_cache()`).
    """
    if not previous and not dropped:
        return FIRST
    pool = previous if isinstance(previous, HeldKeys) else HeldKeys(tuple(previous))
    pool_numbers = numbers
    if (
        new_object or not previous
    ):  # JAX compares with no earlier key: the closest of all names the change
        merged, pool_numbers = list(dropped) + list(pool.raw), list(dropped_numbers) + list(numbers)
        if len(pool_numbers) == len(merged):  # oldest first, as `search` breaks its last ties
            order = sorted(range(len(merged)), key=pool_numbers.__getitem__)
            merged, pool_numbers = [merged[i] for i in order], [pool_numbers[i] for i in order]
        pool = HeldKeys(tuple(merged))
    found = closest_held(new, pool)
    old = pool[found.index]
    cleared = (
        _CLEARED_ALL if cache_cleared else _CLEARED_OWN if evicted and not new_object else None
    )
    d = checked(
        _diagnose(
            new, old, collapse(found.changes), found.context, new_object, rerun_note, cleared
        ),
        new,
        old,
    )
    number = pool_numbers[found.index] if len(pool_numbers) == len(pool) else None
    notes = [_tie_note(new, pool, pool_numbers, found)]
    if d.cause != Cause.UNKNOWN:
        if not previous and not new_object:
            notes.append(
                f"{cleared} since {_trace(number, 'its last trace')}, so JAX held no earlier "
                "key of this function to compare with; the change named is against the "
                "closest key it "
                "held before."
                if cleared
                else "JAX no longer held any earlier key of this function object; the change "
                "named is against "
                "the closest key it held before."
            )
        elif previous and not new_object:
            same = [n for n, sig in zip(dropped_numbers, dropped) if same_key(new, sig)]
            if same:
                notes.append(
                    f"The key is identical to trace #{same[-1]}'s, which JAX no longer held"
                    + (" (its caches were cleared since)." if cache_cleared else ".")
                )
            elif cache_cleared:
                notes.append(
                    "JAX's caches were cleared (`jax.clear_caches()`) since this function's last "
                    "trace."
                )
    if forgotten:
        notes.append(
            f"(jaxtrace_nb's bound on kept keys dropped {forgotten} earlier key(s) of this "
            "function that JAX may still hold: a closer one may exist.)"
        )
    notes = [n for n in notes if n]
    if not notes:
        return d
    return d._replace(explanation=" ".join([d.explanation, *notes]))


def _trace(number: int | None, otherwise: str) -> str:
    return f"trace #{number}" if number is not None else otherwise


_MAX_TIES_READ = 16


def _tie_note(new: Signature, pool: list, numbers: list, found) -> str:
    """The earlier keys as close as the one named that differ elsewhere (up to two), by trace
    number."""
    if not found.ties or len(numbers) != len(pool):
        return ""
    named = {c.path for c in found.changes} | set(found.context)
    others, seen = [], set()
    for i in found.ties[:_MAX_TIES_READ]:
        old = pool[i]
        paths = tuple(
            sorted(
                {c.path for c in collapse(diff_leaves(new, old))} | set(context_changes(new, old))
            )
        )
        if not paths or set(paths) == named or paths in seen:
            continue
        seen.add(paths)
        others.append(f"trace #{numbers[i]} (differs at {', '.join(_q(p) for p in paths[:3])})")
        if len(others) == 2:
            break
    if not others:
        return ""
    return "As close: " + "; ".join(others) + "."


def _diagnose(
    new: Signature,
    old: Signature,
    changes: list[Change],
    ctx: list[str],
    new_object: bool,
    rerun_note: str | None,
    cleared: str | None,
) -> Diagnosis:
    function_change = [c for c in changes if c.path == new.function_path]
    if new_object or function_change:
        return _new_function(new, changes, function_change, rerun_note)
    if ctx:
        return _context(new, old, ctx, changes)
    if changes:
        return _leaf_change(new, old, changes)
    moved = call_changes(new, old)
    if moved:
        name, was, now = moved[0]
        return Diagnosis(
            cause=Cause.STRUCTURE,
            leaf=name,
            before=f"by {was}",
            after=f"by {now}",
            explanation=f"{_q(name)} was passed by {was} and is now passed by {now}: JAX's cache "
            "key keeps positional and keyword arguments apart, so the call has a new input "
            "structure.",
            hint=hints.text("structure.call", name),
            distance=len(moved),
            hint_id="structure.call",
        )
    return _same_key(new, old, cleared)


_NAMED_CAUSES = frozenset(
    {Cause.SHAPE, Cause.DTYPE, Cause.WEAK_TYPE, Cause.STATIC, Cause.STRUCTURE, Cause.SHARDING}
)


def checked(d: Diagnosis, new: Signature, old: Signature) -> Diagnosis:
    """`d`, after checking that JAX's comparison backs it: a named leaf differs between `old` and
    `new` by JAX's equality (`same_for_jax`); `unknown` only where no leaf, context value, way of
    passing or part of JAX's key differs. Raises `InvariantError` otherwise."""
    if d.cause == Cause.UNKNOWN:
        if (
            diff_leaves(new, old)
            or context_changes(new, old)
            or call_changes(new, old)
            or [a for a, b in zip(new_parts(new), new_parts(old)) if a != b]
        ):
            raise InvariantError("`unknown` said where JAX's key differs from the earlier one")
    elif d.cause in _NAMED_CAUSES and d.leaf is not None and not (d.before or "").startswith("by "):
        if not _differs_at(new, old, d.leaf) and not _changed_inside(new, old, d.leaf):
            raise InvariantError(
                f"`{d.leaf}` named as changed, but JAX's comparison finds it equal"
            )
    return d


def _differs_at(new: Signature, old: Signature, path: str) -> bool:
    """Whether the leaf at `path`, or the node there, is in one signature only or differs by JAX's
    comparison."""
    for key in (path, path + NODE_SUFFIX):
        a, b = old.leaves.get(key), new.leaves.get(key)
        if (a is None) != (b is None) or (a is not None and not same_for_jax(a, b)):
            return True
    return False


def _changed_inside(new: Signature, old: Signature, path: str) -> bool:
    """Whether some leaf inside `path` (an element, a field, its metadata) differs (a container
    whose contents changed is named by its own path)."""
    return any(
        under(change.path.removesuffix(NODE_SUFFIX), path) for change in diff_leaves(new, old)
    )


def _new_function(new: Signature, changes, function_change, rerun_note) -> Diagnosis:
    why = f" ({rerun_note})" if rerun_note else " (created again at the same place)"
    before, after = (
        describe(function_change[0], Cause.NEW_FUNCTION) if function_change else (None, None)
    )
    explanation = f"A new function object{why}: JAX caches traces per object, so it traced again."
    others = [c for c in changes if c.path != new.function_path]
    if others:
        explanation += (
            " Inputs also changed: " + ", ".join(_q(c.path) for c in others[:_MAX_LISTED]) + "."
        )
    return Diagnosis(
        cause=Cause.NEW_FUNCTION,
        leaf=function_change[0].path if function_change else None,
        before=before,
        after=after,
        explanation=explanation,
        hint=NEW_FUNCTION_HINT,
        distance=len(changes),
        hint_id="new_function",
    )


def _context(new: Signature, old: Signature, ctx: list[str], changes: list[Change]) -> Diagnosis:
    names = ", ".join(ctx[:_MAX_LISTED])
    before, after = dict(old.context).get(ctx[0]), dict(new.context).get(ctx[0])
    if not changes:
        explanation = f"Same inputs, but JAX's trace context changed ({names})."
    else:
        listed = "; ".join(_change_text(c, new.function_path) for c in changes[:_MAX_LISTED])
        more = len(changes) - _MAX_LISTED
        explanation = (
            f"JAX's trace context changed ({names}), and inputs changed with it: {listed}"
            + (f"; and {more} more." if more > 0 else ".")
        )
        if X64 in ctx and all(_width_only(c) for c in changes):
            explanation += (
                f" (`{X64}` sets the width of JAX's default dtypes: Python numbers, and arrays "
                "made without a dtype.)"
            )
    return Diagnosis(
        cause=Cause.CONTEXT,
        leaf=None,
        before=f"{ctx[0]}={before}" if before is not None else None,
        after=f"{ctx[0]}={after}" if after is not None else None,
        explanation=explanation,
        hint=hints.text("context"),
        distance=len(changes) + len(ctx),
        hint_id="context",
    )


X64 = "jax_enable_x64"
_WIDTHS = {"f32": "f64", "i32": "i64", "u32": "u64", "c64": "c128"}


def _change_text(change: Change, function_path: str | None) -> str:
    cause = classify(change, function_path)
    before, after = describe(change, cause)
    return f"{_q(change.path)} {before} → {after}"


def _width_only(change: Change) -> bool:
    """Whether a leaf changed only between a 32- and a 64-bit dtype (as x64 makes it)."""
    old, new = change.old, change.new
    if old is None or new is None:
        return False
    a, b = old.text, new.text
    for narrow, wide in _WIDTHS.items():
        if a.replace(narrow, wide, 1) == b or b.replace(narrow, wide, 1) == a:
            return True
    return False


def _leaf_change(new: Signature, old: Signature, changes: list[Change]) -> Diagnosis:
    first = changes[0]
    cause = classify(first, new.function_path)
    before, after = describe(first, cause)
    old_leaf, new_leaf = first.old, first.new
    what = _WHAT[cause]
    if cause == Cause.DTYPE and getattr(old_leaf.token, "abstract", "") != getattr(
        new_leaf.token, "abstract", ""
    ):
        what = "kind of abstract value (JAX's type)"
    explanation = f"{_q(first.path)} changed {what}: {before} → {after}."
    if (
        cause == Cause.STATIC
        and old_leaf is not None
        and new_leaf is not None
        and new_leaf.by_identity
    ):
        if old_leaf.name is not None and old_leaf.name == new_leaf.name:
            explanation = (
                f"{_q(first.path)} changed: a new object with the same name ({new_leaf.name})."
            )
        elif old_leaf.type_name == new_leaf.type_name:
            kind = new_leaf.type_name.rsplit(".", 1)[-1]
            explanation = f"{_q(first.path)} changed: a new `{kind}` object, compared by identity."
    if len(changes) > 1:
        listed = ", ".join(
            f"{_q(c.path)} ({classify(c, new.function_path)})" for c in changes[1:_MAX_LISTED]
        )
        more = len(changes) - _MAX_LISTED
        explanation += f" Also changed: {listed}" + (f" and {more} more." if more > 0 else ".")
    hint_id, hint = hints.for_change(cause, first, new, old)
    return Diagnosis(
        cause=cause,
        leaf=first.path,
        before=before,
        after=after,
        explanation=explanation,
        hint=hint,
        distance=len(changes),
        hint_id=hint_id,
    )


_CLEARED_ALL = "JAX's caches were cleared (`jax.clear_caches()`)"
_CLEARED_OWN = "JAX's cache of this function object was emptied (`f.clear_cache()`)"


def _same_key(new: Signature, old: Signature, cleared: str | None) -> Diagnosis:
    """No argument leaf, context value or way of passing differs by JAX's comparison: JAX's key is
    identical to `old`'s, unless a part of it that jaxtrace_nb reads no leaf of differs. That is
    stated in JAX's own terms (the key's part, JAX's input path), never guessed at."""
    parts = [name for (name, a), (_, b) in zip(new_parts(new), new_parts(old)) if a != b]
    found = _tree_difference(new, old)
    if found is not None or "inputs" in parts:
        if found is not None:
            where = found.sentence()
            cause = Cause.STATIC if found.static or found.what == "node data" else Cause.STRUCTURE
            before, after = found.before, found.after
        else:
            where = "its hash differs, and JAX no longer holds the earlier key to say where"
            cause, before, after = Cause.STRUCTURE, None, None
        return Diagnosis(
            cause=cause,
            leaf=None,
            before=before,
            after=after,
            explanation="JAX's cache key differs in its input pytree where jaxtrace_nb's reading "
            f"of the arguments shows no difference: {where}.",
            hint="",
            distance=0,
        )
    if parts:
        what = ", ".join(parts)
        cause = Cause.NEW_FUNCTION if parts[0] == "function" else Cause.STRUCTURE
        return Diagnosis(
            cause=cause,
            leaf=None,
            before=None,
            after=None,
            explanation="The decoded arguments match an earlier trace, but JAX's cache key differs "
            f"in: {what}"
            + (
                " (the function's name, source location or argument names)"
                if parts[0] == "debug info"
                else ""
            )
            + ".",
            hint=NEW_FUNCTION_HINT if cause == Cause.NEW_FUNCTION else "",
            distance=0,
            hint_id="new_function" if cause == Cause.NEW_FUNCTION else None,
        )
    unsure = uncertain_paths(new, old)
    if unsure:
        leaf = new.leaves[unsure[0]]
        return Diagnosis(
            cause=Cause.STATIC,
            leaf=None,
            before=clip(old.leaves[unsure[0]].text),
            after=clip(leaf.text),
            explanation="Every part of JAX's cache key that jaxtrace_nb can compare equals an "
            f"earlier trace's; {', '.join(_q(p) for p in unsure[:_MAX_LISTED])} it cannot: JAX "
            f"compares {'it' if len(unsure) == 1 else 'them'} with `==`, but a `{leaf.type_name}` "
            "takes no weak reference and has no plain form, so only its hash was kept (equal here, "
            "which does not make it equal).",
            hint="",
            distance=0,
        )
    seen = f"{cleared} since then" if cleared else "JAX's trace cache no longer held that entry"
    return Diagnosis(
        cause=Cause.UNKNOWN,
        leaf=None,
        before=None,
        after=None,
        explanation="Traced again with a cache key identical to an earlier trace of this function: "
        f"{seen}"
        + (
            "."
            if cleared
            else " (an entry leaves it when its function object is garbage-collected, or "
            "with `f.clear_cache()` or `jax.clear_caches()`)."
        ),
        hint="",
        distance=0,
    )


def _tree_difference(new: Signature, old: Signature):
    """JAX's own treedef comparison of the two traces' arguments, where JAX still holds both."""
    mine, theirs = new.tree_ref, old.tree_ref
    if mine is None or theirs is None:
        return None
    try:
        return mine.difference(theirs)
    except Exception:
        return None


def new_parts(sig: Signature) -> tuple:
    return sig.key_parts or ()


# ------------------------------------------------------- compiles and loops
def diagnose_compile(new: Signature, previous: Sequence[Signature], *, traced: bool) -> Diagnosis:
    """Explain a compile that followed no new trace, from the lowering signatures of the
    function's earlier compiles. `traced` says whether jaxtrace_nb saw the function trace.

    JAX's compile cache keys on the traced program itself (by identity) and each argument's type
    and placement. The same program compiled again differs in placement (or was evicted); another
    program under the function's name is one JAX derived from it (`jax.grad`, `jax.vmap`, ...)."""
    same_program = [old for old in previous if _same_program(old, new)]
    if not same_program:
        return _other_program(new, previous, traced)
    old, changes, ctx = closest(new, same_program)
    changes = collapse(changes)
    if not changes and not ctx:
        return Diagnosis(
            cause=Cause.UNKNOWN,
            leaf=None,
            before=None,
            after=None,
            explanation="Compiled again for the same program and arguments as an earlier compile "
            "of this function: JAX's compile cache no longer held it.",
            hint="",
        )
    if ctx:
        return _context(new, old, ctx, changes)
    first = changes[0]
    cause = classify(first)
    before, after = describe(first, cause)
    sharding = cause == Cause.SHARDING
    if all(_donation_only(c) for c in changes):
        return _donation(changes, before, after)
    if sharding:
        explanation = (
            f"Compiled again without a new trace: {_q(first.path)} changed placement: {before} → "
            f"{after} (committed device, sharding or layout are part of the compile's key)."
        )
    else:
        explanation = (
            f"Compiled again without a new trace: {_q(first.path)} changed {_WHAT[cause]}: "
            f"{before} → {after}."
        )
    if len(changes) > 1:
        explanation += (
            " Also changed: " + ", ".join(_q(c.path) for c in changes[1:_MAX_LISTED]) + "."
        )
    return Diagnosis(
        cause=cause,
        leaf=first.path,
        before=before,
        after=after,
        explanation=explanation,
        hint=SHARDING_HINT if sharding else "",
        distance=len(changes),
        hint_id="sharding" if sharding else None,
    )


def _same_program(old: Signature, new: Signature) -> bool:
    a, b = old.function_token, new.function_token
    if len(a) == len(b) == 2 and type(a[1]) is Witness and type(b[1]) is Witness:
        return a[1].equals(b[1])
    return a == b


def _other_program(new: Signature, previous: Sequence[Signature], traced: bool) -> Diagnosis:
    """A program not compiled before under this function's name: one JAX derived from it."""
    if new.jit_kind == LoweringKind.DERIVED:
        return Diagnosis(
            cause=Cause.FIRST,
            leaf=None,
            before=None,
            after=None,
            explanation="First compile of a program JAX derived from this function by "
            "differentiation (`jax.grad`, `jax.value_and_grad`, `jax.vjp`, `jax.jvp` of it: its "
            "forward and backward programs, whose arguments are not the function's own). JAX "
            "compiles each derived program once for each trace of the function; it is not a change "
            "of the function's arguments.",
            hint="",
        )
    alike = [
        old
        for old in previous
        if old.jit_kind != LoweringKind.DERIVED and old.leaves.keys() == new.leaves.keys()
    ]
    if alike:  # another program derived the same way (e.g. `jax.vmap` of it at another batch size)
        old, changes, ctx = closest(new, alike)
        changes = collapse(changes)
        if changes and not ctx:
            first = changes[0]
            cause = classify(first)
            before, after = describe(first, cause)
            if all(_donation_only(c) for c in changes):
                return _donation(changes, before, after)
            return Diagnosis(
                cause=cause,
                leaf=first.path,
                before=before,
                after=after,
                explanation="Compiled a new program JAX derived from this function (e.g. batched "
                f"by `jax.vmap`) for new argument types: {_q(first.path)} changed {_WHAT[cause]}: "
                f"{before} → {after}.",
                hint="",
                distance=len(changes),
            )
    if previous or traced:
        return Diagnosis(
            cause=Cause.FIRST,
            leaf=None,
            before=None,
            after=None,
            explanation="First compile of another program under this function's name: one JAX "
            "derived from it (e.g. batched by `jax.vmap`) for arguments of other types. JAX "
            "compiles each such program once; it is not a change of the function's own arguments.",
            hint="",
        )
    return Diagnosis(
        cause=Cause.FIRST,
        leaf=None,
        before=None,
        after=None,
        explanation="Compiled without a new trace: the function was traced before recording "
        "started, or its trace was served from JAX's cache.",
        hint="",
    )


def compiled_here_too(number: int | None, precompiled: bool, lowered: bool) -> Diagnosis:
    """A compile, on this thread, of the program that trace `number` made on another thread
    (`precompiled`: one of `jt.precompile`'s workers), when no compile of it had ended: JAX's
    caches held the trace but no program for it, and no compile of it was under way (JAX waits
    for one under way on another thread instead of compiling again). `lowered`: this call
    lowered it too (else it only compiled the module lowered there)."""
    who = "`jt.precompile`'s worker" if precompiled else "another thread"
    trace = f"trace #{number}" if number is not None else "a trace"
    return Diagnosis(
        cause=None,
        leaf=None,
        before=None,
        after=None,
        explanation=f"{'Lowered and compiled' if lowered else 'Compiled'} on this thread the "
        f"program of {trace}, which {who} made: JAX's caches held its trace but no compiled "
        "program for this call, and no compile of it was under way (JAX waits for one under way "
        "on another thread rather than compiling again). Not a change of the arguments.",
        hint="",
    )


def diagnose_devices(previous: Sequence[tuple], devices: tuple, options: tuple = ()) -> Diagnosis:
    """Explain a compile with no lowering of its own: JAX compiled a module it lowered before for
    `devices` with XLA compiler `options` (its compile cache keys on the module, the devices in
    order and the options, among others), from that module's earlier compiles (`previous`:
    (devices, options) pairs, oldest first; none where it was lowered before recording)."""
    after = _devices_text(devices)
    if not previous:
        return Diagnosis(
            cause=None,
            leaf=None,
            before=None,
            after=after,
            explanation="Compiled, without a new trace or lowering, a module JAX lowered before "
            f"(no compile of it was recorded), for devices {after}.",
            hint="",
        )
    if (devices, options) in previous:
        return Diagnosis(
            cause=Cause.UNKNOWN,
            leaf=None,
            before=None,
            after=after,
            explanation="Compiled again, without a new trace or lowering, a module for the devices "
            f"and compiler options it was compiled for before ({after}): JAX's compile cache no "
            "longer held it.",
            hint="",
        )
    same_devices = [o for d, o in previous if d == devices]
    if same_devices:
        now, then = dict(options), dict(same_devices[-1])
        changed = sorted(k for k in now.keys() | then.keys() if now.get(k) != then.get(k))
        return Diagnosis(
            cause=None,
            leaf=None,
            before=None,
            after=after,
            explanation="Compiled again, without a new trace or lowering, the module for the same "
            "devices with other XLA compiler options"
            + (f" ({clip(', '.join(changed), 120)})" if changed else "")
            + ": the options are part of the compile's key.",
            hint="",
        )
    before = _devices_text(previous[-1][0])
    reordered = sorted(previous[-1][0]) == sorted(devices)
    return Diagnosis(
        cause=Cause.SHARDING,
        leaf=None,
        before=before,
        after=after,
        explanation="Compiled again without a new trace or lowering: JAX compiled the module it "
        f"lowered before for other devices: {before} → {after}"
        + (
            " (the same devices in another order: their order, a mesh's, is part of the "
            "compile's key)."
            if reordered
            else " (the devices are part of the compile's key)."
        ),
        hint="",
        distance=1,
    )


def _devices_text(devices: tuple) -> str:
    return clip(", ".join(devices), 120)


def _donation_only(change: Change) -> bool:
    """Whether a compile's argument changed only in donation: the same type, sharding and layout
    by JAX's ``==`` (a lowering leaf's witness: (aval, sharding, layout, donated))."""
    old, new = change.old, change.new
    a, b = getattr(old, "witness", None), getattr(new, "witness", None)
    if type(a) is not tuple or type(b) is not tuple or len(a) != 4 or len(b) != 4:
        return False
    return a[3] != b[3] and values_equal(a[:3], b[:3])


def _donation(changes: list[Change], before: str, after: str) -> Diagnosis:
    """A compile whose arguments changed only in donation: a jit made with other
    ``donate_argnums`` / ``donate_argnames`` (the one jit option JAX's compile key reads per
    argument) compiling a trace JAX's cache served."""
    now = [c for c in changes if c.new.witness[3]]
    parts = []
    if now:
        parts.append(", ".join(_q(c.path) for c in now[:_MAX_LISTED]) + " now donated")
    was = [c for c in changes if not c.new.witness[3]]
    if was:
        parts.append(", ".join(_q(c.path) for c in was[:_MAX_LISTED]) + " no longer donated")
    return Diagnosis(
        cause=Cause.SHARDING,
        leaf=changes[0].path,
        before=before,
        after=after,
        explanation="Compiled again without a new trace, for another donation: "
        + "; ".join(parts)
        + ". Which arguments are donated is part of JAX's compile key: a jit made with other "
        "`donate_argnums` / `donate_argnames` compiles the same trace again.",
        hint="",
        distance=len(changes),
    )


def kept_lowering(new: Signature, previous: Sequence[Signature]) -> Signature:
    """`new` as the function's lowerings keep it: a program under the function's name that none of
    its earlier compiles had is marked as derived from it (compared with its like at the next
    one)."""
    if (
        new.jit_kind == LoweringKind.LOWERING
        and previous
        and not any(_same_program(old, new) for old in previous)
    ):
        return new._replace(jit_kind=LoweringKind.TRANSFORMED)
    return new


def as_consequence(d: Diagnosis, caller: str, number: int | None) -> Diagnosis:
    """`d`, of a trace made while `caller` was traced again (its trace `number`): said to follow
    from that retrace, which its own row explains, with no fix of its own."""
    if d.cause in (None, Cause.FIRST, Cause.NEW_FUNCTION) or not number or number < 2:
        return d
    return d._replace(
        explanation=f"Traced while `{caller}` was traced again (its trace #{number}), with the "
        f"arguments that trace made: a consequence of `{caller}`'s retrace, whose row says why. "
        f"{d.explanation}",
        hint="",
        hint_id=None,
    )


def part_of_first(d: Diagnosis, caller: str) -> Diagnosis:
    """`d`, of a trace made while `caller` was traced for the first time: part of that first
    trace (inside it, arguments are tracers by necessity), with no fix of its own."""
    if d.cause in (None, Cause.FIRST, Cause.NEW_FUNCTION):
        return d
    return d._replace(
        explanation=f"Traced during `{caller}`'s first trace, with the arguments that trace made: "
        f"part of `{caller}`'s first trace. {d.explanation}",
        hint="",
        hint_id=None,
    )


def join_hints(first: str | None, then: str | None) -> str | None:
    """Two hints of one event, the diagnosis's before the graph's (an unrolled loop)."""
    return f"{first} {then}" if first and then else (then or first)


def join_ids(first: str | None, then: str | None) -> str | None:
    """The `hint_ids` of an event with two hints (`join_hints`): their ids, comma-separated."""
    return f"{first},{then}" if first and then else (then or first)


def unrolled_loop_hint(found: Unrolled, total: int, where: str | None) -> str:
    """The hint for a trace whose top level holds an unrolled Python loop."""
    return hints.text(
        "unrolled_loop",
        repeats=found.repeats,
        at=f" (loop body at {where})" if where else "",
        equations=found.equations,
        total=total,
        period=found.period,
    )


REDUCED_COMPILE = "Compile recorded through jax.monitoring only (reduced mode)."


def retrace_message(event, count: int, limit: str, scope: str = "in this scope") -> str:
    """The message of `RetraceError` for `event`, the trace past `limit` ("max_traces=1"): `count`
    is what the limit counts `scope` ("in this cell"), said as such, next to the function's trace
    number in the session."""
    where = f" at `{event.leaf}`" if event.leaf else ""
    change = f": {event.before} → {event.after}" if event.before is not None else ""
    hint = f" Hint: {event.hint}" if event.hint else ""
    called = f", called at {event.call_site}" if event.call_site else ""
    retraces = limit.startswith("max_retraces")
    counted = (
        "its retraces (traces of a function traced before, here or earlier)"
        if retraces
        else "its traces"
    )
    return (
        f"{event.function} ({event.location}{called}) was {'retraced' if retraces else 'traced'} "
        f"{count} {'time' if count == 1 else 'times'}, past {limit}. The limit counts {counted} "
        f"{scope}, top-level and nested alike; this is its trace #{event.trace_number} in the "
        f"session. Cause: {event.cause}{where}{change}. {event.explanation}{hint}"
    )
