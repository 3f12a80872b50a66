"""%load_ext, %%tracewatch and %tracewatch in a real InteractiveShell."""

import re

from _support import display_outputs as _outputs
from _support import display_texts as _texts
from _support import package_frames


def test_cell_magic_shows_cause_leaf_and_change(shell):
    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    shell.run_cell("@jax.jit\ndef f(x, y):\n    return x + y\n", store_history=True)
    shell.run_cell(
        "%%tracewatch\nf(1.0, jnp.ones(3))\nf(jnp.ones(3), jnp.ones(3))\n", store_history=True
    )
    outputs = _outputs(shell)
    assert outputs and all("text/plain" in d for d in outputs)
    text = _texts(shell)[-1]
    assert "f #2 trace: shape at `x`: f32[] (weak) → f32[3]" in text
    assert any("<table" in d.get("text/html", "") for d in outputs)


def test_the_readmes_first_screen_notebook_example_runs(shell):
    """The README's first screen: the two set-up commands and the three-line notebook example, whose
    cells run as they stand in a real shell, around a `train_step` that retraces."""
    import pathlib

    lines = (
        (pathlib.Path(__file__).resolve().parents[1] / "README.md")
        .read_text(encoding="utf-8")
        .splitlines()
    )
    first = "\n".join(lines[:40])
    assert (
        'pip install -e ".[demo]"' in first
        and 'pip install -e ".[test]" && python -m pytest' in first
    )
    cells = re.findall(r"```python\n(.*?)```", first, re.S)
    assert [cell.splitlines()[0].split("  #")[0].strip() for cell in cells] == [
        "%load_ext jaxtrace_nb",
        "%%tracewatch",
        "import jaxtrace_nb as jt; jt.log()",
    ]
    results = [shell.run_cell(cells[0], store_history=True)]
    shell.run_cell(
        "@jax.jit\ndef train_step(params, batch):\n    return (params * batch).sum(), params\n"
        "params, batch = jnp.ones(3), jnp.ones(3)\ntrain_step(params, batch)\nbatch = "
        "jnp.ones((2, 3))\n",
        store_history=True,
    )
    results += [shell.run_cell(cell, store_history=True) for cell in cells[1:]]
    assert all(r.success for r in results), [r.error_in_exec for r in results]
    assert "train_step #2 trace: shape at `batch`: f32[3] → f32[2,3]" in "\n".join(_texts(shell)), (
        _texts(shell)
    )
    log = results[-1].result
    log = log[~log["internal"]]
    assert log[["function", "cause", "leaf"]].values.tolist() == [
        ["train_step", "first", None],
        ["train_step", "shape", "batch"],
    ]


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
    result = shell.run_cell(
        "%%tracewatch\nh = jax.jit(lambda x: x + 1)\nh(1.0)\nraise KeyError('user error')\n"
    )
    assert (
        result.error_in_exec is None
    )  # the magic ran; the cell's error was shown by the inner run
    assert any("1 trace(s)" in t for t in _texts(shell))


def test_max_traces_stops_a_storm(shell):
    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\n")
    shell.run_cell("%%tracewatch --max-traces 1\nfor n in range(1, 100):\n    s(jnp.ones(n))\n")
    import jaxtrace_nb as jt

    df = jt.log(internal=False)
    assert len(df[df["function"] == "s"]) == 2  # stopped at the second trace, not the 99th


def test_max_retraces_zero_stops_at_the_first_retrace_of_a_function_compiled_before(shell):
    import jaxtrace_nb as jt

    shell.run_cell("%load_ext jaxtrace_nb")
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\ns(jnp.ones(1))\n")
    shell.run_cell(
        "%%tracewatch --max-traces 1\ns(jnp.ones(2))\n"
    )  # one trace in this cell: allowed
    result = shell.run_cell(
        "%%tracewatch --max-retraces 0\nfor n in range(3, 9):\n    s(jnp.ones(n))\n"
    )
    assert result.error_in_exec is None  # the magic ran; the inner run showed the RetraceError
    df = jt.log(internal=False)
    assert df["trace_number"].tolist() == [1, 2, 3]  # stopped at the first trace in the cell


