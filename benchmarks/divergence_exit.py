"""How long a `jax.distributed` job whose own code raises takes to end, with and without recording.

Issue 56: our exit must add no wait to a failing job. Two local processes (gloo); process 1 traces
a function over a global array alone (its comparison then waits for process 0, which never traces
it), and raises the user's own error; process 0 sleeps 3 s and ends. Each run is timed from the
processes' start to each one's end, without jaxtrace_nb and with it (``divergence="warn"``, a grace
of 60 s), in alternating order:

    python benchmarks/divergence_exit.py --rounds 3 --out benchmarks/results/divergence-exit-C.txt
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

from divergence_cost import _free_port  # (run as a script: benchmarks/ is on sys.path)

HERE = pathlib.Path(__file__).resolve().parent
PROGRAMS = HERE.parent / "tests" / "programs"

PROGRAM = """
import sys, time
pid, port, record = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
sys.path.insert(0, sys.argv[4])
import jax
import numpy as np
from _dist import join
from jax.sharding import NamedSharding, PartitionSpec as P

join(pid, 2, port)
if record:
    import jaxtrace_nb as jt

    jt.start(divergence="warn", divergence_grace_s=60)
mesh = jax.make_mesh((2,), ("d",), devices=jax.devices())
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), np.ones((2, 2), np.float32))


@jax.jit
def g(x):
    return x * 2


if pid == 1:
    g(x).block_until_ready()  # traced by process 1 alone: its comparison waits for process 0
    raise RuntimeError("the user's own error")
time.sleep(3)
"""


def run_once(record: bool, timeout: float = 600) -> tuple[float, float, int, int]:
    """(process 0's seconds, process 1's seconds, their exit statuses) of one job."""
    port = _free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(HERE.parent))
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PROGRAM,
                str(i),
                str(port),
                "1" if record else "0",
                str(PROGRAMS),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    ends = [0.0, 0.0]
    pending = set(range(2))
    while pending:
        for i in list(pending):
            if procs[i].poll() is not None:
                ends[i] = time.monotonic() - start
                pending.discard(i)
        if time.monotonic() - start > timeout:
            for p in procs:
                p.kill()
            raise TimeoutError("the job did not end")
        time.sleep(0.05)
    return ends[0], ends[1], procs[0].returncode, procs[1].returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
    ).stdout.strip()
    runs: dict[bool, list] = {False: [], True: []}
    for i in range(args.rounds):
        for record in (False, True) if i % 2 == 0 else (True, False):
            runs[record].append(run_once(record))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        f"$ python benchmarks/divergence_exit.py {' '.join(argv or sys.argv[1:])}",
        f"commit {commit}; {os.cpu_count()} cores; load average at the end {load}",
        "seconds from start to each process's end (process 1 raises; process 0 sleeps 3 s):",
    ]
    for record in (False, True):
        label = "with jaxtrace_nb (warn, grace 60 s)" if record else "without jaxtrace_nb"
        for p in (0, 1):
            times = [r[p] for r in runs[record]]
            codes = sorted({r[2 + p] for r in runs[record]})
            lines.append(
                f"  {label:38s} process {p}: median {statistics.median(times):.2f} s "
                f"(runs {', '.join(f'{t:.2f}' for t in times)}; exit {codes})"
            )
    added = statistics.median(r[1] for r in runs[True]) - statistics.median(
        r[1] for r in runs[False]
    )
    lines.append(f"process 1 (the failing one), with minus without: {added:+.2f} s")
    text = "\n".join(lines)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
