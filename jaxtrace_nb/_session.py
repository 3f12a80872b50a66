"""The recording session: turns the probe's records into diagnosed log events.

Holds, per function, a few recent trace and compile signatures (for the diff) and weak
references to the function objects seen (to tell a re-created function from a changed
input). Nothing here holds a user array, tracer or object. Implements `_records.Sink`.
"""

from __future__ import annotations

import collections
import itertools
import os
import sys
import threading
import time
import warnings
from typing import NamedTuple

from ._diagnosis import (FIRST, NO_SIGNATURE, NOT_DIAGNOSED, InvariantError, REDUCED, REDUCED_COMPILE, Diagnosis, diagnose, diagnose_compile,
                         first_after_failures, join_hints, join_ids, kept_lowering, unrolled_loop_hint)
from ._log import Event, EventLog, now, when
from ._probe import Probe
from ._processes import signature_column
from ._records import FunctionIdentity, GraphStats, LoweringRecord, Stage, TraceRecord, XlaCost
from ._signature import Signature
from ._watch import RetraceError, Watch

_SIGNATURES_PER_FUNCTION = 8
_LEAF_BUDGET_PER_FUNCTION = 200_000  # leaves kept across a function's stored signatures
_MAX_FUNCTIONS = 20_000


class JaxtraceWarning(UserWarning):
    """A failure inside jaxtrace_nb (never inside the user's program)."""


class _FunctionState:
    __slots__ = ("identity", "traces", "compiles", "signatures", "lowerings", "refs", "location", "cell",
                 "cache_generation", "arg_names", "failed")

    def __init__(self, identity: FunctionIdentity | None):
        self.identity = identity
        self.traces = 0
        self.compiles = 0
        self.signatures: collections.deque[Signature] = collections.deque(maxlen=_SIGNATURES_PER_FUNCTION)
        self.lowerings: collections.deque[Signature] = collections.deque(maxlen=_SIGNATURES_PER_FUNCTION)
        self.refs: collections.deque = collections.deque(maxlen=_SIGNATURES_PER_FUNCTION)
        self.location: str | None = None
        self.cell: int | None = None
        self.cache_generation = 0
        self.arg_names: dict | None = None  # JAX's argument name -> the user's path
        self.failed = 0  # trace attempts that raised (not recorded as traces)


class _TraceDraft:
    """A trace's event before it is built: what the trace's start and end said of it.

    The trace records only this. The function's state (its trace count, its earlier
    signatures, the function objects seen) is read and updated when the draft is built, in
    the log's order: when the log is read (`EventLog.append_draft`), when the trace's compile
    begins, or before any other event of the session reads that state. While someone follows
    the log live (a watch, a subscriber, a persisted log) that happens at the trace itself.
    A trace that raises never ends, and is never built.
    """

    __slots__ = ("session", "record", "new_object", "diagnosis", "deferred", "time", "cell", "trace_number",
                 "seconds", "graph", "event", "seq", "start", "end", "leaves")

    def __init__(self, session: Session, record: TraceRecord):
        self.session, self.record = session, record
        self.time, self.cell = time.time(), session.current_cell  # (a datetime when built)
        # start, end: its ticks (`Session._ticks`); `Session._begin` sets the four fields it reads
        self.seconds = self.graph = self.event = self.seq = self.start = self.end = None
        signature = record.signature
        self.leaves = signature.n_leaves if signature is not None else 1  # what it holds, for the log's bound

    def build(self) -> Event:
        """Its event (made once)."""
        if self.event is None:
            self.event = self.session._trace_event(self)
        return self.event


class _DeferredDiagnosis(NamedTuple):
    """A retrace's diagnosis, run when its event is first read: plain signatures and flags only."""

    signature: Signature  # or a DeferredSignature: leaves read at `get()`
    previous: tuple  # the function's earlier signatures when it was traced, newest last
    new_object: bool
    rerun: str | None
    cache_cleared: bool
    fault: object  # Session.fault

    @property
    def leaves(self) -> int:
        """What it holds, for the log's bound on unsettled events."""
        return self.signature.n_leaves

    def __call__(self) -> Diagnosis:
        try:
            return diagnose(self.signature.get(), [s.get() for s in self.previous], new_object=self.new_object,
                            rerun_note=self.rerun, cache_cleared=self.cache_cleared)
        except InvariantError as e:  # a diagnosis JAX's comparison does not back: said as not diagnosed
            self.fault("invariant", e)
            return NOT_DIAGNOSED
        except Exception as e:
            self.fault("diagnosis", e)
            return NOT_DIAGNOSED


