"""What a traced program and its compile cost: equation counts, unrolled loops, XLA's figures.

`graph_stats` measures a traced jaxpr: its equations at the top level and in every
sub-jaxpr, and the longest stretch in which one block of primitives repeats back to
back (`find_unrolled`), which is what a Python ``for`` loop leaves in a jaxpr once
unrolled. `XlaReads` reads what XLA reports of a compiled executable, where that is cheap.
`Measurer`, the probe's collaborator, measures each recorded trace's program (its size and line
profile, in a thread of our own while XLA compiles it) and reads XLA's figures of its compile.
Jaxprs and executables are read by duck typing, never kept (a program the persistent cache
served is held from its load to its walk only).
"""

from __future__ import annotations

import collections
import itertools
import operator
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ._background import Background
from ._bounded import Bounded
from ._records import GraphStats, Unrolled, XlaCost

MIN_REPEATS = 16  # fewer repetitions than this is a small model's layers, not a loop to roll up
_MAX_CANDIDATE_PERIODS = 8


def find_unrolled(names: Sequence[str], min_repeats: int = MIN_REPEATS) -> Unrolled | None:
    """The longest back-to-back repetition of one block of primitive names, if any.

    Candidate block lengths are the most common distances between two occurrences of
    the same primitive; each is checked with one vectorised comparison, so the cost is
    linear in the number of equations.

    Example::

        >>> find_unrolled(["dot", "tanh", "add"] * 200 + ["reduce_sum"])
        Unrolled(repeats=200, period=3, start=0)
    """
    n = len(names)
    if n < 2 * min_repeats:
        return None
    import numpy as np

    codes: dict[str, int] = {}
    seq = np.fromiter((codes.setdefault(name, len(codes)) for name in names), dtype=np.int32, count=n)
    # Distances between consecutive occurrences of each primitive: positions grouped by primitive
    # (a stable sort keeps each group in order), differences inside a group.
    order = np.argsort(seq, kind="stable")
    same = seq[order][1:] == seq[order][:-1]
    counts = np.bincount(np.diff(order)[same], minlength=1)
    periods = [int(p) for p in np.lexsort((np.arange(len(counts)), -counts))[:_MAX_CANDIDATE_PERIODS]
               if counts[p] > 0]  # most common first; ties: the shorter period first
    best: Unrolled | None = None
    for period in periods:
        if period * min_repeats > n:
            continue
        found = _longest_repeat(seq, period)
        if found is None:
            continue
        repeats, start = found
        candidate = Unrolled(repeats, period, start)
        if repeats >= min_repeats and (best is None or candidate.equations > best.equations
                                       or (candidate.equations == best.equations and period < best.period)):
            best = candidate
    return best


