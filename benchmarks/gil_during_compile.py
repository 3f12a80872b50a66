"""Which of JAX's stages leave the GIL to another Python thread: why `_background` runs the
program's measure and line profile while XLA compiles.

    python benchmarks/gil_during_compile.py [--out benchmarks/results]

A second thread counts its loop's turns all along while the main thread traces, lowers and
compiles new programs (the cache benchmark's 16-layer MLP step, `_cache._program`, value and
gradient, a constant of its own each, so every one is traced, lowered and compiled), with JAX's
persistent cache off. JAX's own duration events (`jax.monitoring`) give each stage's span; the
turns the thread made in a span, per millisecond, against its rate alone (the main thread asleep),
say how much of the GIL the stage left it: about 1 where the stage runs without the GIL (a thread
of ours then costs JAX's thread nothing, given a core), near 1/2 where both threads run Python (the
GIL alternates every `sys.getswitchinterval()`). Prints and writes
``<out>/gil-during-compile-<jax>.txt``; asserts nothing.
"""

from __future__ import annotations

import argparse
import bisect
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PROGRAMS = 8
STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowering",
    "/jax/core/compile/backend_compile_duration": "XLA compile",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    )
    args = parser.parse_args()
    import _cache
    import jax
    import jax.numpy as jnp
    from jax._src import monitoring

    params = [
        (jnp.full((_cache.WIDTH, _cache.WIDTH), 0.01), jnp.zeros(_cache.WIDTH))
        for _ in range(_cache.LAYERS)
    ]
    x = jnp.ones((8, _cache.WIDTH))
    jax.block_until_ready(_cache._program(0.5)(params, x))  # JAX's own first-time work, not counted
    spans: list[tuple[str, float, float]] = []

    def on_duration(event, duration, **kwargs):
        if event in STAGES:
            end = time.perf_counter()
            spans.append((STAGES[event], end - duration, end))

    turns: list[float] = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            turns.append(time.perf_counter())

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    time.sleep(0.3)
    alone_from = time.perf_counter()
    time.sleep(0.3)  # the main thread asleep: the counting thread's rate alone
    alone_to = time.perf_counter()
    monitoring.register_event_duration_secs_listener(on_duration)
    for i in range(PROGRAMS):
        jax.block_until_ready(_cache._program(1.0 + i)(params, x))
    stop.set()
    thread.join()

    def rate(a: float, b: float) -> float:
        return (bisect.bisect(turns, b) - bisect.bisect(turns, a)) / ((b - a) * 1e3)

    alone = rate(alone_from, alone_to)
    lines = [
        f"jax {jax.__version__}; {os.cpu_count()} cores; python {sys.version.split()[0]}; switch "
        f"interval {sys.getswitchinterval() * 1e3:.1f} ms; load average {os.getloadavg()[0]:.2f}; "
        f"commit {_commit()}",
        f"counting thread alone: {alone:.0f} turns/ms",
        f"{PROGRAMS} programs (16-layer MLP step, value and gradient), per stage: median "
        "span, and the counting "
        "thread's rate in it / alone (min-max)",
    ]
    for stage in STAGES.values():
        mine = [(b - a, rate(a, b) / alone) for name, a, b in spans if name == stage]
        if not mine:
            continue
        ms = sorted(d for d, _ in mine)
        shares = sorted(r for _, r in mine)
        lines.append(
            f"  {stage:12s} {ms[len(ms) // 2] * 1e3:7.1f} ms   {shares[len(shares) // 2]:.2f} "
            f"({shares[0]:.2f}-{shares[-1]:.2f}), {len(mine)} spans"
        )
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"gil-during-compile-{jax.__version__}.txt")
    with open(path, "w") as f:
        f.write(f"$ python benchmarks/gil_during_compile.py\n{text}\n")
    print(f"written: {path}")


def _commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=os.path.dirname(os.path.abspath(__file__)),
            ).stdout.strip()
            or "?"
        )
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
