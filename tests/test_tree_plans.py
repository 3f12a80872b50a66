"""Tree plans: a treedef of plain containers read once, and reused, gives exactly the walk's leaves.

`Walker.tree` reads a treedef of dicts with string keys, lists, tuples and None through a plan
made from it once (`tree_plan`); every other treedef node by node (`Walker.walk_tree`). A
seeded generator builds such trees (and ones with custom nodes inside) and compares the two
readings: the same leaves in the same order, the same owners and flat positions.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb import _arguments
from jaxtrace_nb._arguments import Placeholder, Walker, aval_leaf, tree_plan

SEEDS = range(300)


class Pair(NamedTuple):
    a: Any
    b: Any


class Empty(NamedTuple):
    pass


class Box(eqx.Module):
    w: Any


def _leaf(rng: random.Random):
    shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
    return jax.core.ShapedArray(shape, rng.choice((jnp.float32, jnp.int32, jnp.bfloat16)), weak_type=rng.random() < 0.2)


def _tree(rng: random.Random, depth: int, custom: bool):
    r = rng.random()
    if depth == 0 or r < 0.25:
        return None if rng.random() < 0.1 else _leaf(rng)
    n = rng.randint(0, 4)
    kids = [_tree(rng, depth - 1, custom) for _ in range(n)]
    choice = rng.randrange(6 if custom else 3)
    if choice == 0:
        keys = rng.sample(rng.choice((["w", "b", "x", "a'b", "ü"], [3, 0, 1, 7])) if custom
                          else ["w", "b", "x", "a'b", "ü"], n)
        return dict(zip(keys, kids))
    if choice == 1:
        return kids
    if choice == 2:
        return tuple(kids)
    if choice == 3:
        return Pair(kids[0] if kids else None, _tree(rng, depth - 1, custom))
    if choice == 4:
        return Empty() if rng.random() < 0.3 else [Pair(_leaf(rng), None)]
    return Box(kids)


def _read(td, vals, planned: bool) -> tuple:
    walker = Walker(())
    (walker.tree if planned else walker.walk_tree)("x", td, vals, 2)
    return list(walker.leaves.items()), walker.owners, walker.flat_paths


@pytest.mark.parametrize("seed", SEEDS)
def test_a_plan_reads_exactly_what_the_walk_reads(seed):
    rng = random.Random(seed)
    custom = seed % 3 == 0
    vals, td = jax.tree_util.tree_flatten(_tree(rng, 4, custom), is_leaf=lambda x: isinstance(x, jax.core.ShapedArray))
    vals = [_leaf(rng), _leaf(rng)] + [Placeholder(aval_leaf(v), 2 + i) if rng.random() < 0.2 else v
                                       for i, v in enumerate(vals)]
    walked = _read(td, vals, planned=False)
    assert _read(td, vals, planned=True) == walked
    assert _read(td, vals, planned=True) == walked  # the plan again, as the next trace reuses it


def test_only_plain_containers_are_planned_and_no_treedef_is_kept():
    plain = jax.tree_util.tree_structure({"w": [1, (2, None)], "z": {"a": 2}})
    assert tree_plan(plain) is not None
    for other in ({"w": Box(1)}, [Pair(1, 2)], [Empty()], {(1, 2): 1}, {"w": {1.5: 2}}, {1: 2}):
        assert tree_plan(jax.tree_util.tree_structure(other)) is None
    assert all(type(key) is bytes for key in _arguments._PLANS)  # JAX's serialization, not the treedef
