"""The probe's measurer of traced programs (`Measurer`): each recorded trace's size and loop
(`_cost.graph_stats`) and line profile (`_lineprof`), made in a thread of our own while XLA
compiles the program, and XLA's figures of its compile (`_cost.XlaReads`), read where cheap.

Jaxprs and executables are read by duck typing, never kept: a trace's program is referred to
weakly (on its `Trace`), and held only from a persistent cache's load to its walk.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .._core._background import Background
from .._keys._records import GraphStats, XlaCost
from ._cost import XlaReads, graph_stats

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
_LOCK_TIMEOUT_S = 5.0  # our thread's wait for the hand-off's lock (the user's holds it for µs)
_MAX_UNPROFILED = 256  # traces whose size and profile wait (made while they compile, or at a read)


class Measurer:
    """Measures the traced programs: a trace's size (`graph_stats`: equations, an unrolled loop)
    and line profile (`_lineprof`), and XLA's figures of its compile (`XlaReads`); to `sink`
    (`on_graph`, `on_line_profile`, `fault`). The probe's collaborator: its listeners say when a
    trace ends, is lowered, is compiled, and when a compile is looked up.

    A trace's size and profile are made off the trace path, in our own thread (`_background`),
    while XLA compiles the program (its compile releases the GIL): from its lowering on (with JAX's
    persistent cache on, from its lookup, where the cache has no entry of its key; from the
    compile's end, where it served the program); by the compile's end on the user's thread if that
    thread is late and XLA's reads may fit the compile's budget (they need the size); at a read for
    a trace not compiled. What it keeps of a trace is on the `Trace` (`program`, a weak reference;
    `size`, `sized`, `queued`, `held`)."""

    def __init__(self, sink):
        self._sink = sink
        self.capture_cost = True  # equation counts, unrolled loops, FLOPs and bytes of each compile
        self.xla_cost_share = XLA_COST_SHARE  # XLA's figures: read where they cost at most this
        self._xla_reads = XlaReads()
        self.decoder = None  # the probe's `Decoder` while installed: libraries, lines' locations
        self.location: Callable[[str, int], str] | None = None  # its `location` (kept after)
        self._profiler = None  # a `_lineprof.LineProfiler`, made at the first profile
        # id(trace) -> trace: top-level traces whose size and profile are not made yet; made while
        # XLA compiles them (`_make_later`), or when the log is read (`make_pending`).
        self._unprofiled: collections.OrderedDict = collections.OrderedDict()
        # where a compiled trace's size and profile are made, from 5 ms after its lowering on
        self._profiling = Background("jaxtrace_nb-profile", delay=PROFILE_DELAY_S)
        # traces handed over at their compiles' ends (`after_compile`), the monotonic seconds of
        # the first and the last, and whether a lookup XLA compiles hurried them
        self._compiled: collections.deque = collections.deque()
        self._compiled_lock = threading.Lock()
        self._compiled_first: float | None = None
        self._compiled_pid: int | None = None
        self._last_compiled = 0.0
        self._compiled_hurried = False

    def attach(self, decoder) -> None:
        """The probe's decoder, at its install (None at its uninstall)."""
        self.decoder = decoder
        if decoder is not None:
            self.location = decoder.location

    # ------------------------------------------------------------ a trace's life
    def at_end(self, trace, jaxpr) -> GraphStats | None:
        """`trace` ended with program `jaxpr`: its size is made off the trace path (a weak reference
        kept); a program that cannot be referred to weakly is measured now (its size returned)."""
        if not self.capture_cost:
            trace.sized = True
            return None
        try:
            trace.program = weakref.ref(jaxpr)
            return None
        except TypeError:
            graph = graph_stats(jaxpr, self.location)
            trace.size, trace.sized = graph, True
            return graph

    def wait(self, trace) -> None:
        """`trace` is recorded: its size and profile wait for its compile, or for a read."""
        if trace.program is None:
            return
        unprofiled = self._unprofiled
        unprofiled[id(trace)] = trace
        if len(unprofiled) > _MAX_UNPROFILED:  # waited too long for a compile or a read:
            # its size now, as at every trace's end before; its profile is given up (a walk
            # here cost the 300-trace `.trace` workload, docs/performance.md, "Trace path")
            self.measure(unprofiled.popitem(last=False)[1])

    def beside_compile(self, trace) -> None:
        """XLA is about to compile `trace`'s program: our thread measures and profiles it
        meanwhile."""
        if trace.program is not None and not trace.queued:
            self._make_in_thread(trace)

    def equations(self, trace, compile_s: float) -> int | None:
        """At its compile's end: `trace`'s equations in all, where they are known or XLA's reads
        may need them (then measured now, on the user's thread, if our thread has not yet)."""
        if trace is None:
            return None
        if not trace.sized and (trace.program is None or not self._reads_may_fit(trace, compile_s)):
            return None
        return self.measure(trace)

    def compiled(self, trace) -> None:
        """`trace`'s compile ended: a program not handed to our thread yet (loaded from the
        persistent cache, compiled without a lookup or despite its entry) is handed over now."""
        if trace.program is not None and not trace.queued:
            self._after_compile(trace)

    def _reads_may_fit(self, trace, compile_s: float) -> bool:
        """Whether a compiled program's size is needed now, on the user's thread, for XLA's reads:
        not where our thread has not measured it yet and XLA's reads cannot fit this compile's
        budget whatever its size beyond its top level's equations (a persistent cache hit's
        "compile" is too short for any); our thread measures it then (its seconds per equation
        follow)."""
        if not self.capture_cost:
            return False
        jaxpr = trace.program()
        top = getattr(jaxpr, "eqns", None)
        if top is None:
            return jaxpr is not None
        return self._xla_reads.may_read(len(top), self._xla_budget(compile_s))

    # ------------------------------------------------------------ XLA's figures
    def xla_plan(self, equations: int | None, compile_s: float) -> tuple[bool, bool]:
        """Which of XLA's figures to read of a program just compiled: those whose cost,
        predicted by `XlaReads`, fits `xla_cost_share` of the compile's seconds.

        Reading them is XLA work that grows with the program faster than its compile does (both
        figures: 0.24 % of a 27-equation MLP step's compile and 3.31 % of a 2,694-equation one's on
        a 2-core CPU; benchmarks/results/cpu-2026-11-27-cache-d0f6c59-2.txt). A compile without a
        recorded trace (its size unknown) is read only when that share has no bound."""
        return self._xla_reads.plan(equations, self._xla_budget(compile_s))

    def read_xla(self, executable: Any, plan: tuple[bool, bool], equations: int | None) -> XlaCost:
        return self._xla_reads.read(executable, plan, equations)

    def _xla_budget(self, compile_s: float) -> float:
        share = self.xla_cost_share
        return share * compile_s if share != float("inf") else share

    # ------------------------------------------------------------ our thread
    def _make_in_thread(self, trace, delay: float | None = None) -> None:
        """Have our thread measure and profile `trace` (`PROFILE_DELAY_S` from now, or `delay`).

        As XLA starts compiling it (its compile releases the GIL for long; measured:
        `benchmarks/gil_during_compile.py`): at the lowering, or, with JAX's persistent cache on, at
        JAX's lookup if the cache has no entry of the key. A program the cache serves is handed over
        at its compile's end instead (`_after_compile`): the thread's walk would otherwise hold the
        GIL while JAX reads and deserializes its executable, a few milliseconds, and JAX would wait
        for it (`docs/performance.md`, "Persistent cache"). Jobs run in order."""
        trace.queued = True
        # held until walked: a cache cleared or a function gone meanwhile keeps its equations
        trace.held = trace.program()
        self._profiling.submit(self._make_later, trace, delay)

    def _after_compile(self, trace) -> None:
        """Have our thread measure and profile `trace`, handed over at its compile's end, once such
        hand-offs have stopped for `AFTER_COMPILE_DELAY_S` (`_walk_compiled`). Its program, traced
        before the load, is held until then: a function gone meanwhile (jitted inside `main()`,
        which returned) keeps its equations."""
        trace.queued = True
        trace.held = trace.program()
        now = time.monotonic()
        lock = self._compiled_lock
        # our thread holds it a moment (or a fork copied it held): never wait for it
        if not lock.acquire(blocking=False):
            self._profiling.submit(self._make_later, trace, AFTER_COMPILE_DELAY_S)
            return
        try:
            self._compiled.append(trace)
            self._last_compiled = now
            pid = os.getpid()
            if self._compiled_first is not None and self._compiled_pid == pid:
                return  # a job waits for them already (in this process: a forked child has no jobs)
            self._compiled_first, self._compiled_pid = now, pid
        finally:
            lock.release()
        self._profiling.submit(
            self._walk_compiled, None, min(AFTER_COMPILE_DELAY_S, MAX_AFTER_COMPILE_WAIT_S)
        )

    def _walk_compiled(self, _) -> None:
        """(In `_profiling`'s thread.) The programs handed over at their compiles' ends, once none
        has come for `AFTER_COMPILE_DELAY_S`, a lookup XLA compiles has hurried them, or the first
        has waited `MAX_AFTER_COMPILE_WAIT_S`; the jobs after this one wait for it."""
        lock = self._compiled_lock
        while True:
            if not lock.acquire(timeout=_LOCK_TIMEOUT_S):  # (held since a fork copied it: a read's)
                return
            try:
                first = self._compiled_first
                if first is None:  # (a reset took them)
                    return
                wait = (
                    min(
                        self._last_compiled + AFTER_COMPILE_DELAY_S,
                        first + MAX_AFTER_COMPILE_WAIT_S,
                    )
                    - time.monotonic()
                )
                if wait <= 0 or self._compiled_hurried:
                    batch = list(self._compiled)
                    self._compiled.clear()
                    self._compiled_first = None
                    self._compiled_hurried = False
                    break
            finally:
                lock.release()
            self._profiling.pause(wait)
        for trace in batch:
            self._make_later(trace)

    def hurry(self) -> None:
        """XLA will compile: the programs handed over at earlier compiles' ends are walked now."""
        if self._compiled_first is not None:
            self._compiled_hurried = True
            self._profiling.hurry()

    def _make_later(self, trace) -> None:
        """(In `_profiling`'s thread.) The size and profile of a trace that is being compiled,
        unless a read (or a reset) has taken it meanwhile; taken from `_unprofiled` only once made,
        so that a read that comes first makes them itself (twice at worst, the second result
        ignored) and never waits."""
        key = id(trace)
        if self._unprofiled.get(key) is not trace:
            trace.held = None
            return
        self._make(trace)
        if self._unprofiled.get(key) is trace:
            self._unprofiled.pop(key, None)

    def _make(self, trace) -> None:
        jaxpr = trace.program()
        # one walk counts the equations in all for both (the profile's, the longer one, first)
        self.measure(trace, jaxpr, self._profile(trace, jaxpr))
        # (let go only once walked: a read making it meanwhile on its own thread still finds it)
        trace.held = None

    def measure(self, trace, jaxpr=None, total: int | None = None) -> int | None:
        """A trace's `graph_stats` (once), to the sink; its equations in all, or None; never raises.
        `total`: its equations in all where a profile's walk counted them."""
        if not trace.sized:
            graph = None
            try:
                jaxpr = trace.program() if jaxpr is None else jaxpr
                if jaxpr is not None:
                    graph = graph_stats(jaxpr, self.location, total)
            except Exception as e:
                self._sink.fault("profile", e)
            # (to the sink before it counts as sized: a read that finds it sized finds its event
            # with it; two threads measuring it both tell the sink, which keeps the first)
            if graph is not None:
                self._sink.on_graph(trace, graph)
            trace.size, trace.sized = graph, True
        size = trace.size
        return size.eqns_total if size is not None else None

    def _profile(self, trace, jaxpr) -> int | None:
        """Equations per user line of a traced program (`_lineprof`), to the sink; its equations in
        all (the rows' self counts sum to them), or None; never raises."""
        if jaxpr is None or (self._profiler is None and self.decoder is None):
            return None
        try:
            if self._profiler is None:
                from ._lineprof import LineProfiler

                self._profiler = LineProfiler(self.decoder.is_library, self.decoder.location)
            rows = self._profiler.profile(jaxpr)
            self._sink.on_line_profile(trace, rows)
        except Exception as e:
            self._sink.fault("profile", e)
            return None
        return sum(row[1] for row in rows)

    # ------------------------------------------------------------ reads and resets
    def make_pending(self) -> None:
        """Measure and profile the traces recorded but not compiled (yet) whose program JAX still
        holds."""
        unprofiled = self._unprofiled
        while unprofiled:
            try:
                _, trace = unprofiled.popitem(last=False)
            except KeyError:  # emptied by another thread
                return
            self._make(trace)

    def forget(self) -> None:
        self._unprofiled.clear()
        for trace in list(self._compiled):  # (a job waiting for them finds none: their programs go)
            trace.held = None
        self._compiled.clear()
