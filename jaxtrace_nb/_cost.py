"""What a traced program and its compile cost: equation counts, unrolled loops, XLA's figures.

`graph_stats` measures a traced jaxpr: its equations at the top level and in every
sub-jaxpr, and the longest stretch in which one block of primitives repeats back to
back (`find_unrolled`), which is what a Python ``for`` loop leaves in a jaxpr once
unrolled. `XlaReads` reads what XLA reports of a compiled executable, where that is cheap. Jaxprs and
executables are read by duck typing, never kept.
"""

from __future__ import annotations

import itertools
import operator
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

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


def graph_stats(closed_jaxpr: Any, location: Callable[[str, int], str]) -> GraphStats | None:
    """Equation counts and an unrolled loop of a traced (closed) jaxpr; `location` names a line."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    eqns = getattr(jaxpr, "eqns", None)
    if eqns is None:
        return None
    n = len(eqns)
    found = find_unrolled([eqn.primitive.name for eqn in eqns]) if n >= 2 * MIN_REPEATS else None
    where = _loop_location(eqns[found.start:found.start + found.period], location) if found else None
    # No equation can hold a sub-jaxpr (the common case): no count to walk.
    total = n if PLAIN_PRIMITIVES.issuperset(map(_PRIMITIVE, eqns)) else _count_equations(jaxpr, eqns, {})
    # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this runs at every trace.
    return tuple.__new__(GraphStats, (n, total, found, where))


_JAXPR_PARAMS: dict = {}  # primitive -> names of its parameters that may hold a sub-jaxpr
PLAIN_PRIMITIVES: set = set()  # the primitives in `_JAXPR_PARAMS` with none
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
    if PLAIN_PRIMITIVES.issuperset(map(_PRIMITIVE, eqns)):  # no parameter of any equation may hold a jaxpr
        memo[key] = total
        return total
    for eqn in eqns:
        if eqn.primitive not in PLAIN_PRIMITIVES:
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
    """The parameters of `eqn`'s primitive that hold, or may hold, a jaxpr: a jaxpr, or a sequence
    that holds one, is empty or holds None, in this equation (a parameter's kind is the same in
    every equation of a primitive: `dimensions=(0, 1)` is never a jaxpr's place), or None under a
    name that says so (Pallas's ``custom_fusion`` has ``pallas_jaxpr=None`` in some equations;
    every optional jaxpr parameter in JAX is named so: ``tests/test_compile_cost.py``)."""
    names = tuple(name for name, value in eqn.params.items()
                  if (isinstance(value, (tuple, list)) and (not value or any(map(_may_be_jaxpr, value))))
                  or _is_jaxpr(value) or (value is None and "jaxpr" in name))
    try:
        if len(_JAXPR_PARAMS) < 4096:
            _JAXPR_PARAMS[eqn.primitive] = names
            if not names:
                PLAIN_PRIMITIVES.add(eqn.primitive)
    except TypeError:  # an unhashable primitive
        pass
    return names


def _is_jaxpr(value: Any) -> bool:
    return type(value).__name__ in ("Jaxpr", "ClosedJaxpr")


def _may_be_jaxpr(value: Any) -> bool:
    return value is None or _is_jaxpr(value)


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


# What reading XLA's figures of a compiled program costs, seconds per equation of its traced
# program (FLOPs: ``cost_analysis``; bytes: ``get_compiled_memory_stats``), until a read in this
# process is measured. The highest of programs of 27 to 2,694 equations on a 2-core CPU were 2.9
# and 7.4 µs (`python benchmarks/run.py --sections cache`, "XLA figures read":
# benchmarks/results/cpu-2026-11-27-cache-0792da4.txt); above them, a first prediction errs
# toward not reading.
XLA_READ_S_PER_EQN = (4e-6, 14e-6)


class XlaReads:
    """Reads XLA's figures of compiled programs, each only where its predicted cost fits the
    budget given. A figure's cost per equation is its reads' seconds over their equations, both
    summed with a decay (`_DECAY` a read), so large programs weigh as much as they cost and a small
    program's fixed cost does not scale up to a large one's prediction."""

    def __init__(self):
        # per figure (FLOPs, bytes): [decayed seconds, decayed equations], the prior as one read
        self._sums = [[rate * _PRIOR_EQUATIONS, float(_PRIOR_EQUATIONS)] for rate in XLA_READ_S_PER_EQN]

    @property
    def rates(self) -> list[float]:
        """Seconds per equation of each figure's read, as predicted now."""
        return [seconds / equations for seconds, equations in self._sums]

    @rates.setter
    def rates(self, rates) -> None:
        self._sums = [[rate * _PRIOR_EQUATIONS, float(_PRIOR_EQUATIONS)] for rate in rates]

    def plan(self, equations: int, budget_s: float) -> tuple[bool, bool]:
        """(read the FLOPs, read the bytes): those predicted to cost, together, at most `budget_s`;
        neither for a program of unknown size (its cost cannot be bounded)."""
        if equations <= 0:
            return False, False
        flops_rate, bytes_rate = self.rates
        flops_s = flops_rate * equations
        with_flops = flops_s <= budget_s
        return with_flops, (flops_s if with_flops else 0.0) + bytes_rate * equations <= budget_s

    def read(self, executable: Any, plan: tuple[bool, bool], equations: int) -> XlaCost:
        """The figures `plan` names (None for the others), each read timed into its rate."""
        flops = arg_bytes = out_bytes = temp_bytes = None
        if plan[0]:
            start = time.perf_counter()
            flops = _flops(executable)
            self._measured(0, time.perf_counter() - start, equations)
        if plan[1]:
            start = time.perf_counter()
            arg_bytes, out_bytes, temp_bytes = _bytes(executable)
            self._measured(1, time.perf_counter() - start, equations)
        return XlaCost(flops, arg_bytes, out_bytes, temp_bytes)

    def _measured(self, figure: int, seconds: float, equations: int) -> None:
        sums = self._sums[figure]
        sums[0] = sums[0] * _DECAY + seconds
        sums[1] = sums[1] * _DECAY + equations


_PRIOR_EQUATIONS = 100
_DECAY = 0.9


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
