"""The text and static-HTML renderings of a `Report` (terminal IPython, nbconvert, GitHub).

Both draw the same rows, groups and headline as the widget (`_report`, `_rows`), under the
same column labels, and the same rich text, worded once by `_rows` (the why, explanations and
hints): the text keeps code in backticks, the HTML puts it in `<code>`. The HTML uses the
widget's stylesheet (`_widget.css`, inlined) and its class names. Every user-derived string is
escaped; control characters never reach here raw (the log stores them escaped).
"""

from __future__ import annotations

import functools
import html
import pathlib

from .._core import _format as fmt
from ._report import GROUP_COLUMNS, TABLE_COLUMNS, Column, Report
from ._rows import CACHE_LABEL, HINT_LABEL, GroupText, group_row, group_text, table_row, why_line

MAX_GROUPS_SHOWN = 20
MAX_ROWS_SHOWN = 200
_NUMERIC = ("int", "num", "seconds", "bar")
# Where code may wrap: after "/" or "[", and after a "." that is no decimal point (never inside a
# number:
# `0.0375` stays whole). `_widget.js` splits alike.


@functools.lru_cache(maxsize=1)
def stylesheet() -> str:
    """The one stylesheet of every HTML view (`_widget.css`)."""
    return (pathlib.Path(__file__).parent / "_widget.css").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------- text
def _text_value(column: Column, row: dict) -> str:
    value = row.get(column.name)
    if column.kind in ("seconds", "bar"):
        return fmt.seconds(value)
    return "" if value is None else str(value)


# Columns wider than their `text_width` where a value needs it, up to this; past it, a value keeps
# its tail.
_TEXT_GROWS = {"function": 60, "last_leaf": 40}
_TEXT_LAST = "tests"  # the terminal table's last column (never cut), where shown


def _text_table(rows: list[dict]) -> list[str]:
    columns = sorted(
        (c for c in shown_columns(TABLE_COLUMNS, rows) if c.text_width),
        key=lambda c: c.name == _TEXT_LAST,
    )
    values = [[_text_value(c, r) for c in columns] for r in rows]
    widths = [
        max(
            c.text_width,
            len(c.label),
            min(_TEXT_GROWS.get(c.name, 0), max(map(len, column), default=0)),
        )
        for c, column in zip(columns, zip(*values) if values else [()] * len(columns))
    ]

    def line(texts: list[str]) -> str:
        cells = []
        for c, w, v in zip(columns, widths, texts):
            v = v if c is columns[-1] else fmt.tail(v, w) if c.name in _TEXT_GROWS else v[:w]
            cells.append(v.rjust(w) if c.kind in _NUMERIC else v.ljust(w))
        return " ".join(cells).rstrip()

    header = line([c.label for c in columns])
    return [header, "-" * len(header), *map(line, values)]


def plain_text(spans: list) -> str:
    """Rich text's spans as the terminal shows them: code in backticks."""
    return "".join(f"`{text}`" if style == "code" else text for style, text, *_ in spans)


def group_line(t: GroupText) -> str:
    """The one-line title of a group of retraces: where, which, then its why (`_rows.why_line`)."""
    cells = f"{t.cells} " if t.cells else ""
    tests = f" in {t.tests}" if t.tests else ""
    return f"{cells}{t.function} {t.numbers} {t.kind}{tests}: {plain_text(why_line(t))}"


def render_text(report: Report, *, sections: bool = False) -> str:
    """The text report; with `sections`, also the timeline, the equations per line and the shape
    census (the reports of `python -m jaxtrace_nb report` and pytest; not %%tracewatch)."""
    rows = report.rows()
    lines = [report.headline()]
    if not rows:
        return lines[0] + "\n(no jitted function was traced)"
    lines += ["", *_text_table([table_row(r) for r in rows[:MAX_ROWS_SHOWN]])]
    if len(rows) > MAX_ROWS_SHOWN:
        lines.append(f"… {len(rows) - MAX_ROWS_SHOWN} more function(s) in jt.summary()")
    groups = report.notable()
    if groups:
        lines += ["", "Retraces and notes (repeats grouped by cause and leaf):"]
        for t in map(group_text, groups[-MAX_GROUPS_SHOWN:]):
            lines.append("  " + group_line(t))
            lines.append(f"      {t.explanation}")
            if t.cache:
                lines.append(f"      {CACHE_LABEL}{t.cache}")
            if t.hint:
                lines.append(f"      {HINT_LABEL}{t.hint}")
        if len(groups) > MAX_GROUPS_SHOWN:
            lines.append(f"  … {len(groups) - MAX_GROUPS_SHOWN} earlier group(s) in jt.log()")
    for section in _process_section(report, "text"):
        lines += ["", section]
    if sections:
        from ._where import text_sections

        for section in text_sections(report):
            lines += ["", section]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- HTML
def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


# How the static HTML marks up each style of rich text (`_rows`); `_widget.js` has its own DOM.
_STYLE_MARKUP = {
    "code": ("code", ""),
    "change": ("code", "jtnb-change"),
    "count": ("span", "jtnb-count"),
    "called": ("span", "jtnb-called"),
    "cache": ("span", "jtnb-cache-label"),
}


