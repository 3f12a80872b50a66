"""Persistent compilation cache: what reading each key's parts costs, on a compile-heavy workload.

One process, JAX's persistent cache on (a fresh directory, every compile written). Each round
compiles `PROGRAMS` new program(s) (a 16-layer MLP train step, value and gradient; a constant of
the round's own makes every key new, so each compile misses and is written), then, with JAX's
in-memory caches cleared, calls them again: every compile is then a hit of the persistent cache.
Modes, rotated round by round so that noise hits each alike:

* ``off``: recording stopped (``jt.stop()``: JAX exactly as without jaxtrace_nb);
* ``recorded``: recording, every key's parts read and sent to the index (the feature on);
* ``recorded_no_keys``: recording, keys not read (the feature alone is the difference).

Our threads' work (the index writer's, the program profiles') is finished between rounds
(outside the timing, so that each round starts alike; it runs beside the compiles within a round).
The words of the misses are made when the log is read: that read is timed apart (`settle_s`), as
is the writer's flush. A warm start apart (`_warm_start`): `WARM_PROGRAMS` programs served by the
cache back to back, recording off and on by turns. Each phase is timed in wall seconds, in this
process's CPU seconds (all its threads: on a machine that other work loads, they are not inflated by
waiting for a core) and in the CPU seconds of the user's thread alone; the CPU seconds of our own
threads (``jaxtrace_nb-*``) are counted per round, their work for the round finished.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
import types

# A round is one compile (and its hit), so that the rounds of the three modes compared are a
# third of a second apart (1.4 s with 4 compiles a round), and slow stretches of a shared
# machine fall on each mode alike.
PROGRAMS = 1
ROUNDS = (
    360  # a multiple of the 3 modes: about 9 minutes on a 2-core CPU machine (intervals ±1.5 %)
)
PARTS_PROGRAMS = 4  # compiles a round where the listeners are timed
# A warm start: programs the persistent cache serves back to back, as a restarted run's first
# steps are (each hit's walk, handed to our thread after its load, falls in the next one's work).
WARM_PROGRAMS = 4
WARM_ROUNDS = 360  # rounds of WARM_PROGRAMS hits, the modes in turn: about 3 minutes

LAYERS = 16
WIDTH = 96
MODES = ("off", "recorded", "recorded_no_keys")


def _program(constant: float):
    import jax
    import jax.numpy as jnp

    def loss(params, x):
        for w, b in params:
            x = jnp.tanh(x @ w + b) * constant
        return jnp.mean(x**2)

    @jax.jit
    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)

    return step


def _round(programs, params, x) -> tuple[float, float, float]:
    """Wall seconds, this process's CPU seconds (every thread: XLA's, ours) and the calling
    thread's CPU seconds of one round."""
    import jax

    start, cpu, mine = time.perf_counter(), time.process_time(), time.thread_time()
    for step in programs:
        jax.block_until_ready(step(params, x))
    return time.perf_counter() - start, time.process_time() - cpu, time.thread_time() - mine


def _enter_mode(jt, session, mode: str) -> None:
    """JAX's in-memory caches cleared and a collection run; recording started afresh for a mode of
    `MODES` but ``off``, the keys not read for ``recorded_no_keys``."""
    import jax

    jax.clear_caches()
    gc.collect()
    if mode != "off":
        jt.reset()
        jt.start()
        if mode == "recorded_no_keys":
            session.probe.keys.uninstall()


def _our_threads_cpu() -> float | None:
    """CPU seconds used so far by this process's threads named ``jaxtrace_nb-*`` (alive ones);
    None where threads' CPU clocks cannot be read (``pthread_getcpuclockid``: Unix but macOS)."""
    import threading

    if not hasattr(time, "pthread_getcpuclockid"):
        return None
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith("jaxtrace_nb-") and thread.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except (OSError, ProcessLookupError):  # it ended meanwhile
                pass
    return total


def _finish_our_work(session) -> None:
    """Wait for the index writer's records and the profiles queued so far (outside any timing)."""
    session.cache.flush(120)
    _wait_for_profiles(session)


def _wait_for_profiles(session) -> None:
    import threading

    session.probe.measurer.hurry()  # (programs the cache served wait for JAX to be quiet a while)
    done = threading.Event()
    session.probe.measurer._profiling.submit(lambda _: done.set(), None)
    done.wait(120)


