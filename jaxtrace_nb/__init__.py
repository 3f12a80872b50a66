"""jaxtrace_nb: see why your jitted JAX and Equinox functions retrace and recompile.

In a notebook::

    %load_ext jaxtrace_nb        # record every trace and compile in this kernel
    %%tracewatch                 # run one cell and show what it traced, and why

From Python::

    import jaxtrace_nb as jt
    with jt.watch() as w:
        step(model, x)
    w.events          # one row per trace: cause, changed leaf, before -> after, seconds
"""

from __future__ import annotations

import os

from ._diagnosis._divergence import DivergenceError
from ._integrations._watch import RetraceError, Watch
from ._jax._internals import SUPPORTED_JAX
from ._recording._session import JaxtraceWarning, get_session

__version__ = "0.1.0"

__all__ = [
    "DivergenceError",
    "JaxtraceWarning",
    "RetraceError",
    "SUPPORTED_JAX",
    "Watch",
    "dropped",
    "faults",
    "load",
    "load_ipython_extension",
    "log",
    "reset",
    "start",
    "stop",
    "summary",
    "unload_ipython_extension",
    "watch",
    "report",
    "show",
    "compile_profile",
    "plot_timeline",
    "export",
    "shape_census",
    "precompile",
]


def start(
    *,
    max_events: int | None = None,
    persist: str | os.PathLike | None = None,
    divergence: str | None = None,
    divergence_grace_s: float | None = None,
) -> None:
    """Start recording every jit trace and compile in this process (idempotent).

    `max_events` caps the log (default 100,000); the oldest events are dropped and
    counted (``jt.dropped()``). `persist` appends every event to a file as one JSON
    line, flushed as it happens, so a kernel that dies (say, out of memory in a huge
    compile) loses nothing already recorded; read it back with :func:`load`.

    In a process of a `jax.distributed` run, each trace of a jitted function whose arguments
    span processes (a global array) is compared with the other processes' through JAX's
    coordination service. `divergence` says what a difference does: ``"warn"`` (the default:
    a ``jaxtrace_nb: divergence`` line on stderr and a row of kind ``divergence`` in every
    process's log), ``"raise"`` (also :class:`DivergenceError` in the process whose key differs,
    before its program runs) or ``"off"``. `divergence_grace_s` (default 60) is how long a
    process waits for the others' key (docs/divergence.md).

    Example::

        jt.start(persist="traces.jsonl")
        f(1.0); f(jnp.ones(3))
        jt.log()[["function", "cause", "leaf", "before", "after"]]
        jt.start(divergence="raise")   # a cluster job fails fast, with the reason
    """
    session = get_session()
    if max_events is not None:
        session.log.set_max_events(max_events)
    session.start(
        persist=None if persist is None else os.fspath(persist),
        divergence=divergence,
        divergence_grace_s=divergence_grace_s,
    )


def load(paths):
    """The DataFrame of one or more logs persisted with ``start(persist=path)``, as :func:`log`
    gives it.

    `paths` is a path or a list of paths (e.g. one per process of a multi-process run); their
    events are merged in time order, each row with its `host` and `process`. Tolerates a torn
    last line (a kernel killed while writing). Given the directory of JAX's persistent
    compilation cache instead (or the index file beside it), the index jaxtrace_nb keeps there:
    one row per key any recorded process computed, with the parts of the key. Example::

        df = jt.load("traces.jsonl")   # after the kernel died
        df[df["compile_s"].isna()]      # the trace whose compile never finished
        jt.load(["p0.jsonl", "p1.jsonl"]).groupby("process")["compile_s"].sum()
        jt.load("/data/jax_cache").groupby("name").size()   # keys per computation, across runs
    """
    from ._log._persist import load_events
    from ._views._frames import events_frame

    if isinstance(paths, (str, os.PathLike)):
        from ._cache._cache_index import find

        index = find(os.fspath(paths))
        if index is not None:
            from ._views._frames import cache_keys_frame

            return cache_keys_frame(index)
        return events_frame(load_events(paths))
    events = [e for path in paths for e in load_events(path)]
    events.sort(key=lambda e: (e.time is None, e.time or 0))
    return events_frame(events)


def stop() -> None:
    """Stop recording and leave JAX exactly as it was before `start` (idempotent)."""
    get_session().stop()


def watch(*, max_traces: int | None = None, max_retraces: int | None = None) -> Watch:
    """A context manager that records the traces inside it; works with or without `start`.

    With `max_traces=N`, the (N+1)-th trace of any one (non-internal) function inside
    the scope raises :class:`RetraceError` naming the function, the changed leaf and
    before → after, whatever the order of decorators. With `max_retraces=N`, the
    (N+1)-th retrace inside the scope does: a trace of a function already traced before
    (in this scope or earlier in the session). `max_retraces=0` stops at the first retrace.

    Example::

        with jt.watch(max_traces=1) as w:
            for batch in batches:
                step(model, batch)
        w.events, w.summary()
    """
    return Watch(get_session(), max_traces=max_traces, max_retraces=max_retraces)


