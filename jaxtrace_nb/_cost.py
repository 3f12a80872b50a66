"""What a traced program and its compile cost: equation counts, unrolled loops, XLA's figures.

`graph_stats` measures a traced jaxpr: its equations at the top level and in every
sub-jaxpr, and the longest stretch in which one block of primitives repeats back to
back (`find_unrolled`), which is what a Python ``for`` loop leaves in a jaxpr once
unrolled. `xla_cost` reads what XLA reports of a compiled executable. Jaxprs and
executables are read by duck typing, never kept.
"""

from __future__ import annotations

import itertools
import operator
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
    in this equation (a parameter's kind is the same in every equation of a primitive), or None
    under a name that says so (Pallas's ``custom_fusion`` has ``pallas_jaxpr=None`` in some
    equations; every optional jaxpr parameter in JAX is named so: ``tests/test_compile_cost.py``)."""
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


def xla_cost(executable: Any) -> XlaCost:
    """FLOPs and argument / output / temporary bytes XLA reports for a compiled program."""
    flops = arg_bytes = out_bytes = temp_bytes = None
    try:
        analysis = executable.cost_analysis()
        if isinstance(analysis, (list, tuple)):
            analysis = analysis[0] if analysis else {}
        value = analysis.get("flops") if isinstance(analysis, dict) else None
        if value is not None and value >= 0:
            flops = float(value)
    except Exception:
        pass
    try:
        stats = executable.get_compiled_memory_stats()
        arg_bytes = int(stats.argument_size_in_bytes)
        out_bytes = int(stats.output_size_in_bytes)
        temp_bytes = int(stats.temp_size_in_bytes)
    except Exception:
        pass
    return XlaCost(flops, arg_bytes, out_bytes, temp_bytes)
