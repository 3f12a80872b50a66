"""No leaks, bounded memory, and threads (issue 5, items 3 and 4)."""

import gc
import threading
import tracemalloc
import weakref

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _support import without_and_with_recording

import jaxtrace_nb as jt
from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._keys._records import FunctionIdentity, TraceRecord
from jaxtrace_nb._keys._signature import Signature, array_leaf, static_leaf
from jaxtrace_nb._log._events import Event, now
from jaxtrace_nb._recording import _lifecycle
from jaxtrace_nb._recording._session import Session, get_session
from jaxtrace_nb._recording._trace import Trace


class Config:
    """A static argument compared by identity."""


class Model(eqx.Module):
    w: jax.Array
    config: Config = eqx.field(static=True)

    def __call__(self, x):
        return self.w * x


def _traced_objects() -> dict:
    """Trace and compile several functions; weak references to everything the user made."""
    constant = jnp.linspace(0.0, 1.0, 8)
    x, host = jnp.ones(8), np.ones(8, np.float32)
    config = Config()
    model = Model(jnp.ones(8), config)

    @jax.jit
    def closes_over(v):
        return v + constant

    def with_static(v, c):
        return v * 2

    jitted_static = jax.jit(with_static, static_argnums=1)

    @eqx.filter_jit
    def step(m, v):
        return m(v) + 1

    (
        closes_over(x),
        closes_over(host),
        jitted_static(x, config),
        step(model, x),
        eqx.filter_jit(model)(x),
    )
    step(model, jnp.ones(()))  # a retrace: a diff against the kept signature
    refs = {
        "constant": constant,
        "x": x,
        "config": config,
        "model": model,
        "closes_over": closes_over,
        "with_static": with_static,
        "jitted_static": jitted_static,
        "step": step,
        "model.w": model.w,
    }
    return {name: weakref.ref(obj) for name, obj in refs.items()}


def _alive_after_deletion() -> tuple[set, int]:
    baseline = len(jax.live_arrays())
    refs = _traced_objects()
    gc.collect()
    return {name for name, ref in refs.items() if ref() is not None}, len(
        jax.live_arrays()
    ) - baseline


def test_nothing_traced_is_kept_alive_by_us():
    (alive_plain, arrays_plain), (alive_recorded, arrays_recorded), recorded = (
        without_and_with_recording(_alive_after_deletion)
    )
    assert alive_recorded == alive_plain  # JAX itself keeps a static argument in a global cache
    assert not alive_recorded & {
        "constant",
        "x",
        "model",
        "model.w",
        "closes_over",
        "with_static",
        "jitted_static",
        "step",
    }
    assert arrays_recorded == arrays_plain == 0
    assert (
        len(recorded) == 5
    )  # closes_over (NumPy and JAX f32[8] share a trace), with_static, step twice, model


