"""Explanations that say what happened (issue 54, item 4), on real programs.

JAX's verdict is the oracle: a counter in the traced function (did JAX trace again?) and JAX's own
compile events (`jax.monitoring`'s backend compile duration: did it compile again?). JAX's
explainer (`jax_explain_cache_misses`, 0.10.2) says "jax_enable_x64 differs" at the x64 retrace
and nothing at the donation's compile (no tracing cache miss there).
"""

import jax
import jax.numpy as jnp
import pytest

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


_COMPILES: list = []  # XLA compile durations, as JAX reports them, while a test listens
_LISTENING: list = []


def _on_duration(event, duration, **kwargs):
    if _LISTENING and event == BACKEND_COMPILE:
        _COMPILES.append(duration)


@pytest.fixture
def compiles():
    """The XLA compiles since the fixture began, as JAX reports them (JAX 0.8 has no way to
    unregister a listener: one is registered once, and listens only during such a test)."""
    if not _LISTENING:  # (never registered yet)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
    _COMPILES.clear()
    _LISTENING[:] = [True]
    yield _COMPILES
    _LISTENING[:] = [False]


def _rows(jt, kind=None):
    df = jt.log(internal=False)
    return df if kind is None else df[df["kind"] == kind]


def test_x64_switched_says_which_inputs_changed_with_it(jt):
    """x64 switched on between two calls: JAX traces again (its context and every default-dtype
    input changed); the explanation names the context and the inputs, never "Same inputs"."""
    traces = []

    def scale(x, s):
        traces.append(1)
        return x * s

    f = jax.jit(scale)
    f(jnp.ones(2), 2.0)
    jax.config.update("jax_enable_x64", True)
    try:
        f(jnp.ones(2), 2.0)
    finally:
        jax.config.update("jax_enable_x64", False)
    assert len(traces) == 2  # JAX's verdict
    row = _rows(jt, "trace").iloc[-1]
    assert row["cause"] == "context"
    assert row["before"].endswith("=False") and row["after"].endswith("=True")
    # JAX names its context's entries from 0.10.2 on; before, we say JAX's position, never a guess
    named = row["before"] == "jax_enable_x64=False"
    assert named or jax.__version_info__ < (0, 10, 2)
    text = row["explanation"]
    assert "Same inputs" not in text
    assert "`x` f32[2] → f64[2]" in text and "`s` f32[] (weak) → f64[] (weak)" in text
    assert ("default dtypes" in text) == named
    assert jt.faults() == {}


def test_a_context_change_with_the_same_inputs_says_so(jt):
    """Only the context changed (a matmul precision set around the call): "Same inputs"."""
    traces = []

    def mm(a):
        traces.append(1)
        return a @ a

    f = jax.jit(mm)
    a = jnp.ones((2, 2))
    f(a)
    with jax.default_matmul_precision("highest"):
        f(a)
    assert len(traces) == 2  # JAX's verdict
    row = _rows(jt, "trace").iloc[-1]
    assert row["cause"] == "context"
    assert row["explanation"].startswith("Same inputs, but JAX's trace context changed")
    assert jt.faults() == {}


@pytest.mark.parametrize("donated_first", [False, True])
def test_a_jit_made_with_other_donation_says_donation(jt, compiles, donated_first):
    """The same function jitted again with other `donate_argnums`: JAX serves the trace from its
    cache and compiles again; the compile row says the donation changed (not "a program JAX
    derived from this function")."""
    traces = []

    def add_one(x):
        traces.append(1)
        return x + 1

    plain, donating = jax.jit(add_one), jax.jit(add_one, donate_argnums=0)
    first, second = (donating, plain) if donated_first else (plain, donating)
    a, b = jnp.ones(3), jnp.ones(3)  # (made first: their own compiles are not counted)
    before = len(compiles)
    first(a)
    second(b)
    assert len(traces) == 1 and len(compiles) - before == 2  # JAX's verdict
    (row,) = _rows(jt, "compile").itertuples()
    assert (row.cause, row.leaf) == ("sharding", "x")
    assert "for another donation" in row.explanation and "derived" not in row.explanation
    state = "no longer donated" if donated_first else "now donated"
    assert f"`x` {state}" in row.explanation
    assert (row.after == "uncommitted, donated") != donated_first
    assert jt.faults() == {}
