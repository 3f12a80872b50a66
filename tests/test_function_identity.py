"""Which function objects JAX's cache takes for one (issue 54, item 2).

JAX keys its tracing cache on a weak reference to the function, and two weak references compare as
their objects (``==``) while both live: ``jax.jit(obj.step)`` made twice is one function to JAX.
``nnx.jit`` hands JAX a wrapper of its own per call: two functions, whatever they wrap.
The oracle is JAX's own verdict, a counter in the traced function: whether the second wrapper's
call with the first one's shape traced again. (JAX's explainer, `jax_explain_cache_misses`, says
"never seen function" at the second wrapper's new shape on JAX 0.10.2: it compares ids; the cache
compares objects.)
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
    from flax import nnx

JITS = {"jit": jax.jit, "filter_jit": eqx.filter_jit, "nnx.jit": nnx.jit}


class Stepper:
    def __init__(self):
        self.traces = 0

    def step(self, x):
        self.traces += 1
        return x * 2


class EqualCallable:
    """Instances all ``==`` (one hash): one function to JAX."""

    def __init__(self, tag):
        self.tag, self.traces = tag, 0

    def __call__(self, x):
        self.traces += 1
        return x + 1

    def __eq__(self, other):
        return isinstance(other, EqualCallable)

    def __hash__(self):
        return 7


class IdentityCallable(EqualCallable):
    """Instances ``==`` only to themselves, with one hash: two functions to JAX."""

    def __eq__(self, other):
        return self is other

    __hash__ = EqualCallable.__hash__


def _pairs():
    m = Stepper()
    yield "bound methods of one object", (m.step, m.step), lambda: m.traces
    a, b = Stepper(), Stepper()
    yield "bound methods of two objects", (a.step, b.step), lambda: a.traces + b.traces
    c, d = EqualCallable(1), EqualCallable(2)
    yield "equal callables", (c, d), lambda: c.traces + d.traces
    e, f = IdentityCallable(1), IdentityCallable(2)
    yield "callables equal only to themselves", (e, f), lambda: e.traces + f.traces


PAIRS = [name for name, _, _ in _pairs()]


def _pair(name):
    return next((funs, traces) for n, funs, traces in _pairs() if n == name)


@pytest.mark.parametrize("kind", list(JITS))
@pytest.mark.parametrize("name", PAIRS)
def test_a_function_is_the_one_jax_takes_it_for(jt, kind, name):
    """The second wrapper's new shape reads as JAX decided: `shape` at `x` where JAX took both
    objects for one function (its same-shape call did not trace), `new_function` where it did."""
    (one, two), traces = _pair(name)
    first, second = JITS[kind](one), JITS[kind](two)
    first(jnp.ones(2))
    second(jnp.ones(2))
    one_function = traces() == 1  # JAX's verdict
    # (nnx.jit hands JAX a wrapper of its own per call, compared by identity: two functions)
    assert one_function == (
        kind != "nnx.jit" and name in ("bound methods of one object", "equal callables")
    )
    second(jnp.ones(3))
    df = jt.log(internal=False)
    rows = df[df["trace_number"] > 1]
    if one_function:
        assert rows[["cause", "leaf", "before", "after"]].values.tolist() == [
            ["shape", "x", "f32[2]", "f32[3]"]
        ], rows["explanation"].tolist()
    else:
        assert rows["cause"].tolist()[0] == "new_function", rows["explanation"].tolist()
    assert jt.faults() == {}
