"""A trace's diagnosis before it is made (`PendingDiagnosis`), said as its caller's consequence
(`diagnosed`), and what the trace's end puts on its event (`apply_end`).

`Lifecycle` owns their order (a trace itself is a `_trace.Trace`); these are records and plain
functions of them, holding no user array, tracer or object.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from .._diagnosis._diagnose import (
    NOT_DIAGNOSED,
    Diagnosis,
    InvariantError,
    as_consequence,
    diagnose,
    join_hints,
    join_ids,
    unrolled_loop_hint,
)
from .._keys._key_index import HeldKeys
from .._keys._records import GraphStats, Stage
from .._keys._signature import Signature
from .._log._events import Event
from ._lineprof import profile_text
from ._trace import Trace


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


def diagnosed(trace: Trace, d: Diagnosis) -> Diagnosis:
    """`d`, said to follow from its caller's retrace where `trace` was traced during one."""
    caller = trace.caller
    if caller is None or caller.retrace_number is None:
        return d
    return as_consequence(d, caller.record.identity.name, caller.retrace_number)


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
        event.hint = join_hints(
            event.hint, unrolled_loop_hint(graph.unrolled, graph.eqns, graph.loop_where)
        )
        event.hint_ids = join_ids(event.hint_ids, "unrolled_loop")
