"""Every trace JAX makes has its row, whatever jitted the function and wherever its frames are.

An inventory over library entry points the user calls directly (Diffrax's ``diffeqsolve``,
Optimistix's ``root_find`` and ``minimise``, Lineax's ``linear_solve``: each an ``eqx.filter_jit``
function of the library's), Equinox's own transformations under ``eqx.filter_jit``, and
``jax.jit``, ``pjit`` and ``nnx.jit``. Each scenario calls one function with inputs that retrace it
at known calls; three counts must agree: our trace rows of the function, the calls in which a
Python counter inside the traced code moved (the code runs only while JAX traces), and JAX's own
cache-miss log (``jax_explain_cache_misses``). The rows are numbered 1, 2, … and only the first is
``first``; a top-level trace's row has its lowering and compile seconds (no compile row apart). A
library's function the user called is the user's row (``internal`` False); the same function called
by a library inside its own trace is internal.
"""

import logging
import re
import sys
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx

COUNT = [0]  # moved by the code JAX traces


class _Misses(logging.Handler):
    """JAX's own cache-miss log: the traced function's name of each miss."""

    _NAME = re.compile(r"(?:never seen function:\s+|\n  for )(\S+)")

    def __init__(self):
        super().__init__()
        self.names = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("TRACING CACHE MISS"):
            found = self._NAME.search(message)
            self.names.append(found.group(1) if found else "?")


def _inventory(jt, function, calls, jax_name):
    """(our trace rows of `function`, the calls that traced by the Python counter, JAX's misses of
    `jax_name`, its name to JAX)."""
    misses = _Misses()
    # (JAX 0.8 logs its misses from `jax._src.pjit`, later versions from `partial_eval`)
    loggers = [
        logging.getLogger(name) for name in ("jax._src.interpreters.partial_eval", "jax._src.pjit")
    ]
    for logger in loggers:
        logger.addHandler(misses)
    traced = 0
    try:
        with jax.explain_cache_misses(True):
            for call in calls:
                before = COUNT[0]
                jax.block_until_ready(call())
                traced += COUNT[0] > before
    finally:
        for logger in loggers:
            logger.removeHandler(misses)
    df = jt.log()
    named = df[(df["function"] == function) | df["function"].str.endswith(f"<locals>.{function}")]
    return named, traced, misses.names.count(jax_name)


def _check(jt, function, calls, expected, *, nested=False, jax_name=None):
    events, traced, jax_misses = _inventory(jt, function, calls, jax_name or function)
    rows = events[events["kind"] == "trace"]
    assert (len(rows), traced, jax_misses) == (expected, expected, expected), function
    assert rows["trace_number"].tolist() == list(range(1, expected + 1))
    assert rows["cause"].tolist()[0] == "first" and "first" not in rows["cause"].tolist()[1:]
    assert not rows["internal"].any() and rows["nested"].tolist() == [nested] * expected
    if not nested:  # each trace's own lowering and compile, paired with it: no compile row apart
        assert (
            len(events) == expected
            and rows[["trace_s", "lower_s", "compile_s"]].notna().all().all()
        ), function
    return rows


def _vector_field(t, y, args):
    COUNT[0] += 1
    return -y


TERM = diffrax.ODETerm(_vector_field)


def _diffeqsolve(n, max_steps=64):
    return diffrax.diffeqsolve(
        TERM, diffrax.Tsit5(), 0.0, 1.0, 0.1, jnp.ones(n), max_steps=max_steps
    ).ys


def _root(y, a):
    COUNT[0] += 1
    return y**2 - a


def _loss(y, a):
    COUNT[0] += 1
    return jnp.sum((y - a) ** 2)


def _double(v):
    COUNT[0] += 1
    return 2.0 * v


def _operator(n):
    return lx.FunctionLinearOperator(_double, jax.ShapeDtypeStruct((n,), jnp.float32))


def test_diffeqsolve_called_by_the_user(jt):
    """Diffrax traces eagerly inside ``diffeqsolve``'s own trace (a top-level trace pending among
    library frames only): each of its traces still has its row, the retraces numbered on."""
    rows = _check(
        jt,
        "diffeqsolve",
        [
            lambda: _diffeqsolve(11),
            lambda: _diffeqsolve(11),
            lambda: _diffeqsolve(13),
            lambda: _diffeqsolve(13, max_steps=32),
        ],
        3,
    )
    assert rows["cause"].tolist() == ["first", "shape", "static"]
    assert rows["leaf"].tolist()[1:] == ["y0", "max_steps"]


def test_root_find_and_minimise_called_by_the_user(jt):
    newton, bfgs = optx.Newton(1e-5, 1e-5), optx.BFGS(1e-5, 1e-5)
    _check(
        jt,
        "root_find",
        [
            lambda n=n, m=m: (
                optx.root_find(_root, newton, jnp.ones(n), 2.0, max_steps=m, throw=False).value
            )
            for n, m in ((11, 16), (11, 16), (13, 16), (13, 8))
        ],
        3,
    )
    _check(
        jt,
        "minimise",
        [
            lambda n=n, m=m: (
                optx.minimise(_loss, bfgs, jnp.ones(n), 2.0, max_steps=m, throw=False).value
            )
            for n, m in ((11, 16), (11, 16), (13, 16), (13, 8))
        ],
        3,
    )


