"""A hint is given only where the user can act on it (issue 55): each case a user met on a program
of their own, rebuilt from a real Diffrax, Optax, Equinox or Flax NNX program.

Where the code a hint would ask to change is a library's (a loop in Diffrax's solver or Optax's
tree map, an attribute of ``nnx.Dropout``, one of JAX's or Equinox's own jitted helpers), where
following it would not remove the retrace (an argument left to its default, then passed with
another value), or where the trace is part of the caller's first trace, the row explains and
gives no instruction. Where the hint is given, its fix, applied as its text says, stops the
retrace (JAX's own trace count is the oracle). Each test fails when its precondition check in
``_diagnosis/_hints.py`` (or the adapter) is removed.
"""

import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import warnings

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from flax import nnx

from jaxtrace_nb._core._installed import is_installed, is_users_type
from jaxtrace_nb._core._loops import in_loop


def _rows(watch, name: str):
    df = watch.events
    return df[df["function"].str.rsplit(".", n=1).str[-1] == name]


def _ids(row) -> list[str]:
    return [i for i in (row["hint_ids"] or "").split(",") if i]


def _traces(fun) -> int:
    """JAX's own count of the traces cached for `fun` (the oracle)."""
    return fun._cache_size()


# ------------------------------------------------------------------ whose code
def test_installed_files_are_told_from_the_users():
    assert is_installed(optax.__file__) and is_installed(diffrax.__file__)
    assert is_installed(functools.__file__)  # the standard library
    assert not is_installed(__file__)
    assert is_users_type(f"{__name__}._Net") and is_users_type("__main__.Model")
    assert not is_users_type("flax.nnx.nn.stochastic.Dropout")


def test_a_project_in_development_is_the_users_and_a_target_install_is_not(tmp_path, monkeypatch):
    """`pip install -e .` leaves ``<project>.egg-info`` (its SOURCES.txt lists every file) in the
    project's folder, on ``sys.path`` when Python runs from there: its files stay the user's. A
    distribution installed with ``pip install --target DIR`` (a ``.dist-info`` with a RECORD) is
    installed code wherever DIR is."""
    from jaxtrace_nb._core import _installed

    mine, target = tmp_path / "project", tmp_path / "target"
    (mine / "proj.egg-info").mkdir(parents=True)
    (mine / "proj.egg-info" / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: proj\n")
    (mine / "proj.egg-info" / "SOURCES.txt").write_text("proj/__init__.py\ntests/test_a.py\n")
    (target / "lib-1.0.dist-info").mkdir(parents=True)
    (target / "lib-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lib\n")
    (target / "lib-1.0.dist-info" / "RECORD").write_text("lib/__init__.py,,\n")
    monkeypatch.setattr(sys, "path", [str(mine), str(target), *sys.path])
    for cached in (_installed._install_roots, _installed._distribution_roots):
        cached.cache_clear()
        monkeypatch.setattr(_installed, cached.__name__, cached)  # (cleared again after the test)
    try:
        assert not is_installed(str(mine / "proj" / "__init__.py"))
        assert not is_installed(str(mine / "tests" / "test_a.py"))
        assert is_installed(str(target / "lib" / "__init__.py"))
    finally:
        _installed._install_roots.cache_clear()
        _installed._distribution_roots.cache_clear()


def test_a_line_in_a_loop_is_told_from_one_outside():
    code = _Stack.__call__.__code__
    first = code.co_firstlineno
    assert [in_loop(code.co_filename, first + n) for n in range(4)] == [False, True, True, False]


# ------------------------------------------------------------ 1. a library's loop
def _vector_field(t, y, args):
    return -y


def test_diffrax_loop_is_named_not_advised(jt):
    term = diffrax.ODETerm(_vector_field)
    with jt.watch() as watch:
        for t1 in (5.0, 6.0):
            diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, t1, 0.1, jnp.ones(3))
    rows = _rows(watch, "diffeqsolve")
    assert len(rows) == 2
    looped = rows[rows["loop_repeats"].fillna(0) > 0]
    assert len(looped), "Diffrax's step loop was not found: the test shows nothing"
    for _, row in looped.iterrows():
        assert "diffrax" in row["loop_line"]
        assert "unrolled_loop" not in _ids(row) and "scan" not in (row["hint"] or "")


