"""A cache-hit jitted call must run none of jaxtrace_nb's Python: run through
`python -m jaxtrace_nb run --max-traces 5 --persist LOG hot_path.py`; prints the frames seen."""

import os
import sys

import equinox as eqx
import jax
import jax.numpy as jnp

import jaxtrace_nb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from _support import package_frames_on_cache_hits  # noqa: E402


@jax.jit
def hot(x, y):
    return x * y


@eqx.filter_jit
def hot_eqx(model, x):
    return model["w"] * x


x, m = jnp.ones(3), {"w": jnp.ones(3)}
hot(x, x).block_until_ready()
hot_eqx(m, x).block_until_ready()
frames = package_frames_on_cache_hits(lambda: (hot(x, x), hot_eqx(m, x)))
print("recording:", jaxtrace_nb._recording._session.get_session().recording)
print("package frames on cache hits:", frames)
