"""Traces (no computation) before `jax.distributed.initialize`, which JAX allows; recording must
not start JAX's backends in between (tests/test_multiprocess.py)."""

import sys

import jax
import jax.numpy as jnp
from jax._src import xla_bridge

step = jax.jit(lambda x: x * 2)
step.trace(jax.ShapeDtypeStruct((3,), jnp.float32))  # a shape check before the cluster is up
print("backends initialized by the trace:", xla_bridge.backends_are_initialized(), flush=True)
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{sys.argv[1]}", num_processes=1, process_id=0,
                           initialization_timeout=60)
print("process", jax.process_index(), "of", jax.process_count(), float(step(jnp.ones(3)).sum()), flush=True)
jax.distributed.shutdown()
