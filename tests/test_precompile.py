"""`jt.precompile`: the recorded signatures of a function compiled in background threads, from
one real call's arguments, so that the program's later calls at them do not trace or compile."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _persistent_cache_as_found():
    """Each test leaves JAX's persistent compilation cache as it found it: `jt.precompile` sets one
    up for a process that has none, and the rest of the suite must not run with it on."""
    from jax._src import compilation_cache

    before = jax.config.jax_compilation_cache_dir
    yield
    if jax.config.jax_compilation_cache_dir != before:
        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()


def _make_body():
    """A new function object each call (the same code: one function in the log), of which JAX
    holds no key, as in a fresh process."""

    def body(x, y):
        for _ in range(5):
            x = jnp.sin(x) * y
        return x

    return body


class Mlp(eqx.Module):
    w: jax.Array
    act: str = eqx.field(static=True)


def _make_apply():
    def apply(m, x, k):
        y = m.w @ x + k
        return jnp.tanh(y) if m.act == "tanh" else jax.nn.relu(y)

    return apply


def _main_thread_traces(jt, first_seq: int) -> list:
    import threading

    main = threading.main_thread().ident
    return [
        e for e in jt.log(internal=False).itertuples() if e.seq >= first_seq and e.thread == main
    ]


def test_jit_signatures_compiled_and_later_calls_do_not_trace(jt, tmp_path):
    recorded = jax.jit(_make_body())
    sizes = (2, 3, 5)
    expected = [np.asarray(recorded(jnp.ones((n, 3)), 2.0)) for n in sizes]
    fresh = jax.jit(_make_body())  # JAX holds none of its keys
    handle = jt.precompile(fresh, jnp.ones((2, 3)), 2.0)
    table = handle.wait(120)
    assert list(table.columns) == ["signature", "status", "reason", "compile_s", "saved_s"]
    assert list(table["status"]) == ["compiled"] * 3, table
    assert all(table["compile_s"] > 0)
    assert all(table["saved_s"] > table["compile_s"])  # and the worker's trace
    assert json.loads(table["signature"][1]) == {"x": "f32[3,3]", "y": "f32[] (weak)"}
    first = int(jt.log()["seq"].max()) + 1
    got = [np.asarray(fresh(jnp.ones((n, 3)), 2.0)) for n in sizes]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert _main_thread_traces(jt, first) == []  # served by what the workers compiled
    log = jt.log(internal=False)
    assert log["precompiled"].sum() == 3  # the workers' traces, marked
    assert not log[log["precompiled"] == False]["thread"].isna().any()  # noqa: E712
    # the summary and every view's headline: the seconds done ahead, as JAX reported them
    worker = log[log["precompiled"] == True]  # noqa: E712
    done_ahead = worker[["trace_s", "lower_s", "compile_s"]].sum().sum()
    row = jt.summary().set_index("function").loc[worker["function"].iloc[0]]
    assert row["precompiled_s"] == pytest.approx(done_ahead) and done_ahead > 0
    report = pathlib.Path(jt.report(tmp_path / "report.txt")).read_text()
    assert "jt.precompile: 3 compile(s) done ahead" in report


def test_a_signature_jax_holds_is_held(jt):
    f = jax.jit(_make_body())
    f(jnp.ones((2, 3)), 2.0)
    f(jnp.ones((4, 3)), 2.0)
    table = jt.precompile(f, jnp.ones((2, 3)), 2.0).wait(120)
    assert list(table["status"]) == ["held", "held"]


def test_this_sessions_keys_of_a_committed_call_are_held_not_compiled_again(jt):
    """This session's keys are traces': which placements JAX compiled them for is not known, so
    a trace JAX holds is `held`, never rebuilt uncommitted (a compile the program never calls)."""
    fn = jax.jit(_make_body())
    committed = [jax.device_put(jnp.ones((n, 3)), jax.devices()[0]) for n in (2, 3)]
    for x in committed:
        fn(x, 2.0)
    table = jt.precompile(fn, committed[0], 2.0).wait(60)
    assert list(table["status"]) == ["held", "held"], table


def test_filter_jit_plain_static_rebuilt_other_static_skipped_by_name(jt):
    recorded = eqx.filter_jit(_make_apply())
    relu, tanh = Mlp(jnp.ones((4, 3)), "relu"), Mlp(jnp.ones((4, 3)), "tanh")
    cases = [(relu, 2, 2), (relu, 3, 2), (relu, 2, 5), (tanh, 2, 2)]
    expected = [np.asarray(recorded(m, jnp.ones((3, n)), k)) for m, n, k in cases]
    fresh = eqx.filter_jit(_make_apply())
    table = jt.precompile(fresh, relu, jnp.ones((3, 2)), 2).wait(120)
    status = dict(zip(table["signature"], table["status"]))
    reasons = dict(zip(table["signature"], table["reason"]))
    assert sorted(status.values()) == ["compiled", "compiled", "compiled", "skipped"], table
    (skipped,) = [s for s, v in status.items() if v == "skipped"]
    assert "'tanh'" in skipped and "`m.act`" in reasons[skipped]
    assert "recorded 'tanh', example 'relu'" in reasons[skipped]
    assert any('"k":"5"' in s for s, v in status.items() if v == "compiled")  # from its value
    first = int(jt.log()["seq"].max()) + 1
    got = [np.asarray(fresh(m, jnp.ones((3, n)), k)) for m, n, k in cases]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    traced = _main_thread_traces(jt, first)
    assert [t.leaf for t in traced] == ["m.act"]  # only the skipped signature traced here


def _make_static_body():
    def static_body(x, scale, act):
        return act(x) * scale

    return static_body


def test_jit_plain_static_rebuilt_other_static_skipped_by_name(jt):
    """`jax.jit` with `static_argnames`: a recorded static that is a plain value is compiled from
    that value; another callable is not rebuilt and its signature is skipped, naming it. The
    rebuilt call passes each argument as the example did (by keyword here): a signature recorded
    from a call that passed them by position is another key of JAX's, skipped, saying so."""
    statics = ("scale", "act")

    def call(f, n, scale, act, by_keyword=True):
        x = jnp.ones((n, 3))
        return f(x, scale=scale, act=act) if by_keyword else f(x, scale, act)

    recorded = jax.jit(_make_static_body(), static_argnames=statics)
    cases = [
        (2, 1.0, jnp.tanh),
        (3, 1.0, jnp.tanh),
        (2, 2.5, jnp.tanh),
        (2, 1.0, jnp.sin),
        (5, 1.0, jnp.tanh, False),
    ]
    expected = [np.asarray(call(recorded, *case)) for case in cases]
    fresh = jax.jit(_make_static_body(), static_argnames=statics)
    table = jt.precompile(fresh, jnp.ones((2, 3)), scale=1.0, act=jnp.tanh).wait(120)
    status = dict(zip(table["signature"], table["status"]))
    reasons = dict(zip(table["signature"], table["reason"]))
    assert sorted(status.values()) == ["compiled"] * 3 + ["skipped"] * 2, table
    sin, positional = [s for s, v in status.items() if v == "skipped"]
    assert "`act`" in reasons[sin] and "sin" in reasons[sin], reasons[sin]
    assert "f32[5,3]" in positional
    assert reasons[positional] == (
        "the recorded call passed its arguments otherwise than the example (by position or by "
        "keyword: JAX's key keeps them apart): recorded (x, scale, act), example (x, act, scale)"
    )
    assert any('"scale":"2.5"' in s for s, v in status.items() if v == "compiled")
    first = int(jt.log()["seq"].max()) + 1
    got = [np.asarray(call(fresh, *case)) for case in cases]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    traced = _main_thread_traces(jt, first)
    assert [t.leaf for t in traced] == ["act", "x"]  # only the skipped signatures traced here


