"""`python -m jaxtrace_nb run --warm LOG…`: each jax.jit function's recorded signatures compiled
ahead from its first call, in one process and in each process of a `jax.distributed` run.

JAX's own count is the oracle: the traced body runs on the thread that traces, so the program's
own traces are those on its main thread (the workers' are marked `precompiled` in the log).
"""

import json
import os
import pathlib

import pytest
from _support import free_port, run_command

import jaxtrace_nb as jt

PROGRAM = pathlib.Path(__file__).parent / "programs" / "warm_step.py"
REPO = PROGRAM.parents[2]


def _warm_read() -> bool:
    """Whether this JAX's jit calls are read at a trace (JAX 0.9.2 on: `_layouts.jit_call`)."""
    from jaxtrace_nb._recording._session import get_session

    jt.start()
    try:
        return get_session().probe.internals.layout.name in ("0.9", "0.11")
    finally:
        jt.stop()


def _run(*options, wait_s: float = 0.0, extra=(), jit: str = "jax"):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), WARM_STEP_JIT=jit)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    return run_command(*options, PROGRAM, wait_s, *extra, env=env)


def _outcome(proc, timeout: float = 240) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    found = {}
    for line in out.splitlines():
        name, _, value = line.partition(" ")
        if name in ("RESULTS", "OWN_TRACES", "SECONDS"):
            found[name] = json.loads(value)
    return found, err


def _worker_rows(log: pathlib.Path, function: str = "step") -> list[dict]:
    df = jt.load(str(log))
    df = df[(df["kind"] == "trace") & ~df["internal"] & (df["function"] == function)]
    return df[df["precompiled"] == True].to_dict("records")  # noqa: E712


def test_a_warm_run_traces_once_with_the_same_results(tmp_path):
    cold_log, warm_log = tmp_path / "cold.jsonl", tmp_path / "warm.jsonl"
    cold, _ = _outcome(_run("--persist", cold_log))
    assert cold["OWN_TRACES"] == 5
    warm, err = _outcome(_run("--warm", cold_log, "--persist", warm_log, wait_s=5.0))
    assert warm["RESULTS"] == cold["RESULTS"]
    if not _warm_read():  # JAX 0.8: not read at a trace; said once, and the run is as cold
        assert "not warmed" in err and warm["OWN_TRACES"] == 5
        return
    assert warm["OWN_TRACES"] == 1, err[-3000:]  # the four other sizes: the workers'
    rows = _worker_rows(warm_log)
    assert sorted(json.loads(r["signature"])["x"] for r in rows) == [
        f"f32[{n},8]" for n in (3, 4, 5, 6)
    ]
    assert "jt.precompile: 4 compile(s) done ahead" in err


@pytest.mark.parametrize("jit", ["equinox", "nnx"])
def test_a_library_jit_step_is_warmed_through_its_own_wrapper(tmp_path, jit):
    """An `eqx.filter_jit` or `nnx.jit` step of a module: warmed from the call the library made
    (its wrapper; the call's arrays made anew, an NNX module copied with abstract state), the
    program traces once, results as cold."""
    cold_log, warm_log = tmp_path / "cold.jsonl", tmp_path / "warm.jsonl"
    cold, _ = _outcome(_run("--persist", cold_log, jit=jit))
    assert cold["OWN_TRACES"] == 5
    warm, err = _outcome(_run("--warm", cold_log, "--persist", warm_log, wait_s=5.0, jit=jit))
    assert warm["RESULTS"] == cold["RESULTS"]
    assert warm["OWN_TRACES"] == 1, err[-3000:]
    rows = _worker_rows(warm_log, "eqx_step" if jit == "equinox" else "nnx_step")
    assert sorted(json.loads(r["signature"])["x"] for r in rows) == [
        f"f32[{n},8]" for n in (3, 4, 5, 6)
    ]
    assert "jt.precompile: 4 compile(s) done ahead" in err and "not warmed" not in err


def test_a_missing_warm_log_stops_before_the_program(tmp_path):
    proc = _run("--warm", tmp_path / "none.jsonl")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no log" in err and "RESULTS" not in out


def test_each_process_of_a_distributed_run_warms_the_same_set(tmp_path):
    """Two processes of a `jax.distributed` run on CPU, recorded, then run again with both logs:
    each precompiles the same four signatures and traces once itself."""
    logs = [tmp_path / f"p{i}.jsonl" for i in range(2)]
    port = free_port()
    procs = [_run("--persist", logs[i], extra=(i, 2, port)) for i in range(2)]
    cold = [_outcome(p)[0] for p in procs]
    warm_logs = [tmp_path / f"w{i}.jsonl" for i in range(2)]
    port = free_port()
    procs = [
        _run(
            "--warm",
            logs[0],
            "--warm",
            logs[1],
            "--persist",
            warm_logs[i],
            wait_s=5.0,
            extra=(i, 2, port),
        )
        for i in range(2)
    ]
    warm = [_outcome(p) for p in procs]
    for i in range(2):
        assert warm[i][0]["RESULTS"] == cold[i]["RESULTS"]
    if not _warm_read():
        assert all(w[0]["OWN_TRACES"] == 5 for w in warm)
        return
    sets = []
    for i in range(2):
        assert warm[i][0]["OWN_TRACES"] == 1, warm[i][1][-3000:]
        sets.append(sorted(json.loads(r["signature"])["x"] for r in _worker_rows(warm_logs[i])))
    assert sets[0] == sets[1] == [f"f32[{n},8]" for n in (3, 4, 5, 6)]
