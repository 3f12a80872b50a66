"""Helpers shared by the test modules (test modules never import each other).

* `rows`: the recorded non-internal traces as (function, cause, leaf, before, after).
* `step_rows`, `describe`: a watch's rows of the function named ``step``, and rows in one line.
* The differential harness: run a program with and without recording and compare what it
  did (`Run`, `run_program`, `without_and_with_recording`).
* `explained_misses`: JAX's own cache-miss explanations tied to the recorded traces.
* `inventory_tool`: the JAX call-site extractor of `benchmarks/jax_inventory.py`.
* `shell`-side helpers for a real IPython `InteractiveShell` (`display_texts`).
* `package_frames`: the lines of a traceback that name a file of jaxtrace_nb itself.
* `free_port`, `report_command`: a port for a local `jax.distributed` coordinator, and
  ``python -m jaxtrace_nb report`` run on logs.
"""

import contextlib
import gc
import importlib.util
import inspect
import logging
import os
import pathlib
import re
import socket
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import jaxtrace_nb as jt
from jaxtrace_nb._jax._internals import version_tuple


def rows(jt, function=None):
    """Non-internal trace events as (function, cause, leaf, before, after) tuples."""
    df = jt.log(internal=False)
    df = df[df["kind"] == "trace"]
    if function is not None:
        df = df[df["function"] == function]
    return [
        tuple(None if v is None or v != v else v for v in r)
        for r in df[["function", "cause", "leaf", "before", "after"]].itertuples(index=False)
    ]


_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def step_rows(watch):
    """The recorded rows of the function named ``step`` in `watch`, JAX's own helpers left out."""
    df = watch.events
    df = df[~df["internal"].astype(bool)]
    return df[df["function"].str.rsplit(".", n=1).str[-1] == "step"]


def describe(rows) -> str:
    """Rows of a log, one line: what each is and what it told."""
    return "; ".join(
        f"{r.kind} #{r.trace_number} cause={r.cause} leaf={r.leaf} {r.before} → {r.after} "
        f"hint_ids={r.hint_ids} ({r.explanation})"
        for r in rows.itertuples()
    )


def _bits(x) -> tuple:
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return ("key", str(x.dtype), *_bits(jax.random.key_data(x)))
    a = np.asarray(x)
    return (a.dtype.str, a.shape, np.ascontiguousarray(a).view(np.uint8).tobytes())


def outcome(value) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(value)
    return ("ok", str(treedef), tuple(_bits(leaf) for leaf in leaves))


def error(e: BaseException) -> tuple:
    cause = e.__cause__
    return (
        "raised",
        type(e).__name__,
        _ADDRESS.sub("0x?", str(e)),
        None if cause is None else (type(cause).__name__, _ADDRESS.sub("0x?", str(cause))),
    )


def _next_seq() -> int:
    from jaxtrace_nb._recording._session import get_session

    return get_session().log.next_seq


def calling_line(thunk) -> str | None:
    """`file:line` of a one-line ``lambda`` (the line it calls from, read from its own source with
    `inspect`); None for any other callable."""
    if getattr(thunk, "__name__", None) != "<lambda>":
        return None
    lines, first = inspect.getsourcelines(thunk)
    return f"{inspect.getsourcefile(thunk)}:{first}" if len(lines) == 1 else None


class Run:
    """What a program did: step outcomes, warnings, body runs, cache sizes, and where each step
    called from (`calls`: (label, the line of a one-line lambda step or None, the log's event
    numbers it made))."""

    def __init__(self):
        self.steps: list[tuple] = []
        self.bodies: dict[str, int] = {}
        self.jitted: dict[str, object] = {}
        self.calls: list[tuple] = []

    def body(self, name: str) -> None:
        """Count one run of a traced Python body (call it inside the body)."""
        self.bodies[name] = self.bodies.get(name, 0) + 1

    def jit(self, name: str, fn):
        """Register a jitted function whose every body run must be one recorded trace."""
        self.jitted[name] = fn
        return fn

    def step(self, label: str, thunk) -> None:
        first = _next_seq()
        try:
            self.steps.append((label, outcome(thunk())))
        except Exception as e:  # noqa: BLE001 - the outcome is what we compare
            self.steps.append((label, error(e)))
        self.calls.append((label, calling_line(thunk), range(first, _next_seq())))

    def cache_sizes(self) -> dict[str, int]:
        sizes = {}
        for name, fn in self.jitted.items():
            cached = getattr(fn, "_cached", fn)  # eqx.filter_jit keeps its jax.jit in `_cached`
            sizes[name] = cached._cache_size()
        return sizes


def run_program(program_fn) -> tuple:
    r = Run()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program_fn(r)
    seen = [(w.category.__name__, _ADDRESS.sub("0x?", str(w.message))) for w in caught]
    return (r.steps, seen, dict(r.bodies), r.cache_sizes()), r


