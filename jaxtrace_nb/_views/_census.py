"""Shape census and bucket suggestions: for every leaf that retraced on shape, the shapes seen,
their compiles and seconds, and the padding schemes that would have compiled fewer times.

A retrace on `shape` names the leaf and its shape before and after (``f32[32,3]`` →
``f32[17,3]``): the shapes a leaf took are the first one and every "after". The dimensions
that differ between them are padded by each candidate scheme:

* ``multiple_of(N)``: up to a multiple of N (one line of code);
* ``pow2``: up to the next power of two (one line);
* ``buckets(K)``: K sizes, chosen by an exact dynamic programme that minimises the padded
  elements over the sizes seen (every list ends at the largest size seen); a size past the
  largest bucket pads to the next multiple of it, so that a longer input costs one compile
  per multiple, never an error.

A scheme's ``compiles`` is the number of distinct padded shapes: exact on this run's shapes,
not an estimate (a longer input later costs one compile more). Its ``padding`` is the share of
extra elements along the padded dimensions. jaxtrace_nb sees each shape once (a cache hit never
reaches Python), so padding is weighted per distinct shape seen, unless a sample of the real
sizes (``sizes=``) weights it by calls. The pick: the fewest compiles within a padding budget
(15 % by default), the simplest code first on ties.

Pure: events in, rows out; numpy only for the dynamic programme.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from .._core._vocabulary import Cause, EventKind

MAX_PADDING = 0.15
MAX_BUCKETS = 16
MULTIPLES = (8, 16, 32, 64, 128, 256, 512, 1024)
_SHAPE = re.compile(r"^\s*([A-Za-z]\w*)\[([\d,\s]*)\]")


def parse_shape(text: str | None) -> tuple[str, tuple[int, ...]] | None:
    """(dtype, dims) of an abstract value's text (``f32[32,3]``, ``i32[]``); None if not one."""
    match = _SHAPE.match(text or "")
    if match is None:
        return None
    dims = tuple(int(d) for d in match.group(2).replace(" ", "").split(",") if d)
    return match.group(1), dims


class Scheme(NamedTuple):
    """A way to pad the varying dimensions, and what it would have meant on the shapes seen."""

    name: str  # "as is", "multiple_of(64)", "pow2", "buckets(5)"
    compiles: int  # distinct padded shapes: compiles, exactly, on these shapes
    padding: float  # extra elements along the padded dimensions / real ones (weighted)
    buckets: tuple  # the padded sizes per varying dimension: ((103, 151, ...), ...)
    code: str  # one line that applies it to a size `n`

    def pad(self, dim_index: int) -> Callable[[int], int]:
        """The padding of the varying dimension `dim_index` (its position among the varying
        ones)."""
        return bucket_pad(self.buckets[dim_index])


