"""The life of a trace, from the probe's records to a finished `Event` in the log: one owner.

The probe reports a trace's start (`on_trace`), its end or failure, its lowering, its stages'
seconds. `Lifecycle` turns those into events and hands each finished event to the
`EventLog`, which knows nothing of traces.

What a trace means depends on its function's history (its trace number, whether its function
object is new, the earlier signatures its diagnosis compares with), so every trace start and
end takes a tick, and a trace reads its function's state as the traces that ended before it
started left it. Nobody needs an event until it is read, so by default a trace (a
`_trace.Trace`, the probe's from its start) is begun (reads the state), ended (updates it),
built and diagnosed when the log is next read, in order. While someone follows the log (a
subscriber: a live view, a persisted log, a guard), each event is built at its trace, and its
diagnosis is made at once where a guard may stop the trace. Unpublished events are bounded. Nothing
here holds a user array, tracer or object (records carry abstract values, texts, weak references),
and nothing imports JAX.
"""

from __future__ import annotations

import collections
import itertools
import threading
from typing import Callable

from .._core._vocabulary import EventKind
from .._diagnosis._diagnose import (
    FIRST,
    NO_SIGNATURE,
    REDUCED,
    REDUCED_COMPILE,
    Diagnosis,
    compiled_here_too,
    diagnose_compile,
    diagnose_devices,
    first_after_failures,
    join_hints,
    join_ids,
    kept_lowering,
)
from .._diagnosis._processes import PERSISTED_SIGNATURE_MAX_CHARS, signature_column
from .._jax._cache_key import CacheKeyRecord
from .._keys._rebuild import placed
from .._keys._records import (
    CompileRecord,
    FunctionIdentity,
    GraphStats,
    LoweringRecord,
    Stage,
    XlaCost,
)
from .._keys._signature import Signature
from .._log._events import Event, EventLog, now, when
from ._drafts import (
    PendingDiagnosis,
    _set_graph,
    apply_end,
    diagnosed,
    hint_checked,
    parameter_defaults,
)
from ._functions import (
    FunctionState,
    KeptKey,
    KeyBudget,
    LoweredModules,
    ModuleOrigin,
    compile_ended,
    keep,
    new_object,
    traced_elsewhere,
    user_names,
)
from ._lineprof import profile_text
from ._precompiling import PRECOMPILE_SITE, note_lowering, note_trace, precompiling
from ._trace import Trace

MAX_FUNCTIONS = 20_000
# Events not yet in the log (traces not built, diagnoses not made yet): at most this many,
# holding at most this many signature leaves, before they are finished anyway (memory stays
# bounded).
MAX_UNPUBLISHED_EVENTS = 4096
MAX_UNPUBLISHED_LEAVES = 200_000
MAX_KEY_ARGUMENTS = (
    512  # argument types kept with a persistent cache key, to rank keys of other runs
)


# How a divergence row later found a false alarm begins (a late process's key matched)
WITHDRAWN = "WITHDRAWN (a late key matched: a false alarm): "


