"""A loop that meets 5 batch sizes (tests/test_warm.py), alone or as one process of a
`jax.distributed` run on CPU.

    python -m jaxtrace_nb run [--persist LOG] [--warm LOG ...] warm_step.py WAIT_S [ID N PORT]

The step is `jax.jit`'s, or with WARM_STEP_JIT=equinox an `eqx.filter_jit` step of an
`eqx.nn.Linear`, or with WARM_STEP_JIT=nnx an `nnx.jit` step of an `nnx.Linear` (the same loop). After the first call it waits WAIT_S seconds (other work: the warm run's workers compile
meanwhile). It prints its results, the traces made on its own thread (JAX's count: the traced
body runs once per trace, on the thread that traces) and each call's seconds.
"""

import os
import sys
import threading
import time

import jax

wait_s = float(sys.argv[1])
if len(sys.argv) > 2:
    process_id, num_processes, port = map(int, sys.argv[2:5])
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=60,
    )

import jax.numpy as jnp  # noqa: E402

own_traces = [0]


def step(x, scale):
    if threading.current_thread() is threading.main_thread():
        own_traces[0] += 1
    for _ in range(4):
        x = jnp.tanh(x @ jnp.ones((x.shape[1], x.shape[1]))) * scale
    return x.sum()


def eqx_step(model, x, scale, key):
    if threading.current_thread() is threading.main_thread():
        own_traces[0] += 1
    for _ in range(4):
        x = jnp.tanh(jax.vmap(model)(x)) * scale
    return x.sum() + 0.0 * jax.random.uniform(key)  # (a PRNG key argument, as a step takes one)


def nnx_step(model, x, scale):
    if threading.current_thread() is threading.main_thread():
        own_traces[0] += 1
    for _ in range(4):
        x = jnp.tanh(model(x)) * scale
    return x.sum()


if os.environ.get("WARM_STEP_JIT") == "nnx":
    from flax import nnx

    nnx_model = nnx.Linear(8, 8, rngs=nnx.Rngs(0))
    nnx_jitted = nnx.jit(nnx_step, static_argnums=2)

    def f(x, scale):
        return nnx_jitted(nnx_model, x, scale)

elif os.environ.get("WARM_STEP_JIT") == "equinox":
    import equinox as eqx

    model = eqx.nn.Linear(8, 8, key=jax.random.PRNGKey(0))
    filtered = eqx.filter_jit(eqx_step)

    def f(x, scale):
        # (scale: a Python int, static under filter_jit)
        return filtered(model, x, scale, jax.random.key(1))

else:
    f = jax.jit(step, static_argnums=1)
results, seconds = [], []
for i, n in enumerate((2, 3, 4, 5, 6)):
    start = time.perf_counter()
    results.append(float(f(jnp.ones((n, 8)), 2)))
    seconds.append(time.perf_counter() - start)
    if i == 0:
        time.sleep(wait_s)
print("RESULTS", results, flush=True)
print("OWN_TRACES", own_traces[0], flush=True)
print("SECONDS", seconds, flush=True)
if len(sys.argv) > 2:
    jax.distributed.shutdown()
