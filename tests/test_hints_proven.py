"""Every hint that tells the user what to change is proven on a real program.

A hint with ``instruction=True`` in ``jaxtrace_nb._diagnosis._hints.HINTS`` is a promise. For each
one this file holds a proof, a small program showing the hint's cause, run twice:

* as written: the event after the function's first trace (a retrace, or a compile without a
  new trace for a placement) has that cause and gives that hint (its id is in ``hint_ids``);
* with the hint's fix applied as its text says: the function traces once and compiles no more,
  and its outputs are the same values as the program's as written, for the same inputs.

The unrolled-loop hint is given on a function's first trace: its fix leaves the output the same
with far fewer equations and no such hint. A persistent compilation cache hint (``cache.*``) is
proven on a pair of processes sharing one cache (``programs/cache_pair.py``): as written, the
second one misses with that hint; with the fix (the same setting in both runs), it hits, with the
same outputs. The registry tests keep ``PROOFS`` and the
instructions in step: a new instruction without a proof fails here.

Each jitted function is named ``step`` and built inside its proof, so no JAX cache is shared
with another test.
"""

import dataclasses
import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable

import equinox as eqx
import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
    from flax import nnx

from _support import describe, step_rows

from jaxtrace_nb._diagnosis._hints import HINTS

PROOFS: dict[str, Callable] = {}


def _proves(hint_id: str):
    def register(proof):
        PROOFS[hint_id] = proof
        return proof

    return register


# ------------------------------------------------------------------ helpers
def _shows(jt, hint_id: str, cause: str, run: Callable):
    """Run the program as written: the event after `step`'s first trace has `cause` and gives
    `hint_id` (for cause ``first``, the first trace itself). Returns (outputs, that event)."""
    with jt.watch() as watch:
        outputs = run()
    rows = step_rows(watch)
    at = 0 if cause == "first" else 1
    assert len(rows) > at, f"{hint_id}: `step` has no event to hint at: {describe(rows)}"
    event = rows.iloc[at]
    hint_ids = (event["hint_ids"] or "").split(",")
    assert (event["cause"], hint_id in hint_ids) == (cause, True), (
        f"{hint_id}: expected cause {cause!r} with hint {hint_id!r}, got: "
        f"{describe(rows.iloc[at : at + 1])}"
    )
    return outputs, event


def _once(jt, run: Callable):
    """Run the fixed program: `step` traces once and compiles nothing more. Returns (outputs, its
    trace)."""
    with jt.watch() as watch:
        outputs = run()
    rows = step_rows(watch)
    assert rows["kind"].tolist() == ["trace"], f"the fixed program still retraces: {describe(rows)}"
    return outputs, rows.iloc[0]


def _values(tree) -> list[np.ndarray]:
    return [
        np.asarray(
            jax.random.key_data(leaf) if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key) else leaf
        )
        for leaf in jax.tree.leaves(tree)
    ]


def _assert_same(original, fixed) -> None:
    a, b = _values(original), _values(fixed)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def _set(variable, value) -> None:
    """Give an NNX Variable a new value (``set_value`` from Flax 0.12.1; ``.value =`` in 0.12.0)."""
    setter = getattr(variable, "set_value", None)
    if setter is not None:
        setter(value)
    else:
        variable.value = value


def _version(module) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", module.__version__)[:3])


X = jnp.array([1.0, -2.0, 3.0], jnp.float32)


# -------------------------------------------------------------- dtypes, weak types
@_proves("weak_type.argument")
def _weak_type_argument(jt):
    def program(lrs):
        @jax.jit
        def step(x, lr):
            return x - lr * x

        return [step(X, lr) for lr in lrs]

    original, _ = _shows(
        jt,
        "weak_type.argument",
        "weak_type",
        lambda: program([0.5, jnp.asarray(0.25, jnp.float32)]),
    )
    fixed, _ = _once(
        jt, lambda: program([jnp.asarray(0.5, jnp.float32), jnp.asarray(0.25, jnp.float32)])
    )
    _assert_same(original, fixed)


@_proves("weak_type.inner")
def _weak_type_inner(jt):
    def program(first_lr):
        @jax.jit
        def step(state, x):
            return state["w"] - state["lr"] * x

        state = {"w": jnp.ones(3), "lr": first_lr}
        out = [step(state, X)]
        state["lr"] = jnp.asarray(0.25, jnp.float32)
        out.append(step(state, X))
        return out

    original, _ = _shows(jt, "weak_type.inner", "weak_type", lambda: program(0.5))
    fixed, _ = _once(jt, lambda: program(jnp.asarray(0.5, jnp.float32)))
    _assert_same(original, fixed)


