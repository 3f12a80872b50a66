"""When compile time goes: every compile of a run over wall time, one row per function.

One data model (`timeline`) drawn three ways: an SVG string made here (the widget and the
HTML report insert it: no script, no network, the same picture offline), a matplotlib figure
(`plot`, where matplotlib is installed), and the Trace Event Format (`trace_events`) that
Perfetto and chrome://tracing open. Every text that reaches the SVG is escaped.

A compile is an event with XLA-compile seconds (a trace and its compile) or a compile without
a trace. Its mark starts when its trace started and lasts its trace + lower + compile seconds;
the mark's area grows with those seconds, its colour says the cause. Rows are functions, one
per (host, process, function) for a log of several processes.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from typing import NamedTuple

from .._core import _format as fmt
from .._core._vocabulary import EventKind

MAX_MARKS = 2000  # past this, marks of one row in one pixel column are drawn as one
PLOT_LABEL_CHARS = 40  # of a function's name beside its row in `plot`: its tail past that
CAUSE_COLOURS = {
    "first": "#4c78a8",
    "shape": "#f58518",
    "dtype": "#e45756",
    "weak_type": "#72b7b2",
    "static": "#54a24b",
    "structure": "#b8860b",
    "new_function": "#b279a2",
    "context": "#d6616b",
    "sharding": "#9d755d",
    "unknown": "#8c8c8c",
}
_NO_CAUSE = "#8c8c8c"


class Mark(NamedTuple):
    row: int
    t: float  # start, seconds since the first compile's start
    seconds: float  # trace + lower + compile
    trace_s: float | None
    lower_s: float | None
    compile_s: float | None
    cause: str | None
    leaf: str | None
    number: int | None  # the function's trace number
    count: int = 1  # compiles drawn as this mark (more than 1 only past MAX_MARKS)


class Row(NamedTuple):
    label: str
    function: str
    process: int | None
    host: str | None
    location: str | None
    compiles: int
    seconds: float


class Timeline(NamedTuple):
    t0: float  # epoch seconds of the first compile's start
    span: float  # seconds from t0 to the last compile's end
    total_s: float
    rows: tuple
    marks: tuple
    cumulative: tuple  # ((end, cumulative seconds), ...) in end order

    @property
    def compiles(self) -> int:
        return sum(m.count for m in self.marks)


def _number(value) -> float | None:
    return None if value is None or value != value else float(value)


def is_compile(e) -> bool:
    """An event that is a compile: a trace XLA compiled, or a compile without a trace."""
    return e.compile_s is not None or e.kind == EventKind.COMPILE


def _drawn(events: Iterable, internal: bool) -> list:
    """The compiles among `events` a timeline draws (internal functions' only with `internal`), in
    the order they started."""
    compiles = [
        e for e in events if is_compile(e) and e.time is not None and (internal or not e.internal)
    ]
    return sorted(compiles, key=lambda e: (e.time, e.seq if e.seq is not None else 0))


def _stages(e) -> list:
    """A compile's trace, lower and XLA-compile seconds (None where JAX reported none)."""
    return [_number(e.trace_s), _number(e.lower_s), _number(e.compile_s)]


class _Tally:
    """One row's count and seconds while the timeline is built."""

    __slots__ = ("index", "first", "compiles", "seconds")

    def __init__(self, index: int, first):
        self.index, self.first, self.compiles, self.seconds = index, first, 0, 0.0


def timeline(events: Iterable, *, internal: bool = False) -> Timeline:
    """The compiles among `events` (internal functions' only with `internal`), over wall time."""
    compiles = _drawn(events, internal)
    if not compiles:
        return Timeline(t0=0.0, span=0.0, total_s=0.0, rows=(), marks=(), cumulative=())
    t0 = compiles[0].time.timestamp()
    several = len({(e.host, e.process) for e in compiles}) > 1
    rows: dict[tuple, _Tally] = {}
    marks = []
    for e in compiles:
        key = (
            (e.host, e.process, e.key or e.function)
            if several
            else (None, None, e.key or e.function)
        )
        tally = rows.get(key)
        if tally is None:
            tally = rows[key] = _Tally(len(rows), e)
        trace_s, lower_s, compile_s = stages = _stages(e)
        seconds = sum(s for s in stages if s is not None)
        tally.compiles += 1
        tally.seconds += seconds
        marks.append(
            Mark(
                row=tally.index,
                t=e.time.timestamp() - t0,
                seconds=seconds,
                trace_s=trace_s,
                lower_s=lower_s,
                compile_s=compile_s,
                cause=e.cause,
                leaf=e.leaf,
                number=e.trace_number,
            )
        )
    row_list = []
    for (host, process, _), tally in rows.items():
        e = tally.first
        label = (
            e.function
            if not several
            else f"{e.function} · p{process}" + (f" {host}" if host else "")
        )
        row_list.append(
            Row(
                label=label,
                function=e.function,
                process=process,
                host=host,
                location=e.location,
                compiles=tally.compiles,
                seconds=tally.seconds,
            )
        )
    ends = sorted((m.t + m.seconds, m.seconds) for m in marks)
    cumulative, total = [], 0.0
    for end, seconds in ends:
        total += seconds
        cumulative.append((end, total))
    span = max(end for end, _ in ends)
    return Timeline(
        t0=t0,
        span=span,
        total_s=total,
        rows=tuple(row_list),
        marks=tuple(marks),
        cumulative=tuple(cumulative),
    )


class Span(NamedTuple):
    """One function's compiles as the caption sums them up (`span_of`), kept per function by a
    live report so that its caption costs one step per function, not per event (`spans_caption`)."""

    compiles: int
    rows: frozenset  # the timeline rows its compiles fall in: (host, process, key or function)
    start: float  # epoch seconds: the first compile's start
    end: float  # epoch seconds: the last compile's end
    total_s: float


def span_of(events: Iterable, *, internal: bool = False) -> Span | None:
    """The compiles among `events` that `timeline` would draw, summed up; None without one."""
    compiles, rows, start, end, total = 0, set(), math.inf, -math.inf, 0.0
    for e in _drawn(events, internal):
        seconds = sum(s for s in _stages(e) if s is not None)
        t = e.time.timestamp()
        compiles, total = compiles + 1, total + seconds
        start, end = min(start, t), max(end, t + seconds)
        rows.add((e.host, e.process, e.key or e.function))
    return (
        Span(compiles=compiles, rows=frozenset(rows), start=start, end=end, total_s=total)
        if compiles
        else None
    )


def spans_caption(spans: Iterable[Span | None]) -> str:
    """What `caption(timeline(events))` says, from the `span_of` of each function's events ("" for
    no compile, where `caption` says so)."""
    spans = [s for s in spans if s is not None]
    if not spans:
        return ""
    rows = frozenset().union(
        *(s.rows for s in spans)
    )  # from one process, one row per name all the same
    start = min(s.start for s in spans)
    return _caption_text(
        sum(s.compiles for s in spans),
        len(rows),
        max(s.end for s in spans) - start,
        sum(s.total_s for s in spans),
    )


# ------------------------------------------------------------------- SVG
# The SVG is laid out here, with no browser to measure its texts: each text's width is estimated
# from above (`text_width`) and every position follows from those widths, so that no label meets
# another label or a mark. Sizes in px.
_WIDTH, _ROW_H, _BOTTOM, _PAD = 760, 20, 26, 4
_MAX_R = 9.0  # the largest mark's radius
_LABEL_PX, _SMALL_PX = (
    11,
    10,
)  # font sizes (`_widget.css`): a row's name; its count, the legend and the axes
_LABEL_MAX_W = (
    180.0  # a row's name wider than this keeps its tail (a qualified name's last part says most)
)
_LEGEND_LINE_H = 14
_DASH_W = 16  # the legend's sample of the cumulative line
CUMULATIVE_LEGEND = "cumulative seconds (right)"
# Advance widths in em, from above, of DejaVu Sans (the widest common sans-serif, Chromium's
# system-ui
# on Linux): narrow, lower-case and digits, wide; any other character counts as `_EM_OTHER`
# (capitals
# and signs), one outside ASCII as 1.
_EM = {
    **dict.fromkeys(" ',.:;!|iIjl/\\", 0.34),
    **dict.fromkeys("-()[]ft{}", 0.4),
    "r": 0.42,
    **dict.fromkeys('abcdeghknopqsuvxyz0123456789_*?"', 0.66),
    **dict.fromkeys("%@mwMW#+<=>^~&", 1.0),
}
_EM_OTHER = 0.8


def _em(c: str) -> float:
    return _EM.get(c) or (_EM_OTHER if c < "\x7f" else 1.0)


def text_width(text: str, px: float) -> float:
    """The width of `text` at `px` pixels per em, estimated from above."""
    return px * sum(map(_em, text))


def _fitted(text: str, px: float, width: float) -> str:
    """`text`, or its tail after "…", in at most `width` pixels (by `text_width`)."""
    if text_width(text, px) <= width:
        return text
    used, start = px * _em("…"), len(text)
    while start > 0 and used + px * _em(text[start - 1]) <= width:
        start -= 1
        used += px * _em(text[start])
    return "…" + text[start:]


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = span / ticks
    base = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= raw)


