"""The interactive trace table: an anywidget whose kernel side sorts, filters and pages a Report.

The kernel is the source of truth: it holds the `Report`, and the browser view (`_widget.js`)
renders one page of rows and one page of a function's history, sending the user's clicks
back as trait changes (sort, filter, toggle, page, selection) or messages (export). Live
tables follow the event log through its `subscribe` API, re-rendering at most every
`THROTTLE_S` seconds (longer when a render is slow, so that rendering takes at most
1/`_MAX_RENDER_SHARE` of the time), so that a storm of retraces sends a few messages, not
thousands, and is not slowed down.
Imported only when a table is first shown (it imports anywidget, ipywidgets and pandas).
"""

from __future__ import annotations

import datetime
import keyword
import os
import pathlib
import time
import weakref

import anywidget
import traitlets as t

from ._log import EventLog, events_frame, export_frame
from ._log import event_eqns
from ._views import Report, change, mimebundle

PAGE_SIZE = 50
THROTTLE_S = 0.25
_MAX_RENDER_SHARE = 20
_HERE = pathlib.Path(__file__).parent
_TEXT_COLUMNS = ("function", "location", "last_cause", "last_leaf")
SORT_COLUMNS = ("function", "location", "traces", "compiles", "eqns", "loop_repeats", "trace_s", "lower_s",
                "compile_s", "total_s", "last_cause", "last_leaf")
_ROW_FIELDS = ("key", "function", "location", "internal", "nested", "traces", "compiles", "eqns", "loop_repeats",
               "trace_s", "lower_s", "compile_s", "total_s", "last_cause", "last_leaf")


def _sorted(rows: list[dict], column: str, descending: bool) -> list[dict]:
    """`rows` ordered by `column`; rows where it is blank come last in either direction."""
    present = [r for r in rows if r.get(column) is not None]
    blank = [r for r in rows if r.get(column) is None]
    if column in _TEXT_COLUMNS:
        present.sort(key=lambda r: str(r[column]).lower(), reverse=descending)
    else:
        present.sort(key=lambda r: r[column], reverse=descending)
    return present + blank


def _history_row(e, slowest_seq) -> dict:
    return {
        "seq": e.seq, "cell": e.cell, "time": e.time.strftime("%H:%M:%S") if e.time is not None else None,
        "trace_number": e.trace_number, "kind": e.kind, "cause": e.cause, "leaf": e.leaf,
        "change": change(e), "explanation": e.explanation, "hint": e.hint, "eqns": event_eqns(e),
        "flops": e.flops if e.flops is not None and e.flops == e.flops else None,
        "cache_hit": e.cache_hit, "trace_s": e.trace_s, "lower_s": e.lower_s, "compile_s": e.compile_s,
        "total_s": e.total_s, "slowest": e.seq == slowest_seq,
    }


