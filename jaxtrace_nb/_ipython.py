"""IPython glue: ``%load_ext jaxtrace_nb``, ``%%tracewatch`` and ``%tracewatch``."""

from __future__ import annotations

from IPython.core import magic_arguments
from IPython.core.magic import Magics, line_cell_magic, magics_class

from ._log import events_frame, export_frame
from ._session import Watch, get_session
from ._views import Report, mimebundle

_STATE: dict = {}


def _display_report(events, title: str, *, internal: bool, dropped: int = 0) -> None:
    """Show events: the live widget where a frontend can show one, else text + HTML."""
    from IPython.display import display

    report = Report(events, title, internal=internal, dropped=dropped)
    display(mimebundle(report), raw=True)


@magics_class
class TracewatchMagics(Magics):
    @magic_arguments.magic_arguments()
    @magic_arguments.argument(
        "--max-traces", type=int, default=None, metavar="N",
        help="Cell mode: stop the cell with RetraceError at the (N+1)-th trace of any one "
             "function, naming the changed leaf (stops a retrace storm at its first step).")
    @magic_arguments.argument(
        "--internal", action="store_true",
        help="Also show JAX's own jitted helpers (eager jnp ops, convert_element_type, ...).")
    @magic_arguments.argument(
        "--quiet", action="store_true", help="Record, but display nothing.")
    @magic_arguments.argument(
        "--reset", action="store_true",
        help="Line mode: forget every event recorded so far in this session.")
    @magic_arguments.argument(
        "--export", metavar="PATH", default=None,
        help="Line mode: write the session's log to PATH; the format follows the extension "
             "(.csv, .parquet or .json).")
    @line_cell_magic
    def tracewatch(self, line: str, cell: str | None = None):
        """Show what jitted functions traced and compiled, and why each retraced.

        As a cell magic, ``%%tracewatch`` runs the cell and then shows its traces: one row
        per function (traces, compiles, trace / lower / XLA compile seconds) and each
        retrace's cause, changed leaf and before → after, with a hint. It shows them
        also when the cell raised.

        As a line magic, ``%tracewatch`` shows the whole session (everything since
        ``%load_ext jaxtrace_nb``), and can ``--reset`` or ``--export`` the log.

        Examples::

            %%tracewatch --max-traces 1
            for batch in batches:
                model, opt_state = step(model, opt_state, batch)

            %tracewatch --export retraces.csv
        """
        args = magic_arguments.parse_argstring(self.tracewatch, line)
        session = get_session()
        if cell is None:
            return self._line(args, session)
        with Watch(session, max_traces=args.max_traces) as watch:
            self.shell.run_cell(cell, store_history=False)
        if not args.quiet:
            cell_no = session.current_cell
            title = f"%%tracewatch (cell {cell_no})" if cell_no is not None else "%%tracewatch"
            _display_report(watch.records, title, internal=args.internal)
        return None

    def _line(self, args, session) -> None:
        if args.max_traces is not None:
            print("tracewatch: --max-traces applies to the cell magic %%tracewatch")
        if args.export:
            events = session.log.events()
            if not args.internal:
                events = [e for e in events if not e.internal]
            path = export_frame(events_frame(events), args.export)
            print(f"tracewatch: wrote {len(events)} event(s) to {path}")
        if args.reset:
            n = len(session.log.events())
            session.reset()
            print(f"tracewatch: forgot {n} event(s)")
            return
        if not args.quiet and not args.export:
            title = "jaxtrace_nb session" + ("" if session.recording else " (not recording)")
            _display_report(session.log.events(), title, internal=args.internal,
                            dropped=session.log.dropped)


def _cell_label(shell):
    filename_map = getattr(getattr(shell, "compile", None), "_filename_map", None)

    def label(filename: str) -> str | None:
        number = filename_map.get(filename) if filename_map is not None else None
        return f"In[{number}]" if number is not None else None

    return label


def load(shell) -> None:
    session = get_session()
    if _STATE.get("shell") is shell:
        return  # loading twice records nothing twice
    if _STATE:
        unload(_STATE["shell"])

    def pre_run_cell(info=None):
        session.current_cell = shell.execution_count

    def post_run_cell(result=None):
        session.current_cell = None

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
    session.stop()
    session.probe.cell_label = None
    session.current_cell = None
    _STATE.clear()