def without_and_with_recording(run, *, warm: bool = False) -> tuple:
    """`run()` with jaxtrace_nb stopped, then recording; (result without, result with, events).

    Both runs come from one call site, so that tracebacks quoted in messages name the same
    lines. With `warm`, a first run, discarded, warms JAX's process-wide caches (whether
    JAX itself calls a user's ``__eq__`` can differ between a first and a later run).
    """
    jt.stop()
    jt.reset()
    results = []
    try:
        for recording in (False, False, True) if warm else (False, True):
            if recording:
                jt.start()
            gc.collect()
            results.append(run())
        events = jt.log(internal=False)
    finally:
        jt.stop()
        jt.reset()
    return results[-2], results[-1], events


def display_outputs(sh):
    """The data of every display a capturing `InteractiveShell` published."""
    return [o["data"] for o in sh.display_pub.outputs]


def display_texts(sh):
    """The text/plain of every display a capturing `InteractiveShell` published."""
    return [d.get("text/plain", "") for d in display_outputs(sh)]


def inventory_tool():
    """benchmarks/jax_inventory.py (the one home of the JAX call-site extraction), loaded by
    path: pytest puts tests/, not the repository root, on sys.path."""
    name = "_jaxtrace_jax_inventory"
    if name not in sys.modules:
        path = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "jax_inventory.py"
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


_PACKAGE_DIR = pathlib.Path(jt.__file__).resolve().parent
# A module file of the package wherever it is installed (a subprocess may import another copy):
# the checkout's own directory may be called jaxtrace_nb too, so the name alone proves nothing.
# (A module is in one of the package's folders, `_recording/_probe.py`, or at its top.)
_PACKAGE_FILE = re.compile(r"(?<![\w.-])jaxtrace_nb[\\/](?:_\w+[\\/]\w+|_{1,2}\w+)\.py\b")


def package_frames(text: str) -> list:
    """The lines of a traceback `text` that name a file of jaxtrace_nb's package."""
    return [
        line
        for line in text.splitlines()
        if str(_PACKAGE_DIR) + "/" in line or _PACKAGE_FILE.search(line)
    ]


def package_frames_on_cache_hits(calls, repeat: int = 50) -> list:
    """The frames of jaxtrace_nb's own code that run while `calls()` makes cache-hit calls
    `repeat` times, seen by `sys.setprofile` (which sees every Python call)."""
    import os

    package_dir = os.path.dirname(jt.__file__) + os.sep
    frames = []

    def profiler(frame, event, arg):
        if frame.f_code.co_filename.startswith(package_dir):
            frames.append((frame.f_code.co_name, event))

    sys.setprofile(profiler)
    try:
        for _ in range(repeat):
            calls()
    finally:
        sys.setprofile(None)
    return frames


# JAX's own explanation of a tracing-cache miss (`jax_explain_cache_misses`) -> our causes
# that agree with it.
JAX_CATEGORIES = {
    "never seen function": {"first", "new_function"},
    "Tracing context doesn't match": {"context"},
    "different tracing context": {"context"},  # JAX 0.8
    "different input pytree": {"structure", "static"},
    "different value of static args": {"static"},  # JAX 0.8, and the next three
    "different value of static kwargs": {"static", "structure"},  # a static keyword passed or not
    "different static_argnums": {"static", "structure"},
    "different number of args and kwargs": {"structure"},
    "Debug info doesn't match": {"new_function", "structure"},
    "different input types": {"shape", "dtype", "weak_type", "sharding"},
    "cache miss explanation unavailable": {"unknown"},
}
if version_tuple(jax.__version__) >= (0, 11):
    # JAX 0.11's explainer compares tree structures in which a static argument is a plain
    # leaf: a changed static value is "unavailable" there (seen on JAX 0.11.0's code).
    JAX_CATEGORIES["cache miss explanation unavailable"] = {"unknown", "static"}


class _ExplainedMisses(logging.Handler):
    """Collects JAX's cache-miss explanations and ties each to the trace that follows it.

    JAX logs its explanation just before it runs the trace, and jaxtrace_nb's trace hook
    runs at the start of that trace: the session's `on_trace` is shadowed to take the
    latest explanation of the same function (JAX explains every traced transformation;
    jaxtrace_nb records jit traces only).
    """

    def __init__(self, session, explained_after: bool):
        super().__init__(logging.WARNING)
        self.latest = None
        self.started: dict = {}  # JAX name -> draft of that function's latest trace start
        self.after = explained_after  # JAX 0.8 explains a miss once its trace is done
        # (draft, (name, category)); a draft's event is built when the log is read
        self.by_draft: list = []
        # id(draft) -> JAX's categories of the new key's difference from each earlier key
        self.every: dict = {}
        on_trace = session.lifecycle.on_trace

        def tagged(trace):
            every = _categories_against_every_earlier_key()
            recorded = on_trace(trace)
            latest, self.latest = self.latest, None
            if recorded:
                self.started[trace.name] = trace
                if latest is not None and latest[0] == trace.name:
                    self.by_draft.append((trace, latest))
                if every is not None:
                    self.every[id(trace)] = every
            return recorded

        self.on_trace = tagged

    def _explained(self, name: str, category: str) -> None:
        if self.after:
            draft = self.started.pop(name, None)
            if draft is not None:
                self.by_draft.append((draft, (name, category)))
        else:
            self.latest = (name, category)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not message.startswith("TRACING CACHE MISS"):
            return
        lines = message.splitlines()
        if lines[1].strip() == "never seen function:":
            self._explained(lines[2].split()[0], "never seen function")
            return
        name = lines[1].strip().removeprefix("for ").split(" defined at ")[0]
        self._explained(name, next((c for c in JAX_CATEGORIES if c in message), ""))


