"""The sample outputs of README.md, docs/samples.md and docs/pytest.md are what their programs print
now (`docs/readme_samples.py` writes them): each sample run again, compared with its block with
every time masked."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "readme_samples", Path(__file__).resolve().parents[1] / "docs" / "readme_samples.py"
)
samples = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(samples)


def test_the_mask_hides_times_and_nothing_else():
    said = (
        "%%tracewatch: 2 trace(s), 2 compile(s); 0.086 s = trace 0.015 + lower 0.011 + XLA compile "
        "0.059\n"
        "step_fn                           2        2         11    0.015    0.011     0.059 "
        "structure    x\n"
        "over 0.33 s of wall time (closest earlier key: the run of 2026-11-25 13:48:17, pid 11366 "
        "on vm)\n"
        "done 0.9901339411735535 · `0.001` → `0.0003`"
    )
    slower = (
        said.replace("0.086", "12.345")
        .replace("0.059", "10.318")
        .replace("0.33 s", "4.1 s")
        .replace("2026-11-25 13:48:17, pid 11366 on vm", "2027-01-02 03:04:05, pid 7 on ci-runner")
    )
    assert samples.masked(said) == samples.masked(slower)
    for edit in [
        ("2 trace(s)", "3 trace(s)"),
        ("  11  ", "  12  "),
        ("structure", "shape    "),
        ("0.9901339411735535", "0.9901339411735536"),
        ("`0.0003`", "`0.0004`"),
    ]:
        assert samples.masked(said) != samples.masked(said.replace(*edit)), edit


def test_every_sample_is_what_its_program_prints():
    import jax

    if jax.__version__ != samples.SAMPLES_JAX:
        pytest.skip(
            f"the README's samples were made with JAX {samples.SAMPLES_JAX}; {jax.__version__} "
            "gives its own equation counts and internal functions (CI's newest environment runs "
            "this check)"
        )
    names = []
    for document in samples.DOCUMENTS:
        for name, (said, now) in samples.produce(document.read_text(encoding="utf-8")).items():
            names.append(name)
            assert samples.masked(said) == samples.masked(now), (
                f"{document.name} sample {name!r} is stale: run `python docs/readme_samples.py`\n"
                f"--- {document.name}\n{said}--- now\n{now}"
            )
    assert sorted(names) == sorted(samples.SAMPLES)