class Lifecycle:
    """Implements the probe's `Sink`: records in, finished events out to `log`.

    `fault(stage, exc)` counts a failure inside jaxtrace_nb; `cell()` is the notebook cell
    running now (or None); `test()` the pytest test running now (its node id, or None);
    `place()` is (host, JAX's process index or None)."""

    def __init__(
        self,
        log: EventLog,
        *,
        fault: Callable[[str, BaseException], None],
        cell: Callable[[], int | None],
        place: Callable[[], tuple],
        test: Callable[[], str | None] = lambda: None,
    ):
        self.log = log
        self.fault = fault
        self._cell, self._place, self._test = cell, place, test
        self.lock = threading.RLock()  # this state and every event handed to the log, in order
        self.functions: dict[str, FunctionState] = {}
        self._programs: dict[tuple, str] = {}  # (JAX name, JAX source info) -> function key
        self._modules = LoweredModules()  # the modules lowered -> function key
        self._key_budget = KeyBudget()  # the trace keys kept over all functions
        self._open = threading.local()  # per thread: the traces under way, innermost last
        self._ticks = itertools.count()
        self._unbegun: collections.deque[Trace] = collections.deque()  # not begun, in start order
        # traces not in the log yet, in the log's order (numbered); a compile's event queued as one
        self._unpublished: list[Trace] = []
        self._unpublished_leaves = 0
        self.keep_signatures = (
            False  # persisted logs keep each trace's argument leaves (`signature`)
        )
        # Where each persistent cache key goes (the session's `CacheExplainer.submit`), with its
        # compile's event.
        self.cache_keys: Callable[[Event | None, CacheKeyRecord], None] | None = None

    # ---------------------------------------------------------------- publishing
    def publish(self) -> None:
        """Build every trace's event, make every pending diagnosis, and hand them to the log, in
        order (whoever feeds the log calls it before a read: `EventLog.before_read`)."""
        if not self._unpublished:
            return
        with self.lock:
            self._publish()

    def _publish(self) -> None:
        queued, self._unpublished, self._unpublished_leaves = self._unpublished, [], 0
        for item in queued:
            self._append(item)

    def _append(self, trace: Trace) -> Event | None:
        """`trace`'s event, finished (built, its diagnosis made), into the log."""
        try:
            event = self._build(trace)
            pending, trace.pending = trace.pending, None
            if pending is not None:
                # (a hint already set, an unrolled loop's, follows)
                d = diagnosed(trace, pending.run(self.fault), pending)
                event.set_diagnosis(
                    d, join_hints(d.hint, event.hint), join_ids(d.hint_id, event.hint_ids)
                )
            return self.log.append(event)
        except Exception as e:
            self.fault("log", e)
            return None

    def _hand(self, trace: Trace) -> bool:
        """`trace`'s event to the log: at once while the log is followed, else with its next read
        (its number reserved now, so that it keeps its place among the others); whether it went
        (or waits). The wait is bounded."""
        if self.log.followed:
            self._publish()
            return self._append(trace) is not None
        if trace.seq is None:
            trace.seq = self.log.reserve()
            if trace.event is not None:  # (built: a compile's, or one followed at its start)
                trace.event.seq = trace.seq
        self._unpublished.append(trace)
        self._unpublished_leaves += trace.leaves
        if (
            len(self._unpublished) >= min(MAX_UNPUBLISHED_EVENTS, self.log.max_events)
            or self._unpublished_leaves > MAX_UNPUBLISHED_LEAVES
        ):
            self._publish()
        return True

    def _hand_event(self, event: Event, name: str) -> Trace | None:
        """An event made whole (a compile's, a trace seen only through `jax.monitoring`) to the
        log, as a trace already built; the trace, or None where it could not be handed."""
        trace = Trace(None, name)
        trace.event = event
        return trace if self._hand(trace) else None

    # ------------------------------------------------------------------ state
    def state(self, key: str, identity: FunctionIdentity | None = None) -> FunctionState:
        state = self.functions.get(key)
        if state is None:
            if len(self.functions) >= MAX_FUNCTIONS:
                self.functions.pop(next(iter(self.functions)))
            state = self.functions[key] = FunctionState(identity)
        elif identity is not None:
            state.identity = identity
        return state

    def reset(self) -> None:
        with self.lock:
            self._begin_started()  # a trace under way read what it started with
            self._unpublished, self._unpublished_leaves = [], 0
            self.functions.clear()
            self._programs.clear()
            self._modules = LoweredModules()
            self._key_budget = KeyBudget(self._key_budget.limit)

    def current_functions(self) -> dict[str, FunctionState]:
        """Per-function state, as of every trace recorded so far (their events are built first)."""
        with self.lock:
            self._build_through()
        return self.functions

    # ----------------------------------------------------------------- traces
    def on_trace(self, trace: Trace) -> bool:
        __tracebackhide__ = True
        log = self.log
        try:
            trace.cell, trace.test = self._cell(), self._test()
            if precompiling():
                trace.precompiled = True
                note_trace(trace.record)
                # (the worker's own frames: the program's call at this signature is yet to come)
                trace.record = trace.record._replace(call_site=PRECOMPILE_SITE)
            self._opened(trace)
            with self.lock:
                trace.start = next(self._ticks)
                if not log.followed:
                    self._unbegun.append(trace)  # begun, ended and built when the log is read
                    return True
                self._publish()  # the traces before it: the state they leave is its past
                self._begin(trace, defer=not log.guarded)
                self._build(trace)  # followed live: the event now, not when the log is read
        except Exception as e:
            self.fault("diagnosis", e)
            return False
        if log.guarded:
            try:
                log.guard(trace.event)  # raises RetraceError past a watch's limit, by design
            except BaseException:
                with self.lock:
                    self._append(trace)  # the trace it stopped, with its cause, for the views
                raise
        return True

    def on_divergence(self, fields: dict, withdraws: bool = False) -> None:
        """A divergence across processes (`_divergence.event_fields`) into the log, after the traces
        recorded before it. A withdrawal (`withdraws`) also marks the rows of the divergence it
        withdraws: their explanation begins ``WITHDRAWN``."""
        try:
            if withdraws:
                self._mark_withdrawn(fields)
            host, process = self._place()
            event = Event(
                time=now(),
                cell=self._cell(),
                kind=EventKind.DIVERGENCE,
                internal=False,
                nested=False,
                host=host,
                process=process,
                test=self._test(),
                **fields,
            )
            with self.lock:
                self._publish()
                self.log.append(event)
        except Exception as e:
            self.fault("divergence", e)

    def _mark_withdrawn(self, fields: dict) -> None:
        with self.lock:
            for event in self.log.events():
                if (
                    event.kind == EventKind.DIVERGENCE
                    and event.function == fields.get("function")
                    and event.trace_number == fields.get("trace_number")
                    and not (event.explanation or "").startswith(WITHDRAWN)
                ):
                    event.explanation = f"{WITHDRAWN}{event.explanation or ''}"
                    self.log.updated(event)

    def _begin(self, trace: Trace, defer: bool = True) -> None:
        """What the function's state says of the trace: its number, whether its function object is
        new, and its diagnosis (made when published when `defer`: most are never read)."""
        record = trace.record
        state = self.functions.get(record.identity.key)
        traces = state.traces if state is not None else 0
        is_new, rerun = (
            new_object(state, record, trace.cell) if state is not None else (False, None)
        )
        pending = None
        if record.signature is None:
            diagnosis = (
                Diagnosis(
                    cause=None,
                    leaf=None,
                    before=None,
                    after=None,
                    explanation=NO_SIGNATURE,
                    hint="",
                )
                if traces
                else FIRST
            )
        elif state is None or not state.traces:
            diagnosis = first_after_failures(state.failed if state is not None else 0)
        else:
            ref = state.jax_same_object(record.function_ref, record.signature)
            # (no key of it held: emptied by `f.clear_cache()`, unless JAX kept them under an equal
            # object that is gone, which took them along)
            evicted = record.evicted and not state.kept_under_another(ref)
            if evicted and ref is not None:
                state.evict(ref)
            held = state.held(ref, record.cache_generation)
            dropped = held.dropped
            pending = PendingDiagnosis(
                signature=record.signature,
                previous=held.signatures,
                numbers=held.numbers,
                dropped=tuple(k.signature for k in dropped),
                dropped_numbers=tuple(k.trace_number for k in dropped),
                new_object=is_new,
                rerun=rerun,
                cache_cleared=record.cache_generation != state.cache_generation,
                forgotten=state.forgotten,
                evicted=evicted,
                # (a hint's precondition: JAX's and libraries' helpers get no hint)
                defaults=()
                if record.identity.internal
                else parameter_defaults(record.function_ref),
            )
            diagnosis = None
            if not defer:
                diagnosis, pending = diagnosed(trace, pending.run(self.fault), pending), None
        trace.new_object, trace.diagnosis, trace.pending = is_new, diagnosis, pending
        trace.trace_number = traces + 1
        trace.retrace_number = traces + 1 if traces else None

    def _begin_started(self, before: float = float("inf")) -> None:
        """Every trace that started before tick `before` and has not read its function's state reads
        it now (before a later end, a failure or a reset changes it)."""
        unbegun = self._unbegun
        while unbegun and unbegun[0].start < before:
            self._begin(unbegun.popleft())

    def _end(self, trace: Trace) -> None:
        """The function's state once the trace has ended (at tick `trace.end`)."""
        record = trace.record
        # the traces that started before it ended read the state before it
        self._begin_started(trace.end)
        state = self.state(record.identity.key, record.identity)
        if record.signature is not None:
            added = state.add_key(
                KeptKey(
                    signature=record.signature,
                    ref=state.jax_same_object(record.function_ref, record.signature),
                    generation=record.cache_generation,
                    trace_number=state.traces + 1,
                    thread=record.thread,
                    precompiled=trace.precompiled,
                )
            )
            self._key_budget.added(added, self.functions, record.cache_generation)
        if record.function_ref is not None:
            state.add_ref(record.function_ref, record.signature)
        state.traces += 1
        state.location = record.identity.location
        state.cell = trace.cell
        state.cache_generation = record.cache_generation
        if record.arg_names is not None:
            state.arg_names = record.arg_names
        self._remember_program(record.identity)
        trace.trace_number = state.traces

    def _build(self, trace: Trace) -> Event:
        """A trace's event (made once): its diagnosis, and what its end reported."""
        if trace.event is not None:
            return trace.event
        if trace.end is not None:  # ended, nobody followed (one followed is built at its start)
            self._end(trace)  # its state now: read before any trace that ended after it started
        record = trace.record
        identity = record.identity
        event = self._event(
            identity,
            EventKind.TRACE,
            trace.diagnosis,
            trace.trace_number,
            record.thread,
            nested=record.nested,
            call_site=record.call_site,
            time=when(trace.time),
            cell=trace.cell,
            test=trace.test,
        )
        event.seq = trace.seq
        event.precompiled = trace.precompiled
        if trace.new_object and record.binding is not None:  # a re-created function: where from
            event.created_at = ", ".join(record.binding.lines)
        if self.keep_signatures and record.signature is not None and not identity.internal:
            # A persisted log (one per process of a multi-process run) keeps the argument leaves
            # of each trace, bounded, so that processes can be compared (`_processes`) and
            # `jt.precompile` can rebuild the call.
            event.signature = signature_column(
                {path: leaf.text for path, leaf in record.signature.get().leaves.items()},
                PERSISTED_SIGNATURE_MAX_CHARS,
            )
        trace.event = event
        apply_end(event, trace)
        return event

    def _opened(self, trace: Trace) -> None:
        """`trace` is under way on this thread; a nested one remembers the trace it started in."""
        stack = getattr(self._open, "traces", None)
        if stack is None:
            stack = self._open.traces = []
        if not trace.record.nested:
            stack.clear()  # (a top-level trace: none is under way, whatever an unreported end left)
        elif stack:
            trace.caller = stack[-1]
        stack.append(trace)

    def _closed(self, trace: Trace) -> None:
        stack = getattr(self._open, "traces", None)
        if stack and trace in stack:
            del stack[stack.index(trace) :]

    def on_trace_end(self, trace: Trace, seconds: float | None, graph: GraphStats | None) -> bool:
        self._closed(trace)
        trace.seconds, trace.graph = seconds, graph
        try:
            with self.lock:
                trace.end = next(self._ticks)
                if trace.event is None and not self.log.followed:  # begun, ended, built when read
                    return self._hand(trace)
                if trace.event is not None:  # built at its start, followed since
                    self._end(trace)
                    apply_end(trace.event, trace)
                else:  # followed since it began, not before: its event now, in order
                    self._publish()
                    self._build(trace)
                return self._hand(trace)
        except Exception as e:
            self.fault("diagnosis", e)
            return False

    def on_trace_failed(self, trace: Trace) -> None:
        self._closed(trace)
        try:
            with self.lock:
                self._build_through()  # the traces before it first: it failed after them
                self._begin_started(next(self._ticks))  # the traces under way do not see it
                self.state(trace.record.identity.key, trace.record.identity).failed += 1
        except Exception as e:
            self.fault("diagnosis", e)

    # ------------------------------------------------------------- compiles
    def on_lowering(self, trace: Trace | None, record: LoweringRecord) -> Event | None:
        note_lowering(None)  # (a precompiling thread: JAX lowered; `_placed` says how, if it can)
        try:
            with self.lock:
                if trace is not None:  # the compile of a trace just recorded: its event now
                    event = self._build_through(trace)
                    if event is None:
                        return None
                else:
                    # a compile without a new trace: the functions' state as of now
                    self._build_through()
                    event = None
                if event is not None:
                    state = self.functions.get(event.key)
                    if state is not None and record.signature is not None:
                        named = user_names(state, record.signature)
                        state.lowerings = keep(state.lowerings, named)
                        self._placed(event, named)
                else:
                    event = self._compile_event(record)
                if event is not None and record.module_ref is not None:
                    origin = (  # (a lowering of no trace of its own: its trace is not known)
                        ModuleOrigin(record.thread, event.trace_number, bool(event.precompiled))
                        if trace is not None
                        else None
                    )
                    self._modules.lowered(record.module_ref, event.key, origin)
                return event
        except Exception as e:
            self.fault("diagnosis", e)
            return None

    def on_compiled_for(self, handle: Event, record: CompileRecord) -> None:
        try:
            with self.lock:
                self._modules.compiled(record.module_ref, record.devices, record.options)
        except Exception as e:
            self.fault("diagnosis", e)

    def on_compile_only(self, record: CompileRecord) -> Event | None:
        try:
            with self.lock:
                self._build_through()  # (the functions' state as of now)
                key = self._modules.key_of(record.module_ref)
                state = self.functions.get(key) if key is not None else None
                if state is None or state.identity is None:
                    identity = _unknown_identity(record.jax_name, "")
                    state = self.state(identity.key, identity)
                origin = self._modules.compiled_elsewhere_first(
                    record.module_ref, record.thread, record.started
                )
                before = self._modules.compiled(record.module_ref, record.devices, record.options)
                if origin is not None:
                    diagnosis = compiled_here_too(origin.trace_number, origin.precompiled, False)
                else:
                    diagnosis = diagnose_devices(before, record.devices, record.options)
                event = self._event(
                    state.identity, EventKind.COMPILE, diagnosis, state.traces, record.thread
                )
                event.precompiled = precompiling()
                return event if self._hand_event(event, record.jax_name) is not None else None
        except Exception as e:
            self.fault("diagnosis", e)
            return None

    def _build_through(self, trace: Trace | None = None) -> Event | None:
        """`trace`'s event (with None: none), built with the traces queued before it: they keep
        their place in the queue, and their diagnoses wait there. None, counted, if building
        fails."""
        try:
            for queued in self._unpublished:
                self._build(queued)
                if queued is trace:
                    break
            return self._build(trace) if trace is not None else None
        except Exception as e:
            self.fault("log", e)
            return None

    def _compile_event(self, record: LoweringRecord) -> Event | None:
        key = self._programs.get((record.jax_name, record.src_info))
        if key is None and record.signature is not None:  # traced before recording started
            key = next(
                (k for (name, _), k in reversed(self._programs.items()) if name == record.jax_name),
                None,
            )
        state = self.functions.get(key) if key is not None else None
        if state is None or state.identity is None:
            identity = record.identity or _unknown_identity(record.jax_name, record.src_info)
            state = self.state(identity.key, identity)
        if record.signature is None:
            diagnosis = Diagnosis(
                cause="first" if not state.compiles else None,
                leaf=None,
                before=None,
                after=None,
                explanation=REDUCED_COMPILE,
                hint="",
            )
        else:
            signature = user_names(state, record.signature)
            previous = list(state.lowerings)
            elsewhere = traced_elsewhere(state, signature, record.thread, record.started)
            if elsewhere is not None:
                diagnosis = compiled_here_too(elsewhere.trace_number, elsewhere.precompiled, True)
            else:
                diagnosis = hint_checked(
                    diagnose_compile(signature, previous, traced=state.traces > 0), state.identity
                )
            state.lowerings = keep(state.lowerings, kept_lowering(signature, previous))
        event = self._event(
            state.identity, EventKind.COMPILE, diagnosis, state.traces, record.thread
        )
        if record.signature is not None:
            self._placed(event, signature)
        event.precompiled = precompiling()
        return event if self._hand_event(event, record.jax_name) is not None else None

    def _placed(self, event: Event, lowering: Signature) -> None:
        """A lowering's argument types and placements, under the user's paths: handed to a
        precompiling thread, and kept in a persisted log for `jt.precompile` to rebuild: a trace's
        where one is committed, a compile's always (its `signature` then has its arguments'
        types). A failure here is counted; the event stays as it was."""
        try:
            keep = self.keep_signatures and not event.internal
            if not keep and not precompiling():
                return
            leaves = lowering.leaves
            note_lowering({path: (leaf.text, leaf.detail) for path, leaf in leaves.items()})
            placements = {path: leaf.detail for path, leaf in leaves.items() if leaf.detail}
            if not keep:
                return
            if event.kind != EventKind.COMPILE and not any(map(placed, placements.values())):
                return  # (a trace's compile: uncommitted is what a rebuilt call gets)
            event.placements = signature_column(placements, PERSISTED_SIGNATURE_MAX_CHARS)
            if event.kind == EventKind.COMPILE:
                event.signature = signature_column(
                    {path: leaf.text for path, leaf in leaves.items()},
                    PERSISTED_SIGNATURE_MAX_CHARS,
                )
        except Exception as e:
            self.fault("log", e)

    def on_public_trace(self, jax_name: str, seconds: float, thread: int) -> Trace | None:
        """A trace seen only through jax.monitoring (reduced mode: JAX outside the range)."""
        try:
            identity = _unknown_identity(jax_name, "")
            with self.lock:
                state = self.state(identity.key, identity)
                state.traces += 1
                n = state.traces
                event = self._event(
                    identity, EventKind.TRACE, FIRST if n == 1 else REDUCED, n, thread
                )
                event.set_seconds(Stage.TRACE, seconds)
                return self._hand_event(event, jax_name)
        except Exception as e:
            self.fault("diagnosis", e)
            return None

    def on_timing(self, event: Event, stage: Stage, seconds: float) -> None:
        event.set_seconds(stage, seconds)
        if stage is Stage.COMPILE:
            state = self.functions.get(event.key)
            if state is not None:
                state.compiles += 1
                if event.kind == EventKind.TRACE and event.trace_number is not None:
                    compile_ended(state, event.trace_number)
            if event.eqns_total:
                event.compile_s_per_keqn = float(seconds) / (event.eqns_total / 1000.0)
        self.log.updated(event)

    def on_xla_cost(self, event: Event, cost: XlaCost) -> None:
        event.set_xla_cost(cost)
        self.log.updated(event)

    def on_graph(self, trace: Trace, graph: GraphStats) -> None:
        try:
            with self.lock:
                event = trace.event
                if event is None:  # not built yet: with its build
                    if trace.graph is None:
                        trace.graph = graph
                    return
                if event.eqns_total is not None:
                    return
                _set_graph(event, graph)
            self.log.updated(event)
        except Exception as e:
            self.fault("profile", e)

    def on_line_profile(self, trace: Trace, rows: tuple) -> None:
        try:
            with self.lock:
                event = trace.event
                if event is None:  # not built yet: with its build
                    trace.profile = rows
                    return
                if event.line_profile is not None:
                    return
                event.line_profile = profile_text(rows)
            self.log.updated(event)
        except Exception as e:
            self.fault("profile", e)

    def on_cache(self, event: Event, hit: bool) -> None:
        event.cache_hit = bool(hit)
        self.log.updated(event)

    def on_cache_key(self, event: Event | None, record: CacheKeyRecord) -> None:
        try:
            if self.cache_keys is not None:
                self.cache_keys(event, self._with_arguments(event, record))
        except Exception as e:
            self.fault("persistent cache", e)

    def _with_arguments(self, event: Event | None, record: CacheKeyRecord) -> CacheKeyRecord:
        """`record` with its compile's argument types under the user's paths (the function's last
        lowering, this compile's), so that keys of other runs are compared part by part too."""
        state = self.functions.get(event.key) if event is not None else None
        lowering = state.lowerings[-1] if state is not None and state.lowerings else None
        if lowering is None:
            return record
        arguments = [
            [path, leaf.text]
            for path, leaf in itertools.islice(lowering.leaves.items(), MAX_KEY_ARGUMENTS)
        ]
        return record._replace(facts={**record.facts, "arguments": arguments})

    # ---------------------------------------------------------------- helpers
    def _remember_program(self, identity: FunctionIdentity) -> None:
        programs = self._programs
        program = (identity.jax_name, identity.src_info)
        if len(programs) >= MAX_FUNCTIONS and program not in programs:
            programs.pop(next(iter(programs)))
        programs[program] = identity.key

    def _event(
        self,
        identity: FunctionIdentity,
        kind: EventKind,
        d: Diagnosis | None,
        trace_number: int,
        thread: int,
        *,
        nested: bool = False,
        call_site: str | None = None,
        time=None,
        cell=None,
        test=None,
    ) -> Event:
        """An event of `identity`, made at `time` in `cell` and `test` (by default: now, in the
        current cell and test)."""
        if time is None:
            time, cell, test = now(), self._cell(), self._test()
        host, process = self._place()
        event = Event(
            time=time,
            cell=cell,
            function=identity.name,
            location=identity.location,
            kind=kind,
            internal=identity.internal,
            nested=nested,
            trace_number=trace_number,
            call_site=call_site,
            jit=identity.jit_kind,
            thread=thread,
            key=identity.key,
            host=host,
            process=process,
            test=test,
        )
        if d is not None:
            event.set_diagnosis(d, d.hint, d.hint_id)
        return event


def _unknown_identity(jax_name: str, src_info: str) -> FunctionIdentity:
    """A function known only by JAX's name for it (seen only through `jax.monitoring`, or
    compiled from a module lowered before recording started)."""
    return FunctionIdentity(
        name=jax_name,
        filename="?",
        line=0,
        location="?",
        key=f"?::{jax_name}",
        in_cell=False,
        internal=False,
        jit_kind="jit",
        jax_name=jax_name,
        src_info=src_info,
    )
