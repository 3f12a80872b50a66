"""Prints the portable form (`_divergence.portable_key`) of every key this process traces, one
JSON line per trace, over every kind of leaf: arrays, static values of each plain kind, a dataclass,
a named tuple, a function, an object compared by identity, None, dicts, lists, custom nodes, an
Equinox module with a static string field, a `register_dataclass` with string metadata, Flax NNX
(``nnx.jit`` and ``jax.jit`` over ``nnx.split``), Flax linen parameters, an Optax state, and
Diffrax's term, solver, SaveAt and step size controller (tests/test_divergence.py runs it under
two ``PYTHONHASHSEED``\\ s and compares the lines).

The comparison itself needs a `jax.distributed` run; here the real records of real traces are
taken where the comparison would take them (`Peers.on_trace`), and the forms printed.
"""

import dataclasses
import enum
import functools
import json
import sys
from typing import NamedTuple

import jax
import jax.numpy as jnp

import jaxtrace_nb as jt
from jaxtrace_nb._diagnosis._divergence import portable_key
from jaxtrace_nb._recording import _peers

forms = []


def capture(self, record, frame):
    if record.signature is not None:
        key = portable_key(record.signature.get())
        forms.append([record.identity.name, [list(leaf[:2]) for leaf in key.leaves]])


_peers.Peers.on_trace = capture
jt.start()


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    rate: float


class Pair(NamedTuple):
    a: str
    b: int


class Color(enum.Enum):
    RED = "red"


class Opaque:  # compared by identity
    pass


def activation(x):
    return x


@functools.partial(jax.jit, static_argnums=1)
def static_f(x, s):
    return x


for s in (
    3,
    2.5,
    "relu",
    b"b",
    (1, "a"),
    frozenset({"a", "b", "c"}),
    Config("adam", 0.1),
    Pair("p", 1),
    Color.RED,
    activation,
    Opaque(),
    None,
    True,
    1 + 2j,
):
    static_f(jnp.ones(2), s)


@jax.jit
def tree_f(tree):
    return jax.tree_util.tree_leaves(tree)[0]


tree_f({"w": jnp.ones((2, 3)), "b": [jnp.zeros(3), 1.0], "c": (None, jnp.int32(1))})


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["kind", "tags"]
)
@dataclasses.dataclass
class Registered:
    w: jax.Array
    kind: str
    tags: tuple


tree_f(Registered(jnp.ones(2), "dense", ("x", "y")))

import equinox as eqx  # noqa: E402


class Block(eqx.Module):
    w: jax.Array
    act: str = eqx.field(static=True)
    fn: object = eqx.field(static=True)


@eqx.filter_jit
def eqx_f(block, x):
    return block.w * x


eqx_f(Block(jnp.ones(2), "gelu", activation), jnp.ones(2))

from flax import linen as nn  # noqa: E402
from flax import nnx  # noqa: E402


class Dense(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(x)


params = Dense().init(jax.random.key(0), jnp.ones((1, 2)))
tree_f(params)


class Model(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(2, 4, rngs=rngs)
        self.name = "model"


model = Model(nnx.Rngs(0))


@nnx.jit
def nnx_f(model, x):
    return model.l1(x)


nnx_f(model, jnp.ones((1, 2)))
graphdef, state = nnx.split(model)


@functools.partial(jax.jit, static_argnums=0)
def split_f(graphdef, state, x):
    return nnx.merge(graphdef, state).l1(x)


split_f(graphdef, state, jnp.ones((1, 2)))
tree_f(model)  # an NNX module as a JAX pytree

import optax  # noqa: E402

opt_state = optax.adam(1e-3).init({"w": jnp.ones(2)})
tree_f(opt_state)

import diffrax  # noqa: E402


@eqx.filter_jit
def ode_f(term, solver, saveat, controller, y0):
    return y0


ode_f(
    diffrax.ODETerm(activation),
    diffrax.Tsit5(),
    diffrax.SaveAt(ts=jnp.linspace(0, 1, 3)),
    diffrax.PIDController(rtol=1e-3, atol=1e-6),
    jnp.ones(2),
)
jt.stop()
json.dump(forms, sys.stdout)
