"""pytest plugin (registered through the ``pytest11`` entry point ``jaxtrace``): inert unless asked.

    pytest --jaxtrace-max-traces=1          # fail a test in which one jitted function traces twice
    pytest --jaxtrace-report=traces.html    # record the whole session, write the report at the end
    pytest --jaxtrace-baseline=compiles.json            # compare with the budget file
    pytest --jaxtrace-baseline=compiles.json --jaxtrace-baseline-update   # write it

    @pytest.mark.jaxtrace(max_traces=1)     # the same guard for one test
    def test_step_compiles_once(): ...

Without an option or a marked test this plugin adds its options and registers its marker,
and does nothing else: JAX is not imported, nothing is recorded, no hook runs per test.

The guard raises :class:`jaxtrace_nb.RetraceError` *inside the test*, at the call that
retraced, before the retrace runs: the failure's traceback ends on the user's own line (a
library's jit wrapper, such as ``nnx.jit``'s, is left out), and the message names the
function, the changed argument leaf, before → after and a hint. A test that swallows that error
(``except Exception``) still fails, right after it returns. Traces count while the test
function runs, not in its fixtures. A marker's limit overrides the option's for its test; a
bare ``@pytest.mark.jaxtrace`` means ``max_traces=1``.

The baseline (`_baseline`) is a per-test, per-function budget of traces and compiles: a trace
past it raises like the guard, a compile past it fails the test when it returns, and a test
that did fewer is reported, not failed. Each test function then starts from empty JAX caches
(``jax.clear_caches()``) and a fresh count, so that its numbers are its own whatever ran before
it (``-k``, ``-x``, another order). Every event recorded while a test runs carries its node id
(column ``test``). Failures go into the JUnit XML as properties (``jaxtrace.*``) besides the
failure text and, when ``GITHUB_ACTIONS`` is set, become GitHub annotations at the user's line.
"""

from __future__ import annotations

import os

import pytest

from ._pytest_results import (
    add_properties,
    end_at_user_line,
    github_annotation,
    past_limit,
    split_site,
    write_report,
)

_ACTIVE = "jaxtrace-active"
_MARKER = (
    "jaxtrace(max_traces=N): fail this test if any one jitted function is traced more than N "
    "times while it runs (N=1 for a bare @pytest.mark.jaxtrace; overrides "
    "--jaxtrace-max-traces "
    "for this test). From jaxtrace_nb: the error names the function, the changed leaf, "
    "before -> after and a hint"
)
_UPDATE = "--jaxtrace-baseline-update"


def pytest_addoption(parser) -> None:
    group = parser.getgroup(
        "jaxtrace", "jaxtrace_nb: JAX retrace guard, compile baseline and report"
    )
    group.addoption(
        "--jaxtrace-max-traces",
        metavar="N",
        type=int,
        default=None,
        dest="jaxtrace_max_traces",
        help="fail any test in which one jitted function is traced more than N times "
        "(per test: @pytest.mark.jaxtrace(max_traces=N))",
    )
    group.addoption(
        "--jaxtrace-report",
        metavar="PATH",
        default=None,
        dest="jaxtrace_report",
        help="record every jit trace and compile of the session and write the report to PATH "
        "at the end (HTML for .html, else text)",
    )
    group.addoption(
        "--jaxtrace-baseline",
        metavar="PATH",
        default=None,
        dest="jaxtrace_baseline",
        help="compare each test's traces and compiles per jitted function with the baseline file "
        "PATH: fail a test that traces or compiles a function more often, report "
        "one that "
        "does so less often (each test starts from empty JAX caches)",
    )
    group.addoption(
        _UPDATE,
        action="store_true",
        default=False,
        dest="jaxtrace_baseline_update",
        help="write the traces and compiles of the tests that ran and passed into the "
        "--jaxtrace-baseline file, instead of comparing",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", _MARKER)
    max_traces = config.getoption("jaxtrace_max_traces", None)
    report = config.getoption("jaxtrace_report", None)
    baseline = config.getoption("jaxtrace_baseline", None)
    update = bool(config.getoption("jaxtrace_baseline_update", False))
    if max_traces is not None and max_traces < 1:
        raise pytest.UsageError(f"--jaxtrace-max-traces must be at least 1, not {max_traces}")
    if update and not baseline:
        raise pytest.UsageError(f"{_UPDATE} needs --jaxtrace-baseline=PATH, the file to write")
    if max_traces is not None or report or baseline:
        config.pluginmanager.register(
            _Active(config, max_traces, report, baseline, update), _ACTIVE
        )


def pytest_collection_modifyitems(session, config, items) -> None:
    """Activate for a marker only when a collected test carries one."""
    if config.pluginmanager.has_plugin(_ACTIVE):
        return
    for item in items:
        if item.get_closest_marker("jaxtrace") is not None:
            config.pluginmanager.register(_Active(config, None, None, None, False), _ACTIVE)
            return


def _marker_limit(item) -> int | None:
    marker = item.get_closest_marker("jaxtrace")
    if marker is None:
        return None
    value = marker.kwargs.get("max_traces", marker.args[0] if marker.args else 1)  # bare marker: 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.jaxtrace(max_traces=...) must be a positive "
            f"integer, not {value!r}"
        )
    return value


