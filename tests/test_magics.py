"""%load_ext, %%tracewatch and %tracewatch in a real InteractiveShell."""

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture
def shell():
    import jaxtrace_nb

    jaxtrace_nb.reset()
    sh = InteractiveShell.instance()
    publisher = CapturingDisplayPublisher()
    old = sh.display_pub
    sh.display_pub = publisher
    sh.run_cell("import jax, jax.numpy as jnp")
    yield sh
    sh.run_cell("%unload_ext jaxtrace_nb")
    sh.display_pub = old
    jaxtrace_nb.reset()


def _outputs(sh):
    return [o["data"] for o in sh.display_pub.outputs]


def _texts(sh):
    return [d.get("text/plain", "") for d in _outputs(sh)]


def test_cell_magic_shows_cause_leaf_and_change(shell):
    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    shell.run_cell("@jax.jit\ndef f(x, y):\n    return x + y\n", store_history=True)
    shell.run_cell("%%tracewatch\nf(1.0, jnp.ones(3))\nf(jnp.ones(3), jnp.ones(3))\n", store_history=True)
    outputs = _outputs(shell)
    assert outputs and all("text/plain" in d for d in outputs)
    text = _texts(shell)[-1]
    assert "f #2 trace: shape `x`: f32[] (weak) → f32[3]" in text
    assert any("<table" in d.get("text/html", "") for d in outputs)


def test_every_cell_is_attributed(shell):
    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    n = shell.execution_count
    shell.run_cell("g = jax.jit(lambda x: x * 2)\ng(1.0)", store_history=True)
    shell.run_cell("g(jnp.ones(2))", store_history=True)
    import jaxtrace_nb as jt

    df = jt.log(internal=False)
    assert df["cell"].tolist() == [n, n + 1]
    assert df["location"].iloc[0].startswith(f"In[{n}]:")


def test_cell_magic_shows_output_when_cell_raises(shell):
    shell.run_cell("%load_ext jaxtrace_nb")
    result = shell.run_cell("%%tracewatch\nh = jax.jit(lambda x: x + 1)\nh(1.0)\nraise KeyError('user error')\n")
    assert result.error_in_exec is None  # the magic ran; the cell's error was shown by the inner run
    assert any("1 trace(s)" in t for t in _texts(shell))


def test_max_traces_stops_a_storm(shell):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\n")
    shell.run_cell("%%tracewatch --max-traces 1\nfor n in range(1, 100):\n    s(jnp.ones(n))\n")
    import jaxtrace_nb as jt

    df = jt.log(internal=False)
    assert len(df[df["function"] == "s"]) == 2  # stopped at the second trace, not the 99th


def test_bad_flag_is_a_usage_message(shell, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    result = shell.run_cell("%%tracewatch --no-such-flag\n1\n")
    out = capsys.readouterr()
    assert "UsageError" in out.err + out.out
    assert "Traceback" not in out.err + out.out
    assert result.error_in_exec is not None  # IPython reports the UsageError, no traceback


def test_help_documents_flags(shell):
    from jaxtrace_nb._ipython import TracewatchMagics

    doc = TracewatchMagics.tracewatch.__doc__
    for flag in ("--max-traces", "--internal", "--reset", "--export", "--quiet", "--persist"):
        assert flag in doc


def test_line_magic_session_reset_and_export(shell, tmp_path, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("k = jax.jit(lambda x: x)\nk(1.0)\nk(jnp.ones(2))")
    shell.run_cell("%tracewatch")
    assert "2 trace(s)" in _texts(shell)[-1]
    path = tmp_path / "log.csv"
    shell.run_cell(f"%tracewatch --export {path}")
    assert path.exists() and "wrote 2 event(s)" in capsys.readouterr().out
    shell.run_cell("%tracewatch --reset")
    import jaxtrace_nb as jt

    assert jt.log().empty


def test_line_magic_persist_appends_every_event(shell, tmp_path, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    path = tmp_path / "traces.jsonl"
    shell.run_cell(f"%tracewatch --persist {path}")
    assert f"appending every event to {path}" in capsys.readouterr().out
    shell.run_cell("p = jax.jit(lambda x: x)\np(1.0)\np(jnp.ones(2))")
    import jaxtrace_nb as jt

    df = jt.load(path)
    assert df[~df["internal"]]["cause"].tolist() == ["first", "shape"]


def test_tracewatch_cell_events_carry_its_cell_number(shell):
    import jaxtrace_nb as jt

    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    result = shell.run_cell("%%tracewatch\nh = jax.jit(lambda x: x + 1)\nh(1.0)\n", store_history=True)
    result2 = shell.run_cell("h(jnp.ones(2))", store_history=True)
    assert jt.log(internal=False)["cell"].tolist() == [result.execution_count, result2.execution_count]
