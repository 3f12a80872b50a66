"""Graph size and unrolled-loop detection on plain sequences (no JAX).

The probe hands this module the primitive names of a traced function's top-level
equations; it finds the longest stretch in which one block of primitives repeats
back to back, which is what a Python ``for`` loop leaves in a jaxpr once unrolled.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple

MIN_REPEATS = 16  # fewer repetitions than this is a small model's layers, not a loop to roll up
_MAX_CANDIDATE_PERIODS = 8


class Unrolled(NamedTuple):
    """A block of `period` equations repeated `repeats` times from equation `start` on."""

    repeats: int
    period: int
    start: int

    @property
    def equations(self) -> int:
        return self.repeats * self.period


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
    last: dict[int, int] = {}
    distances: Counter = Counter()
    for i, code in enumerate(seq.tolist()):
        j = last.get(code)
        if j is not None:
            distances[i - j] += 1
        last[code] = i
    best: Unrolled | None = None
    for period, _ in distances.most_common(_MAX_CANDIDATE_PERIODS):
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


def unrolled_hint(found: Unrolled, total: int, where: str | None) -> str:
    """The hint for a trace whose top level holds an unrolled Python loop."""
    at = f" (loop body at {where})" if where else ""
    return (f"A Python loop of about {found.repeats} iterations was unrolled into the graph{at}: "
            f"{found.equations} of its {total} top-level equations repeat a block of {found.period}. "
            "`jax.lax.scan` or `jax.lax.fori_loop` would trace and compile the body once.")


class GraphStats(NamedTuple):
    """What the probe measures of one traced jaxpr."""

    eqns: int  # top-level equations
    eqns_total: int  # including every sub-jaxpr (scan / cond / while bodies, nested jits)
    unrolled: Unrolled | None
    loop_where: str | None  # "file:line" of the unrolled loop's body
