"""What the session knows of each jitted function: its counts, the keys JAX holds for it (for the
diagnosis), the function objects seen (weakly, to tell a re-created function from a changed
input). No user array, tracer or object; the keys kept are bounded for the whole session.

JAX's tracing cache (``partial_eval.trace_to_jaxpr``, a ``weakref_lru_cache`` with no size limit on
JAX 0.8–0.10) holds every key of a function object until the object dies, ``f.clear_cache()`` or
``jax.clear_caches()``. So a function keeps every key it was traced with (`KeptKey`), each with the
object and the cache generation it was traced under: the keys JAX still holds for a trace are those
of the same object in the same generation (`FunctionState.held`); the others stay, to say that a
key is identical to one JAX dropped, and are the first to go when the session's bound is reached.
"""

from __future__ import annotations

import collections
import time
import weakref
from typing import NamedTuple

from .._core._vocabulary import LeafKind
from .._core._witness import Witness
from .._keys._records import Binding, FunctionIdentity, TraceRecord
from .._keys._signature import Signature, compared_by_equality

# lowerings (compile keys) of live programs kept per function, and the devices of its compiles: a
# program lowered, then compiled again for another placement many compiles later, still found
SIGNATURES_PER_FUNCTION = 256
LEAF_BUDGET_PER_FUNCTION = 200_000  # leaves kept across a function's lowerings
# Trace keys kept for the whole session, in signature leaves (a leaf is ~0.3 KB: ~300 MB at most;
# docs/design.md, "What we compare against"). Past it, keys JAX no longer holds go first, then
# the oldest keys of the function that holds the most (which then says it forgot some).
MAX_KEPT_LEAVES = 1_000_000
_MAX_REFS = 100_000  # live function objects remembered per function key
_MAX_INTERNED = 4096  # devices-and-options tuples shared between compiles
_MAX_COMPILE_ENDS = 1024  # traces per function whose compile's end is kept


EVICTED = -1  # the generation of a key JAX dropped alone (`FunctionState.evict`)


class KeptKey(NamedTuple):
    """One key JAX cached a trace on: its signature, the function object (weakly) and JAX's
    cache generation when it was traced, and the trace's number."""

    signature: Signature  # or a DeferredSignature
    ref: weakref.ref | None
    generation: int
    trace_number: int
    thread: int | None = None  # the thread that traced it
    precompiled: bool = False  # traced by one of `jt.precompile`'s workers


class Held(NamedTuple):
    """The keys JAX holds for a trace (`FunctionState.held`), and the others to compare with."""

    signatures: tuple  # the held keys' signatures, oldest first
    numbers: tuple  # their trace numbers
    dropped: tuple  # `KeptKey`s: the same object's from cleared generations, or other objects'


class _HeldSoFar(NamedTuple):
    keys: list  # the `FunctionState.keys` list read (replaced, not changed, but for appends)
    count: int  # how many of its keys
    ref: object
    generation: int
    signatures: tuple
    numbers: tuple
    cleared: tuple
    others: tuple


