"""A compile budget kept with the code: each test's traces and compiles per function, in a file
(pytest's ``--jaxtrace-baseline=PATH``; written by ``--jaxtrace-baseline-update``).

The file is the snapshot idiom's: committed, rewritten on request, compared on every run. It
holds, per test (pytest's node id), per function, how many times the test traced and compiled
it, for the tests that traced anything (a test missing from the file traced nothing, and may
trace nothing)::

    {"format": 1, "tests": {"tests/test_train.py::test_step": {
        "train.py::train_step": {"compiles": 2, "traces": 2}}}}

A function is named by the file it is defined in, relative to the root folder (pytest's
rootdir) or, for a library's file, inside its package, and its qualified name: never by an
address, a line number or an absolute path, so that the file is the same on every machine and
with every supported JAX version for the same code. Only the user's functions count (not
the jitted helpers of JAX or of a library), and the file is written in one order (sorted keys),
so that it changes only when the counts do.

Pure: no JAX, no pytest; `BudgetGuard` is a log guard (`EventLog.subscribe(..., guard=True)`).
"""

from __future__ import annotations

import collections
import json
import os
import re

from .._core import _format as fmt
from .._core._vocabulary import EventKind
from .._log._events import Event
from ._watch import RetraceError

FORMAT = 1
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_ABOUT = (
    "jaxtrace_nb compile baseline: per pytest test, per jitted function (file relative to the root "
    "folder :: qualified name), the traces and compiles the test made. Compared by pytest "
    "--jaxtrace-baseline=PATH, rewritten by adding --jaxtrace-baseline-update."
)


# ---------------------------------------------------------------- functions
def function_name(event: Event, root: str) -> str:
    """The function of `event` as the baseline names it: ``file::qualified name``, the file
    relative to `root` (or inside its package), with no address."""
    name = _ADDRESS.sub("0x…", str(event.function or "?"))
    return f"{stable_file(_file_of(event), root)}::{name}"


def _file_of(event: Event) -> str:
    """The file the function is defined in, as its log key holds it (``file::name``)."""
    key, name = str(event.key or ""), str(event.function or "")
    if name and key.endswith("::" + name):
        return key[: -len(name) - 2]
    return key.rpartition("::")[0] or str(event.location or "?").rpartition(":")[0]


def stable_file(path: str, root: str) -> str:
    """`path` as every machine names it: relative to `root` (``/``-separated) when inside it, else
    as the views show it (inside its package for an installed library)."""
    if not path or not os.path.isabs(path):
        return path or "?"
    norm, root = os.path.normpath(path), os.path.normpath(root)
    if norm.startswith(root + os.sep):
        return os.path.relpath(norm, root).replace(os.sep, "/")
    return fmt.short_path(norm)


def counts(events, root: str) -> dict[str, dict[str, int]]:
    """Per function (`function_name`) of the user's (not internal), its traces and compiles among
    `events`. A compile is one the persistent compilation cache served too: the count is the
    same whether or not a machine's cache held it."""
    out: dict[str, dict[str, int]] = {}
    for e in events:
        if e.internal:
            continue
        traced, compiled = e.kind == EventKind.TRACE, _compiled(e)
        if traced or compiled:
            entry = out.setdefault(function_name(e, root), {"compiles": 0, "traces": 0})
            entry["traces"] += traced
            entry["compiles"] += compiled
    return out


def _compiled(e: Event) -> bool:
    return e.kind == EventKind.COMPILE or e.compile_s is not None or e.cache_hit is not None


# --------------------------------------------------------------------- file
class Baseline:
    """The baseline file at `path` (absent: empty), for the tests under `root`."""

    def __init__(self, path: str, root: str):
        self.path, self.root = os.path.abspath(path), root
        self.name = os.path.basename(self.path)
        self.tests: dict[str, dict] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict) or not isinstance(data.get("tests"), dict):
                raise ValueError(f'{self.path} is not a jaxtrace_nb baseline (no "tests" object)')
            if data.get("format", FORMAT) != FORMAT:
                raise ValueError(
                    f"{self.path} has baseline format {data.get('format')!r}; this jaxtrace_nb "
                    f"reads format {FORMAT}"
                )
            self.tests = data["tests"]

    def budget(self, test: str) -> dict[str, dict[str, int]]:
        """Per function, the traces and compiles the baseline allows `test` (none if it is
        absent)."""
        return self.tests.get(test, {})

    def knows(self, test: str) -> bool:
        return test in self.tests

    def write(self, results: dict[str, dict], forget: set[str] = frozenset()) -> int:
        """Write the file: the tests of `results` as they ran now (one with no trace leaves the
        file), the others as they were, less those in `forget` (tests that no longer exist). Returns
        how many tests it holds."""
        tests = {t: v for t, v in self.tests.items() if t not in results and t not in forget}
        tests.update({t: v for t, v in results.items() if v})
        self.tests = tests
        text = dumps(tests)
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        temporary = f"{self.path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(temporary, self.path)
        return len(tests)