def log(*, internal: bool = True):
    """DataFrame of every recorded event (one row per trace, or compile without a trace).

    `internal=False` hides JAX's own jitted helpers.
    """
    from ._views._frames import events_frame

    events = get_session().log.events()
    if not internal:
        events = [e for e in events if not e.internal]
    return events_frame(events)


def summary(*, internal: bool = False, by: str = "total_s"):
    """DataFrame with one row per function: traces, compiles, seconds, equations, last cause and
    leaf.

    Sorted by `by`, largest first (``"compile_s"``, ``"eqns"``, ``"traces"``, ...). Example::

        jt.summary(by="eqns").head()   # the biggest graphs: unrolled loops, inlined models
    """
    from ._views._frames import summary_frame

    events = get_session().log.events()
    if not internal:
        events = [e for e in events if not e.internal]
    df = summary_frame(events)
    if by != "total_s":
        df = df.sort_values(by, ascending=False, kind="stable", na_position="last").reset_index(
            drop=True
        )
    return df


def reset() -> None:
    """Forget every recorded event and function (recording stays on if it was on)."""
    get_session().reset()


def dropped() -> int:
    """How many events the log's cap has dropped since the last reset."""
    return get_session().log.dropped


def faults() -> dict[str, int]:
    """Counts of internal failures by stage (each was reported once as a warning)."""
    return dict(get_session().fault_counts)


def load_ipython_extension(ipython) -> None:
    from ._integrations._ipython import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from ._integrations._ipython import unload

    unload(ipython)


def report(path, events=None, *, internal: bool = False) -> str:
    """Write one self-contained HTML report to `path` (returned): the sortable, filterable table
    with each function's history, readable offline, with no request to any server.

    `events` is what to report: None (the log of this session), a DataFrame (``jt.log()``,
    ``jt.load(...)``), the path of a persisted log, or a list of paths (merged; a multi-process
    run also gets the section "Differs across processes"). `internal=True` lists JAX's and
    libraries' internal jitted helpers from the start. Example::

        jt.report("retraces.html")                                  # this session
        jt.report("run.html", events=["p0.jsonl", "p1.jsonl"])     # logs of a 2-process run
    """
    from ._views._standalone import write_report

    if events is None:
        return write_report(
            path, get_session().log.events(), internal=internal, title="jaxtrace_nb session"
        )
    return write_report(path, events, internal=internal)


def show(events_or_paths) -> None:
    """Display the interactive table (in a notebook) or the text report (elsewhere) of a log
    other than the live one: a DataFrame, a persisted log's path, or a list of paths. Example::

        jt.show("traces.jsonl")  # the log a script wrote with `python -m jaxtrace_nb run --persist`
        jt.show(jt.log().query("cell == 4"))
    """
    from ._integrations._ipython import show as display

    display(events_or_paths)


def _events(events, internal: bool):
    """The events to look at: the live log's (None), or those of a DataFrame, a log's path or
    paths."""
    if events is None:
        found = get_session().log.events()
    else:
        from ._views._standalone import events_from

        found = events_from(events)
    return found if internal else [e for e in found if not e.internal]


def compile_profile(fn=None, *, events=None, internal: bool = False):
    """Where each traced program's equations come from: a DataFrame with one row per (function,
    trace, line of your code), the lines under which most equations were made first.

    `eqns` counts the equations whose innermost line of your code is that line (they sum to the
    trace's `eqns_total`; a library's equations count for the line of yours that called it);
    `eqns_incl` counts every equation made under the line, in the functions it calls too (an
    unrolled loop's line holds all of its body's). `compile_s_est` is the compile's seconds
    shared out by `eqns`: equations are a proxy, XLA does not report seconds per line. The row
    ``<other>`` holds the lines past the top 20. `fn` keeps one function (a name or the function);
    `events` reads another log (a DataFrame, a path or a list of paths). Example::

        simulate(state, 0.05)
        jt.compile_profile(simulate).head()
        #   function  trace_number  location     eqns  eqns_incl  share  ...
        #   simulate             1  sim.py:9      300       1200   0.25
        #   simulate             1  sim.py:4      500        500   0.42
    """
    from ._views._where import profile_frame

    return profile_frame(_events(events, internal), fn, internal=internal)