class FunctionState:
    """What the session knows of one function (by its key): counts, every key it was traced with,
    the function objects seen (weakly)."""

    __slots__ = (
        "identity",
        "traces",
        "compiles",
        "keys",
        "kept_leaves",
        "forgotten",
        "lowerings",
        "refs",
        "_equal",
        "_grouped",
        "_refs_pruned",
        "location",
        "cell",
        "cache_generation",
        "arg_names",
        "failed",
        "_held",
        "compile_ends",
    )

    def __init__(self, identity: FunctionIdentity | None):
        self.identity = identity
        self.traces = 0
        self.compiles = 0
        self.keys: list[KeptKey] = []
        self.kept_leaves = 0
        self.forgotten = 0  # keys dropped for the session's bound while JAX may still hold them
        self.lowerings: collections.deque[Signature] = collections.deque(
            maxlen=SIGNATURES_PER_FUNCTION
        )
        # trace number -> `time.monotonic()` when its compile ended (the most recent ones; a
        # trace older than them is not taken for one whose compile has not ended)
        self.compile_ends: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.refs: dict[
            int, weakref.ref
        ] = {}  # the function objects traced under this key, by id(ref)
        # the first live reference of each class of objects JAX's cache takes for one
        # (`jax_same_object`)
        self._equal: dict[weakref.ref, weakref.ref] = {}
        # the objects traced while another (``==`` to them) headed their class, by id(ref)
        self._grouped: dict[int, weakref.ref] = {}
        self._refs_pruned = 0
        self.location: str | None = None
        self.cell: int | None = None
        self.cache_generation = 0
        self.arg_names: dict | None = None  # JAX's argument name -> the user's path
        self.failed = 0  # trace attempts that raised (not recorded as traces)
        self._held: _HeldSoFar | None = None  # `held`'s last answer, to extend at the next

    def add_key(self, key: KeptKey) -> int:
        """Keep `key`; returns the leaves it adds."""
        self.keys.append(key)
        n = key.signature.n_leaves
        self.kept_leaves += n
        return n

    def seen(self, ref: weakref.ref) -> bool:
        """Whether the function object of `ref` was traced under this key (weak references to one
        live object are one object)."""
        return self.refs.get(id(ref)) is ref

    def jax_same_object(self, ref: weakref.ref | None, signature) -> weakref.ref | None:
        """The reference of the function object traced under this key that JAX's cache takes
        `ref`'s object for, or `ref`. JAX keys its tracing cache on a weak reference to the function
        (``weakref_lru_cache``), and two weak references compare as their objects while both live:
        ``jax.jit(obj.step)`` made twice is one function to JAX (two bound methods of one object
        are ``==``), two objects compared by identity are two; where JAX compares another object
        (`signature`'s `compared_by_equality`: ``nnx.jit`` hands it a wrapper per call), `ref`.
        Checked on JAX 0.10.2: tests/test_function_identity.py."""
        if ref is None or signature is None or not compared_by_equality(signature):
            return ref
        try:
            return self._equal.get(ref, ref)  # (its hash, then ``==`` on a match: JAX's lookup)
        except Exception:  # an object whose ``__hash__`` or ``__eq__`` raises: by identity
            return ref

    def add_ref(self, ref: weakref.ref, signature) -> None:
        refs = self.refs
        if refs.get(id(ref)) is not ref:
            if len(refs) >= max(64, 2 * self._refs_pruned):  # (dead objects' go, amortized)
                live = {i: r for i, r in refs.items() if r() is not None}
                if len(live) >= _MAX_REFS:
                    live = dict(list(live.items())[-_MAX_REFS // 2 :])
                self.refs = refs = live
                self._refs_pruned = len(live)
                kept = set(map(id, live.values()))
                try:  # (the keys are those references: their hashes kept, no ``==`` between them)
                    self._equal = {r: c for r, c in self._equal.items() if id(c) in kept}
                except Exception:
                    self._equal = {}
                self._grouped = {i: r for i, r in self._grouped.items() if i in live}
            refs[id(ref)] = ref
        if signature is None or not compared_by_equality(signature):
            return
        try:
            # kept as its own class unless a live one takes it; asked at every trace, as JAX's
            # lookup is: once the object heading its class is gone, the next one traced heads it
            if self._equal.setdefault(ref, ref) is not ref:
                self._grouped[id(ref)] = ref
        except Exception:
            pass

    def kept_under_another(self, ref: weakref.ref | None) -> bool:
        """Whether the object of `ref` was traced while another one, ``==`` to it, headed its class
        (JAX kept its keys under that one: gone, it took them along)."""
        return ref is not None and self._grouped.get(id(ref)) is ref

    def evict(self, ref: weakref.ref) -> None:
        """JAX's cache holds no key of the function object of `ref` any more (`f.clear_cache()`):
        its keys stay, to compare with, as keys JAX no longer holds."""
        self.keys = [k._replace(generation=EVICTED) if k.ref is ref else k for k in self.keys]

    def held(self, ref: weakref.ref | None, generation: int) -> Held:
        """The keys JAX still holds for a trace of the function object `ref` in cache generation
        `generation` (their signatures and trace numbers, oldest first), and the others to compare
        with: the same object's from cleared generations, or where it has none (a function object
        not seen before), every earlier object's.

        The answer for the same object and generation is extended from the last one by the keys
        added since, so that N traces of one function read their keys in time linear in N."""
        keys, last = self.keys, self._held
        if (
            last is not None
            and last.keys is keys
            and last.ref is ref
            and last.generation == generation
        ):
            start, signatures, numbers = last.count, last.signatures, last.numbers
            cleared, others = last.cleared, last.others
        else:
            start, signatures, numbers, cleared, others = 0, (), (), (), ()
        new_signatures, new_numbers, new_cleared, new_others = [], [], [], []
        for i in range(start, len(keys)):
            key = keys[i]
            if (
                key.ref is not ref
            ):  # (a function that takes no weak reference: one object, as far as we can tell)
                new_others.append(key)
            elif key.generation == generation:
                new_signatures.append(key.signature)
                new_numbers.append(key.trace_number)
            else:
                new_cleared.append(key)
        if new_signatures:
            signatures += tuple(new_signatures)
            numbers += tuple(new_numbers)
        cleared += tuple(new_cleared)
        others += tuple(new_others)
        self._held = _HeldSoFar(
            keys, len(keys), ref, generation, signatures, numbers, cleared, others
        )
        return Held(signatures, numbers, cleared or others)

    def shed(self, leaves: int, generation: int) -> int:
        """Drop kept keys for about `leaves` leaves, those JAX no longer holds first; returns the
        leaves dropped."""
        kept, dropped = [], 0
        for k in self.keys:
            if k.generation != generation or (k.ref is not None and k.ref() is None):
                dropped += k.signature.n_leaves
            else:
                kept.append(k)
        self.keys = keys = kept
        while keys and dropped < leaves:
            k = keys.pop(0)
            dropped += k.signature.n_leaves
            self.forgotten += 1
        self.kept_leaves -= dropped
        return dropped


class LoweredModules:
    """The modules JAX lowered (weakly: JAX's compile cache holds them while it may compile them
    again), the function each is of, and what each was compiled for (its devices and XLA options,
    each kept once), to name a compile of one with no lowering of its own."""

    __slots__ = ("_modules", "_pruned", "_interned")

    def __init__(self):
        # id(ref) -> [ref, function key, [(devices, options), ...] of its compiles]
        self._modules: dict[int, list] = {}
        self._pruned = 0
        self._interned: dict[tuple, tuple] = {}  # one tuple per devices-and-options seen

    def lowered(self, ref: weakref.ref, key: str, origin: ModuleOrigin | None = None) -> None:
        modules = self._modules
        if len(modules) >= max(256, 2 * self._pruned):  # (dead modules go, amortized)
            live = {i: v for i, v in modules.items() if v[0]() is not None}
            if len(live) >= _MAX_REFS:
                live = dict(list(live.items())[-_MAX_REFS // 2 :])
            self._modules = modules = live
            self._pruned = len(live)
            if len(self._interned) > _MAX_INTERNED:
                self._interned = {}
        found = modules.get(id(ref))
        if found is None or found[0] is not ref:
            modules[id(ref)] = [ref, key, [], origin, []]

    def _entry(self, ref: weakref.ref | None) -> list | None:
        found = self._modules.get(id(ref)) if ref is not None else None
        return found if found is not None and found[0] is ref else None

    def key_of(self, ref: weakref.ref | None) -> str | None:
        """The function whose lowering made the module of `ref` (one weak reference per live
        module: the same reference), or None."""
        found = self._entry(ref)
        return found[1] if found is not None else None

    def compiled(self, ref: weakref.ref | None, devices: tuple, options: tuple) -> list:
        """What the module of `ref` was compiled for before, oldest first; this compile is added
        (at most `SIGNATURES_PER_FUNCTION` kept). [] for a module not lowered while recording."""
        found = self._entry(ref)
        if found is None:
            return []
        before = list(found[2])
        what = (devices, options)
        what = self._interned.setdefault(what, what)
        found[2].append(what)
        del found[2][:-SIGNATURES_PER_FUNCTION]
        found[4].append(time.monotonic())
        del found[4][:-SIGNATURES_PER_FUNCTION]
        return before

    def compiled_elsewhere_first(self, ref: weakref.ref | None, thread: int, started):
        """The `ModuleOrigin` of the module of `ref` where another thread than `thread` lowered
        it and no compile of it had ended when this one began (`started`): JAX's compile cache held
        no program of it for this call. None otherwise."""
        found = self._entry(ref)
        if found is None or found[3] is None or found[3].thread == thread or started is None:
            return None
        if any(ended <= started for ended in found[4]):
            return None
        return found[3]


class ModuleOrigin(NamedTuple):
    """The trace whose lowering made a module: its thread, number, and whether one of
    `jt.precompile`'s workers made it."""

    thread: int
    trace_number: int | None
    precompiled: bool


def compile_ended(state: FunctionState, trace_number: int) -> None:
    """A compile of `state`'s trace `trace_number` has just ended."""
    ends = state.compile_ends
    ends[trace_number] = time.monotonic()
    ends.move_to_end(trace_number)
    while len(ends) > _MAX_COMPILE_ENDS:
        ends.popitem(last=False)


def traced_elsewhere(state: FunctionState, lowering: Signature, thread: int, started):
    """The newest kept key of `state` traced on another thread than `thread` whose arguments have
    the types `lowering` (a lowering signature) lowers, and whose own compile had not ended when
    that lowering began (`started`): the program of that trace, lowered here because JAX's caches
    held its trace and no compiled program yet. None where there is none."""
    texts = [leaf.text for leaf in lowering.leaves.values()]
    ends = state.compile_ends
    oldest_end = next(iter(ends), None) if len(ends) >= _MAX_COMPILE_ENDS else None
    for kept in reversed(state.keys):
        if kept.thread is None or kept.thread == thread:
            continue
        if kept.generation != state.cache_generation:
            continue  # (JAX's caches were cleared since: it holds no trace of it)
        if oldest_end is not None and kept.trace_number < oldest_end:
            break  # (its compile's end, if any, is no longer kept)
        ended = ends.get(kept.trace_number)
        if ended is not None and (started is None or ended <= started):
            continue
        signature = kept.signature.get()
        arrays = [leaf.text for leaf in signature.leaves.values() if leaf.kind == LeafKind.ARRAY]
        if arrays == texts:
            return kept
    return None


class KeyBudget:
    """The session's bound on kept trace keys (`MAX_KEPT_LEAVES`), over all functions."""

    __slots__ = ("leaves", "limit")

    def __init__(self, limit: int = MAX_KEPT_LEAVES):
        self.leaves, self.limit = 0, limit

    def added(self, n: int, functions: dict, generation: int) -> None:
        self.leaves += n
        if self.leaves <= self.limit:
            return
        target = self.leaves - int(self.limit * 0.9)
        for state in sorted(functions.values(), key=lambda s: s.kept_leaves, reverse=True):
            if target <= 0:
                break
            freed = state.shed(0, generation)  # keys JAX no longer holds, everywhere first
            self.leaves -= freed
            target -= freed
        for state in sorted(functions.values(), key=lambda s: s.kept_leaves, reverse=True):
            if target <= 0:
                break
            freed = state.shed(min(target, state.kept_leaves), generation)
            self.leaves -= freed
            target -= freed


def keep(signatures: collections.deque, signature: Signature) -> collections.deque:
    """The lowerings `signatures` with `signature` appended: those of programs JAX may still
    compile (a program gone from JAX's caches is compiled no more), as many as
    `SIGNATURES_PER_FUNCTION` and the leaf budget allow (fewer when signatures are large)."""
    keep = max(
        1, min(SIGNATURES_PER_FUNCTION, LEAF_BUDGET_PER_FUNCTION // max(1, signature.n_leaves))
    )
    live = [s for s in signatures if not _program_gone(s)]
    if signatures.maxlen != keep or len(live) != len(signatures):
        signatures = collections.deque(live, maxlen=keep)
    signatures.append(signature)
    return signatures


def _program_gone(signature: Signature) -> bool:
    token = signature.function_token
    return (
        len(token) == 2 and token[0] == "program" and type(token[1]) is Witness and token[1].gone()
    )


def new_object(
    state: FunctionState, record: TraceRecord, cell: int | None
) -> tuple[bool, str | None]:
    """Whether the traced function object is one not seen before, and why (a re-run cell).

    Function objects are told apart as JAX's cache tells them (`FunctionState.jax_same_object`), by
    their weak references (kept in the function's state while they live), so the answer holds after
    the function itself is gone."""
    if not state.traces or record.function_ref is None:
        return False, None
    if state.seen(state.jax_same_object(record.function_ref, record.signature)):
        return False, None
    identity = record.identity
    if state.location is not None and state.location != identity.location:
        return True, (
            f"its cell was run again: defined at {identity.location}, was {state.location}"
            if identity.in_cell
            else f"re-defined at {identity.location}, was {state.location}"
        )
    if cell is not None and state.cell is not None and state.cell != cell and identity.in_cell:
        return True, f"re-created in cell {cell}, last traced in cell {state.cell}"
    if record.binding is not None:
        return True, created_note(record.binding)
    return True, None


def created_note(binding: Binding) -> str:
    """Where a re-created function object came from, as far as Python can tell
    (`CallSites.binding`): the line assigning the variable that held it, or every line that assigns
    it."""
    if len(binding.lines) == 1:
        return f"re-created at {binding.lines[0]}, where `{binding.name}` is assigned"
    return f"re-created where `{binding.name}` is assigned: {' or '.join(binding.lines)}"


def user_names(state: FunctionState, signature: Signature) -> Signature:
    """A lowering signature under the user's argument paths instead of JAX's names."""
    names = state.arg_names
    if not names:
        return signature
    return signature._replace(
        leaves={names.get(path, path): leaf for path, leaf in signature.leaves.items()}
    )
