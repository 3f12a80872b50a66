"""Trace path: a retrace-heavy workload with and without recording, and beside JAX's and Equinox's
own tools.

Each workload retraces one freshly created function T times (a new shape every call), in
one of these modes, rotated round after round in one process so that machine noise hits
all of them:

* ``baseline``: nothing observes JAX (jaxtrace_nb is stopped: `jt.stop()` restores JAX exactly);
* ``recorded``: `jt.start()`; ``recorded_no_cost``: the same with the probe's compile-cost
  capture switched off (when the probe has `capture_cost`);
* ``recorded_timed``: recorded, with the probe's per-trace work timed by wrapping it (`_SelfTimer`).
  The wrappers cost time of their own, so this mode gives our seconds per trace and where they
  go, never a ratio that is reported as the cost of recording;
* ``explain``: `jax_explain_cache_misses` on, its messages formatted into an in-memory log;
* ``eqx_assert``: the function wrapped in `eqx.debug.assert_max_traces` (under the jit).
"""

from __future__ import annotations

import cProfile
import gc
import io
import logging
import statistics
import time

# The probe's per-trace steps, timed separately: (owner, attribute) -> field.
PARTS = {
    ("decoder", "trace_record"): "signature_s",
    ("decoder", "plain_jit_record"): "signature_s",
    ("probe_module", "graph_stats"): "graph_s",
    ("lifecycle", "on_trace"): "draft_s",
}
MODES = ("baseline", "recorded", "recorded_no_cost", "recorded_timed", "explain", "eqx_assert")


