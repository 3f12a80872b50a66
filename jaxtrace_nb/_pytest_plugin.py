"""pytest plugin (registered through the ``pytest11`` entry point ``jaxtrace``): inert unless asked.

    pytest --jaxtrace-max-traces=1          # fail a test in which one jitted function traces twice
    pytest --jaxtrace-report=traces.html    # record the whole session, write the report at the end

    @pytest.mark.jaxtrace(max_traces=1)     # the same guard for one test
    def test_step_compiles_once(): ...

Without an option or a marked test this plugin adds its two options and registers its
marker, and does nothing else: JAX is not imported, nothing is recorded, no hook runs per test.

The guard raises :class:`jaxtrace_nb.RetraceError` *inside the test*, at the call that
retraced, before the retrace runs: the failure's traceback ends on the test's own line, and
the message names the function, the changed argument leaf, before → after and a hint. A test
that swallows that error (``except Exception``) still fails, right after it returns. Traces
count while the test function runs, not in its fixtures. A marker's limit overrides the
option's for its test; a bare ``@pytest.mark.jaxtrace`` means ``max_traces=1``.
"""

from __future__ import annotations

import os

import pytest

_ACTIVE = "jaxtrace-active"
_MARKER = ("jaxtrace(max_traces=N): fail this test if any one jitted function is traced more than N "
           "times while it runs (N=1 for a bare @pytest.mark.jaxtrace; overrides --jaxtrace-max-traces "
           "for this test). From jaxtrace_nb: the error names the function, the changed leaf, "
           "before -> after and a hint")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("jaxtrace", "jaxtrace_nb: JAX retrace guard and report")
    group.addoption("--jaxtrace-max-traces", metavar="N", type=int, default=None, dest="jaxtrace_max_traces",
                    help="fail any test in which one jitted function is traced more than N times "
                         "(per test: @pytest.mark.jaxtrace(max_traces=N))")
    group.addoption("--jaxtrace-report", metavar="PATH", default=None, dest="jaxtrace_report",
                    help="record every jit trace and compile of the session and write the report to PATH "
                         "at the end (HTML for .html, else text)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", _MARKER)
    max_traces = config.getoption("jaxtrace_max_traces", None)
    report = config.getoption("jaxtrace_report", None)
    if max_traces is not None and max_traces < 1:
        raise pytest.UsageError(f"--jaxtrace-max-traces must be at least 1, not {max_traces}")
    if max_traces is not None or report:
        config.pluginmanager.register(_Active(config, max_traces, report), _ACTIVE)


def pytest_collection_modifyitems(session, config, items) -> None:
    """Activate for a marker only when a collected test carries one."""
    if config.pluginmanager.has_plugin(_ACTIVE):
        return
    for item in items:
        if item.get_closest_marker("jaxtrace") is not None:
            config.pluginmanager.register(_Active(config, None, None), _ACTIVE)
            return


def _marker_limit(item) -> int | None:
    marker = item.get_closest_marker("jaxtrace")
    if marker is None:
        return None
    value = marker.kwargs.get("max_traces", marker.args[0] if marker.args else 1)  # bare marker: 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.jaxtrace(max_traces=...) must be a positive "
                                f"integer, not {value!r}")
    return value


class _Active:
    """The plugin's working part, registered only when an option or a marker asks for it."""

    def __init__(self, config, max_traces: int | None, report: str | None):
        self.config = config
        self.max_traces = max_traces
        self.report = os.path.abspath(report) if report else None
        self.events: list = []
        self._unsubscribe = None
        self._held = False
        self.wrote: str | None = None
        if self.report:
            from ._run import after_import

            after_import("jax", self._record_session)  # not before the tests import JAX themselves

    # ------------------------------------------------------------ the session's recording
    def _record_session(self) -> None:
        if self._held:
            return
        from ._session import get_session

        session = get_session()
        session.acquire()  # a hold of its own: a test's jt.stop() does not end it
        self._held = True
        self._unsubscribe = session.log.subscribe(self._collect)

    def _collect(self, event, what: str) -> None:
        if what == "append":
            self.events.append(event)

    # ------------------------------------------------------------ the guard
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        limit = _marker_limit(item)
        if limit is None:
            limit = self.max_traces
        if limit is None:
            return (yield)
        if self.report:
            self._record_session()
        from ._session import get_session
        from ._watch import Watch

        source = (f"@pytest.mark.jaxtrace(max_traces={limit})" if item.get_closest_marker("jaxtrace")
                  else f"--jaxtrace-max-traces={limit}")
        watch = Watch(get_session(), max_traces=limit)
        with watch:
            try:
                result = yield
            except BaseException as e:
                from ._watch import RetraceError

                if isinstance(e, RetraceError) and hasattr(e, "add_note"):
                    e.add_note(f"(jaxtrace_nb: limit set by {source})")
                raise
        swallowed = _past_limit(watch, limit)
        if swallowed is not None:  # the test caught the RetraceError and went on
            from ._watch import RetraceError

            __tracebackhide__ = True
            raise RetraceError(f"{swallowed} (raised inside the test, which caught it; limit set by {source})")
        return result

    # ------------------------------------------------------------ the report
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._held:
            from ._session import get_session

            get_session().release()
            self._held = False
        if not self.report:
            return
        try:
            self.wrote = _write_report(self.report, self.events)
        except Exception as e:  # a failed report must not turn a green session red
            self.wrote = f"could not write {self.report}: {type(e).__name__}: {e}"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.wrote:
            terminalreporter.write_line(f"jaxtrace_nb: {self.wrote}")


def _past_limit(watch, limit: int) -> str | None:
    """The message of the RetraceError `watch` raised (the test caught it), or None if it raised none.

    Read from the watch's own count, so that it agrees with the guard exactly.
    """
    counts = getattr(watch, "_traces", {})
    over = [key for key, count in counts.items() if count > limit]
    if not over:
        return None
    from ._diagnosis import retrace_message

    seen: dict = {}
    for e in watch.records:  # the trace the guard stopped is in the log, with its cause
        if e.key in over and e.kind == "trace" and not e.internal:
            seen[e.key] = seen.get(e.key, 0) + 1
            if seen[e.key] == limit + 1:
                return retrace_message(e, limit + 1, f"max_traces={limit}")
    return f"a jitted function ({over[0]}) was traced more than {limit} times, past max_traces={limit}"


def _write_report(path: str, events: list) -> str:
    import jaxtrace_nb

    from ._frames import function_row

    functions: dict = {}
    for e in events:
        if not e.internal:
            functions.setdefault(e.key, []).append(e)
    rows = [function_row(history) for history in functions.values()]
    what = (f"{sum(r['traces'] for r in rows)} trace(s) of {len(rows)} function(s), "
            f"{sum(r['retraces'] for r in rows)} retrace(s)")
    if path.lower().endswith((".html", ".htm")):
        from ._frames import events_frame

        jaxtrace_nb.report(path, events=events_frame(events))
    else:
        from ._views import Report, render_text

        with open(path, "w", encoding="utf-8") as f:
            f.write(render_text(Report(events, "pytest session"), sections=True) + "\n")
    return f"report written to {path} ({what})"
