"""Crash-safe log: events appended as JSON lines, recovered after SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import pandas as pd


def test_load_returns_the_same_frame_as_log(jt, tmp_path):
    path = tmp_path / "log.jsonl"
    jt.start(persist=path)

    @jax.jit
    def f(x, n=1):
        return x * n

    f(jnp.ones(2))
    f(jnp.ones(3))
    f(1.0)
    jt.stop()
    live = jt.log()
    assert len(live) >= 3
    pd.testing.assert_frame_equal(jt.load(path), live)


def test_stop_writes_what_a_read_would_still_add(jt, tmp_path, monkeypatch):
    """A program our thread has not measured by `stop()` (held up here; late on a busy machine)
    is measured then, into the file: the file and the log agree (CI once found the last trace's
    equations missing from the file). No XLA read fits a compile (so its end measures nothing)."""
    import threading

    path = tmp_path / "log.jsonl"
    jt.start(persist=path)
    probe = jt.get_session().probe
    monkeypatch.setattr(probe, "xla_cost_share", 1e-12)
    held, running = threading.Event(), threading.Event()
    probe.measurer._profiling.submit(lambda _: running.set() or held.wait(30), None)
    assert running.wait(30)
    try:

        @jax.jit
        def g_cos(x):
            return jnp.cos(x) * 2

        g_cos(jnp.ones(2))
        g_cos(1.0)
        jt.stop()
        loaded = jt.load(path)
    finally:
        held.set()
    mine = loaded["function"].str.endswith("g_cos")
    assert loaded.loc[mine, "eqns_total"].tolist() == [2, 2]
    pd.testing.assert_frame_equal(loaded, jt.log())


def test_load_tolerates_a_torn_last_line_and_other_runs(jt, tmp_path):
    path = tmp_path / "log.jsonl"
    jt.start(persist=path)
    jax.jit(lambda x: x + 1)(jnp.ones(2))
    jt.stop()
    first_run = jt.log()
    jt.reset()
    jt.start(persist=path)  # a second run appends to the same file
    jax.jit(lambda x: x - 1)(jnp.ones(2))
    jt.stop()
    with open(path, "a") as f:
        f.write('{"seq": 99, "function": "torn')  # the kernel died mid-line
    loaded = jt.load(path)
    assert len(loaded) == len(first_run) + len(jt.log())
    assert loaded["function"].tolist()[-1] == jt.log()["function"].tolist()[-1]


_CHILD = textwrap.dedent("""
    import json, sys, time
    import jax, jax.numpy as jnp
    import jaxtrace_nb as jt
    jt.start(persist=sys.argv[1])

    @jax.jit
    def step(x):
        return x * 2

    for n in range(1, 6):
        step(jnp.ones(n)).block_until_ready()
    done = jt.log(internal=False)
    rows = done[["function", "cause", "leaf", "before", "after"]].astype(object)
    print(json.dumps(rows.where(rows.notna(), None).values.tolist()), flush=True)

    @jax.jit
    def huge(x):
        for _ in range(3000):  # a long compile: the parent kills us in the middle of it
            x = jnp.sin(x) @ x
        return x

    print("compiling", flush=True)
    huge(jnp.ones((64, 64)))
    time.sleep(60)
""")


def test_sigkill_mid_run_loses_no_completed_event(tmp_path):
    import jaxtrace_nb as jt

    path = tmp_path / "log.jsonl"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        completed = json.loads(child.stdout.readline())
        assert child.stdout.readline().strip() == "compiling"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "huge" not in path.read_text():
            time.sleep(0.05)  # wait until the huge trace itself is on disk
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    df = jt.load(path)
    mine = df[~df["internal"]]
    got = [
        [None if v != v else v for v in row]
        for row in mine[["function", "cause", "leaf", "before", "after"]].values.tolist()
    ]
    assert got[: len(completed)] == completed
    assert [r[1] for r in completed] == ["first"] + ["shape"] * 4
    assert mine["function"].tolist()[-1] == "huge"  # the trace whose compile never finished
    assert pd.isna(mine["compile_s"].iloc[-1])
