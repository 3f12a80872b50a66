"""A trace's diagnosis before it is made (`PendingDiagnosis`), said as its caller's consequence
(`diagnosed`), and what the trace's end puts on its event (`apply_end`).

`Lifecycle` owns their order (a trace itself is a `_trace.Trace`); these are records and plain
functions of them, holding no user array, tracer or object.
"""

from __future__ import annotations

import inspect
from typing import Callable, NamedTuple

from .._core._vocabulary import JitKind, LeafKind
from .._core._witness import Witness, values_equal
from .._diagnosis._diagnose import (
    NOT_DIAGNOSED,
    Diagnosis,
    InvariantError,
    as_consequence,
    diagnose,
    join_hints,
    join_ids,
    part_of_first,
    unrolled_loop_hint,
)
from .._diagnosis._hints import hint_for_row, loop_hint_holds
from .._diagnosis._hints import text as hint_text
from .._keys._key_index import HeldKeys
from .._keys._records import FunctionIdentity, GraphStats, Stage
from .._keys._signature import Leaf, Signature
from .._log._events import Event
from ._lineprof import profile_text
from ._trace import Trace


class Default(NamedTuple):
    """A parameter's default value as JAX's cache key would hold it passed explicitly: a static
    value's `Witness` (typed), an array's abstract value (None where JAX takes none)."""

    name: str
    witness: Witness
    aval: object


def parameter_defaults(ref) -> tuple:
    """The `Default`s of the live function behind weak reference `ref` (read at its trace's
    start, while the function is alive), () where it has none or is gone."""
    fun = ref() if ref is not None else None
    if fun is None:
        return ()
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return ()
    found = []
    for param in params:
        if param.default is param.empty:
            continue
        try:
            import jax

            aval = jax.typeof(param.default)
        except Exception:  # a default JAX cannot take as an array (a string, a callable)
            aval = None
        found.append(Default(param.name, Witness(param.default, typed=True), aval))
    return tuple(found)


class PendingDiagnosis(NamedTuple):
    """A retrace's diagnosis, made when its event is published: plain signatures and flags only."""

    signature: Signature  # or a DeferredSignature: leaves read at `get()`
    previous: (
        tuple  # the keys JAX still held for the function object when it was traced, oldest first
    )
    numbers: tuple  # their trace numbers
    dropped: tuple  # the function's other earlier keys (earlier objects, cleared caches)
    dropped_numbers: tuple
    new_object: bool
    rerun: str | None
    cache_cleared: bool
    forgotten: int = 0  # keys the session's bound dropped while JAX may hold them
    evicted: bool = False  # JAX held no key of the function object: `f.clear_cache()` emptied it
    defaults: tuple = ()  # the function's parameter defaults, as `Default`s (read at its start)

    @property
    def leaves(self) -> int:
        return self.signature.n_leaves

    def run(self, fault: Callable[[str, BaseException], None]) -> Diagnosis:
        try:
            return diagnose(
                self.signature.get(),
                HeldKeys(self.previous),
                new_object=self.new_object,
                rerun_note=self.rerun,
                cache_cleared=self.cache_cleared,
                dropped=[s.get() for s in self.dropped],
                numbers=self.numbers,
                dropped_numbers=self.dropped_numbers,
                forgotten=self.forgotten,
                evicted=self.evicted,
            )
        except (
            InvariantError
        ) as e:  # a diagnosis JAX's comparison does not back: said as not diagnosed
            fault("invariant", e)
        except Exception as e:
            fault("diagnosis", e)
        return NOT_DIAGNOSED


def diagnosed(trace: Trace, d: Diagnosis, pending: PendingDiagnosis | None = None) -> Diagnosis:
    """`d` with its hint's preconditions checked (`_hints.hint_for_row`), said to be part of its
    caller's trace where `trace` was traced during one: its first (`part_of_first`), or a retrace
    (`as_consequence`)."""
    d = _checked(trace, d, pending)
    caller = trace.caller
    if caller is None or caller.trace_number is None:
        return d
    name = caller.record.identity.name
    if caller.retrace_number is None:
        return part_of_first(d, name)
    return as_consequence(d, name, caller.retrace_number)


def _checked(trace: Trace, d: Diagnosis, pending: PendingDiagnosis | None) -> Diagnosis:
    passed_as_default = None
    if d.hint_id == "structure.not_passed" and pending is not None:
        passed_as_default = _passed_as_default(d.leaf, pending)
    return hint_checked(d, trace.record.identity, passed_as_default)


def hint_checked(
    d: Diagnosis, identity: FunctionIdentity, passed_as_default: bool | None = None
) -> Diagnosis:
    """`d` with the hint its preconditions leave it (`_hints.hint_for_row`): the same, another
    that explains, or none."""
    if not d.hint_id:
        return d
    kept = hint_for_row(
        d.hint_id,
        internal=identity.internal,
        passed_as_default=passed_as_default,
        placements=(d.before, d.after),
        writes_back=identity.jit_kind == JitKind.NNX,
    )
    if kept == d.hint_id:
        return d
    return d._replace(hint=hint_text(kept, d.leaf or "") if kept else "", hint_id=kept or None)


def _passed_as_default(path: str | None, pending: PendingDiagnosis) -> bool:
    """Whether every value passed for the argument `path` (in this trace and the function's
    earlier ones JAX holds) is the parameter's default as JAX compares them: a static value by
    JAX's ``==`` (`Witness`), an array by its abstract value. False where that cannot be read."""
    default = next((d for d in pending.defaults if d.name == path), None)
    if default is None:
        return False
    signatures = (pending.signature, *pending.previous)
    passed = [leaf for leaf in (s.get().leaves.get(path) for s in signatures) if leaf is not None]
    return bool(passed) and all(_is_value(leaf, default) for leaf in passed)


def _is_value(leaf: Leaf, default: Default) -> bool:
    """Whether `leaf` is what JAX's cache key holds for `default` passed in its place."""
    if leaf.kind == LeafKind.NONE:
        return default.witness.value() is None
    if type(leaf.witness) is Witness:
        return leaf.witness.equals(default.witness)
    if leaf.kind != LeafKind.ARRAY or leaf.witness is None or default.aval is None:
        return False
    return values_equal(leaf.witness, default.aval)


def apply_end(event: Event, trace: Trace) -> None:
    """What the trace's end reported (nothing before it has ended), onto its event."""
    event.trace_number = trace.trace_number
    if trace.seconds is not None:
        event.set_seconds(Stage.TRACE, trace.seconds)
    if trace.graph is not None:
        _set_graph(event, trace.graph)
    if trace.profile is not None and event.line_profile is None:
        event.line_profile = profile_text(trace.profile)


def _set_graph(event: Event, graph: GraphStats) -> None:
    event.eqns, event.eqns_total, event.loop_line = graph.eqns, graph.eqns_total, graph.loop_where
    if event.compile_s is not None and graph.eqns_total:  # compiled before its size was made
        event.compile_s_per_keqn = event.compile_s / (graph.eqns_total / 1000.0)
    if graph.unrolled is not None:
        event.loop_repeats = graph.unrolled.repeats
        if not loop_hint_holds(graph.loop_users, bool(event.internal)):
            return  # a library's loop: its line is named (`loop_line`), with no advice
        event.hint = join_hints(
            event.hint, unrolled_loop_hint(graph.unrolled, graph.eqns, graph.loop_where)
        )
        event.hint_ids = join_ids(event.hint_ids, "unrolled_loop")
