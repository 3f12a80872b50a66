"""IPython glue: ``%load_ext jaxtrace_nb``, ``%%tracewatch`` and ``%tracewatch``."""

from __future__ import annotations

import contextlib
import weakref

from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_cell_magic, magics_class

from .._recording._session import get_session
from .._views._display import display_table, widgets_shown
from .._views._frames import events_frame, export_frame
from .._views._report import Report
from .._views._text import mimebundle, render_text
from ._watch import RetraceError, Watch, user_traceback

_STATE: dict = {}


def _contained(step, *args, **kwargs):
    """Run a display step; a failure is counted as a 'display' fault, never raised into the cell."""
    try:
        return step(*args, **kwargs)
    except Exception as e:
        get_session().fault("display", e)
        return None


def _display_report(events, title: str, *, internal: bool, dropped: int = 0) -> None:
    """Show events as the static text + HTML report (terminal IPython)."""
    from IPython.display import display

    display(mimebundle(Report(events, title, internal=internal, dropped=dropped)), raw=True)


def _display_live_table(title: str, *, since: int, internal: bool, dropped: int = 0):
    """Show a table that follows the log from seq `since`; returns (table, static display
    handle)."""
    from .._views._widget import TraceTable

    table = TraceTable(Report((), title, internal=internal, dropped=dropped), show_all=internal)
    try:
        table.follow(get_session().log, since)
        return table, display_table(table, display_id=True)
    except Exception:
        table.close()
        raise


def _update_display(table, handle) -> None:
    """Re-send `table`'s static report, so that a saved notebook shows its last state."""
    handle.update(table.static_bundle(), raw=True)


def _set_session_table(table, handle) -> None:
    """Make `table` the live session table; the previous one stops following the log."""
    _stop_session_table()
    _STATE["session_table"] = (weakref.ref(table), handle)


def _stop_session_table() -> None:
    entry = _STATE.pop("session_table", None)
    table = entry[0]() if entry else None
    if table is not None:
        table.stop()


def _refresh_session_table() -> None:
    """After a cell: show the live session table's last events and refresh its static report."""
    entry = _STATE.get("session_table")
    table = entry[0]() if entry else None
    if table is None or not table.live:
        _STATE.pop("session_table", None)
        return
    table.flush()
    if table.changed_since_display:
        _update_display(table, entry[1])


@contextlib.contextmanager
def _numbered_as(shell, number: int | None):
    """Run the cell's body under the cell's own number (IPython >= 9.8 has counted the next one)."""
    saved = shell.execution_count
    if number is not None:
        shell.execution_count = number
    try:
        yield
    finally:
        shell.execution_count = saved


@contextlib.contextmanager
def _retrace_tracebacks(shell):
    """While the cell runs, show a `RetraceError` ending at the user's line: IPython always
    shows the innermost frame, hidden or not, and that one is ours (a library's wrapper, such
    as chex's, comes before it). A handler of the user's own (`set_custom_exc`) is left alone."""
    if shell.custom_exceptions:
        yield
        return

    def handler(self, etype, value, tb, tb_offset=None):
        self.showtraceback(
            (etype, value, user_traceback(tb)), tb_offset=tb_offset, running_compiled_code=True
        )

    shell.set_custom_exc((RetraceError,), handler)
    try:
        yield
    finally:
        if shell.custom_exceptions == (RetraceError,):
            shell.set_custom_exc((), None)  # IPython's own default


