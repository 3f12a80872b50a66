"""Which jitted functions traced differently in different processes of one multi-process run.

Pure Python, no JAX, no pandas needed. Input: the merged events of several processes' logs
(``[e for p in paths for e in _persist.load_events(p)]``), or the DataFrame that
``jt.load([...])`` returns; each event carries `host` and `process` (JAX's process index).

What "the same function" and "the same trace" mean here: a function is matched across
processes by its qualified name and the *file name* it is defined in (not the directory: the
processes of a run may use different checkouts); its trace number *n* is the n-th trace of it
in that process. Only traces of the user's own functions count (JAX's internal helpers and
compiles without a trace are left out). Processes are told apart by ``(host, process)``; a
log holding several runs of one process keeps, per trace number, the latest one.

What is compared at trace number n, exactly (nothing else is claimed):

* **Arguments** (`basis="arguments"`), when the events carry the ``signature`` column (the
  argument leaves of each trace, written by :func:`signature_column`): every argument leaf's
  text (``f32[8,3]`` with its weak type and sharding, a static value's bounded summary,
  ``None``, a container's size), among the processes that have an n-th trace. This tells
  apart any two traces whose cache keys differ in an argument leaf, at trace #1 too. The
  trace context (JAX config, context managers) is not compared.
* **Retrace** (`basis="retrace"`), from the recorded diagnosis of the n-th trace (n >= 2):
  the cause, the leaf and ``before → after``. Used where some process has no n-th trace (its
  value reads ``"(no trace #2)"``, the others' the leaf that made them retrace), and, without
  a signature column, to compare the processes' retraces with each other. Without a
  signature, a difference that every process already had at its first trace and kept (say
  process 1 used batch 4 throughout and process 0 batch 8) is **not** visible this way.
* **Argument bytes** (`basis="argument bytes"`): without a signature column, traces that
  nothing else told apart are compared by the argument bytes XLA reported for their compile.
  Different bytes prove that some argument's shape or dtype differs, but name no leaf
  (`leaf` is None); equal bytes prove nothing (f32[8,3] and f32[4,6] weigh the same).
* **Never traced**: a function that some processes traced and others never did (trace #1,
  ``"(never traced)"`` / ``"traced"``, `leaf` None).

It cannot see: differences in functions no process traced (cache hits), in compiles that
followed no trace (placement, committedness), in values that are not part of the trace key
(array contents), in the trace context, or between processes whose logs were not given.

Beside it, from the same events: the divergences the processes found while they ran (events of
kind ``divergence``, `_divergence`), each once with the logs that hold it (`live_divergences`), and
each function's trace + lower + XLA compile seconds per process (`compile_skew`).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .._core._missing import present
from .._core._vocabulary import EventKind

TITLE = "Differs across processes"
SIGNATURE_COLUMN = "signature"
_SIGNATURE_MAX_CHARS = 1000
# A persisted log's trace keeps more (about 500 array leaves): `jt.precompile` rebuilds a call
# from it, and a cut signature cannot be rebuilt. Only while persisting, only at a trace.
PERSISTED_SIGNATURE_MAX_CHARS = 16_000
_MORE_KEY = "…"
_MAX_SHOWN = 50
_MAX_VALUE_CHARS = 200


class Difference(NamedTuple):
    """One leaf of one function's n-th trace that differs between processes."""

    function: str
    location: str | None  # the function's "file:line" (as the first process that traced it saw it)
    trace_number: int
    leaf: str | None  # the user's path ("x", "opt_state[0].mu['w']"); None when no leaf is known
    values: tuple  # ((process label, value text), ...) in process order, one per process
    basis: str  # "arguments" | "retrace" | "argument bytes": what was compared (module docstring)


