"""The benchmark script runs end to end in quick mode and reports every section (no timings
asserted)."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def test_quick_benchmark_reports_every_section(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (json_path,) = tmp_path.glob("*-quick.json")
    assert json_path.with_suffix(".txt").read_text().startswith("jaxtrace_nb benchmarks (quick)")
    results = json.loads(json_path.read_text())
    sections = results["sections"]
    assert set(sections) == {"hot", "trace", "log", "widget", "gpu", "cache"}
    assert not [name for name, s in sections.items() if "error" in s]

    hot = sections["hot"]
    assert hot["never_loaded_clean"]  # the baseline processes never imported jaxtrace_nb
    assert {"jax.jit f32[]", "eqx.filter_jit MLP module"} <= set(hot["cases"])

    trace = sections["trace"]
    assert trace["modes"][:2] == ["baseline", "recorded"] and {"explain", "eqx_assert"} <= set(
        trace["modes"]
    )
    assert (
        "recorded_timed" in trace["modes"]
    )  # our own seconds come from a mode apart from the ratios
    for w in trace["workloads"]:  # the probe recorded every retrace of the workload, in every round
        assert w["recorded_top_traces"] == [w["traces"]] * w["rounds"], w["name"]
        assert w["self_per_trace_s"]["total_s"]["n"] > 0
    assert any(w["jit"] == "equinox" for w in trace["workloads"])
    assert trace["self_profile"]["top_own_time"]

    assert [row["events"] for row in sections["log"]["sizes"]] == [1_000, 10_000]
    assert sections["widget"]["status"] == "ok" or sections["widget"]["status"].startswith(
        "pending"
    )
    gpu = sections["gpu"]
    assert gpu["status"] == "ok" or gpu["status"].startswith("not run: no GPU")
    assert [m["max_abs_diff_vs_jax_s"] for m in gpu["models"]] == [
        0.0,
        0.0,
    ]  # recorded = JAX's own seconds

    cache = sections["cache"]  # every compile of a recorded round read, and its miss worded
    assert cache["faults"] == {} and all(n > 0 for n in cache["verdicts"]["misses"])
    assert all(n > 0 for n in cache["verdicts"]["hits"]) and all(
        n > 0 for n in cache["verdicts"]["explained"]
    )
    assert cache["key_cost"][
        "parts_read"
    ]  # the key's cost timed with our hash in JAX's place, and without
    assert cache["warm_start"]["hits"] == [
        4
    ]  # every compile of a recorded warm start served by the cache
    assert (
        cache["blocks"]["all_in_ratio"]["n"] == 2
    )  # blocks of compiles back to back, each mode twice

    figure_sections = {f["section"] for f in results["figures"]}
    assert figure_sections == {
        "1 hot path",
        "2 trace path",
        "3 log scale",
        "4 widget",
        "5 GPU",
        "6 persistent cache",
    }
    assert all(f["met"] in (True, False, None) for f in results["figures"])


def test_the_structure_counts_read_the_whole_package(tmp_path):
    """`benchmarks/structure.py` (issue 44's before / after counts) reads every module and finds
    the import chain that tests/test_imports.py allows."""
    out = tmp_path / "structure.txt"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT.parent / "structure.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    counts = dict(
        line.split(": ", 1) for line in out.read_text().splitlines() if not line.startswith("#")
    )
    modules = sum(1 for p in (SCRIPT.parent.parent / "jaxtrace_nb").rglob("*.py"))
    assert counts["modules"] == str(modules) and proc.stdout.startswith("modules: ")
    chain = counts["longest import chain"].split(": ", 1)[1].split(" -> ")
    assert counts["longest import chain"].startswith(f"{len(chain)} modules") and len(chain) >= 3