def bucket_pad(sizes: Sequence[int]) -> Callable[[int], int]:
    """Up to the first of `sizes` (ascending) that holds `n`; past the largest, its next
    multiple."""
    largest = sizes[-1]
    return lambda n: next((b for b in sizes if b >= n), -(-n // largest) * largest)


def bucket_code(sizes: Sequence[int]) -> str:
    """`bucket_pad(sizes)` as the one line of Python the census suggests."""
    largest = sizes[-1]
    return f"n = next((b for b in {list(sizes)} if b >= n), -(-n // {largest}) * {largest})"


def _multiple(n: int) -> Callable[[int], int]:
    return lambda s: -(-s // n) * n


def _pow2(s: int) -> int:
    return 1 << max(0, (s - 1).bit_length())


def optimal_buckets(counts: dict[int, float], k: int) -> tuple[int, ...]:
    """At most `k` bucket sizes (chosen among the sizes, the largest always one) minimising
    Σ count · (bucket − size): an exact dynamic programme over the distinct sizes, O(k·n²)."""
    import numpy as np

    s = np.array(sorted(counts), dtype=np.float64)
    c = np.array([counts[int(v)] for v in s], dtype=np.float64)
    n = len(s)
    k = max(1, min(k, n))
    prefix_c = np.concatenate(([0.0], np.cumsum(c)))
    prefix_cs = np.concatenate(([0.0], np.cumsum(c * s)))
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    # cost[i, j]: sizes i..j padded to s[j]
    cost = np.where(
        i <= j,
        s[None, :] * (prefix_c[j + 1] - prefix_c[i]) - (prefix_cs[j + 1] - prefix_cs[i]),
        np.inf,
    )
    best = cost[0].copy()  # best[j]: sizes 0..j in one bucket
    starts = []  # per level from 2 on: where the last bucket of sizes 0..j starts
    for _ in range(1, k):
        candidates = (
            best[:-1, None] + cost[1:, :]
        )  # the previous buckets end at i, the last starts at i + 1
        arg = np.argmin(candidates, axis=0)
        best = candidates[arg, np.arange(n)]
        starts.append(arg + 1)
    bounds, j = [], n - 1
    for level in range(len(starts) - 1, -1, -1):
        bounds.append(int(s[j]))
        j = int(starts[level][j]) - 1
    bounds.append(int(s[j]))
    return tuple(sorted(set(bounds)))


def evaluate(
    name: str, pads: Sequence[Callable[[int], int]], shapes: dict[tuple, float], code: str
) -> Scheme:
    """`pads` (one per varying dimension) applied to `shapes` (varying sizes -> weight)."""
    padded = {tuple(p(v) for p, v in zip(pads, shape)) for shape in shapes}
    real = extra = 0.0
    for shape, weight in shapes.items():
        for p, v in zip(pads, shape):
            real += weight * v
            extra += weight * (p(v) - v)
    buckets = tuple(tuple(sorted({p(shape[d]) for shape in shapes})) for d, p in enumerate(pads))
    return Scheme(
        name=name,
        compiles=len(padded),
        padding=extra / real if real else 0.0,
        buckets=buckets,
        code=code,
    )


def schemes(shapes: dict[tuple, float], max_buckets: int = MAX_BUCKETS) -> list[Scheme]:
    """Every candidate for `shapes` (the varying dimensions' sizes -> weight), "as is" first."""
    ndim = len(next(iter(shapes)))
    same = [lambda v: v] * ndim
    out = [evaluate("as is", same, shapes, "")]
    top = max(max(shape) for shape in shapes)
    for n in MULTIPLES:
        if n < 2 * top:
            out.append(
                evaluate(
                    f"multiple_of({n})", [_multiple(n)] * ndim, shapes, f"n = -(-n // {n}) * {n}"
                )
            )
    out.append(evaluate("pow2", [_pow2] * ndim, shapes, "n = 1 << (n - 1).bit_length()"))
    per_dim = []
    for d in range(ndim):
        counts: Counter = Counter()
        for shape, weight in shapes.items():
            counts[shape[d]] += weight
        per_dim.append(counts)
    distinct = max(len(c) for c in per_dim)
    for k in range(1, min(max_buckets, distinct - 1) + 1):
        bounds = [optimal_buckets(c, k) for c in per_dim]
        out.append(
            evaluate(
                f"buckets({k})",
                [bucket_pad(b) for b in bounds],
                shapes,
                bucket_code(bounds[0])
                if ndim == 1
                else f"buckets per dimension: {[list(b) for b in bounds]}",
            )
        )
    return out


def pick(candidates: list[Scheme], max_padding: float = MAX_PADDING) -> Scheme | None:
    """The fewest compiles within `max_padding`; ties: one line of code before a list, then less
    padding. None when nothing padded beats compiling every shape."""
    within = [
        s
        for s in candidates[1:]
        if s.padding <= max_padding + 1e-12 and s.compiles < candidates[0].compiles
    ]
    if not within:
        return None
    return min(within, key=lambda s: (s.compiles, s.name.startswith("buckets"), s.padding))


def simplest(candidates: list[Scheme], max_padding: float = MAX_PADDING) -> Scheme | None:
    """The best one-line scheme (`multiple_of` / `pow2`) within `max_padding`."""
    within = [
        s
        for s in candidates[1:]
        if not s.name.startswith("buckets")
        and s.padding <= max_padding + 1e-12
        and s.compiles < candidates[0].compiles
    ]
    return min(within, key=lambda s: (s.compiles, s.padding)) if within else None


# ---------------------------------------------------------------- from the log
class LeafCensus(NamedTuple):
    """The shapes one leaf of one function took, as its retraces on `shape` say."""

    function: str
    key: str
    leaf: str
    shapes: tuple  # the shapes seen, in order: (dtype, dims) texts' dims
    compile_s: tuple  # trace + lower + compile seconds of each shape (None where not known)
    varying: tuple  # the dimensions that differ
    candidates: tuple  # Schemes, "as is" first
    pick: Scheme | None
    simplest: Scheme | None
    max_padding: float = MAX_PADDING  # the padding budget `pick` and `simplest` were chosen within

    @property
    def seconds(self) -> float:
        return sum(s for s in self.compile_s if s is not None)

    @property
    def mean_compile_s(self) -> float | None:
        known = [s for s in self.compile_s if s is not None]
        return sum(known) / len(known) if known else None


def _seconds(e) -> float | None:
    values = [v for v in (e.trace_s, e.lower_s, e.compile_s) if v is not None and v == v]
    return sum(values) if values else None


def census(
    events: Iterable,
    *,
    sizes: Sequence[int] | None = None,
    max_padding: float = MAX_PADDING,
    internal: bool = False,
) -> list[LeafCensus]:
    """Per (function, leaf) that retraced on shape: its shapes, seconds and bucket schemes.

    `sizes`: a sample of the real sizes of the varying dimension (e.g. a dataset's lengths), to
    weight the padding by calls instead of per distinct shape seen."""
    by_function: dict[str, list] = {}
    for e in events:
        if internal or not e.internal:
            by_function.setdefault(e.key, []).append(e)
    out = []
    for key, history in by_function.items():
        previous: dict[int, object] = {}
        leaves: dict[str, list] = {}
        for e in history:
            if e.kind == EventKind.TRACE and e.trace_number is not None:
                previous[e.trace_number] = e
            if e.cause != Cause.SHAPE or not e.leaf:
                continue
            seen = leaves.setdefault(e.leaf, [])
            if not seen:
                before = previous.get((e.trace_number or 0) - 1)
                seen.append((e.before, _seconds(before) if before is not None else None))
            seen.append((e.after, _seconds(e)))
        for leaf, seen in leaves.items():
            found = _leaf(history[0].function, key, leaf, seen, sizes, max_padding)
            if found is not None:
                out.append(found)
    return out


def _leaf(
    function: str, key: str, leaf: str, seen: list, sizes, max_padding: float
) -> LeafCensus | None:
    parsed = [(parse_shape(text), seconds) for text, seconds in seen]
    parsed = [(p[1], s) for p, s in parsed if p is not None]
    if len(parsed) < 2 or len({len(dims) for dims, _ in parsed}) != 1:
        return None  # a rank change (or no shapes): padding does not apply
    shapes = tuple(dims for dims, _ in parsed)
    varying = tuple(d for d in range(len(shapes[0])) if len({s[d] for s in shapes}) > 1)
    if not varying:
        return None
    weights: dict[tuple, float] = {}
    for dims in shapes:
        weights[tuple(dims[d] for d in varying)] = 1.0
    if sizes is not None and len(varying) == 1:
        weighted: Counter = Counter(int(n) for n in sizes)
        if weighted:
            weights = {shape: float(weighted.get(shape[0], 0)) or 1e-9 for shape in weights}
            for n, count in weighted.items():
                weights.setdefault((n,), float(count))
    candidates = schemes(weights)
    return LeafCensus(
        function=function,
        key=key,
        leaf=leaf,
        shapes=shapes,
        compile_s=tuple(s for _, s in parsed),
        varying=varying,
        candidates=tuple(candidates),
        pick=pick(candidates, max_padding),
        simplest=simplest(candidates, max_padding),
        max_padding=max_padding,
    )


def shape_text(dims: tuple) -> str:
    return "[" + ",".join(map(str, dims)) + "]"


def sizes_text(c: LeafCensus, limit: int = 8) -> str:
    """The varying dimensions' sizes seen, shortened: "17 sizes: 25, 26, …, 512"."""
    values = sorted({tuple(s[d] for d in c.varying) for s in c.shapes})
    texts = [str(v[0]) if len(v) == 1 else shape_text(v) for v in values]
    shown = texts if len(texts) <= limit else [*texts[: limit - 2], "…", texts[-1]]
    return f"{len(texts)} size(s): {', '.join(shown)}"


def suggestion_text(c: LeafCensus) -> str:
    """One line: the shapes seen and what the pick (and the simplest scheme) would have cost."""
    dims = ", ".join(map(str, c.varying))
    head = (
        f"{c.function} `{c.leaf}` dim {dims}: {sizes_text(c)}; {len(c.shapes)} compile(s), "
        f"{c.seconds:.3f} s"
    )
    budget = f"the padding budget max_padding={c.max_padding:g} ({100 * c.max_padding:g} % extra)"
    if c.pick is None:
        fewer = [s for s in c.candidates[1:] if s.compiles < c.candidates[0].compiles]
        if not fewer:
            return head + "; no padding compiles fewer times"
        best = min(fewer, key=lambda s: (s.compiles, s.padding))
        return (
            f"{head}; no padding within {budget} compiles fewer times; the fewest compiles "
            f"pad past it: {_scheme_text(c, best)}"
        )
    text = f"{head} → {_scheme_text(c, c.pick)} (within {budget})"
    if c.simplest is not None and c.simplest is not c.pick:
        text += f"; or {_scheme_text(c, c.simplest)}"
    return text


def _scheme_text(c: LeafCensus, s: Scheme) -> str:
    what = (
        s.name
        if not s.name.startswith("buckets")
        else "pad to "
        + (
            ", ".join(map(str, s.buckets[0]))
            if len(s.buckets) == 1
            else str([list(b) for b in s.buckets])
        )
        + " (past the largest: its next multiple)"
    )
    seconds = f", ~{s.compiles * c.mean_compile_s:.3f} s" if c.mean_compile_s is not None else ""
    return f"{what}: {s.compiles} compile(s){seconds}, padding {100 * s.padding:.1f} %"


CENSUS_FRAME_COLUMNS = (
    "function",
    "leaf",
    "dims",
    "shapes_seen",
    "sizes",
    "seconds",
    "scheme",
    "buckets",
    "compiles",
    "padding",
    "seconds_est",
    "code",
    "suggested",
)


def _family(s: Scheme) -> str:
    return s.name.split("(")[0]


def shortlist(
    c: LeafCensus, alternatives: int = 3, max_padding: float = MAX_PADDING
) -> list[Scheme]:
    """The pick, then at most `alternatives` others (each family's best first, within the padding
    budget before past it, fewer compiles before less padding), then "as is" to compare with."""
    as_is, others = c.candidates[0], [s for s in c.candidates[1:] if s is not c.pick]
    ranked = sorted(others, key=lambda s: (s.padding > max_padding + 1e-12, s.compiles, s.padding))
    best_of_family: dict[str, Scheme] = {}
    for s in ranked:
        best_of_family.setdefault(_family(s), s)
    firsts = list(best_of_family.values())
    chosen = (firsts + [s for s in ranked if s not in firsts])[:alternatives]
    return ([c.pick] if c.pick is not None else []) + sorted(chosen, key=ranked.index) + [as_is]


def census_rows(
    found: Iterable[LeafCensus], alternatives: int | None = None, max_padding: float = MAX_PADDING
) -> list[dict]:
    """Rows of `jt.shape_census()`: per leaf, its `shortlist`, or every candidate scheme ("as is"
    first) when `alternatives` is None."""
    rows = []
    for c in found:
        mean = c.mean_compile_s
        shown = c.candidates if alternatives is None else shortlist(c, alternatives, max_padding)
        for s in shown:
            rows.append(
                {
                    "function": c.function,
                    "leaf": c.leaf,
                    "dims": ",".join(map(str, c.varying)),
                    "shapes_seen": len(c.shapes),
                    "sizes": sizes_text(c),
                    "seconds": c.seconds,
                    "scheme": s.name,
                    "buckets": "; ".join(",".join(map(str, b)) for b in s.buckets),
                    "compiles": s.compiles,
                    "padding": s.padding,
                    "seconds_est": None if mean is None else s.compiles * mean,
                    "code": s.code,
                    "suggested": s is c.pick,
                }
            )
    return rows
