"""`jt.precompile`: compile, in background threads, the signatures a log recorded for a function.

Each recorded signature is rebuilt from one real call's arguments, the example (`_keys._rebuild`).
What the rebuild cannot set (a module's static field, a function, a structure) is compared first
with the example's own signature: a difference skips the row, naming the paths. The rebuilt call
is then traced on a worker thread through JAX's public AOT API; the probe records that trace like
any other and hands its record back to the thread (`_recording._precompiling`), whose signature,
in full, must equal the recorded one, else the row is `skipped` naming the paths (JAX decides what
the rebuilt key is). A trace JAX already held does not reach the probe: `held`. Then the lowered
program is compiled; XLA releases the GIL meanwhile.

JAX keeps what the worker traced, lowered and compiled in its in-process caches, so the user's
later call at that signature runs without tracing; the program also goes to JAX's persistent
compilation cache (the user's, as configured, else a directory set up for the process), where
another jit object of the same function, or another process, loads it. docs/precompile.md.
"""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from .._adapters.equinox import is_filter_jit_wrapper
from .._adapters.flax_nnx import is_nnx_jit_wrapper, variable_value
from .._core._vocabulary import EventKind, StrEnum
from .._diagnosis._processes import _MORE_KEY, parse_signature_column, signature_column
from .._keys._rebuild import (
    Example,
    Jit,
    differences,
    not_rebuilt,
    passed_otherwise,
    staged_by_trace,
)
from .._keys._rebuild import placed as placed_text
from .._log._events import Event
from .._recording._precompiling import mark_precompiling, noted_lowerings, noted_traces

EXIT_WAIT_S = 30.0  # at exit: how long to wait for compiles under way (queued ones are dropped)


class Status(StrEnum):
    COMPILED = "compiled"
    HELD = "held"
    SKIPPED = "skipped"
    FAILED = "failed"
    QUEUED = "queued"
    RUNNING = "running"


TABLE_COLUMNS = ("signature", "status", "reason", "compile_s", "saved_s")


@dataclasses.dataclass
class Row:
    """One recorded signature (`leaves`: its full ``{path: leaf text}``; `signature`: the log's
    bounded text of it) and what became of it."""

    signature: str
    status: Status = Status.QUEUED
    reason: str | None = None
    compile_s: float | None = None
    trace_s: float | None = None  # the worker's trace of the rebuilt call
    leaves: dict = dataclasses.field(default_factory=dict, repr=False)
    # {path: placement} as the log recorded its compile; None where not known (a session's key)
    placements: dict | None = dataclasses.field(default_factory=dict, repr=False)

    @property
    def saved_s(self) -> float | None:
        """A `compiled` row's trace + lower + compile seconds, done by a worker: what the program's
        call at this signature no longer waits for."""
        if self.status is not Status.COMPILED or self.compile_s is None:
            return None
        return (self.trace_s or 0.0) + self.compile_s


class Precompile:
    """What `jt.precompile` returns: its table so far (`table`), or when done (`wait`)."""

    def __init__(self, rows: list[Row]):
        self._rows = rows
        self._lock = threading.Lock()
        self._done = threading.Event()
        if all(r.status not in (Status.QUEUED, Status.RUNNING) for r in rows):
            self._done.set()

    def table(self):
        """The DataFrame so far: one row per recorded signature (`signature`, `status`, `reason`,
        `compile_s`); a row not finished yet reads ``queued`` or ``running``."""
        import pandas as pd

        with self._lock:
            rows = [
                (r.signature, str(r.status), r.reason, r.compile_s, r.saved_s) for r in self._rows
            ]
        return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))

    def wait(self, timeout: float | None = None):
        """The table once every row is finished, or after `timeout` seconds (the table so far)."""
        self._done.wait(timeout)
        return self.table()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _set(self, row: Row, status: Status, reason=None, compile_s=None) -> None:
        with self._lock:
            row.status, row.reason, row.compile_s = status, reason, compile_s
            if all(r.status not in (Status.QUEUED, Status.RUNNING) for r in self._rows):
                self._done.set()

    def __repr__(self) -> str:
        return f"<jaxtrace_nb precompile: {len(self._rows)} signatures, done={self.done}>"


