"""Peer suites: run JAX's, Equinox's, Optax's and Flax NNX's own tests without and with jaxtrace_nb
recording.

    python -m benchmarks.peer_suites --jax-src /tmp/peer/jax --equinox-src /tmp/peer/equinox \\
        --optax-src /tmp/peer/optax --flax-src /tmp/peer/flax [--only jax|equinox|optax|flax] \\
        [--files F ...] [-k EXPR] [--timeout S] [--per-file] [--repeat-baseline] [--out PATH]

Run from the repository root. Each *-src is a source checkout of that project at the tag of the
installed version (jax-vX.Y.Z for JAX, vX.Y.Z for Equinox and Optax); only its test files are
used, never its package: tests import the installed jax / equinox / optax / flax. This repository
never holds their code. (Flax: the tag nearest the installed version, e.g. v0.12.7 for 0.12.8 where
the mirror has no v0.12.8.) A checkout can be as small as
``git archive jax-v0.10.2 tests conftest.py pyproject.toml | tar -x -C /tmp/peer/jax``.

Every unit (a pytest session over some test files) runs twice, one after the other, in fresh
subprocesses: without recording, then with ``jaxtrace_nb.start()`` active for the whole session
(``benchmarks/_peer_plugin.py`` is loaded in both; ``JAXTRACE_PEER_RECORD=1`` turns recording
on). The report lists, per test file, the tests whose outcome differs (with the recorded run's
failure), and per unit the events recorded, ``jaxtrace_nb.faults()`` and ``dropped()``, wall
times, and where jax was imported from. ``--repeat-baseline`` runs the unrecorded session a
second time and marks tests that differ between the two unrecorded runs as flaky.
``--out PATH`` writes the report to PATH and a JSON to PATH with the suffix ``.json``; pytest's
output of every run goes to the folder ``PATH.logs`` (or a temporary folder, printed).

Default selection:
  jax      tests/api_test.py tests/checkify_test.py tests/lax_control_flow_test.py
           tests/shard_map_test.py, one session per file
  equinox  tests/ (all files), one session
  optax    every optax/**/*_test.py, one session (optax's own CI also runs the whole package
           in one session: ``pytest --pyargs optax``)
  flax     every tests/nnx/**/*_test.py (Flax NNX), one session
``--files`` (paths relative to the checkout; one suite only) replaces the selection, one session
per file; ``--per-file`` splits the default selections into one session per file.

How the tests are kept on the installed packages: pytest runs as ``python -P -m pytest`` (no
current directory on sys.path) with cwd = the checkout, ``--rootdir`` = the checkout,
``--import-mode=importlib`` (JAX's own pytest config sets it too), ``-p no:cacheprovider`` and
PYTHONDONTWRITEBYTECODE=1 (nothing is written into the checkout), and PYTHONPATH = this
repository only. The checkout's own pytest config and conftest.py files still apply (JAX:
``filterwarnings = error``; Equinox: ``filterwarnings = error`` and jaxtyping+beartype checking of
equinox; its conftest sets ``jax_num_cpu_devices=2`` and strict dtype/rank promotion), so a
warning jaxtrace_nb emits fails a test, as it would in those projects' CI. For Optax, whose tests
live inside the package, the plugin imports the enclosing installed package before a test file
is collected. The plugin reports ``module_files`` and any non-test module imported from the
checkout; the report prints both.

Environment set for every run: JAX_PLATFORMS=cpu. For JAX additionally, as JAX's CPU CI
(ci/run_pytest_cpu.sh) does or needs: XLA_FLAGS=--xla_force_host_platform_device_count=8
(shard_map_test and checkify_test want 8 devices; JAX's repository conftest does not set it) and
JAX_SKIP_SLOW_TESTS=true.

Test dependencies (pip, beyond jax, equinox, optax, flax, chex, pytest): absl-py and hypothesis
(JAX), beartype (Equinox's pytest addopts) and tqdm (Equinox progress-meter tests),
scikit-learn and scipy (Optax), einops, treescope and cloudpickle (Flax NNX). No test file is left
out; Equinox skips its own test_onnx (``@pytest.mark.skip``, a tf2onnx bug).

Timing-sensitive: Equinox's ``test_while_loop.py::test_speed_buffer_while`` asserts how run time
scales with size and flips under CPU load, with or without recording. JAX's ``TracebackTest``
counts stack frames during a trace, so any frame an observer adds fails it.

``--explain`` runs each unit once, recorded, with ``jax_explain_cache_misses`` on, and reports for
every miss JAX explains whether jaxtrace_nb's cause is of JAX's category (the check of
``tests/test_differential.py``, on another project's suite).

``--report JSON ...`` runs nothing: it merges the JSON files of earlier ``--out`` runs into one
report. The exit status is 1 when a test differs that was not found flaky, else 0.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAX_FILES = [
    "tests/api_test.py",
    "tests/checkify_test.py",
    "tests/lax_control_flow_test.py",
    "tests/shard_map_test.py",
]
GUARDED = (
    "jax",
    "jaxlib",
    "equinox",
    "optax",
    "flax",
)  # packages that must come from site-packages
SUITE_ENV = {
    "jax": {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_SKIP_SLOW_TESTS": "true"},
    "equinox": {},
    "optax": {},
    "flax": {},
}


def default_units(suite: str, src: str, per_file: bool) -> list[list[str]]:
    if suite == "jax":
        return [[f] for f in JAX_FILES]
    if suite == "equinox":
        files = sorted(
            os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "tests", "test_*.py"))
        )
        return [[f] for f in files] if per_file else [["tests"]]
    pattern = (
        ("optax", "**", "*_test.py") if suite == "optax" else ("tests", "nnx", "**", "*_test.py")
    )
    files = sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, *pattern), recursive=True)
    )
    return [[f] for f in files] if per_file else [files]


def run_pytest(suite, src, paths, record, args, logdir, tag) -> dict:
    """One pytest session in a subprocess; returns the plugin's JSON plus wall time and exit
    code."""
    out = os.path.join(logdir, f"{tag}.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTRACE_")}
    path = [args.jaxtrace_path, REPO] if args.jaxtrace_path else [REPO]
    env.update(
        SUITE_ENV[suite],
        JAX_PLATFORMS="cpu",
        PYTHONPATH=os.pathsep.join(path),
        PYTHONDONTWRITEBYTECODE="1",
        JAXTRACE_PEER_OUT=out,
        JAXTRACE_PEER_SRC=src,
        JAXTRACE_PEER_RECORD="1" if record else "0",
        JAXTRACE_PEER_EXPLAIN="1" if args.explain else "0",
    )
    cmd = [
        sys.executable,
        "-P",
        "-m",
        "pytest",
        "-p",
        "benchmarks._peer_plugin",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        src,
        "--import-mode=importlib",
        "-q",
        "--tb=short",
        *paths,
    ]
    if args.k:
        cmd += ["-k", args.k]
    t0 = time.monotonic()
    logfile = os.path.join(logdir, f"{tag}.log")
    with open(logfile, "w") as log:
        log.write(" ".join(cmd) + "\n\n")
        log.flush()
        proc = subprocess.Popen(
            cmd, cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        timed_out = False
        try:
            proc.wait(args.timeout)
        except (
            subprocess.TimeoutExpired
        ):  # SIGINT lets pytest finish the session and write its JSON
            timed_out = True
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    result = {"outcomes": {}, "events": None, "faults": None, "dropped": None, "no_result": True}
    if os.path.exists(out):
        with open(out) as f:
            result = json.load(f)
    result.update(
        wall_s=round(time.monotonic() - t0, 1),
        returncode=proc.returncode,
        timed_out=timed_out,
        log=logfile,
        command=" ".join(cmd),
    )
    return result


def failure_kind(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "(no message)"
    return re.sub(r"\d+", "N", re.sub(r"0x[0-9a-f]+", "0x…", line))[:160]


def compare(runs: dict) -> dict:
    base, rec = runs["baseline"]["outcomes"], runs["recorded"]["outcomes"]
    base2 = runs.get("baseline2", {}).get("outcomes")
    flaky = (
        {
            n
            for n in set(base) | set(base2)
            if base.get(n, {}).get("outcome") != base2.get(n, {}).get("outcome")
        }
        if base2 is not None
        else set()
    )
    files = collections.defaultdict(
        lambda: {
            "tests": 0,
            "identical": 0,
            "differ": [],
            "without": collections.Counter(),
            "with": collections.Counter(),
        }
    )
    for node in sorted(set(base) | set(rec)):
        b, r = (
            base.get(node, {}).get("outcome", "missing"),
            rec.get(node, {}).get("outcome", "missing"),
        )
        f = files[node.split("::")[0]]
        f["tests"] += 1
        f["without"][b] += 1
        f["with"][r] += 1
        if b == r:
            f["identical"] += 1
        else:
            why = rec.get(node) if r != "passed" else base.get(node)
            f["differ"].append(
                {
                    "nodeid": node,
                    "without": b,
                    "with": r,
                    "flaky": node in flaky,
                    "crash": (why or {}).get("crash", ""),
                    "text": (why or {}).get("text", ""),
                }
            )
    return {"files": dict(files), "flaky": sorted(flaky)}


def fmt_counts(c) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1]))


def report(units: list[dict]) -> str:
    lines, total, differ, flaky_differ, kinds = [], 0, 0, 0, collections.Counter()
    for u in units:
        runs = u["runs"]
        rr = runs["recorded"]
        walls = ", ".join(
            f"{k} {v['wall_s']} s (exit {v['returncode']}{', TIMED OUT' if v['timed_out'] else ''})"
            for k, v in runs.items()
        )
        where = " ".join(u["paths"]) if len(u["paths"]) < 4 else f"{len(u['paths'])} files"
        lines.append(f"== {u['suite']}: {where}")
        lines.append(f"   wall: {walls}")
        for k, v in runs.items():
            if v.get("no_result"):
                with open(v["log"]) as f:
                    tail = f.read().strip().splitlines()[-3:]
                lines.append(f"   NO RESULT from the {k} run (exit {v['returncode']}), {v['log']}:")
                lines += [f"     {t[:300]}" for t in tail]
        files = rr.get("module_files", {})
        lines.append(
            "   imported from: "
            + ", ".join(f"{m} {os.path.dirname(f)}" for m, f in files.items() if f)
        )
        mods = {k: v.get("checkout_modules", []) for k, v in runs.items()}
        bad = sorted(
            {
                m
                for ms in mods.values()
                for m in ms
                if m.split(".")[0] in GUARDED and not m.endswith("_test")
            }
        )
        lines.append(
            "   modules imported from the checkout: "
            + " / ".join(str(len(m)) for m in mods.values())
            + (f"; NOT TEST MODULES: {bad}" if bad else " (test files and their helpers only)")
        )
        lines.append(
            f"   events recorded {rr['events']}, dropped {rr['dropped']}, faults {rr['faults']}"
        )
        if rr.get("causes"):
            lines.append(
                "   causes recorded (internal included): "
                + ", ".join(f"{cause} {n}" for cause, n in sorted(rr["causes"].items()))
            )
        lines += [
            f"     {e['cause']}: {e['function']} #{e['trace_number']} (internal={e['internal']}): "
            f"{(e['explanation'] or '')[:200]}"
            for e in rr.get("unknown_events") or ()
        ]
        for name, f in u["compare"]["files"].items():
            total += f["tests"]
            differ += len(f["differ"])
            secs = " / ".join(
                f"{v['file_seconds'].get(name, 0):.0f}"
                for v in runs.values()
                if "file_seconds" in v
            )
            lines.append(
                f"   {name}: {f['tests']} tests, {f['identical']} identical, {len(f['differ'])} "
                f"differ   [without: {fmt_counts(f['without'])} | with: {fmt_counts(f['with'])}]"
                + (f"  tests' seconds: {secs}" if secs else "")
            )
            for d in f["differ"]:
                flaky_differ += d["flaky"]
                if "missing" in (d["without"], d["with"]) and any(
                    v.get("no_result") for v in runs.values()
                ):
                    continue  # a whole run failed; said above
                kinds[failure_kind(d["crash"] or d["text"])] += 1
                msg = (d["crash"] or d["text"]).strip().replace("\n", " ⏎ ")[:300]
                lines.append(
                    f"     {d['nodeid']}: {d['without']} -> "
                    f"{d['with']}{' [flaky]' if d['flaky'] else ''}\n         {msg}"
                )
        if u["compare"]["flaky"]:
            lines.append(
                f"   flaky without recording ({len(u['compare']['flaky'])}): "
                f"{', '.join(u['compare']['flaky'])}"
            )
    lines.append("\nsummary (wall seconds per run)")
    lines.append(f"  {'unit':44} {'tests':>6} {'differ':>6} {'events':>7} {'faults':>6}  wall")
    for u in units:
        rr, n = u["runs"]["recorded"], [f for f in u["compare"]["files"].values()]
        where = u["paths"][0] + (f" (+{len(u['paths']) - 1})" if len(u["paths"]) > 1 else "")
        walls = " / ".join(f"{v['wall_s']:.0f}" for v in u["runs"].values())
        lines.append(
            f"  {u['suite'] + ' ' + where:44} {sum(f['tests'] for f in n):6d} "
            f"{sum(len(f['differ']) for f in n):6d} "
            f"{rr['events'] if rr['events'] is not None else '-':>7} "
            f"{sum((rr['faults'] or {}).values()):6d}  {walls} ({'/'.join(u['runs'])})"
        )
    if kinds:
        lines.append("\nfailure kinds among the differences:")
        lines += [f"  {n:5d}  {k}" for k, n in kinds.most_common()]
    lines.append(
        f"\n{total} tests, {differ} differ"
        + (f" ({flaky_differ} of them flaky without recording)" if flaky_differ else "")
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jax-src")
    p.add_argument("--equinox-src")
    p.add_argument("--optax-src")
    p.add_argument("--flax-src")
    p.add_argument("--only", choices=list(SUITE_ENV))
    p.add_argument(
        "--files", nargs="+", help="test files relative to the checkout (one suite only)"
    )
    p.add_argument("-k", help="pytest -k expression, passed to every run")
    p.add_argument(
        "--timeout", type=float, default=3600, help="seconds per run (default 3600); then SIGINT"
    )
    p.add_argument(
        "--per-file",
        action="store_true",
        help="one session per test file for equinox and optax too",
    )
    p.add_argument(
        "--repeat-baseline",
        action="store_true",
        help="run the unrecorded session twice to find flaky tests",
    )
    p.add_argument("--out", help="write the report here, and a JSON beside it")
    p.add_argument(
        "--report",
        nargs="+",
        metavar="JSON",
        help="run nothing; merge earlier --out JSON files into one report",
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="instead: one recorded run with jax_explain_cache_misses on; report, for every miss "
        "JAX explains, whether jaxtrace_nb's cause is of JAX's category",
    )
    p.add_argument(
        "--jaxtrace-path",
        help="import jaxtrace_nb from this folder instead of this repository "
        "(e.g. an export of another commit: git archive HEAD jaxtrace_nb | tar -x -C "
        "DIR)",
    )
    args = p.parse_args(argv)
    if args.out:  # (the runs' own working directory is the peer checkout's)
        args.out = os.path.abspath(args.out)
    if args.report:
        units = [u for path in args.report for u in json.load(open(path))]
        return finish(units, args.out)

    srcs = {
        s: os.path.realpath(getattr(args, f"{s}_src"))
        for s in SUITE_ENV
        if getattr(args, f"{s}_src") and args.only in (None, s)
    }
    if not srcs:
        p.error(
            "give at least one --jax-src / --equinox-src / --optax-src / --flax-src (matching "
            "--only)"
        )
    if args.files and len(srcs) != 1:
        p.error("--files needs exactly one suite (use --only)")
    logdir = args.out + ".logs" if args.out else tempfile.mkdtemp(prefix="peer_suites_")
    os.makedirs(logdir, exist_ok=True)
    print(f"pytest logs in {logdir}", file=sys.stderr)

    units = []
    for suite, src in srcs.items():
        for paths in (
            [[f] for f in args.files] if args.files else default_units(suite, src, args.per_file)
        ):
            unit = {"suite": suite, "src": src, "paths": paths, "runs": {}}
            stem = f"{suite}-{len(units):02d}-" + re.sub(r"\W+", "_", os.path.basename(paths[0]))
            modes = [("baseline", False), ("recorded", True)] + (
                [("baseline2", False)] if args.repeat_baseline else []
            )
            if args.explain:
                modes = [("explained", True)]
            for mode, record in modes:
                r = run_pytest(suite, src, paths, record, args, logdir, f"{stem}-{mode}")
                unit["runs"][mode] = r
                print(
                    f"{suite} {paths[0]}{' …' if len(paths) > 1 else ''} {mode}: "
                    f"{len(r['outcomes'])} tests, {r['wall_s']} s, exit {r['returncode']}",
                    file=sys.stderr,
                    flush=True,
                )
            units.append(unit)
    return explain_report(units, args.out) if args.explain else finish(units, args.out)


def explain_report(units: list[dict], out: str | None) -> int:
    """For `--explain`: per unit, the misses JAX explained and where our cause disagrees."""
    lines, disagree = [], 0
    for u in units:
        r = u["runs"]["explained"]
        bad = r.get("disagree") or []
        disagree += len(bad)
        lines.append(
            f"== {u['suite']}: {' '.join(u['paths'])}: {len(r['outcomes'])} tests, "
            f"{r.get('events')} events, JAX explained {r.get('explained')} miss(es), "
            f"{len(bad)} disagree, faults {r.get('faults')}"
        )
        lines += [
            f"     {function} #{number}: ours {cause}, JAX: {category}"
            for function, number, cause, category in bad
        ]
        if r.get("causes"):
            lines.append(
                "     causes recorded (internal included): "
                + ", ".join(f"{cause} {n}" for cause, n in r["causes"].items())
            )
        lines += [
            f"     unknown: {e['function']} #{e['trace_number']} (internal={e['internal']}): "
            f"{e['explanation'][:200]}"
            for e in r.get("unknown_events") or ()
        ]
    lines.append(
        f"{sum(u['runs']['explained'].get('explained') or 0 for u in units)} explained misses, "
        f"{disagree} disagree"
    )
    text = header() + "\n" + "\n".join(lines)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    return 1 if disagree else 0


def header(module: str = "benchmarks.peer_suites") -> str:
    """The command (`module` run with this process's arguments), the versions and the machine, for
    the top of a committed report."""
    from importlib.metadata import PackageNotFoundError, version

    def v(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return "-"

    pkgs = ", ".join(
        f"{p} {v(p)}" for p in ("jax", "jaxlib", "equinox", "optax", "chex", "flax", "pytest")
    )
    return (
        f"$ python -m {module} {' '.join(sys.argv[1:])}\n"
        f"jaxtrace_nb commit: {commit(_argument('--jaxtrace-path'))}\n"
        f"python {sys.version.split()[0]} ({sys.executable}); {pkgs}; {os.cpu_count()} cores\n"
    )


def _argument(flag: str) -> str | None:
    """The value this process was given for `flag`, else None."""
    argv = sys.argv[1:]
    for i, item in enumerate(argv):
        if item == flag and i + 1 < len(argv):
            return argv[i + 1]
        if item.startswith(flag + "="):
            return item.partition("=")[2]
    return None


def commit(where: str | None = None) -> str:
    """The commit of the jaxtrace_nb that ran (`where`: a checkout or worktree given with
    ``--jaxtrace-path``; else this repository), with "+ changes" when its package differs."""
    where = where or REPO
    try:
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--", "jaxtrace_nb"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except Exception:
        return "unknown"
    return head + (" + uncommitted changes to jaxtrace_nb" if dirty else "")


def finish(units: list[dict], out: str | None) -> int:
    for u in units:
        u["compare"] = compare(u["runs"])
    text = header() + "\n" + report(units)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(out)[0] + ".json", "w") as f:
            json.dump(units, f, indent=1, default=dict)
    differ = [
        d
        for u in units
        for f in u["compare"]["files"].values()
        for d in f["differ"]
        if not d["flaky"]
    ]
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
