"""Causes and hints on real JAX / Equinox / Optax programs users write."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from _support import rows
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell


def test_trace_context_change(jt):
    @jax.jit
    def mm(a):
        return a @ a

    a = jnp.ones((2, 2))
    mm(a)
    with jax.default_matmul_precision("highest"):
        mm(a)
    (event,) = [e for e in jt.log(internal=False).itertuples() if e.trace_number == 2]
    assert event.cause == "context"
    if _jax_names_trace_context():
        assert "matmul_precision" in event.explanation and "matmul_precision" in event.after
    else:  # JAX < 0.10.2 gives the entries of its trace context no names
        assert "context[" in event.explanation


def _jax_names_trace_context() -> bool:
    from jax._src import config

    try:
        return bool(config.trace_context_names())
    except Exception:
        return False


def test_numpy_float64_array_is_a_dtype_change_with_x64(jt):
    @jax.jit
    def f(x):
        return x + 1

    with jax.enable_x64(True):
        f(np.ones(3, np.float32))
        f(np.ones(3))  # NumPy's default float64
    got = rows(jt, "test_numpy_float64_array_is_a_dtype_change_with_x64.<locals>.f")
    assert got[-1][1:] == ("dtype", "x", "f32[3]", "f64[3]")
    assert "float32 and float64" in jt.log(internal=False)["hint"].iloc[-1]


def test_python_scalar_then_array_is_weak_type(jt):
    @jax.jit
    def scale(x, s):
        return x * s

    x = jnp.ones(3)
    scale(x, 2.0)
    scale(x, jnp.float32(2.0))
    got = rows(jt, "test_python_scalar_then_array_is_weak_type.<locals>.scale")
    assert got[-1][1:] == ("weak_type", "s", "f32[] (weak)", "f32[]")
    assert "Python scalar" in jt.log(internal=False)["hint"].iloc[-1]


def test_partial_recreated_each_call(jt):
    @functools.partial(jax.jit, static_argnums=0)
    def apply(fn, x):
        return fn(x)

    def act(x, k):
        return x * k

    for _ in range(2):
        apply(functools.partial(act, k=2), jnp.ones(2))
    got = rows(jt, "test_partial_recreated_each_call.<locals>.apply")
    assert got[-1][1:3] == ("static", "fn")
    assert "functools.partial" in jt.log(internal=False)["hint"].iloc[-1]


class Trainer(eqx.Module):
    w: jax.Array
    optim: optax.GradientTransformation

    def __init__(self):
        self.w = jnp.ones(2)
        self.optim = optax.adam(1e-3)  # a new optax transform on every construction


def test_optax_transform_in_module_field_recreated(jt):
    @eqx.filter_jit
    def step(trainer, x):
        return trainer.w * x

    step(Trainer(), jnp.ones(2))
    step(Trainer(), jnp.ones(2))
    got = rows(jt, "test_optax_transform_in_module_field_recreated.<locals>.step")
    cause, leaf = got[-1][1:3]
    assert cause == "static" and leaf.startswith("trainer.optim")
    assert "optax" in jt.log(internal=False)["hint"].iloc[-1]


def test_cell_rerun_is_new_function_and_says_so():
    import jaxtrace_nb

    jaxtrace_nb.reset()
    shell = InteractiveShell.instance()
    old = shell.display_pub
    shell.display_pub = CapturingDisplayPublisher()
    try:
        shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
        cell = (
            "import jax, jax.numpy as jnp\n@jax.jit\ndef loss(x):\n"
            "    return (x ** 2).sum()\nloss(jnp.ones(3))\n"
        )
        shell.run_cell(cell, store_history=True)
        shell.run_cell(cell, store_history=True)  # the user re-runs the cell
        df = jaxtrace_nb.log(internal=False)
    finally:
        shell.run_cell("%unload_ext jaxtrace_nb")
        shell.display_pub = old
        jaxtrace_nb.reset()
    assert df["cause"].tolist() == ["first", "new_function"]
    assert "its cell was run again" in df["explanation"].iloc[1]
    assert df["cell"].iloc[1] == df["cell"].iloc[0] + 1
