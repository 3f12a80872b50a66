"""The search for the closest earlier key over a long stream (issue 43), against JAX's own
explainer.

    # 1,000 keys a stream -> benchmarks/results/key-search-*.txt/.json
    python benchmarks/key_search.py
    python benchmarks/key_search.py --keys 200 --out DIR

One jitted function is traced once per key (``jax.jit(f).trace``: a real trace, no compile), every
key new, in three streams: a new static value each time (every earlier key one component away: all
of them tie), a new shape each time (likewise, in the types layer), and a 16-leaf pytree whose
leaves change one at a time in turn (the closest key is one of many at distance one or two). Each
stream runs in a fresh process per mode, the modes rotated round after round:

* ``baseline``: nothing observes JAX;
* ``explain``: ``jax_explain_cache_misses`` on, its messages formatted into an in-memory log: JAX
  scans every earlier key of the function at every miss (``partial_eval.explain``);
* ``recorded``: ``jt.start()``; the stream, then the log read once (every deferred diagnosis made,
  each one searching all the keys JAX holds): both timed, and their sum is recording's cost.

Reported per stream: each mode's median seconds for the whole stream, the ratios recorded / baseline
and recorded / explain, and the diagnoses' seconds per trace for the first and the last tenth of the
stream (how the search grows with the keys held). This script asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULT_MARK = "@@RESULT "
MODES = ("baseline", "explain", "recorded")
STREAMS = ("static", "shape", "pytree16")


def _stream(kind: str, n: int):
    import functools

    import jax
    import jax.numpy as jnp

    if kind == "static":

        @functools.partial(jax.jit, static_argnums=1)
        def f(x, k):
            return x * 2

        x = jnp.ones(3)
        return f, [(x, k) for k in range(n)]
    if kind == "shape":

        @jax.jit
        def g(x):
            return x * 2

        return g, [(jax.ShapeDtypeStruct((k + 1,), jnp.float32),) for k in range(n)]

    @jax.jit
    def h(tree):
        return jax.tree_util.tree_map(lambda a: a * 2, tree)

    inputs = []
    for k in range(n):  # leaf k % 16 grows by one at each of its turns: every key is new
        tree = {
            f"w{i}": jax.ShapeDtypeStruct(
                (1 + (k - i) // 16 + (i <= k % 16 and i <= k),), jnp.float32
            )
            for i in range(16)
        }
        inputs.append((tree,))
    return h, inputs


def stream_then_read(fn, inputs: list, read: bool) -> tuple[float, float | None, dict]:
    """(seconds to trace `fn` at each of `inputs`, seconds of the first ``jt.log()`` after them or
    None where not `read`, the causes it read); where `read`, recording is stopped after."""
    import gc

    import jaxtrace_nb as jt

    gc.collect()
    start = time.perf_counter()
    for args in inputs:
        fn.trace(*args)
    stream_s = time.perf_counter() - start
    if not read:
        return stream_s, None, {}
    start = time.perf_counter()
    df = jt.log()
    read_s = time.perf_counter() - start
    mine = df[(df["kind"] == "trace") & ~df["internal"]]
    causes = {str(k): int(v) for k, v in mine["cause"].value_counts().items()}
    jt.stop()
    assert jt.faults() == {}, jt.faults()
    return stream_s, read_s, causes


def worker(kind: str, mode: str, n: int) -> dict:
    import io
    import logging

    import jax

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording import _drafts

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger("jax._src.interpreters.partial_eval").addHandler(handler)
    fn, inputs = _stream(kind, n)
    diagnosis_s: list[float] = []
    original = _drafts.diagnose

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            diagnosis_s.append(time.perf_counter() - start)

    if mode == "recorded":
        _drafts.diagnose = timed
        jt.start()
    elif mode == "explain":
        jax.config.update("jax_explain_cache_misses", True)
    stream_s, read_s, causes = stream_then_read(fn, inputs, mode == "recorded")
    read_s = read_s or 0.0
    tenth = max(1, len(diagnosis_s) // 10)
    return {
        "stream_s": stream_s,
        "read_s": read_s,
        "total_s": stream_s + read_s,
        "traces": len(inputs),
        "explained": stream.getvalue().count("TRACING CACHE MISS"),
        "causes": causes,
        "diagnosis_first_tenth_s": statistics.fmean(diagnosis_s[:tenth]) if diagnosis_s else None,
        "diagnosis_last_tenth_s": statistics.fmean(diagnosis_s[-tenth:]) if diagnosis_s else None,
    }


def _spawn(kind: str, mode: str, n: int) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        kind,
        "--mode",
        mode,
        "--keys",
        str(n),
    ]
    return run_worker(cmd, {}, f"{kind} {mode}", 3600)


def run_worker(cmd: list, env: dict, what: str, timeout: float) -> dict:
    """The result a worker process (`cmd`, on the CPU, with `env` added) printed last."""
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{what} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT_MARK) :])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=STREAMS)
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--streams", default=",".join(STREAMS), help=f"comma-separated subset of {STREAMS}"
    )
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    if args.worker:
        print(RESULT_MARK + json.dumps(worker(args.worker, args.mode, args.keys)), flush=True)
        return
    import jax

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    streams = [kind for kind in args.streams.split(",") if kind]
    started = time.perf_counter()
    runs: dict = {kind: {mode: [] for mode in MODES} for kind in streams}
    for r in range(args.rounds):
        for kind in streams:
            for mode in (
                MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
            ):  # rotated: noise hits every mode
                runs[kind][mode].append(_spawn(kind, mode, args.keys))
    lines = [
        f"jaxtrace_nb key search — {datetime.datetime.now().isoformat(timespec='seconds')}",
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        "python "
        f"{platform.python_version()}; jax {jax.__version__}; commit {commit}; wall "
        f"{time.perf_counter() - started:.0f} s",
        f"command: python benchmarks/key_search.py --keys {args.keys} --rounds {args.rounds} "
        "--streams "
        f"{','.join(streams)}",
        "",
        "| stream | keys | baseline s | explain s | recorded s (stream + read) | recorded / "
        "baseline | "
        "recorded / explain | diagnosis ms/trace, first tenth | last tenth | causes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary = {}
    for kind in streams:
        med = {
            mode: statistics.median(run["total_s"] for run in runs[kind][mode]) for mode in MODES
        }
        rec = runs[kind]["recorded"]
        stream_s = statistics.median(run["stream_s"] for run in rec)
        read_s = statistics.median(run["read_s"] for run in rec)
        first = statistics.median(run["diagnosis_first_tenth_s"] for run in rec) * 1e3
        last = statistics.median(run["diagnosis_last_tenth_s"] for run in rec) * 1e3
        summary[kind] = {
            "median_total_s": med,
            "recorded_stream_s": stream_s,
            "recorded_read_s": read_s,
            "diagnosis_ms_first_tenth": first,
            "diagnosis_ms_last_tenth": last,
            "causes": rec[-1]["causes"],
            "explained": runs[kind]["explain"][-1]["explained"],
        }
        lines.append(
            f"| {kind} | {args.keys} | {med['baseline']:.3f} | {med['explain']:.3f} | "
            f"{med['recorded']:.3f} ({stream_s:.3f} + {read_s:.3f}) | "
            f"{med['recorded'] / med['baseline']:.3f} | {med['recorded'] / med['explain']:.3f} | "
            f"{first:.3f} | {last:.3f} | {rec[-1]['causes']} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"key-search-{jax.__version__}-{commit}")
    with open(stem + ".txt", "w") as f:
        f.write(text)
    with open(stem + ".json", "w") as f:
        json.dump(
            {
                "keys": args.keys,
                "rounds": args.rounds,
                "commit": commit,
                "summary": summary,
                "runs": runs,
            },
            f,
            indent=1,
        )


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    main()
