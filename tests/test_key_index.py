"""Issue 54, item 6: the index of the keys JAX holds (`_key_index`) finds the closest key among few
candidates, and the same one the comparison of every key finds.

A long stream of one function's retraces is judged by JAX (a counter in the traced body: each
call traced, and a model of JAX's cache key that agrees with it at every call); random sets of
keys compare the index with the full search (`_signature.search`), key by key as they are held.
"""

import functools
import random

import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._keys import _key_index
from jaxtrace_nb._keys._key_index import MAX_TIES, HeldKeys, closest_held
from jaxtrace_nb._keys._signature import NONE_LEAF, Signature, array_leaf, search, static_leaf


def _sig(rng: random.Random) -> Signature:
    leaves = {}
    for i in range(rng.choice((1, 2, 3, 4))):
        kind = rng.random()
        path = f"x{i}"
        if kind < 0.6:
            leaves[path] = array_leaf(
                (rng.choice((1, 2)),), rng.choice(("float32", "int32")), rng.random() < 0.2
            )
        elif kind < 0.85:
            value = rng.choice((0, 1, 1.0, "a", float("nan")))
            leaves[path] = static_leaf(summarize_static(value), value=value)
        else:
            leaves[path] = NONE_LEAF
    context_value = rng.choice((False, True)) if rng.random() < 0.3 else False
    return Signature(
        ("id", rng.choice((1, 1, 1, 2))),
        (("x64", str(context_value)),),
        leaves,
        call=tuple((p, rng.choice(("position", "keyword"))) for p in list(leaves)[:1]),
        context_values=(context_value,),
    )


@pytest.mark.parametrize("seed", range(12))
def test_the_index_finds_what_the_search_of_every_key_finds(seed):
    rng = random.Random(seed)
    _key_index.forget()
    keys = [_sig(rng) for _ in range(120)]
    for n in range(1, len(keys)):
        new = keys[n]
        held = tuple(keys[:n])
        expected = search(new, held)
        found = closest_held(new, HeldKeys(held))
        where = f"seed {seed}, key {n}"
        assert (found.index, found.score) == (expected.index, expected.score), where
        assert found.ties == expected.ties[:MAX_TIES], where
        assert found.changes == expected.changes and found.context == expected.context, where


def test_the_index_follows_keys_that_lose_their_oldest_and_searches_fewer():
    """Held keys that lose their oldest (the session's bound) reuse the index, and a search among
    many keys one component away reads few of them."""
    _key_index.forget()
    keys = [
        Signature(("id", 1), (), {"x": array_leaf((n + 1,), "float32")}, context_values=())
        for n in range(400)
    ]
    for n in range(1, 300):
        closest_held(keys[n], HeldKeys(tuple(keys[:n])))
    for start in range(1, 50):
        held = tuple(keys[start:300])
        expected = search(keys[300], held)
        found = closest_held(keys[300], HeldKeys(held))
        assert (found.index, found.score, found.ties) == (
            expected.index,
            expected.score,
            expected.ties[:MAX_TIES],
        )
    assert len(_key_index._INDEXES) == 1
    judged = []
    original = _key_index._score

    def counted(new, old, limit):
        judged.append(old)
        return original(new, old, limit)

    _key_index._score = counted
    try:
        closest_held(keys[301], HeldKeys(tuple(keys[:301])))
    finally:
        _key_index._score = original
    assert len(judged) <= MAX_TIES + 2


SHAPES = (1, 2, 3, 4, 5, 6, 7, 8)
DTYPES = (jnp.float32, jnp.int32)
STATICS = (0, 1, 2, 3)


def test_a_long_stream_of_one_function_is_judged_against_every_key_jax_holds(jt):
    """300 calls of one jitted function with a random shape, dtype and static value: every call
    that JAX traced (its counter) is recorded, and each retrace names a leaf that differs from one
    of the earlier keys with the fewest differences (the model of JAX's key agrees with JAX's
    counter at every call)."""
    rng = random.Random(54)
    traces = [0]

    @functools.partial(jax.jit, static_argnums=1)
    def f(x, s):
        traces[0] += 1
        return x

    history, expected = [], []
    for _ in range(300):
        key = (rng.choice(SHAPES), rng.choice(DTYPES), rng.choice(STATICS))
        before = traces[0]
        f(jnp.ones(key[0], key[1]), key[2])
        assert (traces[0] > before) == (key not in history), "the model disagrees with JAX"
        if key not in history:
            if history:  # components: the array `x` (its shape and dtype), the static `s`
                ranks = [(k[:2] != key[:2]) + (k[2] != key[2]) for k in history]
                # as close: fewer pytree (static) differences first, then type ones
                ranks = [(d, k[2] != key[2]) for d, k in zip(ranks, history)]
                best = min(ranks)
                expected.append(
                    {
                        name
                        for k, r in zip(history, ranks)
                        if r == best
                        for name, differs in (("x", k[:2] != key[:2]), ("s", k[2] != key[2]))
                        if differs
                    }
                )
            history.append(key)
    df = jt.log()
    rows = df[(df["kind"] == "trace") & ~df["internal"] & df["function"].str.endswith(".f")]
    rows = rows.to_dict("records")
    assert len(rows) == traces[0] == len(history)
    for row, names in zip(rows[1:], expected):
        assert row["cause"] in ("shape", "dtype", "static"), row
        assert row["leaf"] in names, (row["leaf"], names, row["explanation"])
    assert jt.faults() == {}