# ------------------------------------------------------------------ what the log recorded
def _written(leaves: dict, placements: dict) -> str:
    """A row's `signature`: the log's text of the leaves, a committed leaf's placement after its
    type (``"x": "f32[8,4] (sharded P('d',))"``)."""
    return signature_column(
        {
            path: f"{text} ({placements[path]})" if placed_text(placements.get(path)) else text
            for path, text in leaves.items()
        }
    )


def _identity(fn) -> tuple[str, Any]:
    """(jit kind, the user's function) of a jitted `fn`; TypeError for anything else."""
    kind = type(fn)
    if is_filter_jit_wrapper(fn):
        return Jit.EQUINOX, fn.__wrapped__
    if is_nnx_jit_wrapper(fn):
        return Jit.NNX, fn.__wrapped__
    if callable(getattr(fn, "trace", None)) and callable(getattr(fn, "__wrapped__", None)):
        return Jit.JAX, fn.__wrapped__
    raise TypeError(
        "jt.precompile takes a function jitted with jax.jit, eqx.filter_jit or nnx.jit, not "
        f"{kind.__name__}"
    )


def _where(function, session) -> tuple[str, str | None]:
    """The log's `function` and `location` of a Python function."""
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", "?")
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None:
        return name, None
    return name, session._source_place(f"{code.co_filename}:{code.co_firstlineno}")


def _texts(record) -> dict[str, str] | None:
    """A signature's ``{path: leaf text}``, in full (the log's column is bounded)."""
    signature = getattr(record, "signature", None)
    if signature is None:
        return None
    return {path: leaf.text for path, leaf in signature.get().leaves.items()}


def _held_keys(session, name: str, location: str | None) -> list[tuple[str | None, dict]]:
    """(location, signature) of every key this session keeps for functions named `name`."""
    out = []
    for state in list(session.functions.values()):
        identity = state.identity
        if identity is None or identity.name != name or identity.internal:
            continue
        for kept in list(state.keys):
            leaves = _texts(kept)
            if leaves is not None:
                out.append((identity.location, leaves))
    return out


_LOGGED = ("function", "location", "signature", "kind", "placements")


def _logged(log) -> list[tuple[str | None, str | None, dict, dict]]:
    """(function, location, signature, placements) of each signature a persisted log (a path or a
    list of them) or a log's DataFrame recorded: a trace's, with its compile's placements; and a
    compile's, with the signature of the earlier trace of that function (in the same log) whose
    arrays the compile's arguments are, where exactly one such signature is (else left out)."""
    if isinstance(log, list) and all(isinstance(e, Event) for e in log):  # (`run --warm`'s)
        logs = [[tuple(getattr(e, c) for c in _LOGGED) for e in log]]
    elif hasattr(log, "columns"):
        if not all(c in log.columns for c in _LOGGED[:3]):
            raise ValueError("the DataFrame has no `signature` column: it is not a log")
        cols = [c if c in log.columns else None for c in _LOGGED]
        logs = [
            [tuple(r[c] if c else None for c in cols) for r in log.to_dict("records")]
            if len(log)
            else []
        ]
        if logs[0] and not any(isinstance(r[2], str) for r in logs[0]):
            raise ValueError(
                "the DataFrame's log kept no signatures (only a persisted log does: "
                "jt.start(persist=...)); pass log=None for this session's, or jt.load(path)"
            )
    else:
        from .._log._persist import load_events

        paths = [log] if isinstance(log, (str, os.PathLike)) else list(log)
        logs = [
            [tuple(getattr(e, c) for c in _LOGGED) for e in load_events(os.fspath(p))]
            for p in paths
        ]
    out = []
    for rows in logs:
        traced: dict[tuple, list[dict]] = {}
        for function, location, sig, kind, placements in rows:
            leaves = parse_signature_column(sig)
            if leaves is None:
                continue
            placed = parse_signature_column(placements) or {}
            if str(kind) == EventKind.COMPILE:
                # the trace whose arrays these are; where traces that differ elsewhere (a static)
                # all match, which one the compile's program came from is not known: none
                earlier = traced.get((function, location), [])
                matching = {tuple(t.items()): t for t in earlier if leaves.items() <= t.items()}
                if len(matching) != 1:
                    continue
                (leaves,) = matching.values()
            else:
                traced.setdefault((function, location), []).append(leaves)
            out.append((function, location, leaves, placed))
    return out