# ---------------------------------------------------------------- the column
def signature_column(leaves: Mapping[str, str], max_chars: int = _SIGNATURE_MAX_CHARS) -> str:
    """The text of the ``signature`` column: a JSON object ``{path: leaf text}``.

    `leaves` maps each argument leaf's user path to its short text (``"x": "f32[8,3]"``, a static
    value's bounded summary, ``"None"``, a container's size). The trace context is left out: its
    values include per-process identities (JAX's axis environment) that would differ in every
    process. Bounded: past `max_chars` the remaining leaves are counted under the key ``"…"``.
    """
    items = [(str(k), str(v)) for k, v in leaves.items()]
    out: dict[str, str] = {}
    size = 2
    for i, (key, value) in enumerate(items):
        piece = (
            len(json.dumps(key, ensure_ascii=False))
            + len(json.dumps(value, ensure_ascii=False))
            + 2
        )
        if size + piece > max_chars:
            out[_MORE_KEY] = f"{len(items) - i} more leaves"
            break
        out[key] = value
        size += piece
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def parse_signature_column(text: Any) -> dict[str, str] | None:
    """The ``{path: leaf text}`` of a ``signature`` column value, or None when absent or
    unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


# ---------------------------------------------------------------- the diff
def _rows(events) -> Iterable[Any]:
    if hasattr(events, "itertuples") and hasattr(events, "columns"):  # a DataFrame
        return events.itertuples(index=False)
    return events


def _function_key(e: Any) -> tuple[str, str]:
    key = present(getattr(e, "key", None)) or ""
    location = present(getattr(e, "location", None)) or ""
    filename = key.rsplit("::", 1)[0] if "::" in key else location.rsplit(":", 1)[0]
    return (str(present(e.function)), os.path.basename(filename))


def _labels(places: list[tuple[str | None, int | None]]) -> dict:
    hosts = {h for h, _ in places}
    by_index: dict[int | None, set] = {}
    for h, p in places:
        by_index.setdefault(p, set()).add(h)
    labels = {}
    for h, p in places:
        name = "process ?" if p is None else f"process {p}"
        if len(hosts) > 1 and (len(by_index[p]) > 1 or p is None):
            name += f" ({h})"
        labels[(h, p)] = name
    return labels


def _retrace_text(e: Any) -> str:
    cause = present(e.cause) or "not diagnosed"
    before, after = present(e.before), present(e.after)
    if before is None and after is None:
        return str(cause)
    return f"{before} → {after} ({cause})"


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_VALUE_CHARS else text[: _MAX_VALUE_CHARS - 1] + "…"


def differences(events) -> list[Difference]:
    """Every leaf of a function's n-th trace that differs between the processes in `events`.

    `events`: a list of :class:`~jaxtrace_nb._log._events.Event` (or any objects with the log's
    column names as attributes), or the DataFrame of ``jt.load([...])``. Returns [] when the events
    come from fewer than two processes. What is compared, and what cannot be seen: the module
    docstring. Ordered by function (first traced first), then trace number.
    """
    traces: dict[tuple, dict[tuple, dict[int, Any]]] = {}  # function -> place -> n -> event
    places: list[tuple] = []
    locations: dict[tuple, str | None] = {}
    for e in _rows(events):
        place = (present(getattr(e, "host", None)), present(getattr(e, "process", None)))
        if place[1] is not None:
            place = (place[0], int(place[1]))
        if place not in places:
            places.append(place)
        if present(e.kind) != EventKind.TRACE or bool(present(e.internal)):
            continue
        n = present(e.trace_number)
        if n is None:
            continue
        fkey = _function_key(e)
        locations.setdefault(fkey, present(getattr(e, "location", None)))
        by_place = traces.setdefault(fkey, {})
        by_place.setdefault(place, {})[int(n)] = e  # a later run of the same process wins
    if len(places) < 2:
        return []
    places.sort(key=lambda p: (p[1] is None, p[1] if p[1] is not None else 0, p[0] or ""))
    labels = _labels(places)
    out: list[Difference] = []
    for fkey, by_place in traces.items():
        numbers = sorted({n for per in by_place.values() for n in per})
        for n in numbers:
            row = [(labels[p], by_place.get(p, {}).get(n)) for p in places]
            out.extend(_compare(fkey[0], locations[fkey], n, row))
    return out


def _compare(
    function: str, location: str | None, n: int, row: list[tuple[str, Any]]
) -> list[Difference]:
    traced = [(label, e) for label, e in row if e is not None]
    some_missing = len(traced) < len(row)
    missing = f"(no trace #{n})" if n > 1 else "(never traced)"

    def diff(leaf, values, basis):
        return Difference(
            function, location, n, leaf, tuple((label, _clip(v)) for label, v in values), basis
        )

    found: list[Difference] = []
    # 1. The argument leaves, among the processes that have an n-th trace.
    signatures = {
        label: parse_signature_column(getattr(e, SIGNATURE_COLUMN, None)) for label, e in traced
    }
    compared = len(traced) >= 2 and all(sig is not None for sig in signatures.values())
    if compared:
        leaves: list[str] = []
        for sig in signatures.values():
            leaves += [k for k in sig if k not in leaves]
        for leaf in leaves:
            values = {label: sig.get(leaf, "(no such leaf)") for label, sig in signatures.items()}
            if len(set(values.values())) > 1:
                found.append(
                    diff(
                        leaf, [(label, values.get(label, missing)) for label, _ in row], "arguments"
                    )
                )
    # 2. Processes without an n-th trace, or no signatures: the retraces' own diagnosis.
    if n > 1 and (some_missing or not compared):
        reported = {d.leaf for d in found}
        leaves_seen: list = []
        for _, e in traced:
            if present(e.leaf) not in leaves_seen:
                leaves_seen.append(present(e.leaf))
        for leaf in leaves_seen:
            if leaf in reported:
                continue
            values = []
            for label, e in row:
                if e is None:
                    values.append((label, missing))
                elif present(e.leaf) == leaf:
                    values.append((label, _retrace_text(e)))
                else:
                    other = present(e.leaf)
                    values.append(
                        (
                            label,
                            f"retraced for {present(e.cause) or 'an undiagnosed cause'}"
                            + (f" at `{other}`" if other else ""),
                        )
                    )
            if len({v for _, v in values}) > 1:
                found.append(diff(leaf, values, "retrace"))
    elif n == 1 and some_missing:
        found.append(
            diff(
                None, [(label, missing if e is None else "traced") for label, e in row], "arguments"
            )
        )
    # 3. No signatures and nothing else told them apart: the argument bytes of their compiles.
    if not found and not compared:
        sizes = {label: present(getattr(e, "arg_bytes", None)) for label, e in traced}
        known = [s for s in sizes.values() if s is not None]
        if len(known) == len(traced) >= 2 and len(set(known)) > 1:
            found.append(
                diff(
                    None,
                    [
                        (
                            label,
                            missing
                            if label not in sizes
                            else f"arguments: {int(sizes[label])} bytes",
                        )
                        for label, _ in row
                    ],
                    "argument bytes",
                )
            )
    return found


# ---------------------------------------------------------------- rendering
def _grouped(values: tuple) -> list[tuple[str, str]]:
    """((labels joined, value), ...): processes with the same value on one line."""
    groups: dict[str, list[str]] = {}
    for label, value in values:
        groups.setdefault(value, []).append(label)
    out = []
    for value, labels in groups.items():
        if len(labels) > 1 and all(label.startswith("process ") for label in labels):
            names = "processes " + ", ".join(label[len("process ") :] for label in labels)
        else:
            names = ", ".join(labels)
        out.append((names, value))
    return out


_BASIS_NOTE = {  # shown in the text section; the HTML section's "compared" column says it always
    "arguments": "",
    "retrace": "",
    "argument bytes": "XLA's argument bytes differ: some argument's shape or dtype differs (no "
    "leaf recorded)",
}


_BASIS_HTML = {
    "arguments": "argument leaves",
    "retrace": "the retrace's cause, leaf and before → after",
    "argument bytes": _BASIS_NOTE["argument bytes"],
}


def render_text_section(diffs: list[Difference]) -> str:
    """The "Differs across processes" section as plain text; "" when `diffs` is empty."""
    if not diffs:
        return ""
    lines = [f"{TITLE}:"]
    for d in diffs[:_MAX_SHOWN]:
        leaf = f" `{d.leaf}`" if d.leaf else ""
        where = f" ({d.location})" if d.location else ""
        note = _BASIS_NOTE.get(d.basis, "")
        lines.append(
            f"  {d.function}{where} trace #{d.trace_number}{leaf}"
            + (f" — {note}" if note else "")
            + ":"
        )
        for names, value in _grouped(d.values):
            lines.append(f"      {names}: {value}")
    if len(diffs) > _MAX_SHOWN:
        lines.append(f"  … {len(diffs) - _MAX_SHOWN} more difference(s)")
    return "\n".join(lines)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def render_html_section(diffs: list[Difference]) -> str:
    """The "Differs across processes" section as an HTML fragment (every value escaped); "" when
    empty."""
    if not diffs:
        return ""
    parts = [
        f'<div class="jtnb-processes"><p><b>{_e(TITLE)}</b></p><table><thead><tr><th>function</th>'
        "<th>#</th><th>leaf</th><th>each process</th><th>compared</th></tr></thead><tbody>"
    ]
    for d in diffs[:_MAX_SHOWN]:
        cells = "<br>".join(
            f"{_e(names)}: <code>{_e(value)}</code>" for names, value in _grouped(d.values)
        )
        parts.append(
            f"<tr><td><code>{_e(d.function)}</code><div class='hint'>{_e(d.location)}</div></td>"
            f"<td class='n'>{_e(d.trace_number)}</td><td><code>{_e(d.leaf)}</code></td>"
            f"<td>{cells}</td><td>{_e(_BASIS_HTML.get(d.basis, d.basis))}</td></tr>"
        )
    parts.append("</tbody></table>")
    if len(diffs) > _MAX_SHOWN:
        parts.append(f"<p>… {len(diffs) - _MAX_SHOWN} more difference(s)</p>")
    parts.append("</div>")
    return "".join(parts)


# ---------------------------------------------------------------- found live, and compile skew
LIVE_TITLE = "Diverged across processes, found while the run ran"
SKEW_TITLE = "Trace + compile seconds per process"
_MAX_SKEW_ROWS = 20


class Skew(NamedTuple):
    """One function's trace + lower + XLA compile seconds in each process (None: never traced)."""

    function: str
    location: str | None
    seconds: tuple  # ((process label, seconds or None), ...) in process order

    @property
    def spread(self) -> float:
        known = [s for _, s in self.seconds if s is not None]
        return max(known) - min(known) if known else 0.0