def _e(text) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def _title(tl: Timeline, m: Mark) -> str:
    row = tl.rows[m.row]
    if m.count > 1:
        return f"{row.function}: {m.count} compiles, {m.seconds:.3f} s in all, from +{m.t:.3f} s"
    parts = [f"{row.function} #{m.number}" if m.number is not None else row.function]
    if m.cause:
        parts.append(f"{m.cause}" + (f" at {m.leaf}" if m.leaf else ""))
    stages = " + ".join(
        f"{name} {v:.3f}"
        for name, v in (("trace", m.trace_s), ("lower", m.lower_s), ("compile", m.compile_s))
        if v is not None
    )
    parts.append(f"{m.seconds:.3f} s = {stages}" if stages else f"{m.seconds:.3f} s")
    parts.append(f"at +{m.t:.3f} s")
    return " · ".join(parts)


def _merged(tl: Timeline, px: float) -> list[Mark]:
    """Past `MAX_MARKS`, one mark per row and pixel column (seconds summed, compiles counted)."""
    if len(tl.marks) <= MAX_MARKS:
        return list(tl.marks)
    cells: dict[tuple, Mark] = {}
    for m in tl.marks:
        key = (m.row, int(m.t / px))
        old = cells.get(key)
        cells[key] = (
            m
            if old is None
            else old._replace(
                seconds=old.seconds + m.seconds,
                count=old.count + m.count,
                cause=old.cause if old.cause == m.cause else None,
            )
        )
    return list(cells.values())


