"""How well jaxpr equations track XLA compile seconds: the proxy that `jt.compile_profile` uses.

    python benchmarks/eqns_vs_compile.py [--repeat 2] [--out benchmarks/results]

Compiles each program of `_programs.py` (Equinox transformers forward and with gradients, MLPs,
unrolled loops, scans, convolutions) `--repeat` times, each time after `jax.clear_caches()`,
recorded by jaxtrace_nb, and keeps the fewest compile seconds. Prints, and writes to
``<out>/eqns-vs-compile-<jax>.json`` and ``.txt``, each program's equations (`eqns_total`, as the
table shows) and XLA compile seconds, then Pearson's and Spearman's correlation over all
programs. Asserts nothing. Compile seconds move with the machine's load: the load average is
written with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(
    1, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)  # this checkout's jaxtrace_nb


def programs():
    import _programs as p

    for d in (1, 2, 4, 8, 16, 32):
        yield f"mlp_grad_d{d}", lambda d=d: p.mlp_step(depth=d, width=128)
    for d in (4, 16, 64):
        yield f"mlp_fwd_d{d}", lambda d=d: p.mlp_step(depth=d, width=128, grad=False)
    for n in (10, 25, 50, 100):
        yield f"unrolled_{n}", lambda n=n: p.unrolled_step(n)
    for steps, layers in ((10, 1), (1000, 1), (10, 4), (1000, 4), (100, 16)):
        yield f"scan_s{steps}_l{layers}", lambda s=steps, l=layers: p.scan_step(steps=s, layers=l)
    for b in (1, 2, 3):
        yield (
            f"transformer_grad_b{b}",
            lambda b=b: p.transformer_step(n_blocks=b, d=32, heads=2, seq=16, batch=2, vocab=64),
        )
    for b in (1, 2, 4, 8):
        yield (
            f"transformer_fwd_b{b}",
            lambda b=b: p.transformer_step(
                n_blocks=b, d=32, heads=2, seq=16, batch=2, vocab=64, grad=False
            ),
        )
    for d in (2, 4):
        yield f"conv_grad_d{d}", lambda d=d: p.conv_step(depth=d, ch=8, size=16)


def _ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2
        i = j + 1
    return ranks


def pearson(x, y):
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / (sxx * syy) ** 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    )
    args = parser.parse_args()
    import jax

    import jaxtrace_nb as jt

    load_before = os.getloadavg()
    rows = []
    for name, make in programs():
        best = None
        for _ in range(args.repeat):
            jax.clear_caches()
            f, inputs = make()
            jax.block_until_ready(inputs)
            jt.reset()
            jt.start()
            jax.block_until_ready(f(*inputs))
            jt.stop()
            traced = [
                e
                for e in jt.get_session().log.events()
                if not e.internal and e.compile_s is not None
            ]
            main_event = max(traced, key=lambda e: e.compile_s)
            if best is None or main_event.compile_s < best["compile_s"]:
                best = {
                    "program": name,
                    "eqns_total": main_event.eqns_total,
                    "compile_s": main_event.compile_s,
                    "trace_s": main_event.trace_s,
                    "lower_s": main_event.lower_s,
                }
        rows.append(best)
        print(f"{name:24s} {best['eqns_total']:6d} eqns  {best['compile_s']:7.3f} s", flush=True)
    jt.reset()
    x = [r["eqns_total"] for r in rows]
    y = [r["compile_s"] for r in rows]
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=os.path.dirname(os.path.abspath(__file__)),
        ).stdout.strip()
        or "unknown"
    )
    command = "python benchmarks/eqns_vs_compile.py" + "".join(f" {a}" for a in sys.argv[1:])
    result = {
        "command": command,
        "commit": commit,
        "jax": jax.__version__,
        "python": sys.version.split()[0],
        "repeat": args.repeat,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "programs": rows,
        "pearson": pearson(x, y),
        "spearman": pearson(_ranks(x), _ranks(y)),
    }
    summary = (
        f"{len(rows)} programs, JAX {jax.__version__}, min of {args.repeat} compiles each: "
        f"Pearson {result['pearson']:.2f}, Spearman {result['spearman']:.2f} (equations vs "
        "XLA compile "
        f"seconds); load average {load_before[0]:.1f} before, "
        f"{result['load_avg_after'][0]:.1f} after"
    )
    print(summary)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"eqns-vs-compile-{jax.__version__}")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(
        base + ".txt", "w"
    ) as f:  # the header first: `benchmarks/figures.py` reads its first 5 lines
        f.write(f"command: {command}; commit {commit}\n" + summary + "\n")
        f.write(
            "\n".join(
                f"{r['program']:24s} {r['eqns_total']:6d} eqns  {r['compile_s']:7.3f} s"
                for r in rows
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