@_proves("dtype.optax")
def _dtype_optax(jt):
    optim = optax.sgd(0.5, momentum=0.5)
    params = {"w": jnp.ones(3)}
    restored = {"w": jnp.ones(3, jnp.bfloat16)}  # a half-precision copy, e.g. from a checkpoint

    def program(init_params_of_restart):
        @jax.jit
        def step(params, opt_state, x):
            grads = jax.grad(lambda p: jnp.sum(p["w"] * x))(params)
            updates, opt_state = optim.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        p, out = params, []
        for init_params in (params, init_params_of_restart):  # the optimizer restarted once
            opt_state = optim.init(init_params)
            for _ in range(2):
                p, opt_state = step(p, opt_state, jnp.full(3, 0.5))
                out.append(p)
        return out

    original, _ = _shows(jt, "dtype.optax", "dtype", lambda: program(restored))
    fixed, _ = _once(jt, lambda: program(params))
    _assert_same(original, fixed)


@_proves("dtype.x64")
def _dtype_x64(jt):
    data = np.array([1.0, 2.5, -4.0])  # NumPy's default float64

    def program(inputs):
        @jax.jit
        def step(x):
            return x * 2 + 1

        with jax.enable_x64(True):
            return [step(x) for x in inputs]

    original, _ = _shows(
        jt, "dtype.x64", "dtype", lambda: program([data, jnp.ones(3, jnp.float32)])
    )
    fixed, _ = _once(
        jt, lambda: program([jnp.asarray(data, jnp.float32), jnp.ones(3, jnp.float32)])
    )
    _assert_same(original, fixed)


@_proves("dtype.cast")
def _dtype_cast(jt):
    def program(inputs):
        @jax.jit
        def step(x):
            return x * 2 + 1

        return [step(x) for x in inputs]

    original, _ = _shows(
        jt, "dtype.cast", "dtype", lambda: program([jnp.arange(3), jnp.arange(3.0)])
    )
    fixed, _ = _once(
        jt, lambda: program([jnp.asarray(jnp.arange(3), jnp.float32), jnp.arange(3.0)])
    )
    _assert_same(original, fixed)


@_proves("dtype.key")
def _dtype_key(jt):
    def program(keys):
        @jax.jit
        def step(key):
            return jax.random.normal(key, (3,))

        return [step(key) for key in keys]

    original, _ = _shows(
        jt, "dtype.key", "dtype", lambda: program([jax.random.PRNGKey(0), jax.random.key(1)])
    )
    fixed, _ = _once(jt, lambda: program([jax.random.key(0), jax.random.key(1)]))
    _assert_same(original, fixed)


# ------------------------------------------------------------------------ shapes
@_proves("shape")
def _shape(jt):
    data = np.arange(30, dtype=np.float32).reshape(10, 3) / 7
    batch = 4
    batches = [data[i : i + batch] for i in range(0, len(data), batch)]  # the last one has 2 rows

    def program(inputs):
        @jax.jit
        def step(x):
            return jnp.sin(x).sum(axis=1)

        return [step(x) for x in inputs]

    def padded():
        full = [np.pad(b, ((0, batch - len(b)), (0, 0))) for b in batches]
        return [out[: len(b)] for out, b in zip(program(full), batches)]

    original, _ = _shows(jt, "shape", "shape", lambda: program(batches))
    fixed, _ = _once(jt, padded)
    _assert_same(original, fixed)


# -------------------------------------------------------------- function objects
@_proves("new_function")
def _new_function(jt):
    def original():
        out = []
        for x in (X, 2 * X):

            def step(x):
                return jnp.tanh(x) * 3

            out.append(jax.jit(step)(x))
        return out

    def fixed():
        @jax.jit
        def step(x):
            return jnp.tanh(x) * 3

        return [step(x) for x in (X, 2 * X)]

    original_out, _ = _shows(jt, "new_function", "new_function", original)
    fixed_out, _ = _once(jt, fixed)
    _assert_same(original_out, fixed_out)


