"""Issue 43, generated: random sequences of calls whose every retrace is judged against the keys JAX
holds, checked against JAX itself.

Each sequence mixes shapes, dtypes, static values that JAX compares by ``==`` but that take no weak
reference or collide by hash (NumPy scalars, a ``__slots__`` dataclass, tuples over 16 items),
`jax.clear_caches()`, `f.clear_cache()` and function objects made again. A model of JAX's tracing
cache (per function object, cache generation and the object's own clears, every key) predicts each
call's hit or miss, and JAX's own trace count confirms it at every call: only then does the model's
closest key judge our cause and leaf.
"""

import dataclasses
import functools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest


@dataclasses.dataclass(frozen=True)
class Slotted:
    __slots__ = ("a",)
    a: int


STATICS = [
    np.int64(-1),
    np.int64(-2),
    1,
    2,
    Slotted(1),
    Slotted(2),
    tuple(range(20)),
    tuple(range(19)) + (-1,),
]
SHAPES = [1, 2, 3]
DTYPES = ["float32", "int32"]
FLAGS = [True, False]


def _differences(key, other) -> set:
    """The leaves (in the user's names) at which two keys differ, as jaxtrace_nb reads them."""
    (shape, dtype, s, flag), (shape2, dtype2, s2, flag2) = key, other
    found = set()
    if (shape, dtype) != (shape2, dtype2):
        found.add("x")
    if STATICS[s] is not STATICS[s2] and not (
        type(STATICS[s]) is type(STATICS[s2]) and STATICS[s] == STATICS[s2]
    ):
        found.add("s")
    if flag != flag2:
        found.add("flag")
    return found


def _expected(key, held: list, earlier: list, new_object: bool):
    """(causes allowed, leaves allowed, unknown?) for a miss of `key`."""
    if not earlier:
        return {"first"}, {None}, False
    if new_object:
        return {"new_function"}, {None}, False
    pool = (
        held or earlier
    )  # JAX compares with the keys it holds; with none, the object's it held before
    distances = [len(_differences(key, k)) for k in pool]
    best = min(distances)
    if best == 0:
        return {"unknown"}, {None}, True
    leaves = set().union(*(_differences(key, k) for k, d in zip(pool, distances) if d == best))
    return {"shape", "dtype", "static"}, leaves, False


@pytest.mark.allows_unknown
@pytest.mark.parametrize("seed", range(24))
def test_random_call_sequences_are_judged_against_every_key_jax_holds(jt, seed):
    rng = random.Random(seed)
    traces = [0]

    def make():
        @functools.partial(jax.jit, static_argnums=(1, 2))
        def f(x, s, flag):
            traces[0] += 1
            return x

        return f

    from jaxtrace_nb._recording._session import get_session

    # JAX 0.8's tracing cache (`lu.cache`) has no counter that shows `jax.clear_caches()`: there
    # jaxtrace_nb takes the keys a clear dropped as still held (docs/design.md), and so does the
    # model.
    clears_seen = get_session().probe.internals.trace_cache_info is not None
    # JAX 0.8 has no counter `f.clear_cache()` moves either, nor a list of its cache's keys.
    evictions_seen = get_session().probe.internals.trace_cache_holders is not None
    f = make()
    generation, obj, own = 0, 0, 0
    # (generation, object, the object's clears, key) of every trace, as JAX's cache saw them
    history = []
    expected = []
    for _ in range(36):
        r = rng.random()
        if r < 0.06:
            jax.clear_caches()
            generation += 1
            continue
        if r < 0.1:
            f = make()
            obj += 1
        elif r < 0.15:
            f.clear_cache()
            own += 1
            continue
        key = (
            rng.choice(SHAPES),
            rng.choice(DTYPES),
            rng.randrange(len(STATICS)),
            rng.choice(FLAGS),
        )
        held = [k for g, o, e, k in history if g == generation and o == obj and e == own]
        will_trace = not any(not _differences(key, k) for k in held)
        before = traces[0]
        f(jnp.ones(key[0], key[1]), STATICS[key[2]], key[3])
        assert (traces[0] > before) == will_trace, "the model of JAX's cache disagrees with JAX"
        if will_trace:
            new_object = bool(history) and not any(o == obj for _, o, _, _ in history)
            cleared = bool(history) and not new_object and history[-1][0] != generation
            same_object = [k for _, o, _, k in history if o == obj]
            emptied = not held and not new_object and not cleared and bool(same_object)
            same_generation = [k for g, o, _, k in history if o == obj and g == generation]
            seen_held = held if evictions_seen else same_generation if clears_seen else same_object
            expected.append(
                (
                    key,
                    _expected(
                        key, seen_held, same_object or [k for _, _, _, k in history], new_object
                    ),
                    cleared,
                    emptied,
                )
            )
            history.append((generation, obj, own, key))
    df = jt.log()
    rows = df[(df["kind"] == "trace") & ~df["internal"] & df["function"].str.endswith("f")].to_dict(
        "records"
    )
    assert len(rows) == traces[0] == len(expected)
    for row, (key, (causes, leaves, _), cleared, emptied) in zip(rows, expected):
        where = (
            f"seed {seed}, trace #{row['trace_number']} {key}: {row['cause']} at {row['leaf']}: "
            f"{row['explanation']}"
        )
        assert row["cause"] in causes, where
        if row["cause"] not in ("first", "new_function", "unknown"):
            assert row["leaf"] in leaves, where
            assert row["before"] != row["after"], where
        if cleared and clears_seen:
            assert "cleared" in row["explanation"], where
        if emptied and evictions_seen:
            assert "`f.clear_cache()`" in row["explanation"], where
    assert jt.faults() == {}
