"""Generated retraces: random argument pytrees, one random change each, the cause and leaf known.

A seeded generator builds an argument (nested dicts, lists, tuples, NamedTuples, Equinox
modules, `register_dataclass` pytrees, None, arrays of several dtypes, Python scalars),
calls a jitted function with it, then makes exactly one change of a kind the generator
chose, and calls again. It knows the cause and the changed leaf from the change it made,
in the user's path syntax (``x['b'][1].w``); the recorded diagnosis must name both.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from _support import rows

SEEDS = range(80)
DTYPES = (jnp.float32, jnp.int32, jnp.float16, jnp.bfloat16)


class Pair(NamedTuple):
    a: Any
    b: Any


class Box(eqx.Module):
    w: Any
    tag: str = eqx.field(static=True)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["v"], meta_fields=["depth"])
@dataclasses.dataclass
class Meta:
    v: Any
    depth: int


class Case(NamedTuple):
    before: Any
    after: Any
    cause: str
    leaf: str


def _array(rng: random.Random):
    shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
    return jnp.zeros(shape, rng.choice(DTYPES))


def _tree(rng: random.Random, depth: int):
    """A random pytree; leaves are arrays, Python floats or None."""
    if depth == 0 or rng.random() < 0.3:
        r = rng.random()
        return _array(rng) if r < 0.7 else (rng.choice([0.5, 1.5]) if r < 0.9 else None)
    kind = rng.choice(["dict", "list", "tuple", "pair", "box", "meta"])
    sub = functools.partial(_tree, rng, depth - 1)
    if kind == "dict":
        return {k: sub() for k in rng.sample("abcd", rng.randint(1, 3))}
    if kind == "list":
        return [sub() for _ in range(rng.randint(1, 3))]
    if kind == "tuple":
        return tuple(sub() for _ in range(rng.randint(1, 3)))
    if kind == "pair":
        return Pair(sub(), sub())
    if kind == "box":
        return Box(sub(), rng.choice(["relu", "gelu"]))
    return Meta(sub(), rng.randint(1, 3))


def _paths(obj, path="x"):
    """(path, object, parent kind) of every node and leaf, in the user's path syntax."""
    yield path, obj
    if isinstance(obj, dict):
        for k in sorted(obj):
            yield from _paths(obj[k], f"{path}[{k!r}]")
    elif isinstance(obj, Pair):
        yield from _paths(obj.a, f"{path}.a")
        yield from _paths(obj.b, f"{path}.b")
    elif isinstance(obj, (list, tuple)):
        for i, item in enumerate(obj):
            yield from _paths(item, f"{path}[{i}]")
    elif isinstance(obj, Box):
        yield from _paths(obj.w, f"{path}.w")
    elif isinstance(obj, Meta):
        yield from _paths(obj.v, f"{path}.v")


def _replace(obj, path, new, root="x"):
    """`obj` with the node at `path` replaced by `new`."""
    if path == root:
        return new
    if isinstance(obj, dict):
        return {k: _replace(v, path, new, f"{root}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, Pair):
        return Pair(
            _replace(obj.a, path, new, f"{root}.a"), _replace(obj.b, path, new, f"{root}.b")
        )
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace(v, path, new, f"{root}[{i}]") for i, v in enumerate(obj))
    if isinstance(obj, Box):
        return Box(_replace(obj.w, path, new, f"{root}.w"), obj.tag)
    if isinstance(obj, Meta):
        return Meta(_replace(obj.v, path, new, f"{root}.v"), obj.depth)
    return obj


def _is_array(x) -> bool:
    return isinstance(x, jax.Array)


def generate(seed: int) -> Case:
    """One random argument and one random change of it, with the cause and leaf it must get."""
    rng = random.Random(seed)
    x = {"p": _tree(rng, 3), "q": _array(rng)}  # a dict at the top: always a container
    nodes = list(_paths(x))
    arrays = [(p, v) for p, v in nodes if _is_array(v)]
    options = []
    for p, v in arrays:
        options += [("shape", p, v), ("dtype", p, v), ("none", p, v)]
        if v.shape == () and v.dtype == jnp.float32:
            options.append(("weak", p, v))
    for p, v in nodes:
        if isinstance(v, dict):
            options.append(("key", p, v))
        if type(v) in (list, tuple):
            options.append(("container", p, v))
        if type(v) is list:
            options.append(("length", p, v))
        if isinstance(v, Box):
            options.append(("eqx_static", p, v))
        if isinstance(v, Meta):
            options.append(("meta", p, v))
    kind, path, value = rng.choice(options)
    if kind == "shape":
        new = jnp.zeros(value.shape + (2,), value.dtype)
        return Case(x, _replace(x, path, new), "shape", path)
    if kind == "dtype":
        dtype = rng.choice([d for d in DTYPES if d != value.dtype])
        return Case(x, _replace(x, path, value.astype(dtype)), "dtype", path)
    if kind == "none":
        return Case(x, _replace(x, path, None), "structure", path)
    if kind == "weak":
        return Case(x, _replace(x, path, 0.5), "weak_type", path)
    if kind == "key":
        added = next(k for k in "zyxw" if k not in value)
        return Case(
            x, _replace(x, path, {**value, added: jnp.zeros(2)}), "structure", f"{path}[{added!r}]"
        )
    if kind == "container":
        other = tuple if type(value) is list else list
        return Case(x, _replace(x, path, other(value)), "structure", path)
    if kind == "length":
        return Case(
            x, _replace(x, path, value + [jnp.zeros(1)]), "structure", f"{path}[{len(value)}]"
        )
    if kind == "eqx_static":
        tag = "gelu" if value.tag == "relu" else "relu"
        return Case(x, _replace(x, path, Box(value.w, tag)), "static", f"{path}.tag")
    return Case(x, _replace(x, path, Meta(value.v, value.depth + 1)), "static", f"{path}.depth")


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_change_is_named(jt, seed):
    case = generate(seed)

    @jax.jit
    def f(x):
        return jax.tree.map(lambda a: a, x)

    f(case.before)
    f(case.after)
    recorded = rows(jt, "test_generated_change_is_named.<locals>.f")
    assert len(recorded) == 2, recorded
    assert recorded[1][1:3] == (case.cause, case.leaf), (case.before, case.after, recorded)


@pytest.mark.parametrize("seed", range(20))
def test_generated_call_structure_and_static_changes(jt, seed):
    """How an argument is passed, and static argument values, under jax.jit and eqx.filter_jit."""
    rng = random.Random(1000 + seed)
    kind = rng.choice(["keyword", "static", "filter_static"])
    if kind == "keyword":

        @jax.jit
        def g(a, b):
            return a + b

        g(jnp.ones(2), jnp.ones(2))
        g(jnp.ones(2), b=jnp.ones(2))
        expected = ("structure", "b")
    elif kind == "static":

        @functools.partial(jax.jit, static_argnums=1)
        def g(a, n):
            return a * n

        g(jnp.ones(2), rng.randint(1, 5))
        g(jnp.ones(2), rng.randint(6, 9))
        expected = ("static", "n")
    else:

        @eqx.filter_jit
        def g(a, n):
            return a * n

        g(jnp.ones(2), rng.randint(1, 5))
        g(jnp.ones(2), rng.randint(6, 9))
        expected = ("static", "n")
    recorded = rows(jt, "test_generated_call_structure_and_static_changes.<locals>.g")
    assert [r[1:3] for r in recorded] == [("first", None), expected]
