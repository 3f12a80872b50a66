"""Stalls at new batch sizes, cold against warm (`jt.precompile` or `run --warm` from a log).

A loop meets 6 batch sizes, with 1.5 s of other work between them (a sleep: data loading, I/O,
logging; it holds no core). It is recorded once (`jt.start(persist=...)`), then run fresh twice
per repeat, each in a new process: cold (recording, nothing precompiled) and warm (after the first
size's call, ``jt.precompile(step, *that_call, log=the_recorded_log)``). A stall is the wall time
of one call at a new size, through `block_until_ready`. Three steps (`--programs`): a 60-layer
`jax.jit` MLP step with its gradient (`jit`), an `eqx.filter_jit` Equinox MLP step (`eqx`), and a
`jax.jit` AdamW step (Optax) of a 4-block transformer on token batches (`transformer`: the
program the issue measured on a GPU, here CPU-sized). The ratio (warm total / cold total)
is measured within one repeat, on the same machine at the same time. Warm runs go once per
`--workers` count (``all``: the cores), and once more under
``python -m jaxtrace_nb run --warm LOG`` (no precompile call in the program: its first trace
starts it, default workers), for every step.

`--xla-flags F` sets ``XLA_FLAGS=F`` in every run, cold and warm alike (recorded in the results'
header and name): e.g. ``--xla_cpu_experimental_ynn_fusion_type=`` (no YNNPACK fusions), to see
the stalls without the one-time set-up XLA:CPU does at an executable's first run.

    python benchmarks/precompile.py [--repeats 2] [--workers 1,all] [--xla-flags F]
                                    [--programs jit,eqx,transformer] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SIZES = (8, 12, 16, 24, 32, 48)
OTHER_WORK_S = 1.5
LAYERS = 60
PROGRAMS = ("jit", "eqx", "transformer")


def _jit_step():
    import jax
    import jax.numpy as jnp

    def init(key):
        keys = jax.random.split(key, LAYERS)
        return [jax.random.normal(k, (64, 64)) * 0.1 for k in keys]

    def loss(params, x):
        for w in params:
            x = jnp.tanh(x @ w)
        return jnp.mean(x**2)

    @jax.jit
    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, [w - 0.01 * g for w, g in zip(params, grads)]

    return step, init(jax.random.PRNGKey(0)), 64


def _eqx_step():
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    model = eqx.nn.MLP(32, 32, 128, depth=8, key=jax.random.PRNGKey(0))

    @eqx.filter_jit
    def step(model, x):
        def loss(m):
            return jnp.mean(jax.vmap(m)(x) ** 2)

        value, grads = eqx.filter_value_and_grad(loss)(model)
        return value, eqx.apply_updates(model, jax.tree.map(lambda g: -0.01 * g, grads))

    return step, model, 32


def _transformer_step():
    """A 4-block pre-norm transformer (width 128, 4 heads, MLP 512, 64 tokens, vocabulary 256),
    its next-token loss, and an `optax.adamw` update, in one `jax.jit` step."""
    import jax
    import jax.numpy as jnp
    import optax

    d, heads, hidden, blocks, tokens, vocab = 128, 4, 512, 4, 64, 256

    def init(key):
        keys = iter(jax.random.split(key, 8 * blocks + 2))

        def normal(*shape):
            return jax.random.normal(next(keys), shape) * 0.02

        layers = [
            {
                "ln1": jnp.ones(d),
                "wq": normal(d, d),
                "wk": normal(d, d),
                "wv": normal(d, d),
                "wo": normal(d, d),
                "ln2": jnp.ones(d),
                "w1": normal(d, hidden),
                "w2": normal(hidden, d),
            }
            for _ in range(blocks)
        ]
        return {"embed": normal(vocab, d), "blocks": layers, "out": normal(d, vocab)}

    def norm(x, gain):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return gain * (x - mean) * jax.lax.rsqrt(var + 1e-5)

    def forward(params, ids):
        x = params["embed"][ids]
        b, t, _ = x.shape
        causal = jnp.tril(jnp.ones((t, t), bool))
        for layer in params["blocks"]:
            h = norm(x, layer["ln1"])
            q, k, v = ((h @ layer[w]).reshape(b, t, heads, d // heads) for w in ("wq", "wk", "wv"))
            a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads)
            a = jax.nn.softmax(jnp.where(causal, a, -1e9), -1)
            x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, d) @ layer["wo"]
            x = x + jax.nn.gelu(norm(x, layer["ln2"]) @ layer["w1"]) @ layer["w2"]
        return x @ params["out"]

    optimizer = optax.adamw(1e-3)

    def loss(params, ids):
        logits = forward(params, ids[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 1:]).mean()

    @jax.jit
    def step(params, opt_state, ids):
        value, grads = jax.value_and_grad(loss)(params, ids)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    params = init(jax.random.PRNGKey(0))
    state = optimizer.init(params)

    def batch(n):
        return (params, state, (jnp.arange(n * (tokens + 1)) % vocab).reshape(n, tokens + 1))

    return step, batch


def _program(program: str):
    """(the jitted step, a function of the batch size giving one call's arguments); the step's
    first output is the loss."""
    import jax.numpy as jnp

    if program == "transformer":
        return _transformer_step()
    step, params, width = _jit_step() if program == "jit" else _eqx_step()
    return step, lambda n: (params, jnp.ones((n, width)) * 0.01)


def child(program: str, mode: str, log: str, workers: str = "0") -> dict:
    """One run of the loop in this (fresh) process; `workers` 0: precompile's default."""
    import jax

    import jaxtrace_nb as jt

    jt.start(persist=log if mode == "record" else None)
    step, batch = _program(program)
    stalls, again, values, handle, table = [], [], [], None, None
    for i, n in enumerate(SIZES):
        args = batch(n)
        start = time.perf_counter()
        value = step(*args)[0]
        jax.block_until_ready(value)
        stalls.append(time.perf_counter() - start)
        start = time.perf_counter()  # the same call again: a cache hit, what running it costs
        jax.block_until_ready(step(*args)[0])
        again.append(time.perf_counter() - start)
        values.append(float(value))
        if i == 0 and mode == "warm":
            handle = jt.precompile(step, *args, log=log, workers=int(workers) or None)
        time.sleep(OTHER_WORK_S)
    if handle is not None:
        t = handle.wait(600)
        table = {
            "status": list(t["status"]),
            "compile_s": [None if v != v else v for v in t["compile_s"]],
        }
    events = jt.log(internal=False)
    return {
        "program": program,
        "mode": mode,
        "stalls_s": stalls,
        "again_s": again,
        "values": values,
        "table": table,
        "precompiled": int(events["precompiled"].fillna(False).sum()),
        "user_traces": int(
            ((events["kind"] == "trace") & ~events["precompiled"].fillna(False)).sum()
        ),
    }


def first_run(program: str) -> dict:
    """What a new size's call costs once its program is compiled ahead: a program compiled
    through JAX's AOT API (`.trace().lower().compile()`), then called three times."""
    import jax

    step, batch = _program(program)
    args = batch(SIZES[1])
    if program == "eqx":
        compiled = step.lower(*args).compile()
    else:
        compiled = step.trace(*args).lower().compile()
    calls = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args)[0])
        calls.append(time.perf_counter() - start)
    return {"program": program, "mode": "first-run", "calls_s": calls}