def _memory_marks(feed, n: int, every: int) -> list[int]:
    """Bytes allocated (tracemalloc) after every `every` of `n` calls `feed(i)`."""
    tracemalloc.start()
    try:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        marks = []
        for i in range(n):
            feed(i)
            if (i + 1) % every == 0:
                marks.append(tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    return marks


def _plateau(marks: list[int]) -> bool:
    """The last two memory marks agree within 2 % (the first ones include warm-up)."""
    return abs(marks[-1] - marks[-2]) < 0.02 * marks[-2]


def test_log_memory_is_bounded_by_the_cap():
    """The log holds at most `max_events` events; the rest are counted as dropped.

    Measured here: 80,000 realistic events (distinct strings, a timestamp) through a
    20,000-event cap: memory reaches a plateau at the cap and stays there, at 0.97 kB
    per event (bound asserted: 1.2 kB). At the default cap of 100,000 events that is
    about 93 MB (bound: 120 MB), whatever the number of traces: a session with 1,000,000
    traces holds 100,000 events and reports 900,000 dropped. (1,000,000 appends under
    tracemalloc take minutes on 2 cores; the plateau makes 80,000 enough.)
    """
    session = Session()
    session.log.set_max_events(20_000)
    explanation = "`x` changed shape: f32[3] → f32[4]. Also changed: `params['w']`."

    def append(i: int) -> None:
        session.log.append(
            Event(
                time=now(),
                cell=i // 100,
                function=f"step_{i % 100}",
                location=f"/tmp/p.py:{i % 100}",
                kind="trace",
                internal=False,
                nested=False,
                trace_number=i,
                cause="shape",
                leaf="x",
                before=f"f32[{i}]",
                after=f"f32[{i + 1}]",
                explanation=f"{explanation} #{i}",
                hint="Pad to a fixed shape.",
                trace_s=0.01,
                lower_s=0.001,
                compile_s=0.1,
                jit="jit",
                thread=1,
                key=f"/tmp/p.py::step_{i % 100}",
            )
        )

    marks = _memory_marks(append, 80_000, 20_000)
    assert session.log.dropped == 60_000 and len(session.log.events()) == 20_000
    assert _plateau(marks), marks
    assert marks[-1] / 20_000 < 1_200, marks[-1] / 20_000


def test_function_state_is_bounded(monkeypatch):
    """Per-function state (recent signatures, names for compiles without a trace) is capped.

    With the cap lowered to 500 functions, 8,000 traces of 8,000 distinct functions keep
    500 functions and memory reaches a plateau. At the default cap (20,000 functions, at
    most 8 signatures each) the bound scales with the signatures' leaf counts.
    """
    monkeypatch.setattr(_lifecycle, "MAX_FUNCTIONS", 500)
    session = Session()
    session.log.set_max_events(1_000)

    def info(k: int) -> TraceRecord:
        leaves = {
            "x": array_leaf((k % 50 + 1, 3), "float32"),
            "params['w']": array_leaf((3, 3), "float32"),
            "n": static_leaf(summarize_static(k % 7)),
        }
        signature = Signature(("id", k), (("jax_enable_x64", "False"),), leaves)
        identity = FunctionIdentity(
            f"step_{k}",
            "/tmp/p.py",
            k,
            f"/tmp/p.py:{k}",
            f"/tmp/p.py::step_{k}",
            False,
            False,
            "jit",
            f"step_{k}",
            f"step_{k} at /tmp/p.py:{k}",
        )
        return TraceRecord(identity, False, signature, None, 1, None, 0, None)

    life = session.lifecycle

    def trace(k: int) -> None:
        started = Trace(info(k), f"step_{k}")
        life.on_trace(started)
        life.on_trace_end(started, 0.001, None)

    marks = _memory_marks(trace, 8_000, 2_000)
    assert len(session.functions) == 500
    assert len(session.log.events()) == 1_000 and session.log.dropped == 7_000
    assert _plateau(marks), marks


def test_dropped_count_through_the_api():
    jt.stop()
    jt.reset()
    jt.start(max_events=3)
    try:

        @jax.jit
        def f(x):
            return x

        inputs = [np.ones(n, np.float32) for n in range(1, 8)]  # no JAX op outside `f`
        for x in inputs:
            f(x)
        assert len(jt.log()) == 3 and jt.dropped() == 4
        assert jt.log(internal=False)["trace_number"].tolist() == [5, 6, 7]
    finally:
        jt.stop()
        get_session().log.set_max_events(100_000)
        jt.reset()


THREADS, FUNCTIONS, SHAPES = 4, 3, (1, 2, 3)


def test_threads_lose_duplicate_and_misattribute_nothing():
    jt.stop()
    jt.reset()
    faults_before = jt.faults()
    barrier = threading.Barrier(THREADS)
    idents: dict[int, int] = {}
    errors: list[BaseException] = []
    results: dict[tuple, np.ndarray] = {}

    def make(t: int, j: int):
        def fn(x):
            return x * (t + 1) + j

        fn.__name__ = fn.__qualname__ = f"worker{t}_fn{j}"
        return jax.jit(fn)

    def worker(t: int) -> None:
        try:
            idents[t] = threading.get_ident()
            functions = [make(t, j) for j in range(FUNCTIONS)]
            for n in SHAPES:
                barrier.wait(timeout=60)
                for j, f in enumerate(functions):
                    results[t, j, n] = np.asarray(f(jnp.ones(n)))
                    f(jnp.ones(n))  # a cache hit: never an event
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    jt.start()
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        events = jt.log(internal=False)
    finally:
        jt.stop()
        jt.reset()
    assert not errors and all(not thread.is_alive() for thread in threads)
    for (t, j, n), value in results.items():
        assert np.array_equal(value, np.full(n, t + 1 + j, np.float32))
    traces = events[events["kind"] == "trace"]
    seen = sorted(
        (row.function, row.thread, row.trace_number, row.cause, row.before, row.after)
        for row in traces.itertuples()
    )
    expected = sorted(
        (
            f"worker{t}_fn{j}",
            idents[t],
            k + 1,
            "first" if k == 0 else "shape",
            None if k == 0 else f"f32[{SHAPES[k - 1]}]",
            None if k == 0 else f"f32[{n}]",
        )
        for t in range(THREADS)
        for j in range(FUNCTIONS)
        for k, n in enumerate(SHAPES)
    )
    assert [tuple(None if v != v else v for v in row) for row in seen] == expected
    assert traces["compile_s"].notna().all() and traces["lower_s"].notna().all()
    assert jt.faults() == faults_before
