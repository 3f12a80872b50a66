"""One data model (`Report`) and its text and static-HTML renderers (no JAX, no probe).

`Report` aggregates events into one row per function and keeps each function's history;
the text view, the static HTML view and the widget (`_widget.py`) all render it. It can be
built at once or fed event by event (the live widget). Every user-derived string is
escaped in HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterable

from ._log import Event, event_eqns, function_row

_MAX_RETRACES_SHOWN = 20
_MAX_ROWS_SHOWN = 200
_SECONDS = ("trace_s", "lower_s", "compile_s")


class Report:
    """What every view shows: one row per function and each function's history.

    `internal=False` hides JAX's own jitted helpers from `rows`, `notable` and the headline
    (the widget filters `functions()` itself). `add` and `touch` keep it current as events
    arrive or gain fields; rows are re-aggregated lazily, only for the functions touched.
    """

    def __init__(self, events: Iterable[Event] = (), title: str = "", *, internal: bool = False,
                 dropped: int = 0):
        self.title = title
        self.internal = internal
        self.dropped = dropped
        self.n_events = 0
        self._history: dict[str, list[Event]] = {}
        self._rows: dict[str, dict] = {}
        self._dirty: set[str] = set()
        for e in events:
            self.add(e)

    def add(self, event: Event) -> None:
        """Fold in a new event."""
        self._history.setdefault(event.key, []).append(event)
        self._dirty.add(event.key)
        self.n_events += 1

    def touch(self, event: Event) -> None:
        """Note that an event already added gained fields (compile seconds, cache hit)."""
        if event.key in self._history:
            self._dirty.add(event.key)

    def functions(self) -> list[dict]:
        """Every function's summary row (internal ones included), in order of first trace."""
        for key in self._dirty:
            self._rows[key] = function_row(self._history[key])
        self._dirty.clear()
        return [self._rows[key] for key in self._history]

    def history(self, key: str) -> list[Event]:
        """One function's events in the order they happened."""
        return self._history.get(key, [])

    @property
    def rows(self) -> list[dict]:
        """The shown functions, most total seconds first."""
        shown = [f for f in self.functions() if self.internal or not f["internal"]]
        return sorted(shown, key=lambda f: -f["total_s"])

    @property
    def notable(self) -> list[Event]:
        """The shown functions' retraces, and first traces with a hint (an unrolled loop), in order."""
        events = [e for f in self.rows for e in self._history[f["key"]] if e.cause != "first" or e.hint]
        return sorted(events, key=lambda e: e.seq if e.seq is not None else 0)

    def headline(self, rows: list[dict] | None = None, hidden_what: str = "JAX-internal") -> str:
        """One line: counts and seconds of `rows` (default: the shown rows) and what is hidden."""
        rows = self.rows if rows is None else rows
        t = {c: sum(f[c] for f in rows) for c in _SECONDS}
        total = sum(t.values())
        text = (f"{self.title}: {sum(f['traces'] for f in rows)} trace(s), "
                f"{sum(f['compiles'] for f in rows)} compile(s) of {len(rows)} function(s), "
                f"{sum(f['retraces'] for f in rows)} retrace(s); "
                f"{total:.3f} s = trace {t['trace_s']:.3f} + lower {t['lower_s']:.3f} + "
                f"XLA compile {t['compile_s']:.3f}")
        hidden = self.n_events - sum(len(self._history[f["key"]]) for f in rows)
        if hidden:
            text += f" ({hidden} {hidden_what} event(s) hidden)"
        if self.dropped:
            text += f" ({self.dropped} oldest event(s) dropped by the log cap)"
        return text


def change(e: Event) -> str:
    """``before → after`` of an event, or "" when it has neither."""
    if e.before is None and e.after is None:
        return ""
    return f"{e.before} → {e.after}"


def _cause(f: dict) -> str:
    return f"{f['last_cause']} at {f['last_leaf']}" if f["last_leaf"] else str(f["last_cause"] or "")