def test_linear_solve_is_the_users_when_called_and_internal_inside_a_library(jt):
    """``linear_solve`` first traced inside Optimistix's solve (a library's call: internal), then
    called by the user: the user's rows are not internal, whichever came first."""
    optx.root_find(_root, optx.Newton(1e-5, 1e-5), jnp.ones(17), 2.0, throw=False)
    inside = jt.log()
    inside = inside[(inside["function"] == "linear_solve") & (inside["kind"] == "trace")]
    assert len(inside) >= 1 and inside["internal"].all() and inside["nested"].all()
    jt.reset()
    solver = lx.AutoLinearSolver(well_posed=True)
    _check(
        jt,
        "linear_solve",
        [
            lambda n=n: lx.linear_solve(_operator(n), jnp.ones(n), solver).value
            for n in (11, 11, 13)
        ],
        2,
    )


def test_equinox_entry_points(jt):
    @eqx.filter_jit
    def scaled(x, n):
        COUNT[0] += 1
        return x * n

    @eqx.filter_jit
    def mapped(x):
        COUNT[0] += 1
        return eqx.filter_vmap(lambda row: row * 2)(x)

    @eqx.filter_jit
    def gradient(x):
        COUNT[0] += 1
        return eqx.filter_grad(lambda y: jnp.sum(y**2))(x)

    @eqx.filter_jit
    def looped(x):
        COUNT[0] += 1
        return eqx.internal.while_loop(
            lambda c: c[0] < 3,
            lambda c: (c[0] + 1, c[1] * 2),
            (0, x),
            max_steps=8,
            kind="checkpointed",
        )[1]

    model = eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(0))

    class Counted(eqx.Module):
        inner: eqx.nn.Linear

        def __call__(self, x):
            COUNT[0] += 1
            return jax.vmap(self.inner)(x)

    counted = eqx.filter_jit(Counted(model))

    _check(
        jt,
        "scaled",
        [lambda n=n, k=k: scaled(jnp.ones(n), k) for n, k in ((11, 1), (11, 1), (13, 1), (13, 2))],
        3,
    )
    _check(jt, "mapped", [lambda n=n: mapped(jnp.ones((n, 2))) for n in (11, 11, 13)], 2)
    _check(jt, "gradient", [lambda n=n: gradient(jnp.ones(n)) for n in (11, 11, 13)], 2)
    _check(jt, "looped", [lambda n=n: looped(jnp.ones(n)) for n in (11, 11, 13)], 2)
    _check(
        jt,
        "Counted.__call__",
        [lambda n=n: counted(jnp.ones((n, 3))) for n in (11, 11, 13)],
        2,
        jax_name="Counted",
    )


def test_jax_jit_pjit_and_nnx_jit(jt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (pjit: deprecated, still served)
        from jax.experimental.pjit import pjit

    def plain(x):
        COUNT[0] += 1
        return x + 1

    def partitioned(x):
        COUNT[0] += 1
        return x - 1

    jitted, pjitted = jax.jit(plain), pjit(partitioned)
    _check(jt, "plain", [lambda n=n: jitted(jnp.ones(n)) for n in (11, 11, 13, 17)], 3)
    _check(jt, "partitioned", [lambda n=n: pjitted(jnp.ones(n)) for n in (11, 11, 13)], 2)

    from flax import nnx

    @nnx.jit
    def graphed(model, x):
        COUNT[0] += 1
        return model(x)

    linear = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    _check(jt, "graphed", [lambda n=n: graphed(linear, jnp.ones((n, 3))) for n in (11, 11, 13)], 2)


def test_deep_and_nested_calls(jt):
    """``diffeqsolve`` called under 100 of the user's frames, and inside the user's own jit (a
    nested trace of it at each retrace of the outer function)."""

    def deep(depth, n):
        return _diffeqsolve(n) if depth == 0 else deep(depth - 1, n)

    limit = sys.getrecursionlimit()
    _check(jt, "diffeqsolve", [lambda n=n: deep(100, n) for n in (19, 19, 23)], 2)
    assert sys.getrecursionlimit() == limit
    jt.reset()

    @jax.jit
    def outer(y0):
        return diffrax.diffeqsolve(TERM, diffrax.Tsit5(), 0.0, 1.0, 0.1, y0, max_steps=64).ys

    _check(
        jt, "diffeqsolve", [lambda n=n: outer(jnp.ones(n)) for n in (29, 29, 31)], 2, nested=True
    )


def test_a_library_function_the_user_jitted_inside_the_users_jit(jt):
    """``jax.jit(term.vf)`` (Diffrax's method, jitted by the user) called inside the user's own jit:
    a nested trace of a library's function, the user's (not a library's helper, left unrecorded)."""
    term = diffrax.ODETerm(_vector_field)
    vector_field = jax.jit(term.vf)

    @jax.jit
    def outer(y):
        return vector_field(0.0, y, None)

    _check(
        jt,
        "ODETerm.vf",
        [lambda n=n: outer(jnp.ones(n)) for n in (43, 43, 47)],
        2,
        nested=True,
        jax_name="vf",
    )
