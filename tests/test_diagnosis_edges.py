"""The cases off the beaten path where a diagnosis used to be confidently wrong.

Each test is one case reported by a user: the exact cause, leaf, before → after and the
hint (or its absence) it must show. `unknown` is reserved for a cache key identical to an
earlier one of the same function.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest


def last(jt, function_suffix):
    """The last non-internal event of a function (matched by the end of its qualified name)."""
    df = jt.log(internal=False)
    df = df[df["function"].str.endswith(function_suffix)]
    assert len(df), jt.log(internal=False)[["function", "cause"]]
    return df.iloc[-1]


def test_argument_moved_from_position_to_keyword(jt):
    @jax.jit
    def f(x, y):
        return x + y

    f(1.0, 2.0)
    f(1.0, y=2.0)
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("structure", "y", "by position", "by keyword")
    assert "positional and keyword" in e.explanation and "clear_caches" not in e.explanation
    assert "same way every call" in e.hint


def test_static_argname_by_name_then_by_position(jt):
    @functools.partial(jax.jit, static_argnames="n")
    def f(x, n):
        return x * n

    f(jnp.ones(2), n=2)
    f(jnp.ones(2), 2)
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("structure", "n", "by keyword", "by position")


def test_partial_argument_turned_into_a_keyword(jt):
    def scale(a, x):
        return a * x

    @jax.jit
    def apply(fn, x):
        return fn(x=x)

    apply(jax.tree_util.Partial(scale, 2.0), jnp.ones(2))
    apply(jax.tree_util.Partial(scale, a=2.0), jnp.ones(2))
    e = last(jt, ".apply")
    assert e.cause == "structure"
    assert e.leaf in ("fn.args[0]", "fn.keywords['a']")
    assert "fn.args[0]" in e.explanation + e.leaf and "fn.keywords['a']" in e.explanation + e.leaf


def test_register_dataclass_meta_field(jt):
    @functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["depth"])
    @dataclasses.dataclass
    class Config:
        w: jax.Array
        depth: int

    @jax.jit
    def f(cfg):
        return cfg.w * cfg.depth

    f(Config(jnp.ones(2), 2))
    f(Config(jnp.ones(2), 3))
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("static", "cfg.depth", "2", "3")
    assert "register_dataclass" in e.hint and "static_argnums" not in e.hint


def test_vmap_of_jit_new_batch_size_is_a_compile_with_its_cause(jt):
    @jax.jit
    def f(x):
        return x * 2

    jax.vmap(f)(jnp.ones((4, 3)))
    jax.vmap(f)(jnp.ones((5, 3)))
    df = jt.log(internal=False)
    mine = df[df["function"].str.endswith(".f")]
    assert mine["kind"].tolist() == ["trace", "compile", "compile"]
    first_compile, second = mine.iloc[1], mine.iloc[2]
    assert "traced before recording" not in first_compile.explanation
    assert "ahead-of-time" not in first_compile.explanation
    assert (second.cause, second.leaf, second.before, second.after) == (
        "shape",
        "x",
        "f32[4,3]",
        "f32[5,3]",
    )
    assert "vmap" in second.explanation


def test_committed_array_is_a_compile_with_its_placement(jt):
    @jax.jit
    def f(x):
        return x + 1

    x = jnp.ones(3)
    f(x)
    f(jax.device_put(x, jax.devices()[0]))
    e = last(jt, ".f")
    assert e.kind == "compile"
    assert (e.cause, e.leaf, e.before) == ("sharding", "x", "uncommitted")
    assert e.after.startswith("committed to cpu:0")


def test_optional_argument_of_plain_jit_gets_no_optax_hint(jt):
    @jax.jit
    def f(x, bias=None):
        return x if bias is None else x + bias

    f(jnp.ones(2), jnp.ones(2))
    f(jnp.ones(2), None)
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("structure", "bias", "f32[2]", "None")
    assert (
        "optax" not in e.hint.lower()
        and "equinox" not in e.hint.lower()
        and "optim.init" not in e.hint
    )


def test_equinox_static_field_hint_names_the_field_mechanism(jt):
    class Layer(eqx.Module):
        w: jax.Array
        act: str = eqx.field(static=True)

    @eqx.filter_jit
    def f(layer, x):
        return layer.w * x

    f(Layer(jnp.ones(2), "relu"), 1.0)
    f(Layer(jnp.ones(2), "gelu"), 1.0)
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("static", "layer.act", "'relu'", "'gelu'")
    assert "eqx.field(static=True)" in e.hint and "static_argnums" not in e.hint


def test_bool_that_drives_python_control_flow_is_expected_per_value(jt):
    @eqx.filter_jit
    def f(x, inference):
        return x if inference else x * 2

    f(jnp.ones(2), False)
    f(jnp.ones(2), True)
    e = last(jt, ".f")
    assert (e.cause, e.leaf, e.before, e.after) == ("static", "inference", "False", "True")
    assert (
        "once for each distinct value" in e.hint
        and "expected" in e.hint
        and "jnp.asarray" not in e.hint
    )


def test_dtype_change_deep_in_optimizer_state_points_at_init(jt):
    optim = optax.adam(1e-3)

    @jax.jit
    def step(params, opt_state):
        updates, opt_state = optim.update(params, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = {"w": jnp.ones(2)}
    step(params, optim.init(params))
    state16 = optim.init({"w": jnp.ones(2, jnp.bfloat16)})
    step(params, state16)
    e = last(jt, ".step")
    assert e.cause == "dtype" and e.leaf.startswith("opt_state[0].mu") and e.leaf.endswith("['w']")
    assert (
        "init" in e.hint and "jnp.asarray(opt_state" not in e.hint and "ScaleByAdamState" in e.hint
    )


def test_device_in_trace_context_is_named_like_the_user_knows_it(jt):
    if len(jax.devices()) < 2:
        devices = jax.devices()
    else:
        devices = jax.devices()[:2]

    @jax.jit
    def f(x):
        return x + 1

    with jax.default_device(devices[0]):
        f(np.ones(2, np.float32))
    with jax.default_device(None):
        f(np.ones(2, np.float32))
    e = last(jt, ".f")
    assert e.cause == "context"
    assert "Device" not in (e.before or "") and "cpu:0" in (e.before or "") + (e.after or "")


def test_list_instead_of_array_is_one_change_at_the_argument(jt):
    @jax.jit
    def take(x, indices):
        return jnp.take(x, jnp.asarray(indices))

    take(jnp.arange(4.0), jnp.array([0, 1]))
    take(jnp.arange(4.0), [0, 1])
    e = last(jt, ".take")
    assert (e.cause, e.leaf, e.before, e.after) == (
        "structure",
        "indices",
        "i32[2]",
        "list of 2 Python ints",
    )
    assert "Also changed" not in e.explanation


def test_self_of_a_jitted_method_is_named_as_a_new_instance(jt):
    class Scaler:
        def __init__(self, k):
            self.k = k

        @functools.partial(jax.jit, static_argnums=0)
        def __call__(self, x):
            return x * self.k

    Scaler(2.0)(jnp.ones(2))
    Scaler(2.0)(jnp.ones(2))
    e = last(jt, "Scaler.__call__")
    assert (e.cause, e.leaf) == ("static", "self")
    assert "new `Scaler` object" in e.explanation
    assert "__hash__" in e.hint and "__eq__" in e.hint


def test_also_changed_lists_each_path_once_with_its_own_cause(jt):
    @jax.jit
    def f(a, b, c):
        return a.sum() + b.sum() + c

    f(jnp.ones(2), jnp.ones(2), 1.0)
    f(jnp.ones(3), jnp.ones(2, jnp.int32), jnp.ones(()))
    e = last(jt, ".f")
    assert (e.cause, e.leaf) == ("shape", "a")
    assert "`b` (dtype)" in e.explanation and "`c` (weak_type)" in e.explanation
    assert e.explanation.count("`b`") == 1


@pytest.mark.allows_unknown  # it clears and evicts JAX's caches on purpose
def test_unknown_only_for_an_identical_key_and_says_clear_caches_only_when_called(jt):
    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    jax.clear_caches()
    f(jnp.ones(2))
    e = last(jt, ".f")
    assert e.cause == "unknown"
    from jaxtrace_nb._jax._internals import detect

    if detect().trace_cache_info is not None:  # JAX >= 0.9 counts its tracing-cache misses
        assert "jax.clear_caches()" in e.explanation

    @jax.jit
    def g(x):
        return x * 3

    g(jnp.ones(2))
    g.clear_cache()
    g(jnp.ones(2))
    e = last(jt, ".g")
    assert e.cause == "unknown" and "clear_caches()` was called" not in e.explanation
