"""The probe against real JAX and Equinox programs."""

import functools
import threading

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from _support import package_frames, package_frames_on_cache_hits, rows


def test_jit_positional_keyword_static_and_donated(jt):
    @functools.partial(jax.jit, static_argnums=(1,), static_argnames=("mode",), donate_argnums=(0,))
    def f(x, n, y=None, *, mode="a"):
        return x * n + (0 if y is None else y)

    f(jnp.ones(2), 2, y=jnp.ones(2), mode="a")
    f(jnp.ones(2), 3, y=jnp.ones(2), mode="a")
    f(jnp.ones(2), 3, y=jnp.ones(2), mode="b")
    f(jnp.ones((2, 2)), 3, y=jnp.ones((2, 2)), mode="b")
    assert rows(jt, "test_jit_positional_keyword_static_and_donated.<locals>.f") == [
        ("test_jit_positional_keyword_static_and_donated.<locals>.f", "first", None, None, None),
        ("test_jit_positional_keyword_static_and_donated.<locals>.f", "static", "n", "2", "3"),
        (
            "test_jit_positional_keyword_static_and_donated.<locals>.f",
            "static",
            "mode",
            "'a'",
            "'b'",
        ),
        (
            "test_jit_positional_keyword_static_and_donated.<locals>.f",
            "shape",
            "x",
            "f32[2]",
            "f32[2,2]",
        ),
    ]


def test_location_is_users_file_line(jt):
    @jax.jit
    def g(x):
        return x + 1

    g(1.0)
    df = jt.log(internal=False)
    line = g.__wrapped__.__code__.co_firstlineno
    assert df["location"].tolist() == [f"{__file__}:{line}"]
    assert not df["internal"].any() and not df["nested"].any()


def test_filter_jit_function_paths_in_user_terms(jt):
    @eqx.filter_jit
    def step(params, batch, s, *, scale=1.0):
        return params["w"].sum() * batch["b"] * s * scale

    params = {"w": jnp.ones(2)}
    step(params, {"b": jnp.ones(2)}, 2)
    step(params, {"b": jnp.ones(3)}, 2)
    step(params, {"b": jnp.ones(3)}, 3)
    step(params, {"b": jnp.ones(3)}, 3, scale=2.0)
    r = rows(jt, "test_filter_jit_function_paths_in_user_terms.<locals>.step")
    assert [x[1:] for x in r] == [
        ("first", None, None, None),
        ("shape", "batch['b']", "f32[2]", "f32[3]"),
        ("static", "s", "2", "3"),
        ("structure", "scale", "(not passed)", "2.0"),  # Equinox binds without defaults
    ]
    assert "filter_jit" in jt.log(internal=False)["hint"].iloc[2]
    assert jt.log(internal=False)["location"].iloc[0].startswith(__file__)  # not equinox/_jit.py


class Lin(eqx.Module):
    w: jax.Array
    act: str = eqx.field(static=True)

    def __call__(self, x):
        return self.w * x

    @eqx.filter_jit
    def apply(self, x, n):
        return self.w * x * n


def test_filter_jit_on_module_methods_and_modules(jt):
    m = Lin(jnp.ones(2), "relu")
    m.apply(jnp.ones(2), 2)
    m.apply(jnp.ones(2), 3)
    fm = eqx.filter_jit(m)
    fm(jnp.ones(2))
    eqx.filter_jit(Lin(jnp.ones(3), "relu"))(jnp.ones(3))
    eqx.filter_jit(Lin(jnp.ones(3), "gelu"))(jnp.ones(3))
    assert [x[1:] for x in rows(jt, "Lin.apply")] == [
        ("first", None, None, None),
        ("static", "n", "2", "3"),
    ]
    assert [x[1:] for x in rows(jt, "Lin.__call__")] == [
        ("first", None, None, None),
        ("shape", "self.w", "f32[2]", "f32[3]"),
        ("static", "self.act", "'relu'", "'gelu'"),
    ]


def test_inline_filter_jit_nested_is_marked_nested(jt):
    @eqx.filter_jit
    def inner(y):
        return y + 1

    inline_inner = eqx.filter_jit(lambda y: y * 2, inline=True)

    @eqx.filter_jit
    def outer(x):
        return inner(x) + inline_inner(x)

    out = outer(jnp.ones(2))
    assert out.tolist() == [4.0, 4.0]
    df = jt.log(internal=False)
    nested = dict(zip(df["function"], df["nested"]))
    assert (
        nested["test_inline_filter_jit_nested_is_marked_nested.<locals>.outer"]  # noqa: E712
        == False
    )
    assert (
        nested["test_inline_filter_jit_nested_is_marked_nested.<locals>.inner"]  # noqa: E712
        == True
    )
    assert (
        nested["test_inline_filter_jit_nested_is_marked_nested.<locals>.<lambda>"]  # noqa: E712
        == True
    )