def test_optax_tree_map_is_not_a_loop_to_roll(jt):
    params = {f"w{i}": jnp.ones((3,)) for i in range(40)}
    opt = optax.adamw(1e-3)

    @eqx.filter_jit
    def step(params, state):
        grads = jax.tree.map(jnp.sin, params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    with jt.watch() as watch:
        step(params, opt.init(params))
    (row,) = [r for _, r in _rows(watch, "step").iterrows()]
    assert row["loop_repeats"] and "optax" in row["loop_line"], row["loop_line"]
    assert "unrolled_loop" not in _ids(row)


# ------------------------------------------------------- 2. a library's attribute
class _Net(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 3, rngs=rngs)
        self.drop = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.drop(self.lin(x))


def test_nnx_dropout_rate_is_explained_not_advised(jt):
    model = _Net(nnx.Rngs(0))

    @nnx.jit
    def fwd(model, x):
        return model(x)

    with jt.watch() as watch:
        fwd(model, jnp.ones((2, 3)))
        model.drop.rate = 0.2
        fwd(model, jnp.ones((2, 3)))
    row = _rows(watch, "fwd").iloc[1]
    assert (row["cause"], row["leaf"]) == ("static", "model.drop.rate")
    assert _ids(row) == ["static.nnx_library_attribute"]
    assert "nnx.Variable" not in row["hint"] and "Dropout" in row["hint"]
    # the advice the user met is refused by Flax itself
    with pytest.raises(ValueError):
        model.drop.rate = nnx.Variable(jnp.asarray(0.2))


# ------------------------------------------- 3. presence told where the value changed
def _flagged():
    @functools.partial(jax.jit, static_argnames="training")
    def step(x, training=True):
        return x * 2 if training else x

    return step


def test_value_change_is_not_told_as_presence(jt):
    step, x = _flagged(), jnp.ones(3)
    with jt.watch() as watch:
        step(x)
        step(x, training=False)
    row = _rows(watch, "step").iloc[1]
    assert row["cause"] == "structure"
    assert _ids(row) == ["structure.not_passed_value"]
    assert "Pass it always" not in row["hint"]
    # what the hint would have said does not help: passing it always still traces twice
    fixed = _flagged()
    fixed(x, training=True)
    fixed(x, training=False)
    assert _traces(fixed) == 2


def test_presence_hint_given_where_passing_it_stops_the_retrace(jt):
    step, x = _flagged(), jnp.ones(3)
    with jt.watch() as watch:
        step(x)
        step(x, training=True)
    assert _ids(_rows(watch, "step").iloc[1]) == ["structure.not_passed"]
    fixed = _flagged()
    fixed(x, training=True)
    fixed(x, training=True)
    assert _traces(fixed) == 1


# ------------------------------------------------ 5. a nested trace in a first trace
def test_nested_trace_in_first_trace_is_part_of_it(jt):
    def decay(t, y, args):  # its own: no trace of `diffeqsolve` cached by another test
        return -2.0 * y

    term = diffrax.ODETerm(decay)

    @jax.jit
    def integrate(y0, t1):
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, t1, 0.1, y0).ys

    with jt.watch() as watch:
        diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 5.0, 0.1, jnp.ones(3))
        integrate(jnp.ones(3), 5.0)
    nested = _rows(watch, "diffeqsolve")
    assert nested["nested"].astype(bool).tolist() == [False, True]
    nested = nested[nested["nested"].astype(bool)]
    row = nested.iloc[0]
    assert row["cause"] not in ("first", None)
    assert "integrate`'s first trace" in row["explanation"]
    assert not row["hint"] and not row["hint_ids"]


