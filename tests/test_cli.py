"""`python -m jaxtrace_nb run / report`: the program runs exactly as under plain python.

Every run is a real subprocess, bounded by a timeout; the program's stdout, stderr (before
our report), exit status and traceback are compared with the same program under `python`.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest
from _support import package_frames

from jaxtrace_nb._integrations import _cli, _run
from jaxtrace_nb._log._persist import load_events

PROGRAMS = pathlib.Path(__file__).parent / "programs"
REPO = PROGRAMS.parent.parent
TIMEOUT = 120


def _env(**extra):
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), **extra)
    env.pop("JAX_ENABLE_X64", None)
    return env


def _python(args, cwd):
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _masked(text: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x?", text)  # object addresses differ from run to run


def _split_report(stderr: str, title: str) -> tuple[str, str]:
    """(the program's own stderr, our report): the report is the last thing written, at exit."""
    at = stderr.rfind(title)
    assert at >= 0, stderr
    return stderr[:at], stderr[at:]


@pytest.fixture
def program(tmp_path):
    """cli_probe.py copied into a directory of its own, run from another directory."""
    where = tmp_path / "prog dir"
    where.mkdir()
    (where / "cli_probe.py").write_text((PROGRAMS / "cli_probe.py").read_text())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd, os.path.relpath(where / "cli_probe.py", cwd)


@pytest.mark.parametrize(
    "mode, status", [("ok", 0), ("exit3", 3), ("exit_message", 1), ("raise", 1), ("interrupt", -2)]
)
def test_run_is_the_program_under_python(program, mode, status):
    cwd, script = program
    args = [
        script,
        mode,
        "--persist",
        "not ours",
        "-m",
        "x",
    ]  # the program's own arguments, untouched
    plain = _python(args, cwd)
    ours = _python(["-m", "jaxtrace_nb", "run", *args], cwd)
    assert plain.returncode == status, plain.stderr
    assert ours.returncode == status
    assert ours.stdout == plain.stdout  # sys.argv, sys.path[0], __main__, __file__, dtype, results
    assert "jax imported before the program: False" in ours.stdout
    assert "dtype float64" in ours.stdout  # JAX_ENABLE_X64 set by the program before importing JAX
    assert f"argv [{script!r}, {mode!r}, '--persist', 'not ours', '-m', 'x']" in ours.stdout
    before, report = _split_report(ours.stderr, f"jaxtrace_nb run {script}:")
    assert (
        before == plain.stderr
    )  # tracebacks, chained exceptions, exit messages: as python prints them
    assert "step" in report and "`x`" in report and "f64[3] → f64[4]" in report
    if mode == "raise":
        assert (
            "in <module>\n    inner()" in before
            and package_frames(before) == []
            and "runpy" not in before
        )


def test_run_module_is_python_dash_m(program):
    cwd, script = program
    where = (cwd / script).parent
    plain = _python(["-m", "cli_probe", "exit3"], where)
    ours = _python(["-m", "jaxtrace_nb", "run", "-m", "cli_probe", "exit3"], where)
    assert (plain.returncode, ours.returncode) == (3, 3)
    assert _masked(ours.stdout) == _masked(plain.stdout)  # __spec__ shows its loader's address
    assert "main __main__ " in ours.stdout and "ModuleSpec(name='cli_probe'" in ours.stdout
    before, report = _split_report(ours.stderr, "jaxtrace_nb run -m cli_probe:")
    assert before == plain.stderr
    assert "`x`" in report and "f64[3] → f64[4]" in report


def test_max_traces_stops_the_program_at_the_retrace(program, tmp_path):
    cwd, script = program
    log = tmp_path / "log.jsonl"
    ours = _python(
        ["-m", "jaxtrace_nb", "run", "--persist", str(log), "--max-traces", "1", script], cwd
    )
    assert ours.returncode == 1
    assert "sum 6.0" in ours.stdout and "end of program" not in ours.stdout
    before, report = _split_report(ours.stderr, f"jaxtrace_nb run {script}:")
    assert before.startswith("Traceback (most recent call last):")
    assert "jaxtrace_nb.RetraceError: step (" in before
    assert "past max_traces=1" in before and "`x`: f64[3] → f64[4]" in before and "Hint:" in before
    assert "`x`" in report and "f64[3] → f64[4]" in report and f"(log: {log})" in report
    rows = [
        (e.function, e.trace_number, e.cause, e.leaf) for e in load_events(log) if not e.internal
    ]
    assert rows == [("step", 1, "first", None), ("step", 2, "shape", "x")]


def test_max_retraces_zero(program):
    cwd, script = program
    ours = _python(["-m", "jaxtrace_nb", "run", "--max-retraces=0", script], cwd)
    assert ours.returncode == 1
    assert "was retraced 1 time, past max_retraces=0. The limit counts its retraces" in ours.stderr
    assert "in this run, top-level and nested alike; this is its trace #2" in ours.stderr


def test_cache_hits_run_no_package_python_under_run(tmp_path):
    log = tmp_path / "hot.jsonl"
    ours = _python(
        [
            "-m",
            "jaxtrace_nb",
            "run",
            "--max-traces",
            "5",
            "--persist",
            str(log),
            str(PROGRAMS / "hot_path.py"),
        ],
        REPO,
    )
    assert ours.returncode == 0, ours.stderr
    assert "recording: True" in ours.stdout
    assert "package frames on cache hits: []" in ours.stdout
    assert {e.function for e in load_events(log) if not e.internal} == {"hot", "hot_eqx"}


_JITTED_IN_MAIN = """
import jax
import jax.numpy as jnp


def main():
    @jax.jit
    def train_step(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    for rows in (32, 17):
        loss = train_step(jnp.ones((3, 2)), jnp.ones((rows, 3)))
    print("done", float(loss))


main()
"""


def test_a_run_served_by_the_persistent_cache_counts_its_equations(tmp_path):
    """A second run whose compiles the persistent cache all serves still counts each program's
    equations (traced before the cache's lookup), though its function, jitted inside `main()`, is
    gone before our thread walks what the cache served (before: the column blank)."""
    (tmp_path / "train.py").write_text(_JITTED_IN_MAIN)
    env = _env(
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "cache"),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1",
    )
    runs = {}
    for run in ("cold", "warm"):
        done = subprocess.run(
            [sys.executable, "-m", "jaxtrace_nb", "run", "--persist", f"{run}.jsonl", "train.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        ours = [
            e
            for e in load_events(tmp_path / f"{run}.jsonl")
            if e.function == "main.<locals>.train_step"
        ]
        runs[run] = ([e.persistent_cache for e in ours], [e.eqns_total for e in ours], done.stderr)
    assert runs["warm"][0] == ["hit", "hit"] and runs["cold"][0] != runs["warm"][0], runs
    assert runs["warm"][1] == runs["cold"][1] == [5, 5], runs
    row = next(
        line
        for line in runs["warm"][2].splitlines()
        if line.startswith("main.<locals>.train_step ")
    )
    assert row.split()[1:4] == ["2", "2", "5"], row  # traces, compiles, eqns total


def test_run_errors_are_pythons(tmp_path):
    missing = _python(["-m", "jaxtrace_nb", "run", "no_such.py"], tmp_path)
    assert (
        missing.returncode == 2
        and "can't open file" in missing.stderr
        and "no_such.py" in missing.stderr
    )
    no_module = _python(["-m", "jaxtrace_nb", "run", "-m", "no_such_module_here"], tmp_path)
    assert no_module.returncode == 1 and "No module named no_such_module_here" in no_module.stderr
    nothing = _python(["-m", "jaxtrace_nb", "run"], tmp_path)
    assert nothing.returncode == 2 and "give a script to run, or -m module" in nothing.stderr
    bad = _python(["-m", "jaxtrace_nb", "run", "--max-traces", "0", "x.py"], tmp_path)
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr
    unwritable = _python(
        ["-m", "jaxtrace_nb", "run", "--persist", str(tmp_path / "no" / "dir.jsonl"), "x.py"],
        tmp_path,
    )
    assert unwritable.returncode == 2 and "cannot write the log" in unwritable.stderr
    helped = _python(["-m", "jaxtrace_nb", "run", "--help"], tmp_path)
    assert helped.returncode == 0 and "(script.py | -m module) [args ...]" in helped.stdout
    assert "--max-retraces N" in helped.stdout


def test_no_jax_no_recording(tmp_path):
    (tmp_path / "plain.py").write_text("import sys\nprint('jax' in sys.modules)\n")
    ours = _python(["-m", "jaxtrace_nb", "run", "plain.py"], tmp_path)
    assert ours.returncode == 0 and ours.stdout == "False\n"
    assert "the program never imported JAX; nothing was recorded" in ours.stderr


# ------------------------------------------------------------------ report
@pytest.fixture(scope="module")
def persisted(tmp_path_factory):
    log = tmp_path_factory.mktemp("logs") / "traces.jsonl"
    run = _python(
        ["-m", "jaxtrace_nb", "run", "--persist", str(log), str(PROGRAMS / "cli_probe.py")], REPO
    )
    assert run.returncode == 0, run.stderr
    return log


def test_report_prints_the_text_report(persisted):
    out = _python(["-m", "jaxtrace_nb", "report", str(persisted)], REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        "traces.jsonl: 2 trace(s), 2 compile(s) of 1 function(s), 1 retrace(s)"
    )
    assert "`x`" in out.stdout and "f64[3] → f64[4]" in out.stdout
    assert "Differs across processes" not in out.stdout  # one process


def test_report_errors(tmp_path):
    out = _python(["-m", "jaxtrace_nb", "report", str(tmp_path / "missing.jsonl")], tmp_path)
    assert out.returncode == 2 and "cannot read" in out.stderr
    out = _python(["-m", "jaxtrace_nb", "report"], tmp_path)
    assert out.returncode == 2 and "LOG" in out.stderr


def test_report_html_calls_jt_report(persisted, tmp_path):
    page = tmp_path / "report.html"
    out = _python(["-m", "jaxtrace_nb", "report", str(persisted), "-o", str(page)], REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and page.exists()
    assert "step" in page.read_text(encoding="utf-8")


def test_run_option_split_leaves_the_program_arguments_alone():
    parser = _cli.build_parser()
    ns = _cli._parse_run(
        parser, ["--persist=a.jsonl", "--max-traces", "2", "s.py", "--max-traces", "9", "-m", "x"]
    )
    assert (ns.persist, ns.max_traces, ns.module, ns.script, ns.args) == (
        "a.jsonl",
        2,
        None,
        "s.py",
        ["--max-traces", "9", "-m", "x"],
    )
    ns = _cli._parse_run(parser, ["--max-retraces", "0", "-m", "pkg.mod", "s.py", "--persist", "p"])
    assert (ns.max_retraces, ns.module, ns.script, ns.args) == (
        0,
        "pkg.mod",
        None,
        ["s.py", "--persist", "p"],
    )
    ns = _cli._parse_run(parser, ["-mpkg", "a"])
    assert (ns.module, ns.args) == ("pkg", ["a"])
    ns = _cli._parse_run(parser, ["--", "-odd-name.py", "a"])
    assert (ns.script, ns.args) == ("-odd-name.py", ["a"])
    assert _run._expand("p-{pid}.jsonl") == f"p-{os.getpid()}.jsonl"
