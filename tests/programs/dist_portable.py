"""One process of a real `jax.distributed` run over library models (tests/test_divergence.py),
each process started with its own ``PYTHONHASHSEED``.

    python dist_portable.py PROCESS_ID NUM_PROCESSES PORT SCENARIO

SCENARIO "same": ``divergence="raise"``; identical programs on every process over a Flax NNX model
(``nnx.jit``, and ``jax.jit`` over ``nnx.split``), Flax linen parameters, an Equinox module with a
static string field and a ``register_dataclass`` with string metadata, each with a global batch.
SCENARIO "hidden": ``divergence="warn"``; the NNX model's hidden size is 16 on process 1, 8
elsewhere.

Prints "RESULT name value" per call and "ROWS <json>" (the log's divergence rows).
"""

import dataclasses
import functools
import json
import sys

process_id, num_processes, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
scenario = sys.argv[4]

import jax  # noqa: E402
from _dist import join  # noqa: E402

join(process_id, num_processes, port)

import equinox as eqx  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jaxtrace_nb as jt  # noqa: E402

jt.start(divergence="raise" if scenario == "same" else "warn", divergence_grace_s=20)
mesh = jax.make_mesh((num_processes,), ("d",), devices=jax.devices())
sharding = NamedSharding(mesh, P("d"))
x = jax.make_array_from_process_local_data(sharding, np.ones((2, 2), np.float32))


def result(name, value):
    local = np.asarray(value.addressable_data(0) if hasattr(value, "addressable_data") else value)
    print("RESULT", process_id, name, json.dumps(local.tolist()), flush=True)


class Model(nnx.Module):
    def __init__(self, hidden, rngs):
        self.l1 = nnx.Linear(2, hidden, rngs=rngs)
        self.name = "model"

    def __call__(self, x):
        return self.l1(x)


hidden = 16 if (scenario == "hidden" and process_id == 1) else 8
model = Model(hidden, nnx.Rngs(0))


@nnx.jit
def nnx_step(model, x):
    return model(x)


result("nnx", nnx_step(model, x))
if scenario == "same":
    graphdef, state = nnx.split(model)

    @functools.partial(jax.jit, static_argnums=0)
    def split_step(graphdef, state, x):
        return nnx.merge(graphdef, state)(x)

    result("split", split_step(graphdef, state, x))

    class Dense(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x)

    params = Dense().init(jax.random.key(0), np.ones((1, 2), np.float32))
    result("linen", jax.jit(Dense().apply)(params, x))

    class Block(eqx.Module):
        w: jax.Array
        act: str = eqx.field(static=True)

    @eqx.filter_jit
    def eqx_step(block, x):
        return x * block.w if block.act == "id" else x

    result("eqx", eqx_step(Block(np.ones(2, np.float32), "id"), x))

    @functools.partial(
        jax.tree_util.register_dataclass, data_fields=["x"], meta_fields=["kind", "tags"]
    )
    @dataclasses.dataclass
    class Batch:
        x: jax.Array
        kind: str
        tags: tuple

    @jax.jit
    def batch_step(batch):
        return batch.x * 2

    result("dataclass", batch_step(Batch(x, "train", ("a", "b"))))

jt.stop()
rows = jt.log()
rows = rows[rows["kind"] == "divergence"]
cols = ["function", "leaf", "before", "after", "explanation"]
print("ROWS", json.dumps(rows[cols].astype(object).where(rows[cols].notna(), None).values.tolist()))
