"""The whole-treedef reading of a plain ``jax.jit`` retrace, on and off, in one process.

    python benchmarks/plain_call.py [--leaves 10] [--traces 300] [--rounds 15]

Retraces a fresh ``jax.jit(f).trace`` of a dict of `--leaves` arrays `--traces` times (a new
shape each call), in three modes rotated round after round: not recorded; recorded with every
call read argument by argument (`TraceLayout.plain_call` made to answer None, as on JAX 0.8 and
0.11); recorded with plain calls read from their whole treedef (`Decoder.plain_jit_record`).
Prints, per mode, the median seconds per trace and its ratio to the unrecorded run, and the
median of our own seconds per trace (the trace-start hook and the trace-end listener, timed by
wrapping them). This script asserts nothing; `benchmarks/run.py` gives the issue's figures.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

MODES = ("not recorded", "argument by argument", "whole treedef")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--leaves", type=int, default=10)
    parser.add_argument("--traces", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session

    probe = get_session().probe
    shared = {f"w{i:05d}": jax.ShapeDtypeStruct((4,), jnp.float32) for i in range(1, args.leaves)}
    inputs = [
        ({"w00000": jax.ShapeDtypeStruct((k + 1,), jnp.float32), **shared},)
        for k in range(args.traces)
    ]
    own = {mode: [] for mode in MODES}
    current = [None]
    on_trace_start, trace_end = probe._on_trace_start, probe._trace_end

    def timed(fn, first):
        def run(arg):
            start = time.perf_counter()
            try:
                return fn(arg)
            finally:
                if current[0] is not None:
                    seconds = time.perf_counter() - start
                    if first:
                        own[current[0]].append(seconds)
                    elif own[current[0]]:
                        own[current[0]][-1] += seconds

        return run

    probe._on_trace_start = timed(on_trace_start, True)  # shadowed before `start` installs them
    probe._trace_end = timed(trace_end, False)

    def run(mode: str) -> float:
        def step(params):
            return jax.tree.map(lambda a: a * 2.0, params)

        f = jax.jit(step)
        if mode != "not recorded":
            jt.reset()
            jt.start()
            layout = probe.internals.layout
            if mode == "argument by argument":
                layout.plain_call = lambda frame: None
            else:
                layout.__dict__.pop("plain_call", None)
        gc.collect()
        current[0] = mode if mode != "not recorded" else None
        start = time.perf_counter()
        for call in inputs:
            f.trace(*call)
        seconds = time.perf_counter() - start
        current[0] = None
        if mode != "not recorded":
            jt.stop()
            jt.reset()
        return seconds / len(inputs)

    for mode in MODES:  # warm-up
        run(mode)
    for values in own.values():
        values.clear()
    per_trace = {mode: [] for mode in MODES}
    for r in range(args.rounds):
        for mode in MODES[r % 3 :] + MODES[: r % 3]:
            per_trace[mode].append(run(mode))
    base = statistics.median(per_trace["not recorded"])
    print(
        f"jax {jax.__version__}; jax.jit(f).trace, dict of {args.leaves} leaves, {args.traces} "
        f"traces, {args.rounds} rounds"
    )
    for mode in MODES:
        ratios = sorted(t / b for t, b in zip(per_trace[mode], per_trace["not recorded"]))
        line = (
            f"  {mode:22s} {statistics.median(per_trace[mode]) * 1e3:.3f} ms per trace, "
            f"ratio {statistics.median(per_trace[mode]) / base:.3f} (per round "
            f"{ratios[0]:.3f}–{ratios[-1]:.3f})"
        )
        if own[mode]:
            line += f", our own work {statistics.median(own[mode]) * 1e3:.3f} ms per trace (median)"
        print(line)


if __name__ == "__main__":
    main()
