"""Issue 54, item 5: of the earlier keys as few components away, the one a person would call
closest is named: one that differs only in a type before one that differs in the input pytree,
and that one before one that differs in the trace context (JAX's explainer ranks the other way).

JAX is the oracle: a counter in the traced body says each call traced, and JAX's own comparison of
the new key with each earlier key (``partial_eval.diff_tracing_cache_keys``, JAX 0.9 on) says that
an earlier key differs from it in its types only.
"""

import functools

import jax
import jax.numpy as jnp
import pytest
from _support import explained_misses

import jaxtrace_nb as jt
from jaxtrace_nb._recording._session import get_session


class Counter:
    """JAX's own trace count: the traced body runs once per trace."""

    def __init__(self):
        self.n = 0

    def tick(self):
        self.n += 1


def _judged(name, calls):
    """Our trace rows and JAX's verdicts on the last trace: its explainer's category, and its
    comparison's category against every earlier key (None where JAX cannot be asked, JAX 0.8)."""
    jt.stop()
    jt.reset()
    try:
        with explained_misses() as misses:
            jt.start()
            calls()
            events = [
                e
                for e in get_session().log.events()
                if e.kind == "trace" and not e.internal and e.function.endswith(f".{name}")
            ]
            every = dict(misses._handler.every)
            drafts = {id(d.event): id(d) for d, _ in misses._handler.by_draft}
            explained = misses.explained(events)
    finally:
        jt.stop()
        jt.reset()
    last = events[-1]
    jax_pick = next((c for e, (_, c) in explained if e is last), None)
    return events, jax_pick, every.get(drafts.get(id(last)))


def test_an_optional_argument_none_then_0_then_1_0_reads_dtype_at_the_argument():
    """`f(a, None); f(a, 0); f(a, 1.0)`: the key of `0` differs from the new one in one type
    (int32 → float32, both weak); the key of `None` in its structure. Both are one component away,
    and the type difference is the one named."""
    count = Counter()

    @jax.jit
    def f(a, x_in=None):
        count.tick()
        return a if x_in is None else a + x_in

    a = jnp.ones(2)
    events, jax_pick, every = _judged("f", lambda: (f(a, None), f(a, 0), f(a, 1.0)))
    assert count.n == len(events) == 3
    last = events[-1]
    assert (last.cause, last.leaf, last.before, last.after) == (
        "dtype",
        "x_in",
        "i32[] (weak)",
        "f32[] (weak)",
    )
    assert "As close: trace #1 (differs at `x_in`)" not in last.explanation  # (the same leaf)
    if every is not None:  # JAX's comparison: one earlier key differs in types only, one in pytree
        assert "different input types" in every and "different input pytree" in every
    if jax_pick is not None:  # JAX's explainer names the farther key, the pytree difference
        assert jax_pick == "different input pytree"


def test_a_type_difference_is_closer_than_a_static_value_and_the_other_is_named():
    """(x f32[2], True), (x f32[3], False), then (x f32[3], True): one component from each earlier
    key; the shape change at `x` is named, and trace #2's difference at `train` as close."""
    count = Counter()

    @functools.partial(jax.jit, static_argnums=1)
    def step(x, train):
        count.tick()
        return x

    events, _, every = _judged(
        "step", lambda: (step(jnp.ones(2), True), step(jnp.ones(3), False), step(jnp.ones(3), True))
    )
    assert count.n == len(events) == 3
    last = events[-1]
    assert (last.cause, last.leaf, last.before, last.after) == ("shape", "x", "f32[2]", "f32[3]")
    assert "As close: trace #2 (differs at `train`)" in last.explanation
    if every is not None:
        assert "different input types" in every


@pytest.mark.parametrize("flip_first", [True, False])
def test_a_type_difference_is_closer_than_a_trace_context_difference(flip_first):
    """One earlier key traced under another x64 setting (the trace context differs, and so does
    nothing else of a float32 array), one of another shape: the shape is named, whichever came
    first."""
    count = Counter()

    @jax.jit
    def f(x):
        count.tick()
        return x * 2

    x2, x3 = jnp.ones(2, jnp.float32), jnp.ones(3, jnp.float32)

    def calls():
        steps = [lambda: _with_x64(lambda: f(x3)), lambda: f(x2)]
        for call in steps if flip_first else steps[::-1]:
            call()
        f(x3)

    events, _, every = _judged("f", calls)
    assert count.n == len(events) == 3
    last = events[-1]
    assert (last.cause, last.leaf, last.before, last.after) == ("shape", "x", "f32[2]", "f32[3]")
    if every is not None:
        assert "different input types" in every


def _with_x64(call):
    with jax.enable_x64(True):
        return call()
