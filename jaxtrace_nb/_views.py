"""Text and static-HTML views of a list of events (no JAX, no probe).

Both render the same data model: a per-function summary and the retraces with their
cause, changed leaf and before → after. Every user-derived string is escaped in HTML.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from ._log import Event

_MAX_RETRACES_SHOWN = 20


class Report:
    """What a view shows: built once from events, rendered to text or HTML."""

    def __init__(self, events: Sequence[Event], title: str, *, internal: bool = False, dropped: int = 0):
        shown = [e for e in events if internal or not e.internal]
        self.title = title
        self.hidden = len(events) - len(shown)
        self.dropped = dropped
        self.functions: dict[str, dict] = {}
        self.retraces: list[Event] = []
        for e in shown:
            f = self.functions.setdefault(e.key, {
                "function": e.function, "location": e.location, "traces": 0, "compiles": 0,
                "trace_s": 0.0, "lower_s": 0.0, "compile_s": 0.0, "last": None,
            })
            if e.kind == "trace":
                f["traces"] += 1
            if e.compile_s is not None:
                f["compiles"] += 1
            for col in ("trace_s", "lower_s", "compile_s"):
                value = getattr(e, col)
                if value is not None and value == value:
                    f[col] += value
            if e.cause != "first":
                f["last"] = e
                self.retraces.append(e)
        self.rows = sorted(self.functions.values(),
                           key=lambda f: -(f["trace_s"] + f["lower_s"] + f["compile_s"]))
        self.totals = {c: sum(f[c] for f in self.rows) for c in ("trace_s", "lower_s", "compile_s")}
        self.n_traces = sum(f["traces"] for f in self.rows)
        self.n_compiles = sum(f["compiles"] for f in self.rows)

    def headline(self) -> str:
        t = self.totals
        total = t["trace_s"] + t["lower_s"] + t["compile_s"]
        text = (f"{self.title}: {self.n_traces} trace(s), {self.n_compiles} compile(s) of "
                f"{len(self.rows)} function(s), {len(self.retraces)} retrace(s); "
                f"{total:.3f} s = trace {t['trace_s']:.3f} + lower {t['lower_s']:.3f} + "
                f"XLA compile {t['compile_s']:.3f}")
        if self.hidden:
            text += f" ({self.hidden} JAX-internal event(s) hidden)"
        if self.dropped:
            text += f" ({self.dropped} oldest event(s) dropped by the log cap)"
        return text


def _change(e: Event) -> str:
    if e.before is None and e.after is None:
        return ""
    return f"{e.before} → {e.after}"


def render_text(report: Report) -> str:
    lines = [report.headline()]
    if not report.rows:
        return lines[0] + "\n(no jitted function was traced)"
    header = f"{'function':<28} {'traces':>6} {'compiles':>8} {'trace s':>8} {'lower s':>8} {'compile s':>9}  last cause"
    lines += ["", header, "-" * len(header)]
    for f in report.rows:
        last = f["last"]
        cause = f"{last.cause} at {last.leaf}" if last is not None and last.leaf else (last.cause if last else "")
        lines.append(f"{f['function'][:28]:<28} {f['traces']:>6} {f['compiles']:>8} {f['trace_s']:>8.3f} "
                     f"{f['lower_s']:>8.3f} {f['compile_s']:>9.3f}  {cause}")
    if report.retraces:
        lines += ["", "Retraces:"]
        for e in report.retraces[-_MAX_RETRACES_SHOWN:]:
            cell = f"[{e.cell}] " if e.cell is not None else ""
            leaf = f" `{e.leaf}`" if e.leaf else ""
            change = f": {_change(e)}" if _change(e) else ""
            lines.append(f"  {cell}{e.function} #{e.trace_number} {e.kind}: {e.cause}{leaf}{change}")
            lines.append(f"      {e.explanation}")
            if e.hint:
                lines.append(f"      hint: {e.hint}")
        if len(report.retraces) > _MAX_RETRACES_SHOWN:
            lines.append(f"  … {len(report.retraces) - _MAX_RETRACES_SHOWN} earlier retrace(s) in jt.log()")
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
    parts = [_STYLE, '<div class="jtnb">', f"<p><b>{_e(report.headline())}</b></p>"]
    if report.rows:
        max_compile = max((f["compile_s"] for f in report.rows), default=0.0) or 1.0
        parts.append("<table><thead><tr><th>function</th><th>location</th><th>traces</th><th>compiles</th>"
                     "<th>trace s</th><th>lower s</th><th>compile s</th><th>last cause</th><th>leaf</th>"
                     "</tr></thead><tbody>")
        for f in report.rows:
            last = f["last"]
            width = int(60 * f["compile_s"] / max_compile)
            parts.append(
                f"<tr><td><code>{_e(f['function'])}</code></td><td>{_e(f['location'])}</td>"
                f"<td class='n'>{f['traces']}</td><td class='n'>{f['compiles']}</td>"
                f"<td class='n'>{f['trace_s']:.3f}</td><td class='n'>{f['lower_s']:.3f}</td>"
                f"<td class='n'><span class='bar' style='width:{width}px'></span>{f['compile_s']:.3f}</td>"
                f"<td>{_e(last.cause if last else '')}</td><td><code>{_e(last.leaf if last else '')}</code></td></tr>")
        parts.append("</tbody></table>")
    if report.retraces:
        parts.append("<p><b>Retraces</b></p><table><thead><tr><th>cell</th><th>function</th><th>#</th>"
                     "<th>cause</th><th>leaf</th><th>before → after</th><th>why / hint</th></tr></thead><tbody>")
        for e in report.retraces[-_MAX_RETRACES_SHOWN:]:
            parts.append(
                f"<tr><td class='n'>{_e(e.cell)}</td><td><code>{_e(e.function)}</code></td>"
                f"<td class='n'>{_e(e.trace_number)}</td><td>{_e(e.cause)}</td><td><code>{_e(e.leaf)}</code></td>"
                f"<td><code>{_e(_change(e))}</code></td>"
                f"<td>{_e(e.explanation)}<div class='hint'>{_e(e.hint)}</div></td></tr>")
        parts.append("</tbody></table>")
    parts.append("</div>")
    return "".join(parts)


def mimebundle(report: Report) -> dict[str, str]:
    return {"text/plain": render_text(report), "text/html": render_html(report)}