def live_divergences(events) -> list[tuple[str, list[str]]]:
    """The divergences the processes reported while they ran (events of kind ``divergence``), each
    once: (its line, the processes whose log holds it)."""
    found: dict[str, list[str]] = {}
    places = []
    for e in _rows(events):
        if present(e.kind) != EventKind.DIVERGENCE:
            continue
        place = (present(getattr(e, "host", None)), present(getattr(e, "process", None)))
        places.append(place)
        found.setdefault(str(present(e.explanation) or ""), []).append(place)
    labels = _labels(sorted(set(places), key=lambda p: (p[1] is None, p[1] or 0, p[0] or "")))
    return [(line, sorted({labels[p] for p in ps})) for line, ps in found.items()]


def compile_skew(events) -> list[Skew]:
    """Per user function traced in two processes or more, each process's trace + lower + XLA
    compile seconds (its traces and compiles summed), the largest spread first."""
    totals: dict[tuple, dict[tuple, float]] = {}
    places: list[tuple] = []
    locations: dict[tuple, str | None] = {}
    for e in _rows(events):
        place = (present(getattr(e, "host", None)), present(getattr(e, "process", None)))
        if place[1] is None:
            continue
        place = (place[0], int(place[1]))
        if place not in places:
            places.append(place)
        if present(e.kind) == EventKind.DIVERGENCE or bool(present(e.internal)):
            continue
        seconds = [present(getattr(e, c, None)) for c in ("trace_s", "lower_s", "compile_s")]
        seconds = [float(s) for s in seconds if s is not None]
        fkey = _function_key(e)
        locations.setdefault(fkey, present(getattr(e, "location", None)))
        per = totals.setdefault(fkey, {})
        per[place] = per.get(place, 0.0) + sum(seconds)
    if len(places) < 2:
        return []
    places.sort(key=lambda p: (p[1], p[0] or ""))
    labels = _labels(places)
    out = [
        Skew(fkey[0], locations[fkey], tuple((labels[p], per.get(p)) for p in places))
        for fkey, per in totals.items()
        if len(per) >= 2
    ]
    out.sort(key=lambda s: -s.spread)
    return out


