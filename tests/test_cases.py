"""The five real cases of the design note, each asserting cause and leaf."""

import time

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest
from _support import rows


@pytest.mark.parametrize("order", ["chex_outside", "chex_inside"])
def test_case1_decorator_order_does_not_hide_retraces(jt, order):
    def f(x):
        return x * 2

    if order == "chex_outside":
        g = chex.assert_max_traces(eqx.filter_jit(f), n=5)
    else:
        g = eqx.filter_jit(chex.assert_max_traces(f, n=5))
    with pytest.raises(
        jt.RetraceError, match=r"f .*traced 2 times.*shape at `x`: f32\[2\] → f32\[3\]"
    ):
        with jt.watch(max_traces=1):
            g(jnp.ones(2))
            g(jnp.ones(3))
    assert [r[1:] for r in rows(jt)] == [
        ("first", None, None, None),
        ("shape", "x", "f32[2]", "f32[3]"),
    ]


class Model(eqx.Module):
    w: jax.Array
    fn: object

    def __init__(self):
        self.w = jnp.ones(3)
        self.fn = jax.jit(jnp.sin)  # a new jitted callable on every construction

    def __call__(self, x):
        return self.fn(self.w * x)


def test_case2_callable_attribute_recreated(jt):
    @eqx.filter_jit
    def step(model, x):
        return model(x).sum()

    step(Model(), jnp.ones(3))
    step(Model(), jnp.ones(3))  # "re-initialised" model
    (first, second) = rows(jt, "test_case2_callable_attribute_recreated.<locals>.step")
    assert second[1:3] == ("static", "model.fn")
    event = jt.log(internal=False).iloc[-1]
    assert "a new object with the same name" in event["explanation"]
    assert "jax.jit" in event["hint"]


class Net(eqx.Module):
    w: jax.Array
    b: jax.Array


def test_case3_optimizer_state_changes_structure(jt):
    model = Net(jnp.ones(2), jnp.ones(2))
    frozen = Net(w=True, b=False)  # train w only: gradients for b are None
    optim = optax.sgd(0.1, momentum=0.9)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step_fn(model, opt_state, x):
        diff, static = eqx.partition(model, frozen)

        def loss(d):
            m = eqx.combine(d, static)
            return jnp.sum((m.w * x + m.b) ** 2)

        grads = eqx.filter_grad(loss)(diff)
        updates, opt_state = optim.update(grads, opt_state)
        return eqx.apply_updates(model, updates), opt_state

    for _ in range(3):
        model, opt_state = step_fn(model, opt_state, jnp.ones(2))
    got = rows(jt, "test_case3_optimizer_state_changes_structure.<locals>.step_fn")
    assert [r[1:] for r in got] == [
        ("first", None, None, None),
        ("structure", "opt_state[0].trace.b", "f32[2]", "None"),
    ]
    assert "optim.init" in jt.log(internal=False)["hint"].iloc[-1]


def test_case4_compile_seconds_and_the_second_compile(jt):
    @eqx.filter_jit
    def big(x):
        for _ in range(40):
            x = jnp.tanh(x @ x) + x
        return x

    start = time.perf_counter()
    big(jnp.ones((32, 32))).block_until_ready()
    wall = time.perf_counter() - start
    big(jnp.ones((16, 16))).block_until_ready()
    big(jnp.ones((16, 16))).block_until_ready()
    df = jt.log(internal=False)
    assert df["cause"].tolist() == ["first", "shape"]
    assert df["leaf"].tolist()[1] == "x" and df["after"].tolist()[1] == "f32[16,16]"
    first = df.iloc[0]
    recorded = first["trace_s"] + first["lower_s"] + first["compile_s"]
    assert 0 < recorded <= wall  # seconds recorded are JAX's own, within the call's
    assert (
        first["trace_s"] > 0 and first["lower_s"] > 0 and first["compile_s"] > 0
    )  # each stage timed
    summary = jt.summary()
    assert summary.loc[0, "traces"] == 2 and summary.loc[0, "compiles"] == 2


def test_case5_inline_filter_jit_nested_unchanged(jt):
    def program():
        @eqx.filter_jit
        def outer(x):
            inner = eqx.filter_jit(lambda y: y + 1, inline=True)
            return inner(x) * 2

        out = outer(jnp.arange(3.0))
        out.block_until_ready()
        return out.tolist()

    jt.stop()
    without = program()
    jt.start()
    with_recording = program()
    assert with_recording == without == [2.0, 4.0, 6.0]
    df = jt.log(internal=False)
    assert df.loc[df["function"].str.endswith("<lambda>"), "nested"].all()