def dumps(tests: dict) -> str:
    """The file's text: sorted, one function a line, so that a diff reads per test and function."""
    lines = ["{", f' "about": {json.dumps(_ABOUT)},', f' "format": {FORMAT},', ' "tests": {']
    for i, test in enumerate(sorted(tests)):
        functions = tests[test]
        lines.append(f"  {json.dumps(test)}: {{")
        for j, name in enumerate(sorted(functions)):
            entry = {k: int(v) for k, v in sorted(functions[name].items())}
            lines.append(
                f"   {json.dumps(name)}: {json.dumps(entry)}"
                + ("," if j < len(functions) - 1 else "")
            )
        lines.append("  }" + ("," if i < len(tests) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------ comparisons
def _past(allowed: int, name: str, known: bool) -> str:
    return (
        f"its baseline of {allowed} in {name}"
        if known
        else f"its baseline of 0 ({name} has no entry for this test: run pytest with "
        "--jaxtrace-baseline-update to add it)"
    )


class BudgetGuard:
    """Stops the trace past a function's budget in one test, where the user called it: a guard
    on the log (`check`, subscribed with ``guard=True``), like a watch's ``max_traces``."""

    def __init__(self, baseline: Baseline, test: str):
        self._budget = baseline.budget(test)
        self._known = baseline.knows(test)
        self._name, self._root = baseline.name, baseline.root
        self._traces: collections.Counter = collections.Counter()
        self.stopped: str | None = None  # the message of the RetraceError raised, if one was

    def check(self, event: Event) -> None:
        __tracebackhide__ = True  # pytest shows the user's frame, not ours
        if event.internal or event.kind != EventKind.TRACE:
            return
        name = function_name(event, self._root)
        self._traces[name] += 1
        allowed = self._budget.get(name, {}).get("traces", 0)
        if self._traces[name] > allowed:
            message = past_message(
                event, "traced", self._traces[name], _past(allowed, self._name, self._known)
            )
            self.stopped = message
            raise RetraceError(message, event=event)

    def compiles_over(self, events) -> tuple[str, Event] | None:
        """The message of the first compile past its function's budget among `events` (a test's, in
        order), and its event; None if none is. Traces over budget are `check`'s."""
        seen: collections.Counter = collections.Counter()
        for e in events:
            if e.internal or not _compiled(e):
                continue
            name = function_name(e, self._root)
            seen[name] += 1
            allowed = self._budget.get(name, {}).get("compiles", 0)
            if seen[name] > allowed:
                return past_message(
                    e, "compiled", seen[name], _past(allowed, self._name, self._known)
                ), e
        return None


def past_message(event: Event, done: str, count: int, limit: str) -> str:
    """The message for `event`, the trace (`done` "traced") or compile ("compiled") past `limit`."""
    where = f" at `{event.leaf}`" if event.leaf else ""
    change = f": {event.before} → {event.after}" if event.before is not None else ""
    called = f", called at {event.call_site}" if event.call_site else ""
    if done == "traced":
        what = f"Trace #{event.trace_number}"
    else:
        what = (
            f"Compile #{count} ("
            + (
                "a compile without a new trace"
                if event.kind == EventKind.COMPILE
                else f"the compile of trace #{event.trace_number}"
            )
            + ")"
        )
    hint = f" Hint: {event.hint}" if event.hint else ""
    times = {1: "once", 2: "twice"}.get(count, f"{count} times")
    return (
        f"{event.function} ({event.location}{called}) was {done} {times}, past {limit}. {what} "
        f"cause: {event.cause}{where}{change}. {event.explanation}{hint}"
    )


def fewer(now: dict[str, dict[str, int]], budget: dict[str, dict[str, int]]) -> list[str]:
    """What a test did fewer times than its baseline allows, one line per function and count."""
    lines = []
    for name in sorted(budget):
        for what in ("traces", "compiles"):
            allowed, done = budget[name].get(what, 0), now.get(name, {}).get(what, 0)
            if done < allowed:
                lines.append(f"{name} {what}: {allowed} → {done}")
    return lines
