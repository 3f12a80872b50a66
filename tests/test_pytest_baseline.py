"""The pytest plugin's compile baseline, per-test attribution, CI output and failure lines.

Inner sessions run with the real `pytester`, in subprocesses (JAX state is process-global); each
inner session checks that it runs this checkout's jaxtrace_nb (the plugin is loaded through the
installed ``pytest11`` entry point, by module name, so ``PYTHONPATH`` decides which copy).
"""

import json
import os
import pathlib
import pickle
import re
import xml.etree.ElementTree as ET

import pytest
from _support import package_frames

import jaxtrace_nb
from jaxtrace_nb._integrations import _baseline
from jaxtrace_nb._integrations._pytest_results import github_annotation
from jaxtrace_nb._log._events import Event

pytest_plugins = ["pytester"]

PROGRAMS = pathlib.Path(__file__).parent / "programs"
PACKAGE = str(pathlib.Path(jaxtrace_nb.__file__).parent)
_CONFTEST = f"""
import os
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jaxtrace_nb
assert os.path.dirname(jaxtrace_nb.__file__) == {PACKAGE!r}, jaxtrace_nb.__file__  # this checkout's
"""


def _lit(pattern: str) -> str:
    """`pattern` for fnmatch_lines with its brackets literal (``f32[3]``); `*` stays a wildcard."""
    return "".join("[[]" if c == "[" else "[]]" if c == "]" else c for c in pattern)


def _run(pytester, *args, env=None, timeout=300):
    for name, value in (env or {}).items():
        pytester._monkeypatch.setenv(name, value)
    try:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=timeout)
    finally:
        for name in env or {}:
            pytester._monkeypatch.delenv(name)


