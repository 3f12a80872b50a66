"""Where compile time goes, as the views show it: equations per source line (`_lineprof`), the
shape census (`_census`) and the timeline (`_timeline`), for the history panel, the reports and
the DataFrames of `jt.compile_profile()` and `jt.shape_census()`.

Equations are the proxy for XLA's seconds: XLA does not report its time per source line
cheaply. A line's bar counts the equations made under it (its own and those of the helpers it
calls); `compile_s_est` shares the compile's seconds out by the line's own equations.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from .._core import _format as fmt
from .._recording._lineprof import OTHER, profile_rows
from ._census import LeafCensus, census, suggestion_text
from ._timeline import caption, svg, timeline

MAX_LINES_SHOWN = 8
MAX_FUNCTIONS_PROFILED = 5  # in a report: the functions with the most compile seconds
PROXY_NOTE = (
    "equations under each line of your code, sub-jaxprs included: a proxy for XLA's compile "
    "seconds (XLA does not report them per line)"
)
CENSUS_NOTE = (
    "each shape compiled once; padding per distinct shape seen "
    "(jt.shape_census(sizes=...) weights it by calls)"
)

PROFILE_FRAME_COLUMNS = (
    "function",
    "trace_number",
    "kind",
    "location",
    "eqns",
    "eqns_incl",
    "share",
    "eqns_total",
    "compile_s",
    "compile_s_est",
    "key",
)


def matches(function: str | None, fn) -> bool:
    """Whether a function's name is `fn`: None (every one), a (qualified) name, or the function."""
    if fn is None:
        return True
    if function is None:
        return False
    if isinstance(fn, str):
        return function == fn or function.endswith("." + fn)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name is not None and function == name


