"""Mutation testing of the pure modules: run mutmut and commit its score and every surviving mutant.

    pip install -e ".[mutation]"              # mutmut 3.8.1 (and pytest)
    python benchmarks/mutation.py             # every module in [tool.mutmut] only_mutate
    python benchmarks/mutation.py --modules _report,_rows     # a shard: some modules only
    python benchmarks/mutation.py --sample _diagnosis=40,_values=20   # of these, a seeded sample
    python benchmarks/mutation.py --results-only  # write the report of the last run again

mutmut (configured in pyproject.toml, ``[tool.mutmut]``) copies the package to ``mutants/``, makes
each mutant of the modules in ``only_mutate`` a function it can switch on, runs the tests named in
``pytest_add_cli_args_test_selection`` once to learn which tests reach which function, then, for
each mutant, forks a worker that runs only those tests (``-x``). A mutant is *killed* when a test
fails, *survives* when they all pass; "no tests" means no selected test reaches its function.

The report, ``benchmarks/results/mutation-<date>-<commit>.txt``, names the command, the commit (and
whether the working tree differed from it), mutmut's version, the score (killed / (killed +
survived + no tests + timeouts + suspicious)) per module and in all, and every mutant that was not
killed with its diff. Why each remaining survivor is harmless is argued in the report's last part,
kept by hand in ``benchmarks/mutation_equivalent.txt`` (mutant name: reason).

Speed, on 2 shared cores: about 1 s a mutant whose first test fails, and the selected tests' whole
time for a survivor. Two settings keep a worker cheap: ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (no
third-party pytest plugins load in each worker) and
``-p no:unraisableexception -p no:threadexception`` (which otherwise run ``gc.collect()`` five times
a test run over a heap holding JAX).
"""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
EQUIVALENT = ROOT / "benchmarks" / "mutation_equivalent.txt"
NOT_KILLED = ("survived", "no tests", "timeout", "suspicious", "segfault")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def _environment() -> dict:
    env = dict(os.environ)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def _mutmut(arguments: list[str], max_children: int | None) -> None:
    command = [
        sys.executable,
        "-m",
        "mutmut",
        "run",
        *(["--max-children", str(max_children)] if max_children else []),
        *arguments,
    ]
    done = subprocess.run(command, cwd=ROOT, env=_environment(), stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"mutmut run exited with {done.returncode}")


def chosen(modules: list[str] | None, sample: dict[str, int], seed: int) -> list[str]:
    """The mutants to run: every mutant of `modules` (default: every configured module), except that
    of a module in `sample` only that many, drawn with `seed` from its mutants in name order."""
    import random

    by_module: dict[str, list[str]] = {}
    for name in sorted(verdicts()):
        by_module.setdefault(_module(name), []).append(name)
    names = []
    for module, mutants in sorted(by_module.items()):
        if modules and module not in modules:
            continue
        n = sample.get(module)
        names += (
            sorted(random.Random(f"{seed}:{module}").sample(mutants, min(n, len(mutants))))
            if n
            else mutants
        )
    return names


def run(
    modules: list[str] | None, sample: dict[str, int], seed: int, max_children: int | None
) -> tuple:
    """Run mutmut from scratch: generate every mutant and learn which tests reach which function
    (a run that tests one mutant), then test the chosen ones; (command, seconds, names)."""
    import shutil

    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    start = time.perf_counter()
    _mutmut(
        ["jaxtrace_nb._views._report.x_function_id__mutmut_1"], max_children
    )  # (mutmut wants one mutant)
    names = chosen(modules, sample, seed)
    _mutmut(names, max_children)
    return ["mutmut", "run", f"<{len(names)} mutants>"], time.perf_counter() - start, names


def verdicts() -> dict[str, str]:
    """mutant name -> mutmut's status, from mutants/*.meta of the last run."""
    os.chdir(ROOT)
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    out = {}
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            out[name] = status_by_exit_code[code]
    return out


def _diff(name: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    lines = get_diff_for_mutant(name).splitlines()
    return "\n".join(line for line in lines[2:] if line.startswith(("+", "-", "@@")))


def _module(name: str) -> str:
    return name.split(".")[1]


def _equivalent() -> dict[str, str]:
    if not EQUIVALENT.exists():
        return {}
    reasons = {}
    for line in EQUIVALENT.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition(": ")
            reasons[name.strip()] = reason.strip()
    return reasons


def report(command: list[str], seconds: float | None, names: list[str], how: str) -> Path:
    every = verdicts()
    status = {n: every[n] for n in names}
    total = Counter(_module(n) for n in every)
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    today = datetime.date.today().isoformat()
    path = RESULTS / f"mutation-{today}-{commit}.txt"
    counts = Counter(status.values())
    by_module: dict[str, Counter] = {}
    for name, s in status.items():
        by_module.setdefault(_module(name), Counter())[s] += 1

    def score(c: Counter) -> str:
        judged = c["killed"] + sum(c[s] for s in NOT_KILLED)
        return f"{c['killed'] / judged:.1%} ({c['killed']} of {judged})" if judged else "-"

    reasons = _equivalent()
    lines = [
        f"jaxtrace_nb mutation testing — {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"command: python benchmarks/mutation.py {how} ({' '.join(command)}, with "
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1)",
        f"commit {commit}{' + uncommitted changes to tracked files' if dirty else ''}; "
        f"mutmut {_mutmut_version()}; python {sys.version.split()[0]}"
        + (f"; wall {seconds:.0f} s" if seconds is not None else ""),
        "",
        f"score (killed / mutants judged): {score(counts)}",
        "verdicts: " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items())),
        "",
        "| module | mutants run (of all) | killed | survived | no tests | timeout | score |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for module, c in sorted(by_module.items()):
        lines.append(
            f"| {module} | {sum(c.values())} (of {total[module]}) | {c['killed']} | "
            f"{c['survived']} | {c['no tests']} | {c['timeout']} | {score(c)} |"
        )
    lines += ["", "Mutants not killed (mutmut's diff of the function: - original, + mutant):", ""]
    for name, s in sorted(status.items()):
        if s in NOT_KILLED:
            lines.append(f"== {name}: {s}" + (f" — {reasons[name]}" if name in reasons else ""))
            lines.append(_diff(name))
            lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--modules", help="comma-separated module names (e.g. _report,_rows): a shard"
    )
    parser.add_argument(
        "--sample",
        default="",
        help="MODULE=N,...: run only N mutants of MODULE, drawn with --seed (default: all)",
    )
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--max-children", type=int, help="mutmut workers (default: the CPU count)")
    parser.add_argument("--results-only", action="store_true", help="report the last run again")
    args = parser.parse_args(argv)
    modules = args.modules.split(",") if args.modules else None
    sample = {
        m: int(n) for m, _, n in (part.partition("=") for part in args.sample.split(",") if part)
    }
    how = " ".join(argv)
    if args.results_only:
        names = chosen(modules, sample, args.seed)
        command, seconds = ["mutmut", "run", f"<{len(names)} mutants>"], None
    else:
        command, seconds, names = run(modules, sample, args.seed, args.max_children)
    path = report(command, seconds, names, how)
    print(path.relative_to(ROOT))
    print("\n".join(path.read_text(encoding="utf-8").splitlines()[:6]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