def _span_html(style: str, text: str, title: str | None = None) -> str:
    tag, css = _STYLE_MARKUP.get(style, ("", ""))
    if not tag:
        return _e(text)
    attributes = (f" class='{css}'" if css else "") + (f" title='{_e(title)}'" if title else "")
    return (
        f"<{tag}{attributes}>"
        f"{fmt.breakable(text) if tag == 'code' or style == 'called' else _e(text)}"
        f"</{tag}>"
    )


def rich_html(blocks: list | None) -> str:
    """Rich text (`_rows`) as escaped HTML: each block a `<div>` of its class, or inline."""
    parts = []
    for css, spans in blocks or ():
        inner = "".join(_span_html(*span) for span in spans)
        parts.append(f"<div class='{_e(css)}'>{inner}</div>" if css else inner)
    return "".join(parts)


def _css(column: Column) -> str:
    """A column's classes, the same in the widget (`_widget.js`): its name, numeric, collapsible."""
    return (
        f"jtnb-c-{column.name}"
        + (" jtnb-n" if column.kind in _NUMERIC else "")
        + (" jtnb-narrow" if column.collapse == "narrow" else "")
    )


def shown_columns(columns: tuple[Column, ...], rows: list[dict]) -> tuple[Column, ...]:
    """`columns` less those left out where empty (`Column.collapse`) that no row has a value of."""
    return tuple(
        c
        for c in columns
        if c.collapse != "empty" or any(r.get(c.name) not in (None, "") for r in rows)
    )


def _cell_html(column: Column, row: dict, scale: float) -> str:
    value, kind = row.get(column.name), column.kind
    full = row.get("full", {}).get(column.name)
    title = f" title='{_e(full)}'" if full else ""
    css = _css(column)
    if kind in ("seconds", "bar"):
        inner = fmt.seconds(value)
        if kind == "bar" and value:
            inner = (
                "<span class='jtnb-bar' "
                f"style='width:{round(80 * value / scale) if scale else 0}px'></span>" + inner
            )
    elif kind == "code":
        inner = f"<code>{fmt.breakable(value)}</code>" if value else ""
    elif kind == "change":
        inner = f"<code class='jtnb-change'>{fmt.breakable(value)}</code>" if value else ""
    elif kind == "rich":
        inner = rich_html(value)
    elif kind == "path":
        inner = fmt.breakable(value)
    else:
        inner = _e(value)
    return f"<td class='{css}'{title}>{inner}</td>"


def _html_table(
    name: str, columns: tuple[Column, ...], rows: list[dict], scale: float = 0.0
) -> str:
    columns = shown_columns(columns, rows)
    head = "".join(
        f"<th class='{_css(c)}' title='{_e(c.title)}'>{_e(c.label)}</th>" for c in columns
    )
    body = "".join(
        "<tr>" + "".join(_cell_html(c, r, scale) for c in columns) + "</tr>" for r in rows
    )
    return (
        f"<div class='jtnb-scroll'><table class='jtnb-table jtnb-{name}'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
    )


def render_html(report: Report) -> str:
    """The static report: the widget's stylesheet, the headline, the table, the groups."""
    rows = [table_row(r) for r in report.rows()]
    parts = [
        f"<style>{stylesheet()}</style><div class='jtnb-static jtnb-root'>",
        f"<div class='jtnb-headline'>{_e(report.headline())}</div>",
    ]
    if rows:
        scale = max((r["compile_s"] or 0.0 for r in rows), default=0.0)
        parts.append(_html_table("summary", TABLE_COLUMNS, rows[:MAX_ROWS_SHOWN], scale))
        if len(rows) > MAX_ROWS_SHOWN:
            parts.append(
                f"<p>… {len(rows) - MAX_ROWS_SHOWN} more function(s) in "
                "<code>jt.summary()</code></p>"
            )
    groups = report.notable()
    if groups:
        parts.append(
            "<div class='jtnb-section'>Retraces and notes (repeats grouped by cause and leaf)</div>"
        )
        parts.append(
            _html_table("groups", GROUP_COLUMNS, [group_row(g) for g in groups[-MAX_GROUPS_SHOWN:]])
        )
    parts.append("</div>")
    # Outside the static copy, which a live table hides: the widget does not show this section.
    parts += [
        f"<div class='jtnb-root'>{section}</div>" for section in _process_section(report, "html")
    ]
    return "".join(parts)


def mimebundle(report: Report) -> dict[str, str]:
    return {"text/plain": render_text(report), "text/html": render_html(report)}


# ----------------------------------------------------------- several processes
def _process_section(report: Report, kind: str) -> list[str]:
    """ "Differs across processes" (found and rendered by `_processes`), when the events come
    from more than one JAX process; [] otherwise or when nothing differs."""
    if len(report.processes()) < 2:
        return []
    from .._diagnosis import _processes

    events = report.all_events()
    diffs = _processes.differences(events)
    live = _processes.live_divergences(events)
    skews = _processes.compile_skew(events)
    if kind == "text":
        sections = (
            _processes.render_live_text(live),
            _processes.render_text_section(diffs),
            _processes.render_skew_text(skews),
        )
    else:
        sections = (
            _processes.render_live_html(live),
            _processes.render_html_section(diffs),
            _processes.render_skew_html(skews),
        )
    return [fmt.short_paths_in(section) for section in sections if section]
