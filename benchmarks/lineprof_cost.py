"""What the per-line equation count (`jt.compile_profile`) costs: the walk of a traced program.

    python benchmarks/lineprof_cost.py [--out benchmarks/results]

Traces Equinox transformers of 2, 4, 8 and 12 blocks with gradients (`jax.make_jaxpr`, nothing
compiled), and times `_lineprof.LineProfiler.profile` on each program, with fresh caches, the best
of 5; prints and writes ``<out>/lineprof-cost-<jax>.txt`` with the equations, the milliseconds,
the microseconds per equation and the machine's load average. Asserts nothing. The probe runs
this walk in a thread of its own while XLA compiles, or when the log is read, never on the trace
path (`benchmarks/gil_during_compile.py`: why then).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    1, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)  # this checkout's jaxtrace_nb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    )
    args = parser.parse_args()
    import equinox as eqx
    import jax
    from _programs import transformer_step

    from jaxtrace_nb._jax._internals import detect
    from jaxtrace_nb._recording._cost import count_equations
    from jaxtrace_nb._recording._decode import Decoder
    from jaxtrace_nb._recording._lineprof import LineProfiler

    decoder = Decoder(detect())
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
        or "unknown"
    )
    lines = [
        "command: python benchmarks/lineprof_cost.py"
        + "".join(f" {a}" for a in sys.argv[1:])
        + f"; commit {commit}",
        f"JAX {jax.__version__}, Equinox {eqx.__version__}, Python {sys.version.split()[0]}; "
        f"load average {os.getloadavg()[0]:.1f} at the start",
    ]
    for blocks in (2, 4, 8, 12):
        step, inputs = transformer_step(n_blocks=blocks)
        traced = eqx.filter_make_jaxpr(step)(*inputs)[0]
        eqns = count_equations(traced.jaxpr, {})
        best = float("inf")
        for _ in range(5):
            profiler = LineProfiler(decoder.is_library, decoder.location)  # cold caches
            start = time.perf_counter()
            rows = profiler.profile(traced)
            best = min(best, time.perf_counter() - start)
        assert sum(own for _, own, _ in rows) == eqns
        lines.append(
            f"transformer, {blocks:2d} blocks, value_and_grad: {eqns:5d} equations, walk "
            f"{1e3 * best:6.1f} ms, {1e6 * best / eqns:4.1f} us per equation, {len(rows)} rows kept"
        )
        print(lines[-1], flush=True)
    lines.append(f"load average {os.getloadavg()[0]:.1f} at the end")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"lineprof-cost-{jax.__version__}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-1])


if __name__ == "__main__":
    main()