@magics_class
class TracewatchMagics(Magics):
    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "--max-traces",
        type=int,
        default=None,
        metavar="N",
        help="Cell mode: stop the cell with RetraceError when any one function (not JAX's "
        "internal helpers) is traced for the (N+1)-th time inside this cell, its top-level and "
        "nested traces (inside another function's trace) alike. Traces made before this cell do "
        "not count: a function compiled in an earlier cell may still be traced N more times "
        "here.",
    )
    @magic_arguments.argument(
        "--max-retraces",
        type=int,
        default=None,
        metavar="N",
        help="Cell mode: stop the cell with RetraceError at the (N+1)-th retrace inside this cell "
        "of any one function, a retrace being a trace of a function already traced before, in this "
        "cell or in an earlier one. --max-retraces 0 stops at the first retrace: the first trace "
        "of a function that was already compiled before this cell, or the second trace of one "
        "first traced here. Only retraces made in this cell count, top-level and nested alike.",
    )
    @magic_arguments.argument(
        "--internal",
        action="store_true",
        help="Also show internal functions: the jitted helpers of JAX and libraries (eager jnp "
        "ops, convert_element_type, ...), hidden by default.",
    )
    @magic_arguments.argument("--quiet", action="store_true", help="Record, but display nothing.")
    @magic_arguments.argument(
        "--reset",
        action="store_true",
        help="Line mode: forget every event recorded so far in this session.",
    )
    @magic_arguments.argument(
        "--export",
        metavar="PATH",
        default=None,
        help="Line mode: write the session's log to PATH; the format follows the extension "
        "(.csv, .parquet or .json).",
    )
    @magic_arguments.argument(
        "--persist",
        metavar="PATH",
        default=None,
        help="Line mode: from now on also append every event to PATH as one JSON line, flushed at "
        "once, so the log survives a kernel crash (jt.start(persist=PATH)).",
    )
    @line_cell_magic
    def tracewatch(self, line: str, cell: str | None = None):
        """Show what jitted functions traced and compiled, and why each retraced.

        As a cell magic, ``%%tracewatch`` runs the cell and then shows its traces: one row
        per function (traces, compiles, trace / lower / XLA compile seconds, the latest
        retrace's cause, leaf, before → after and hint), and the retraces grouped by cause
        and leaf. It shows them also when the cell raised. ``--max-traces N`` and
        ``--max-retraces N`` stop the cell with ``RetraceError`` (its traceback points at
        the line of this cell that called the function).

        As a line magic, ``%tracewatch`` shows the whole session (everything since
        ``%load_ext jaxtrace_nb``), and can ``--reset``, ``--export`` or ``--persist`` the log.

        In JupyterLab, Notebook 7 and VS Code the report is a live table: sort by any
        column, filter by function, leaf, cause, cell (``In[4]``) or file, click a function
        for its history, export to a variable or a CSV file. ``%%tracewatch`` shows the
        cell's traces as they happen; the latest ``%tracewatch`` table keeps following the
        session in later cells. Functions hidden by default: JAX's and libraries' internal
        jitted helpers (``--internal`` shows them); functions traced inside another jit
        are shown, marked ``nested``.

        Examples::

            %%tracewatch --max-retraces 0
            for batch in batches:
                model, opt_state = step(model, opt_state, batch)

            %tracewatch --export retraces.csv
        """
        args = magic_arguments.parse_argstring(self.tracewatch, line)
        session = get_session()
        if cell is None:
            return self._line(args, session)
        cell_no = session.current_cell
        title = f"%%tracewatch (cell {cell_no})" if cell_no is not None else "%%tracewatch"
        live = None
        if not args.quiet and widgets_shown(self.shell):
            live = _contained(
                _display_live_table, title, since=session.log.next_seq, internal=args.internal
            )
        with Watch(session, args.max_traces, args.max_retraces, scope="in this cell") as watch:
            with _numbered_as(self.shell, cell_no), _retrace_tracebacks(self.shell):
                self.shell.run_cell(cell, store_history=False)
        if live is not None:
            _contained(
                session.settle
            )  # the persistent cache's words, before the table's last render
            live[0].stop()
            _contained(_update_display, *live)  # the saved notebook's static report: the whole cell
        elif not args.quiet:
            _contained(_display_report, watch.records, title, internal=args.internal)
        return None

    def _line(self, args, session) -> None:
        if args.max_traces is not None or args.max_retraces is not None:
            print(
                "tracewatch: --max-traces and --max-retraces apply to the cell magic %%tracewatch"
            )
        if args.persist:
            session.start(persist=args.persist)
            print(f"tracewatch: appending every event to {args.persist}")
        if args.export:
            events = session.log.events()
            if not args.internal:
                events = [e for e in events if not e.internal]
            path = export_frame(events_frame(events), args.export)
            print(f"tracewatch: wrote {len(events)} event(s) to {path}")
        if args.reset:
            n = len(session.log.events())
            session.reset()
            entry = _STATE.get("session_table")
            table = entry[0]() if entry else None
            if table is not None and table.live:
                table.restart()
            print(f"tracewatch: forgot {n} event(s)")
            return
        if not args.quiet and not args.export and not args.persist:
            title = "jaxtrace_nb session" + ("" if session.recording else " (not recording)")
            live = None
            if widgets_shown(self.shell):
                live = _contained(
                    _display_live_table,
                    title,
                    since=0,
                    internal=args.internal,
                    dropped=session.log.dropped,
                )
            if live is not None:
                _set_session_table(*live)
            else:
                _contained(
                    _display_report,
                    session.log.events(),
                    title,
                    internal=args.internal,
                    dropped=session.log.dropped,
                )