class _SelfTimer:
    """Times the probe's per-trace work (the trace-start hook and the trace-end listener) and its
    listeners by shadowing them: on the instances, and on the decoder class and probe module.
    Shadowed only while `on` (the hook and listeners are taken at `jt.start()`: switch before
    it)."""

    def __init__(self, session):
        from jaxtrace_nb._recording import _measure
        from jaxtrace_nb._recording._decode import Decoder

        probe = session.probe
        self.profiler = (
            None  # a cProfile.Profile to run inside the probe's per-trace work, when set
        )
        self.records: list[dict] = []
        self.listener_s = 0.0
        self._current: dict | None = None
        on_trace_start, trace_end = probe._on_trace_start, probe._trace_end
        listeners = probe.listeners
        on_duration, on_event = listeners.on_duration, listeners.on_event

        def timed(fn, finish):
            def run(*args, **kwargs):
                if self.profiler is not None:
                    self.profiler.enable()
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    finish(time.perf_counter() - start)
                    if self.profiler is not None:
                        self.profiler.disable()

            return run

        def start_hook(frame):
            rec = self._current = {
                "top": probe.internals.is_top_level(),
                "total_s": 0.0,
            } | dict.fromkeys(PARTS.values(), 0.0)
            self.records.append(rec)

            def finish(seconds):
                rec["total_s"] += seconds
                self._current = None

            return timed(on_trace_start, finish)(frame)

        def end_hook(duration):
            rec = self._current = next((r for r in reversed(self.records) if r["top"]), None)

            def finish(seconds):
                if rec is not None:
                    rec["total_s"] += seconds
                self.listener_s -= seconds  # counted in the trace, not as listener time
                self._current = None

            return timed(trace_end, finish)(duration)

        def timed_part(fn, field):
            def part(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    if self._current is not None:
                        self._current[field] += time.perf_counter() - start

            return part

        def timed_listener(fn):
            def listener(*args, **kwargs):
                start = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.listener_s += time.perf_counter() - start

            return listener

        owners = {"decoder": Decoder, "probe_module": _measure, "lifecycle": session.lifecycle}
        # (owner, name, original, shadow): the instances' attributes shadow their class's methods
        self._shadows = [
            (probe, "_on_trace_start", None, start_hook),
            (probe, "_trace_end", None, end_hook),
            (listeners, "on_duration", None, timed_listener(on_duration)),
            (listeners, "on_event", None, timed_listener(on_event)),
        ]
        for (owner, name), field in PARTS.items():
            target = owners[owner]
            original = getattr(target, name)
            self._shadows.append(
                (
                    target,
                    name,
                    original if owner != "lifecycle" else None,
                    timed_part(original, field),
                )
            )
        self.on = False

    def switch(self, on: bool) -> None:
        """Shadow the probe's steps (on) or restore them; call before `jt.start()`."""
        if on == self.on:
            return
        for target, name, original, shadow in self._shadows:
            if on:
                setattr(target, name, shadow)
            elif original is None:
                target.__dict__.pop(name, None)  # an instance attribute over its class's method
            else:
                setattr(target, name, original)
        self.on = on

    def take(self) -> tuple[list[dict], float]:
        records, listener_s = self.records, self.listener_s
        self.records, self.listener_s = [], 0.0
        return records, listener_s


def _put(shape):
    import jax
    import numpy as np

    return jax.device_put(np.ones(shape, np.float32))


def _spec(shape):
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _tree_workload(n_leaves: int, n_traces: int, trace_only: bool):
    """Parameters as a dict of `n_leaves` arrays; the first leaf's shape changes every call."""
    import jax

    leaf = _spec if trace_only else _put
    shared = {f"w{i:05d}": leaf((4,)) for i in range(1, n_leaves)}
    inputs = [({"w00000": leaf((k + 1,)), **shared},) for k in range(n_traces)]

    def make():
        def step(params):
            return jax.tree.map(lambda a: a * 2.0, params)

        return step

    return make, inputs


def _module_workload(n_traces: int):
    """An Equinox MLP under `eqx.filter_jit`; the batch size changes every call."""
    import equinox as eqx
    import jax

    model = eqx.nn.MLP(16, 16, 32, 8, key=jax.random.PRNGKey(0))
    inputs = [(model, _put((b + 1, 16))) for b in range(n_traces)]

    def make():
        def forward(model, x):
            return jax.vmap(model)(x)

        return forward

    return make, inputs


def _helpers_workload(n_layers: int, n_traces: int):
    """A model whose every trace runs hundreds of nested traces of JAX's own jitted helpers
    (`jnp` ufuncs and `jax.nn` functions, each traced anew per shape): 120 layers of distinct
    widths; the batch size changes every call."""
    import jax

    widths = [8 + (7 * i) % 40 for i in range(n_layers + 1)]
    weights = [_spec((a, b)) for a, b in zip(widths[:-1], widths[1:])]
    inputs = [(weights, _spec((k + 1, widths[0]))) for k in range(n_traces)]

    def make():
        def model(weights, x):
            for w in weights:
                x = jax.nn.relu(x @ w) * 0.5 + jax.numpy.tanh(x @ w)
            return x.sum()

        return model

    return make, inputs


def workloads(quick: bool) -> list[dict]:
    """The workloads: name, leaves, traces per run, and how each call is made."""
    # (how, leaves, traces per run, rounds): more rounds where a run is short and noise is large
    # (the
    # 10-leaf trace-only run lasts ~0.25 s, and its ratio moved 1.039 -> 1.055 between two 15-round
    # runs).
    if quick:
        plan = [
            ("calls", 10, 6, 1),
            ("calls", 100, 3, 1),
            ("module", None, 4, 1),
            ("trace", 10, 12, 1),
            ("trace", 100, 6, 1),
            ("trace", 1000, 3, 1),
            ("helpers", 20, 3, 1),
        ]
    else:
        plan = [
            ("calls", 10, 100, 7),
            ("calls", 1000, 12, 5),
            ("calls", 10000, 3, 3),
            ("module", None, 60, 5),
            ("trace", 10, 300, 45),
            ("trace", 1000, 40, 9),
            ("trace", 10000, 4, 5),
            ("helpers", 120, 12, 7),
        ]
    out = []
    for how, leaves, traces, rounds in plan:
        if how == "helpers":
            make, inputs = _helpers_workload(leaves, traces)
            out.append(
                {
                    "name": f"jax.jit(model).trace, {leaves} layers: hundreds of nested jnp helper "
                    f"traces each, {traces} traces",
                    "how": "trace",
                    "jit": "jax",
                    "leaves": leaves + 1,
                    "traces": traces,
                    "rounds": rounds,
                    "make": make,
                    "inputs": inputs,
                }
            )
        elif how == "module":
            make, inputs = _module_workload(traces)
            out.append(
                {
                    "name": f"eqx.filter_jit MLP module (18 leaves), {traces} calls, new batch "
                    "size each",
                    "how": "calls",
                    "jit": "equinox",
                    "leaves": 18,
                    "traces": traces,
                    "rounds": rounds,
                    "make": make,
                    "inputs": inputs,
                }
            )
        else:
            make, inputs = _tree_workload(leaves, traces, how == "trace")
            verb = "jax.jit(f).trace" if how == "trace" else "jax.jit call"
            out.append(
                {
                    "name": f"{verb}, pytree of {leaves:,} leaves, {traces} traces",
                    "how": how,
                    "jit": "jax",
                    "leaves": leaves,
                    "traces": traces,
                    "rounds": rounds,
                    "make": make,
                    "inputs": inputs,
                }
            )
    return out


def _jitted(workload: dict, mode: str):
    import equinox as eqx
    import jax

    fn = workload["make"]()
    if mode == "eqx_assert":
        fn = eqx.debug.assert_max_traces(fn, max_traces=10**9)
    return eqx.filter_jit(fn) if workload["jit"] == "equinox" else jax.jit(fn)


def _run(workload: dict, mode: str, inputs, ctx) -> dict:
    """Retrace a fresh function once per input; seconds in total, and what the mode produced."""
    import jax

    jitted = _jitted(workload, mode)
    jt, session, stream = ctx["jt"], ctx["session"], ctx["stream"]
    ctx["timer"].switch(mode == "recorded_timed")
    if mode.startswith("recorded"):
        jt.reset()
        if ctx["has_capture_cost"]:
            session.probe.capture_cost = mode != "recorded_no_cost"
        jt.start()
    elif mode == "explain":
        jax.config.update("jax_explain_cache_misses", True)
    stream.seek(0)
    stream.truncate()
    gc.collect()
    start = time.perf_counter()
    try:
        for args in inputs:
            if workload["how"] == "trace":
                jitted.trace(*args)
            else:
                jax.block_until_ready(jitted(*args))
        total = time.perf_counter() - start
    finally:
        jt.stop()
        jax.config.update("jax_explain_cache_misses", False)
        if ctx["has_capture_cost"]:
            session.probe.capture_cost = True
    out = {"total_s": total, "traces": len(inputs)}
    if mode.startswith("recorded"):
        start = time.perf_counter()
        # the events and diagnoses deferred until read: what the first view pays
        session.lifecycle.publish()
        out["settle_s"] = time.perf_counter() - start
        records, listener_s = ctx["timer"].take()
        if mode == "recorded_timed":
            top = [r for r in records if r["top"]]
            out.update(
                recorded_top_traces=len(top),
                self_s=sum(r["total_s"] for r in records) + listener_s,
                listener_s=listener_s,
                per_trace=[
                    {k: r[k] for k in ("total_s", *dict.fromkeys(PARTS.values()))} for r in top
                ],
            )
        jt.reset()
    elif mode == "explain":
        out["log_bytes"] = len(stream.getvalue())
    return out


def worker(quick: bool) -> dict:
    """Every workload in every mode, its `rounds` times, modes rotated each round."""
    from _stats import hot_spots

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session

    session = get_session()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # users pay for formatting the explainer's messages
    logging.getLogger().addHandler(handler)
    has_capture_cost = hasattr(session.probe, "capture_cost")
    modes = [m for m in MODES if m != "recorded_no_cost" or has_capture_cost]
    timer = _SelfTimer(session)
    ctx = {
        "jt": jt,
        "session": session,
        "stream": stream,
        "has_capture_cost": has_capture_cost,
        "timer": timer,
    }
    plan = workloads(quick)
    for workload in plan:  # warm-up: every code path once, not counted
        for mode in modes:
            _run(workload, mode, workload["inputs"][:1], ctx)
    results = []
    for workload in plan:
        runs = {m: [] for m in modes}
        for r in range(workload["rounds"]):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                runs[mode].append(_run(workload, mode, workload["inputs"], ctx))
        results.append(
            {k: workload[k] for k in ("name", "how", "jit", "leaves", "traces", "rounds")}
            | {"runs": runs}
        )
    # Where our per-trace time goes, on the largest trace-only workload (profiled apart from the
    # timings).
    largest = max((w for w in plan if w["how"] == "trace"), key=lambda w: w["leaves"])
    ctx["timer"].profiler = cProfile.Profile()
    _run(largest, "recorded_timed", largest["inputs"], ctx)
    profile = {"workload": largest["name"], "top_own_time": hot_spots(ctx["timer"].profiler, 12)}
    ctx["timer"].profiler = None
    logging.getLogger().removeHandler(handler)
    timer.switch(False)
    return {
        "modes": modes,
        "capture_cost_available": has_capture_cost,
        "workloads": results,
        "self_profile": profile,
    }


def history_profile(per_trace_runs: list[list[tuple]]) -> dict:
    """Median self-time per trace by trace number bucket (2–8, 9–16, 17–half, last quarter)."""
    n = min(len(r) for r in per_trace_runs)
    by_index = [statistics.median(run[i]["total_s"] for run in per_trace_runs) for i in range(n)]
    buckets = {
        "#2-8": (1, 8),
        "#9-16": (8, 16),
        f"#17-{n // 2}": (16, n // 2),
        f"#{n - n // 4 + 1}-{n}": (n - n // 4, n),
    }
    return {
        label: statistics.median(by_index[lo:hi]) for label, (lo, hi) in buckets.items() if hi > lo
    }