def _apply_static(functions):
    """`step(fn, x)` with `fn` static, once per function in `functions`."""

    def step(fn, x):
        return fn(x)

    jitted = jax.jit(step, static_argnums=0)
    return [jitted(fn, X) for fn in functions]


@_proves("identity.lambda")
def _identity_lambda(jt):
    def original():
        return _apply_static([lambda x: x * 2 + 1 for _ in range(2)])

    def fixed():
        affine = lambda x: x * 2 + 1  # noqa: E731 - the lambda itself is what the hint is about
        return _apply_static([affine for _ in range(2)])

    original_out, _ = _shows(jt, "identity.lambda", "static", original)
    fixed_out, _ = _once(jt, fixed)
    _assert_same(original_out, fixed_out)


@_proves("identity.partial")
def _identity_partial(jt):
    def scale(x, s):
        return x * s

    original_out, _ = _shows(
        jt,
        "identity.partial",
        "static",
        lambda: _apply_static([functools.partial(scale, s=2.0) for _ in range(2)]),
    )
    once = functools.partial(scale, s=2.0)
    fixed_out, _ = _once(jt, lambda: _apply_static([once for _ in range(2)]))
    _assert_same(original_out, fixed_out)


def _activation(x):
    return jnp.maximum(x, 0.0)


_JITTED_ACTIVATION = jax.jit(_activation)  # created once, at module level


@_proves("identity.jit")
def _identity_jit(jt):
    class Model(eqx.Module):
        w: jax.Array
        act: Callable

        def __init__(self, w, act=None):
            self.w = w
            self.act = jax.jit(_activation) if act is None else act

    def program(make_model):
        @eqx.filter_jit
        def step(model, x):
            return model.act(model.w * x)

        return [step(make_model(jnp.full(3, float(seed + 1))), X) for seed in range(2)]

    original, _ = _shows(jt, "identity.jit", "static", lambda: program(Model))
    fixed, _ = _once(jt, lambda: program(lambda w: Model(w, _JITTED_ACTIVATION)))
    _assert_same(original, fixed)


@_proves("identity.optax")
def _identity_optax(jt):
    params = {"w": jnp.ones(3)}

    def program(optimizer_of_epoch):
        @eqx.filter_jit
        def step(params, optim, opt_state, x):
            grads = jax.grad(lambda p: jnp.sum(p["w"] * x))(params)
            updates, opt_state = optim.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        p, out = params, []
        for epoch in range(2):
            optim = optimizer_of_epoch(epoch)
            p, _ = step(p, optim, optim.init(p), X)
            out.append(p)
        return out

    original, _ = _shows(
        jt, "identity.optax", "static", lambda: program(lambda epoch: optax.sgd(0.5))
    )
    optim = optax.sgd(0.5)
    fixed, _ = _once(jt, lambda: program(lambda epoch: optim))
    _assert_same(original, fixed)


@_proves("identity.same_name")
def _identity_same_name(jt):
    def make_activation():
        def soft_sign(x):
            return x / (1 + jnp.abs(x))

        return soft_sign

    original_out, _ = _shows(
        jt,
        "identity.same_name",
        "static",
        lambda: _apply_static([make_activation() for _ in range(2)]),
    )
    activation = make_activation()
    fixed_out, _ = _once(jt, lambda: _apply_static([activation for _ in range(2)]))
    _assert_same(original_out, fixed_out)


@_proves("identity.instance")
def _identity_instance(jt):
    class Config:
        def __init__(self, scale):
            self.scale = scale

    def program(configs):
        def step(config, x):
            return x * config.scale

        jitted = jax.jit(step, static_argnums=0)
        return [jitted(config, X) for config in configs]

    original, _ = _shows(
        jt, "identity.instance", "static", lambda: program([Config(2.0), Config(2.0)])
    )
    config = Config(2.0)
    fixed, _ = _once(jt, lambda: program([config, config]))
    _assert_same(original, fixed)


# ------------------------------------------------------------------ static values
@_proves("static.filter_jit_number")
def _static_filter_jit_number(jt):
    def program(lrs):
        @eqx.filter_jit
        def step(x, lr):
            return x - lr * x

        return [step(X, lr) for lr in lrs]

    original, _ = _shows(jt, "static.filter_jit_number", "static", lambda: program([0.5, 0.25]))
    fixed, _ = _once(jt, lambda: program([jnp.asarray(0.5), jnp.asarray(0.25)]))
    _assert_same(original, fixed)


