"""What the pytest plugin (`_pytest_plugin`) reports outside the test's own failure text: JUnit XML
properties, GitHub Actions annotations at the user's line, the traceback of a `RetraceError` cut at
that line, the message of a guard the test swallowed, and the session's report file.
"""

from __future__ import annotations

import os

from .._core._vocabulary import EventKind


def add_properties(item, report, properties: list) -> None:
    """JUnit XML properties of the test (pytest writes the test's own, `item.user_properties`, as
    its teardown report carries them: the way of ``record_property``), also on this report."""
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)


def end_at_user_line(excinfo) -> tuple[str, int] | None:
    """Make pytest's traceback of a `RetraceError` end at the user's line (leaving out the library
    frames after it: a jit wrapper such as ``nnx.jit``'s, JAX's own when its filtering is off,
    ours); returns that line (file, 1-based), or None when the error was raised after the test
    returned.

    A new chain of traceback entries (`user_traceback`), not a slice of pytest's: pytest cuts a
    traceback at the test function by following the raw entries' links from there."""
    from ._watch import library_frame, user_traceback

    tb = user_traceback(excinfo.tb)
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None or library_frame(last.tb_frame):
        return None
    excinfo.traceback = type(excinfo.traceback)(tb)
    return last.tb_frame.f_code.co_filename, last.tb_lineno


def split_site(site: str) -> tuple[str, int] | None:
    """("file", line) of a call site "file:line" (None for a notebook cell's "In[5]:3")."""
    file, _, line = site.rpartition(":")
    if not line.isdigit() or not os.path.isabs(file):
        return None
    return file, int(line)


def github_annotation(level: str, file: str, line: int, title: str, message: str) -> str:
    """A GitHub Actions workflow command (``::error file=…,line=…,title=…::message``), escaped."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    return f"::{level} file={prop(file)},line={int(line)},title={prop(title)}::{data(message)}"


def past_limit(watch, limit: int) -> str | None:
    """The message of the RetraceError `watch` raised (the test caught it), or None if it raised
    none.

    Read from the watch's own count, so that it agrees with the guard exactly.
    """
    counts = getattr(watch, "_traces", {})
    over = [key for key, count in counts.items() if count > limit]
    if not over:
        return None
    from .._diagnosis._diagnose import retrace_message

    seen: dict = {}
    for e in watch.records:  # the trace the guard stopped is in the log, with its cause
        if e.key in over and e.kind == EventKind.TRACE and not e.internal:
            seen[e.key] = seen.get(e.key, 0) + 1
            if seen[e.key] == limit + 1:
                return retrace_message(e, limit + 1, f"max_traces={limit}")
    return (
        f"a jitted function ({over[0]}) was traced more than {limit} times, past max_traces={limit}"
    )


def write_report(path: str, events: list) -> str:
    import jaxtrace_nb

    from .._views._frames import function_row

    functions: dict = {}
    for e in events:
        if not e.internal:
            functions.setdefault(e.key, []).append(e)
    rows = [function_row(history) for history in functions.values()]
    what = (
        f"{sum(r['traces'] for r in rows)} trace(s) of {len(rows)} function(s), "
        f"{sum(r['retraces'] for r in rows)} retrace(s)"
    )
    if path.lower().endswith((".html", ".htm")):
        from .._views._frames import events_frame

        jaxtrace_nb.report(path, events=events_frame(events))
    else:
        from .._views._text import Report, render_text

        with open(path, "w", encoding="utf-8") as f:
            f.write(render_text(Report(events, "pytest session"), sections=True) + "\n")
    return f"report written to {path} ({what})"