def _recorded(log, session, name: str, location: str | None) -> list[tuple[dict, dict | None]]:
    """The distinct (signature, placements) recorded for the function, in order: this session's
    keys (`log` None; placements None: its keys are traces', not compiles') or a log's rows;
    those at `location` where there are any, else every one of `name`."""
    if log is None:
        found = [(loc, sig, None) for loc, sig in _held_keys(session, name, location)]
    else:
        found = [
            (loc, sig, placed)
            for f, loc, sig, placed in _logged(log)
            if f == name and sig is not None
        ]
    here = [(s, p) for loc, s, p in found if loc == location] or [(s, p) for _, s, p in found]
    distinct: dict[tuple, tuple[dict, dict]] = {}
    for sig, placed in here:
        committed = frozenset(_committed(placed or {}).items())
        distinct.setdefault((tuple(sig.items()), committed), (sig, placed))  # (in order)
    return list(distinct.values())


def _bucketed(log, session, name: str, signatures: list[tuple[dict, dict]]) -> list[tuple]:
    """The signatures the program calls once it pads as `jt.shape_census` suggests for `name`
    (its ``suggested`` scheme per leaf, from the same log): each such leaf's varying dimensions
    padded to the scheme's buckets; a leaf with no suggestion keeps its recorded shape."""
    from .._views._census import census, parse_shape
    from .._views._standalone import events_from

    events = session.log.events() if log is None else events_from(log)
    pads = {
        found.leaf: (found.varying, [found.pick.pad(i) for i in range(len(found.varying))])
        for found in census(events, internal=True)
        if found.function == name and found.pick is not None
    }
    out: dict[tuple, tuple[dict, dict]] = {}
    for sig, placements in signatures:
        padded = dict(sig)
        for path, (varying, pad) in pads.items():
            parsed = parse_shape(sig.get(path))
            if parsed is None or max(varying) >= len(parsed[1]):
                continue
            dims = list(parsed[1])
            for d, p in zip(varying, pad):
                dims[d] = p(dims[d])
            padded[path] = _with_dims(sig[path], dims)
        committed = frozenset(_committed(placements or {}).items())
        out.setdefault((tuple(padded.items()), committed), (padded, placements))
    return list(out.values())


def _with_dims(text: str, dims: list[int]) -> str:
    """An array leaf's text (``f32[37,3] (weak)``) with other dimensions."""
    head, _, rest = text.partition("[")
    return f"{head}[{','.join(map(str, dims))}]{rest.partition(']')[2]}"


# ------------------------------------------------------------------ the persistent cache
_CACHE_LOCK = threading.Lock()
_CACHE_SAID = False


def ensure_cache() -> str | None:
    """The persistent compilation cache's directory: the user's where configured (left as it is);
    else, unless the user disabled the cache, a directory set up for this process (said once on
    stderr, removed at exit)."""
    global _CACHE_SAID
    import jax

    with _CACHE_LOCK:
        path = jax.config.jax_compilation_cache_dir
        if path or not jax.config.jax_enable_compilation_cache:
            return path or None
        path = tempfile.mkdtemp(prefix="jaxtrace_nb-precompile-")
        jax.config.update("jax_compilation_cache_dir", path)
        atexit.register(_remove_cache, path)
        if not _CACHE_SAID:
            _CACHE_SAID = True
            print(
                f"jaxtrace_nb: precompile set up JAX's persistent compilation cache in {path} "
                "for this process (set jax_compilation_cache_dir to keep one)",
                file=sys.stderr,
            )
        return path


