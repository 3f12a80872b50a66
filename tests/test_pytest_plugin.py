"""The pytest plugin (entry point `jaxtrace`): inert unless asked; the guard and the report.

Inner sessions run with the real `pytester`, in subprocesses (JAX state is process-global).
"""

import pathlib

import pytest

pytest_plugins = ["pytester"]


def _lit(pattern: str) -> str:
    """`pattern` for fnmatch_lines with its brackets literal (``f32[3]``); `*` stays a wildcard."""
    return "".join("[[]" if c == "[" else "[]]" if c == "]" else c for c in pattern)


_CONFTEST = """
import os
os.environ.setdefault("JAX_PLATFORMS", "cpu")
"""

_GUARDED = """
import os
import sys

sys.path.insert(0, TESTS_DIR)
from _support import package_frames_on_cache_hits

import jax
import jax.numpy as jnp
import pytest

import jaxtrace_nb
from jaxtrace_nb._recording._session import get_session


@jax.jit
def train_step(x):
    return x * 2


def test_retraces():
    train_step(jnp.ones(3))
    train_step(jnp.ones(4))   # the retrace: the guard stops it here
    print("NOT REACHED")


def test_no_retrace():
    for _ in range(3):
        train_step(jnp.ones(7))


@pytest.mark.jaxtrace(max_traces=3)
def test_marker_allows_three():
    for n in (10, 11, 12):
        train_step(jnp.ones(n))


def test_swallowed():
    try:
        train_step(jnp.ones(20))
        train_step(jnp.ones(21))
    except Exception:
        pass


def test_cache_hits_run_no_package_python():
    @jax.jit
    def hot(x, y):
        return x * y

    x = jnp.ones(3)
    hot(x, x).block_until_ready()
    frames = package_frames_on_cache_hits(lambda: hot(x, x))
    assert get_session().recording
    assert frames == []
"""


def test_guard_and_report(pytester):
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(
        test_guarded=_GUARDED.replace("TESTS_DIR", repr(str(pathlib.Path(__file__).parent)))
    )
    report = pytester.path / "traces.html"
    result = pytester.runpytest_subprocess(
        "--jaxtrace-max-traces=1",
        f"--jaxtrace-report={report}",
        "-p",
        "no:cacheprovider",
        timeout=180,
    )
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    # The failure names the function, the leaf, before -> after and the hint, at the test's own
    # line.
    result.stdout.fnmatch_lines(
        [
            "*_ test_retraces _*",
            ">*train_step(jnp.ones(4))*the retrace*",
            _lit(
                "E*RetraceError: train_step (*test_guarded.py:*) was traced 2 times, past "
                "max_traces=1.*`x`*f32[3] → f32[4]*Hint: *"
            ),
            "*(jaxtrace_nb: limit set by --jaxtrace-max-traces=1)",
        ]
    )
    assert "NOT REACHED" not in out
    result.stdout.fnmatch_lines(
        [
            "*_ test_swallowed _*",
            _lit(
                "E*RetraceError: train_step*traced 2 times, past max_traces=1*`x`*f32[20] → "
                "f32[21]*(raised inside the test, which caught it; limit set by "
                "--jaxtrace-max-traces=1)"
            ),
        ]
    )
    result.stdout.fnmatch_lines([f"jaxtrace_nb: *{report}*"])
    assert report.exists() and "train_step" in report.read_text(encoding="utf-8")


_TWO_FUNCTIONS = """
import jax
import jax.numpy as jnp


@jax.jit
def shared(x):
    return x + 1


@jax.jit
def only_in_first(x):
    return x * 3


def test_first():
    shared(jnp.ones(3))
    only_in_first(jnp.ones(2))


def test_second():
    shared(jnp.ones(4))


def test_third():
    shared(jnp.ones(5))
"""


