"""Where a re-created jitted function comes from (`created_at`): the line assigning the variable
that held the new function object when it was called.

Python keeps no record of where an object was made; what it keeps is which variable holds the
object, and where the code assigns that variable. jaxtrace_nb reads exactly that (without
wrapping `jax.jit`), names every assigning line when there are several, and reads only the
variables it can read without keeping anything alive: a module's (a script, a notebook cell)
and, from Python 3.13, a function's (before, a running function's ``f_locals`` is a snapshot the
frame keeps, holding its values alive).
"""

import gc
import runpy
import sys
import warnings
import weakref

import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._core._format import short_path
from jaxtrace_nb._views._report import Report
from jaxtrace_nb._views._text import render_text

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
    from flax import nnx  # noqa: F401  (imported here, once: the script below imports it again)

SCRIPT = """
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from flax import nnx


def scale(a, x):
    return x * a


def run(f, x):
    return f(x)  # inside a helper


for n in range(3):
    f = jax.jit(functools.partial(scale, float(n)))  # created
    f(jnp.ones(2))  # called
for n in range(2):
    jax.jit(functools.partial(scale, 5.0))(jnp.ones(4))  # inline
for n in range(2):
    g = jax.jit(functools.partial(scale, 2.0))  # assigned here
    run(g, jnp.ones(3))
for n in range(2):
    if n:
        h = jax.jit(functools.partial(scale, 3.0))  # or here
    else:
        h = jax.jit(functools.partial(scale, 4.0))  # or there
    h(jnp.ones(5))
for n in range(2):
    e = eqx.filter_jit(functools.partial(scale, 6.0))  # equinox
    e(jnp.ones(6))
for n in range(2):
    m = nnx.jit(functools.partial(scale, 7.0))  # nnx
    m(jnp.ones(7))
"""


def _at(path, marker: str) -> str:
    line = next(i for i, text in enumerate(SCRIPT.splitlines(), 1) if text.endswith(f"# {marker}"))
    return f"{path}:{line}"


@pytest.fixture
def script(jt, tmp_path):
    path = tmp_path / "bug.py"
    path.write_text(SCRIPT)
    with jt.watch() as w:
        runpy.run_path(str(path), run_name="__main__")
    df = w.events
    return str(path), w, df[(df["kind"] == "trace") & ~df["internal"]].reset_index(drop=True)


def test_a_jit_re_created_in_a_loop_names_the_line_that_creates_it(script):
    path, w, rows = script
    f = rows.iloc[:3]
    assert f["cause"].tolist() == ["first", "new_function", "new_function"]
    assert f["created_at"].tolist() == [None, _at(path, "created"), _at(path, "created")]
    assert f["call_site"].tolist() == [_at(path, "called")] * 3
    assert (
        f"A new function object (re-created at {_at(path, 'created')}, where `f` is assigned): JAX "
        "caches traces per object" in f["explanation"].iloc[1]
    )
    short = short_path(path)
    text = render_text(Report([e for e in w.records if e.call_site == _at(path, "called")], "t"))
    assert (
        f"· first called at {short}:{_at(path, 'called').rsplit(':')[1]} · created at {short}:"
        f"{_at(path, 'created').rsplit(':')[1]}" in text
    ), text


def test_made_where_it_is_called_names_no_other_line(script):
    path, _, rows = script
    inline = rows[rows["call_site"] == _at(path, "inline")]
    assert inline["cause"].tolist() == ["new_function"] * 2 and inline["created_at"].isna().all()
    assert "(created again at the same place)" in inline["explanation"].iloc[0]


def test_passed_to_a_function_and_assigned_on_two_lines(script):
    path, w, rows = script
    helper = rows[rows["call_site"] == _at(path, "inside a helper")]
    assert (
        helper["created_at"].tolist() == [_at(path, "assigned here")] * 2
    )  # (the module's variable `g`)
    both = f"{_at(path, 'or here')}, {_at(path, 'or there')}"
    h = rows[rows["created_at"] == both]
    assert len(h) == 2 and "re-created where `h` is assigned: " in h["explanation"].iloc[0]
    last = [e for e in w.records if e.created_at == both][-1:]
    short = short_path(path)
    assert (
        f"created at {short}:{_at(path, 'or here').rsplit(':')[1]} or "
        f"{short}:{_at(path, 'or there').rsplit(':')[1]}"
    ) in render_text(Report(last, "t"))


def test_equinox_and_nnx_wrappers(script):
    path, _, rows = script
    for marker in ("equinox", "nnx"):
        assert (rows["created_at"] == _at(path, marker)).sum() == 1, (
            marker
        )  # the re-created one; the first: none


def scale(a, x):
    return x * a


@pytest.mark.skipif(
    sys.version_info >= (3, 13), reason="from 3.13 a function's variables are read (PEP 667)"
)
def test_a_functions_variables_are_not_read_before_python_3_13(jt):
    """Reading a running function's `f_locals` before 3.13 would keep its values alive: not done,
    and the row says no more than JAX's terms allow."""
    import functools

    big = jnp.ones(100_000)
    gone = weakref.ref(big)
    with jt.watch() as w:
        for n in range(2):
            k = jax.jit(functools.partial(scale, 8.0))
            k(big)
            del big
            gc.collect()
            assert gone() is None  # nothing kept it alive
            big = jnp.ones(100_000)
            gone = weakref.ref(big)
    rows = w.events[w.events["function"] == "scale"]
    assert rows["cause"].tolist() == ["first", "new_function"] and rows["created_at"].isna().all()
    assert "(created again at the same place)" in rows["explanation"].iloc[1]


class _Touchy:
    """An object whose attributes must not be read: finding the variable runs none of its code."""

    touched = 0

    def __call__(self, *args):
        return None

    def __getattribute__(self, name):
        if name not in ("__class__", "__call__"):
            _Touchy.touched += 1
        return object.__getattribute__(self, name)


def test_no_code_of_the_users_objects_runs(jt, tmp_path):
    path = tmp_path / "touchy.py"
    path.write_text(
        f"import functools, jax, jax.numpy as jnp\nfrom {__name__} import _Touchy, scale\n"
        "touchy = _Touchy()\nfor n in range(2):\n    k = "
        "jax.jit(functools.partial(scale, 9.0))\n"
        "    k(jnp.ones(8))\n"
    )
    with jt.watch() as w:
        runpy.run_path(str(path))
    assert _Touchy.touched == 0
    assert w.events[w.events["function"] == "scale"]["created_at"].tolist() == [None, f"{path}:5"]
