"""Every figure in README.md and docs/*.md comes from a committed results file, and every guarantee
of docs/safety.md names a test that CI runs.

What a figure is, and what makes a results file its source, is `benchmarks/figures.py`'s docstring.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _figures_module():
    name = "_jaxtrace_figures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "figures.py")
        sys.modules[name] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_every_figure_comes_from_a_committed_run():
    figures = _figures_module()
    found = figures.figures()
    assert len(found) >= 100, (
        "docs/performance.md alone states over a hundred figures: is the reader broken?"
    )
    missing = [f"{f.document}:{f.line}: {f.text}: {f.problem}" for f in found if f.source is None]
    assert not missing, (
        "figures without a committed results file (see benchmarks/figures.py):\n"
        + "\n".join(missing)
    )


def test_the_figure_rules_on_a_small_tree(tmp_path):
    """The rules themselves: a figure needs a cited file that exists, names its command and commit,
    and holds the number; bounds, versions, code and example transcripts are not figures."""
    figures = _figures_module()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    (results / "run-abc1234.txt").write_text(
        "benchmarks, commit abc1234\ncommand: python benchmarks/run.py\n| a | 1.044 (0.743–1.445) "
        "| 4.39 µs |\n"
        "2434 tests\n"
    )
    (results / "bare.txt").write_text("no header here\n1.044\n")
    (tmp_path / "README.md").write_text(
        "# Title\n\nJAX 0.10.2 and jaxlib 0.8.0 are versions. A call takes 5.5 µs.\n\n"
        "```text\ndone in 9.999 s\n```\n\n    indented 7.777 s\n\nInline `12.345 s` is code.\n"
    )
    (tmp_path / "docs" / "perf.md").write_text(
        "# Perf\n\nSource: benchmarks/results/run-abc1234.txt\n\n"
        "| case | ratio | time |\n|---|---|---|\n| a | 1.044 | 4.39 µs |\n| b | 1.045 | 1 s |\n\n"
        "Goal ≤ 1.05, under 1 s, at most max(0.05 s,\n2 %) of it.\n\n"
        "| suite | tests | report |\n|---|---|---|\n| x | 2,434 | "
        "benchmarks/results/run-abc1234.txt |\n"
        "| y | 2,435 | benchmarks/results/missing.txt |\n\n"
        "## Other\n\nSource: benchmarks/results/bare.txt\n\nIt took 1.044 s.\n"
    )
    got = {(f.document, f.text): f.source or f.problem for f in figures.figures(tmp_path)}
    assert got == {
        ("README.md", "5.5 µs"): "its section and table row name no benchmarks/results/ file",
        ("docs/perf.md", "1.044"): "run-abc1234.txt",
        ("docs/perf.md", "4.39 µs"): "run-abc1234.txt",
        (
            "docs/perf.md",
            "1.045",
        ): "missing.txt does not exist; run-abc1234.txt does not hold 1.045",
        ("docs/perf.md", "1 s"): "missing.txt does not exist; run-abc1234.txt does not hold 1",
        ("docs/perf.md", "2,434"): "run-abc1234.txt",
        ("docs/perf.md", "2,435"): "missing.txt does not exist",
        ("docs/perf.md", "1.044 s"): "bare.txt: its header names no command",
    }


def test_the_figure_script_runs_as_documented():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "figures.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\d+ figure\(s\), 0 without a source", done.stderr)


def _guarantee_rows(text: str) -> list[tuple[str, str]]:
    """(guarantee, checked by) of each row of the guarantee tables (the sections before the manual
    run)."""
    rows = []
    for line in text.split("## Other projects' test suites")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2 and cells[1] not in ("checked by", "---"):
            rows.append((cells[0][:60], cells[1]))
    return rows


def test_every_guarantee_names_a_test_that_ci_runs():
    """docs/safety.md says each guarantee is checked by a test that CI runs: each row names test
    files (and tests) that exist under tests/, which `python -m pytest` collects (`testpaths`) and
    `.ci/run` runs; the one manual run is said to be one."""
    text = (ROOT / "docs" / "safety.md").read_text(encoding="utf-8")
    rows = _guarantee_rows(text)
    assert len(rows) >= 10
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'testpaths = ["tests"]' in pyproject
    assert "README_TEST='python -m pytest'" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for guarantee, checked_by in rows:
        named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", checked_by)
        assert named, f"{guarantee!r}: no test named in {checked_by!r}"
        for path, test in named:
            source = ROOT / path
            assert source.exists(), f"{guarantee!r}: {path} does not exist"
            if test:
                assert re.search(rf"^def {test}\(", source.read_text(encoding="utf-8"), re.M), (
                    f"{guarantee!r}: {path} has no test {test}"
                )
            else:
                assert Path(path).name == "conftest.py" or re.search(
                    r"^def test_", source.read_text(encoding="utf-8"), re.M
                ), f"{path} holds no test"
    manual = text.split("## Other projects' test suites")[1]
    assert "Not run in CI" in manual