@_proves("static.eqx_field")
def _static_eqx_field(jt):
    class Scaled(eqx.Module):
        w: jax.Array
        scale: float = eqx.field(static=True)

    class ScaledArray(eqx.Module):
        w: jax.Array
        scale: jax.Array

    def program(models):
        @eqx.filter_jit
        def step(model, x):
            return model.w * x * model.scale

        return [step(model, X) for model in models]

    original, _ = _shows(
        jt,
        "static.eqx_field",
        "static",
        lambda: program([Scaled(jnp.ones(3), 0.5), Scaled(jnp.ones(3), 0.25)]),
    )
    fixed, _ = _once(
        jt,
        lambda: program(
            [
                ScaledArray(jnp.ones(3), jnp.asarray(0.5)),
                ScaledArray(jnp.ones(3), jnp.asarray(0.25)),
            ]
        ),
    )
    _assert_same(original, fixed)


@_proves("static.dataclass_meta")
def _static_dataclass_meta(jt):
    @functools.partial(jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["scale"])
    @dataclasses.dataclass
    class Scaled:
        w: jax.Array
        scale: float

    @functools.partial(jax.tree_util.register_dataclass, data_fields=["w", "scale"], meta_fields=[])
    @dataclasses.dataclass
    class ScaledArray:
        w: jax.Array
        scale: jax.Array

    def program(models):
        @jax.jit
        def step(model, x):
            return model.w * x * model.scale

        return [step(model, X) for model in models]

    original, _ = _shows(
        jt,
        "static.dataclass_meta",
        "static",
        lambda: program([Scaled(jnp.ones(3), 0.5), Scaled(jnp.ones(3), 0.25)]),
    )
    fixed, _ = _once(
        jt,
        lambda: program(
            [
                ScaledArray(jnp.ones(3), jnp.asarray(0.5)),
                ScaledArray(jnp.ones(3), jnp.asarray(0.25)),
            ]
        ),
    )
    _assert_same(original, fixed)


# ----------------------------------------------------------------------- Flax NNX
class _Linear(nnx.Module):
    def __init__(self, seed: int):
        self.linear = nnx.Linear(2, 3, rngs=nnx.Rngs(seed))

    def __call__(self, x):
        return self.linear(x)


_NNX_X = jnp.array([[1.0, 2.0], [-0.5, 0.25]], jnp.float32)


@_proves("static.nnx_optax")
def _static_nnx_optax(jt):
    """Flax 0.12.0 keeps an optax transformation as a graph node whose functions are statics: the
    same program then gives ``identity.optax`` at ``optimizer.tx.init``, a hint with the same
    fix."""
    expected = "static.nnx_optax" if _version(flax) >= (0, 12, 1) else "identity.optax"

    def make_step():
        @nnx.jit
        def step(model, optimizer, x):
            loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
            optimizer.update(model, grads)
            return loss

        return step

    def original():
        step, model, losses = make_step(), _Linear(0), []
        for _epoch in range(2):
            optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
            losses += [step(model, optimizer, _NNX_X) for _ in range(2)]
        return losses, nnx.state(model, nnx.Param)

    def fixed():
        step, model, losses = make_step(), _Linear(0), []
        optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
        for _epoch in range(2):
            losses += [step(model, optimizer, _NNX_X) for _ in range(2)]
        return losses, nnx.state(model, nnx.Param)

    original_out, _ = _shows(jt, expected, "static", original)
    fixed_out, _ = _once(jt, fixed)
    _assert_same(original_out, fixed_out)


@dataclasses.dataclass(frozen=True)
class _Activation:
    fn: Callable

    def __call__(self, x):
        return self.fn(x)


@_proves("static.nnx_identity")
def _static_nnx_identity(jt):
    class Model(_Linear):
        def __init__(self, seed, activation=None):
            super().__init__(seed)
            self.activation = (
                _Activation(lambda x: jnp.tanh(x)) if activation is None else activation
            )

        def __call__(self, x):
            return self.activation(self.linear(x))

    def program(make_model):
        @nnx.jit
        def step(model, x):
            return model(x)

        return [step(make_model(seed), _NNX_X) for seed in range(2)]

    original, _ = _shows(jt, "static.nnx_identity", "static", lambda: program(Model))
    activation = _Activation(lambda x: jnp.tanh(x))
    fixed, _ = _once(jt, lambda: program(lambda seed: Model(seed, activation)))
    _assert_same(original, fixed)