def _remove_cache(path: str) -> None:
    """At exit: the workers stopped (their compiles would write into the directory), the index
    beside the cache written (its own exit flush comes after this one, registered earlier), then
    the directory removed."""
    _close_all()
    try:
        from .._cache._cache_explainer import _flush_all

        _flush_all()
    except Exception:
        pass
    shutil.rmtree(path, True)


# ------------------------------------------------------------------ the workers
class _Workers:
    """The rows left to do, shared by a handle's daemon threads; at exit the queued ones are
    dropped and those under way waited for, at most `EXIT_WAIT_S`."""

    def __init__(self, handle: Precompile, job, n: int, on_done):
        self.handle, self.job, self.on_done = handle, job, on_done
        self.todo: queue.SimpleQueue = queue.SimpleQueue()
        self.closing = False
        self.threads: list[threading.Thread] = []
        self._left = n
        self._lock = threading.Lock()
        _OPEN.add(self)
        for row in handle._rows:
            if row.status is Status.QUEUED:
                self.todo.put(row)
        if _EXITING.is_set():  # (the exit began meanwhile: no thread starts)
            self._drop("the program exited first")
            _OPEN.discard(self)
            on_done()
            return
        for i in range(n):
            t = threading.Thread(target=self._run, name=f"jaxtrace_nb-precompile-{i}", daemon=True)
            self.threads.append(t)
            t.start()

    def _run(self) -> None:
        mark_precompiling(True)
        try:
            while not self.closing:
                try:
                    row = self.todo.get_nowait()
                except queue.Empty:
                    break
                self.handle._set(row, Status.RUNNING)
                try:
                    self.job(row)
                except BaseException as exc:  # a failure is a row, never the user's exception
                    self.handle._set(row, Status.FAILED, f"{type(exc).__name__}: {exc}"[:300])
        finally:
            mark_precompiling(False)
            with self._lock:
                self._left -= 1
                last = self._left == 0
            if last:
                self._drop("stopped before its turn")
                _OPEN.discard(self)
                self.on_done()

    def _drop(self, reason: str) -> None:
        while True:
            try:
                row = self.todo.get_nowait()
            except queue.Empty:
                return
            self.handle._set(row, Status.SKIPPED, reason)

    def close(self, wait_s: float) -> None:
        self.closing = True
        self._drop("the program exited first")
        end = time.monotonic() + wait_s
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))


_OPEN: set[_Workers] = set()
_EXITING = threading.Event()  # the program is exiting: no precompile starts


def exiting() -> bool:
    """Whether the program has begun to exit (`jt.precompile` then starts nothing)."""
    return _EXITING.is_set()


def _close_all() -> None:
    _EXITING.set()
    for workers in list(_OPEN):
        workers.close(EXIT_WAIT_S)


atexit.register(_close_all)


