"""A small retrace recorded and not, alternating in one process, repeated in fresh processes.

    python benchmarks/trace_ab.py [--leaves 10] [--traces 300] [--rounds 30] [--processes 3]

Each process retraces a fresh ``jax.jit(f).trace`` of a dict of `--leaves` arrays `--traces`
times (the first leaf's shape new at every call), recorded (`jt.start()`) and not, the two
alternating round after round, and prints the median seconds per trace of each, the median
seconds recording adds per trace, and their ratio. The garbage collector stays on, as in a
user's program. Fresh processes show how much the same figure moves from one process to the
next (`benchmarks/run.py`'s trace section is one process). This script asserts nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time


def _process(leaves: int, traces: int, rounds: int) -> dict:
    import jax
    from _trace import (
        _tree_workload,
    )  # the trace section's workload (this script's folder is on sys.path)

    import jaxtrace_nb as jt

    make, inputs = _tree_workload(leaves, traces, trace_only=True)

    def run(recorded: bool) -> float:
        jitted = jax.jit(make())
        if recorded:
            jt.reset()
            jt.start()
        gc.collect()
        start = time.perf_counter()
        for args in inputs:
            jitted.trace(*args)
        seconds = time.perf_counter() - start
        jt.stop()
        jt.reset()
        return seconds / traces

    run(False), run(True)  # warm-up
    times = {False: [], True: []}
    for r in range(rounds):
        for recorded in (False, True) if r % 2 == 0 else (True, False):
            times[recorded].append(run(recorded))
    base, rec = statistics.median(times[False]), statistics.median(times[True])
    return {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "base_s": base,
        "recorded_s": rec,
        "ratio": rec / base,
        "min_ratio": min(times[True]) / min(times[False]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=10)
    parser.add_argument("--traces", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_process(args.leaves, args.traces, args.rounds)))
        return
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--leaves",
        str(args.leaves),
        "--traces",
        str(args.traces),
        "--rounds",
        str(args.rounds),
    ]
    for i in range(args.processes):
        out = json.loads(
            subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[
                -1
            ]
        )
        print(
            f"process {i + 1} (Python {out['python']}, JAX {out['jax']}): not recorded "
            f"{out['base_s'] * 1e6:.1f} µs, recorded {out['recorded_s'] * 1e6:.1f} µs per trace; "
            f"added {(out['recorded_s'] - out['base_s']) * 1e6:+.1f} µs, ratio "
            f"{out['ratio']:.3f} "
            f"(min-to-min {out['min_ratio']:.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