class _Active:
    """The plugin's working part, registered only when an option or a marker asks for it."""

    def __init__(
        self, config, max_traces: int | None, report: str | None, baseline: str | None, update: bool
    ):
        self.config = config
        self.max_traces = max_traces
        self.report = os.path.abspath(report) if report else None
        self.root = str(config.rootpath)
        self.baseline = None
        if baseline:
            from ._baseline import Baseline

            try:
                self.baseline = Baseline(baseline, self.root)
            except (OSError, ValueError) as e:
                raise pytest.UsageError(f"--jaxtrace-baseline={baseline}: {e}") from None
        self.update = update
        self.events: list = []
        self._unsubscribe = None
        self._held = False
        self.wrote: list[str] = []
        self.counted: dict[
            str, dict
        ] = {}  # node id -> its counts per function (`_baseline.counts`)
        self.results: dict[str, dict] = {}  # the tests that passed: what the update writes
        self.failed_tests: list[
            str
        ] = []  # tests the update leaves as they were (they did not pass)
        self.fewer: dict[
            str, list[str]
        ] = {}  # node id -> what it did fewer times than its baseline
        self.over: list[str] = []  # tests failed by the baseline
        self.annotations: list[tuple] = []  # (level, file, line, title, message) for GitHub Actions
        self._collected: set[str] = set()
        if self.report:
            from ._run import after_import

            after_import("jax", self._record_session)  # not before the tests import JAX themselves

    # ------------------------------------------------------------ the session's recording
    def _record_session(self) -> None:
        if self._held:
            return
        from .._recording._session import get_session

        session = get_session()
        session.acquire()  # a hold of its own: a test's jt.stop() does not end it
        self._held = True
        self._unsubscribe = session.log.subscribe(self._collect)

    def _collect(self, event, what: str) -> None:
        if what == "append":
            self.events.append(event)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Every event recorded while the test runs (setup, call, teardown) carries its node id."""
        from .._recording._session import get_session

        session = get_session()
        previous, session.current_test = session.current_test, item.nodeid
        try:
            return (yield)
        finally:
            session.current_test = previous

    def pytest_collection_finish(self, session) -> None:
        self._collected.update(item.nodeid for item in session.items)

    def pytest_deselected(self, items) -> None:
        self._collected.update(item.nodeid for item in items)

    # ------------------------------------------------------------ the guards
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        limit = _marker_limit(item)
        if limit is None:
            limit = self.max_traces
        if limit is None and self.baseline is None:
            return (yield)
        if self.report:
            self._record_session()
        from .._recording._session import get_session
        from ._watch import RetraceError, Watch

        source = (
            f"@pytest.mark.jaxtrace(max_traces={limit})"
            if item.get_closest_marker("jaxtrace")
            else f"--jaxtrace-max-traces={limit}"
        )
        session = get_session()
        budget = None
        if self.baseline is not None:
            _cold_start(session)
            if not self.update:
                from ._baseline import BudgetGuard

                budget = BudgetGuard(self.baseline, item.nodeid)
        watch = Watch(session, max_traces=limit, scope="in this test")
        with watch:
            unsubscribe = (
                session.log.subscribe(budget.check, guard=True) if budget is not None else None
            )
            try:
                result = yield
            except BaseException as e:
                if isinstance(e, RetraceError):
                    e.add_note(self._note(item, e, budget, source))
                raise
            finally:
                if unsubscribe is not None:
                    unsubscribe()
                if self.baseline is not None:
                    from ._baseline import counts

                    self.counted[item.nodeid] = counts(watch.records, self.root)
        __tracebackhide__ = True
        swallowed = past_limit(watch, limit) if limit is not None else None
        if swallowed is not None:  # the test caught the RetraceError and went on
            raise RetraceError(
                f"{swallowed} (raised inside the test, which caught it; limit set by {source})"
            )
        if budget is not None and budget.stopped is not None:
            self.over.append(item.nodeid)
            raise RetraceError(
                f"{budget.stopped} (raised inside the test, which caught it; "
                f"{self._baseline_note()})"
            )
        if budget is not None:
            over = budget.compiles_over(watch.records)
            if over is not None:
                message, event = over
                self.over.append(item.nodeid)
                raise RetraceError(
                    f"{message}\n(jaxtrace_nb: {self._baseline_note()})", event=event
                )
        return result

    def _note(self, item, error, budget, source: str) -> str:
        """The note on a `RetraceError` leaving the test: which limit it was."""
        if budget is not None and budget.stopped is not None and str(error) == budget.stopped:
            self.over.append(item.nodeid)
            return f"(jaxtrace_nb: {self._baseline_note()})"
        return f"(jaxtrace_nb: limit set by {source})"

    def _baseline_note(self) -> str:
        return (
            f"baseline {os.path.relpath(self.baseline.path, self.root)}; if the new count is "
            f"intended, run pytest with {_UPDATE}"
        )

    # ------------------------------------------------------------ reports: JUnit XML, GitHub
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        from ._watch import RetraceError

        error = call.excinfo.value if call.excinfo is not None else None
        retrace = isinstance(error, RetraceError)
        where = end_at_user_line(call.excinfo) if retrace else None
        report = yield
        if call.when != "call":
            return report
        if retrace:
            self._failure(item, report, error, where)
        if self.baseline is not None and item.nodeid in self.counted:
            self._baseline_result(item, report)
        return report

    def _failure(self, item, report, error, where) -> None:
        event = getattr(error, "event", None)
        if where is None and event is not None and event.call_site:
            where = split_site(event.call_site)
        if where is None:
            where = (os.path.join(self.root, item.location[0]), (item.location[1] or 0) + 1)
        message = str(error)
        properties = [
            ("jaxtrace.message", message),
            ("jaxtrace.line", f"{self._relative(where[0])}:{where[1]}"),
        ]
        if event is not None:
            properties += [
                (f"jaxtrace.{name}", getattr(event, name))
                for name in ("function", "kind", "trace_number", "cause", "leaf", "before", "after")
                if getattr(event, name) is not None
            ]
        add_properties(item, report, properties)
        self.annotations.append(
            ("error", where[0], where[1], f"jaxtrace_nb: {item.nodeid}", message)
        )

    def _baseline_result(self, item, report) -> None:
        now = self.counted[item.nodeid]
        if self.update:
            if report.passed:
                self.results[item.nodeid] = now
            else:
                self.failed_tests.append(item.nodeid)
            return
        if not report.passed:
            return
        from ._baseline import fewer

        lines = fewer(now, self.baseline.budget(item.nodeid))
        if lines:
            self.fewer[item.nodeid] = lines
            add_properties(item, report, [("jaxtrace.fewer", line) for line in lines])
            file = os.path.join(self.root, item.location[0])
            self.annotations.append(
                (
                    "notice",
                    file,
                    (item.location[1] or 0) + 1,
                    f"jaxtrace_nb: {item.nodeid}",
                    "fewer than the baseline: " + "; ".join(lines),
                )
            )

    def _relative(self, path: str) -> str:
        base = os.environ.get("GITHUB_WORKSPACE") or self.root
        norm = os.path.normpath(os.path.abspath(path))
        if norm.startswith(os.path.normpath(base) + os.sep):
            return os.path.relpath(norm, base).replace(os.sep, "/")
        return path

    # ------------------------------------------------------------ the end
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._held:
            from .._recording._session import get_session

            get_session().release()
            self._held = False
        if self.update and self.baseline is not None:
            try:
                self.wrote.append(self._write_baseline())
            except OSError as e:
                self.wrote.append(f"could not write {self.baseline.path}: {type(e).__name__}: {e}")
        if self.report:
            try:
                self.wrote.append(write_report(self.report, self.events))
            except Exception as e:  # a failed report must not turn a green session red
                self.wrote.append(f"could not write {self.report}: {type(e).__name__}: {e}")

    def _write_baseline(self) -> str:
        files = {test.split("::", 1)[0] for test in self._collected}
        gone = {
            t
            for t in self.baseline.tests
            if t.split("::", 1)[0] in files and t not in self._collected
        }
        held = self.baseline.write(self.results, gone)
        text = (
            f"baseline written to {self.baseline.path}: {len(self.results)} test(s) recorded, "
            f"{held} with traces in the file"
        )
        if gone:
            text += f", {len(gone)} test(s) that no longer exist removed"
        if self.failed_tests:
            text += f"; not updated (they did not pass): {', '.join(self.failed_tests)}"
        return text

    def pytest_terminal_summary(self, terminalreporter) -> None:
        write = terminalreporter.write_line
        for line in self.wrote:
            write(f"jaxtrace_nb: {line}")
        if self.baseline is not None and not self.update:
            name = os.path.relpath(self.baseline.path, self.root)
            compared = len(self.counted)
            write(
                f"jaxtrace_nb: baseline {name}: {compared} test(s) compared, {len(self.over)} over "
                f"the baseline, {len(self.fewer)} under it"
            )
            for test, lines in self.fewer.items():
                write(
                    f"jaxtrace_nb: fewer than the baseline (not a failure; {_UPDATE} records it): "
                    f"{test}: " + "; ".join(lines)
                )
        if os.environ.get("GITHUB_ACTIONS") == "true":
            for level, file, line, title, message in self.annotations:
                write(github_annotation(level, self._relative(file), line, title, message))


def _cold_start(session) -> None:
    """A test's traces from empty JAX caches and a fresh count per function (the baseline's
    terms)."""
    import sys

    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "clear_caches"):
        jax.clear_caches()
    session.forget_functions()