class TraceTable(anywidget.AnyWidget):
    """Summary table (one row per function) with sorting, filter, history, export and live updates."""

    _esm = _HERE / "_widget.js"
    _css = _HERE / "_widget.css"

    headline = t.Unicode("").tag(sync=True)
    rows = t.List().tag(sync=True)  # the current page of summary rows
    n_rows = t.Int(0).tag(sync=True)  # rows matching the filter, all pages
    max_compile_s = t.Float(0.0).tag(sync=True)  # scale of the compile-seconds bars
    page = t.Int(0).tag(sync=True)
    page_size = t.Int(PAGE_SIZE).tag(sync=True)
    sort_by = t.Unicode("total_s").tag(sync=True)
    descending = t.Bool(True).tag(sync=True)
    filter = t.Unicode("").tag(sync=True)
    show_all = t.Bool(False).tag(sync=True)  # show JAX-internal and nested functions
    selected = t.Unicode("").tag(sync=True)  # key of the function whose history is open
    history_title = t.Unicode("").tag(sync=True)
    history_note = t.Unicode("").tag(sync=True)
    history = t.List().tag(sync=True)  # the current page of the selected function's events
    history_page = t.Int(0).tag(sync=True)
    history_total = t.Int(0).tag(sync=True)
    variable = t.Unicode("trace_df").tag(sync=True)
    status = t.Unicode("").tag(sync=True)  # what the last export did
    live = t.Bool(False).tag(sync=True)

    def __init__(self, report: Report, **kwargs):
        self._report = report
        self._matching: list[dict] = []
        self._rendering = False
        self._history_key = ""
        self._unsubscribe = None
        self._log: EventLog | None = None
        self._since = 0
        self._seen_seq = -1
        self._pending = False
        self._last_flush = 0.0
        self._interval = THROTTLE_S
        self.changed_since_display = False
        super().__init__(**kwargs)
        self.on_msg(self._on_message)
        self._render()

    # ------------------------------------------------------------- model
    @t.observe("page", "page_size", "sort_by", "descending", "filter", "show_all", "selected", "history_page")
    def _on_view_change(self, _what) -> None:
        self._render()

    def visible_rows(self) -> list[dict]:
        """Every row the filter and the toggle let through, in the table's order (all pages)."""
        return list(self._matching)

    def _render(self) -> None:
        if self._rendering:
            return
        self._rendering = True
        try:
            with self.hold_sync():
                self._render_table()
                self._render_history()
        finally:
            self._rendering = False

    def _render_table(self) -> None:
        shown = [f for f in self._report.functions() if self.show_all or not (f["internal"] or f["nested"])]
        self.headline = self._report.headline(shown, "JAX-internal or nested")
        needle = self.filter.strip().lower()
        if needle:
            shown = [f for f in shown if needle in f["function"].lower() or needle in f["leaves"].lower()]
        column = self.sort_by if self.sort_by in SORT_COLUMNS else "total_s"
        self._matching = _sorted(shown, column, self.descending)
        self.n_rows = len(self._matching)
        self.max_compile_s = max((f["compile_s"] for f in self._matching), default=0.0)
        size = max(1, self.page_size)
        self.page = min(max(0, self.page), max(0, (self.n_rows - 1) // size))
        page = self._matching[self.page * size:(self.page + 1) * size]
        self.rows = [{name: f[name] for name in _ROW_FIELDS} for f in page]

    def _render_history(self) -> None:
        if self.selected != self._history_key:  # another function: its history starts on page 1
            self._history_key, self.history_page = self.selected, 0
        events = self._report.history(self.selected) if self.selected else []
        if not events:
            self.history_title, self.history_note, self.history, self.history_total = "", "", [], 0
            return
        slowest = max(events, key=lambda e: e.total_s)
        size = max(1, self.page_size)
        self.history_total = len(events)
        self.history_page = min(max(0, self.history_page), (len(events) - 1) // size)
        first = events[0]
        self.history_title = f"{first.function} ({first.location}): {len(events)} event(s)"
        position = events.index(slowest)
        self.history_note = (f"slowest: #{slowest.trace_number} {slowest.kind} ({slowest.cause}"
                             f"{' at ' + slowest.leaf if slowest.leaf else ''}), {slowest.total_s:.3f} s, "
                             f"event {position + 1} of {len(events)}")
        page = events[self.history_page * size:(self.history_page + 1) * size]
        self.history = [_history_row(e, slowest.seq) for e in page]

    def _repr_mimebundle_(self, **kwargs):
        """The widget view plus the static text and HTML, for frontends without widgets."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data.update(mimebundle(self._report))
        self.changed_since_display = False
        return data, metadata

    # -------------------------------------------------------------- live
    def follow(self, log: EventLog, since: int = 0) -> None:
        """Add the log's events from seq `since` on, now and as they happen, until `stop`."""
        self.stop()
        self._log, self._since = log, since
        table = weakref.ref(self)  # the log must not keep a closed table alive

        def on_event(event, what: str) -> None:
            live = table()
            if live is None:
                unsubscribe()
            else:
                live._on_event(event, what)

        unsubscribe = log.subscribe(on_event)
        self._unsubscribe = unsubscribe
        self._last_flush = time.monotonic()
        for event in log.events(since):
            self._on_event(event, "append")
        self.live = True
        self.flush()

    def _on_event(self, event, what: str) -> None:
        if event.seq is None or event.seq < self._since:
            return
        if what == "append":
            if event.seq <= self._seen_seq:
                return
            self._seen_seq = event.seq
            self._report.add(event)
        else:
            self._report.touch(event)
        self._pending = True
        if time.monotonic() - self._last_flush >= self._interval:
            self.flush()

    def flush(self) -> None:
        """Show what arrived since the last render (live tables throttle themselves to this)."""
        if not self._pending:
            return
        self._pending = False
        self._last_flush = time.monotonic()
        if self._log is not None:
            self._report.dropped = self._log.dropped if self._since == 0 else 0
            if self._report.n_events > self._log.max_events:  # the log dropped events: follow it
                self._report = Report(self._log.events(self._since), self._report.title,
                                      internal=self._report.internal, dropped=self._report.dropped)
        self.changed_since_display = True
        self._render()
        self._interval = max(THROTTLE_S, _MAX_RENDER_SHARE * (time.monotonic() - self._last_flush))

    def restart(self) -> None:
        """Start over from the log's current content (after a reset)."""
        log = self._log
        if log is None:
            return
        self._report = Report((), self._report.title, internal=self._report.internal)
        self._seen_seq = -1
        self.follow(log, self._since)

    def stop(self) -> None:
        """Stop following the log (after a last render)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self.flush()
        self.live = False

    def close(self) -> None:
        self.stop()
        super().close()

    # ------------------------------------------------------------ export
    def _on_message(self, _widget, content, _buffers) -> None:
        try:
            if content.get("export") == "variable":
                self.export_variable(str(content.get("name", self.variable)))
            elif content.get("export") == "csv":
                self.export_csv()
        except Exception as e:  # report, never raise into the kernel's comm handler
            self.status = f"export failed: {type(e).__name__}: {e}"

    def _visible_events_frame(self):
        events = sorted((e for f in self._matching for e in self._report.history(f["key"])),
                        key=lambda e: e.seq if e.seq is not None else 0)
        return events_frame(events)

    def export_variable(self, name: str) -> str:
        """Put the events of the visible (filtered) functions in the user's variable `name`."""
        from IPython import get_ipython

        shell = get_ipython()
        if not name.isidentifier() or keyword.iskeyword(name):
            self.status = f"not a Python variable name: {name!r}"
        elif shell is None:
            self.status = "no IPython shell to put a variable in"
        else:
            df = self._visible_events_frame()
            shell.user_ns[name] = df
            self.variable = name
            self.status = f"{name} = DataFrame of {len(df)} event(s) of {len(self._matching)} function(s)"
        return self.status

    def export_csv(self, directory: str | os.PathLike | None = None) -> str:
        """Write the events of the visible functions to a new CSV file in `directory` (default: cwd)."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = pathlib.Path(directory or os.getcwd()) / f"jaxtrace-{stamp}.csv"
        df = self._visible_events_frame()
        export_frame(df, str(path))
        self.status = f"wrote {len(df)} event(s) of {len(self._matching)} function(s) to {path}"
        return self.status
