"""The recording session: turns the probe's plain records into diagnosed log events.

Holds, per function, a few recent signatures (for the diff) and weak references to the
function objects seen (to tell a re-created function from a changed input). Nothing
here holds a user array, tracer or object.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import warnings
from ._graph import unrolled_hint
from ._log import Event, EventLog, events_frame, now, summary_frame
from ._probe import Probe, RetraceError, TraceInfo
from ._signature import Diagnosis, Signature, diagnose

_SIGNATURES_PER_FUNCTION = 8
_LEAF_BUDGET_PER_FUNCTION = 200_000  # leaves kept across a function's stored signatures
_MAX_FUNCTIONS = 20_000


class JaxtraceWarning(UserWarning):
    """A failure inside jaxtrace_nb (never inside the user's program)."""


class _FunctionState:
    __slots__ = ("traces", "compiles", "signatures", "refs", "location", "cell")

    def __init__(self):
        self.traces = 0
        self.compiles = 0
        self.signatures: collections.deque[Signature] = collections.deque(maxlen=_SIGNATURES_PER_FUNCTION)
        self.refs: collections.deque = collections.deque(maxlen=_SIGNATURES_PER_FUNCTION)
        self.location: str | None = None
        self.cell: int | None = None


class Watch:
    """A recording scope; see :func:`jaxtrace_nb.watch`."""

    def __init__(self, session: Session, max_traces: int | None = None):
        if max_traces is not None and max_traces < 1:
            raise ValueError("max_traces must be a positive integer")
        self._session = session
        self.max_traces = max_traces
        self._start: int | None = None
        self._end: int | None = None
        self._counts: collections.Counter = collections.Counter()

    def __enter__(self) -> Watch:
        self._session.acquire()
        self._start = self._session.log.next_seq
        self._session.watches.append(self)
        return self

    def __exit__(self, *exc) -> None:
        self._end = self._session.log.next_seq
        try:
            self._session.watches.remove(self)
        except ValueError:
            pass
        self._session.release()

    @property
    def records(self) -> list[Event]:
        """The events recorded inside this scope (so far, if still open)."""
        if self._start is None:
            return []
        return self._session.log.events(self._start, self._end)

    @property
    def events(self):
        """DataFrame: one row per trace (or compile without a trace) inside this scope."""
        return events_frame(self.records)

    def summary(self):
        """DataFrame: one row per function traced inside this scope."""
        return summary_frame(self.records)

    def count(self, event: Event) -> None:
        __tracebackhide__ = True  # IPython and pytest show the user's frame, not ours
        if self.max_traces is None or event.internal:
            return
        self._counts[event.key] += 1
        if self._counts[event.key] > self.max_traces:
            raise RetraceError(_retrace_message(event, self._counts[event.key], self.max_traces))


def _retrace_message(event: Event, count: int, limit: int) -> str:
    where = f" at `{event.leaf}`" if event.leaf else ""
    change = f": {event.before} → {event.after}" if event.before is not None else ""
    hint = f" Hint: {event.hint}" if event.hint else ""
    return (f"{event.function} ({event.location}) was traced {count} times, more than "
            f"max_traces={limit}. Trace #{event.trace_number} cause: {event.cause}{where}{change}. "
            f"{event.explanation}{hint}")


class Session:
    """Owns the probe, the log and the per-function state."""

    def __init__(self):
        self.log = EventLog()
        self.probe = Probe(self)
        self.functions: dict[str, _FunctionState] = {}
        self.watches: list[Watch] = []
        self.current_cell: int | None = None
        self.notice = ""
        self.fault_counts: collections.Counter = collections.Counter()
        # The last top-level function traced under each JAX name, for compiles without a trace.
        self._by_jax_name: dict[str, tuple] = {}
        self._lock = threading.RLock()
        self._users = 0
        self._started = False  # jt.start() holds one use until jt.stop()
        self._persist: tuple | None = None  # (writer, unsubscribe)
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
    def recording(self) -> bool:
        return self.probe.installed

    def reset(self) -> None:
        with self._lock:
            self.log.reset()
            self.functions.clear()
            self._by_jax_name.clear()

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
    def _state(self, key: str) -> _FunctionState:
        state = self.functions.get(key)
        if state is None:
            if len(self.functions) >= _MAX_FUNCTIONS:
                self.functions.pop(next(iter(self.functions)))
            state = self.functions[key] = _FunctionState()
        return state

    def on_trace(self, info: TraceInfo) -> Event | None:
        try:
            event = self._trace_event(info)
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        if self._append(event) is None:
            return None
        if not info.nested:
            names = self._by_jax_name
            if len(names) >= _MAX_FUNCTIONS and info.jax_name not in names:
                names.pop(next(iter(names)))
            names[info.jax_name] = (info.jax_name, info.function, info.location, info.key, info.internal,
                                    info.jit_kind)
        for watch in list(self.watches):
            watch.count(event)  # raises RetraceError past a watch's max_traces
        return event

    def _trace_event(self, info: TraceInfo) -> Event:
        with self._lock:
            state = self._state(info.key)
            new_object, rerun = False, None
            if state.traces and info.function_ref is not None:
                fn = info.function_ref()
                new_object = all(ref() is not fn for ref in state.refs)
                if new_object and state.location is not None and state.location != info.location:
                    rerun = (f"its cell was run again: defined at {info.location}, was {state.location}"
                             if info.key.startswith("<cell>") else
                             f"re-defined at {info.location}, was {state.location}")
                elif new_object and self.current_cell is not None and state.cell is not None \
                        and state.cell != self.current_cell and info.key.startswith("<cell>"):
                    rerun = f"re-created in cell {self.current_cell}, last traced in cell {state.cell}"
            signature = info.signature
            if signature is None:
                diagnosis = Diagnosis("unknown" if state.traces else "first", None, None, None,
                                      "No signature was recorded for this trace.", "")
            else:
                diagnosis = diagnose(signature, list(state.signatures), new_object=new_object,
                                     rerun_note=rerun)
                self._keep_signature(state, signature)
            if info.function_ref is not None and (new_object or not state.refs):
                state.refs.append(info.function_ref)
            state.traces += 1
            state.location = info.location
            state.cell = self.current_cell
            trace_number = state.traces
        graph = info.graph
        hint = diagnosis.hint
        if graph is not None and graph.unrolled is not None:
            loop = unrolled_hint(graph.unrolled, graph.eqns, graph.loop_where)
            hint = f"{hint} {loop}" if hint else loop
        return Event(
            time=now(), cell=self.current_cell, function=info.function, location=info.location,
            kind="trace", internal=info.internal, nested=info.nested, trace_number=trace_number,
            cause=diagnosis.cause, leaf=diagnosis.leaf, before=diagnosis.before, after=diagnosis.after,
            explanation=diagnosis.explanation, hint=hint, trace_s=info.elapsed_s,
            lower_s=None, compile_s=None, cache_hit=None, cache_saved_s=None, jit=info.jit_kind,
            thread=info.thread, key=info.key,
            eqns=graph.eqns if graph else None, eqns_total=graph.eqns_total if graph else None,
            loop_repeats=graph.unrolled.repeats if graph and graph.unrolled else None,
            loop_line=graph.loop_where if graph else None,
        )

    @staticmethod
    def _keep_signature(state: _FunctionState, signature: Signature) -> None:
        n = max(1, len(signature.leaves))
        keep = max(1, min(_SIGNATURES_PER_FUNCTION, _LEAF_BUDGET_PER_FUNCTION // n))
        if state.signatures.maxlen != keep:
            state.signatures = collections.deque(state.signatures, maxlen=keep)
        state.signatures.append(signature)

    def on_compile_without_trace(self, jax_name: str, identity: tuple | None, thread: int,
                                 full_probe: bool) -> Event | None:
        try:
            if identity is None:
                identity = self._by_jax_name.get(jax_name)
            if identity is not None:
                _, function, location, key, internal, jit_kind = identity
            else:
                function, location, key, internal, jit_kind = jax_name, "?", f"?::{jax_name}", False, "jit"
            with self._lock:
                state = self._state(key)
                seen = state.traces > 0 or state.compiles > 0
                trace_number = state.traces
            if identity is not None and seen:
                cause = "sharding"
                explanation = ("Compiled again without a new trace: the argument types match a cached "
                               "trace, so their placement changed (committed device, sharding or layout).")
                hint = ("An argument became committed to a device (`jax.device_put(x, device)`) or its "
                        "sharding/layout changed: keep arguments' placement consistent across calls.")
            else:
                cause = "unknown" if full_probe else "first"
                explanation = ("Compiled without a trace seen by jaxtrace_nb (traced before recording "
                               "started, or an ahead-of-time compile).") if full_probe else \
                    "Compile recorded through jax.monitoring only (reduced mode)."
                hint = ""
            event = Event(
                time=now(), cell=self.current_cell, function=function, location=location, kind="compile",
                internal=internal, nested=False, trace_number=trace_number, cause=cause, leaf=None,
                before=None, after=None, explanation=explanation, hint=hint, trace_s=None, lower_s=None,
                compile_s=None, cache_hit=None, cache_saved_s=None, jit=jit_kind, thread=thread, key=key,
            )
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        return self._append(event)

    def _append(self, event: Event) -> Event | None:
        """Append to the log; a failure there is counted (stage 'log'), never raised."""
        try:
            return self.log.append(event)
        except Exception as e:
            self.fault("log", e)
            return None

    def on_public_trace(self, jax_name: str, seconds: float, thread: int) -> Event | None:
        """A trace seen only through jax.monitoring (reduced mode: JAX outside the range)."""
        try:
            key = f"?::{jax_name}"
            with self._lock:
                state = self._state(key)
                state.traces += 1
                n = state.traces
            event = Event(
                time=now(), cell=self.current_cell, function=jax_name, location="?", kind="trace",
                internal=False, nested=False, trace_number=n, cause="first" if n == 1 else "unknown",
                leaf=None, before=None, after=None,
                explanation="Reduced mode: the cause of a retrace is not available on this JAX version.",
                hint="", trace_s=seconds, lower_s=None, compile_s=None, cache_hit=None, cache_saved_s=None,
                jit="jit", thread=thread, key=key,
            )
        except Exception as e:
            self.fault("diagnosis", e)
            return None
        return self._append(event)

    def on_timing(self, event: Event, column: str, seconds: float) -> None:
        setattr(event, column, float(seconds))
        if column == "compile_s":
            state = self.functions.get(event.key)
            if state is not None:
                state.compiles += 1
            if event.eqns_total:
                event.compile_s_per_keqn = float(seconds) / (event.eqns_total / 1000.0)
        self.log.updated(event)

    def on_cost(self, event: Event, cost: dict) -> None:
        """FLOPs and bytes of the program compiled for `event`."""
        for column, value in cost.items():
            setattr(event, column, value)
        self.log.updated(event)

    def on_cache(self, event: Event, hit: bool) -> None:
        event.cache_hit = bool(hit)
        self.log.updated(event)


SESSION = Session()


def get_session() -> Session:
    return SESSION