def render_text(report: Report) -> str:
    rows = report.rows
    lines = [report.headline()]
    if not rows:
        return lines[0] + "\n(no jitted function was traced)"
    with_eqns = any(f["eqns"] is not None for f in rows)
    eqns_head = f" {'eqns':>7}" if with_eqns else ""
    header = (f"{'function':<28} {'traces':>6} {'compiles':>8}{eqns_head} {'trace s':>8} {'lower s':>8} "
              f"{'compile s':>9}  last cause")
    lines += ["", header, "-" * len(header)]
    for f in rows[:_MAX_ROWS_SHOWN]:
        eqns = f" {'' if f['eqns'] is None else f['eqns']:>7}" if with_eqns else ""
        lines.append(f"{f['function'][:28]:<28} {f['traces']:>6} {f['compiles']:>8}{eqns} {f['trace_s']:>8.3f} "
                     f"{f['lower_s']:>8.3f} {f['compile_s']:>9.3f}  {_cause(f)}")
    if len(rows) > _MAX_ROWS_SHOWN:
        lines.append(f"… {len(rows) - _MAX_ROWS_SHOWN} more function(s) in jt.summary()")
    notable = report.notable
    if notable:
        lines += ["", "Retraces and notes:"]
        for e in notable[-_MAX_RETRACES_SHOWN:]:
            cell = f"[{e.cell}] " if e.cell is not None else ""
            leaf = f" `{e.leaf}`" if e.leaf else ""
            what = f": {change(e)}" if change(e) else ""
            lines.append(f"  {cell}{e.function} #{e.trace_number} {e.kind}: {e.cause}{leaf}{what}")
            lines.append(f"      {e.explanation}")
            if e.hint:
                lines.append(f"      hint: {e.hint}")
        if len(notable) > _MAX_RETRACES_SHOWN:
            lines.append(f"  … {len(notable) - _MAX_RETRACES_SHOWN} earlier one(s) in jt.log()")
    return "\n".join(lines)


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


_STYLE = (
    "<style>.jtnb table{border-collapse:collapse;font-size:12px}"
    ".jtnb th,.jtnb td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}"
    ".jtnb td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".jtnb code{background:#f4f4f4;padding:0 3px}.jtnb .hint{color:#555}"
    ".jtnb .bar{display:inline-block;height:8px;background:#e07b39;margin-right:4px}</style>"
)


def render_html(report: Report) -> str:
    rows = report.rows
    parts = [_STYLE, '<div class="jtnb">', f"<p><b>{_e(report.headline())}</b></p>"]
    if rows:
        with_eqns = any(f["eqns"] is not None for f in rows)
        max_compile = max(f["compile_s"] for f in rows) or 1.0
        parts.append("<table><thead><tr><th>function</th><th>location</th><th>traces</th><th>compiles</th>"
                     + ("<th>eqns</th>" if with_eqns else "")
                     + "<th>trace s</th><th>lower s</th><th>compile s</th><th>last cause</th><th>leaf</th>"
                     "</tr></thead><tbody>")
        for f in rows[:_MAX_ROWS_SHOWN]:
            width = int(60 * f["compile_s"] / max_compile)
            eqns = f"<td class='n'>{_e(f['eqns'])}</td>" if with_eqns else ""
            parts.append(
                f"<tr><td><code>{_e(f['function'])}</code></td><td>{_e(f['location'])}</td>"
                f"<td class='n'>{f['traces']}</td><td class='n'>{f['compiles']}</td>{eqns}"
                f"<td class='n'>{f['trace_s']:.3f}</td><td class='n'>{f['lower_s']:.3f}</td>"
                f"<td class='n'><span class='bar' style='width:{width}px'></span>{f['compile_s']:.3f}</td>"
                f"<td>{_e(f['last_cause'])}</td><td><code>{_e(f['last_leaf'])}</code></td></tr>")
        parts.append("</tbody></table>")
        if len(rows) > _MAX_ROWS_SHOWN:
            parts.append(f"<p>… {len(rows) - _MAX_ROWS_SHOWN} more function(s) in <code>jt.summary()</code></p>")
    notable = report.notable
    if notable:
        parts.append("<p><b>Retraces and notes</b></p><table><thead><tr><th>cell</th><th>function</th><th>#</th>"
                     "<th>cause</th><th>leaf</th><th>before → after</th><th>why / hint</th></tr></thead><tbody>")
        for e in notable[-_MAX_RETRACES_SHOWN:]:
            parts.append(
                f"<tr><td class='n'>{_e(e.cell)}</td><td><code>{_e(e.function)}</code></td>"
                f"<td class='n'>{_e(e.trace_number)}</td><td>{_e(e.cause)}</td><td><code>{_e(e.leaf)}</code></td>"
                f"<td><code>{_e(change(e))}</code></td>"
                f"<td>{_e(e.explanation)}<div class='hint'>{_e(e.hint)}</div></td></tr>")
        parts.append("</tbody></table>")
    parts.append("</div>")
    return "".join(parts)


def mimebundle(report: Report) -> dict[str, str]:
    return {"text/plain": render_text(report), "text/html": render_html(report)}