# ------------------------------------------------------------------ one signature
@dataclasses.dataclass
class _Job:
    """The work of one row, on a worker thread: rebuild, trace, compare, compile."""

    handle: Precompile
    fn: Any
    example: Example
    name: str
    known: list  # every signature recorded for the function: the example's own may be one
    session_known: list  # those this session recorded (JAX holds them, or held them)
    _own: dict | None = None
    _own_known: bool = False
    _own_trusted: bool = False  # traced here, or recorded by this session: a key JAX held
    _own_staged: Any = None  # the example's call, where this precompile traced it to learn `_own`
    _own_trace_s: float | None = None  # the seconds of that trace
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def __call__(self, row: Row) -> None:
        done = self.handle._set
        if _MORE_KEY in row.leaves:
            done(row, Status.SKIPPED, "the log kept only part of this signature")
            return
        plan = self.example.plan(row.leaves, row.placements or {})
        committed = _committed(row.placements or {})
        if committed:
            reason = self.example.place(plan, committed, row.leaves)
            if reason is not None:
                done(row, Status.SKIPPED, f"placement not rebuilt at {reason}")
                return
        own = self.own()
        if own is not None:
            differ = not_rebuilt(row.leaves, plan, own)
            if differ:
                done(row, Status.SKIPPED, differences(row.leaves, own, differ))
                return
            otherwise = passed_otherwise(row.leaves, own, "example")  # (passed as it was)
            if otherwise is not None:
                done(row, Status.SKIPPED, otherwise)
                return
        start = time.perf_counter()
        staged, traced = self._trace(*self.example.call(plan))
        row.trace_s = time.perf_counter() - start
        if traced is None:
            mine = row.leaves == own and not committed and not self.example.committed()
            example = self._take_own_staged() if mine else None
            if example is not None:  # this precompile traced the example to learn its signature
                row.trace_s = self._own_trace_s
                self._compile(row, example)
            elif not self._own_trusted:
                done(row, Status.SKIPPED, _UNTOLD)
            elif row.placements is None:  # (which placements JAX compiled it for: not known)
                done(row, Status.HELD, "JAX already held this trace")
            else:  # JAX held the trace: its lowering (for these placements) says the rest
                self._compile(row, staged, trace_held=True)
            return
        if traced != row.leaves:
            paths = dict.fromkeys([*row.leaves, *traced])
            differ = [p for p in paths if row.leaves.get(p) != traced.get(p)]
            done(row, Status.SKIPPED, differences(row.leaves, traced, differ, "rebuilt call"))
            return
        otherwise = passed_otherwise(row.leaves, traced, "rebuilt call")
        if otherwise is not None:
            done(row, Status.SKIPPED, otherwise)
            return
        self._compile(row, staged)

    def _compile(self, row: Row, staged, trace_held: bool = False) -> None:
        """Lowers (where the trace was staged, not lowered) and compiles `staged`. A committed
        placement must be the one JAX's lowering received, else the row is skipped; a trace JAX
        held whose lowering it held too is `held` (the compile then finds JAX's executable)."""
        start = time.perf_counter()
        lowered = staged.lower() if staged_by_trace(self.example.jit) else staged
        lowerings = noted_lowerings()  # (since this row's trace: `_trace` forgot older ones)
        committed = _committed(row.placements or {})
        if committed and (lowerings or not trace_held):
            reason = _unverified(row, committed, lowerings[-1] if lowerings else None)
            if reason is not None:
                self.handle._set(row, Status.SKIPPED, reason)
                return
        lowered.compile()
        if trace_held and not lowerings:
            self.handle._set(row, Status.HELD, "JAX already held this trace and its lowering")
        else:
            self.handle._set(row, Status.COMPILED, None, time.perf_counter() - start)

    def _take_own_staged(self):
        with self._lock:
            staged, self._own_staged = self._own_staged, None
            return staged

    def own(self) -> dict | None:
        """The example's own signature: its trace's, where JAX does not hold it yet; else the one
        recorded signature that agrees with the example at every leaf (or all those, where they
        agree elsewhere too); None when neither tells."""
        with self._lock:
            if not self._own_known:
                self._own_known = True
                self._own = self._find_own()
            return self._own

    def _find_own(self) -> dict | None:
        start = time.perf_counter()
        staged, traced = self._trace(*self.example.call({}))
        self._own_trace_s = time.perf_counter() - start
        if traced:
            self._own_staged = staged  # compiled as the row of that signature
            self._own_trusted = True
            return traced
        mine = [s for s in self.known if self.example.is_its_signature(s)]
        # (in order too: two calls that passed the same arguments otherwise are two keys)
        if mine and all(list(s.items()) == list(mine[0].items()) for s in mine):
            self._own_trusted = mine[0] in self.session_known
            return mine[0]
        return None

    def _trace(self, args: tuple, kwargs: dict):
        """(JAX's staged call, the full signature of its trace: None where JAX held it, or {}
        where the trace's arguments could not be read)."""
        noted_traces()
        noted_lowerings()
        if staged_by_trace(self.example.jit):
            staged = self.fn.trace(*args, **kwargs)
        else:
            staged = self.fn.lower(*args, **kwargs)
        for record in noted_traces():
            if not record.nested and record.identity is not None:
                if record.identity.name == self.name:
                    return staged, _texts(record) or {}
        return staged, None


