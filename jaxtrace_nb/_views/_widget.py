"""The interactive trace table: an anywidget over a `Report`.

The kernel holds the `Report` and sends the browser every function's row, formatted
(`_rows.table_row`), the column spec (`_report`), both headlines (internal functions hidden,
shown), and the history of the function the user selects. The view (`_widget.js`) filters,
sorts and pages those rows itself, so the same view serves the self-contained report.
Live tables follow the event log through its `subscribe` API, re-rendering at most every
`THROTTLE_S` seconds (longer when a render is slow, so that rendering takes at most
1/`_MAX_RENDER_SHARE` of the time): a storm of retraces sends a few messages, not thousands.
Imported only when a table is first shown (it imports anywidget, ipywidgets and pandas).
"""

from __future__ import annotations

import datetime
import json
import keyword
import os
import pathlib
import time
import weakref

import anywidget
import traitlets as t

from .._log._events import EventLog
from ._display import display_table
from ._frames import events_frame, export_frame
from ._report import Report
from ._rows import SPECS, history_view, table_content
from ._text import mimebundle

PAGE_SIZE = 50
THROTTLE_S = 0.25
_MAX_RENDER_SHARE = 20
_HERE = pathlib.Path(__file__).parent


class TraceTable(anywidget.AnyWidget):
    """One row per function, with filter, sort, pages, history, export and live updates."""

    _esm = _HERE / "_widget.js"
    _css = _HERE / "_widget.css"

    columns = t.List().tag(sync=True)
    group_columns = t.List().tag(sync=True)
    event_columns = t.List().tag(sync=True)
    headline = t.Unicode("").tag(sync=True)  # internal functions hidden (the visibility rule)
    headline_all = t.Unicode("").tag(sync=True)  # internal functions shown
    rows_json = t.Unicode("[]").tag(
        sync=True
    )  # every function's row (JSON); `hidden` ones show with `show_all`
    timeline_svg = t.Unicode("").tag(
        sync=True
    )  # the compiles over wall time (`_timeline.svg`: escaped SVG)
    timeline_caption = t.Unicode("").tag(sync=True)  # "" without a compile (the view hides the box)
    timeline_open = t.Bool(False).tag(
        sync=True
    )  # the view's timeline box is open: `timeline_svg` is drawn
    # The view's own state, kept here so that a saved notebook reopens as it was left:
    show_all = t.Bool(False).tag(sync=True)
    sort_by = t.Unicode("total_s").tag(sync=True)
    descending = t.Bool(True).tag(sync=True)
    filter = t.Unicode("").tag(sync=True)
    page = t.Int(0).tag(sync=True)
    page_size = t.Int(PAGE_SIZE).tag(sync=True)
    selected = t.Unicode("").tag(
        sync=True
    )  # id (a row's `key`) of the function whose history is open
    history = t.Dict().tag(sync=True)  # that function's groups and events (`_rows.history_view`)
    variable = t.Unicode("trace_df").tag(sync=True)
    status = t.Unicode("").tag(sync=True)  # what the last export did
    live = t.Bool(False).tag(sync=True)
    exportable = t.Bool(True).tag(sync=True)

    def __init__(self, report: Report, **kwargs):
        self._report = report
        self._rendering = False
        self._unsubscribe = None
        self._log: EventLog | None = None
        self._since = 0
        self._seen_seq = -1
        self._pending = False
        self._last_flush = 0.0
        self._interval = THROTTLE_S
        self.changed_since_display = False
        super().__init__(**SPECS, **kwargs)
        self.on_msg(self._on_message)
        self._render()

    @property
    def rows(self) -> list[dict]:
        """Every function's row, as the view receives them."""
        return json.loads(self.rows_json)

    # ------------------------------------------------------------- model
    @t.observe("selected")
    def _on_select(self, _change) -> None:
        self.history = history_view(self._report, self.selected) if self.selected else {}

    @t.observe("timeline_open")
    def _on_timeline(self, change) -> None:
        if change["new"]:
            self._render()

    def _render(self) -> None:
        if self._rendering:
            return
        self._rendering = True
        try:
            with self.hold_sync():
                for name, value in table_content(
                    self._report, timeline_svg=self.timeline_open
                ).items():
                    setattr(self, name, value)
                self._on_select(None)
        finally:
            self._rendering = False

    def _repr_mimebundle_(self, **kwargs):
        """The widget view alone; `_display.display_table` shows the static report next to it."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data["text/plain"] = ""  # the static report's own output carries the text
        return data, metadata

    def _ipython_display_(self) -> None:
        display_table(self)

    def static_bundle(self) -> dict[str, str]:
        """The text and static HTML of the table's current content."""
        self.changed_since_display = False
        return mimebundle(self._report)

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
        for event in log.events(since):  # what is there already: one render, after
            if event.seq is not None and event.seq > self._seen_seq:
                self._seen_seq = event.seq
                self._report.add(event)
                self._pending = True
        self._last_flush = time.monotonic()
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
            dropped = self._log.dropped if self._since == 0 else 0
            if self._report.n_events > self._log.max_events:  # the log dropped events: follow it
                self._report.retain(self._log.events(self._since))
            self._report.dropped = dropped
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
            keys = content.get("keys")
            if content.get("export") == "variable":
                self.export_variable(str(content.get("name", self.variable)), keys)
            elif content.get("export") == "csv":
                self.export_csv(keys=keys)
        except Exception as e:  # report, never raise into the kernel's comm handler
            self.status = f"export failed: {type(e).__name__}: {e}"

    def _events(self, ids) -> tuple[list, int]:
        """The events of the functions `ids` (rows' `key`; default: the shown ones), in order; and
        how many functions."""
        report = self._report
        known = (
            [row["key"] for row in report.rows()]
            if ids is None
            else [k for k in dict.fromkeys(report.key_of(str(i)) for i in ids) if k is not None]
        )
        events = sorted(
            (e for k in known for e in report.history(k)),
            key=lambda e: e.seq if e.seq is not None else 0,
        )
        return events, len(known)

    def export_variable(self, name: str, keys=None) -> str:
        """Put the events of the listed functions (`keys`; default: the shown ones) in the user's
        variable `name`."""
        from IPython import get_ipython

        shell = get_ipython()
        if not name.isidentifier() or keyword.iskeyword(name):
            self.status = f"not a Python variable name: {name!r}"
        elif shell is None:
            self.status = "no IPython shell to put a variable in"
        else:
            events, n = self._events(keys)
            shell.user_ns[name] = events_frame(events)
            self.variable = name
            self.status = f"{name} = DataFrame of {len(events)} event(s) of {n} function(s)"
        return self.status

    def export_csv(self, directory: str | os.PathLike | None = None, keys=None) -> str:
        """Write the events of the listed functions to a new CSV file in `directory` (default:
        cwd)."""
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
        path = pathlib.Path(directory or os.getcwd()) / f"jaxtrace-{stamp}.csv"
        events, n = self._events(keys)
        export_frame(events_frame(events), str(path))
        self.status = f"wrote {len(events)} event(s) of {n} function(s) to {path.name}"
        return self.status