def _explained_apart(event, category: str) -> bool:
    """Where JAX and jaxtrace_nb see different histories, both stated: JAX forgets every key at
    `jax.clear_caches()` ("never seen"), and compares with keys of traces that raised, which
    jaxtrace_nb does not count as traces (its explanation names the failed attempts)."""
    cleared = event.cause == "unknown"  # JAX's "never seen": it forgot the key, as jaxtrace_nb says
    after_failure = event.cause == "first" and "raised while tracing" in event.explanation
    return (cleared and category == "never seen function") or after_failure


class _Misses:
    """What `explained_misses` collected: JAX's explanation of each recorded trace it explained."""

    def __init__(self, handler):
        self._handler = handler

    def explained(self, events) -> list:
        """(event, (name, JAX's category)) for each of `events` JAX explained."""
        by_event = {
            id(draft.event): explained
            for draft, explained in self._handler.by_draft
            if draft.event is not None
        }
        return [(e, by_event[id(e)]) for e in events if id(e) in by_event]

    def disagreements(self, explained) -> list:
        """(function, trace number, our cause, JAX's category) where the two disagree.

        JAX's explainer reports the earlier key it ranks closest, by the first part of the key
        that differs in the order trace context, pytree, debug info, types: a key that differs in
        its pytree outranks one that differs in a type only. jaxtrace_nb names the earlier key with
        the fewest differences. So, where JAX's cache can be read (JAX 0.9 on), our cause must be
        what JAX's own comparison (``diff_tracing_cache_keys``) finds against some earlier key."""
        every = {
            id(draft.event): categories
            for draft, _ in self._handler.by_draft
            for categories in [self._handler.every.get(id(draft))]
            if categories is not None
        }
        out = []
        for e, (_, category) in explained:
            if e.cause in JAX_CATEGORIES.get(category, ()) or _explained_apart(e, category):
                continue
            found = every.get(id(e))
            if found and any(e.cause in JAX_CATEGORIES.get(c, ()) for c in found):
                continue
            out.append((e.function, e.trace_number, e.cause, category))
        return out


def _categories_against_every_earlier_key() -> set | None:
    """JAX's own category (``partial_eval.diff_tracing_cache_keys``) of the difference between the
    key of the trace starting now and each earlier key of the same function in JAX's tracing cache;
    None where that cache cannot be read so (JAX 0.8)."""
    from jax._src import config
    from jax._src.interpreters import partial_eval as pe

    diff, cached = getattr(pe, "diff_tracing_cache_keys", None), getattr(pe, "trace_to_jaxpr", None)
    if diff is None or not hasattr(cached, "cache_keys"):
        return None
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_name not in (
        "trace_to_jaxpr",
        "trace_to_jaxpr_nocache",
    ):
        frame = frame.f_back
    if frame is None:
        return None
    local = frame.f_locals
    fun = local.get("fun")
    context = tuple(local.get("context_for_cache_key") or ())
    new = (config.trace_context(), (local.get("in_avals"), local.get("debug_info"), *context), {})
    categories = set()
    for fun_ref, *key in cached.cache_keys():
        if fun_ref() is fun:
            message = diff(new, tuple(key))[-1]
            categories.add(next((c for c in JAX_CATEGORIES if c in message), ""))
    return categories


@contextlib.contextmanager
def explained_misses():
    """`jax_explain_cache_misses` on, JAX's explanations tied to the traces jaxtrace_nb records."""
    from jaxtrace_nb._jax._internals import detect
    from jaxtrace_nb._recording._session import get_session

    session = get_session()
    handler = _ExplainedMisses(session, explained_after=detect().layout.name == "0.8")
    loggers = [
        logging.getLogger(name) for name in ("jax._src.interpreters.partial_eval", "jax._src.pjit")
    ]
    session.lifecycle.on_trace = handler.on_trace
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with jax.explain_cache_misses(True):
            yield _Misses(handler)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        del session.lifecycle.on_trace


REPO = pathlib.Path(__file__).parent.parent


def free_port() -> int:
    """A TCP port free on localhost now (for a `jax.distributed` coordinator)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_command(*args, env: dict | None = None) -> subprocess.Popen:
    """``python -m jaxtrace_nb run ARGS...`` started from the repository on JAX's CPU backend,
    its output piped (as text)."""
    return subprocess.Popen(
        [sys.executable, "-m", "jaxtrace_nb", "run", *map(str, args)],
        cwd=REPO,
        env=env if env is not None else dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def report_command(logs, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m jaxtrace_nb report LOG...`` run from the repository, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", *map(str, logs)],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