def profile_frame(events: Iterable, fn=None, *, internal: bool = False):
    """One row per (function, trace, source line): the DataFrame of `jt.compile_profile`."""
    import pandas as pd

    records = []
    for e in events:
        if (e.internal and not internal) or not matches(e.function, fn):
            continue
        rows = profile_rows(e.line_profile)
        total = e.eqns_total or sum(r[1] for r in rows)
        compile_s = e.compile_s if e.compile_s is not None and e.compile_s == e.compile_s else None
        for location, own, incl in rows:
            share = own / total if total else None
            records.append(
                (
                    e.function,
                    e.trace_number,
                    e.kind,
                    location,
                    own,
                    incl,
                    share,
                    e.eqns_total,
                    compile_s,
                    None if compile_s is None or share is None else compile_s * share,
                    e.key,
                )
            )
    df = pd.DataFrame.from_records(records, columns=list(PROFILE_FRAME_COLUMNS))
    for col in ("trace_number", "eqns", "eqns_incl", "eqns_total"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("share", "compile_s", "compile_s_est"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    return df


def profiled_event(events: list):
    """The function's trace whose profile the views show: its largest (then latest) one profiled."""
    profiled = [e for e in events if e.line_profile and profile_rows(e.line_profile)]
    if not profiled:
        return None
    return max(profiled, key=lambda e: (e.eqns_total or 0, e.seq if e.seq is not None else 0))


def profile_view(events: list) -> dict | None:
    """A function's bar list (its largest trace's top lines), as the history panel and the
    report draw it: display strings and numbers only; None without a profile."""
    e = profiled_event(events)
    if e is None:
        return None
    rows = profile_rows(e.line_profile)
    total = e.eqns_total or sum(r[1] for r in rows)
    lines = [r for r in rows if r[0] != OTHER][:MAX_LINES_SHOWN]
    other = total - sum(r[1] for r in lines)
    compile_s = (
        f", XLA compile {e.compile_s:.3f} s"
        if e.compile_s is not None and e.compile_s == e.compile_s
        else ""
    )
    return {
        "title": f"where the equations of #{e.trace_number} come from: "
        f"{total} equation(s){compile_s}",
        "note": PROXY_NOTE,
        "rows": [
            {
                "location": fmt.short_path(loc),
                "eqns_incl": incl,
                "eqns": own,
                "share": (incl or own) / total if total else 0.0,
                "text": f"{incl} ({100 * incl / total:.0f} %) · own {own}" if total else f"{incl}",
            }
            for loc, own, incl in lines
        ],
        "other": other if other > 0 else 0,
    }


def census_view(found: list[LeafCensus]) -> list[dict]:
    """The census of one function's leaves, as the history panel draws it."""
    return [
        {
            "leaf": c.leaf,
            "text": fmt.short_paths_in(suggestion_text(c)),
            "code": (c.pick.code if c.pick is not None else ""),
        }
        for c in found
    ]


# ------------------------------------------------------------------ reports
def _profiled_functions(report) -> list[tuple[dict, dict]]:
    out = []
    for row in sorted(report.rows(), key=lambda r: -(r["compile_s"] or 0.0)):
        view = profile_view(report.history(row["key"]))
        if view is not None and view["rows"]:
            out.append((row, view))
        if len(out) >= MAX_FUNCTIONS_PROFILED:
            break
    return out


def text_sections(report) -> list[str]:
    """The timeline, profile and census sections of the text report (CLI, pytest)."""
    events = report.all_events()
    sections = []
    tl = timeline(events, internal=report.internal)
    if tl.marks:
        sections.append(
            f"Compile timeline: {caption(tl)} (drawn in the HTML report; "
            'jt.export("run.trace.json") for Perfetto)'
        )
    profiled = _profiled_functions(report)
    if profiled:
        lines = [f"Where the equations come from ({PROXY_NOTE}):"]
        for row, view in profiled:
            lines.append(
                f"  {row['function']} ({fmt.short_path(row['location'])}): {view['title']}"
            )
            width = max(len(r["location"]) for r in view["rows"])
            for r in view["rows"]:
                bar = "#" * max(1, round(20 * r["share"]))
                lines.append(f"      {r['location'].ljust(width)}  {bar.ljust(20)}  {r['text']}")
        sections.append("\n".join(lines))
    found = census(events, internal=report.internal)
    if found:
        sections.append(
            "\n".join(
                [
                    f"Shape census ({CENSUS_NOTE}):",
                    *(f"  {fmt.short_paths_in(suggestion_text(c))}" for c in found),
                ]
            )
        )
    return sections


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def profile_html(view: dict) -> str:
    rows = "".join(
        f"<tr><td class='jtnb-c-location'><code>{fmt.breakable(r['location'])}</code></td><td "
        "class='jtnb-n'>"
        "<span class='jtnb-bar' "
        f"style='width:{round(120 * r['share'])}px'></span>{_e(r['text'])}</td></tr>"
        for r in view["rows"]
    )
    other = (
        f"<div class='jtnb-note'>{view['other']} equation(s) elsewhere</div>"
        if view["other"]
        else ""
    )
    return (
        f"<div class='jtnb-profile'><div class='jtnb-profile-title'>{_e(view['title'])}</div>"
        "<table class='jtnb-table "
        f"jtnb-profile-table'><tbody>{rows}</tbody></table>{other}</div>"
    )


def html_sections(report) -> str:
    """The timeline (SVG), profile bar lists and census of the self-contained report."""
    events = report.all_events()
    parts = []
    tl = timeline(events, internal=report.internal)
    if tl.marks:
        parts.append(
            "<div class='jtnb-section'>Compile timeline</div>"
            f"<div class='jtnb-note'>{_e(caption(tl))}; "
            "each mark is one compile (area: its seconds; hover for its cause), the "
            "dashed line the "
            "cumulative seconds</div><div class='jtnb-scroll "
            f"jtnb-timeline-box'>{svg(tl)}</div>"
        )
    profiled = _profiled_functions(report)
    if profiled:
        parts.append(
            f"<div class='jtnb-section'>Where the equations come from</div>"
            f"<div class='jtnb-note'>{_e(PROXY_NOTE)}</div>"
        )
        for row, view in profiled:
            parts.append(
                f"<div class='jtnb-profile-function'><code>{_e(row['function'])}</code> "
                f"<span class='jtnb-note'>{_e(fmt.short_path(row['location']))}</span></div>"
                + profile_html(view)
            )
    found = census(events, internal=report.internal)
    if found:
        items = "".join(
            f"<li>{_e(fmt.short_paths_in(suggestion_text(c)))}"
            + (f"<br><code>{_e(c.pick.code)}</code>" if c.pick is not None else "")
            + "</li>"
            for c in found
        )
        parts.append(
            "<div class='jtnb-section'>Shape census</div>"
            f"<div class='jtnb-note'>{_e(CENSUS_NOTE)}</div>"
            f"<ul class='jtnb-census'>{items}</ul>"
        )
    return "".join(parts)
