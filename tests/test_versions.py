"""JAX versions: the full probe inside `SUPPORTED_JAX`, the reduced mode outside it.

The reduced mode is reached for real: either the supported range is patched so the
installed JAX falls outside it, or JAX's cached `trace_to_jaxpr` is replaced by a plain
forwarding function (no cache), as a JAX that moved its internals would look.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from _support import display_texts as _texts
from _support import rows
from jax._src.interpreters import partial_eval as pe

import jaxtrace_nb
from jaxtrace_nb._jax import _internals as _jax_internals
from jaxtrace_nb._recording import _session
from jaxtrace_nb._recording._session import get_session

REDUCED_NOTICE = "per function name only (no retrace causes"


def _installed_inside_range() -> bool:
    lo, hi = _jax_internals.SUPPORTED_JAX
    return lo <= _jax_internals.version_tuple(jax.__version__) < hi


def _hooked_module():
    """The module whose `test_event` jaxtrace_nb rebinds on this JAX (partial_eval, or 0.8's
    util)."""
    from jax._src import util

    return pe if hasattr(pe, "test_event") else util


def _trace_point():
    """The JAX name jaxtrace_nb rebinds (its trace hook)."""
    return _hooked_module().test_event


def _plain_forwarder(orig):
    def trace_to_jaxpr(*args, **kwargs):
        return orig(*args, **kwargs)

    return trace_to_jaxpr


@pytest.fixture(params=["version_older_than_supported", "internal_missing"])
def reduced(request, monkeypatch):
    """jaxtrace_nb stopped, on a JAX it must treat as unsupported; the JAX internal to leave
    alone."""
    jaxtrace_nb.stop()
    jaxtrace_nb.reset()
    assert not get_session().recording
    monkeypatch.setattr(_session, "_SAID", set())  # a fresh process's: nothing said yet
    if request.param == "version_older_than_supported":
        monkeypatch.setattr(_jax_internals, "SUPPORTED_JAX", ((99, 0, 0), (100, 0, 0)))
    elif hasattr(pe, "test_event"):
        monkeypatch.setattr(pe, "trace_to_jaxpr", _plain_forwarder(pe.trace_to_jaxpr))
    else:  # JAX 0.8: the cached function that announces a trace
        from jax._src import pjit

        monkeypatch.setattr(pjit, "_create_pjit_jaxpr", _plain_forwarder(pjit._create_pjit_jaxpr))
    yield _trace_point()
    jaxtrace_nb.stop()
    jaxtrace_nb.reset()


def test_installed_jax_gets_the_full_probe_inside_the_supported_range(capsys):
    jaxtrace_nb.reset()
    jaxtrace_nb.start()
    try:

        @jax.jit
        def f(x):
            return x + 1

        f(jnp.ones(2))
        f(jnp.ones(3))
        notice = capsys.readouterr().err
        hooked = _trace_point().__module__ == "jaxtrace_nb._recording._probe"
        if _installed_inside_range():
            assert _jax_internals.detect().full and hooked and notice == ""
            assert rows(jaxtrace_nb)[-1][1:] == ("shape", "x", "f32[2]", "f32[3]")
        else:
            assert not _jax_internals.detect().full and not hooked
            assert REDUCED_NOTICE in notice and jax.__version__ in notice
    finally:
        jaxtrace_nb.stop()
        jaxtrace_nb.reset()


def test_reduced_start_says_in_one_line_what_is_degraded(reduced, capsys):
    jaxtrace_nb.start()
    jaxtrace_nb.start()  # idempotent: says it once
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == ""
    assert lines[0].startswith("jaxtrace_nb: ") and REDUCED_NOTICE in lines[0]
    assert jax.__version__ in lines[0]
    assert _trace_point() is reduced  # no JAX internal touched: public jax.monitoring only


def test_reduced_records_traces_and_seconds_per_function_name(reduced):
    def double(x):
        return x * 2

    @eqx.filter_jit
    def step(x, n):
        return x * n

    jaxtrace_nb.start()
    f = jax.jit(double)
    f(1.0)
    f(jnp.ones(3))
    f(jnp.ones(3))  # a cache hit: nothing recorded
    step(jnp.ones(2), 2)
    step(jnp.ones(2), 3)
    assert _trace_point() is reduced
    df = jaxtrace_nb.log()
    for name in ("double", "step"):
        mine = df[df["function"] == name]
        assert mine["kind"].tolist() == ["trace", "trace"]
        assert mine["trace_number"].tolist() == [1, 2]
        assert (
            mine["cause"].tolist()[0] == "first" and mine["cause"].isna().tolist()[1]
        )  # not diagnosed
        assert mine[["trace_s", "lower_s", "compile_s"]].notna().all().all()
        assert mine["leaf"].isna().all()
    summary = jaxtrace_nb.summary().set_index("function")
    assert summary.loc["double", ["traces", "compiles"]].tolist() == [2, 2]

    jaxtrace_nb.stop()
    n = len(jaxtrace_nb.log())
    f(jnp.ones(4))
    assert len(jaxtrace_nb.log()) == n  # stop() removed the monitoring listeners


def test_reduced_load_ext_and_tracewatch_in_ipython(reduced, shell, capsys):
    result = shell.run_cell("%load_ext jaxtrace_nb")
    assert result.success
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and REDUCED_NOTICE in lines[0]
    result = shell.run_cell(
        "%%tracewatch\ndef double(x):\n    return x * 2\n"
        "f = jax.jit(double)\nf(1.0)\nf(jnp.ones(3))\n"
    )
    assert result.success
    text = _texts(shell)[-1]
    assert ["double", "2", "2"] in [line.split()[:3] for line in text.splitlines()]
    assert "double #2 trace: (not diagnosed)" in text
    assert _trace_point() is reduced


@pytest.fixture
def newer(monkeypatch):
    """The installed JAX made newer than the tested range; the self-check runs afresh."""
    from jaxtrace_nb._recording import _self_check

    jaxtrace_nb.stop()
    jaxtrace_nb.reset()
    lo, _ = _jax_internals.SUPPORTED_JAX
    monkeypatch.setattr(
        _jax_internals, "SUPPORTED_JAX", (lo, _jax_internals.version_tuple(jax.__version__))
    )
    monkeypatch.setattr(_self_check, "_RESULT", [])
    monkeypatch.setattr(_session, "_SAID", set())
    yield
    jaxtrace_nb.stop()
    jaxtrace_nb.reset()


def test_newer_jax_records_in_full_after_its_self_check_passes(newer, capsys):
    jaxtrace_nb.start()
    notice = capsys.readouterr().err
    assert f"JAX {jax.__version__} is newer than tested" in notice and "self-check passed" in notice
    assert jaxtrace_nb.log().empty  # the canary's traces stay out of the user's log

    @jax.jit
    def f(x):
        return x + 1

    f(jnp.ones(2))
    f(jnp.ones(3))
    assert rows(jaxtrace_nb)[-1][1:] == ("shape", "x", "f32[2]", "f32[3]")


def test_newer_jax_with_a_broken_decoder_falls_back_and_says_which_check_failed(
    newer, monkeypatch, capsys
):
    from jaxtrace_nb._keys import _walker

    real = _walker.aval_leaf

    def wrong_dtype(aval):  # a decoder that misreads a newer JAX's types
        leaf = real(aval)
        return leaf._replace(
            text=leaf.text.replace("i32", "f32"),
            token=leaf.token[:2] + ("float32",) + leaf.token[3:],
        )

    monkeypatch.setattr(_walker, "aval_leaf", wrong_dtype)
    jaxtrace_nb.start()
    line = capsys.readouterr().err.strip()
    assert "self-check failed (a new dtype: expected ('dtype', 'x', 'f32[3]', 'i32[3]')" in line, (
        line
    )
    assert REDUCED_NOTICE in line and len(line.splitlines()) == 1
    assert _trace_point().__module__ != "jaxtrace_nb._recording._probe"  # no JAX internal touched


# The user settings that changed what the canary recorded, or made it raise (issue 53): each set
# globally, as a user sets it before `start()`, with the value a user would give it.
USER_SETTINGS = {
    "x64": ("jax_enable_x64", True),
    "strict_promotion": ("jax_numpy_dtype_promotion", "strict"),
    "matmul_precision": ("jax_default_matmul_precision", "highest"),
    "enable_checks": ("jax_enable_checks", True),
    "debug_nans": ("jax_debug_nans", True),
    "explain_cache_misses": ("jax_explain_cache_misses", True),
}


@pytest.fixture(params=sorted(USER_SETTINGS))
def user_setting(request):
    from jax._src import config

    name, value = USER_SETTINGS[request.param]
    before = config.config_states[name].value
    jax.config.update(name, value)
    yield name, value
    jax.config.update(name, before)


def test_the_self_check_passes_and_records_in_full_under_every_user_setting(
    newer, user_setting, capsys, caplog
):
    """The canary traces in a configuration of its own: the user's setting neither fails it nor
    shows in its traces; recording is then full, under the user's setting."""
    name, value = user_setting
    jaxtrace_nb.start()
    notice = capsys.readouterr().err
    assert "self-check passed, recording in full" in notice, (name, notice)
    assert not [r for r in caplog.records if "_canary_calls" in r.getMessage()], name
    from jax._src import config

    assert config.config_states[name].value == value  # the user's setting, as it was

    @jax.jit
    def f(x):
        return x * 2

    f(jnp.ones(2))
    f(jnp.ones(3))
    f(jnp.ones(3))
    float_text = "f64" if name == "jax_enable_x64" else "f32"
    assert rows(jaxtrace_nb)[-1][1:] == ("shape", "x", f"{float_text}[2]", f"{float_text}[3]")