def shape_census(
    fn=None,
    *,
    sizes=None,
    max_padding: float = 0.15,
    events=None,
    internal: bool = False,
    full: bool = False,
    alternatives: int = 3,
):
    """For every leaf that retraced on `shape`: the shapes seen, their compiles and seconds, and
    how padding its varying dimensions would have compiled fewer times. A DataFrame, per leaf:
    the suggestion first (``suggested``), then at most `alternatives` other schemes (the best
    of each kind first), then ``as is`` to compare with; `full=True` gives every scheme tried,
    ``as is`` first.

    Schemes: ``multiple_of(N)``, ``pow2``, ``buckets(K)`` (K sizes chosen to pad the least; past
    the largest, a size pads to its next multiple). A scheme's ``compiles`` is exact for the
    shapes this run saw. ``padding`` is the share of extra elements, per distinct shape seen (a
    cache hit never reaches jaxtrace_nb, so calls are not counted) unless `sizes`, a sample of the
    real sizes, weights it by calls. The suggestion has the fewest compiles within `max_padding`.
    Its ``code`` pads a size ``n``. Example::

        for batch in batches:            # 12 distinct lengths
            step(params, batch)
        jt.shape_census()[["scheme", "buckets", "compiles", "padding", "suggested"]]
        #           scheme                                  buckets  compiles  padding  suggested
        #       buckets(5)                         34,58,96,136,250         5    0.121       True
        #       buckets(6)                      34,58,96,136,203,250         6    0.077      False
        #  multiple_of(16)           16,32,48,64,96,128,144,208,256         9    0.076      False
        #             pow2                         16,32,64,128,256         5    0.312      False
        #            as is  16,21,27,34,41,58,84,96,119,136,203,250        12    0.000      False
        jt.shape_census(full=True)       # every scheme tried: 19 rows for this leaf
    """
    import pandas as pd

    from ._views._census import CENSUS_FRAME_COLUMNS, census, census_rows
    from ._views._where import matches

    found = [
        c
        for c in census(
            _events(events, internal), sizes=sizes, max_padding=max_padding, internal=True
        )
        if matches(c.function, fn)
    ]
    rows = census_rows(found, None if full else alternatives, max_padding)
    return pd.DataFrame(rows, columns=list(CENSUS_FRAME_COLUMNS))


def plot_timeline(*, events=None, internal: bool = False, ax=None):
    """Every compile of the run over wall time, with matplotlib: one row per function, each
    compile a mark whose area is its trace + lower + compile seconds, coloured by cause, and the
    cumulative seconds on the right axis. Returns the Axes (needs matplotlib; the live table and
    `jt.report` draw the same timeline without it). Example::

        train(steps=10_000)
        ax = jt.plot_timeline()
        ax.figure.savefig("compiles.png")
    """
    from ._views._timeline import plot, timeline

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(
            "jt.plot_timeline() needs matplotlib (pip install matplotlib); the live table "
            "and jt.report() draw the timeline without it"
        ) from None
    return plot(timeline(_events(events, internal), internal=internal), ax=ax)


def export(path, *, events=None, internal: bool = False) -> str:
    """Write the run's compiles to `path` in the Trace Event Format (JSON), which Perfetto
    (ui.perfetto.dev) and chrome://tracing open: one process per JAX process of the log, one
    thread per function, a slice per stage (trace, lower, XLA compile) of each compile with its
    cause and leaf, and a counter of cumulative seconds. Returns the path. Example::

        jt.export("run.trace.json")
        jt.export("all.trace.json", events=["p0.jsonl", "p1.jsonl"])   # a multi-process run
    """
    from ._views._timeline import write_trace_events

    return write_trace_events(path, _events(events, internal), internal=True)


def precompile(
    fn, *example_args, log=None, workers: int | None = None, buckets: bool = False, **example_kwargs
):
    """Compile, in background threads, every signature of `fn` a log recorded that JAX does not
    hold yet, so that the program's later call at that signature does not wait for XLA.

    `fn` is jitted with ``jax.jit``, ``eqx.filter_jit`` or ``nnx.jit``; `example_args` /
    `example_kwargs` are one real call's arguments, passed as your program passes them (by
    position or by keyword: JAX keys them apart). Each recorded signature is rebuilt from them
    with the recorded shapes, dtypes and weak types of its array leaves, and the recorded value of
    a plain Python static (int, float, bool, str, None, tuples of these); from a persisted log,
    each committed array's recorded placement too (a device, or a ``PartitionSpec`` on a mesh
    with the recorded axes). A signature that still differs from the rebuilt call is skipped,
    its reason naming the argument. `log` is this session's log (None), a persisted log's path,
    a list of them, or a DataFrame (``jt.load(...)``). `workers` is the number of threads
    (default: the cores less one). With `buckets=True`, each leaf for which
    ``jt.shape_census`` (on the same log) suggests a padding scheme is compiled at its buckets
    instead: the signatures a program that pads as suggested will call. The programs also go to
    JAX's persistent compilation cache: yours as configured, else one set up for the process
    (said once on stderr). Returns a handle: ``handle.table()`` so far,
    ``handle.wait(timeout=None)`` when done; a DataFrame with columns `signature`, `status`
    (``compiled`` | ``held``: JAX had it already | ``skipped`` | ``failed``), `reason`,
    `compile_s`. A failure is a row, never an exception in your program; only a call of
    `precompile` itself that cannot start raises (TypeError: `fn` is not jitted, or the example
    does not fit its parameters). Example::

        step(params, batch)                                    # the first batch size
        handle = jt.precompile(step, params, batch, log="last_run.jsonl")
        ...                                                    # other work meanwhile
        handle.wait()[["signature", "status", "compile_s"]]
    """
    from ._integrations._precompile import precompile as run

    return run(fn, example_args, example_kwargs, log=log, workers=workers, buckets=buckets)
