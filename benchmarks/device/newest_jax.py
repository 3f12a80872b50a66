"""Issue 53's device check: the newest JAX, read in full under every user setting, on a GPU.

Run on the lent GPU machine by `benchmarks/device/run.sh` (one prepared command; 15 minutes of
device time a session). Here, on a CPU, `--dry-run` proves the script works with small sizes
(its figures are then not GPU figures and say so):

    python -m benchmarks.device.newest_jax --dry-run --out /tmp/newest-jax.txt

Sections, each in fresh processes:
1. The self-check under each user setting of issue 53 (none, x64 by environment and by config,
   strict dtype promotion, matmul precision, enable_checks, debug_nans, explain_cache_misses):
   the notice (once over three start/stop cycles) and a user retrace diagnosed in full.
2. JAX's internals (`jaxtrace_nb._jax._reads.READS`) looked for in the installed JAX.
3. A real Equinox + Optax AdamW train step on the accelerator: the recorded trace / lower /
   compile seconds beside JAX's own `jax.monitoring` events of the same call; the first call
   recorded against one in a process that never imports jaxtrace_nb; a steady step with
   recording on / off in one process, and in that fresh process; a cache-hit call of a small
   `jax.jit` and `eqx.filter_jit` function, on / off.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SETTINGS = {
    "none": ({}, None),
    "x64 (environment)": ({"JAX_ENABLE_X64": "1"}, None),
    "x64 (config)": ({}, ("jax_enable_x64", True)),
    "strict dtype promotion": ({}, ("jax_numpy_dtype_promotion", "strict")),
    "matmul precision": ({}, ("jax_default_matmul_precision", "highest")),
    "enable_checks": ({}, ("jax_enable_checks", True)),
    "debug_nans": ({}, ("jax_debug_nans", True)),
    "explain_cache_misses": ({}, ("jax_explain_cache_misses", True)),
}

_SELF_CHECK = """
import json, sys, jax, jax.numpy as jnp
setting = json.loads(sys.argv[1])
if setting:
    jax.config.update(*setting)
import jaxtrace_nb as jt
from jaxtrace_nb._jax import _internals
if sys.argv[2] == "force":  # a JAX inside the tested range: take the self-check path anyway
    lo, _ = _internals.SUPPORTED_JAX
    _internals.SUPPORTED_JAX = (lo, _internals.version_tuple(jax.__version__))
for _ in range(3):
    jt.start(); jt.stop()
jt.start()
f = jax.jit(lambda x: x * 2)
f(jnp.ones(2)); f(jnp.ones(3))
row = jt.log().iloc[-1]
print(json.dumps([row["cause"], row["leaf"], row["before"], row["after"]]))
"""


def _python(code: str, *args: str, env: dict | None = None, timeout: float = 240) -> tuple:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def self_check_section() -> list[str]:
    import jax

    from jaxtrace_nb._jax._internals import SUPPORTED_JAX, version_tuple

    newer = version_tuple(jax.__version__) >= SUPPORTED_JAX[1]
    lines = [
        f"JAX {jax.__version__}: {'newer than' if newer else 'inside'} SUPPORTED_JAX "
        f"{SUPPORTED_JAX}; the self-check path is {'taken' if newer else 'forced'}"
    ]
    for label, (env, setting) in SETTINGS.items():
        rc, out, err = _python(_SELF_CHECK, json.dumps(setting), "" if newer else "force", env=env)
        notices = [line for line in err.splitlines() if line.startswith("jaxtrace_nb:")]
        row = out.strip().splitlines()[-1] if out.strip() else f"(exit {rc}: {err[-300:]})"
        full = any("self-check passed" in n for n in notices)
        lines.append(
            f"  {label:24s} {'FULL' if full else 'REDUCED'}; notices {len(notices)}; "
            f"retrace {row}; {notices[0] if notices else ''}"
        )
    return lines


def reads_section() -> list[str]:
    import pathlib

    import jax

    from benchmarks.jax_reads import check, from_directory, report, series_of

    root = pathlib.Path(jax.__file__).resolve().parent.parent
    series = series_of(jax.__version__)
    return report(f"installed JAX {jax.__version__}", check(from_directory(root), series))


_STEP = """
import json, statistics, sys, time
record = sys.argv[1] == "recorded"
small = sys.argv[2] == "small"
if record:
    import jaxtrace_nb as jt
    jt.start()
import equinox as eqx, jax, jax.numpy as jnp, optax
events = []
def listener(event, seconds, **kw):
    if event.startswith("/jax/core/compile/"):
        events.append((event.rsplit("/", 1)[-1], seconds, str(kw.get("fun_name"))))
jax.monitoring.register_event_duration_secs_listener(listener)
width, depth, batch = (64, 2, 32) if small else (2048, 8, 1024)
key = jax.random.PRNGKey(0)
model = eqx.nn.MLP(width, width, width, depth, key=key)
optim = optax.adamw(1e-3)
opt_state = optim.init(eqx.filter(model, eqx.is_array))
x = jax.random.normal(key, (batch, width))

@eqx.filter_jit
def train_step(model, opt_state, x):
    loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean(jax.vmap(m)(x) ** 2))(model)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss

start = time.perf_counter()
out = train_step(model, opt_state, x)
jax.block_until_ready(out)
first = time.perf_counter() - start
mine = [e for e in events if "train_step" in e[2]]
result = {"first_call_s": first,
          "jax_events": {k: sum(s for e, s, _ in mine if e == k) for k in
                         ("jaxpr_trace_duration", "jaxpr_to_mlir_module_duration",
                          "backend_compile_duration")}}
if record:
    rows = jt.log()
    rows = rows[rows["function"] == "train_step"]
    result["recorded"] = {c: float(rows[c].fillna(0).sum()) for c in
                          ("trace_s", "lower_s", "compile_s")}

def steady(n=50):
    m, s = model, opt_state
    times = []
    for _ in range(n):
        t = time.perf_counter()
        m, s, loss = train_step(m, s, x)
        jax.block_until_ready(loss)
        times.append(time.perf_counter() - t)
    return statistics.median(times)

@jax.jit
def tiny(a):
    return a + 1
tiny_eqx = eqx.filter_jit(lambda a: a + 1)
a = jnp.ones(8)
def hit(fn, n=2000):
    jax.block_until_ready(fn(a))
    t = time.perf_counter()
    for _ in range(n):
        out = fn(a)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n

if record:
    on, off, hit_on, hit_off = [], [], {"jit": [], "filter_jit": []}, {"jit": [], "filter_jit": []}
    for i in range(6):
        for state in (("on", "off") if i % 2 == 0 else ("off", "on")):
            (jt.start if state == "on" else jt.stop)()
            (on if state == "on" else off).append(steady())
            for name, fn in (("jit", tiny), ("filter_jit", tiny_eqx)):
                (hit_on if state == "on" else hit_off)[name].append(hit(fn))
    result["steady_on_s"] = statistics.median(on)
    result["steady_off_s"] = statistics.median(off)
    result["hit_on_s"] = {k: statistics.median(v) for k, v in hit_on.items()}
    result["hit_off_s"] = {k: statistics.median(v) for k, v in hit_off.items()}
else:
    result["steady_s"] = statistics.median([steady() for _ in range(6)])
    result["hit_s"] = {"jit": hit(tiny), "filter_jit": hit(tiny_eqx)}
result["platform"] = jax.devices()[0].platform
result["device"] = jax.devices()[0].device_kind
result["imported_jaxtrace_nb"] = "jaxtrace_nb" in sys.modules
print(json.dumps(result))
"""


def train_step_section(small: bool) -> list[str]:
    size = "small" if small else "full"
    runs = {}
    for mode in ("plain", "recorded", "plain", "recorded"):  # alternated: two of each
        rc, out, err = _python(_STEP, mode, size, timeout=300)
        if rc != 0:
            return [f"train step ({mode}) failed, exit {rc}: {err[-800:]}"]
        runs.setdefault(mode, []).append(json.loads(out.strip().splitlines()[-1]))
    lines = []
    for rec, plain in zip(runs["recorded"], runs["plain"]):
        compile_jax = rec["jax_events"]["backend_compile_duration"]
        compile_ours = rec["recorded"]["compile_s"]
        lines += [
            f"AdamW MLP train step ({size}) on {rec['device']} ({rec['platform']}):",
            f"  first call: recorded {rec['first_call_s']:.3f} s, plain process "
            f"{plain['first_call_s']:.3f} s "
            f"(ratio {rec['first_call_s'] / plain['first_call_s']:.3f})",
            f"  recorded trace/lower/compile s: {rec['recorded']}",
            f"  JAX's events in that call:      {rec['jax_events']}",
            f"  compile_s recorded / JAX's backend_compile_duration: "
            f"{compile_ours / compile_jax if compile_jax else float('nan'):.4f}",
            f"  steady step: on {rec['steady_on_s'] * 1e3:.3f} ms, "
            f"off {rec['steady_off_s'] * 1e3:.3f} ms "
            f"(on/off {rec['steady_on_s'] / rec['steady_off_s']:.3f}); fresh process without "
            f"jaxtrace_nb {plain['steady_s'] * 1e3:.3f} ms",
            "  cache-hit call on/off: "
            + ", ".join(
                f"{k} {rec['hit_on_s'][k] / rec['hit_off_s'][k]:.3f} "
                f"({rec['hit_on_s'][k] * 1e6:.2f} / {rec['hit_off_s'][k] * 1e6:.2f} µs; plain "
                f"process {plain['hit_s'][k] * 1e6:.2f} µs)"
                for k in ("jit", "filter_jit")
            ),
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--dry-run", action="store_true", help="small sizes (a CPU: no GPU figure)")
    args = parser.parse_args(argv)
    import jax

    started = time.perf_counter()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    lines = [
        f"$ python -m benchmarks.device.newest_jax {' '.join(argv or sys.argv[1:])}",
        f"commit {commit.stdout.strip() or '?'}; JAX {jax.__version__}; devices {jax.devices()}",
        f"dry run on {jax.devices()[0].platform}: NOT GPU figures" if args.dry_run else "",
        "",
        "== 1. The self-check under each user setting",
        *self_check_section(),
        "",
        "== 2. JAX's internals looked for in the installed JAX",
        *reads_section(),
        "",
        "== 3. A train step beside JAX's events",
        *train_step_section(small=args.dry_run),
        "",
        f"(took {time.perf_counter() - started:.1f} s)",
    ]
    text = "\n".join(lines)
    print(text)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
