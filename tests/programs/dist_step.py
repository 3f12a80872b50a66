"""One process of a real multi-process `jax.distributed` run on CPU (tests/test_multiprocess.py).

    python -m jaxtrace_nb run --persist LOG dist_step.py PROCESS_ID NUM_PROCESSES PORT

Every process runs the same jitted `train_step` on batches of 8 rows, except process 1 whose
last batch has 5 rows (a ragged last batch); and the same `eval_step` once, on 8 rows, except
process 1 on 4 rows.
"""

import sys

import jax

process_id, num_processes, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes,
                           process_id=process_id, initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402


@jax.jit
def train_step(w, x):
    return w - 0.1 * (x @ w).mean() * w


@jax.jit
def eval_step(w, x):
    return (x @ w).sum()


w = jnp.ones(3)
for rows in (8, 8, 5 if process_id == 1 else 8):
    w = train_step(w, jnp.ones((rows, 3)))
loss = eval_step(w, jnp.ones((4 if process_id == 1 else 8, 3)))
print(process_id, jax.process_index(), jax.process_count(), float(loss), flush=True)
jax.distributed.shutdown()