@pytest.mark.parametrize("suffix", ["txt", "html"])
def test_every_report_format_has_a_test_column(pytester, suffix):
    """The session's report names, beside each function, the tests whose calls traced it: a function
    traced once, in one test, included (the groups name a test only beside a retrace)."""
    import json
    import re

    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(test_two=_TWO_FUNCTIONS)
    report = pytester.path / f"traces.{suffix}"
    result = pytester.runpytest_subprocess(
        f"--jaxtrace-report={report}", "-p", "no:cacheprovider", timeout=180
    )
    result.assert_outcomes(passed=3)
    text = report.read_text(encoding="utf-8")
    first, second, third = (f"test_two.py::test_{n}" for n in ("first", "second", "third"))
    expected = {"only_in_first": first, "shared": f"{first}, {second} +1 more"}
    if suffix == "txt":
        header, rule, *body = text.split("\n\n")[1].splitlines()
        assert header.split()[-1] == "test" and len(rule) == len(header)
        start = header.index("test", header.index("leaf"))
        rows = {line.split()[0]: line[start:].strip() for line in body}
        assert rows == expected, text
    else:
        static = text[text.index("jtnb-summary") :]
        static = static[: static.index("</table>")]
        assert (
            "<th class='jtnb-c-tests' title='the pytest tests (node ids) whose calls traced "
            "it'>test</th>" in static
        )
        cells = re.findall(
            r"<td class='jtnb-c-function'><code>(\w+)</code></td><td class='jtnb-c-tests'"
            r"(?: title='([^']*)')?>([^<]*)</td>",
            static,
        )
        assert {f: shown for f, _, shown in cells} == expected
        assert {f: title for f, title, _ in cells} == {
            "only_in_first": "",
            "shared": f"{first}\n{second}\n{third}",
        }
        data = text[text.index("<script type='application/json' id='jtnb-data'>") :].split(">", 1)[
            1
        ]
        state = json.loads(data[: data.index("</script>")])["state"]
        widget = {
            r["function"]: (r["tests"], r["full"]["tests"])
            for r in json.loads(state["rows_json"])
            if not r["hidden"]
        }
        assert widget == {
            "only_in_first": (first, ""),
            "shared": (expected["shared"], f"{first}\n{second}\n{third}"),
        }


def test_marker_alone_guards_only_its_test(pytester):
    pytester.makeconftest(_CONFTEST)
    pytester.makepyfile(
        test_marked="""
import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._recording._session import get_session


@jax.jit
def step(x, n):
    return x * n


def test_unmarked_retraces_freely():
    for n in range(1, 6):
        step(jnp.ones(n), 1)
    assert not get_session().recording   # nothing recorded outside a marked test


@pytest.mark.jaxtrace(max_traces=1)
def test_marked():
    assert get_session().recording
    step(jnp.ones(30), 1)
    step(jnp.ones(30), 2)  # `n` is traced: no retrace
    step(jnp.ones(31), 1)  # a new shape of `x`: past the limit


@pytest.mark.jaxtrace(max_traces=2)
def test_marked_within_limit():
    step(jnp.ones(40), 1)
    step(jnp.ones(41), 1)


@pytest.mark.jaxtrace
def test_bare_marker_means_one():
    step(jnp.ones(50), 1)
    step(jnp.ones(51), 1)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_bare_marker_means_one _*",
            _lit("E*RetraceError: step (*) was traced 2 times, past max_traces=1.*"),
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*_ test_marked _*",
            _lit(
                "E*RetraceError: step (*) was traced 2 times, past max_traces=1.*`x`*f32[30] → "
                "f32[31]*"
            ),
            "*(jaxtrace_nb: limit set by @pytest.mark.jaxtrace(max_traces=1))",
        ]
    )


def test_inert_without_options_or_markers(pytester):
    pytester.makepyfile(
        test_plain="""
import sys


def test_plugin_is_loaded_and_idle(request):
    manager = request.config.pluginmanager
    assert manager.has_plugin("jaxtrace")             # the pytest11 entry point
    assert not manager.has_plugin("jaxtrace-active")  # nothing asked for it
    assert "jax" not in sys.modules                   # the plugin imported no JAX


def test_marker_is_registered(pytestconfig):
    assert any(line.startswith("jaxtrace(max_traces=N)") for line in pytestconfig.getini("markers"))
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--strict-markers", timeout=120
    )
    result.assert_outcomes(passed=2)


def test_help_and_bad_values(pytester):
    result = pytester.runpytest_subprocess("--help", timeout=120)
    result.stdout.fnmatch_lines(["*--jaxtrace-max-traces=N*", "*--jaxtrace-report=PATH*"])
    result = pytester.runpytest_subprocess("--jaxtrace-max-traces=0", timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--jaxtrace-max-traces must be at least 1, not 0*"])


def test_our_own_session_is_not_recording(request):
    """Merely installed, the plugin changes nothing in this very test session."""
    if request.config.getoption("jaxtrace_max_traces") is not None or request.config.getoption(
        "jaxtrace_report"
    ):
        pytest.skip("this session was started with a jaxtrace option")
    assert request.config.pluginmanager.has_plugin("jaxtrace")
    assert not request.config.pluginmanager.has_plugin("jaxtrace-active")