@pytest.fixture
def x64():
    from jax._src import config

    before = config.config_states["jax_enable_x64"].value
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def test_under_x64_a_python_scalar_reads_f64_after_the_self_check(newer, x64):
    """Under x64 a Python float is ``f64[] (weak)``: the user's own retraces say so."""
    jaxtrace_nb.start()

    @jax.jit
    def g(x):
        return x + 1

    g(jnp.ones((), jnp.float32))
    g(1.0)
    assert rows(jaxtrace_nb)[-1][1:] == ("dtype", "x", "f32[]", "f64[] (weak)")


def test_the_notice_is_printed_once_per_process(newer, capsys):
    for _ in range(4):
        jaxtrace_nb.start()
        jaxtrace_nb.stop()
    jaxtrace_nb.start()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "self-check passed" in lines[0], lines


def test_x64_from_the_environment_passes_the_self_check(tmp_path):
    """``JAX_ENABLE_X64=1`` is read when JAX is imported: a process of its own."""
    import os
    import subprocess
    import sys

    script = tmp_path / "x64.py"
    script.write_text(
        "import jax, jax.numpy as jnp\n"
        "import jaxtrace_nb as jt\n"
        "from jaxtrace_nb._jax import _internals\n"
        "lo, _ = _internals.SUPPORTED_JAX\n"
        "_internals.SUPPORTED_JAX = (lo, _internals.version_tuple(jax.__version__))\n"
        "assert jax.numpy.asarray(1.0).dtype == 'float64'\n"
        "jt.start()\n"
        "f = jax.jit(lambda x: x * 2)\n"
        "f(1.0)\n"
        "f(jnp.ones(3))\n"
        "row = jt.log().iloc[-1]\n"
        "print(row['cause'], row['leaf'], row['before'], row['after'], sep='|')\n"
    )
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "self-check passed, recording in full" in done.stderr, done.stderr
    assert done.stdout.strip() == "shape|x|f64[] (weak)|f64[3]", done.stdout