@_proves("static.nnx_attribute")
def _static_nnx_attribute(jt):
    class Model(_Linear):
        def __init__(self, seed):
            super().__init__(seed)
            self.scale = 0.5

        def __call__(self, x):
            return self.linear(x) * self.scale

    class VariableModel(_Linear):
        def __init__(self, seed):
            super().__init__(seed)
            self.scale = nnx.Variable(jnp.asarray(0.5))

        def __call__(self, x):
            return self.linear(x) * self.scale[...]

    def original():
        @nnx.jit
        def step(model, x):
            return model(x)

        model = Model(0)
        out = [step(model, _NNX_X)]
        model.scale = 0.25
        out.append(step(model, _NNX_X))
        return out

    def fixed():
        @nnx.jit
        def step(model, x):
            return model(x)

        model = VariableModel(0)
        out = [step(model, _NNX_X)]
        _set(model.scale, jnp.asarray(0.25))
        out.append(step(model, _NNX_X))
        return out

    original_out, _ = _shows(jt, "static.nnx_attribute", "static", original)
    fixed_out, _ = _once(jt, fixed)
    _assert_same(original_out, fixed_out)


# ---------------------------------------------------------- a static value or an array
def _filter_jit_scale(scales):
    @eqx.filter_jit
    def step(x, scale):
        return x * scale

    return [step(X, scale) for scale in scales]


@_proves("kind.static_to_array")
def _kind_static_to_array(jt):
    original, _ = _shows(
        jt, "kind.static_to_array", "static", lambda: _filter_jit_scale([2.0, jnp.asarray(3.0)])
    )
    fixed, _ = _once(jt, lambda: _filter_jit_scale([jnp.asarray(2.0), jnp.asarray(3.0)]))
    _assert_same(original, fixed)


@_proves("kind.array_to_static")
def _kind_array_to_static(jt):
    original, _ = _shows(
        jt, "kind.array_to_static", "static", lambda: _filter_jit_scale([jnp.asarray(3.0), 2.0])
    )
    fixed, _ = _once(jt, lambda: _filter_jit_scale([jnp.asarray(3.0), jnp.asarray(2.0)]))
    _assert_same(original, fixed)


# --------------------------------------------------------------------- structures
@_proves("structure.not_passed")
def _structure_not_passed(jt):
    def program(calls):
        @jax.jit
        def step(x, scale=1.0):
            return x * scale

        return [call(step) for call in calls]

    original, _ = _shows(
        jt,
        "structure.not_passed",
        "structure",
        lambda: program([lambda f: f(X), lambda f: f(X, scale=2.0)]),
    )
    fixed, _ = _once(jt, lambda: program([lambda f: f(X, scale=1.0), lambda f: f(X, scale=2.0)]))
    _assert_same(original, fixed)


class _Net(eqx.Module):
    w: jax.Array
    b: jax.Array


@_proves("structure.optax_none")
def _structure_optax_none(jt):
    model = _Net(jnp.ones(2), jnp.ones(2))
    filter_spec = _Net(w=True, b=False)  # train w only: the gradient of b is None
    optim = optax.sgd(0.1, momentum=0.9)

    def program(init_params):
        @eqx.filter_jit
        def step(model, opt_state, x):
            trainable, frozen = eqx.partition(model, filter_spec)

            def loss(t):
                m = eqx.combine(t, frozen)
                return jnp.sum((m.w * x + m.b) ** 2)

            grads = eqx.filter_grad(loss)(trainable)
            updates, opt_state = optim.update(grads, opt_state)
            return eqx.apply_updates(model, updates), opt_state

        m, opt_state, out = model, optim.init(init_params), []
        for _ in range(3):
            m, opt_state = step(m, opt_state, jnp.ones(2))
            out.append(m)
        return out

    original, _ = _shows(
        jt, "structure.optax_none", "structure", lambda: program(eqx.filter(model, eqx.is_array))
    )
    fixed, _ = _once(jt, lambda: program(eqx.filter(model, filter_spec)))
    _assert_same(original, fixed)


