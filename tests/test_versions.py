"""JAX versions: the full probe inside `SUPPORTED_JAX`, the reduced mode outside it.

The reduced mode is reached for real: either the supported range is patched so the
installed JAX falls outside it, or JAX's internal `trace_to_jaxpr` is replaced by a
plain forwarding function (no cache), as a JAX that moved its internals would look.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax._src.interpreters import partial_eval as pe

import jaxtrace_nb
from jaxtrace_nb import _probe
from jaxtrace_nb._session import get_session

from conftest import rows
from test_magics import _texts, shell  # noqa: F401  (the real-InteractiveShell fixture)

REDUCED_NOTICE = "per function name only (no retrace causes"


def _installed_inside_range() -> bool:
    lo, hi = _probe.SUPPORTED_JAX
    return lo <= _probe._version_tuple(jax.__version__) < hi


def _trace_point():
    """JAX's internal observation point, or None where this JAX has none."""
    return getattr(pe, "trace_to_jaxpr", None)


def _plain_forwarder(orig):
    def trace_to_jaxpr(*args, **kwargs):
        return orig(*args, **kwargs)

    return trace_to_jaxpr


@pytest.fixture(params=["version_outside_range", "internal_missing"])
def reduced(request, monkeypatch):
    """jaxtrace_nb stopped, on a JAX it must treat as unsupported; the JAX internal to leave alone."""
    jaxtrace_nb.stop()
    jaxtrace_nb.reset()
    assert not get_session().recording
    if request.param == "version_outside_range":
        monkeypatch.setattr(_probe, "SUPPORTED_JAX", ((0, 0, 0), (0, 0, 1)))
    elif _trace_point() is not None:
        monkeypatch.setattr(pe, "trace_to_jaxpr", _plain_forwarder(pe.trace_to_jaxpr))
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
        hooked = type(_trace_point()).__module__ == _probe.__name__
        if _installed_inside_range():
            assert _probe.detect() == (True, "") and hooked and notice == ""
            assert rows(jaxtrace_nb)[-1][1:] == ("shape", "x", "f32[2]", "f32[3]")
        else:
            assert not _probe.detect().trace_hook and not hooked
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
        assert mine["cause"].tolist() == ["first", "unknown"]
        assert mine[["trace_s", "lower_s", "compile_s"]].notna().all().all()
        assert mine["leaf"].isna().all()
    summary = jaxtrace_nb.summary().set_index("function")
    assert summary.loc["double", ["traces", "compiles"]].tolist() == [2, 2]

    jaxtrace_nb.stop()
    n = len(jaxtrace_nb.log())
    f(jnp.ones(4))
    assert len(jaxtrace_nb.log()) == n  # stop() removed the monitoring listeners


def test_reduced_load_ext_and_tracewatch_in_ipython(reduced, shell, capsys):  # noqa: F811
    result = shell.run_cell("%load_ext jaxtrace_nb")
    assert result.success
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and REDUCED_NOTICE in lines[0]
    result = shell.run_cell("%%tracewatch\ndef double(x):\n    return x * 2\n"
                            "f = jax.jit(double)\nf(1.0)\nf(jnp.ones(3))\n")
    assert result.success
    text = _texts(shell)[-1]
    assert ["double", "2", "2"] in [line.split()[:3] for line in text.splitlines()]
    assert "double #2 trace: unknown" in text
    assert _trace_point() is reduced
