"""Issue 55, case 4: a value on a mesh of two devices. Prints JSON: the hint ids of `step`'s
second event, JAX's trace count with the hint's fix applied, and whether the other advice
(commit to one device) is accepted by JAX."""

import json
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import jaxtrace_nb as jt  # noqa: E402

mesh = Mesh(np.array(jax.devices()), ("batch",))
on_mesh = NamedSharding(mesh, PartitionSpec("batch"))
w = jax.device_put(jnp.ones(4), on_mesh)


def make():
    @jax.jit
    def step(x, w):
        return x * w

    return step


jt.start()
step = make()
step(jnp.arange(4.0), w)
step(jax.device_put(jnp.arange(4.0), on_mesh), w)
rows = [e for e in jt.get_session().log.events() if e.function.endswith("step")]
fixed = make()
fixed(jax.device_put(jnp.arange(4.0), on_mesh), w)
fixed(jax.device_put(2 * jnp.arange(4.0), on_mesh), w)
try:
    committed = make()
    committed(jax.device_put(jnp.arange(4.0), jax.devices()[0]), w)
    one_device = "accepted"
except ValueError as e:
    one_device = "rejected: " + str(e)[:80]
print(
    json.dumps(
        {
            "devices": len(jax.devices()),
            "hints": [e.hint_ids for e in rows],
            "hint": rows[-1].hint,
            "fixed_traces": fixed._cache_size(),
            "one_device": one_device,
        }
    )
)