@_proves("structure.none")
def _structure_none(jt):
    def program(biases):
        @jax.jit
        def step(x, bias):
            return x if bias is None else x + bias

        return [step(X, bias) for bias in biases]

    bias = jnp.full(3, 0.5, jnp.float32)
    original, _ = _shows(jt, "structure.none", "structure", lambda: program([None, bias]))
    fixed, _ = _once(jt, lambda: program([jnp.zeros(3), bias]))
    _assert_same(original, fixed)


@_proves("structure.container_kind")
def _structure_container_kind(jt):
    def program(inputs):
        @jax.jit
        def step(x):
            return jnp.asarray(x) * 2

        return [step(x) for x in inputs]

    values = [1.0, 2.0, 3.0]
    original, _ = _shows(
        jt, "structure.container_kind", "structure", lambda: program([jnp.asarray(values), values])
    )
    fixed, _ = _once(jt, lambda: program([jnp.asarray(values), jnp.asarray(values)]))
    _assert_same(original, fixed)


@_proves("structure.container_type")
def _structure_container_type(jt):
    loaded = flax.core.freeze({"w": jnp.full(3, 2.0)})  # e.g. a checkpoint of a Linen model

    def program(convert):
        @jax.jit
        def step(params, x):
            return params["w"] * x

        params, out = loaded, []
        for _ in range(2):
            out.append(step(convert(params), X))
            params = {"w": params["w"] + 1}
        return out

    original, _ = _shows(jt, "structure.container_type", "structure", lambda: program(lambda p: p))
    fixed, _ = _once(jt, lambda: program(flax.core.unfreeze))
    _assert_same(original, fixed)


@_proves("structure.call")
def _structure_call(jt):
    def program(calls):
        @jax.jit
        def step(x, y):
            return x * y

        return [call(step) for call in calls]

    original, _ = _shows(
        jt,
        "structure.call",
        "structure",
        lambda: program([lambda f: f(X, X), lambda f: f(X, y=2 * X)]),
    )
    fixed, _ = _once(jt, lambda: program([lambda f: f(X, y=X), lambda f: f(X, y=2 * X)]))
    _assert_same(original, fixed)


# ------------------------------------------------------- placement, context, loops
def _placement_proof(jt, hint_id: str, placement) -> None:
    def program(inputs):
        @jax.jit
        def step(x):
            return x * 2 + 1

        return [step(x) for x in inputs]

    original, _ = _shows(
        jt, hint_id, "sharding", lambda: program([X, jax.device_put(2 * X, placement)])
    )
    fixed, _ = _once(
        jt, lambda: program([jax.device_put(X, placement), jax.device_put(2 * X, placement)])
    )
    _assert_same(original, fixed)


@_proves("sharding")
def _sharding(jt):
    """Committed to a device (a compile without a new trace)."""
    _placement_proof(jt, "sharding", jax.devices()[0])


@_proves("sharding.mesh")
def _sharding_mesh(jt):
    """Sharded over a mesh (a new trace): placed on that mesh every call. (Over two devices, with
    another argument on the mesh: `test_hint_preconditions.py`.)"""
    device = jax.devices()[0]
    sharded = jax.sharding.NamedSharding(
        jax.sharding.Mesh(np.array([device]), ("batch",)), jax.sharding.PartitionSpec("batch")
    )
    _placement_proof(jt, "sharding.mesh", sharded)


def _nnx_placement_proof(jt, hint_id: str, placement, state_placement) -> None:
    """An `nnx.jit` writes its outputs back into the module: the input placed alone leaves the
    module's Variables placed after the call, and the next call compiles again; placed with the
    module's state before the first call, it does not."""

    def program(inputs, place_module: bool):
        model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
        if place_module:
            nnx.update(model, jax.device_put(nnx.state(model), state_placement))

        @nnx.jit
        def step(model, x):
            return model(x)

        return [step(model, x) for x in inputs]

    x = X.reshape(1, 3)
    original, _ = _shows(
        jt, hint_id, "sharding", lambda: program([x, jax.device_put(2 * x, placement)], False)
    )
    fixed, _ = _once(
        jt,
        lambda: program([jax.device_put(x, placement), jax.device_put(2 * x, placement)], True),
    )
    _assert_same(original, fixed)
    if hint_id == "sharding.nnx":  # its other way: commit nothing
        fixed, _ = _once(jt, lambda: program([x, 2 * x], False))
        _assert_same(original, fixed)


