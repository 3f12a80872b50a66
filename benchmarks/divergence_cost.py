"""What the live comparison across processes (issue 45) costs: per trace, and on a compile-heavy
two-process workload, recording with the comparison on against recording with it off.

    python benchmarks/divergence_cost.py     # -> benchmarks/results/divergence-cost-<commit>.txt
    python benchmarks/divergence_cost.py --rounds 1 --keys 4 --out /tmp    # a smoke test

Each run is a real two-process `jax.distributed` cluster on this machine (CPU, gloo collectives,
a global array over both processes' devices). Each process traces and compiles a jitted 8-layer
MLP step over the global array once for each of `--keys` batch sizes (every trace a new key, every
key compared), then calls each compiled step 5 times more (cache hits: none of jaxtrace_nb's code
runs). The processes start the timed loop together (`sync_global_devices`). Modes, one fresh
cluster each, rotated round after round so that the machine's noise hits every mode:

* ``plain``: jaxtrace_nb not imported;
* ``off``: ``jt.start(divergence="off")``: recording, no comparison;
* ``warn``: ``jt.start(divergence="warn")``: recording and the comparison (its default);
* ``raise``: ``jt.start(divergence="raise")``: the comparison in the trace, which waits for the
  other process's key.

Reported: each mode's median wall seconds of the loop (the slower process's), the ratios warn / off
(the comparison's cost within recording) and off / plain (recording's own); per compared trace,
the seconds the comparison adds to the trace path (`Peers.on_trace`: whether an argument spans
processes, the comparison numbered and queued; the first one also starts the threads) and the
seconds each comparison took on its own thread (publishing, waiting for
the other process, reading the answer), with its key-value operations (not counting the alerts
watcher's long polls, one a second, nor the two operations of the closing sync). This script asserts
nothing. Also reported: the seconds `jt.stop()` took in each process (the median, and the most).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402

ROOT = os.path.dirname(HERE)
MODES = ("plain", "off", "warn", "raise")
RESULT_MARK = "@@RESULT "


def worker(mode: str, process: int, port: int, keys: int) -> dict:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"localhost:{port}", num_processes=2, process_id=process
    )
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    timing = {"on_trace": [], "compare": []}
    if mode != "plain":
        import jaxtrace_nb as jt
        from jaxtrace_nb._recording._session import get_session

        jt.start(divergence=mode)
        peers = get_session().peers
        on_trace, compare = peers.on_trace, peers._compare

        def timed_on_trace(record, frame):
            t = time.perf_counter()
            try:
                return on_trace(record, frame)
            finally:
                timing["on_trace"].append(time.perf_counter() - t)

        def timed_compare(job):
            t = time.perf_counter()
            try:
                return compare(job)
            finally:
                timing["compare"].append(time.perf_counter() - t)

        peers.on_trace, peers._compare = timed_on_trace, timed_compare
    mesh = jax.make_mesh((2,), ("d",), devices=jax.devices())
    sharding = NamedSharding(mesh, P("d"))
    weights = [jnp.full((64, 64), 0.01, jnp.float32) for _ in range(8)]

    @jax.jit
    def step(ws, x):
        for w in ws:
            x = jnp.tanh(x @ w) + x
        return (x * x).mean()

    batches = [
        jax.make_array_from_process_local_data(sharding, np.ones((8 + 2 * k, 64), np.float32))
        for k in range(keys)
    ]
    multihost_utils.sync_global_devices("start")
    started = time.perf_counter()
    results = []
    for x in batches:
        for _ in range(6):
            results.append(float(step(weights, x)))
    wall = time.perf_counter() - started
    out = {"wall_s": wall, "result": sum(results), "on_trace_s": timing["on_trace"]}
    if mode != "plain":
        t = time.perf_counter()
        jt.stop()  # (each comparison finished: the other process has traced every key too)
        out["stop_s"] = time.perf_counter() - t
        out["compare_s"] = timing["compare"]
        out["compared"] = peers.compared
        out["operations"] = dict(peers.traffic)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster(mode: str, keys: int) -> list[dict]:
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    command = [sys.executable, __file__, "--worker", mode, "--keys", str(keys), "--port", str(port)]
    procs = [
        subprocess.Popen(
            [*command, "--process", str(p)], env=env, stdout=subprocess.PIPE, text=True
        )
        for p in range(2)
    ]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        (line,) = [x for x in stdout.splitlines() if x.startswith(RESULT_MARK)]
        out.append(json.loads(line[len(RESULT_MARK) :]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keys", type=int, default=12)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--worker", choices=MODES)
    parser.add_argument("--process", type=int)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.worker:
        result = worker(args.worker, args.process, args.port, args.keys)
        print(RESULT_MARK + json.dumps(result), flush=True)
        return
    import jax

    commit = _results.commit()
    started = time.perf_counter()
    load_before = _results.load()
    runs: dict = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
            runs[mode].append(_cluster(mode, args.keys))
    wall = {m: statistics.median(max(p["wall_s"] for p in run) for run in runs[m]) for m in MODES}
    on_trace = [s for run in runs["warn"] for p in run for s in p["on_trace_s"]]
    on_trace_raise = [s for run in runs["raise"] for p in run for s in p["on_trace_s"]]
    stops = [p["stop_s"] for m in ("off", "warn", "raise") for run in runs[m] for p in run]
    compare = [s for run in runs["warn"] for p in run for s in p["compare_s"]]
    compared = [p["compared"] for run in runs["warn"] for p in run]
    operations = [
        sum(n for op, n in p["operations"].items() if op not in ("bytes", "watch", "close"))
        for run in runs["warn"]
        for p in run
    ]
    same = len({round(p["result"], 6) for m in MODES for run in runs[m] for p in run}) == 1
    lines = [
        f"jaxtrace_nb divergence cost — {datetime.datetime.now().isoformat(timespec='seconds')}",
        _results.machine_line(jax.__version__, commit, load_before, started),
        f"command: python benchmarks/divergence_cost.py --rounds {args.rounds} --keys {args.keys}",
        "",
        f"Workload: 2 processes, {args.keys} keys of an 8-layer MLP step over a global array, each "
        "traced and compiled once, then called 5 times more; median of "
        f"{args.rounds} clusters per mode. Results the same in every mode: {same}.",
        "",
        "| plain s | off s | warn s | raise s | warn / off | raise / off | off / plain | "
        "compared traces per process | trace path µs per compared trace, warn (median) | "
        "trace path ms per compared trace, raise (median) | "
        "comparison ms per trace, own thread, warn (median) | "
        "KV operations per process per trace, warn |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {wall['plain']:.3f} | {wall['off']:.3f} | {wall['warn']:.3f} | {wall['raise']:.3f} | "
        f"{wall['warn'] / wall['off']:.3f} | {wall['raise'] / wall['off']:.3f} | "
        f"{wall['off'] / wall['plain']:.3f} | "
        f"{statistics.median(compared):.0f} | {statistics.median(on_trace) * 1e6:.0f} | "
        f"{statistics.median(on_trace_raise) * 1e3:.3f} | "
        f"{statistics.median(compare) * 1e3:.3f} | "
        f"{statistics.mean(operations) / max(1, statistics.median(compared)):.3f} |",
        "",
        f"jt.stop() seconds per process (off, warn, raise; {len(stops)} processes): median "
        f"{statistics.median(stops):.3f}, most {max(stops):.3f}.",
    ]
    text = "\n".join(lines) + "\n"
    data = {"commit": commit, "rounds": args.rounds, "keys": args.keys, "runs": runs}
    _results.write(args.out, f"divergence-cost-{commit}", text, data)


if __name__ == "__main__":
    main()