def test_nested_jit_and_control_flow_bodies(jt):
    @jax.jit
    def inner(x):
        return x * 2

    def body(c, x):
        return c + inner(x), None

    @jax.jit
    def outer(xs):
        return jax.lax.scan(body, 0.0, xs)[0] + jax.lax.cond(xs[0] > 0, lambda: 1.0, lambda: 2.0)

    outer(jnp.ones(3))
    df = jt.log(internal=False)
    names = set(df["function"])
    assert "test_nested_jit_and_control_flow_bodies.<locals>.outer" in names
    assert df.loc[df["function"].str.endswith("inner"), "nested"].all()
    assert not any(
        "body" in n or "lambda" in n for n in names
    )  # scan/cond bodies are not functions
    assert df.loc[df["function"].str.endswith("outer"), "compile_s"].notna().all()
    assert (
        df.loc[df["function"].str.endswith("inner"), "compile_s"].isna().all()
    )  # inlined, not compiled


def test_jitted_before_start_and_recreated_each_call():
    import jaxtrace_nb as jt

    @jax.jit
    def early(x):
        return x + 1

    early(jnp.ones(2))
    jt.reset()
    jt.start()
    try:
        early(jnp.ones(3))
        for i in range(3):
            jax.jit(lambda x: x * 2)(jnp.ones(2))
        df = jt.log(internal=False)
    finally:
        jt.stop()
        jt.reset()
    assert df.loc[df["function"].str.endswith("early"), "cause"].tolist() == ["first"]
    lam = df[df["function"].str.endswith("<lambda>")]
    assert lam["cause"].tolist() == ["first", "new_function", "new_function"]
    assert "created again at the same place" in lam["explanation"].iloc[1]


def test_internal_helpers_are_marked(jt):
    jnp.ones(5) + 1.0  # eager ops run JAX's own jitted helpers
    jnp.asarray(jnp.ones(5), jnp.int32)
    df = jt.log()
    assert len(df) > 0 and df["internal"].all()
    assert jt.log(internal=False).empty


def test_seconds_equal_jax_monitoring(jt):
    from jaxtrace_nb._jax._internals import listener_api

    register, unregister = listener_api("duration")  # JAX 0.8.0 has no public unregister
    seen = []

    def listener(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            seen.append((event.rsplit("/", 1)[-1], kwargs.get("fun_name"), duration))

    register(listener)
    try:

        @jax.jit
        def timed(x):
            return jnp.sin(x) @ x

        timed(jnp.ones((4, 4)))
    finally:
        unregister(listener)
    row = jt.log(internal=False).iloc[0]
    assert ("jaxpr_trace_duration", "timed", row["trace_s"]) in seen
    assert ("jaxpr_to_mlir_module_duration", "jit(timed)", row["lower_s"]) in seen
    assert ("backend_compile_duration", "jit(timed)", row["compile_s"]) in seen


def test_compile_without_trace_is_its_own_event(jt):
    @jax.jit
    def place(x):
        return x + 1

    x = jnp.ones(3)
    place(x)
    place(jax.device_put(x, jax.devices()[0]))  # committed: compiles again, no trace
    df = jt.log(internal=False)
    assert df["kind"].tolist() == ["trace", "compile"]
    assert df["cause"].tolist() == ["first", "sharding"]
    assert df["compile_s"].notna().all()


def test_threads_trace_concurrently(jt):
    @jax.jit
    def work(x):
        return x * 2

    barrier = threading.Barrier(4)

    def run(n):
        barrier.wait()
        for k in range(1, 6):
            work(jnp.ones(n * 10 + k))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    df = jt.log(internal=False)
    df = df[df["function"].str.endswith("work")]
    assert len(df) == 20 and df["kind"].eq("trace").all()
    assert sorted(df["trace_number"].tolist()) == list(range(1, 21))
    assert df["compile_s"].notna().all()  # every compile attributed to its own thread's trace


def test_cache_hit_runs_no_package_python(jt):
    @jax.jit
    def hot(x, y):
        return x * y

    @eqx.filter_jit
    def hot_eqx(model, x):
        return model["w"] * x

    x, m = jnp.ones(3), {"w": jnp.ones(3)}
    hot(x, x).block_until_ready()
    hot_eqx(m, x).block_until_ready()
    frames = package_frames_on_cache_hits(lambda: (hot(x, x), hot_eqx(m, x)))
    assert frames == []
    assert len(jt.log(internal=False)) == 2  # the two first traces, nothing more


def test_failing_trace_propagates_unchanged(jt):
    @jax.jit
    def bad(x):
        raise ValueError("boom in user code")

    with pytest.raises(ValueError, match="boom in user code") as info:
        bad(1.0)
    import traceback

    shown = "".join(traceback.format_tb(info.value.__traceback__))
    assert (
        "test_probe.py" in shown and package_frames(shown) == []
    )  # our frames are hidden like JAX's own
    assert "boom in user code" in str(info.value)