@_proves("sharding.nnx")
def _sharding_nnx(jt):
    device = jax.devices()[0]
    _nnx_placement_proof(jt, "sharding.nnx", device, device)


@_proves("sharding.mesh_nnx")
def _sharding_mesh_nnx(jt):
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("batch",))
    _nnx_placement_proof(
        jt,
        "sharding.mesh_nnx",
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch")),
        jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()),
    )


@_proves("context")
def _context(jt):
    a = jnp.arange(4.0).reshape(2, 2) / 3

    def program():
        @jax.jit
        def step(x, y):
            return x @ y

        return step

    def original():
        step = program()
        out = [step(a, a)]
        with jax.default_matmul_precision("highest"):
            out.append(step(a, a))
        return out

    def fixed():
        step = program()
        with jax.default_matmul_precision("highest"):
            return [step(a, a), step(a, a)]

    original_out, _ = _shows(jt, "context", "context", original)
    fixed_out, _ = _once(jt, fixed)
    _assert_same(original_out, fixed_out)


@_proves("unrolled_loop")
def _unrolled_loop(jt):
    def body(i, x):
        return (x * 3 + i) % 1000

    def original():
        @jax.jit
        def step(x):
            for i in range(50):
                x = body(i, x)
            return x

        return step(jnp.arange(4))

    def fixed():
        @jax.jit
        def step(x):
            return jax.lax.fori_loop(0, 50, body, x)

        return step(jnp.arange(4))

    original_out, unrolled = _shows(jt, "unrolled_loop", "first", original)
    fixed_out, rolled = _once(jt, fixed)
    assert "unrolled_loop" not in (rolled["hint_ids"] or "").split(",")
    assert rolled["eqns"] * 10 <= unrolled["eqns"], (rolled["eqns"], unrolled["eqns"])
    _assert_same(original_out, fixed_out)


# ------------------------------------------------------ the persistent compilation cache
def _cache_pair(first: dict, second: dict) -> dict:
    """Two processes of `programs/cache_pair.py` sharing a new cache, the first with the environment
    `first`, the second with `second`: what the second said of its compile of ``step``, and its
    loss."""
    programs = pathlib.Path(__file__).parent / "programs"
    with tempfile.TemporaryDirectory() as tmp:
        out = None
        for run, extra in (("a", first), ("b", second)):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("PAIR_", "XLA_FLAGS"))}
            env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(programs.parent.parent), **extra)
            done = subprocess.run(
                [
                    sys.executable,
                    str(programs / "cache_pair.py"),
                    os.path.join(tmp, "cache"),
                    os.path.join(tmp, run),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["faults"] == {}
        (step,) = out["step"]
        return {**step, "loss": out["loss"]}


def _cache_proof(hint_id: str, before: dict, after: dict) -> None:
    """As written (`before` in the first run, `after` in the second) the second misses with
    `hint_id`; fixed (`after` in both, as the hint says), it hits, with the same loss."""
    written = _cache_pair(before, after)
    assert hint_id in (written["hint_ids"] or "").split(","), written
    fixed = _cache_pair(after, after)
    assert (fixed["cache"], fixed["hint_ids"]) == ("hit", None), fixed
    assert fixed["loss"] == written["loss"]


@_proves("cache.xla_flags")
def _cache_xla_flags(jt):
    _cache_proof("cache.xla_flags", {}, {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"})


@_proves("cache.devices")
def _cache_devices(jt):
    _cache_proof("cache.devices", {}, {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})


@_proves("cache.options")
def _cache_options(jt):
    _cache_proof("cache.options", {}, {"PAIR_PRECISION": "highest"})


@_proves("cache.compiler_options")
def _cache_compiler_options(jt):
    _cache_proof(
        "cache.compiler_options", {}, {"PAIR_OPTIONS": '{"xla_cpu_enable_fast_math": true}'}
    )


# ------------------------------------------------------------------------- tests
def test_every_instruction_has_a_proof():
    assert set(PROOFS) == {h.id for h in HINTS.values() if h.instruction}


def test_no_proof_for_a_hint_that_gives_no_instruction():
    explanations = {h.id for h in HINTS.values() if not h.instruction}
    assert explanations and not explanations & set(PROOFS)


@pytest.mark.parametrize("hint_id", sorted(PROOFS))
def test_instruction_stops_the_retrace(jt, hint_id):
    PROOFS[hint_id](jt)
    assert jt.faults() == {}
