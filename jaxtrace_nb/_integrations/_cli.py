"""``python -m jaxtrace_nb``: run a program with every jit trace and compile recorded, or
report on persisted logs.

    python -m jaxtrace_nb run [--persist PATH] [--max-traces N] [--max-retraces N]
                              [--divergence MODE] script.py [args...]
    python -m jaxtrace_nb run [...] -m module [args...]
    python -m jaxtrace_nb report LOG... [-o report.html]

`run` changes nothing the program does: it runs as ``python script.py args...`` (or
``python -m module args...``) would, with the same ``sys.argv``, ``__main__``, ``sys.path[0]``,
stdout, exceptions, tracebacks and exit status; the report goes to stderr, at exit.
Recording starts when the program imports JAX (not before: JAX reads ``JAX_*`` environment
variables at import, and a program may set them first).
"""

from __future__ import annotations

import argparse
import os
import sys

_RUN_OPTIONS = {
    "--persist": "persist",
    "--max-traces": "max_traces",
    "--max-retraces": "max_retraces",
    "--divergence": "divergence",
    "--divergence-grace": "divergence_grace_s",
    "--warm": "warm",
}

_DESCRIPTION = (
    "See why your jitted JAX/Equinox functions retrace and recompile, outside a notebook."
)
_EPILOG = """\
examples:
  python -m jaxtrace_nb run train.py --lr 3e-4          # report on stderr at exit
  python -m jaxtrace_nb run --persist traces.jsonl -m mypkg.train
  python -m jaxtrace_nb run --max-traces 1 train.py     # stop at the first retrace of any function
  python -m jaxtrace_nb run --divergence=raise train.py # fail where processes compile
                                                        # different programs
  python -m jaxtrace_nb report p0.jsonl p1.jsonl        # merge the logs of a multi-process run
  python -m jaxtrace_nb report traces.jsonl -o report.html
  python -m jaxtrace_nb report /data/jax_cache           # every key of that cache, and what changed
"""
_RUN_DESCRIPTION = """\
Run a Python program exactly as `python script.py args...` (or `python -m module args...`)
would - same sys.argv, __main__, sys.path[0], stdout, exceptions and exit status - while
recording every jit trace and compile, then print the report to stderr when it exits
(also when it raised or called sys.exit). Options go before the script or -m; everything
after the script or the module name is the program's own arguments."""
_RUN_EPILOG = """\
The persist path may contain {pid} and {host}, replaced by the process id and the host
name (one log per process of a multi-process run; merge them with `report`).
With --max-traces/--max-retraces a jaxtrace_nb.RetraceError (naming the function, the changed
argument leaf, before -> after and a hint) ends the program like any uncaught exception
(exit status 1). In a jax.distributed run, --divergence=raise does the same with a
jaxtrace_nb.DivergenceError in the process whose key for a jitted function differs from the
other processes' (warn, the default: a `jaxtrace_nb: divergence` line on stderr; off)."""


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be zero or more, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jaxtrace_nb",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="{run,report}")
    commands.required = True
    run = commands.add_parser(
        "run",
        help="run a script or module, recording every jit trace and compile; report to stderr at "
        "exit",
        description=_RUN_DESCRIPTION,
        epilog=_RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python -m jaxtrace_nb run [-h] [--persist PATH] [--max-traces N] "
        "[--max-retraces N]\n"
        "                              [--divergence {warn,raise,off}] [--warm LOG]\n"
        "                              (script.py | -m module) [args ...]",
    )
    run.add_argument(
        "--persist",
        metavar="PATH",
        help="also append every event to PATH as JSON lines, flushed as they happen "
        "(read back with jaxtrace_nb.load or `report`)",
    )
    run.add_argument(
        "--max-traces",
        metavar="N",
        type=_positive,
        help="raise RetraceError at the (N+1)-th trace of any one jitted function in this run "
        "(its top-level and nested traces alike)",
    )
    run.add_argument(
        "--max-retraces",
        metavar="N",
        type=_count,
        help="raise RetraceError at the (N+1)-th retrace of any one jitted function in this run, "
        "top-level or nested (0: at the first retrace)",
    )
    run.add_argument(
        "--divergence",
        metavar="MODE",
        choices=("warn", "raise", "off"),
        help="in a jax.distributed run, what a jitted function traced with another key than in the "
        "other processes does: warn (default), raise DivergenceError, or off",
    )
    run.add_argument(
        "--divergence-grace",
        dest="divergence_grace_s",
        metavar="SECONDS",
        type=float,
        help="how long a process waits for the other processes' key of a trace (default 60)",
    )
    run.add_argument(
        "--warm",
        metavar="LOG",
        action="append",
        help="a log of an earlier run (`--persist`; repeat for several, e.g. one per process): "
        "at each jax.jit function's first trace, its other signatures recorded there compile "
        "in background threads (jaxtrace_nb.precompile)",
    )
    run.add_argument(
        "-m",
        dest="module",
        metavar="module",
        help="run a library module as a script, like python -m",
    )
    run.add_argument(
        "script", nargs="?", help="the Python file (or directory / zip with __main__.py) to run"
    )
    run.add_argument("args", nargs=argparse.REMAINDER, help="the program's own arguments")
    parser.run_parser = run  # type: ignore[attr-defined]
    report = commands.add_parser(
        "report",
        help="print the report of one or more persisted logs, or write it as HTML",
        description="Report on logs written with `run --persist` or "
        "jaxtrace_nb.start(persist=...). Several logs (one per process of a multi-process run) are "
        "merged in time order; functions whose traces differ between processes are listed.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="a JSON-lines log file, or the directory of JAX's "
        "persistent compilation cache (its "
        "keys, across runs)",
    )
    report.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the HTML report to FILE instead of printing the text report",
    )
    report.add_argument(
        "--internal", action="store_true", help="also show JAX's own jitted helpers"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (a program's own sys.exit propagates)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "run":
        from ._run import run

        ns = _parse_run(parser, argv[1:])
        return run(
            ns.script,
            ns.args,
            module=ns.module,
            persist=ns.persist,
            max_traces=ns.max_traces,
            max_retraces=ns.max_retraces,
            divergence=ns.divergence,
            divergence_grace_s=ns.divergence_grace_s,
            warm=ns.warm,
        )
    ns = parser.parse_args(argv)
    if ns.command == "report":
        return report(ns.logs, output=ns.output, internal=ns.internal)
    parser.error(f"unknown command {ns.command!r}")
    return 2


def _parse_run(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Split `run`'s own options from the program and its arguments, as python does.

    Only what comes before the script (or ``-m module``) is ours; everything after it is the
    program's, even when it looks like one of our options.
    """
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            i += 1
            break
        if name in _RUN_OPTIONS:
            i += 1 if "=" in arg else 2
        elif arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            i += 2 if arg == "-m" else 1
            ours, program = argv[:i], argv[i:]
            ns = parser.parse_args(["run", *ours])
            ns.script, ns.args = None, program
            return ns
        elif arg.startswith("-") and arg != "-":
            i += 1  # -h, or an unknown option: argparse says so
        else:
            break
    ours, rest = argv[:i], argv[i:]
    ns = parser.parse_args(
        ["run", *[a for a in ours if a != "--"]]
    )  # --help, bad options: exits here
    if not rest:
        parser.run_parser.error("give a script to run, or -m module")  # type: ignore[attr-defined]
    ns.script, ns.args = rest[0], rest[1:]
    return ns


# ------------------------------------------------------------------ run


def report(logs: list[str], *, output: str | None = None, internal: bool = False) -> int:
    """Print the text report of the merged `logs`, or write the HTML report to `output`."""
    from .._cache._cache_index import find
    from .._log._persist import load_events
    from .._views._report import Report
    from .._views._text import render_text

    indexes = [(path, find(path)) for path in logs]
    logs = [path for path, index in indexes if index is None]
    events = []
    for path in logs:
        try:
            events += load_events(path)
        except OSError as e:
            print(f"jaxtrace_nb report: cannot read {path!r}: {e.strerror or e}", file=sys.stderr)
            return 2
    for path, index in indexes:
        if index is not None:
            from .._cache._cache_explainer import index_report

            try:
                print(index_report(index) + "\n")
            except Exception as e:
                print(
                    f"jaxtrace_nb report: cannot read the index {index!r}: {type(e).__name__}: {e}",
                    file=sys.stderr,
                )
                return 2
    if not logs:
        return 0
    events.sort(key=lambda e: (e.time is None, e.time or 0))
    processes = sorted({e.process for e in events if e.process is not None})
    title = ", ".join(os.path.basename(p) for p in logs) if len(logs) <= 4 else f"{len(logs)} logs"
    if len(processes) > 1:
        title += f" (processes {', '.join(map(str, processes))})"
    if output is not None:
        from .._views._standalone import write_report

        write_report(output, list(logs), internal=internal)
        print(f"jaxtrace_nb: wrote {output}", file=sys.stderr)
        return 0
    print(render_text(Report(events, title, internal=internal), sections=True))
    return 0