def _legend_items(tl: Timeline) -> list[tuple[str, str]]:
    """(cause shown, colour) of the causes present, then the cumulative line's ("" for its
    colour)."""
    causes = [
        (cause or "not diagnosed", CAUSE_COLOURS.get(cause, _NO_CAUSE))
        for cause in dict.fromkeys(m.cause for m in tl.marks)
    ]
    return causes + ([(CUMULATIVE_LEGEND, "")] if tl.total_s > 0 else [])


def _legend_item_w(text: str, colour: str) -> float:
    return (2 * _PAD + 3 if colour else _DASH_W + _PAD) + text_width(text, _SMALL_PX)


class _Plot(NamedTuple):
    """The SVG's geometry, from its texts' widths: the rows' names and counts, left of the plot
    (which starts a mark's radius past the counts, so that a mark at 0 s clears them); the
    cumulative total, right of the plot (a mark's radius past it); the legend above, wrapped."""

    width: int
    labels: tuple  # each row's name, fitted to `_LABEL_MAX_W`
    counts: tuple  # each row's "×N S s"
    count_right: float  # where the counts end (right-aligned)
    left: float  # the plot's x at 0 s
    plot_w: float
    top: float  # the first row's top: under the legend
    plot_h: float
    span: float
    legend: tuple  # (x, baseline y, text, colour) per legend item
    total_x: float  # where the cumulative total's label starts

    @property
    def axis_y(self) -> float:
        return self.top + self.plot_h

    @property
    def height(self) -> float:
        return self.axis_y + _BOTTOM

    def x(self, t: float) -> float:
        return self.left + self.plot_w * t / self.span