def _make_nnx_step():
    """A new function object each call (one function in the log), of which JAX holds no key."""

    def nnx_step(model, x, scale):
        return model(x).sum() * scale

    return nnx_step


def test_nnx_jit_signatures_compiled_and_a_module_parameter_skipped_by_name(jt):
    """`nnx.jit`: the batch's recorded shapes are compiled from the example (results equal, no
    trace at the later calls, the compiles marked `precompiled`); a module whose parameter had
    another shape is the example's module, not rebuilt: skipped, naming the parameter."""
    nnx = _nnx()
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    wide = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    recorded = nnx.jit(_make_nnx_step())
    cases = [(model, 2), (model, 3), (model, 5), (wide, 2)]
    expected = [np.asarray(recorded(m, jnp.ones((n, 3)), 2.0)) for m, n in cases]
    fresh = nnx.jit(_make_nnx_step())
    table = jt.precompile(fresh, model, jnp.ones((2, 3)), 2.0).wait(120)
    status = dict(zip(table["signature"], table["status"]))
    reasons = dict(zip(table["signature"], table["reason"]))
    assert sorted(status.values()) == ["compiled", "compiled", "compiled", "skipped"], table
    (skipped,) = [s for s, v in status.items() if v == "skipped"]
    assert "`model.bias`: recorded f32[4], example f32[2]" in reasons[skipped]
    first = int(jt.log()["seq"].max()) + 1
    got = [np.asarray(fresh(m, jnp.ones((n, 3)), 2.0)) for m, n in cases[:3]]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert _main_thread_traces(jt, first) == []  # served by what the workers compiled
    assert jt.log(internal=False)["precompiled"].sum() == 3


def test_nnx_jit_from_a_persisted_log_in_a_fresh_process(tmp_path):
    """`nnx.jit` recorded once to a file; a fresh process precompiles the batch sizes from it: each
    later call's compile is the workers' (marked `precompiled`), results equal."""
    _script(
        tmp_path,
        "nnxprog.py",
        """
        import sys, warnings
        import jax, jax.numpy as jnp
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from flax import nnx
        import jaxtrace_nb as jt

        model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

        @nnx.jit
        def step(model, x):
            return model(x).sum()

        SIZES = (2, 3, 4)
        if sys.argv[1] == "record":
            jt.start(persist=sys.argv[2])
            print([float(step(model, jnp.ones((n, 3)))) for n in SIZES])
            jt.stop()
        else:
            jt.start()
            table = jt.precompile(step, model, jnp.ones((2, 3)), log=sys.argv[2]).wait(240)
            print(list(table["status"]))
            print([float(step(model, jnp.ones((n, 3)))) for n in SIZES])
            print(jt.log(internal=False)["precompiled"].tolist())
        """,
    )
    script, log = tmp_path / "nnxprog.py", tmp_path / "nnx.jsonl"
    cold = _python(script, "record", log)
    assert cold.returncode == 0, cold.stderr
    warm = _python(script, "warm", log)
    assert warm.returncode == 0, warm.stderr
    statuses, results, marked = warm.stdout.splitlines()
    assert statuses == str(["compiled"] * 3)
    assert results == cold.stdout.splitlines()[0]
    assert marked == str([True] * 3)  # every compile the workers'; the calls' own: none


def _nnx():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", DeprecationWarning
        )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
        from flax import nnx
    return nnx


def _make_flat(shape):
    def flat(x):
        return x.reshape(shape) * 2

    return flat


def test_a_failed_rebuild_is_a_row_never_an_exception(jt):
    recorded = jax.jit(_make_flat(-1))
    for shape in (6, (2, 3), 7):
        recorded(jnp.ones(shape))
    edited = jax.jit(_make_flat((2, 3)))  # the function since edited: f32[7] cannot reshape
    table = jt.precompile(edited, jnp.ones(6), workers=1).wait(120)
    status = dict(zip(table["signature"], table["status"]))
    assert status == {
        '{"x":"f32[6]"}': "compiled",
        '{"x":"f32[2,3]"}': "compiled",
        '{"x":"f32[7]"}': "failed",
    }, table
    assert table["reason"][2].startswith("TypeError")
    np.testing.assert_array_equal(edited(jnp.ones((2, 3))), 2 * np.ones((2, 3)))


def test_only_jitted_functions(jt):
    with pytest.raises(TypeError, match="jax.jit, eqx.filter_jit or nnx.jit"):
        jt.precompile(_make_body(), jnp.ones(3), 2.0)


def test_nothing_recorded_is_an_empty_table(jt):
    table = jt.precompile(jax.jit(lambda x: x + 1), jnp.ones(3)).wait(5)
    assert len(table) == 0


def _script(tmp_path, name: str, text: str) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _python(script, *args, timeout=300, jit="jit") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu", JIT=jit)
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(script.parent),
    )


_PROGRAM = """
    import os, sys, threading
    import jax, jax.numpy as jnp
    import jaxtrace_nb as jt

    def jit(fn):  # the test's jit wrapper (its `JIT`)
        if os.environ["JIT"] == "equinox":
            import equinox as eqx

            return eqx.filter_jit(fn)  # (`y`, a Python float, is a static there)
        if os.environ["JIT"] == "nnx":
            from flax import nnx

            return nnx.jit(fn)
        return jax.jit(fn)

    def step(x, y):
        for _ in range(8):
            x = jnp.sin(x @ x.T @ x) * y
        return x

    f = jit(step)
    SIZES = (2, 3, 4, 5)
"""

_JITS = ["jit", "equinox", "nnx"]


@pytest.mark.parametrize("jit", _JITS)
def test_a_persisted_log_in_a_fresh_process_uses_the_users_cache_as_is(tmp_path, jit):
    """Recorded once, then a fresh process precompiles from the log into the user's own cache
    directory (its configuration untouched): a new jit object of the function loads from it."""
    _script(tmp_path, "prog.py", _PROGRAM)
    record = _script(
        tmp_path,
        "record.py",
        """
        import sys
        from prog import *
        jt.start(persist=sys.argv[1])
        print([float(f(jnp.ones((n, 3)), 2.0).sum()) for n in SIZES])
        """,
    )
    warm = _script(
        tmp_path,
        "warm.py",
        """
        import sys
        jax_cache = sys.argv[2]
        from prog import *
        jax.config.update("jax_compilation_cache_dir", jax_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        hits = []
        jax.monitoring.register_event_listener(
            lambda e, **k: hits.append(threading.current_thread().name)
            if e == "/jax/compilation_cache/cache_hits" else None)
        jt.start()
        first = float(f(jnp.ones((2, 3)), 2.0).sum())
        table = jt.precompile(f, jnp.ones((2, 3)), 2.0, log=sys.argv[1]).wait(240)
        print(list(table["status"]))
        print([first] + [float(f(jnp.ones((n, 3)), 2.0).sum()) for n in SIZES[1:]])
        print(jax.config.jax_compilation_cache_dir == jax_cache,
              jax.config.jax_persistent_cache_min_compile_time_secs)
        """,
    )
    load = _script(
        tmp_path,
        "load.py",
        """
        import sys
        from prog import *
        jax.config.update("jax_compilation_cache_dir", sys.argv[1])
        hits = []
        jax.monitoring.register_event_listener(
            lambda e, **k: hits.append(e) if e == "/jax/compilation_cache/cache_hits" else None)
        jax.monitoring.register_event_duration_secs_listener(
            lambda e, s, fun_name=None, **k: hits.append(fun_name)
            if e.endswith("backend_compile_duration") else None)
        print(float(f(jnp.ones((5, 3)), 2.0).sum()))
        print(hits)
        """,
    )
    log, cache = tmp_path / "run.jsonl", tmp_path / "jax_cache"
    cold = _python(record, log, jit=jit)
    assert cold.returncode == 0, cold.stderr
    out = _python(warm, log, cache, jit=jit)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == str(["held", "compiled", "compiled", "compiled"])
    assert lines[1] == cold.stdout.splitlines()[0]  # results equal
    assert lines[2] == "True 0"  # the user's configuration as it was
    assert "set up JAX's persistent compilation cache" not in out.stderr
    assert len(list(cache.iterdir())) >= 3
    # a third process at a size only the workers compiled: JAX loads it from the user's cache
    third = _python(load, cache, jit=jit)
    assert third.returncode == 0, third.stderr
    result, events = third.stdout.splitlines()
    assert float(result) == eval(lines[1])[-1]
    events = eval(events)  # JAX times a load as a compile: the hit comes just before it
    assert events[events.index("jit(step)") - 1] == "/jax/compilation_cache/cache_hits"


_PLACED = """
    import os, sys, threading
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxtrace_nb as jt

    mode, log, jit = sys.argv[1], sys.argv[2], sys.argv[3]
    jt.start(persist=log if mode == "record" else None)
    traces, compiles = [], []
    jax.monitoring.register_event_duration_secs_listener(
        lambda e, s, fun_name=None, **k: compiles.append(fun_name)
        if e.endswith("backend_compile_duration")
        and threading.current_thread() is threading.main_thread() else None)

    def body(x, y):
        traces.append(1)
        return (x * 2.0).sum() + y.sum()

    if jit == "equinox":
        import equinox as eqx

        f = eqx.filter_jit(body)
    elif jit == "nnx":
        from flax import nnx

        f = nnx.jit(body)
    else:
        f = jax.jit(body)

    # the program's mesh, made as jax.make_mesh makes it (Auto axes: the sharding is not in the
    # arrays' types, only in their placement)
    mesh = jax.make_mesh((2,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
    x, y = jnp.arange(32.0).reshape(8, 4), jnp.arange(4.0)
    placed = [
        (jax.device_put(x, NamedSharding(mesh, P("d"))), y),
        (jax.device_put(x, NamedSharding(mesh, P(None, "d"))), y),
        (jax.device_put(x, jax.devices()[1]), jax.device_put(y, jax.devices()[1])),
    ]
    results = [float(f(x, y))]
    if mode == "warm":
        table = jt.precompile(f, x, y, log=log).wait(240)
        print(json.dumps([list(table["signature"]), list(table["status"])]))
    if mode == "own":  # as `run --warm` starts it: the call's own signature given, held
        from jaxtrace_nb._integrations._precompile import precompile

        df = jt.load(log)  # the first trace's signature (for eqx.filter_jit, with `body`)
        own = json.loads(df[(df["function"] == "body") & (df["kind"] == "trace")].signature.iloc[0])
        table = precompile(f, (x, y), {}, log=log, own=own).wait(240)
        print(json.dumps([list(table["signature"]), list(table["status"])]))
    before = (len(traces), len([c for c in compiles if c == "jit(body)"]))
    results += [float(f(*args)) for args in placed]
    after = (len(traces), len([c for c in compiles if c == "jit(body)"]))
    print(json.dumps([results, after[0] - before[0], after[1] - before[1]]))
"""


@pytest.mark.parametrize("jit", ["jit", "equinox", "nnx"])
def test_placements_recorded_are_rebuilt_and_their_calls_do_not_compile(tmp_path, jit):
    """A log that recorded `f` sharded two ways and committed to a device: a fresh process
    precompiles each placement from an uncommitted example, and the program's calls at them then
    neither trace nor compile (JAX's own compile events on the program's thread); for `jax.jit`,
    `eqx.filter_jit` (whose rebuilt leaf is then an array of zeros put there) and `nnx.jit`."""
    program = _script(tmp_path, "placed.py", "import json\n" + textwrap.dedent(_PLACED))
    log = tmp_path / "placed.jsonl"
    cold = _python(program, "record", log, jit)
    assert cold.returncode == 0, cold.stderr
    cold_results, cold_traces, cold_compiles = json.loads(cold.stdout.splitlines()[-1])
    assert (cold_traces, cold_compiles) == (
        1,
        3,
    )  # the mesh retraced once; every placement compiled
    warm = _python(program, "warm", log, jit)
    assert warm.returncode == 0, warm.stderr
    (signatures, statuses), (results, traces, compiles) = map(
        json.loads, warm.stdout.splitlines()[-2:]
    )
    assert statuses == ["held", "compiled", "compiled", "compiled"]
    spelled = [re.search(r"sharded (P|PartitionSpec)(\(.*?\))\)", s) for s in signatures]
    assert [m.group(2) for m in spelled if m] == [
        "('d',)",
        "(None, 'd')",
    ]  # (JAX 0.8: PartitionSpec)
    assert any("committed to cpu:1" in s for s in signatures)
    assert results == cold_results
    assert (traces, compiles) == (0, 0)
    # the call's own signature is held; the same types committed to cpu:1 are another compile
    own = _python(program, "own", log, jit)
    assert own.returncode == 0, own.stderr
    (_, statuses), (results, traces, compiles) = map(json.loads, own.stdout.splitlines()[-2:])
    assert statuses == ["held", "compiled", "compiled", "compiled"]
    assert (results, traces, compiles) == (cold_results, 0, 0)


@pytest.mark.parametrize("jit", _JITS)
def test_without_a_cache_one_is_set_up_and_said_once(tmp_path, jit):
    _script(tmp_path, "prog.py", _PROGRAM)
    script = _script(
        tmp_path,
        "own.py",
        """
        from prog import *
        jt.start()
        for n in SIZES:
            f(jnp.ones((n, 3)), 2.0)
        for _ in range(2):
            g = jit(step)
            print(list(jt.precompile(g, jnp.ones((2, 3)), 2.0).wait(240)["status"]))
        print(bool(jax.config.jax_compilation_cache_dir))
        """,
    )
    out = _python(script, jit=jit)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "True"
    assert out.stderr.count("jaxtrace_nb: precompile set up JAX's persistent") == 1


@pytest.mark.parametrize("jit", _JITS)
def test_a_precompile_still_running_at_exit_neither_hangs_nor_errs(tmp_path, jit):
    _script(tmp_path, "prog.py", _PROGRAM)
    script = _script(
        tmp_path,
        "exits.py",
        """
        from prog import *

        def make():
            def step(x, y):
                for _ in range(30):
                    x = jnp.sin(x @ x.T @ x) * y
                return x
            return step

        jt.start()
        f = jit(make())
        for n in range(2, 14):
            f(jnp.ones((n, 3)), 2.0)
        handle = jt.precompile(jit(make()), jnp.ones((2, 3)), 2.0, workers=1)
        print(handle.done)
        """,
    )
    out = _python(script, timeout=120, jit=jit)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert "Traceback" not in out.stderr and "Exception" not in out.stderr


def _make_forward():
    def forward(model, x):
        return jax.vmap(model)(x)

    return forward


def test_a_large_model_from_this_session_is_rebuilt_in_full(jt, tmp_path):
    """A model with more leaves than the live log's bounded text: this session's keys are read in
    full, and a persisted log keeps enough of each trace's signature to rebuild it."""
    path = tmp_path / "run.jsonl"
    jt.start(persist=path)
    model = eqx.nn.MLP(8, 8, 8, depth=24, key=jax.random.PRNGKey(0))
    recorded = eqx.filter_jit(_make_forward())
    expected = [np.asarray(recorded(model, jnp.ones((n, 8)))) for n in (2, 3)]
    fresh = eqx.filter_jit(_make_forward())
    table = jt.precompile(fresh, model, jnp.ones((2, 8))).wait(120)
    assert list(table["status"]) == ["compiled", "compiled"], table
    assert "…" in json.loads(table["signature"][0])  # the text shown is bounded, not the rebuild
    got = [np.asarray(fresh(model, jnp.ones((n, 8)))) for n in (2, 3)]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    from_disk = jt.precompile(eqx.filter_jit(_make_forward()), model, jnp.ones((2, 8)), log=path)
    table = from_disk.wait(120)
    assert list(table["status"]) == ["compiled", "compiled"], table


def _make_scale():
    def scale(x):
        return x * 3

    return scale


def test_what_the_rebuild_cannot_set_is_skipped_by_name(jt):
    """Under `eqx.filter_jit` an array is rebuilt as a NumPy view, which is never weak-typed: a
    weak-typed leaf is not rebuilt, and the row says where it differs from the example."""
    recorded = eqx.filter_jit(_make_scale())
    recorded(jnp.ones(3))
    recorded(jnp.asarray(2.0))  # f32[] (weak)
    table = jt.precompile(eqx.filter_jit(_make_scale()), jnp.ones(3)).wait(120)
    xs = [json.loads(s)["x"] for s in table["signature"]]
    assert dict(zip(xs, table["status"])) == {"f32[3]": "compiled", "f32[] (weak)": "skipped"}
    assert table["reason"][1] == (
        "differs from the example at `x`: recorded f32[] (weak), example f32[3]"
    )


def test_an_unrecorded_example_jax_holds(jt, tmp_path):
    """JAX holds the example's key but no log recorded its call: the rebuild of a signature that
    differs where the rebuild cannot reach (`m.act`) lands on that key, and is not taken for it;
    one whose rebuild JAX does not hold is traced, and its trace names the difference."""
    path = tmp_path / "run.jsonl"
    relu, tanh = Mlp(jnp.ones((4, 3)), "relu"), Mlp(jnp.ones((4, 3)), "tanh")
    fresh = eqx.filter_jit(_make_apply())
    fresh(relu, jnp.ones((3, 2)), 2)  # not persisted
    jt.start(persist=path)
    recorded = eqx.filter_jit(_make_apply())
    recorded(tanh, jnp.ones((3, 2)), 2)
    recorded(tanh, jnp.ones((3, 3)), 2)
    jt.reset()  # this session forgets it: as if called before recording started
    table = jt.precompile(fresh, relu, jnp.ones((3, 2)), 2, log=path).wait(120)
    assert list(table["status"]) == ["skipped", "skipped"], table
    assert table["reason"][0].startswith("JAX already holds the rebuilt call's key")
    assert table["reason"][1] == (
        "differs from the rebuilt call at `m.act`: recorded 'tanh', rebuilt call 'relu'"
    )


def test_what_a_recorded_leaf_text_rebuilds_into():
    from jaxtrace_nb._keys._rebuild import NOT_PLAIN, array_type, plain_value

    assert array_type("f32[8,3]") == ((8, 3), "float32", False)
    assert array_type("i32[] (weak)") == ((), "int32", True)
    assert array_type("bf16[2]") == ((2,), "bfloat16", False)
    assert array_type("f32[8@d,3]") is None  # a placement: not rebuilt
    assert array_type("'relu'") is None
    assert plain_value("'relu'") == "relu" and plain_value("(1, None, 2.5)") == (1, None, 2.5)
    assert plain_value("<function h>") is NOT_PLAIN and plain_value("[1, 2]") is NOT_PLAIN


def test_the_rebuilt_call_passes_each_argument_as_the_example_did():
    """By position or by keyword as given (JAX's key keeps them apart); a positional-only
    parameter by position even where ``**kwargs`` holds its name; an entry of ``**kwargs`` named
    by its key, as the log names it, and rebuilt there."""
    from jaxtrace_nb._keys._rebuild import Example, Jit

    def f(a, /, b, *rest, c, **kw):
        return a

    x = jnp.ones(2)
    example = Example.of(Jit.JAX, f, (x, x, x), {"c": x, "a": x, "lr": x})
    assert set(example.leaves) == {"a", "b", "rest[0]", "c", "lr"}
    args, kwargs = example.call({"lr": jax.ShapeDtypeStruct((5,), jnp.float32)})
    assert len(args) == 3 and sorted(kwargs) == ["a", "c", "lr"]
    assert kwargs["lr"].shape == (5,)  # rebuilt at the log's path `lr`
    args, kwargs = Example.of(Jit.JAX, f, (x,), {"b": x, "c": x}).call({})
    assert len(args) == 1 and sorted(kwargs) == ["b", "c"]  # `b` by keyword, as given


def test_what_a_recorded_placement_rebuilds_into(jt):
    """A device by its name here; a PartitionSpec's text (either spelling) on a mesh of the
    example's arrays, else one the type names (Auto axes); anything else skipped, naming the
    argument and why."""
    from jaxtrace_nb._keys._rebuild import Example, Jit, _spec, placed_array_type

    assert _spec("P('d',)") == ("d",) and _spec("PartitionSpec(None, ('a', 'b'))") == (
        None,
        ("a", "b"),
    )
    assert _spec("P()") == () and _spec("P('d', unreduced={'x'})") is None
    assert _spec("P('d', No…") is None  # clipped text
    assert placed_array_type("f32[8@d,3]") == ((8, 3), "float32", False)
    assert placed_array_type("f32[8,3] {mesh d=1}") == ((8, 3), "float32", False)

    def f(x, y):
        return x

    mesh = jax.make_mesh((1,), ("e",), axis_types=(jax.sharding.AxisType.Explicit,))
    on_mesh = jax.device_put(jnp.ones((4, 2)), jax.sharding.NamedSharding(mesh, jax.P("e")))
    example = Example.of(Jit.JAX, f, (jnp.ones((4, 2)), on_mesh), {})
    recorded = {"x": "f32[4@e,2]", "y": "f32[4@e,2]"}
    plan = example.plan(recorded, {"x": "sharded P('e',)"})
    assert example.place(plan, {"x": "sharded P('e',)"}, recorded) is None
    assert plan["x"].sharding.mesh is mesh  # the example's own mesh, where it has the axes
    recorded = {"x": "f32[4,2] {mesh e=1}", "y": "f32[4@e,2]"}  # Auto axis `e`: not that mesh
    plan = example.plan(recorded, {"x": "sharded P('e',)"})
    assert example.place(plan, {"x": "sharded P('e',)"}, recorded) is None
    assert plan["x"].sharding.mesh is not mesh
    assert plan["x"].sharding.mesh.axis_types == (jax.sharding.AxisType.Auto,)
    recorded = {"x": "f32[4,2] {mesh e=1,f=1}", "y": "f32[4,2]"}  # `f`'s axis type unknown
    plan = example.plan(recorded, {"x": "sharded P('e',)"})
    assert "no mesh with axes ['e']" in example.place(plan, {"x": "sharded P('e',)"}, recorded)
    recorded = {"x": "f32[4,2] {mesh q=1}", "y": "f32[4,2]"}
    plan = example.plan(recorded, {"x": "sharded P('q',)"})
    assert example.place(plan, {"x": "sharded P('q',)"}, recorded) is None
    assert plan["x"].sharding.mesh.axis_names == ("q",)  # made from the type's axes and sizes
    assert plan["x"].sharding.mesh.axis_types == (jax.sharding.AxisType.Auto,)
    plan = example.plan({"x": "f32[4,2]"}, {"x": "committed to cpu:0"})
    assert example.place(plan, {"x": "committed to cpu:0"}, {"x": "f32[4,2]"}) is None
    assert plan["x"].sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    for placement, reason in [
        ("committed to tpu:7", "`x`: no device tpu:7 here"),
        ("sharded P('z',)", "`x`: no mesh with axes ['z']"),
        ("sharded P('d', unreduced={'x'})", "`x`: placement sharded P('d', unreduced={'x'}) not"),
        ("committed to cpu:0, layout L", "`x`: placement committed to cpu:0, layout L (a layout"),
    ]:
        plan = example.plan({"x": "f32[4,2]"}, {"x": placement})
        assert example.place(plan, {"x": placement}, {"x": "f32[4,2]"}).startswith(reason)
    eqx_example = Example.of(Jit.EQUINOX, f, (jnp.ones((4, 2)), on_mesh), {})
    plan = eqx_example.plan({"x": "f32[4,2]"}, {"x": "committed to cpu:0"})
    assert plan["x"].strides == (0, 0)  # Equinox stages arrays only: no memory of its size
    assert eqx_example.place(plan, {"x": "committed to cpu:0"}, {"x": "f32[4,2]"}) is None
    (x, _), _ = eqx_example.call(plan)  # put on its device only as the call is made
    assert isinstance(x, jax.Array) and x.committed and not x.weak_type  # zeros put there
    assert x.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])
    assert (x.shape, x.dtype) == ((4, 2), jnp.float32)
    plan = eqx_example.plan({"x": "f32[4,2] (weak)"}, {"x": "committed to cpu:0"})
    assert eqx_example.place(plan, {"x": "committed to cpu:0"}, {"x": "f32[4,2] (weak)"}) is None
    assert "x" not in plan  # NumPy writes no weak type: the example's own, compared later


def test_a_retrace_guard_counts_the_programs_traces_not_the_workers(jt):
    recorded = jax.jit(_make_body())
    for n in (2, 3, 5):
        recorded(jnp.ones((n, 3)), 2.0)
    fresh = jax.jit(_make_body())
    with jt.watch(max_traces=1) as w:
        fresh(jnp.ones((2, 3)), 2.0)
        table = jt.precompile(fresh, jnp.ones((2, 3)), 2.0).wait(120)
        for n in (3, 5):  # served by the workers' programs: no trace of the program's own
            fresh(jnp.ones((n, 3)), 2.0)
    assert list(table["status"]) == ["held", "compiled", "compiled"], table
    assert list(w.events["precompiled"]) == [False, True, True]


def _make_counted(traces: list):
    def counted(x, y):
        traces[0] += 1
        return _make_body()(x, y)

    return counted


def _census_pad(jt, leaf: str):
    """The padding `jt.shape_census` suggests for `leaf` (its ``code``: one line of Python)."""
    census = jt.shape_census()
    row = census[(census["leaf"] == leaf) & census["suggested"]].iloc[0]
    scope: dict = {}
    exec(f"def pad(n):\n    {row['code']}\n    return n", scope)  # pasted as a user would
    return scope["pad"], row


@pytest.mark.parametrize("jit", ["jax.jit", "eqx.filter_jit"])
def test_buckets_compile_what_the_padded_program_calls(jt, jit):
    """Seven batch sizes recorded; `buckets=True` compiles the census's buckets, not the sizes
    seen, and the program that then pads as suggested never traces (JAX's counter), with the
    results of the unpadded calls in its first rows."""
    wrap = jax.jit if jit == "jax.jit" else eqx.filter_jit
    sizes = (3, 5, 9, 17, 18, 30, 33)
    recorded = wrap(_make_counted([0]))
    for n in sizes:
        recorded(jnp.ones((n, 3)), jnp.float32(2.0))
    pad, suggestion = _census_pad(jt, "x")
    buckets = sorted({pad(n) for n in sizes})
    assert len(buckets) < len(sizes)
    traces = [0]
    fresh = wrap(_make_counted(traces))  # one function in the log, of which JAX holds no key
    handle = jt.precompile(fresh, jnp.ones((3, 3)), jnp.float32(2.0), buckets=True)
    table = handle.wait(180)
    shapes = sorted(json.loads(s)["x"] for s in table["signature"])
    assert shapes == sorted(f"f32[{b},3]" for b in buckets), (suggestion["scheme"], table)
    assert set(table["status"]) == {"compiled"}, table
    worker_traces = traces[0]
    assert worker_traces == len(buckets) + 1  # and the example, traced to learn its signature
    for n in sizes:
        x = jnp.arange(n * 3, dtype=jnp.float32).reshape(n, 3) / 100
        padded = jnp.zeros((pad(n), 3), jnp.float32).at[:n].set(x)
        got = np.asarray(fresh(padded, jnp.float32(2.0)))[:n]
        np.testing.assert_allclose(got, np.asarray(recorded(x, jnp.float32(2.0))), rtol=1e-6)
    assert traces[0] == worker_traces  # JAX's verdict: the padded calls found them all


def test_a_live_logs_dataframe_has_no_signatures_and_says_so(jt):
    """`jt.log()` keeps no signatures (a persisted log does): precompile says so, never an empty
    table that looks like nothing was recorded."""
    f = jax.jit(_make_body())
    f(jnp.ones((2, 3)), 2.0)
    f(jnp.ones((4, 3)), 2.0)
    with pytest.raises(ValueError, match="kept no signatures"):
        jt.precompile(f, jnp.ones((2, 3)), 2.0, log=jt.log())