def test_retrace_error_points_at_the_cell_the_user_ran_without_our_frames(shell, capsys):
    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    shell.run_cell("@jax.jit\ndef s(x):\n    return x\n", store_history=True)
    result = shell.run_cell(
        "%%tracewatch --max-traces 1\nfor n in range(1, 9):\n    s(jnp.ones(n))\n",
        store_history=True,
    )
    out = re.sub(
        r"\x1b\[[0-9;]*m", "", capsys.readouterr().out
    )  # IPython 9 colours "In[n]" apart from ", line 2"
    assert "RetraceError" in out and f"In[{result.execution_count}], line 2" in out
    assert f"In[{result.execution_count + 1}]" not in out
    shown = out.split("Traceback", 1)[1].split("RetraceError:", 1)[0]
    for ours in ("_watch.py", "_session.py", "_probe.py", "_ipython.py"):
        assert ours not in shown, ours
    assert package_frames(shown) == []
    assert shell.custom_exceptions == ()  # our handler lived only while the cell ran


def test_a_custom_exception_handler_of_the_user_is_left_alone(shell, capsys):
    from jaxtrace_nb import RetraceError

    seen = []
    shell.set_custom_exc(
        (RetraceError,), lambda self, etype, value, tb, tb_offset=None: seen.append(etype)
    )
    try:
        shell.run_cell("%load_ext jaxtrace_nb")
        shell.run_cell(
            "%%tracewatch --max-traces 1\nq = jax.jit(lambda x: x)\nq(1.0)\nq(jnp.ones(2))\n"
        )
        assert seen == [RetraceError]
    finally:
        shell.set_custom_exc((), None)


def test_bad_flag_is_a_usage_message(shell, capsys):
    shell.run_cell("%load_ext jaxtrace_nb")
    result = shell.run_cell("%%tracewatch --no-such-flag\n1\n")
    out = capsys.readouterr()
    assert "UsageError" in out.err + out.out
    assert "Traceback" not in out.err + out.out
    assert result.error_in_exec is not None  # IPython reports the UsageError, no traceback


def test_help_documents_flags(shell):
    from jaxtrace_nb._integrations._ipython import TracewatchMagics

    doc = " ".join(TracewatchMagics.tracewatch.__doc__.split())
    for flag in (
        "--max-traces",
        "--max-retraces",
        "--internal",
        "--reset",
        "--export",
        "--quiet",
        "--persist",
    ):
        assert flag in doc
    assert "Traces made before this cell do not count" in doc
    assert "--max-retraces 0 stops at the first retrace" in doc


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
    result = shell.run_cell(
        "%%tracewatch\nh = jax.jit(lambda x: x + 1)\nh(1.0)\n", store_history=True
    )
    result2 = shell.run_cell("h(jnp.ones(2))", store_history=True)
    assert jt.log(internal=False)["cell"].tolist() == [
        result.execution_count,
        result2.execution_count,
    ]


def test_terminal_ipython_recipes(tmp_path):
    """The README's recipe: `ipython --ext=jaxtrace_nb` runs a .ipy file as one cell."""
    import os
    import subprocess
    import sys

    body = "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x * 2)\nf(1.0); f(jnp.ones(3))\n"
    files = {
        "first_line.ipy": "%%tracewatch\n" + body,
        "at_the_end.ipy": body + "%tracewatch\n",
        "in_the_middle.ipy": body.replace("f(1.0)", "%%tracewatch\nf(1.0)"),
    }
    env = dict(
        os.environ, JAX_PLATFORMS="cpu", IPYTHONDIR=str(tmp_path / "ipython"), HOME=str(tmp_path)
    )
    out = {}
    for name, source in files.items():
        (tmp_path / name).write_text(source)
        run = subprocess.run(
            [sys.executable, "-m", "IPython", "--ext=jaxtrace_nb", "--no-banner", name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out[name] = run.stdout + run.stderr
    for name in ("first_line.ipy", "at_the_end.ipy"):
        assert "<lambda> #2 trace: shape at `x`: f32[] (weak) → f32[3]" in out[name], out[name]
    assert "UsageError: Line magic function `%%tracewatch` not found." in out["in_the_middle.ipy"]