def layout(tl: Timeline, width: int = _WIDTH) -> _Plot:
    """Where everything of `tl`'s SVG goes (see `_Plot`)."""
    labels = tuple(_fitted(r.label, _LABEL_PX, _LABEL_MAX_W) for r in tl.rows)
    counts = tuple(f"×{r.compiles} {r.seconds:.2f} s" for r in tl.rows)
    count_right = (
        _PAD
        + max(text_width(t, _LABEL_PX) for t in labels)
        + 2 * _PAD
        + max(text_width(t, _SMALL_PX) for t in counts)
    )
    left = count_right + _PAD + _MAX_R
    total_w = text_width(f"{tl.total_s:.2f} s", _SMALL_PX) if tl.total_s > 0 else 0.0
    plot_w = max(width - left - _MAX_R - 2 * _PAD - total_w, 1.0)
    legend, x, line = [], left, 0
    for text, colour in _legend_items(tl):
        item_w = _legend_item_w(text, colour)
        if x > left and x + item_w > width:
            x, line = left, line + 1
        legend.append((x, 13 + line * _LEGEND_LINE_H, text, colour))
        x += item_w + 3 * _PAD
    top = 13 + line * _LEGEND_LINE_H + 9
    return _Plot(
        width=width,
        labels=labels,
        counts=counts,
        count_right=count_right,
        left=left,
        plot_w=plot_w,
        top=top,
        plot_h=_ROW_H * len(tl.rows),
        span=tl.span if tl.span > 0 else 1e-3,
        legend=tuple(legend),
        total_x=left + plot_w + _MAX_R + _PAD,
    )


def svg(tl: Timeline, width: int = _WIDTH) -> str:
    """The timeline as one SVG element (a string; every text escaped), or "" with no compile."""
    if not tl.marks:
        return ""
    plot = layout(tl, width)
    label = _e(caption(tl))
    out = [
        "<svg xmlns='http://www.w3.org/2000/svg' class='jtnb-timeline' "
        f"width='{width}' height='{plot.height:g}' "
        f"viewBox='0 0 {width} {plot.height:g}' role='img' "
        f"aria-label='{label}'>",
        f"<title>{label}</title>",
    ]
    out += _svg_legend(plot)
    out += _svg_rows(tl, plot)
    out += _svg_axis(plot)
    out += _svg_cumulative(tl, plot)
    out += _svg_marks(tl, plot)
    out.append("</svg>")
    return "".join(out)


def _svg_legend(plot: _Plot) -> list[str]:
    """The causes present, each with its colour, and the cumulative line's dashes."""
    out = []
    for x, y, text, colour in plot.legend:
        if colour:
            out.append(
                f"<circle cx='{x + _PAD:.1f}' cy='{y - 4}' r='4' fill='{colour}'/>"
                f"<text class='jtnb-tl-legend' x='{x + 2 * _PAD + 3:.1f}' "
                f"y='{y}'>{_e(text)}</text>"
            )
        else:
            out.append(
                f"<line class='jtnb-tl-cumulative' x1='{x:.1f}' y1='{y - 4}' "
                f"x2='{x + _DASH_W - 2:.1f}' y2='{y - 4}'/>"
                f"<text class='jtnb-tl-legend' x='{x + _DASH_W + _PAD:.1f}' "
                f"y='{y}'>"
                f"{_e(text)}</text>"
            )
    return out


def _svg_rows(tl: Timeline, plot: _Plot) -> list[str]:
    """A row per function: its label, its compiles and their seconds; every other row striped."""
    out = []
    for i, row in enumerate(tl.rows):
        y = plot.top + i * _ROW_H
        if i % 2:
            out.append(
                f"<rect class='jtnb-tl-stripe' x='0' y='{y:g}' width='{plot.width}' "
                f"height='{_ROW_H}'/>"
            )
        out.append(
            f"<text class='jtnb-tl-label' x='{_PAD}' y='{y + 14:g}'><title>{_e(row.label)} "
            f"({_e(fmt.short_path(row.location))})</title>{_e(plot.labels[i])}</text>"
            f"<text class='jtnb-tl-count' x='{plot.count_right:.1f}' y='{y + 14:g}' "
            "text-anchor='end'>"
            f"{_e(plot.counts[i])}</text>"
        )
    return out


def _svg_axis(plot: _Plot) -> list[str]:
    """The time axis, with a tick every round step."""
    x, axis_y, step = plot.x, plot.axis_y, _nice_step(plot.span)
    out = [
        f"<line class='jtnb-tl-axis' x1='{plot.left:.1f}' y1='{axis_y:g}' "
        f"x2='{plot.left + plot.plot_w:.1f}' y2='{axis_y:g}'/>"
    ]
    t = 0.0
    while t <= plot.span * 1.0001:
        out.append(
            f"<line class='jtnb-tl-tick' x1='{x(t):.1f}' y1='{plot.top:g}' x2='{x(t):.1f}' "
            f"y2='{axis_y + 3:g}'/><text class='jtnb-tl-tick-label' x='{x(t):.1f}' "
            f"y='{axis_y + 14:g}' "
            f"text-anchor='middle'>{t:g} s</text>"
        )
        t += step
    return out