def _unverified(row: Row, committed: dict, lowered: dict | None) -> str | None:
    """Why JAX's lowering (`lowered`: ``{path: (type, placement)}`` as the probe read its
    arguments; None where they were not read) does not show the row's committed placements and
    types, else None."""
    if lowered is None or any(path not in lowered for path in committed):
        return "JAX's lowering of the rebuilt call was not read: its placements not verified"
    got = {path: f"{text} ({placement})" for path, (text, placement) in lowered.items()}
    want = {
        path: f"{row.leaves.get(path, text)} ({row.placements.get(path, placement)})"
        for path, (text, placement) in lowered.items()
        if path in row.placements
    }
    differ = [path for path in want if want[path] != got[path]]
    return differences(want, got, differ, "rebuilt call's lowering") if differ else None


def _committed(placements: dict) -> dict:
    """The placements that commit their argument (a device, a sharding)."""
    return {path: text for path, text in placements.items() if placed_text(text)}


_UNTOLD = (
    "JAX already holds the rebuilt call's key, and the log has no record of the example's own "
    "call to tell whether it is this signature"
)


def precompile(
    fn,
    args: tuple,
    kwargs: dict,
    *,
    log=None,
    workers: int | None = None,
    buckets: bool = False,
    own: dict | None = None,
):
    """See `jaxtrace_nb.precompile`. `own`: the example's own signature where the caller knows
    it (`run --warm`: the trace under way, which JAX holds by then; its rows are decided by JAX's
    lowering, as any row whose trace JAX held)."""
    from .._recording._session import get_session

    jit, function = _identity(fn)
    example = Example.of(jit, function, args, kwargs, variable_value if jit == Jit.NNX else None)
    session = get_session()
    name, location = _where(function, session)
    recorded = _recorded(log, session, name, location)
    signatures = _bucketed(log, session, name, recorded) if buckets else recorded
    rows = [Row(_written(s, p or {}), leaves=s, placements=p) for s, p in signatures]
    if _EXITING.is_set():
        for row in rows:
            row.status, row.reason = Status.SKIPPED, "the program exited first"
    handle = Precompile(rows)
    if handle.done:
        return handle
    session.acquire()  # the rebuilt traces must reach the probe: they are compared there
    if not session.probe.full:
        session.release()
        for row in rows:
            if row.status is Status.QUEUED:
                handle._set(
                    row, Status.FAILED, "recording is reduced on this JAX: nothing to compare"
                )
        return handle
    ensure_cache()
    recorded_here = _recorded(None, session, name, location) if log is not None else []
    known = [r.leaves for r in rows] + [s for s, _ in (recorded if buckets else [])]
    known += [s for s, _ in recorded_here]
    session_known = [s for s, _ in (recorded if log is None else recorded_here)]
    job = _Job(handle, fn, example, name, known, session_known)
    if own is not None:
        job._own, job._own_known, job._own_trusted = own, True, True
    n = workers if workers is not None else max(1, (os.cpu_count() or 2) - 1)
    queued = sum(r.status is Status.QUEUED for r in rows)
    _Workers(handle, job, max(1, min(int(n), queued)), session.release)
    return handle