# The fields of an event whose diagnosis is deferred, until the log settles it.
_UNSETTLED = Diagnosis(None, None, None, None, None, None)


def _keep(signatures: collections.deque, signature: Signature) -> collections.deque:
    """`signatures` with `signature` appended, keeping fewer when signatures are large."""
    keep = max(1, min(_SIGNATURES_PER_FUNCTION, _LEAF_BUDGET_PER_FUNCTION // max(1, signature.n_leaves)))
    if signatures.maxlen != keep:
        signatures = collections.deque(signatures, maxlen=keep)
    signatures.append(signature)
    return signatures


class Session:
    """Owns the probe, the log and the per-function state."""

    def __init__(self):
        # One lock for the session's state and its log: building a draft (under the log's lock)
        # reads and updates the functions' state, and the session's own steps append to the log.
        self._lock = threading.RLock()
        self.log = EventLog(lock=self._lock)
        self.probe = Probe(self)
        self._functions: dict[str, _FunctionState] = {}
        self.watches: list[Watch] = []
        self.current_cell: int | None = None
        self.notice = ""
        self.fault_counts: collections.Counter = collections.Counter()
        # The function each traced program belongs to, for compiles without a new trace.
        self._programs: dict[tuple, str] = {}  # (JAX name, JAX source info) -> function key
        # Every trace's start and end take a tick: a trace reads its function's state as the traces
        # that ended before it started left it (`_begin`), whenever its draft is built.
        self._ticks = itertools.count()
        self._unbegun: collections.deque[_TraceDraft] = collections.deque()  # in start order
        self._users = 0
        self._started = False  # jt.start() holds one use until jt.stop()
        self._persist: tuple | None = None  # (writer, unsubscribe)
        self._where: tuple | None = None  # (host, JAX process index), read at the first event
        self._host: str | None = None
        self._jax_state: tuple | None = None  # JAX's modules that know the process index
        self.log.on_fault = lambda exc: self.fault("log", exc)

    # ------------------------------------------------------------ lifecycle
    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                try:
                    self.notice = self.probe.install()
                except Exception as e:
                    self.fault("install", e)
                if self.notice:
                    print(self.notice, file=sys.stderr)
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                try:
                    self.probe.uninstall()
                except Exception as e:
                    self.fault("uninstall", e)

    def start(self, persist: str | None = None) -> None:
        with self._lock:
            if persist is not None:
                self.persist_to(persist)
            if not self._started:
                self._started = True
                self.acquire()

    def stop(self) -> None:
        with self._lock:
            self.persist_to(None)
            if self._started:
                self._started = False
                self.release()

    def persist_to(self, path: str | None) -> None:
        """Append every event to `path` as JSON lines from now on (None: stop persisting)."""
        from ._persist import JsonlWriter

        with self._lock:
            if self._persist is not None:
                writer, unsubscribe = self._persist
                if path is not None and writer.path == os.fspath(path):
                    return
                unsubscribe()
                writer.close()
                self._persist = None
            if path is not None:
                writer = JsonlWriter(path, on_fault=lambda exc: self.fault("persist", exc))
                self._persist = (writer, self.log.subscribe(writer))

    @property
    def functions(self) -> dict[str, _FunctionState]:
        """Per-function state, as of every trace recorded so far (drafts are built first)."""
        self.log.build_drafts()
        return self._functions

    @property
    def recording(self) -> bool:
        return self.probe.installed

    def reset(self) -> None:
        with self._lock:
            self._begin_started()  # a trace under way read what it started with
            self.log.reset()
            self._functions.clear()
            self._programs.clear()

    # -------------------------------------------------------------- faults
    def fault(self, stage: str, exc: BaseException) -> None:
        """Count a failure inside jaxtrace_nb and report it once per stage; never raise."""
        try:
            self.fault_counts[stage] += 1
            if self.fault_counts[stage] == 1:
                message = (f"jaxtrace_nb: internal error in stage '{stage}' "
                           f"({type(exc).__name__}: {str(exc)[:200]}); recording continues, "
                           f"further errors in this stage are counted silently (jt.faults()).")
                try:
                    warnings.warn(message, JaxtraceWarning, stacklevel=2)
                except Exception:
                    print(message, file=sys.stderr)
        except Exception:
            pass

    # ------------------------------------------------------------ from probe
    def _state(self, key: str, identity: FunctionIdentity | None = None) -> _FunctionState:
        state = self._functions.get(key)
        if state is None:
            if len(self._functions) >= _MAX_FUNCTIONS:
                self._functions.pop(next(iter(self._functions)))
            state = self._functions[key] = _FunctionState(identity)
        elif identity is not None:
            state.identity = identity
        return state

    def on_trace(self, record: TraceRecord) -> _TraceDraft | None:
        __tracebackhide__ = True
        watches = self.watches
        try:
            draft = _TraceDraft(self, record)
            with self._lock:
                draft.start = next(self._ticks)
                if not watches and not self.log.followed:  # (a persisted log follows it)
                    self._unbegun.append(draft)  # begun, ended and built when the log is read
                    return draft
                self.log.build_drafts()  # the traces before it: the state they leave is its past
                self._begin(draft, defer=not any(watch.guards for watch in watches))
                draft.build()  # followed live: the event now, not when the log is read
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        try:
            for watch in list(watches):
                watch.check(draft.event)  # raises RetraceError past a watch's limit
        except RetraceError:
            self._append(draft.event)  # the trace it stopped, with its cause, for the views
            raise
        return draft

    def _begin(self, draft: _TraceDraft, defer: bool = True) -> None:
        """What the function's state says of the trace: its number, whether its function object
        is new, and its diagnosis. A retrace's diagnosis is deferred until the event is read
        when `defer` (it is a pure function of the records held here, and most are never read)."""
        record = draft.record
        deferred = None
        with self._lock:
            state = self._functions.get(record.identity.key)
            traces = state.traces if state is not None else 0
            new_object, rerun = self._new_object(state, record, draft.cell) if state is not None else (False, None)
            if record.signature is None:
                diagnosis = Diagnosis(None, None, None, None, NO_SIGNATURE, "") if traces else FIRST
            elif state is None or not state.traces:
                diagnosis = first_after_failures(state.failed if state is not None else 0)
            else:
                deferred = _DeferredDiagnosis(record.signature, tuple(state.signatures), new_object, rerun,
                                              record.cache_generation != state.cache_generation, self.fault)
                if defer:
                    diagnosis = _UNSETTLED
                else:
                    diagnosis, deferred = deferred(), None
        draft.new_object, draft.diagnosis, draft.deferred = new_object, diagnosis, deferred
        draft.trace_number = traces + 1

    def _begin_started(self, before: float = float("inf")) -> None:
        """Every trace that started before tick `before` and has not read its function's state reads
        it now (before a later end, a failure or a reset changes it)."""
        unbegun = self._unbegun
        while unbegun and unbegun[0].start < before:
            self._begin(unbegun.popleft())

    def _end(self, draft: _TraceDraft) -> None:
        """The function's state once the trace has ended (at tick `draft.end`)."""
        record = draft.record
        with self._lock:
            self._begin_started(draft.end)  # the traces that started before it ended read the state before it
            state = self._state(record.identity.key, record.identity)
            if record.signature is not None:
                state.signatures = _keep(state.signatures, record.signature)
            if record.function_ref is not None and (draft.new_object or not state.refs):
                state.refs.append(record.function_ref)
            state.traces += 1
            state.location = record.identity.location
            state.cell = draft.cell
            state.cache_generation = record.cache_generation
            if record.arg_names is not None:
                state.arg_names = record.arg_names
            self._remember_program(record.identity)
            draft.trace_number = state.traces

    def _trace_event(self, draft: _TraceDraft) -> Event:
        """A draft's event: its diagnosis, and what its trace's end reported when it has ended."""
        if draft.end is not None:  # an ended trace nobody followed (one followed is built at its start)
            self._end(draft)  # its state now: it read it before any trace that ended after it started
        record = draft.record
        identity = record.identity
        event = self._event(identity, "trace", draft.diagnosis, draft.trace_number, record.thread,
                            nested=record.nested, call_site=record.call_site, time=when(draft.time), cell=draft.cell)
        event.deferred = draft.deferred
        if self._persist is not None and record.signature is not None and not identity.internal:
            # A persisted log (one per process of a multi-process run) keeps the argument leaves
            # of each trace, bounded, so that processes can be compared (`_processes`).
            event.signature = signature_column({path: leaf.text
                                                for path, leaf in record.signature.get().leaves.items()})
        self._ended(event, draft)
        return event

    def _ended(self, event: Event, draft: _TraceDraft) -> None:
        """What the trace's end reported (nothing before it has ended)."""
        event.trace_number = draft.trace_number
        if draft.seconds is not None:
            event.set_seconds(Stage.TRACE, draft.seconds)
        if draft.graph is not None:
            self._set_graph(event, draft.graph)

    def on_trace_end(self, draft: _TraceDraft, seconds: float | None,
                     graph: GraphStats | None) -> Event | _TraceDraft | None:
        draft.seconds, draft.graph = seconds, graph
        if draft.event is None and not self.log.followed:  # begun, ended and built when the log is read
            try:
                with self._lock:  # its end tick in the order of the log
                    draft.end = next(self._ticks)
                    return self.log.append_draft(draft)
            except Exception as e:
                self.fault("log", e)
                return None
        try:
            with self._lock:
                draft.end = next(self._ticks)
                if draft.event is not None:  # built at its start, followed since
                    self._end(draft)
                    self._ended(draft.event, draft)
                else:  # followed since it began, not before: its event now, in order
                    self.log.build_drafts()
                    draft.build()
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        return self._append(draft)

    def _new_object(self, state: _FunctionState, record: TraceRecord, cell: int | None) -> tuple[bool, str | None]:
        """Whether the traced function object is one not seen before, and why (a re-run cell).

        Function objects are told apart by their weak references (one per live object, kept
        here), so the answer holds after the function itself is gone."""
        if not state.traces or record.function_ref is None:
            return False, None
        ref = record.function_ref
        if any(seen is ref for seen in state.refs):
            return False, None
        identity = record.identity
        if state.location is not None and state.location != identity.location:
            return True, (f"its cell was run again: defined at {identity.location}, was {state.location}"
                          if identity.in_cell else f"re-defined at {identity.location}, was {state.location}")
        if cell is not None and state.cell is not None and state.cell != cell and identity.in_cell:
            return True, f"re-created in cell {cell}, last traced in cell {state.cell}"
        return True, None

    def _remember_program(self, identity: FunctionIdentity) -> None:
        programs = self._programs
        program = (identity.jax_name, identity.src_info)
        if len(programs) >= _MAX_FUNCTIONS and program not in programs:
            programs.pop(next(iter(programs)))
        programs[program] = identity.key

    def _event(self, identity: FunctionIdentity, kind: str, d: Diagnosis, trace_number: int, thread: int, *,
               nested: bool = False, call_site: str | None = None, time=None, cell=None) -> Event:
        """An event of `identity`, made at `time` in `cell` (by default: now, in the current cell)."""
        if time is None:
            time, cell = now(), self.current_cell
        host, process = self._place()
        return Event(time=time, cell=cell, function=identity.name, location=identity.location,
                     kind=kind, internal=identity.internal, nested=nested, trace_number=trace_number,
                     cause=d.cause, leaf=d.leaf, before=d.before, after=d.after, explanation=d.explanation,
                     hint=d.hint, hint_ids=d.hint_id, call_site=call_site, jit=identity.jit_kind, thread=thread, key=identity.key,
                     host=host, process=process)

    def _place(self) -> tuple[str, int | None]:
        """This machine's name and JAX's process index, read without initializing JAX's backends.

        Asking ``jax.process_index()`` before the program has run any computation would start
        the backends, after which the program's own ``jax.distributed.initialize()`` fails. So:
        the index ``jax.distributed.initialize`` set, else ``jax.process_index()`` once the
        backends are up; until then the process is None and asked again at the next event.
        """
        if self._where is not None:
            return self._where
        if self._host is None:
            import socket

            self._host = socket.gethostname()
        process = None
        try:
            if self._jax_state is None:
                from jax._src import distributed, xla_bridge

                self._jax_state = (distributed, xla_bridge)
            distributed, xla_bridge = self._jax_state
            if distributed.global_state.client is not None:
                process = int(distributed.global_state.process_id)
            elif xla_bridge.backends_are_initialized():
                import jax

                process = int(jax.process_index())
        except Exception:
            pass
        where = (self._host, process)
        if process is not None:
            self._where = where
            self.log.fill_process(process)  # events recorded before JAX knew it: the same process
        return where

    def on_trace_failed(self, draft: _TraceDraft) -> None:
        try:
            with self._lock:
                self.log.build_drafts()  # the traces before it first: it failed after them
                self._begin_started(next(self._ticks))  # the traces under way do not see it
                self._state(draft.record.identity.key, draft.record.identity).failed += 1
        except Exception as e:
            self.fault("diagnosis", e)

    @staticmethod
    def _set_graph(event: Event, graph: GraphStats) -> None:
        event.eqns, event.eqns_total, event.loop_line = graph.eqns, graph.eqns_total, graph.loop_where
        if graph.unrolled is not None:
            event.loop_repeats = graph.unrolled.repeats
            event.hint = join_hints(event.hint, unrolled_loop_hint(graph.unrolled, graph.eqns, graph.loop_where))
            event.hint_ids = join_ids(event.hint_ids, "unrolled_loop")

    def on_lowering(self, event: Event | _TraceDraft | None, record: LoweringRecord) -> Event | None:
        try:
            if type(event) is _TraceDraft:
                event = self.log.built(event)
            else:
                self.log.build_drafts()  # a compile without a new trace: the functions' state as of now
            with self._lock:
                if event is not None:  # the compile of a trace just recorded
                    state = self._functions.get(event.key)
                    if state is not None and record.signature is not None:
                        state.lowerings = _keep(state.lowerings, self._user_names(state, record.signature))
                    return event
                return self._compile_event(record)
        except Exception as e:
            self.fault("diagnosis", e)
            return None

    def _compile_event(self, record: LoweringRecord) -> Event | None:
        key = self._programs.get((record.jax_name, record.src_info))
        if key is None and record.signature is not None:  # traced before recording started
            key = next((k for (name, _), k in reversed(self._programs.items()) if name == record.jax_name), None)
        state = self._functions.get(key) if key is not None else None
        if state is None or state.identity is None:
            identity = record.identity or FunctionIdentity(record.jax_name, "?", 0, "?", f"?::{record.jax_name}",
                                                           False, False, "jit", record.jax_name, record.src_info)
            state = self._state(identity.key, identity)
        identity = state.identity
        if record.signature is None:
            diagnosis = Diagnosis("first" if not state.compiles else None, None, None, None, REDUCED_COMPILE, "")
        else:
            signature = self._user_names(state, record.signature)
            previous = list(state.lowerings)
            diagnosis = diagnose_compile(signature, previous, traced=state.traces > 0)
            state.lowerings = _keep(state.lowerings, kept_lowering(signature, previous))
        event = self._event(identity, "compile", diagnosis, state.traces, record.thread)
        return self._append(event)

    @staticmethod
    def _user_names(state: _FunctionState, signature: Signature) -> Signature:
        """A lowering signature under the user's argument paths instead of JAX's names."""
        names = state.arg_names
        if not names:
            return signature
        return signature._replace(leaves={names.get(path, path): leaf for path, leaf in signature.leaves.items()})

    def _append(self, event: Event | _TraceDraft) -> Event | _TraceDraft | None:
        """Append to the log (a draft not built yet: to be built when the log is read); a failure
        there is counted (stage 'log'), never raised."""
        try:
            if type(event) is _TraceDraft:
                if event.event is None:
                    return self.log.append_draft(event)
                event = event.event
            return self.log.append(event)
        except Exception as e:
            self.fault("log", e)
            return None

    def on_public_trace(self, jax_name: str, seconds: float, thread: int) -> Event | None:
        """A trace seen only through jax.monitoring (reduced mode: JAX outside the range)."""
        try:
            identity = FunctionIdentity(jax_name, "?", 0, "?", f"?::{jax_name}", False, False, "jit", jax_name, "")
            with self._lock:
                state = self._state(identity.key, identity)
                state.traces += 1
                n = state.traces
            event = self._event(identity, "trace", FIRST if n == 1 else REDUCED, n, thread)
            event.set_seconds(Stage.TRACE, seconds)
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        return self._append(event)

    def on_timing(self, event: Event, stage: Stage, seconds: float) -> None:
        event.set_seconds(stage, seconds)
        if stage is Stage.COMPILE:
            state = self._functions.get(event.key)
            if state is not None:
                state.compiles += 1
            if event.eqns_total:
                event.compile_s_per_keqn = float(seconds) / (event.eqns_total / 1000.0)
        self.log.updated(event)

    def on_xla_cost(self, event: Event, cost: XlaCost) -> None:
        event.set_xla_cost(cost)
        self.log.updated(event)

    def on_cache(self, event: Event, hit: bool) -> None:
        event.cache_hit = bool(hit)
        self.log.updated(event)


SESSION = Session()


def get_session() -> Session:
    return SESSION