def _svg_cumulative(tl: Timeline, plot: _Plot) -> list[str]:
    """The cumulative compile seconds: a step line from 0 at the time axis to the total at the top,
    which a label right of the plot gives (the legend names the line)."""
    if tl.total_s <= 0:
        return []
    x, axis_y = plot.x, plot.axis_y
    points = [f"{plot.left:.1f},{axis_y:g}"]
    level = axis_y
    for end, total in tl.cumulative:
        new = axis_y - plot.plot_h * total / tl.total_s
        points.append(f"{x(end):.1f},{level:.1f} {x(end):.1f},{new:.1f}")
        level = new
    points.append(f"{plot.left + plot.plot_w:.1f},{level:.1f}")
    return [
        f"<polyline class='jtnb-tl-cumulative' points='{' '.join(points)}'/>"
        f"<text class='jtnb-tl-tick-label jtnb-tl-total' x='{plot.total_x:.1f}' "
        f"y='{plot.top + 10:g}'>"
        f"{tl.total_s:.2f} s</text>"
    ]


def _svg_marks(tl: Timeline, plot: _Plot) -> list[str]:
    """A mark per compile (merged where they would overlap): area by seconds, colour by cause."""
    out = []
    biggest = max(m.seconds for m in tl.marks) or 1.0
    for m in _merged(tl, plot.span / plot.plot_w):
        cx, cy = plot.x(m.t), plot.top + m.row * _ROW_H + _ROW_H / 2
        r = max(2.5, _MAX_R * math.sqrt(m.seconds / biggest)) if biggest > 0 else 2.5
        colour = CAUSE_COLOURS.get(m.cause, _NO_CAUSE)
        bar = plot.x(m.t + m.seconds) - cx
        duration = (
            f"<rect x='{cx:.1f}' y='{cy - 1.5:.1f}' width='{bar:.1f}' height='3' fill='{colour}'/>"
            if bar >= 2
            else ""
        )
        out.append(
            f"<g class='jtnb-mark' data-count='{m.count}'>{duration}"
            f"<circle cx='{cx:.1f}' cy='{cy:.1f}' r='{r:.1f}' "
            f"fill='{colour}' fill-opacity='0.75' stroke='{colour}'/>"
            f"<title>{_e(_title(tl, m))}</title></g>"
        )
    return out


def _caption_text(compiles: int, rows: int, span: float, total_s: float) -> str:
    return (
        f"{compiles} compile(s) of {rows} function(s) over {span:.2f} s of wall time; "
        f"{total_s:.2f} s of trace + lower + compile in all"
    )


def caption(tl: Timeline) -> str:
    """One line saying what the timeline holds."""
    return (
        _caption_text(tl.compiles, len(tl.rows), tl.span, tl.total_s)
        if tl.marks
        else "no compile recorded"
    )