def _line_of(path: pathlib.Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# ---------------------------------------------------------------- the baseline file
def test_baseline_is_the_committed_one_stable_and_per_test(pytester):
    """Written for a suite of jax.jit, eqx.filter_jit and nnx.jit tests, the file is the committed
    `programs/baseline_suite.json` (CI runs this with JAX 0.8.0 and 0.10.2: the same file with
    either), the same byte for byte when written again, and compared clean, also for a test run
    alone (each test starts from empty JAX caches: its counts do not depend on what ran before)."""
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(test_budget=(PROGRAMS / "baseline_suite.py").read_text())
    path = pytester.path / "compiles.json"
    result = _run(pytester, f"--jaxtrace-baseline={path}", "--jaxtrace-baseline-update")
    result.assert_outcomes(passed=11)
    result.stdout.fnmatch_lines(
        [f"jaxtrace_nb: baseline written to {path}: 11 test(s) recorded, 10 with traces*"]
    )
    written = path.read_text()
    assert written == (PROGRAMS / "baseline_suite.json").read_text()
    assert not re.search(
        r"0x[0-9a-f]{4}|/tmp/|:\d+\"", written
    )  # no address, absolute path or line

    result = _run(pytester, f"--jaxtrace-baseline={path}", "--jaxtrace-baseline-update")
    result.assert_outcomes(passed=11)
    assert path.read_text() == written

    result = _run(pytester, f"--jaxtrace-baseline={path}")
    result.assert_outcomes(passed=11)
    result.stdout.fnmatch_lines(
        [
            "jaxtrace_nb: baseline compiles.json: 11 test(s) compared, 0 over the baseline, "
            "0 under it"
        ]
    )
    result = _run(pytester, f"--jaxtrace-baseline={path}", "-k", "same_call_as_another_test")
    result.assert_outcomes(passed=1, deselected=10)
    assert path.read_text() == written


_TRAIN = """
import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.1 * jnp.mean(x, axis=0)


def test_train():
    w = jnp.zeros(3)
    for rows in ROWS:
        w = train_step(w, jnp.ones((rows, 3)))
    EXTRA
"""


def _train(pytester, rows, extra="pass"):
    path = pytester.makepyfile(
        test_train=_TRAIN.replace("ROWS", repr(rows)).replace("EXTRA", extra)
    )
    return path


def test_more_fails_at_the_users_line_fewer_is_reported(pytester):
    pytester.makeconftest(_CONFTEST)
    _train(pytester, (32, 32))
    result = _run(pytester, "--jaxtrace-baseline=compiles.json", "--jaxtrace-baseline-update")
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "compiles.json").read_text())["tests"] == {
        "test_train.py::test_train": {"test_train.py::train_step": {"compiles": 1, "traces": 1}}
    }

    # A change adding a retrace: the test fails where it called, naming the function, the trace
    # number, the cause, the leaf and before -> after; in the JUnit XML and as a GitHub annotation.
    source = _train(pytester, (32, 32, 17))
    line = _line_of(source, "w = train_step(")
    junit = pytester.path / "junit.xml"
    result = _run(
        pytester,
        "--jaxtrace-baseline=compiles.json",
        f"--junitxml={junit}",
        env={"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(pytester.path)},
    )
    result.assert_outcomes(failed=1)
    message = (
        "train_step (*test_train.py:*, called at *test_train.py:{line}) was traced twice, past its "
        "baseline of 1 in compiles.json. Trace #2 cause: shape at `x`: f32[32,3] → "
        "f32[17,3]. `x` changed "
        "shape: f32[32,3] → f32[17,3].*"
    ).format(line=line)
    result.stdout.fnmatch_lines(
        [
            ">*w = train_step(w, jnp.ones((rows, 3)))",
            _lit("E*jaxtrace_nb.RetraceError: " + message),
            "E*(jaxtrace_nb: baseline compiles.json; if the new count is intended, run pytest with "
            "--jaxtrace-baseline-update)",
            "",
            f"test_train.py:{line}: RetraceError",
        ]
    )
    out = result.stdout.str()
    assert "For simplicity, JAX has removed" not in out and "_RetraceError" not in out
    result.stdout.fnmatch_lines(
        [
            _lit(
                f"::error file=test_train.py,line={line},title=jaxtrace_nb%3A "
                f"test_train.py%3A%3Atest_train::{message}"
            )
        ]
    )
    case = ET.parse(junit).getroot().find(".//testcase[@name='test_train']")
    assert "Trace #2 cause: shape at `x`" in case.find("failure").get("message")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert {
        k: properties[k]
        for k in (
            "jaxtrace.function",
            "jaxtrace.cause",
            "jaxtrace.leaf",
            "jaxtrace.before",
            "jaxtrace.after",
            "jaxtrace.trace_number",
            "jaxtrace.line",
        )
    } == {
        "jaxtrace.function": "train_step",
        "jaxtrace.cause": "shape",
        "jaxtrace.leaf": "x",
        "jaxtrace.before": "f32[32,3]",
        "jaxtrace.after": "f32[17,3]",
        "jaxtrace.trace_number": "2",
        "jaxtrace.line": f"test_train.py:{line}",
    }

    # A change removing a compile that JAX made without a trace is reported, not failed; adding one
    # fails.
    _train(
        pytester, (32,), extra="train_step(w, jax.device_put(jnp.ones((32, 3)), jax.devices()[0]))"
    )
    result = _run(pytester, "--jaxtrace-baseline=compiles.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            _lit(
                "E*RetraceError: train_step (*) was compiled twice, past its baseline of 1 "
                "in compiles.json. Compile #2 (a compile without a new "
                "trace) cause: sharding*"
            )
        ]
    )

    # A change removing a retrace passes, and is reported.
    _train(pytester, (16, 8))
    _run(
        pytester, "--jaxtrace-baseline=compiles.json", "--jaxtrace-baseline-update"
    ).assert_outcomes(passed=1)
    _train(pytester, (16,))
    result = _run(
        pytester,
        "--jaxtrace-baseline=compiles.json",
        f"--junitxml={junit}",
        env={"GITHUB_ACTIONS": "true"},
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "jaxtrace_nb: baseline compiles.json: 1 test(s) compared, 0 over the baseline, 1 under "
            "it",
            "jaxtrace_nb: fewer than the baseline (not a failure; --jaxtrace-baseline-update "
            "records it): test_train.py::test_train: test_train.py::train_step traces: 2 → 1; "
            "test_train.py::train_step compiles: 2 → 1",
            "::notice file=test_train.py,line=*,title=jaxtrace_nb%3A "
            "test_train.py%3A%3Atest_train::fewer than the "
            "baseline: test_train.py::train_step traces: 2 → 1; *",
        ]
    )
    case = ET.parse(junit).getroot().find(".//testcase[@name='test_train']")
    assert [p.get("value") for p in case.iter("property") if p.get("name") == "jaxtrace.fewer"] == [
        "test_train.py::train_step traces: 2 → 1",
        "test_train.py::train_step compiles: 2 → 1",
    ]


