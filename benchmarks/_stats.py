"""Summaries of measurements: medians, min–max spreads, ratios, and profiles' hot spots."""

from __future__ import annotations

import cProfile
import os
import statistics


def spread(samples) -> dict:
    """{"median", "min", "max", "n"} of `samples` (None values are ignored)."""
    values = [float(v) for v in samples if v is not None]
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
        "median_ci95": median_ci(values),
    }


def median_ci(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free confidence interval of the median: the order statistics x(j), x(n+1-j)
    with j the largest rank whose binomial(n, 1/2) tail stays within (1 - level) / 2. None below 6
    samples, where no such rank exists at 95 %."""
    from math import comb

    n = len(values)
    tail, j, cumulative = (1 - level) / 2, 0, 0.0
    while j < n:
        cumulative += comb(n, j) / 2**n  # P(fewer than j + 1 samples below the median)
        if cumulative > tail:
            break
        j += 1
    if j == 0:
        return None
    ordered = sorted(values)
    return ordered[j - 1], ordered[n - j]


def ratios(numerators, denominators) -> list[float]:
    """Pairwise ratios of two equally long sample lists (pairs measured side by side)."""
    return [n / d for n, d in zip(numerators, denominators) if n is not None and d]


def fmt_spread(s: dict, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    """'median (min–max) unit' for a spread, or 'n/a'."""
    if not s or s.get("median") is None:
        return "n/a"
    m, lo, hi = (s[k] * scale for k in ("median", "min", "max"))
    unit = f" {unit}" if unit else ""
    if s.get("n", 0) <= 1:
        return f"{m:.{digits}f}{unit}"
    return f"{m:.{digits}f}{unit} ({lo:.{digits}f}–{hi:.{digits}f})"


def profile_top(fn, n: int = 8) -> list[str]:
    """The `n` functions with the most own time while running `fn` once (cProfile)."""
    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    return hot_spots(profiler, n)


def hot_spots(profiler: cProfile.Profile, n: int = 8) -> list[str]:
    """The `n` functions with the most own time in a profiler's stats."""
    import pstats

    stats = pstats.Stats(profiler)
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in stats.stats.items():
        rows.append((own, cumulative, calls, f"{os.path.basename(filename)}:{line}({name})"))
    rows.sort(reverse=True)
    return [
        f"{own:.3f} s own, {cum:.3f} s cumulative, {calls} calls: {where}"
        for own, cum, calls, where in rows[:n]
    ]
