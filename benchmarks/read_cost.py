"""What reading the log costs after N retraces of one function (issue 54), against the time the
N traces took, in the same run.

    # N = 1,000, 4,000, 10,000 -> benchmarks/results/read-cost-*.txt/.json
    python benchmarks/read_cost.py
    python benchmarks/read_cost.py --keys 1000,4000 --streams shape --baseline-path DIR

Each stream of `key_search.py` (a new shape each time, a new static value each time, a 16-leaf
pytree whose leaves change in turn: every key new, every diagnosis searching all the keys JAX
holds) runs in a fresh process with recording on: ``f.trace`` at N keys (the trace stream, timed),
then the first ``jt.log()`` (every deferred diagnosis made: the read, timed). Reported per stream
and N: both times, read / stream, and the read's growth from the smallest N to each larger one
(linear: N's ratio; quadratic: its square).

``--baseline-path DIR`` runs the same streams with the package at DIR (another commit's tree) in
the same run, rounds alternating, to compare the trace stream's time per trace (the trace path is
the same code in both) and, at the N given by ``--baseline-read-max``, the read. This script
asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _results  # noqa: E402
from key_search import RESULT_MARK, _stream, run_worker, stream_then_read  # noqa: E402

REPO = os.path.dirname(HERE)
STREAMS = ("shape", "static", "pytree16")


def worker(kind: str, n: int, read: bool) -> dict:
    import jaxtrace_nb as jt

    fn, inputs = _stream(kind, n)
    jt.start()
    stream_s, read_s, causes = stream_then_read(fn, inputs, read)
    if not read:
        jt.stop()
    return {
        "stream_s": stream_s,
        "read_s": read_s,
        "traces": len(inputs),
        "causes": causes,
        "package": os.path.dirname(os.path.dirname(os.path.abspath(jt.__file__))),
    }


def _spawn(kind: str, n: int, path: str, read: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--keys", str(n)]
    if not read:
        cmd.append("--no-read")
    return run_worker(cmd, {"PYTHONPATH": f"{path}{os.pathsep}{HERE}"}, f"{kind} {n}", 7200)


def _median(runs: list, field: str):
    values = [r[field] for r in runs if r[field] is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--worker", choices=STREAMS)
    parser.add_argument("--no-read", action="store_true")
    parser.add_argument("--keys", default="1000,4000,10000")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--streams", default=",".join(STREAMS))
    parser.add_argument("--baseline-path", default=None, help="another commit's tree")
    parser.add_argument(
        "--baseline-read-max", type=int, default=1000, help="the largest N the baseline reads at"
    )
    parser.add_argument("--baseline-keys-max", type=int, default=4000)
    parser.add_argument("--note", default="", help="a line for the results (the machine's load)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    if args.worker:
        result = worker(args.worker, int(args.keys), not args.no_read)
        print(RESULT_MARK + json.dumps(result), flush=True)
        return
    import jax

    commit, load_before = _results.commit(), _results.load()
    keys = [int(k) for k in args.keys.split(",") if k]
    streams = [kind for kind in args.streams.split(",") if kind]
    codes = {"this": REPO}
    if args.baseline_path:
        codes["baseline"] = os.path.abspath(args.baseline_path)
    started = time.perf_counter()
    runs: dict = {}
    for r in range(args.rounds):
        order = list(codes) if r % 2 == 0 else list(codes)[::-1]
        for kind in streams:
            for n in keys:
                for code in order:
                    if code == "baseline" and n > args.baseline_keys_max:
                        continue
                    read = code == "this" or n <= args.baseline_read_max
                    result = _spawn(kind, n, codes[code], read)
                    runs.setdefault((code, kind, n), []).append(result)
                    read_s = result["read_s"]
                    print(
                        f"{code} {kind} N={n}: stream {result['stream_s']:.2f} s, read "
                        f"{'-' if read_s is None else round(read_s, 2)} s",
                        file=sys.stderr,
                        flush=True,
                    )
    lines = [
        f"jaxtrace_nb read cost — {datetime.datetime.now().isoformat(timespec='seconds')}",
        _results.machine_line(jax.__version__, commit, load_before, started),
        f"command: python benchmarks/read_cost.py --keys {args.keys} --rounds {args.rounds} "
        f"--streams {','.join(streams)}"
        + (f" --baseline-path {args.baseline_path}" if args.baseline_path else ""),
    ]
    if args.note:
        lines.append(f"note: {args.note}")
    lines += [
        "medians of the rounds; stream = N traces recorded (f.trace), read = the first jt.log()",
        "",
        f"{'code':9} {'stream':9} {'N':>6} {'stream s':>9} {'read s':>8} {'read/stream':>11} "
        f"{'read growth':>11} {'stream ms/trace':>15}",
    ]
    table = []
    for (code, kind, n), found in runs.items():
        stream_s, read_s = _median(found, "stream_s"), _median(found, "read_s")
        smallest = runs.get((code, kind, keys[0]))
        base_read = _median(smallest, "read_s") if smallest else None
        growth = read_s / base_read if read_s is not None and base_read else None
        row = {
            "code": code,
            "stream": kind,
            "keys": n,
            "stream_s": stream_s,
            "read_s": read_s,
            "read_over_stream": read_s / stream_s if read_s is not None else None,
            "read_growth_from_smallest": growth,
            "stream_ms_per_trace": stream_s / n * 1000,
            "causes": found[-1]["causes"],
            "package": found[-1]["package"],
        }
        table.append(row)

        def fmt(value, spec):
            return "-" if value is None else format(value, spec)

        lines.append(
            f"{code:9} {kind:9} {n:>6} {stream_s:>9.2f} {fmt(read_s, '>8.2f')} "
            f"{fmt(row['read_over_stream'], '>11.3f')} {fmt(growth, '>11.2f')} "
            f"{row['stream_ms_per_trace']:>15.3f}"
        )
    text = "\n".join(lines) + "\n"
    stem = f"read-cost-{jax.__version__}-{commit}"
    _results.write(args.out, stem, text, {"header": lines[:4], "rows": table})


if __name__ == "__main__":
    main()