def test_new_tests_swallowed_errors_and_removed_tests(pytester):
    pytester.makeconftest(_CONFTEST)
    tests = """
import jax
import jax.numpy as jnp
import jaxtrace_nb


@jax.jit
def f(x):
    return x + 1


def test_known():
    f(jnp.ones(2))


def test_other():
    f(jnp.ones(3))


def test_swallows():
    f(jnp.ones(5))
    SWALLOWED
"""
    pytester.makepyfile(test_a=tests.replace("SWALLOWED", "pass"))
    _run(pytester, "--jaxtrace-baseline=b.json", "--jaxtrace-baseline-update").assert_outcomes(
        passed=3
    )
    swallowed = "try:\n        f(jnp.ones(6))\n    except jaxtrace_nb.RetraceError:\n        pass"
    pytester.makepyfile(
        test_a=tests.replace("SWALLOWED", swallowed)
        + """

def test_new():
    f(jnp.ones(4))
"""
    )
    result = _run(pytester, "--jaxtrace-baseline=b.json")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            _lit(
                "E*RetraceError: f (*) was traced once, past its baseline of 0 (b.json has "
                "no entry for this test: run pytest with "
                "--jaxtrace-baseline-update to add it)."
                " Trace #1 cause: first.*"
            )
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_swallows _*",
            _lit(
                "E*RetraceError: f (*) was traced twice, past its baseline of 1 in b.json. "
                "Trace #2 cause: shape at `x`: f32[5] → f32[6].* (raised "
                "inside the test, "
                "which caught it; baseline b.json; *"
            ),
        ]
    )

    # The update drops a test that no longer exists, keeps one deselected, and leaves one that
    # failed.
    pytester.makepyfile(
        test_a=tests.replace("def test_other", "def test_renamed").replace("SWALLOWED", "pass")
        + """

def test_fails():
    f(jnp.ones(9))
    assert False
"""
    )
    result = _run(
        pytester, "--jaxtrace-baseline=b.json", "--jaxtrace-baseline-update", "-k", "not known"
    )
    result.assert_outcomes(passed=2, failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "*1 test(s) that no longer exist removed; not updated (they did not pass): "
            "test_a.py::test_fails"
        ]
    )
    assert sorted(json.loads((pytester.path / "b.json").read_text())["tests"]) == [
        "test_a.py::test_known",
        "test_a.py::test_renamed",
        "test_a.py::test_swallows",
    ]


def test_usage_errors(pytester):
    result = _run(pytester, "--jaxtrace-baseline-update")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jaxtrace-baseline-update needs --jaxtrace-baseline=PATH*"])
    (pytester.path / "bad.json").write_text("[1, 2]")
    result = _run(pytester, "--jaxtrace-baseline=bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--jaxtrace-baseline=bad.json: *bad.json is not a jaxtrace_nb baseline*"]
    )
    result = _run(pytester, "--help")
    result.stdout.fnmatch_lines(["*--jaxtrace-baseline=PATH*", "*--jaxtrace-baseline-update*"])