# ------------------------------------------------------ 8. JAX's and Equinox's helpers
def test_helpers_carry_no_user_hint(jt):
    jax.config.update("jax_enable_x64", True)
    try:
        term = diffrax.ODETerm(_vector_field)
        with jt.watch() as watch:
            diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 5, 0.1, jnp.ones(3))
            diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 6.0, 0.1, jnp.ones(3))
            jnp.asarray(1.0, jnp.float32) + 1
    finally:
        jax.config.update("jax_enable_x64", False)
    df = watch.events
    helpers = df[df["internal"].astype(bool)]
    retraced = helpers[helpers["cause"].fillna("first") != "first"]
    assert len(retraced), "no helper retraced: the test shows nothing"
    assert not retraced["hint"].fillna("").any(), retraced[["function", "hint"]].to_string()
    assert not retraced["hint_ids"].fillna("").any()


# ------------------------------------------------- 6. guard counts say what they count
def test_tracewatch_guard_counts_this_cells_retraces(shell, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\nfor n in range(1, 6):\n    s(jnp.ones(n))\n")
    shell.run_cell("%%tracewatch --max-retraces 1\ns(jnp.ones(6))\ns(jnp.ones(7))\n")
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    message = out.split("RetraceError:", 1)[1]
    # two retraces in the cell (the session's traces #6 and #7), past max_retraces=1
    assert "was retraced 2 times, past max_retraces=1" in message, message
    assert "in this cell, top-level and nested alike" in message
    assert "this is its trace #7 in the session" in message


def test_tracewatch_max_traces_counts_this_cell(shell, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\nfor n in range(1, 6):\n    s(jnp.ones(n))\n")
    shell.run_cell("%%tracewatch --max-traces 1\ns(jnp.ones(6))\ns(jnp.ones(7))\n")
    message = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).split("RetraceError:", 1)[1]
    assert (
        "was traced 2 times, past max_traces=1. The limit counts its traces in this cell" in message
    )
    assert "this is its trace #7 in the session" in message


# ------------------------------------------------------------ 4. a value on a mesh
def test_mesh_value_is_told_to_stay_on_the_mesh():
    """Over two devices (their own process): the hint names the mesh, its fix traces once, and
    the advice it replaces (commit to one device) is one JAX rejects."""
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(root / "tests" / "programs" / "mesh_placement.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["devices"] == 2
    assert found["hints"] == [None, "sharding.mesh"], found
    assert "committed to one device" not in found["hint"]
    assert found["fixed_traces"] == 1
    assert found["one_device"].startswith("rejected")


# ------------------------------------------------- 7. the census beside the hint
def test_census_states_its_budget_and_the_padding_the_hint_means(jt, tmp_path):
    @jax.jit
    def step(x):
        return jnp.tanh(x).sum()

    with jt.watch() as watch:
        for n in (10, 20):  # padding 10 to 20 is 25 % extra elements: past the default budget
            step(jnp.zeros((n,)))
    (row,) = [r for _, r in _rows(watch, "step").iterrows() if r["cause"] == "shape"]
    assert "pad" in row["hint"]
    page = pathlib.Path(jt.report(tmp_path / "report.html")).read_text()
    assert "max_padding=0.15" in page
    assert "no padding within the padding budget max_padding=0.15 (15 % extra)" in page
    assert "the fewest compiles pad past it" in page and "1 compile(s)" in page


def test_census_pick_says_the_budget_it_fits(jt, tmp_path):
    @jax.jit
    def step(x):
        return jnp.tanh(x).sum()

    with jt.watch():
        for n in (30, 31, 32):  # padded to 32: one compile, 3 % extra elements
            step(jnp.zeros((n,)))
    page = pathlib.Path(jt.report(tmp_path / "report.html")).read_text()
    assert "(within the padding budget max_padding=0.15 (15 % extra))" in page


# --------------------------------------- a loop in each library's code, and the user's own
def _eqx_mlp():
    # Equinox's loop over layers; JAX leaves Equinox's frames out of its tracebacks, so the
    # innermost line the equations share is this file's `m(x)`, which is in no loop
    model = eqx.nn.MLP(4, 4, 4, depth=20, key=jax.random.key(0))
    return eqx.filter_jit(lambda m, x: m(x)), (model, jnp.ones(4))


def _linen_sequential():
    from flax import linen

    model = linen.Sequential([linen.Dense(4) for _ in range(20)])  # Flax's loop over layers
    params = model.init(jax.random.key(0), jnp.ones(4))
    return jax.jit(model.apply), (params, jnp.ones(4))


def _nnx_optimizer():
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    model.extra = nnx.Param(jnp.ones((40, 1)))  # (not a loop: many leaves for Optax's map)
    model.extra2 = nnx.Dict({f"w{i}": nnx.Param(jnp.ones(1)) for i in range(40)})
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, opt):
        grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
        opt.update(model, grads)

    return step, (model, opt)


class _Stack(eqx.Module):
    layers: list

    def __call__(self, x):
        for layer in self.layers:  # the user's own loop, over a library's layers
            x = layer(x)
        return x


def _users_loop():
    keys = jax.random.split(jax.random.key(0), 20)
    model = _Stack([eqx.nn.Linear(4, 4, key=k) for k in keys])
    return eqx.filter_jit(lambda m, x: m(x)), (model, jnp.ones(4))


@pytest.mark.parametrize(
    "build, users",
    [(_eqx_mlp, False), (_linen_sequential, False), (_nnx_optimizer, False), (_users_loop, True)],
    ids=["equinox-mlp", "linen-sequential", "nnx-optax", "users-loop"],
)
def test_loop_hint_only_for_the_users_loop(jt, build, users):
    fun, args = build()
    with jt.watch() as watch:
        fun(*args)
    rows = watch.events
    looped = rows[rows["loop_repeats"].fillna(0) > 0]
    looped = looped[~looped["internal"].astype(bool)]
    assert len(looped), "no unrolled loop found: the program shows nothing"
    for _, row in looped.iterrows():
        assert ("unrolled_loop" in _ids(row)) == users, (row["loop_line"], row["hint_ids"])


def test_loop_after_equations_that_repeat_its_tail_is_the_users(jt):
    """A run of repeated primitives can begin before the loop: ``x * s + n`` ends in the multiply
    and add the loop's body ends in. The loop is still named at its body's line, and advised."""

    def body(i, rows):
        return jnp.sin(rows) * 0.9 + 0.01 * i

    @jax.jit
    def step(x, s, n):
        rows = x * s + n
        for i in range(40):
            rows = body(i, rows)
        return rows

    with jt.watch() as watch:
        step(jnp.ones(3), 2.0, 1.0)
    (row,) = watch.events[watch.events["function"].str.endswith("step")].itertuples()
    assert row.loop_line == f"{__file__}:{body.__code__.co_firstlineno + 1}", row.loop_line
    assert "unrolled_loop" in _ids(row._asdict()), row.hint_ids


def test_kind_change_of_a_value_no_array_can_be_is_explained(jt):
    """A static string replaced by an array: `jnp.asarray` of the string is no array JAX
    accepts, so no conversion is told."""

    @eqx.filter_jit
    def step(x, mode):
        return x * 2 if isinstance(mode, str) else x * mode

    with jt.watch() as watch:
        step(jnp.ones(3), "train")
        step(jnp.ones(3), jnp.asarray(1.0))
    row = watch.events[watch.events["function"].str.endswith("step")].iloc[-1]
    assert (row["cause"], row["hint_ids"]) == ("static", None), (row["cause"], row["hint_ids"])


def test_list_of_numbers_is_converted_only_to_the_dtype_x64_gives(jt):
    """Through `eqx.filter_jit` a list of Python floats is static; `jnp.asarray` of it is float64
    under `jax_enable_x64`: against a float32 array that conversion would trace again, so it is
    explained; against a float64 one it is told, and following it stops the retrace."""

    def make():
        @eqx.filter_jit
        def step(b):
            return jnp.sum(jnp.asarray(b))

        return step

    with jax.enable_x64(True):
        for dtype, told in ((jnp.float32, "structure.changed"), (jnp.float64, None)):
            step = make()
            with jt.watch() as watch:
                step(jnp.full(3, 0.5, dtype))
                step([0.5] * 3)
            row = watch.events[watch.events["function"].str.endswith("step")].iloc[-1]
            assert _ids(row) == [told or "structure.container_kind"], row["hint_ids"]
        step = make()
        with jt.watch() as watch:
            step(jnp.full(3, 0.5, jnp.float64))
            step(jnp.asarray([0.5] * 3))
        assert len(watch.events[watch.events["function"].str.endswith("step")]) == 1
