"""What the probe remembers to keep a retrace cheap gives the answers it would find afresh.

At a trace the probe remembers: the stack from the trace to the user's call (`Decoder.call_site`),
which nested traces are of a library's own helpers (`Probe._is_helper`), where JAX's frame
reporting a trace's end is (`trace_end_locals`); and the session builds a trace's event, with the
function's state, when the log is read rather than at the trace (`Session.on_trace`). Each test
here compares the remembered or deferred answer with the one found without it.
"""

import functools
import random
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtrace_nb import _jax_internals
from jaxtrace_nb._decode import Decoder
from jaxtrace_nb._session import get_session


class _CountingDict(dict):
    """A dict that counts its `get` calls."""

    gets = 0

    def get(self, *args):
        self.gets += 1
        return super().get(*args)


def _via_helper(f, x, depth):
    return f(x) if depth == 0 else _via_helper(f, x, depth - 1)


@pytest.mark.parametrize("seed", range(6))
def test_call_site_from_the_remembered_stack_is_the_one_walked(jt, seed, monkeypatch):
    """Calls from different depths, through user helpers, library frames (`jax.tree.map`) and
    C builtins (`map`), by `f(x)` and `f.trace(x)`: each trace's call site, answered from the
    stack remembered at the trace before, is the one a fresh walk of the frames finds."""
    rng = random.Random(seed)
    decoder = get_session().probe.decoder
    original = Decoder.call_site
    compared, remembered = [], []

    def checked(self, frame=None):
        frame = frame if frame is not None else sys._getframe(1)
        library = self._library_files = _CountingDict(self._library_files)
        got = original(self, frame)
        remembered.append(library.gets == 0)  # answered without asking any frame's file
        self._call_path = None
        compared.append((got, original(self, frame)))
        return got

    monkeypatch.setattr(Decoder, "call_site", checked)

    @jax.jit
    def f(x):
        return x * 2

    ways = [
        lambda x: f(x),
        lambda x: f.trace(x),
        lambda x: _via_helper(f, x, 1),
        lambda x: _via_helper(f, x, 3),
        lambda x: jax.tree.map(lambda a: f(a), [x])[0],
        lambda x: list(map(f, [x]))[0],
        functools.partial(_via_helper, f, depth=2),
    ]
    order = [rng.randrange(len(ways)) for _ in range(12)]
    for n, i in enumerate((i for i in order for _ in range(rng.randint(1, 3))), start=1):  # some ways repeated
        ways[i](jax.ShapeDtypeStruct((n,), jnp.float32) if i == 1 else np.ones(n, np.float32))
    assert decoder is get_session().probe.decoder and len(compared) >= 12
    assert [got for got, _ in compared] == [walked for _, walked in compared]
    assert all(got is not None and got.startswith(__file__) for got, _ in compared)
    assert any(remembered)  # the remembered stack served the traces that came the same way as the one before


def _program(jt):
    """Retraces of several kinds: shapes, a static value, a re-created function, a nested user
    function, a trace that raises, compiles with and without a new trace, a cache clear."""

    @jax.jit
    def inner(x):
        return x + 1

    def make():
        @functools.partial(jax.jit, static_argnums=1)
        def f(x, n):
            return inner(x) * n
        return f

    f = make()
    f(jnp.ones(2), 2)
    f(jnp.ones(3), 2)
    f(jnp.ones(3), 3)
    f.trace(jax.ShapeDtypeStruct((4,), jnp.float32), 3)
    with pytest.raises(ValueError, match="Non-hashable static"):
        f(jnp.ones(5), [1])  # raises before any trace
    f(jnp.ones(2), 2)  # a cache hit
    g = make()
    g(jnp.ones(2), 2)  # a new function object, same code

    @jax.jit
    def broken(x):
        if x.shape[0] > 2:
            raise ValueError("user error")
        return x

    broken(jnp.ones(2))
    with pytest.raises(ValueError):
        broken(jnp.ones(3))
    broken(jnp.ones(4).reshape(2, 2))
    jax.clear_caches()
    g(jnp.ones(2), 2)
    jax.eval_shape(g, jnp.ones(7), 2)


COLUMNS = ["function", "kind", "trace_number", "cause", "leaf", "before", "after", "explanation", "hint",
           "nested", "call_site", "eqns", "eqns_total", "jit"]


@pytest.mark.allows_unknown
def test_events_built_when_read_are_those_built_at_the_trace(jt):
    """The same program gives the same events whether each trace's event (and the function's
    state it reads) is made at the trace, as while a view follows the log, or when the log is read."""
    logs = []
    for followed in (True, False):
        jt.reset()
        unsubscribe = get_session().log.subscribe(lambda event, what: None) if followed else None
        assert get_session().log.followed == followed
        try:
            _program(jt)
        finally:
            if unsubscribe is not None:
                unsubscribe()
        df = jt.log(internal=False)
        logs.append(df[COLUMNS].astype(object).where(df[COLUMNS].notna(), None).values.tolist())
    assert logs[0] == logs[1]
    causes = [row[3] for row in logs[0]]
    assert {"first", "shape", "static"} <= set(causes) and any(row[9] for row in logs[0])  # a nested trace


def test_a_helper_inside_a_trace_is_recognised_from_its_function(jt, monkeypatch):
    """JAX's own jitted helpers traced inside a trace (here `jnp.multiply` for each new shape) are
    told apart once per function: after that the trace's arguments are not read for them. A user's
    function traced inside another is still recorded every time."""
    layout = get_session().probe.internals.layout
    begun = []
    original = type(layout).begin
    monkeypatch.setattr(type(layout), "begin", lambda self, frame: begun.append(1) or original(self, frame))

    @jax.jit
    def nested(x):
        return x - 1

    @jax.jit
    def outer(x):
        return nested(x * 2.0)

    for n in range(1, 9):
        outer.trace(jax.ShapeDtypeStruct((n,), jnp.float32))
    df = jt.log(internal=True)
    assert df.groupby("function")["nested"].agg(["sum", "count"]).to_dict("index") == {
        "test_a_helper_inside_a_trace_is_recognised_from_its_function.<locals>.outer": {"sum": 0, "count": 8},
        "test_a_helper_inside_a_trace_is_recognised_from_its_function.<locals>.nested": {"sum": 8, "count": 8}}
    if type(layout).jitted(layout, sys._getframe()) is None and type(layout).__name__ != "FlatTreeLayout":
        return  # a JAX without `_infer_params` (0.8, 0.9.0): every trace's arguments are read
    assert len(begun) < 8 * 2 + 3  # one per user trace, the helper's only at its first


def test_trace_end_found_when_not_where_it_was(jt, monkeypatch):
    """A trace's end is found from the listener where it was last time; where the stack differs,
    frame by frame: the trace is completed either way, with its seconds."""
    monkeypatch.setattr(_jax_internals, "_TRACE_END_DEPTH", [1])  # a frame that is not JAX's

    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    monkeypatch.setattr(_jax_internals, "_TRACE_END_DEPTH", [_jax_internals._TRACE_END_DEPTH[0] + 1])
    f(jnp.ones(3))
    df = jt.log(internal=False)
    assert df["cause"].tolist() == ["first", "shape"] and df["trace_s"].notna().all()
    assert jt.faults() == {}