def _longest_repeat(seq, period: int) -> tuple[int, int] | None:
    """(repetitions, start) of the longest run where seq[i] == seq[i + period]."""
    import numpy as np

    same = seq[:-period] == seq[period:]
    if not same.any():
        return None
    # Run lengths of consecutive True values.
    padded = np.concatenate(([False], same, [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    starts, ends = edges[::2], edges[1::2]
    k = int(np.argmax(ends - starts))
    run = int(ends[k] - starts[k])
    return run // period + 1, int(starts[k])


def graph_stats(closed_jaxpr: Any, location: Callable[[str, int], str], total: int | None = None) -> GraphStats | None:
    """Equation counts and an unrolled loop of a traced (closed) jaxpr; `location` names a line.
    `total`: its equations in all, sub-jaxprs included, where a walk of the same jaxpr has counted
    them (`_lineprof.LineProfiler.profile`'s rows); counted here if None."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    eqns = getattr(jaxpr, "eqns", None)
    if eqns is None:
        return None
    n = len(eqns)
    found = find_unrolled([eqn.primitive.name for eqn in eqns]) if n >= 2 * MIN_REPEATS else None
    where = _loop_location(eqns[found.start:found.start + found.period], location) if found else None
    if total is None:  # no equation can hold a sub-jaxpr (the common case): no count to walk
        total = n if _PLAIN_PRIMITIVES.issuperset(map(_PRIMITIVE, eqns)) else _count_equations(jaxpr, eqns, {})
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every trace.
    return tuple.__new__(GraphStats, (n, total, found, where))


_JAXPR_PARAMS: dict = {}  # primitive -> names of its parameters that may hold a sub-jaxpr
_PLAIN_PRIMITIVES: set = set()  # the primitives in `_JAXPR_PARAMS` with none
_PRIMITIVE = operator.attrgetter("primitive")


def count_equations(jaxpr: Any, memo: dict) -> int:
    """Equations of `jaxpr` and, recursively, of every sub-jaxpr (scan, cond, while, nested jit)."""
    return _count_equations(jaxpr, jaxpr.eqns, memo)


def _count_equations(jaxpr: Any, eqns: Sequence[Any], memo: dict) -> int:
    key = id(jaxpr)
    if key in memo:
        return memo[key]
    memo[key] = 0  # a cycle cannot happen in a jaxpr, but never recurse forever
    total = len(eqns)
    if _PLAIN_PRIMITIVES.issuperset(map(_PRIMITIVE, eqns)):  # no parameter of any equation may hold a jaxpr
        memo[key] = total
        return total
    for eqn in eqns:
        for inner in sub_jaxprs(eqn):
            total += _sub_total(inner, memo)
    memo[key] = total
    return total


def sub_jaxprs(eqn: Any) -> list:
    """The jaxprs an equation's parameters hold (a scan, cond or while body, a nested jit), open."""
    names = _JAXPR_PARAMS.get(eqn.primitive)
    if names is None:
        names = _jaxpr_params(eqn)
    if not names:
        return []
    out = []
    params = eqn.params
    for name in names:
        value = params.get(name)
        if value is None:
            continue
        for sub in value if isinstance(value, (tuple, list)) else (value,):
            inner = getattr(sub, "jaxpr", sub) if type(sub).__name__ == "ClosedJaxpr" else sub
            if type(inner).__name__ == "Jaxpr":
                out.append(inner)
    return out


class _SubTotal(NamedTuple):
    jaxpr: Callable[[], Any]  # a weak reference to the sub-jaxpr its key names by id
    total: int  # its equations in all


# id(sub-jaxpr) -> _SubTotal. JAX reuses a nested jit's jaxpr in every trace that calls it with the
# same types, so most are counted once.
_SUB_TOTALS = Bounded(4096)


def _sub_total(jaxpr: Any, memo: dict) -> int:
    known = _SUB_TOTALS.get(id(jaxpr))
    if known is not None and known.jaxpr() is jaxpr:
        return known.total
    total = count_equations(jaxpr, memo)
    try:
        ref = weakref.ref(jaxpr)
    except TypeError:
        return total
    _SUB_TOTALS.put(id(jaxpr), _SubTotal(ref, total))
    return total


def _jaxpr_params(eqn: Any) -> tuple:
    """The parameters of `eqn`'s primitive that hold, or may hold, a jaxpr: a jaxpr or a sequence
    in this equation (what a sequence holds is read equation by equation: Equinox's filter
    primitives put jaxprs in their ``static`` tuple in some equations only), or None under a
    name that says so (Pallas's ``custom_fusion`` has ``pallas_jaxpr=None`` in some equations;
    every optional jaxpr parameter in JAX is named so: ``tests/test_compile_cost.py``)."""
    names = tuple(name for name, value in eqn.params.items()
                  if isinstance(value, (tuple, list)) or type(value).__name__ in ("Jaxpr", "ClosedJaxpr")
                  or (value is None and "jaxpr" in name))
    try:
        if len(_JAXPR_PARAMS) < 4096:
            _JAXPR_PARAMS[eqn.primitive] = names
            if not names:
                _PLAIN_PRIMITIVES.add(eqn.primitive)
    except TypeError:  # an unhashable primitive
        pass
    return names


def _loop_location(body: Sequence[Any], location: Callable[[str, int], str]) -> str | None:
    """`file:line` of the statement that every equation of an unrolled loop's body came from.

    That is the innermost user frame shared by all of the body's equations: the loop's
    line in the traced function, not a line of a helper the loop calls.
    """
    from ._jax_internals import user_frames

    stacks = []
    for eqn in body:
        frames = user_frames(getattr(eqn.source_info, "traceback", None))
        stacks.append([(f.file_name, f.start_line) for f in itertools.islice(frames, 64)])
    stacks = [stack for stack in stacks if stack]
    if not stacks:
        return None
    shared = set(stacks[0]).intersection(*stacks[1:])
    for filename, line in stacks[0]:  # innermost first
        if (filename, line) in shared:
            return location(filename, line)
    return location(*stacks[0][0])


# What reading XLA's figures of a compiled program costs (FLOPs: ``cost_analysis``; bytes:
# ``get_compiled_memory_stats``) before any read in this process is timed: per figure, two reads
# as (equations of the traced program, seconds), the highest of each size in the three runs of
# `python benchmarks/run.py --sections cache` ("XLA figures read") on a 2-core CPU:
# benchmarks/results/cpu-2026-11-27-cache-0792da4.txt and -d0f6c59-1.txt.
XLA_READ_PRIOR = (((27, 0.073e-3), (2694, 5.214e-3)), ((27, 0.146e-3), (2694, 19.962e-3)))
_DECAY = 0.9  # the weight of a timed read falls by this at every later read of the same figure


class XlaReads:
    """Reads XLA's figures of compiled programs, each only where its predicted cost fits the
    budget given. A figure's cost is predicted as a fixed part plus a part per equation (a line
    fitted by least squares to the prior's two reads, weighing one each always, and to the reads
    timed in this process, their weights decaying), so that the fixed cost of many small programs
    (every eager operation compiles one) is not charged per equation to a large one."""

    def __init__(self, prior=XLA_READ_PRIOR, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        # per figure: the prior's sums, and the timed reads' decayed sums (weight, n, t, n², n·t)
        self._prior = [_sums(points) for points in prior]
        self._timed = [[0.0] * 5 for _ in prior]
        self.lines = [_fit(sums) for sums in self._prior]  # per figure: (seconds, seconds per equation)

    def plan(self, equations: int | None, budget_s: float) -> tuple[bool, bool]:
        """(read the FLOPs, read the bytes): those predicted to cost, together, at most `budget_s`.
        A program of unknown size (`equations` None) is read only with no bound on the budget."""
        if equations is None:
            return (True, True) if budget_s == float("inf") else (False, False)
        (flops_fixed, flops_rate), (bytes_fixed, bytes_rate) = self.lines
        flops_s = flops_fixed + flops_rate * equations
        with_flops = flops_s <= budget_s
        return with_flops, (flops_s if with_flops else 0.0) + bytes_fixed + bytes_rate * equations <= budget_s

    def may_read(self, at_least: int, budget_s: float) -> bool:
        """Whether `plan` may read a figure of a program of `at_least` equations or more within
        `budget_s` (each figure's predicted cost grows with the equations, unless a fitted line
        falls: then it may)."""
        if budget_s == float("inf") or any(rate < 0 for _, rate in self.lines):
            return True
        return any(self.plan(at_least, budget_s))

    def read(self, executable: Any, plan: tuple[bool, bool], equations: int | None) -> XlaCost:
        """The figures `plan` names (None for the others), each read timed into its line."""
        flops = arg_bytes = out_bytes = temp_bytes = None
        if plan[0]:
            start = self._clock()
            flops = _flops(executable)
            self._timed_read(0, self._clock() - start, equations)
        if plan[1]:
            start = self._clock()
            arg_bytes, out_bytes, temp_bytes = _bytes(executable)
            self._timed_read(1, self._clock() - start, equations)
        return XlaCost(flops, arg_bytes, out_bytes, temp_bytes)

    def _timed_read(self, figure: int, seconds: float, equations: int | None) -> None:
        if equations is None:
            return
        with self._lock:
            timed = self._timed[figure]
            for i, value in enumerate((1.0, equations, seconds, equations * equations, equations * seconds)):
                timed[i] = timed[i] * _DECAY + value
            self.lines[figure] = _fit([p + t for p, t in zip(self._prior[figure], timed)])


def _sums(points) -> list[float]:
    """(weight, n, t, n², n·t) of (n, t) points of weight one each."""
    return [float(len(points)), sum(n for n, _ in points), sum(t for _, t in points),
            sum(n * n for n, _ in points), sum(n * t for n, t in points)]


def _fit(sums) -> tuple[float, float]:
    """(fixed, per equation) of the weighted least-squares line through the points summed, both
    at least 0 (a negative fixed part: the line through the origin instead)."""
    weight, n, t, nn, nt = sums
    spread = weight * nn - n * n
    rate = (weight * nt - n * t) / spread if spread > 0 else 0.0
    fixed = (t - rate * n) / weight
    if fixed < 0:
        return 0.0, max(0.0, nt / nn) if nn > 0 else 0.0
    return fixed, max(0.0, rate)


def _flops(executable: Any) -> float | None:
    try:
        analysis = executable.cost_analysis()
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0] if analysis else {}
        value = analysis.get("flops") if isinstance(analysis, dict) else None
        if value is not None and value >= 0:
            return float(value)
    except Exception:
        pass
    return None


def _bytes(executable: Any) -> tuple:
    try:
        stats = executable.get_compiled_memory_stats()
        return int(stats.argument_size_in_bytes), int(stats.output_size_in_bytes), int(stats.temp_size_in_bytes)
    except Exception:
        return None, None, None


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
_MAX_UNPROFILED = 256  # traces whose size and line profile wait (made while they compile, or at a read)


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
        self.xla_cost_share = XLA_COST_SHARE  # FLOPs and bytes: read where that costs at most this share
        self._xla_reads = XlaReads()
        self.decoder = None  # the probe's `Decoder` while installed: libraries and locations of lines
        self.location: Callable[[str, int], str] | None = None  # its `location` (kept past an uninstall)
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
        """XLA is about to compile `trace`'s program: our thread measures and profiles it meanwhile."""
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
        self._profiling.submit(self._make_later, trace, delay)

    def _after_compile(self, trace) -> None:
        """Have our thread measure and profile `trace`, handed over at its compile's end, once such
        hand-offs have stopped for `AFTER_COMPILE_DELAY_S` (`_walk_compiled`). Its program, traced
        before the load, is held until then: a function gone meanwhile (jitted inside `main()`, which
        returned) keeps its equations."""
        trace.queued = True
        trace.held = trace.program()
        now = time.monotonic()
        lock = self._compiled_lock
        if not lock.acquire(blocking=False):  # our thread holds it a moment (or a fork copied it held):
            self._profiling.submit(self._make_later, trace, AFTER_COMPILE_DELAY_S)  # never wait for it
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
        for trace in batch:
            self._make_later(trace)

    def hurry(self) -> None:
        """XLA will compile: the programs handed over at earlier compiles' ends are walked now."""
        if self._compiled_first is not None:
            self._compiled_hurried = True
            self._profiling.hurry()

    def _make_later(self, trace) -> None:
        """(In `_profiling`'s thread.) The size and profile of a trace that is being compiled, unless
        a read (or a reset) has taken it meanwhile; taken from `_unprofiled` only once made, so that a
        read that comes first makes them itself (twice at worst, the second result ignored) and never
        waits."""
        key = id(trace)
        if self._unprofiled.get(key) is not trace:
            trace.held = None
            return
        self._make(trace)
        if self._unprofiled.get(key) is trace:
            self._unprofiled.pop(key, None)

    def _make(self, trace) -> None:
        jaxpr = trace.program()
        trace.held = None
        # one walk counts the equations in all for both (the profile's, the longer one, first)
        self.measure(trace, jaxpr, self._profile(trace, jaxpr))

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
            trace.size, trace.sized = graph, True
            if graph is not None:
                self._sink.on_graph(trace, graph)
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
        """Measure and profile the traces recorded but not compiled (yet) whose program JAX still holds."""
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
