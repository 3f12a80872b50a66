"""What a traced program and its compile cost: equation counts, unrolled loops, XLA's figures.

`graph_stats` measures a traced jaxpr: its equations at the top level and in every
sub-jaxpr, and the longest stretch in which one block of primitives repeats back to
back (`find_unrolled`), which is what a Python ``for`` loop leaves in a jaxpr once
unrolled. `XlaReads` reads what XLA reports of a compiled executable, where that is cheap. Jaxprs
and executables are read by duck typing, never kept.
"""

from __future__ import annotations

import itertools
import operator
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .._core._bounded import Bounded
from .._core._installed import is_installed
from .._core._loops import in_loop
from .._keys._records import GraphStats, Unrolled, XlaCost

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
    seq = np.fromiter(
        (codes.setdefault(name, len(codes)) for name in names), dtype=np.int32, count=n
    )
    # Distances between consecutive occurrences of each primitive: positions grouped by primitive
    # (a stable sort keeps each group in order), differences inside a group.
    order = np.argsort(seq, kind="stable")
    same = seq[order][1:] == seq[order][:-1]
    counts = np.bincount(np.diff(order)[same], minlength=1)
    periods = [
        int(p)
        for p in np.lexsort((np.arange(len(counts)), -counts))[:_MAX_CANDIDATE_PERIODS]
        if counts[p] > 0
    ]  # most common first; ties: the shorter period first
    best: Unrolled | None = None
    for period in periods:
        if period * min_repeats > n:
            continue
        found = _longest_repeat(seq, period)
        if found is None:
            continue
        repeats, start = found
        candidate = Unrolled(repeats, period, start)
        if repeats >= min_repeats and (
            best is None
            or candidate.equations > best.equations
            or (candidate.equations == best.equations and period < best.period)
        ):
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


def graph_stats(
    closed_jaxpr: Any, location: Callable[[str, int], str], total: int | None = None
) -> GraphStats | None:
    """Equation counts and an unrolled loop of a traced (closed) jaxpr; `location` names a line.
    `total`: its equations in all, sub-jaxprs included, where a walk of the same jaxpr has counted
    them (`_lineprof.LineProfiler.profile`'s rows); counted here if None."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    eqns = getattr(jaxpr, "eqns", None)
    if eqns is None:
        return None
    n = len(eqns)
    found = find_unrolled([eqn.primitive.name for eqn in eqns]) if n >= 2 * MIN_REPEATS else None
    if found is not None:
        found = _aligned(eqns, found)
    line, users = (
        _loop_line(eqns[found.start : found.start + found.period]) if found else (None, False)
    )
    where = location(*line) if line else None
    if total is None:  # no equation can hold a sub-jaxpr (the common case): no count to walk
        total = (
            n
            if _PLAIN_PRIMITIVES.issuperset(map(_PRIMITIVE, eqns))
            else _count_equations(jaxpr, eqns, {})
        )
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every trace.
    return tuple.__new__(GraphStats, (n, total, found, where, users))


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
    if _PLAIN_PRIMITIVES.issuperset(
        map(_PRIMITIVE, eqns)
    ):  # no parameter of any equation may hold a jaxpr
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
    names = tuple(
        name
        for name, value in eqn.params.items()
        if isinstance(value, (tuple, list))
        or type(value).__name__ in ("Jaxpr", "ClosedJaxpr")
        or (value is None and "jaxpr" in name)
    )
    try:
        if len(_JAXPR_PARAMS) < 4096:
            _JAXPR_PARAMS[eqn.primitive] = names
            if not names:
                _PLAIN_PRIMITIVES.add(eqn.primitive)
    except TypeError:  # an unhashable primitive
        pass
    return names


def _aligned(eqns: Sequence[Any], found: Unrolled) -> Unrolled:
    """`found` starting at its first equation that came from the same lines as the one a block
    later. A run of repeated primitive names can begin with equations before the loop that
    happen to repeat the body's last ones (``x * s + n`` before a loop whose body ends in a
    multiply and an add); their lines are not the loop's."""
    for shift in range(min(found.period, len(eqns) - found.start - found.period)):
        at = found.start + shift
        if _lines(eqns[at]) == _lines(eqns[at + found.period]):
            return found._replace(start=at) if shift else found
    return found


def _lines(eqn: Any) -> list[tuple[str, int]]:
    """(file, line) of each user frame an equation came from, innermost first."""
    from .._jax._internals import user_frames

    frames = user_frames(getattr(eqn.source_info, "traceback", None))
    return [(f.file_name, f.start_line) for f in itertools.islice(frames, 64)]


def _loop_line(body: Sequence[Any]) -> tuple[tuple[str, int] | None, bool]:
    """(file, line) of the statement that every equation of an unrolled loop's body came from,
    and whether the loop is the user's own.

    The line is the innermost user frame shared by all of the body's equations: the loop's
    line in the traced function, not a line of a helper the loop calls. The loop is the user's
    where the innermost of those shared frames that lies inside a loop (`_loops.in_loop`) is in a
    file of no installed distribution (`_installed`): a loop in Optax's or Diffrax's code, or one
    whose frames JAX leaves out of its tracebacks (Equinox's), is not."""
    stacks = [stack for stack in map(_lines, body) if stack]
    if not stacks:
        return None, False
    shared = set(stacks[0]).intersection(*stacks[1:])
    shared_stack = [frame for frame in stacks[0] if frame in shared]  # innermost first
    looping = next((frame for frame in shared_stack if in_loop(*frame)), None)
    users = looping is not None and not is_installed(looping[0])
    return (shared_stack[0] if shared_stack else stacks[0][0]), users


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
        self.lines = [
            _fit(sums) for sums in self._prior
        ]  # per figure: (seconds, seconds per equation)

    def plan(self, equations: int | None, budget_s: float) -> tuple[bool, bool]:
        """(read the FLOPs, read the bytes): those predicted to cost, together, at most `budget_s`.
        A program of unknown size (`equations` None) is read only with no bound on the budget."""
        if equations is None:
            return (True, True) if budget_s == float("inf") else (False, False)
        (flops_fixed, flops_rate), (bytes_fixed, bytes_rate) = self.lines
        flops_s = flops_fixed + flops_rate * equations
        with_flops = flops_s <= budget_s
        return with_flops, (
            flops_s if with_flops else 0.0
        ) + bytes_fixed + bytes_rate * equations <= budget_s

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
        return XlaCost(flops=flops, arg_bytes=arg_bytes, out_bytes=out_bytes, temp_bytes=temp_bytes)

    def _timed_read(self, figure: int, seconds: float, equations: int | None) -> None:
        if equations is None:
            return
        with self._lock:
            timed = self._timed[figure]
            for i, value in enumerate(
                (1.0, equations, seconds, equations * equations, equations * seconds)
            ):
                timed[i] = timed[i] * _DECAY + value
            self.lines[figure] = _fit([p + t for p, t in zip(self._prior[figure], timed)])


def _sums(points) -> list[float]:
    """(weight, n, t, n², n·t) of (n, t) points of weight one each."""
    return [
        float(len(points)),
        sum(n for n, _ in points),
        sum(t for _, t in points),
        sum(n * n for n, _ in points),
        sum(n * t for n, t in points),
    ]


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
        return (
            int(stats.argument_size_in_bytes),
            int(stats.output_size_in_bytes),
            int(stats.temp_size_in_bytes),
        )
    except Exception:
        return None, None, None
