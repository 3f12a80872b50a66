"""A trace's life (`_lifecycle`, `_functions`) against JAX's own count: the body of a jitted
function counts its runs (JAX runs it once per trace), and each call says what it changed.

The log must hold one trace per body run, numbered 1, 2, … per function, each with the cause, leaf
and before → after of the change the call applied against the closest earlier call (ties: the
latest); a cache hit adds
nothing; a function object made again by the same code is a new function at the same place, its
trace numbered on from that place's count.
"""

import functools

import jax
import jax.numpy as jnp

RUNS = {"make": 0}


def make():
    @functools.partial(jax.jit, static_argnums=1)
    def step(x, n):
        RUNS["make"] += 1
        return x * n

    return step


def test_each_body_run_is_one_trace_with_the_change_applied(jt):
    RUNS["make"] = 0
    step = make()
    calls = [  # (x, n, what the call changed: (cause, leaf, before, after) or None for a cache hit)
        (jnp.ones(2), 1, ("first", None, None, None)),
        (jnp.ones(3), 1, ("shape", "x", "f32[2]", "f32[3]")),
        (jnp.ones(3), 2, ("static", "n", "1", "2")),
        (jnp.ones(2), 1, None),  # as the first call: JAX's cache holds it
        (jnp.ones(3, jnp.int32), 2, ("dtype", "x", "f32[3]", "i32[3]")),
        (jnp.ones(4, jnp.int32), 2, ("shape", "x", "i32[3]", "i32[4]")),  # ties: the latest
    ]
    expected, runs = [], []
    for x, n, change in calls:
        before = RUNS["make"]
        step(x, n)
        runs.append(RUNS["make"] - before)
        if change is not None:
            expected.append(change)
    assert runs == [0 if change is None else 1 for _, _, change in calls]  # JAX's own count
    again = make()  # the same code, a new function object
    again(jnp.ones(2), 1)
    df = jt.log(internal=False)
    df = df[df["kind"] == "trace"]
    assert len(df) == RUNS["make"] == len(expected) + 1
    rows = [
        tuple(None if v != v else v for v in r)
        for r in df[["trace_number", "cause", "leaf", "before", "after"]].itertuples(index=False)
    ]
    assert rows[:-1] == [(i, *change) for i, change in enumerate(expected, start=1)]
    number, cause, *_ = rows[-1]
    assert (
        cause == "new_function" and number == RUNS["make"]
    )  # numbered on at its place, named as new
    assert df["function"].nunique() == 1 and df["location"].nunique() == 1
    summary = jt.summary()
    (traces,) = summary["traces"].tolist()
    assert traces == RUNS["make"]