def _key_cost(jt, step, params, x, repeats: int) -> dict:
    """Seconds of JAX's own key computation for one compile of `step` (``compilation_cache.
    get_cache_key``, the module canonicalized, serialized and hashed), called directly with that
    compile's arguments: with recording on (each part's hash read) and stopped (JAX alone),
    alternated call by call. The minimum of `repeats` calls each: the least noise can add."""
    import jax
    from jax._src import compilation_cache

    captured = {}

    def capture(event, **kwargs):
        if event == "/jax/compilation_cache/compile_requests_use_cache" and not captured:
            frame = sys._getframe(2)
            if frame.f_code.co_name == "compile_or_get_cached":
                captured.update(
                    (k, frame.f_locals[k])
                    for k in ("computation", "devices", "compile_options", "backend")
                )

    jax.monitoring.register_event_listener(capture)
    try:
        jax.block_until_ready(step(params, x))
    finally:
        # JAX 0.8.0 has no public unregister (0.8.1 added it): its private one by callback.
        unregister = getattr(jax.monitoring, "unregister_event_listener", None)
        if unregister is None:
            from jax._src import monitoring

            unregister = monitoring._unregister_event_listener_by_callback
        unregister(capture)
    args = (
        captured["computation"],
        captured["devices"],
        captured["compile_options"],
        captured["backend"],
    )
    from jax._src import cache_key

    times = {"stopped": [], "recorded": []}
    teed = set()
    for i in range(repeats):
        for mode in ("stopped", "recorded") if i % 2 == 0 else ("recorded", "stopped"):
            if mode == "recorded":
                jt.start()
            teed.add(
                (mode, not isinstance(cache_key.hashlib, types.ModuleType))
            )  # recording: JAX's hashlib is ours
            start = time.perf_counter()
            compilation_cache.get_cache_key(*args)
            times[mode].append(time.perf_counter() - start)
            if mode == "recorded":
                jt.stop()
    best = {mode: min(t) for mode, t in times.items()}
    return {
        "repeats": repeats,
        "min_s": best,
        "median_s": {m: sorted(t)[len(t) // 2] for m, t in times.items()},
        "added_s": best["recorded"] - best["stopped"],
        "parts_read": sorted(teed) == [("recorded", True), ("stopped", False)],
        "module_bytes": len(str(captured["computation"])),
    }


# Compiles back to back: blocks of rounds with our threads' work not finished between rounds, only
# at the block's end, counted in the block's seconds ("all in").
# 96 a mode, off and recorded in the order off, recorded, recorded, off, ...: about 5 minutes
BLOCKS = 192
BLOCK_ROUNDS = 4


def _blocks(jt, session, params, x, blocks: int, rounds: int) -> dict:
    """`blocks` blocks of `rounds` rounds (a new program missed, then, JAX's in-memory caches
    cleared, served by the cache), recording off and on in the order off, recorded, recorded, off,
    ...; per block the wall seconds of its rounds and of the whole block with our threads' work for
    it finished at its end (`all_in_s`): what a program that compiles without pause pays.

    As in a training loop, a round's program lives on while the next round runs (its function and
    JAX's trace of it), so that our thread's walk of a hit falls in the next round's work (at its
    miss's lookup: `_measure.AFTER_COMPILE_DELAY_S`; in-memory caches are cleared before the hit
    only: a new function misses them anyway). A block's end finishes our work as a read of the log
    does (the programs not walked yet walked there, the index writer's records written): not by
    waiting for our thread, whose jobs start after a delay, time in which it does no work."""
    import jax

    runs: dict = {"off": [], "recorded": []}
    counter = 0
    for b in range(blocks):
        mode = ("off", "recorded")[(b + b // 2) % 2]
        gc.collect()
        if mode == "recorded":
            jt.reset()
            jt.start()
        start, rounds_s = time.perf_counter(), 0.0
        for _ in range(rounds):
            counter += 1
            programs = [_program(11.0 + counter * 1e-3)]  # (the previous round's kept until here)
            rounds_s += _round(programs, params, x)[0]
            jax.clear_caches()
            rounds_s += _round(programs, params, x)[0]
        session.probe.make_pending()
        session.cache.flush(120)
        all_in = time.perf_counter() - start
        _wait_for_profiles(session)  # (jobs left: none but those the read above made already)
        runs[mode].append({"rounds_s": rounds_s, "all_in_s": all_in})
        if mode == "recorded":
            jt.stop()
    return {"blocks": blocks, "rounds": rounds, "runs": runs}


def _warm_start(jt, session, params, x, rounds: int, programs: int) -> dict:
    """`rounds` rounds of `programs` compiles served by the persistent cache back to back (JAX's
    in-memory caches cleared before each round), the modes of `MODES` in turn; per round its
    wall, process CPU and user's-thread CPU seconds (`_round`) and our threads' CPU
    seconds for the round (their work finished after the timing)."""
    steps = [_program(7.0 + i * 1e-6) for i in range(programs)]
    jt.stop()
    _round(steps, params, x)  # compiled and written once: every later compile of these is a hit
    runs: dict = {mode: [] for mode in MODES}
    order = [
        mode
        for r in range(rounds // len(MODES))
        for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
    ]
    for mode in order:
        _enter_mode(jt, session, mode)
        ours = _our_threads_cpu()
        wall, cpu, user = _round(steps, params, x)
        row = {"hits_s": wall, "hits_cpu_s": cpu, "hits_user_cpu_s": user}
        _finish_our_work(session)
        if ours is not None:
            row["ours_cpu_s"] = _our_threads_cpu() - ours
        if mode == "recorded":
            row["hits"] = int((jt.log()["persistent_cache"] == "hit").sum())
        if mode != "off":
            jt.stop()
        runs[mode].append(row)
    return {"programs": programs, "rounds": rounds, "modes": list(MODES), "runs": runs}


# Where recording's own time goes at a compile: the probe's listeners (the outer three, timed
# outermost only) and, inside them, the parts issue 30 and the XLA cost read add; the program's
# size (`measure`) and line profile run in our own thread (`_background`) while XLA compiles.
_LISTENER_PARTS = (
    ("_recording._probe", "Probe", "_on_trace_start"),
    ("_recording._listeners", "Listeners", "on_duration"),
    ("_recording._listeners", "Listeners", "on_event"),
    ("_recording._probe", "Probe", "_trace_end"),
    ("_recording._measure", "Measurer", "_profile"),
    ("_recording._measure", "Measurer", "measure"),
    ("_recording._listeners", "Listeners", "_xla_cost"),
)


def _listener_parts(jt, session, params, x, rounds: int) -> dict:
    """Milliseconds per compile spent in each of `_LISTENER_PARTS`, over `rounds` recorded rounds
    (misses then hits, as above), each method wrapped in a timer for these rounds only."""
    import importlib

    import jax

    spent = {name: 0.0 for _, _, name in _LISTENER_PARTS}
    depth = {name: 0 for name in spent}
    originals = []
    for module, cls_name, name in _LISTENER_PARTS:
        cls = getattr(importlib.import_module(f"jaxtrace_nb.{module}"), cls_name)
        original = cls.__dict__[name]

        def timed(*args, _original=original, _name=name, **kwargs):
            depth[_name] += 1
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                depth[_name] -= 1
                if not depth[_name]:
                    spent[_name] += time.perf_counter() - start

        originals.append((cls, name, original))
        setattr(cls, name, timed)
    compiles = 0
    try:
        for r in range(rounds):
            programs = [_program(3.0 + r * 1e-3 + i * 1e-6) for i in range(PARTS_PROGRAMS)]
            jax.clear_caches()
            jt.reset()
            jt.start()
            _round(programs, params, x)
            jax.clear_caches()
            _round(programs, params, x)
            session.cache.flush(120)
            jt.stop()
            compiles += 2 * len(programs)
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)
    return {
        "compiles": compiles,
        "ms_per_compile": {k: v * 1e3 / compiles for k, v in spent.items()},
    }


# MLP steps of (layers, width) from 27 to 2,694 equations: what reading XLA's figures costs
# against the compile, which `_cost.XLA_READ_S_PER_EQN` and `_measure.XLA_COST_SHARE` rest on.
XLA_READ_PROGRAMS = ((1, 8), (2, 32), (4, 96), (16, 96), (64, 32), (128, 16))


def _xla_reads(repeats: int) -> list[dict]:
    """Per program: its equations (`eqns_total`), and the median over `repeats` compiles of XLA's
    compile seconds (JAX's own event, as recording reads them) and of the first read of its FLOPs
    (``cost_analysis``) and bytes (``get_compiled_memory_stats``)."""
    import jax.numpy as jnp

    from jaxtrace_nb._jax._internals import COMPILE_EVENT, listener_api
    from jaxtrace_nb._recording._cost import count_equations

    compiled = []
    register, unregister = listener_api("duration")

    def on_duration(event, duration, **kwargs):
        if event == COMPILE_EVENT:
            compiled.append(duration)

    register(on_duration)
    out = []
    try:
        for layers, width in XLA_READ_PROGRAMS:
            params = [(jnp.full((width, width), 0.01), jnp.zeros(width)) for _ in range(layers)]
            x = jnp.ones((8, width))
            times = {"compile": [], "flops": [], "bytes": []}
            equations = 0
            for i in range(repeats):
                traced = _program(2.0 + i).trace(params, x)
                equations = count_equations(traced.jaxpr.jaxpr, {})
                executable = traced.lower().compile()._executable.xla_executable
                times["compile"].append(compiled[-1])
                for figure, read in (
                    ("flops", executable.cost_analysis),
                    ("bytes", executable.get_compiled_memory_stats),
                ):
                    start = time.perf_counter()
                    read()
                    times[figure].append(time.perf_counter() - start)
            median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
            out.append(
                {
                    "layers": layers,
                    "width": width,
                    "eqns_total": equations,
                    "compile_s": median["compile"],
                    "flops_s": median["flops"],
                    "bytes_s": median["bytes"],
                }
            )
    finally:
        unregister(on_duration)
    return out


def worker(quick: bool) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session

    rounds = 2 if quick else ROUNDS  # each mode runs first, second and third alike
    programs_per_round = 2 if quick else PROGRAMS
    cache = tempfile.mkdtemp(prefix="jaxtrace-bench-cache-")
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    session = get_session()
    params = [(jnp.full((WIDTH, WIDTH), 0.01), jnp.zeros(WIDTH)) for _ in range(LAYERS)]
    x = jnp.ones((8, WIDTH))
    runs = {mode: [] for mode in MODES}
    warm = [_program(0.5)]  # JAX's own first compiles (and the index's creation) out of the timing
    jt.start()
    _round(warm, params, x)
    session.cache.flush(60)
    jt.stop()
    counter = 0
    for r in range(rounds):
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
        for mode in order:
            counter += 1
            programs = [
                _program(1.0 + counter * 1e-3 + i * 1e-6) for i in range(programs_per_round)
            ]
            _enter_mode(jt, session, mode)
            ours = _our_threads_cpu()
            missed, missed_cpu, missed_user = _round(programs, params, x)
            jax.clear_caches()
            hit, hit_cpu, hit_user = _round(programs, params, x)
            row = {
                "miss_s": missed,
                "hit_s": hit,
                "miss_cpu_s": missed_cpu,
                "hit_cpu_s": hit_cpu,
                "miss_user_cpu_s": missed_user,
                "hit_user_cpu_s": hit_user,
            }
            if mode == "recorded":
                _wait_for_profiles(
                    session
                )  # (so that the read below makes the words of the misses only)
                flushed = time.perf_counter()
                session.cache.flush(120)
                row["flush_s"] = time.perf_counter() - flushed
                settled = time.perf_counter()
                df = jt.log()
                row["settle_s"] = time.perf_counter() - settled
                verdicts = df["persistent_cache"].dropna().tolist()
                row["misses"] = sum(v.startswith("miss") for v in verdicts)
                row["hits"] = sum(v == "hit" for v in verdicts)
                row["explained"] = sum(
                    v.startswith("miss: the computation differs") for v in verdicts
                )
            _finish_our_work(session)
            if ours is not None:
                row["ours_cpu_s"] = _our_threads_cpu() - ours
            if mode != "off":
                jt.stop()
            runs[mode].append(row)
    key_cost = _key_cost(jt, _program(0.25), params, x, 20 if quick else 100)
    warm_start = _warm_start(jt, session, params, x, 6 if quick else WARM_ROUNDS, WARM_PROGRAMS)
    blocks = _blocks(jt, session, params, x, 4 if quick else BLOCKS, 2 if quick else BLOCK_ROUNDS)
    parts = _listener_parts(jt, session, params, x, 1 if quick else 5)
    xla_reads = _xla_reads(2 if quick else 7)
    index = os.path.join(cache, "jaxtrace_nb", "index.sqlite")
    return {
        "key_cost": key_cost,
        "warm_start": warm_start,
        "blocks": blocks,
        "listener_parts": parts,
        "xla_reads": xla_reads,
        "modes": list(MODES),
        "rounds": rounds,
        "programs_per_round": programs_per_round,
        "runs": runs,
        "layers": LAYERS,
        "width": WIDTH,
        "faults": jt.faults(),
        "index_bytes": sum(
            os.path.getsize(index + end) for end in ("", "-wal") if os.path.exists(index + end)
        ),
    }