def show(source) -> None:
    """Display the table of `source` (a DataFrame, persisted log paths, events); see `jt.show`."""
    from IPython import get_ipython

    from .._views._standalone import events_from, source_title

    events = events_from(source)
    report = Report(events, f"{source_title(source)}: {len(events)} event(s)")
    if get_ipython() is None:
        print(render_text(report))
        return
    from .._views._widget import TraceTable

    display_table(TraceTable(report))


def _cell_label(shell):
    filename_map = getattr(getattr(shell, "compile", None), "_filename_map", None)

    def label(filename: str) -> str | None:
        number = filename_map.get(filename) if filename_map is not None else None
        return f"In[{number}]" if number is not None else None

    return label


def _running_cell_number(shell, info) -> int:
    """The In[n] number of the cell that `pre_run_cell` announces."""
    import IPython

    n = shell.execution_count
    # IPython >= 9.8 counts a cell stored in history before `pre_run_cell`, earlier versions after.
    if IPython.version_info >= (9, 8) and getattr(info, "store_history", False):
        n -= 1
    return n


def load(shell) -> None:
    session = get_session()
    if _STATE.get("shell") is shell:
        return  # loading twice records nothing twice
    if _STATE:
        unload(_STATE["shell"])

    depth = [0]  # %%tracewatch runs its cell through a nested run_cell, part of the same cell

    def pre_run_cell(info=None):
        if depth[0] == 0:
            session.current_cell = _running_cell_number(shell, info)
        depth[0] += 1

    def post_run_cell(result=None):
        depth[0] = max(0, depth[0] - 1)
        if depth[0] == 0:
            session.current_cell = None
        _contained(_refresh_session_table)

    shell.register_magics(TracewatchMagics)
    shell.events.register("pre_run_cell", pre_run_cell)
    shell.events.register("post_run_cell", post_run_cell)
    session.probe.cell_label = _cell_label(shell)
    session.start()
    _STATE.update(shell=shell, callbacks=(pre_run_cell, post_run_cell))


def unload(shell) -> None:
    if _STATE.get("shell") is not shell:
        return
    session = get_session()
    pre, post = _STATE["callbacks"]
    for name, callback in (("pre_run_cell", pre), ("post_run_cell", post)):
        try:
            shell.events.unregister(name, callback)
        except ValueError:
            pass
    _stop_session_table()
    _unregister_magics(shell)
    session.stop()
    session.probe.cell_label = None
    session.current_cell = None
    _STATE.clear()


def _unregister_magics(shell) -> None:
    """Remove ``%tracewatch`` and ``%%tracewatch`` (IPython has no public call for it)."""
    manager = shell.magics_manager
    for kind in ("line", "cell"):
        manager.magics.get(kind, {}).pop("tracewatch", None)
    manager.registry.pop(TracewatchMagics.__name__, None)