# ----------------------------------------------------------- Trace Event Format
def trace_events(events: Iterable, *, internal: bool = False) -> dict:
    """The compiles as a Trace Event Format document (JSON Object Format), which Perfetto and
    chrome://tracing open: one process per (host, JAX process), one thread per function, an
    ``X`` event per stage (trace, lower, compile) of each compile, and a counter of cumulative
    seconds per process. Times are integer nanoseconds written as microseconds (``ns / 1000``):
    stages of one compile touch exactly, never overlap by a rounding."""
    compiles = _drawn(events, internal)
    t0 = compiles[0].time.timestamp() if compiles else 0.0
    meta, out = [], []
    pids: dict[tuple, int] = {}
    tids: dict[tuple, int] = {}
    ends: dict[
        tuple, int
    ] = {}  # (pid, tid) -> the last slice's end (ns): a function's slices never overlap
    cumulative: dict[int, float] = {}
    for e in compiles:
        place = (e.host or "", e.process)
        pid = pids.get(place)
        if pid is None:
            pid = pids[place] = len(pids) + 1
            name = f"process {e.process if e.process is not None else '?'}" + (
                f" on {e.host}" if e.host else ""
            )
            meta += [
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": pid,
                    "tid": 0,
                    "args": {"sort_index": pid},
                },
            ]
        thread = (pid, e.key or e.function)
        tid = tids.get(thread)
        if tid is None:
            tid = tids[thread] = sum(1 for p, _ in tids if p == pid) + 1
            meta += [
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": e.function},
                },
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": tid,
                    "args": {"sort_index": tid},
                },
            ]
        ns = max(round((e.time.timestamp() - t0) * 1e9), ends.get((pid, tid), 0))
        args = {
            "function": e.function,
            "location": fmt.short_path(e.location),
            "trace_number": e.trace_number,
            "cause": e.cause,
            "leaf": e.leaf,
        }
        seconds = 0.0
        for stage, value in zip(("trace", "lower", "compile"), _stages(e)):
            if value is None:
                continue
            dur = max(round(value * 1e9), 1)
            out.append(
                {
                    "ph": "X",
                    "name": f"{stage} {e.function}",
                    "cat": stage,
                    "pid": pid,
                    "tid": tid,
                    "ts": ns / 1000,
                    "dur": dur / 1000,
                    "args": {**args, "seconds": value},
                }
            )
            ns += dur
            seconds += value
        ends[(pid, tid)] = ns
        total = cumulative[pid] = cumulative.get(pid, 0.0) + seconds
        # Perfetto titles a counter's track "<name> <argument>": "cumulative compile seconds".
        out.append(
            {
                "ph": "C",
                "name": "cumulative compile",
                "pid": pid,
                "tid": 0,
                "ts": ns / 1000,
                "args": {"seconds": round(total, 6)},
            }
        )
    return {
        "traceEvents": meta + out,
        "displayTimeUnit": "ms",
        "otherData": {"producer": "jaxtrace_nb", "t0_epoch_s": t0, "compiles": len(compiles)},
    }


def write_trace_events(path, events: Iterable, *, internal: bool = False) -> str:
    import os

    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace_events(events, internal=internal), f, ensure_ascii=False, allow_nan=False)
    return os.fspath(path)


# ------------------------------------------------------------ matplotlib
def plot(tl: Timeline, ax=None):
    """The timeline on a matplotlib Axes (made when `ax` is None); returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:  # laid out at each draw, so that a saved figure keeps its labels
        _, ax = plt.subplots(figsize=(9, 1.2 + 0.35 * max(1, len(tl.rows))), layout="constrained")
    if not tl.marks:
        ax.set_axis_off()
        ax.text(0.5, 0.5, "no compile recorded", ha="center", va="center", transform=ax.transAxes)
        return ax
    biggest = max(m.seconds for m in tl.marks) or 1.0
    for cause in dict.fromkeys(m.cause for m in tl.marks):
        ms = [m for m in tl.marks if m.cause == cause]
        ax.scatter(
            [m.t for m in ms],
            [m.row for m in ms],
            s=[12 + 300 * m.seconds / biggest for m in ms],
            color=CAUSE_COLOURS.get(cause, _NO_CAUSE),
            alpha=0.75,
            label=cause or "not diagnosed",
            edgecolors="none",
        )
        for m in ms:
            ax.plot(
                [m.t, m.t + m.seconds],
                [m.row, m.row],
                color=CAUSE_COLOURS.get(cause, _NO_CAUSE),
                lw=2,
            )
    ax.set_yticks(range(len(tl.rows)))
    ax.set_yticklabels(
        [f"{fmt.tail(r.label, PLOT_LABEL_CHARS)}  ×{r.compiles} {r.seconds:.2f} s" for r in tl.rows]
    )
    ax.set_ylim(len(tl.rows) - 0.5, -0.5)
    ax.set_xlabel("seconds since the first compile")
    ax.set_title(caption(tl).replace("; ", ";\n"), fontsize=9)
    twin = ax.twinx()
    twin.step(
        [0.0] + [end for end, _ in tl.cumulative],
        [0.0] + [total for _, total in tl.cumulative],
        where="post",
        color="#555555",
        ls="--",
        lw=1,
    )
    twin.set_ylabel("cumulative seconds")
    twin.set_ylim(0, tl.total_s * 1.05 if tl.total_s > 0 else 1)
    ax.legend(loc="lower right", fontsize=8, markerscale=0.6)
    return ax