_XLA_FLAGS: list[str] = []  # `--xla-flags`: XLA_FLAGS of every run


def _run(program: str, mode: str, log: str, workers: int = 0) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=os.path.dirname(HERE))
    if _XLA_FLAGS:
        env["XLA_FLAGS"] = _XLA_FLAGS[0]
    runner = (
        [sys.executable, "-m", "jaxtrace_nb", "run", "--warm", log]
        if mode == "runwarm"
        else [sys.executable]
    )
    out = subprocess.run(
        [*runner, __file__, "--child", program, mode, log, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from _results import commit, load, machine_line, write

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workers", default="1,all", help="worker counts of the warm runs")
    parser.add_argument("--xla-flags", default=None, help="XLA_FLAGS of every run")
    parser.add_argument("--programs", default=",".join(PROGRAMS), help="steps to measure")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    if args.xla_flags is not None:
        _XLA_FLAGS.append(args.xla_flags)
    import jax

    cores = os.cpu_count() or 1
    counts = [cores if w == "all" else int(w) for w in args.workers.split(",")]
    started, load_before, measured = time.perf_counter(), load(), commit()
    programs = args.programs.split(",")
    runs = []
    lines = []
    for program in programs:
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "run.jsonl")
            _run(program, "record", log)
            for r in range(args.repeats):
                cold = _run(program, "cold", log)
                runs.append(cold)
                warms = [
                    (f"precompile, {w} worker(s)", _run(program, "warm", log, w)) for w in counts
                ]
                warms.append(("run --warm", _run(program, "runwarm", log)))
                for how, warm in warms:
                    runs.append(dict(warm, how=how))
                    same = cold["values"] == warm["values"]
                    ratio = sum(warm["stalls_s"]) / sum(cold["stalls_s"])
                    rows = warm["table"]["status"] if warm["table"] else "-"
                    cold_s, warm_s = sum(cold["stalls_s"]), sum(warm["stalls_s"])
                    first = (cold["stalls_s"][1], warm["stalls_s"][1])
                    lines.append(
                        f"{program:>11} #{r + 1} {how:>24}: cold total {cold_s:6.2f} s, "
                        f"warm {warm_s:6.2f} s, warm/cold {ratio:.3f}; first new size "
                        f"cold {first[0]:.3f} s, warm {first[1]:.3f} s; results identical: "
                        f"{same}; rows {rows}; precompiled in the warm log: "
                        f"{warm['precompiled']}; user traces cold {cold['user_traces']}, "
                        f"warm {warm['user_traces']}; warm new sizes, median "
                        f"{statistics.median(warm['stalls_s'][1:]) * 1e3:.0f} ms, the same call "
                        f"again {statistics.median(warm['again_s'][1:]) * 1e3:.1f} ms"
                    )
    for program in programs:
        found = _run(program, "first-run", "-")
        runs.append(found)
        lines.append(
            f"{program:>11} a program compiled ahead (AOT), then called 3 times: "
            + ", ".join(f"{c * 1e3:.1f} ms" for c in found["calls_s"])
            + " (its first run pays XLA's one-time cost, which no compile ahead removes)"
        )
    text = "\n".join(
        [
            f"jt.precompile: stalls at {len(SIZES)} batch sizes {SIZES}, {OTHER_WORK_S} s of "
            "other work (sleep) between; cold = fresh process, nothing precompiled; warm = fresh "
            "process, precompile from the recorded log after the first call",
            machine_line(jax.__version__, measured, load_before, started)
            + f"; command: python benchmarks/precompile.py --repeats {args.repeats} "
            f"--workers {args.workers}"
            + (f" --programs {args.programs}" if programs != list(PROGRAMS) else "")
            + (f" --xla-flags '{args.xla_flags}'" if args.xla_flags is not None else ""),
            "",
            *lines,
            "",
        ]
    )
    flagged = "-xla-flags" if args.xla_flags is not None else ""
    only = "-" + "-".join(programs) if programs != list(PROGRAMS) else ""
    name = f"cpu-{time.strftime('%Y-%m-%d')}-precompile{only}{flagged}-{measured}"
    write(args.out, name, text, {"runs": runs, "xla_flags": args.xla_flags})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[3] == "first-run":
            print(json.dumps(first_run(sys.argv[2])))
        else:
            print(json.dumps(child(*sys.argv[2:6])))
    else:
        main()
