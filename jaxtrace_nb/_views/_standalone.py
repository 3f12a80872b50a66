"""The self-contained HTML report (`jt.report`), and reading a log from wherever it is.

One file, no network: the widget's stylesheet and view (`_widget.js`) inlined, driven by a
`LocalModel` over the table's state and every function's history embedded as JSON, so that
sorting, filtering and the history work as in the notebook, without a kernel. The static
report (`_views.render_html`) is in the page too, for a reader without JavaScript. A
Content-Security-Policy forbids every request: nothing leaves the machine.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import pathlib

from .._core._missing import python_value
from .._log._events import COLUMNS, Event
from ._report import Report
from ._rows import SPECS, history_view, table_content
from ._text import render_html, stylesheet

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
_PAGE_CSS = (
    "body{margin:16px;background:#fff}h1{font:600 16px system-ui,sans-serif;margin:0 0 8px}"
    ".jtnb-page .jtnb-static{margin-top:12px}"
)


# ------------------------------------------------------------------- sources
def events_from(source) -> list[Event]:
    """Events from `source`: a DataFrame (as `jt.log()` / `jt.load()` give it), a persisted log's
    path, a list of such paths (merged in time order), or events (the live log's: `jt.report`)."""
    if isinstance(source, (str, os.PathLike)):
        source = [source]
    if hasattr(source, "to_dict") and hasattr(source, "columns"):
        return _numbered(_from_frame(source))
    items = list(source)
    if all(isinstance(item, Event) for item in items):
        return items
    from .._log._persist import load_events

    events = [e for path in items for e in load_events(path)]
    events.sort(key=lambda e: (e.time is None, e.time or datetime.datetime.min))
    return _numbered(events)


def _numbered(events: list[Event]) -> list[Event]:
    """Number merged events in order (each process's log counts from 0)."""
    for i, e in enumerate(events):
        e.seq = i
    return events


def _from_frame(df) -> list[Event]:
    names = [c for c in df.columns if c in COLUMNS]
    return [
        Event(**{name: python_value(record[name]) for name in names})
        for record in df.to_dict("records")
    ]


def source_title(source) -> str:
    """A short name for where the events came from."""
    if isinstance(source, (str, os.PathLike)):
        return os.path.basename(os.fspath(source))
    if (
        isinstance(source, (list, tuple))
        and source
        and all(isinstance(s, (str, os.PathLike)) for s in source)
    ):
        names = [os.path.basename(os.fspath(s)) for s in source]
        return ", ".join(names) if len(names) <= 4 else f"{len(names)} logs"
    return "jaxtrace_nb session" if source is None else "jaxtrace_nb log"


# ---------------------------------------------------------------------- page
def _script_json(value) -> str:
    """JSON that is safe inside a <script> element."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(report: Report) -> str:
    """The report as one self-contained HTML page."""
    from ._where import html_sections

    # The timeline, the equations per line and the census: drawn once, below the table (not by the
    # view).
    state = {
        **SPECS,
        **table_content(report, timeline_svg=False),
        "timeline_caption": "",
        "show_all": report.internal,
        "sort_by": "total_s",
        "descending": True,
        "filter": "",
        "page": 0,
        "page_size": 50,
        "selected": "",
        "history": {},
        "variable": "",
        "status": "",
        "live": False,
        "exportable": False,
    }
    histories = {row["id"]: history_view(report, row["id"]) for row in report.functions()}
    script = (pathlib.Path(__file__).parent / "_widget.js").read_text(encoding="utf-8")
    if "</script" in script.lower():
        raise ValueError("_widget.js cannot be inlined: it contains '</script'")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='Content-Security-Policy' content=\"{_CSP}\">"
        f"<title>{html.escape(report.title)}</title>"
        f"<style>{stylesheet()}{_PAGE_CSS}</style></head>\n"
        "<body class='jtnb-page jtnb-root'><h1>jaxtrace_nb report</h1>"
        f"<div class='jtnb-note'>written {stamp} · filter, sort by any column, click a function "
        "for its history"
        "</div>\n"
        "<div id='jtnb-app'></div>\n"
        f"{render_html(report)}\n"
        f"<div class='jtnb-where'>{html_sections(report)}</div>\n"
        "<script type='application/json' "
        f"id='jtnb-data'>{_script_json({'state': state, 'histories': histories})}"
        "</script>\n<script type='module'>\n"
        f"{script}\n"
        "const data = JSON.parse(document.getElementById('jtnb-data').textContent);\n"
        "render({ model: new LocalModel(data.state, data.histories), el: "
        "document.getElementById('jtnb-app') });\n"
        "</script></body></html>\n"
    )


def write_report(path, events, *, internal: bool = False, title: str | None = None) -> str:
    """Write the self-contained HTML report of `events` (see `events_from`) to `path`; returns the
    path."""
    report = Report(
        events_from(events),
        f"{title or source_title(events)}: jit traces and compiles",
        internal=internal,
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(page(report))
    return os.fspath(path)