def _seconds(value) -> str:
    return "—" if value is None else f"{value:.3f}"


def render_live_text(found: list[tuple[str, list[str]]]) -> str:
    if not found:
        return ""
    lines = [f"{LIVE_TITLE}:"]
    for line, labels in found[:_MAX_SHOWN]:
        lines.append(f"  {line.removeprefix('jaxtrace_nb: ')}")
        lines.append(f"      in the logs of {', '.join(labels)}")
    return "\n".join(lines)


def render_live_html(found: list[tuple[str, list[str]]]) -> str:
    if not found:
        return ""
    items = "".join(
        f"<li><code>{_e(line.removeprefix('jaxtrace_nb: '))}</code>"
        f"<div class='hint'>in the logs of {_e(', '.join(labels))}</div></li>"
        for line, labels in found[:_MAX_SHOWN]
    )
    return f'<div class="jtnb-processes"><p><b>{_e(LIVE_TITLE)}</b></p><ul>{items}</ul></div>'


def render_skew_text(skews: list[Skew]) -> str:
    if not skews:
        return ""
    lines = [f"{SKEW_TITLE} (the slowest process is the one the others wait for):"]
    for s in skews[:_MAX_SKEW_ROWS]:
        cells = ", ".join(f"{label} {_seconds(v)}" for label, v in s.seconds)
        lines.append(f"  {s.function}: {cells} (spread {s.spread:.3f} s)")
    return "\n".join(lines)


def render_skew_html(skews: list[Skew]) -> str:
    if not skews:
        return ""
    labels = [label for label, _ in skews[0].seconds]
    head = "".join(f"<th>{_e(label)} s</th>" for label in labels)
    rows = "".join(
        f"<tr><td><code>{_e(s.function)}</code></td>"
        + "".join(f"<td class='n'>{_e(_seconds(v))}</td>" for _, v in s.seconds)
        + f"<td class='n'>{_e(f'{s.spread:.3f}')}</td></tr>"
        for s in skews[:_MAX_SKEW_ROWS]
    )
    return (
        f'<div class="jtnb-processes"><p><b>{_e(SKEW_TITLE)}</b></p><table><thead><tr>'
        f"<th>function</th>{head}<th>spread s</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )
