"""Every compile recorded (issue 54, item 3): JAX compiles a module it lowered before again for
other devices, without a trace or a lowering of its own (an argument committed to another device;
the same devices in another mesh order). Each such compile is a row with JAX's own seconds.

The oracle is JAX's verdict: its backend-compile events (`jax.monitoring`), one per XLA compile,
with their seconds. Four CPU devices (`--xla_force_host_platform_device_count`, set before JAX
starts): the program runs in a child process.
"""

import json
import os
import subprocess
import sys
import textwrap

_PROGRAM = textwrap.dedent("""
    import json, os
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxtrace_nb as jt

    if os.environ.get("JT_TEST_CACHE"):  # JAX's persistent cache, in a directory of the test's
        jax.config.update("jax_compilation_cache_dir", os.environ["JT_TEST_CACHE"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    hits = []  # JAX's verdict on each persistent cache lookup
    jax.monitoring.register_event_listener(
        lambda e, **k: hits.append(e.rsplit("_", 1)[-1]) if e.startswith(
            "/jax/compilation_cache/cache_") else None)
    compiles = []  # JAX's verdict: (its name of the function, seconds) of each XLA compile
    jax.monitoring.register_event_duration_secs_listener(
        lambda e, s, fun_name=None, **k: compiles.append((fun_name, s))
        if e == "/jax/core/compile/backend_compile_duration" else None)
    jt.start()

    def double(x):
        return x * 2 + 1

    f = jax.jit(double)
    devices = jax.devices()
    x = np.ones(8, np.float32)
    for d in devices:  # committed to each device in turn: lowered once, compiled four times
        f(jax.device_put(x, d))
    f(jax.device_put(x, devices[0]))  # compiled for that device before: JAX's cache serves it
    forward = Mesh(np.array(devices[:2]), ("a",))
    backward = Mesh(np.array(devices[:2][::-1]), ("a",))
    f(jax.device_put(x, NamedSharding(forward, P("a"))))
    f(jax.device_put(x, NamedSharding(backward, P("a"))))  # the same devices, the other order
    df = jt.log(internal=False)
    rows = df[["kind", "trace_number", "cause", "before", "after", "explanation", "compile_s",
               "cache_hit"]]
    print(json.dumps({
        "jax": [s for name, s in compiles if name == "jit(double)"],
        "hits": hits,
        "rows": rows.astype(object).where(rows.notna(), None).values.tolist(),
        "faults": jt.faults(),
    }))
""")


def _run(cache=None) -> dict:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    }
    if cache is not None:
        env["JT_TEST_CACHE"] = str(cache)
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_compile_of_a_module_lowered_before_is_a_row_with_jaxs_seconds():
    out = _run()
    jax_seconds, rows = out["jax"], out["rows"]
    assert out["faults"] == {}
    assert len(jax_seconds) == 6  # JAX's verdict: 4 devices, then the mesh in each order
    assert [r[6] for r in rows] == jax_seconds  # one row per compile, with JAX's seconds
    kinds = [(kind, number, cause) for kind, number, cause, *_ in rows]
    assert kinds == [
        ("trace", 1, "first"),
        ("compile", 1, "sharding"),
        ("compile", 1, "sharding"),
        ("compile", 1, "sharding"),
        ("trace", 2, "sharding"),  # the mesh is in the array's type: a retrace
        ("compile", 2, "sharding"),
    ]
    assert [(r[3], r[4]) for r in rows[1:4]] == [
        ("cpu:0", "cpu:1"),
        ("cpu:1", "cpu:2"),
        ("cpu:2", "cpu:3"),
    ]
    assert "without a new trace or lowering" in rows[1][5] and "other devices" in rows[1][5]
    assert (rows[5][3], rows[5][4]) == ("cpu:0, cpu:1", "cpu:1, cpu:0")
    assert "the same devices in another order" in rows[5][5]


def test_such_a_compile_says_whether_jaxs_persistent_cache_served_it(tmp_path):
    """With JAX's persistent cache on, a compile with no lowering of its own says whether the cache
    served it, as a lowering's compile does: JAX's lookups miss in a first process and hit in a
    second one, and each row says so."""
    first, second = _run(tmp_path), _run(tmp_path)
    for run, hit in ((first, False), (second, True)):
        assert run["faults"] == {}
        assert [r[7] for r in run["rows"]] == [hit] * 6
        outcomes = [h for h in run["hits"] if h in ("hits", "misses")]
        assert outcomes == (["hits"] if hit else ["misses"]) * 6  # JAX's verdict


def test_a_placement_change_of_a_program_lowered_many_compiles_ago_is_named(jt):
    """A program lowered, then 10 others, then compiled again for another placement (JAX's trace
    cache serves its trace): the compile row names the placement, not "a program JAX derived"."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    traces = []

    def twice(x):
        traces.append(1)
        return x * 2

    f = jax.jit(twice)
    for n in range(1, 12):
        f(jnp.ones(n))
    f(jax.device_put(np.ones(1, np.float32), jax.devices()[0]))
    assert len(traces) == 11  # JAX's verdict: the last call's trace came from its cache
    df = jt.log(internal=False)
    last = df.iloc[-1]
    assert (last["kind"], last["cause"], last["leaf"]) == ("compile", "sharding", "x")
    assert (last["before"], last["after"]) == ("uncommitted", "committed to cpu:0")
    assert "derived" not in last["explanation"]


_CHILD = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    import jaxtrace_nb as jt

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda e, s, fun_name=None, **k: compiles.append(fun_name)
        if e == "/jax/core/compile/backend_compile_duration" else None)
    jt.start()

    def double(x):
        return x * 2 + 1

    def other(x):
        return x - 3

    f = jax.jit(double)
    d = jax.devices()
    case = sys.argv[1]
    if case == "modules":  # two modules: the f32[8] one compiled for cpu:1 only at the end
        f(jax.device_put(np.ones(8, np.float32), d[0]))
        f(jax.device_put(np.ones(4, np.float32), d[1]))
        f(jax.device_put(np.ones(8, np.float32), d[1]))
    elif case == "options":  # one module, compiled again with other XLA options
        f.lower(jnp.ones(8)).compile()
        f.lower(jnp.ones(8)).compile(compiler_options={"xla_embed_ir_in_executable": True})
    elif case == "stale":  # a lowering never compiled between two compiles of another module
        f(jax.device_put(np.ones(8, np.float32), d[0]))
        jax.jit(other).lower(np.ones(3, np.float32)).as_text()
        f(jax.device_put(np.ones(8, np.float32), d[1]))
    df = jt.log(internal=False)
    rows = df[["function", "kind", "cause", "before", "after", "explanation", "compile_s"]]
    print(json.dumps({
        "jax": sum(1 for c in compiles if c == "jit(double)"),
        "rows": rows.astype(object).where(rows.notna(), None).values.tolist(),
        "faults": jt.faults(),
    }))
""")


def _child(case: str) -> dict:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, case], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_devices_are_compared_with_the_same_modules_compiles():
    """The f32[8] module compiled for cpu:0, then (after another module for cpu:1) for cpu:1: a
    placement change of that module, cpu:0 → cpu:1, never "compiled for before"."""
    out = _child("modules")
    assert out["faults"] == {} and out["jax"] == 3
    last = out["rows"][-1]
    assert (last[1], last[2], last[3], last[4]) == ("compile", "sharding", "cpu:0", "cpu:1")


def test_a_compile_with_other_xla_options_is_not_unknown():
    """The same module and devices compiled with other XLA options: JAX's compile key differs in
    its options, and the row says so (no `unknown`, which claims an identical key)."""
    out = _child("options")
    assert out["faults"] == {} and out["jax"] == 2
    last = out["rows"][-1]
    assert last[1] == "compile" and last[2] is None
    assert "other XLA compiler options (xla_embed_ir_in_executable)" in last[5]


def test_a_lowering_never_compiled_takes_no_other_compile():
    """`jax.jit(other).lower(...)` alone, then a compile of `double`'s module for another device:
    the compile is `double`'s row, with its seconds; `other` has no compile seconds."""
    out = _child("stale")
    assert out["faults"] == {} and out["jax"] == 2
    rows = out["rows"]
    (other,) = [r for r in rows if r[0] == "other"]
    assert other[6] is None
    assert [(r[0], r[1], r[2]) for r in rows if r[0] == "double"] == [
        ("double", "trace", "first"),
        ("double", "compile", "sharding"),
    ]


def _compile_rows(jt, name):
    df = jt.log(internal=False)
    return df[(df["kind"] == "compile") & df["function"].str.endswith(name)].to_dict("records")


def test_a_program_traced_on_another_thread_is_compiled_here_and_said_so(jt):
    """Another thread traced the program (`f.trace`: no lowering) or traced and lowered it
    (`.lower()`: no compile); this thread's call finds the trace in JAX's caches and no compiled
    program, and makes it. JAX's verdict: one trace (its counter), and a backend compile on this
    thread. Before, the first read "another program JAX derived from this function (e.g. batched
    by `jax.vmap`) for arguments of other types", which it was not."""
    import threading

    import jax
    import jax.numpy as jnp
    import pandas as pd

    traces = [0]

    def traced(x):
        traces[0] += 1
        return jnp.sin(x) * 2

    def lowered(x):
        return jnp.cos(x) + 1

    f, g = jax.jit(traced), jax.jit(lowered)
    for stage in (lambda: f.trace(jnp.ones(3)), lambda: g.trace(jnp.ones(4)).lower()):
        worker = threading.Thread(target=stage)
        worker.start()
        worker.join()
    f(jnp.ones(3))
    g(jnp.ones(4))
    assert traces[0] == 1
    (f_row,) = _compile_rows(jt, "traced")  # JAX's compile, reported on this thread
    (g_row,) = _compile_rows(jt, "lowered")
    assert f_row["thread"] == g_row["thread"] == threading.get_ident()
    assert f_row["explanation"].startswith(
        "Lowered and compiled on this thread the program of trace #1, which another thread made"
    )
    assert g_row["explanation"].startswith(
        "Compiled on this thread the program of trace #1, which another thread made"
    )
    assert pd.isna(f_row["cause"]) and pd.isna(g_row["cause"])
    assert jt.faults() == {}


def test_a_call_while_another_thread_compiles_the_program_waits_for_that_compile(jt):
    """Another thread traced, lowered and is compiling the program when this thread calls it: JAX
    computes each of its cached steps once per key, the second caller waiting for the first, so
    the call neither traces, lowers nor compiles: JAX's verdict is one trace (its counter) and one
    backend compile in all, whose end comes between the call's start and its return. The log has
    that one trace and its compile, made on the other thread, and no compile on this one. (This
    is why a `jt.precompile` worker still compiling a size spares the program the rest of that
    compile.) Where this thread reached JAX's compile first (the other thread is between its
    lowering and its compile for a moment), the other thread waits instead, and where the other
    thread's compile ended before the call came, there was nothing to wait for: still one compile
    each time, and the scenario is run again, at most three times."""
    import threading
    import time

    import jax
    import jax.numpy as jnp

    from jaxtrace_nb._jax._internals import listener_api

    def attempt(n):
        traces, order = [0], []
        lowered = threading.Event()
        name = f"deep{n}"

        def deep(x):
            traces[0] += 1
            for i in range(120):  # a compile long enough to be under way when the call comes
                x = jnp.tanh(x @ x.T + i)
            return x

        deep.__name__ = deep.__qualname__ = name

        def listen(event, seconds, fun_name=None, **kwargs):
            if fun_name != f"jit({name})":
                return
            if event.endswith("jaxpr_to_mlir_module_duration"):
                lowered.set()
            if event.endswith("backend_compile_duration"):
                order.append(("compiled", threading.current_thread().name))

        register, unregister = listener_api("duration")  # JAX 0.8.0 has no public unregister
        register(listen)
        try:
            f = jax.jit(deep)
            x = jnp.ones((4, 4))
            worker = threading.Thread(
                target=lambda: f.trace(x).lower().compile(), name="other", daemon=True
            )
            worker.start()
            assert lowered.wait(120)
            time.sleep(0.01)  # (the lowering's event comes just before the compile begins)
            order.append(("call", None))
            assert f(x).shape == (4, 4)
            order.append(("returned", None))
            worker.join(120)
        finally:
            unregister(listen)
        assert traces[0] == 1
        assert [what for what, _ in order].count("compiled") == 1, order  # never compiled twice
        return name, order, worker.ident

    for n in range(3):
        name, order, worker = attempt(n)
        if order == [("call", None), ("compiled", "other"), ("returned", None)]:
            break  # the call came while the other thread compiled, and waited for it
    assert order == [("call", None), ("compiled", "other"), ("returned", None)], order
    df = jt.log(internal=False)
    (row,) = df[df["function"].str.endswith(name)].to_dict("records")  # no compile row here
    assert (row["kind"], row["thread"]) == ("trace", worker) and row["compile_s"] > 0
    assert jt.faults() == {}