# ---------------------------------------------------------------- failures at the user's line
_THREE_JITS = """
import equinox as eqx
import jax
import jax.numpy as jnp
from flax import nnx


class Net(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(2, 2, rngs=rngs)

    def __call__(self, x):
        return self.linear(x)


@nnx.jit
def forward(model, x):
    return model(x)


@eqx.filter_jit
def efn(x):
    return x * 2


@jax.jit
def jfn(x):
    return x * 2


def test_nnx():
    model = Net(nnx.Rngs(0))
    forward(model, jnp.ones((1, 2)))
    forward(model, jnp.ones((3, 2)))  # nnx line


def test_equinox():
    efn(jnp.ones(2))
    efn(jnp.ones(3))  # equinox line


def test_jax():
    jfn(jnp.ones(2))
    jfn(jnp.ones(3))  # jax line
"""


@pytest.mark.parametrize("filtering", ["auto", "off"])
def test_guard_failures_end_at_the_users_line(pytester, filtering):
    """`jax.jit`, `eqx.filter_jit` and `nnx.jit`: the traceback ends at the test's call, with no
    library frame (nnx.jit's wrapper, JAX's own when its filtering is off) and no JAX banner."""
    pytester.makeconftest(_CONFTEST)
    source = pytester.makepyfile(test_three=_THREE_JITS)
    result = _run(pytester, "--jaxtrace-max-traces=1", env={"JAX_TRACEBACK_FILTERING": filtering})
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    for test, (function, leaf) in {
        "nnx": ("forward", "x"),
        "equinox": ("efn", "x"),
        "jax": ("jfn", "x"),
    }.items():
        line = _line_of(source, f"# {test} line")
        section = out[out.index(f"_ test_{test} _") :]
        section = section[: section.index(f"test_three.py:{line}: RetraceError") + 1]
        assert (
            section.count("\n>") == 1
            and f"# {test} line" in section.split("\n>")[1].splitlines()[0]
        ), section
        assert f"E       jaxtrace_nb.RetraceError: {function} (" in section
        assert f"this is its trace #2 in the session. Cause: shape at `{leaf}`" in section
        for hidden in ("compilation.py", "site-packages", "For simplicity", "args = "):
            assert hidden not in section, (hidden, section)
        assert package_frames(section) == [], section


def test_retrace_error_is_public():
    assert jaxtrace_nb.RetraceError.__module__ == "jaxtrace_nb"
    assert repr(jaxtrace_nb.RetraceError("x")) == "RetraceError('x')"
    error = jaxtrace_nb.RetraceError("f was traced 2 times", event=Event(function="f"))
    error.add_note(
        "--------------------\nFor simplicity, JAX has removed its internal frames from the "
        "traceback of the following exception. Set JAX_TRACEBACK_FILTERING=off to include these."
    )
    error.add_note("(a note of the user's)")
    assert error.__notes__ == ["(a note of the user's)"] and error.event.function == "f"
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is jaxtrace_nb.RetraceError and str(again) == "f was traced 2 times"


# ---------------------------------------------------------------- the test column
def test_every_event_recorded_under_the_plugin_names_its_test(pytester):
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(
        test_cols="""
import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._recording._session import get_session


@jax.jit
def f(x, y=None):
    return x + 1


@pytest.fixture
def warm():
    f(jnp.ones(11))


def test_one(warm):
    f(jnp.ones(2))
    f(jnp.ones(3))


@pytest.mark.parametrize("n", [4])
def test_two(n):
    f(jnp.ones(n))
    f(jnp.ones(n), y={"b": jnp.ones(2), "a": 1})


def test_log_has_the_column():
    tests = {e.test for e in get_session().log.events() if not e.internal}
    assert tests == {"test_cols.py::test_one", "test_cols.py::test_two[4]", None}, tests
"""
    )
    pytester.makepyfile(
        test_early="""
import jax
import jax.numpy as jnp

jax.jit(lambda x: x * 3)(jnp.ones(1))  # at collection: no test runs


def test_nothing():
    pass
"""
    )
    for name in ("report.txt", "report.html"):
        result = _run(pytester, f"--jaxtrace-report={name}")
        result.assert_outcomes(passed=4)
    text = (pytester.path / "report.txt").read_text()
    assert (
        "f #2–#4 trace in test_cols.py::test_one, test_cols.py::test_two[4]: ×3 shape at `x`: "
        in text
    ), text
    assert "f #5 trace in test_cols.py::test_two[4]: structure at `y`" in text, text
    page = (pytester.path / "report.html").read_text()
    assert (
        "<th class='jtnb-c-tests' title='the pytest tests (node ids) whose calls traced'>test</th>"
        in page
    )
    assert "<td class='jtnb-c-tests'>test_cols.py::test_two[4]</td>" in page
    data = json.loads(re.search(r"id='jtnb-data'>(.*?)</script>", page, re.S).group(1))
    row = next(r for r in json.loads(data["state"]["rows_json"]) if r["function"] == "f")
    assert (
        "test_cols.py::test_one" in row["search"] and "test_cols.py::test_two[4]" in row["search"]
    )


