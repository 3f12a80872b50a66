"""The probe's `jax.monitoring` listeners: JAX's trace, lower and XLA compile seconds, read with
the program that was traced, lowered or compiled; its line profile; the persistent compilation
cache's events and keys.

`Listeners` is the half of `_probe.Probe` that runs after JAX has done the work it reports (the
other half is the trace-start hook); it shares the probe's per-thread state (``self._tls``: the
pending traces, the lowering and the compile in progress) and its sink. Public listeners only
(`jax.monitoring`); where they read a frame, `_jax_internals` says how.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import _jax_internals as jaxi
from ._cost import graph_stats
from ._jax_cache_key import REQUEST_EVENT
from ._records import Stage

# The share of a compile's seconds reading XLA's figures may take: recording's whole cost at a
# compile is to stay within 2 % of it (issue 29; `docs/performance.md`, "Persistent cache").
XLA_COST_SHARE = 0.005
# A lowered program's size and profile are made in our thread from this long after its lowering on:
# past JAX's key hashing and cache read, inside the XLA compile that follows (`_background`).
PROFILE_DELAY_S = 0.005
# A program handed to our thread at its compile's end (served by the persistent cache, or compiled
# without a lookup) is walked once no such compile has ended for this long, past the Python JAX runs
# right after a compile (the executable's shardings and layouts, the first call's dispatch) and the
# next programs the cache serves back to back (a warm start: all Python, which would wait for the
# GIL the walk holds); at once where JAX looks up a key it will compile (XLA then frees the GIL for
# long); and at the latest `MAX_AFTER_COMPILE_WAIT_S` after the first one waiting
# (`docs/performance.md`, "Persistent cache").
AFTER_COMPILE_DELAY_S = 0.25  # (a 16-layer MLP step's load: 0.09 s on a 2-core CPU machine)
MAX_AFTER_COMPILE_WAIT_S = 1.0
_LOCK_TIMEOUT_S = 5.0  # our thread's wait for the hand-off's lock (the user's thread holds it microseconds)
_MAX_AWAITING = 16  # ended traces awaiting their lowerings around a later trace's, on one thread
# JAX's lowering functions (JAX 0.8–0.10, pxla.py and mlir.py): a trace that ends while one of them
# runs was made inside a lowering, and the trace whose lowering it is still awaits it.
_LOWERING_FRAMES = frozenset({"lower_sharding_computation", "_cached_lowering_to_hlo", "lower_jaxpr_to_module"})
_MAX_LOWERING_DEPTH = 200
_MAX_UNPROFILED = 256  # traces whose size and line profile wait (made while they compile, or at a read)
_TRACE_EVENT = jaxi.TRACE_EVENT
_CACHE_EVENTS = (jaxi.CACHE_HIT_EVENT, jaxi.CACHE_MISS_EVENT)  # listened to always
_KEY_EVENTS = frozenset((*_CACHE_EVENTS, REQUEST_EVENT))  # while the persistent cache is on (keys read)


class Listeners:
    """The listeners of `_probe.Probe` (a base class of it: they share its state)."""

    def _on_duration(self, *args, **kwargs) -> None:
        try:
            event, duration = args[0], args[1]
            if event == _TRACE_EVENT and self._full:  # the trace's own listener: the common case
                self._trace_end(float(duration))
            elif type(event) is str and event.startswith("/jax/co"):
                self._duration(event, float(duration), str(kwargs.get("fun_name")))
        except Exception as e:
            self._sink.fault("timing", e)

    def _duration(self, event: str, duration: float, fun_name: str) -> None:
        tls = self._tls
        if event == jaxi.TRACE_EVENT:
            if self.full:
                self._trace_end(duration)
            else:
                handle = self._sink.on_public_trace(fun_name, duration, threading.get_ident())
                tls.lowering = None if handle is None else (fun_name, handle, None, None)
        elif event == jaxi.LOWER_EVENT:
            name = _jit_inner_name(fun_name)
            if name is None:
                return
            pending = self._awaited(name)
            handle = pending[1] if pending is not None else None
            unmade, equations = (pending[2], pending[3]) if handle is not None else (None, None)
            if unmade is not None and self._cache_events is not _KEY_EVENTS:
                self._make_in_thread(unmade)  # measured and profiled in our thread while XLA compiles it
            stage = jaxi.stage_frame(event) if self.full else None
            if stage is not None and stage.raised:
                return  # the lowering failed: nothing is compiled
            record = self.decoder.lowering_record(stage and stage.locals, name, threading.get_ident()) \
                if self.full else _public_lowering(name)
            handle = self._sink.on_lowering(handle, record)
            tls.compiling = handle
            tls.unmade = unmade
            tls.equations = equations
            if handle is not None:
                self._sink.on_timing(handle, Stage.LOWER, duration)
        elif event == jaxi.COMPILE_EVENT:
            handle = tls.__dict__.get("compiling")
            tls.compiling = None
            unmade = tls.__dict__.get("unmade")
            tls.unmade = None
            try:
                if handle is not None:
                    equations = tls.__dict__.get("equations")
                    if unmade is not None and self._reads_may_fit(unmade, duration):  # XLA's reads need its size
                        equations = self._measure(unmade)
                    self._sink.on_timing(handle, Stage.COMPILE, duration)
                    if self.capture_cost and self.full:
                        self._xla_cost(handle, duration, equations)
            finally:
                if unmade is not None and not unmade.queued:  # loaded from the persistent cache, or compiled
                    self._after_compile(unmade)  # without a lookup or despite its entry
        elif event == jaxi.CACHE_SAVED_EVENT:
            handle = tls.__dict__.get("compiling")
            if handle is not None:
                self._sink.on_timing(handle, Stage.CACHE_SAVED, duration)

    def _reads_may_fit(self, unmade: _Unmade, compile_s: float) -> bool:
        """Whether a compiled program's size is needed now, on the user's thread, for `_xla_cost`:
        not where our thread has not measured it yet and XLA's reads cannot fit this compile's
        budget whatever its size beyond its top level's equations (a persistent cache hit's
        "compile" is too short for any); our thread measures it then (its seconds per equation
        follow)."""
        if unmade.graph is not _NOT_MADE:
            return True
        if not (self.capture_cost and self.full):
            return False
        jaxpr = unmade.program()
        top = getattr(jaxpr, "eqns", None)
        if top is None:
            return jaxpr is not None
        return self._xla_reads.may_read(len(top), self._xla_budget(compile_s))

    def _xla_budget(self, compile_s: float) -> float:
        share = self.xla_cost_share
        return share * compile_s if share != float("inf") else share

    def _xla_cost(self, handle, compile_s: float, equations: int | None) -> None:
        """XLA's FLOPs and bytes of the program just compiled, those whose reading is cheap.

        Reading them is XLA work that grows with the program faster than its compile does (both
        figures: 0.24 % of a 27-equation MLP step's compile and 3.31 % of a 2,694-equation one's on
        a 2-core CPU; benchmarks/results/cpu-2026-11-27-cache-d0f6c59-2.txt), so each is read only
        where its cost, predicted by `_cost.XlaReads`, fits `xla_cost_share` of this compile's
        seconds. A compile without a recorded trace (its size unknown) is read only when that share
        has no bound.
        """
        plan = self._xla_reads.plan(equations, self._xla_budget(compile_s))
        if not any(plan):
            return
        stage = jaxi.stage_frame(jaxi.COMPILE_EVENT)
        executable = stage.locals.get("xla_executable") if stage is not None and not stage.raised else None
        if executable is not None:
            self._sink.on_xla_cost(handle, self._xla_reads.read(executable, plan, equations))

    def _trace_end(self, duration: float) -> None:
        """A top-level trace finished: complete the pending trace if this event is its own.

        JAX reports the duration of the call of its cached tracing function, so the event
        also comes when nothing was traced; it belongs to a pending trace only if it carries
        the same debug info object (the innermost pending one, unless those inside it raised).
        """
        tls = self._tls
        stack = tls.__dict__.get("pending")
        if not stack:
            return
        layout = self.internals.layout
        for walk in (False, True):  # where it was last time; if that is not its trace, frame by frame
            local = jaxi.trace_end_locals(layout, walk)
            if local is None:
                return
            token = id(local.get(layout.end_token))
            if token == stack[-1][0]:
                break
        else:  # the reporting frame's trace is not the innermost one pending
            for i in range(len(stack) - 2, -1, -1):
                if stack[i][0] == token:
                    break
            else:
                return  # a trace not recorded, or a hit of JAX's tracing cache
            while len(stack) > i + 1:  # started inside it and never ended: they raised
                self._sink.on_trace_failed(stack.pop()[2])
        pending = stack.pop()
        jaxpr = local.get("jaxpr")
        if jaxpr is None:  # it raised: JAX cached nothing, and no trace is recorded
            self._sink.on_trace_failed(pending[2])
            return
        if not self.capture_cost:
            jaxpr = None
        program = None
        if jaxpr is not None:
            try:
                program = weakref.ref(jaxpr)
            except TypeError:
                pass
        # Its size, unrolled loop and line profile are made off the trace path (`_Unmade`); a
        # program that cannot be referred to weakly is measured now.
        graph = graph_stats(jaxpr, self.decoder.location) if program is None and jaxpr is not None else None
        handle = self._sink.on_trace_end(pending[2], duration, graph)
        if handle is not None:
            unmade = None
            if program is not None:
                unmade = _Unmade(handle, program, self.decoder.location)
                unprofiled = self._unprofiled
                unprofiled[id(handle)] = unmade
                if len(unprofiled) > _MAX_UNPROFILED:  # waited too long for a compile or a read:
                    # its size now, as at every trace's end before; its profile is given up (a walk
                    # here cost the 300-trace `.trace` workload, docs/performance.md, "Trace path")
                    self._measure(unprofiled.popitem(last=False)[1])
            earlier = tls.__dict__.get("lowering")
            if earlier is not None and _inside_lowering():
                self._await_around(earlier)
            tls.lowering = (pending[1], handle, unmade, graph.eqns_total if graph is not None else None)

    def _await_around(self, earlier: tuple) -> None:  # (only inside a lowering: `_inside_lowering`)
        """A trace ended while an earlier one still awaits its lowering: kept, by name, should the
        new one's lowering come inside the earlier one's (a lowering rule that computes eagerly,
        as Equinox's ``unvmap_any`` in an Optimistix solve: a whole trace, lowering and compile
        of its own while the solve is lowered)."""
        awaiting = self._tls.__dict__.get("awaiting")
        if awaiting is None:
            awaiting = self._tls.awaiting = []
        awaiting.append(earlier)
        if len(awaiting) > _MAX_AWAITING:  # never lowered (``jit(f).trace(x)``, ``jax.eval_shape``)
            del awaiting[0]

    def _awaited(self, name: str) -> tuple | None:
        """The ended trace a lowering of `name` is of: the last to end, else the latest of that
        name kept by `_await_around` (those kept after it were never lowered: dropped)."""
        tls = self._tls
        last = tls.__dict__.get("lowering")
        tls.lowering = None
        if last is not None and last[0] == name:
            return last
        awaiting = tls.__dict__.get("awaiting")
        for i in range(len(awaiting) - 1, -1, -1) if awaiting else ():
            if awaiting[i][0] == name:
                found = awaiting[i]
                del awaiting[i:]
                return found
        return None

    # ------------------------------------------------------- line profiles
    def _profile(self, handle, jaxpr) -> int | None:
        """Equations per user line of a traced program (`_lineprof`), to the sink; its equations in
        all (the rows' self counts sum to them), or None; never raises."""
        if jaxpr is None or (self._profiler is None and self.decoder is None):
            return None
        try:
            if self._profiler is None:
                from ._lineprof import LineProfiler

                self._profiler = LineProfiler(self.decoder.is_library, self.decoder.location)
            rows = self._profiler.profile(jaxpr)
            self._sink.on_line_profile(handle, rows)
        except Exception as e:
            self._sink.fault("profile", e)
            return None
        return sum(row[1] for row in rows)

    def _make_in_thread(self, unmade: _Unmade, delay: float | None = None) -> None:
        """Have our thread measure and profile `unmade` (`PROFILE_DELAY_S` from now, or `delay`).

        As XLA starts compiling it (its compile releases the GIL for long; measured:
        `benchmarks/gil_during_compile.py`): at the lowering, or, with JAX's persistent cache on, at
        JAX's lookup if the cache has no entry of the key. A program the cache serves is handed over
        at its compile's end instead (`_after_compile`): the thread's walk would otherwise hold the
        GIL while JAX reads and deserializes its executable, a few milliseconds, and JAX would wait
        for it (`docs/performance.md`, "Persistent cache"). Jobs run in order."""
        unmade.queued = True
        self._profiling.submit(self._make_later, unmade, delay)

    def _after_compile(self, unmade: _Unmade) -> None:
        """Have our thread measure and profile `unmade`, handed over at its compile's end, once such
        hand-offs have stopped for `AFTER_COMPILE_DELAY_S` (`_walk_compiled`). Its program, traced
        before the load, is held until then: a function gone meanwhile (jitted inside `main()`, which
        returned) keeps its equations."""
        unmade.queued = True
        unmade.held = unmade.program()
        now = time.monotonic()
        lock = self._compiled_lock
        if not lock.acquire(blocking=False):  # our thread holds it a moment (or a fork copied it held):
            self._profiling.submit(self._make_later, unmade, AFTER_COMPILE_DELAY_S)  # never wait for it
            return
        try:
            self._compiled.append(unmade)
            self._last_compiled = now
            pid = os.getpid()
            if self._compiled_first is not None and self._compiled_pid == pid:
                return  # a job waits for them already (in this process: a forked child has no jobs)
            self._compiled_first, self._compiled_pid = now, pid
        finally:
            lock.release()
        self._profiling.submit(self._walk_compiled, None, min(AFTER_COMPILE_DELAY_S, MAX_AFTER_COMPILE_WAIT_S))

    def _walk_compiled(self, _) -> None:
        """(In `_profiling`'s thread.) The programs handed over at their compiles' ends, once none has
        come for `AFTER_COMPILE_DELAY_S`, a lookup XLA compiles has hurried them, or the first has
        waited `MAX_AFTER_COMPILE_WAIT_S`; the jobs after this one wait for it."""
        lock = self._compiled_lock
        while True:
            if not lock.acquire(timeout=_LOCK_TIMEOUT_S):  # (held since a fork copied it: left to a read)
                return
            try:
                first = self._compiled_first
                if first is None:  # (a reset took them)
                    return
                wait = min(self._last_compiled + AFTER_COMPILE_DELAY_S, first + MAX_AFTER_COMPILE_WAIT_S) \
                    - time.monotonic()
                if wait <= 0 or self._compiled_hurried:
                    batch = list(self._compiled)
                    self._compiled.clear()
                    self._compiled_first = None
                    self._compiled_hurried = False
                    break
            finally:
                lock.release()
            self._profiling.pause(wait)
        for unmade in batch:
            self._make_later(unmade)

    def _hurry_compiled(self) -> None:
        """XLA will compile: the programs handed over at earlier compiles' ends are walked now."""
        if self._compiled_first is not None:
            self._compiled_hurried = True
            self._profiling.hurry()

    def _make_later(self, unmade: _Unmade) -> None:
        """(In `_profiling`'s thread.) The size and profile of a trace that is being compiled, unless
        a read (or a reset) has taken it meanwhile; taken from `_unprofiled` only once made, so that a
        read that comes first makes them itself (twice at worst, the second result ignored) and never
        waits."""
        key = id(unmade.handle)
        if self._unprofiled.get(key) is not unmade:  # (not another trace's, whose handle took the id)
            unmade.held = None
            return
        self._make(unmade)
        if self._unprofiled.get(key) is unmade:
            self._unprofiled.pop(key, None)

    def _make(self, unmade: _Unmade) -> None:
        jaxpr = unmade.program()
        unmade.held = None
        # one walk counts the equations in all for both (the profile's, the longer one, first)
        self._measure(unmade, jaxpr, self._profile(unmade.handle, jaxpr))

    def _measure(self, unmade: _Unmade, jaxpr=None, total: int | None = None) -> int | None:
        """A trace's `graph_stats` (once), to the sink; its equations in all, or None; never raises.
        `total`: its equations in all where a profile's walk counted them."""
        graph = unmade.graph
        if graph is _NOT_MADE:
            graph = None
            try:
                jaxpr = unmade.program() if jaxpr is None else jaxpr
                if jaxpr is not None:
                    graph = graph_stats(jaxpr, unmade.location, total)
            except Exception as e:
                self._sink.fault("profile", e)
            unmade.graph = graph
            if graph is not None:
                self._sink.on_graph(unmade.handle, graph)
        return graph.eqns_total if graph is not None else None

    def forget_unprofiled(self) -> None:
        self._unprofiled.clear()
        self._compiled.clear()  # (a job waiting for them finds none)

    def make_pending(self) -> None:
        """Measure and profile the traces recorded but not compiled (yet) whose program JAX still holds."""
        unprofiled = self._unprofiled
        while unprofiled:
            try:
                _, unmade = unprofiled.popitem(last=False)
            except KeyError:  # emptied by another thread
                return
            self._make(unmade)

    def _on_event(self, *args, **kwargs) -> None:
        try:
            event = args[0] if args else None
            if event not in self._cache_events:
                return
            tls = self._tls.__dict__
            if self._cache_events is _KEY_EVENTS:
                if event == REQUEST_EVENT:  # the key is computed, the cache not read yet
                    pending = tls["cache_key"] = self.keys.begin(_caller(sys._getframe(1), "compile_or_get_cached"))
                    unmade = tls.get("unmade")
                    if not (pending is not None and self.keys.stored(pending.key)):  # XLA will compile it
                        self._hurry_compiled()
                        if unmade is not None and not unmade.queued:
                            self._make_in_thread(unmade)  # meanwhile
                    return
                pending = tls.get("cache_key")
                if pending is not None:
                    pending.outcome = "hit" if event == jaxi.CACHE_HIT_EVENT else "written"
            elif self._key_notice:  # the cache is used, and its keys cannot be read on this JAX
                print(self._key_notice, file=sys.stderr)
                self._key_notice = ""
            handle = tls.get("compiling")
            if handle is not None:
                self._sink.on_cache(handle, event == jaxi.CACHE_HIT_EVENT)
        except Exception as e:
            self._sink.fault("timing", e)

    # ------------------------------------------------------ persistent cache keys
    def _keys_switched(self, on: bool) -> None:
        """JAX's persistent cache went on or off: listen to its lookups and compiles' ends, or not.
        Off, the listeners run exactly the code they ran before keys were read."""
        if on:
            self._cache_events = _KEY_EVENTS
            self._duration = self._duration_with_key
        else:
            self._cache_events = _CACHE_EVENTS
            self.__dict__.pop("_duration", None)
            self._tls.__dict__.pop("cache_key", None)

    def _duration_with_key(self, event: str, duration: float, fun_name: str) -> None:
        """`_duration`, and at a compile's end its key's record, with the lookup's outcome."""
        if event != jaxi.COMPILE_EVENT:
            Listeners._duration(self, event, duration, fun_name)
            return
        tls = self._tls.__dict__
        handle = tls.get("compiling")
        Listeners._duration(self, event, duration, fun_name)
        pending = tls.pop("cache_key", None)
        if pending is not None:
            stage = jaxi.stage_frame(event)
            if stage is not None and stage.raised:  # JAX reports the seconds of a compile that raised
                return  # (0.8.0 to 0.11.0: `log_elapsed_time.__exit__`): it cached nothing, no verdict
            try:
                record = self.keys.finish(pending, duration)
            except Exception as e:
                self._sink.fault("persistent cache", e)
                return
            self._sink.on_cache_key(handle, record)


def _caller(frame, name: str, depth: int = 4):
    """The frame of function `name` within `depth` frames up from `frame` (None if not there)."""
    for _ in range(depth):
        if frame is None or frame.f_code.co_name == name:
            return frame
        frame = frame.f_back
    return None


def _public_lowering(jax_name: str):
    from ._records import LoweringRecord

    return LoweringRecord(jax_name, "", None, threading.get_ident(), None)


def _jit_inner_name(fun_name: str) -> str | None:
    if fun_name.startswith("jit(") and fun_name.endswith(")"):
        return fun_name[4:-1]
    return None


_NOT_MADE = object()


class _Unmade:
    """A recorded trace whose program's size (`graph_stats`: equations, an unrolled loop) and line
    profile are not made yet. They are made in the probe's thread (`_background`) from the trace's
    lowering on (with JAX's persistent cache on, from its lookup, where the cache has no entry;
    from the compile's end, where it served the program), while XLA compiles the program (its
    compile releases the GIL); by the compile's end on the user's thread if that thread is late and
    XLA's reads may fit the compile's budget (they need the size); at a read for a trace not
    compiled. Holds a weak reference to the program, and a strong one (`held`) only from the load of
    a program the persistent cache served to its walk."""

    __slots__ = ("handle", "program", "location", "graph", "queued", "held")

    def __init__(self, handle, program: Callable[[], Any], location: Callable[[str, int], str]):
        self.handle, self.program, self.location = handle, program, location
        self.held: Any = None  # the program, from its compile's end to its walk (`_after_compile`)
        self.graph: Any = _NOT_MADE  # then a GraphStats, or None where it cannot be made
        self.queued = False  # handed to our thread


def _inside_lowering() -> bool:
    """Whether one of JAX's lowering functions is running on this thread (a trace ending now was made
    inside a lowering; an earlier trace that was never lowered, `jit(f).trace(x)`, is not awaited)."""
    f, depth = sys._getframe(1), 0
    while f is not None and depth < _MAX_LOWERING_DEPTH:
        if f.f_code.co_name in _LOWERING_FRAMES:
            return True
        f, depth = f.f_back, depth + 1
    return False
