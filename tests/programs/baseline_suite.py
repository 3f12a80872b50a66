"""A small test suite whose compile baseline is committed next to it (`baseline_suite.json`),
run as `test_budget.py` (not collected as it is: its name does not start with `test_`).

`tests/test_pytest_baseline.py` runs it with ``--jaxtrace-baseline-update`` and compares the file
written with the committed one: CI runs that test with JAX 0.8.0 and with 0.10.2, so the file is
the same with either. One jitted function of each kind (``jax.jit``, ``eqx.filter_jit``,
``nnx.jit``) and each common cause of a retrace.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from flax import nnx


@jax.jit
def scale(x, factor):
    return x * factor


@functools.partial(jax.jit, static_argnames="mode")
def step(x, mode):
    return x + 1 if mode == "add" else x * 2


@eqx.filter_jit
def loss(model, x):
    return jnp.sum(model(x))


class Net(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return self.linear(x)


@nnx.jit
def forward(model, x):
    return model(x)


def test_shapes():
    for n in (1, 2, 3):
        scale(jnp.ones(n), 2.0)


def test_static_argument():
    step(jnp.ones(3), mode="add")
    step(jnp.ones(3), mode="mul")
    step(jnp.ones(3), mode="add")  # cached


def test_equinox_dtype():
    model = eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(0))
    loss(model, jnp.ones(3))
    loss(model, jnp.ones(3))  # cached
    loss(model, jnp.ones(3, jnp.int32))


def test_nnx_shape():
    model = Net(nnx.Rngs(0))
    forward(model, jnp.ones((1, 3)))
    forward(model, jnp.ones((4, 3)))


def test_weak_type():
    scale(jnp.ones(2), 2.0)
    scale(jnp.ones(2), jnp.float32(2.0))


def test_compile_without_trace():
    x = jnp.ones(5)
    scale(x, 2.0)
    scale(jax.device_put(x, jax.devices()[0]), 2.0)  # committed: compiled again, not traced again


def test_re_created_in_a_loop():
    for n in range(2):
        jax.jit(lambda x: x + n)(jnp.ones(2))


def test_same_call_as_another_test():
    scale(jnp.ones(1), 2.0)  # test_shapes made this call first: each test starts from empty caches


class TestParametrized:
    @pytest.mark.parametrize("n", [2, 7])
    def test_sizes(self, n):
        scale(jnp.ones(n), 1.0)


def test_traces_nothing():
    assert jnp.ones(2).shape == (2,)
