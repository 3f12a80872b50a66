"""Hot path: cache-hit calls of small jitted functions, recording on vs. never loaded.

A worker measures, per case, the seconds per call of blocks of cache-hit calls. Mode
"never_loaded" never imports jaxtrace_nb; "recorded" calls `jt.start()` before the
functions are first traced; "interleaved" alternates blocks with recording stopped and
started in one process (`jt.stop()` restores JAX exactly), to separate our cost from
differences between processes.
"""

from __future__ import annotations

import gc
import statistics
import time

BLOCK_S = 0.02  # aim for ~20 ms blocks: long enough for perf_counter, short enough to interleave


def _cases():
    """(name, callable, args) for each case; functions are created (not yet traced) here."""
    import equinox as eqx
    import jax
    import numpy as np

    def put(a):
        return jax.device_put(np.asarray(a, dtype=np.float32))

    scalar = put(1.0)
    vec = put(np.ones(1000))
    tree = {f"w{i}": put(np.ones(4)) for i in range(100)}
    mlp = eqx.nn.MLP(16, 16, 64, 2, key=jax.random.PRNGKey(0))
    batch = put(np.ones((8, 16)))

    def add_one(x):
        return x + 1.0

    def tree_step(t):
        return jax.tree.map(lambda a: a * 0.5, t)

    def scaled(x, n):
        return x * n

    def forward(model, x):
        return jax.vmap(model)(x)

    return [
        ("jax.jit f32[]", jax.jit(add_one), (scalar,)),
        ("jax.jit f32[1000]", jax.jit(add_one), (vec,)),
        ("jax.jit static int", jax.jit(scaled, static_argnums=1), (vec, 3)),
        ("jax.jit pytree 100 leaves", jax.jit(tree_step), (tree,)),
        ("eqx.filter_jit f32[]", eqx.filter_jit(add_one), (scalar,)),
        ("eqx.filter_jit pytree 100 leaves", eqx.filter_jit(tree_step), (tree,)),
        ("eqx.filter_jit MLP module", eqx.filter_jit(forward), (mlp, batch)),
    ]


def _block(fn, args, n: int) -> float:
    """Seconds per call over `n` cache-hit calls (the last result is waited for)."""
    import jax

    start = time.perf_counter()
    for _ in range(n):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / n


def _calls_per_block(fn, args) -> int:
    for _ in range(200):  # first trace and compile, then warm caches
        fn(*args)
    per_call = min(_block(fn, args, 200) for _ in range(3))
    return max(50, int(BLOCK_S / per_call))


def worker(mode: str, quick: bool) -> dict:
    """Per case: seconds per call of each block (and, interleaved, blocks with recording on/off)."""
    blocks = 4 if quick else 25
    jt = None
    if mode in ("recorded", "interleaved"):
        import jaxtrace_nb as jt

        jt.start()
    results = {}
    for name, fn, args in _cases():
        gc.collect()
        n = _calls_per_block(fn, args)
        if mode == "interleaved":
            on, off = [], []
            for i in range(blocks):
                for state in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    (jt.start if state == "on" else jt.stop)()
                    (on if state == "on" else off).append(_block(fn, args, n))
            jt.start()
            results[name] = {"calls_per_block": n, "on_s": on, "off_s": off}
        else:
            samples = [_block(fn, args, n) for _ in range(blocks)]
            results[name] = {
                "calls_per_block": n,
                "per_call_s": samples,
                "median_s": statistics.median(samples),
            }
    import sys

    out = {"mode": mode, "cases": results, "jaxtrace_nb_imported": "jaxtrace_nb" in sys.modules}
    if jt is not None:
        from jaxtrace_nb._recording._session import get_session

        out["recorded_traces"] = len(get_session().log.events())
        jt.stop()
    return out