# ---------------------------------------------------------------- pure parts
def _event(**fields) -> Event:
    base = dict(
        function="step",
        key="/repo/src/train.py::step",
        location="/repo/src/train.py:3",
        kind="trace",
        internal=False,
        trace_number=1,
        cause="first",
    )
    return Event(**{**base, **fields})


def test_functions_are_named_alike_on_every_machine():
    assert _baseline.function_name(_event(), "/repo") == "src/train.py::step"
    assert (
        _baseline.function_name(_event(key="/home/ci/repo/src/train.py::step"), "/home/ci/repo")
        == "src/train.py::step"
    )
    site = "/opt/venv/lib/python3.11/site-packages/flax/linen/module.py"
    assert (
        _baseline.function_name(
            _event(function="Module.apply", key=f"{site}::Module.apply"), "/repo"
        )
        == "flax/linen/module.py::Module.apply"
    )
    named = _event(function="<lambda at 0x7f3a2b1c>", key="/repo/t.py::<lambda at 0x7f3a2b1c>")
    assert _baseline.function_name(named, "/repo") == "t.py::<lambda at 0x…>"


def test_counts_and_the_file_text(tmp_path):
    events = [
        _event(),
        _event(compile_s=0.1),
        _event(kind="compile", cause="sharding"),
        _event(cache_hit=True, trace_number=2),
        _event(internal=True, function="add", key="/x.py::add"),
    ]
    assert _baseline.counts(events, "/repo") == {"src/train.py::step": {"compiles": 3, "traces": 3}}
    baseline = _baseline.Baseline(str(tmp_path / "b.json"), "/repo")
    assert baseline.tests == {} and not baseline.knows("t.py::a")
    baseline.write(
        {"t.py::b": {"z.py::f": {"traces": 2, "compiles": 2}}, "t.py::a": {}, "t.py::c": {}}
    )
    text = (tmp_path / "b.json").read_text()
    assert text.endswith("}\n") and json.loads(text)["tests"] == {
        "t.py::b": {"z.py::f": {"compiles": 2, "traces": 2}}
    }
    assert '   "z.py::f": {"compiles": 2, "traces": 2}\n' in text
    again = _baseline.Baseline(str(tmp_path / "b.json"), "/repo")
    again.write({"t.py::a": {"f.py::g": {"traces": 1, "compiles": 1}}}, forget={"t.py::b"})
    assert sorted(json.loads((tmp_path / "b.json").read_text())["tests"]) == ["t.py::a"]
    assert _baseline.fewer(
        {"f": {"traces": 1, "compiles": 2}}, {"f": {"traces": 2, "compiles": 2}, "g": {"traces": 1}}
    ) == ["f traces: 2 → 1", "g traces: 1 → 0"]


def test_github_annotations_are_escaped():
    assert github_annotation(
        "error", "tests/a,b.py", 12, "jaxtrace_nb: t.py::x", "50% done\nnext: line"
    ) == (
        "::error file=tests/a%2Cb.py,line=12,title=jaxtrace_nb%3A t.py%3A%3Ax::50%25 done%0Anext: "
        "line"
    )


def test_the_plugin_module_runs_from_this_checkout():
    assert os.path.dirname(jaxtrace_nb.__file__) == PACKAGE
