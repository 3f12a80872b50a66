"""The index beside the persistent compilation cache, the words of a miss, and what it costs when
the cache is off (nothing): no JAX needed except where said.

* the index is safe with several writer processes at once (WAL, `BEGIN IMMEDIATE`), stays bounded,
  and finds the closest earlier key of a name;
* `_cache_words` says each part that differs, the versions first;
* `_module_diff` places the first differing operation at the user's line;
* with JAX's persistent cache off, nothing of JAX is rebound and no key is read.
"""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from jaxtrace_nb._cache import _cache_index as index
from jaxtrace_nb._cache._cache_words import Retrace, explain, notable_miss, verdict, verdict_word
from jaxtrace_nb._diagnosis._module_diff import Difference, changed_part, first_difference
from jaxtrace_nb._jax._cache_key import CACHE_KEY_COMPONENTS, CacheKeyRecord
from jaxtrace_nb._keys._records import CacheComparison

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def record(
    name="jit_step", key=None, outcome="written", parts=None, facts=None, module=b"module", **more
):
    parts = {**{c: c[:4] * 16 for c in CACHE_KEY_COMPONENTS}, **(parts or {})}
    components = tuple((c, parts[c]) for c in CACHE_KEY_COMPONENTS)
    key = key or f"{name}-{abs(hash(components)):x}"
    facts = {
        "jax": "0.10.2",
        "jaxlib": "0.10.2",
        "backend": ["cpu", "cpu"],
        "xla_flags": [],
        "devices": {"count": 1, "kinds": {"cpu": 1}},
        "program_devices": {"count": 1, "kinds": {"cpu": 1}},
        "options": {"jax_enable_x64": "False"},
        **(facts or {}),
    }
    fields = dict(
        key=key,
        module_name=name,
        components=components,
        facts=facts,
        outcome=outcome,
        reason="",
        eligible=True,
        seconds=1.0,
        cache_dir="",
        compile_options=b"\x08\x01",
        module_bytes=module,
        module_ref=None,
    )
    fields.update(more)
    return CacheKeyRecord(**fields)


WHO = index.RunInfo("host-a")


# ------------------------------------------------------------------ the index
def test_the_closest_earlier_key_is_the_one_with_fewest_differing_parts(tmp_path):
    con = index.connect(str(tmp_path / "i.sqlite"))
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    far = record(key="jit_step-far", parts={"XLA flags": "f" * 64, "computation": "c" * 64})
    near = record(key="jit_step-near", parts={"XLA flags": "f" * 64})
    other = record(name="jit_other", key="jit_other-1")
    for r in (near, far, other):  # `far` the most recent: fewer differing parts win over recency
        index.put(con, r, WHO, "step", "model.py:3")
    mine = record(key="jit_step-mine")
    found = index.compare(con, mine, "model.py:3")
    assert (found.same, found.closest.key, found.differing) == (
        None,
        "jit_step-near",
        ("XLA flags",),
    )
    assert index.compare(con, record(name="jit_new", key="jit_new-1"), None) == CacheComparison(
        None, None, (), None, None
    )
    index.put(con, mine, WHO, "step", "model.py:3")
    again = index.compare(con, mine, "model.py:3")
    assert again.same is not None and again.same.written and again.same.run == WHO.run


def test_keys_whose_parts_differ_alike_are_told_apart_by_their_arguments_not_by_recency(tmp_path):
    """Six runs' keys, each differing from the new one in its computation only: the closest is the
    run whose argument types and JAX options differ least (a batch size), not the most recent run (a
    dtype, then a matmul precision)."""
    con = index.connect(str(tmp_path / "i.sqlite"))

    def run(key, batch, dtype, precision="None"):
        arguments = [
            ["params[0]", f"{dtype}[4,4]"],
            ["params[1]", f"{dtype}[4]"],
            ["x", f"{dtype}[{batch},4]"],
        ]
        return record(
            key=f"jit_step-{key}",
            parts={"computation": key * 64},
            facts={"arguments": arguments, "options": {"jax_default_matmul_precision": precision}},
        )

    earlier = [
        run("a", 8, "f32"),
        run("b", 16, "f32"),
        run("c", 8, "bf16"),
        run("d", 8, "f32", "'highest'"),
        run("e", 32, "bf16"),
        run("f", 8, "bf16", "'highest'"),
    ]
    for i, r in enumerate(earlier):
        index.put(con, r, WHO, "step", "model.py:3", now=1000.0 + i)
    found = index.compare(con, run("n", 16, "bf16"), "model.py:3")
    assert (found.closest.key, found.differing) == (
        "jit_step-e",
        ("computation",),
    )  # one argument's shape
    found = index.compare(con, run("m", 8, "bf16", "'high'"), "model.py:3")
    assert found.closest.key in ("jit_step-c", "jit_step-f")  # one option apart, not a dtype
    found = index.compare(con, run("k", 16, "f32", "'highest'"), "model.py:3")
    assert found.closest.key in ("jit_step-b", "jit_step-d")


def test_a_differing_computation_brings_both_modules(tmp_path):
    con = index.connect(str(tmp_path / "i.sqlite"))
    index.put(con, record(key="jit_step-old", module=b"old module"), WHO, None, None)
    hit = record(
        key="jit_step-hit", parts={"computation": "h" * 64}, outcome="hit", module=b"never stored"
    )
    index.put(con, hit, WHO, None, None)
    found = index.compare(
        con, record(key="jit_step-new", parts={"computation": "n" * 64}, module=b"new module"), None
    )
    assert found.differing == ("computation",) and found.closest.key == "jit_step-old"
    assert (found.closest.module_bytes, found.module_bytes) == (b"old module", b"new module")
    assert (
        con.execute("SELECT count(*) FROM modules").fetchone()[0] == 1
    )  # a hit's module is not kept


def test_the_index_stays_bounded(tmp_path, monkeypatch):
    con = index.connect(str(tmp_path / "i.sqlite"))
    for i in range(index.MAX_KEYS_PER_NAME + 5):
        index.put(
            con,
            record(key=f"jit_step-{i}", parts={"computation": f"{i:064x}"}, module=b"m" * 100),
            WHO,
            None,
            None,
            now=1000.0 + i,
        )
    keys = [k for (k,) in con.execute("SELECT key FROM keys ORDER BY last_seen")]
    assert keys == [
        f"jit_step-{i}" for i in range(5, index.MAX_KEYS_PER_NAME + 5)
    ]  # the least recent went
    assert con.execute("SELECT count(*) FROM modules").fetchone()[0] == index.MAX_MODULES_PER_NAME
    for i in range(6):
        index.put(con, record(name=f"jit_f{i}", key=f"jit_f{i}-1"), WHO, None, None, now=2000.0 + i)
    monkeypatch.setattr(index, "MAX_KEYS", 4)
    monkeypatch.setattr(index, "MAX_MODULES_BYTES", 250)
    index.prune(con)
    assert [k for (k,) in con.execute("SELECT key FROM keys ORDER BY last_seen")] == [
        f"jit_f{i}-1" for i in range(2, 6)
    ]
    assert sum(size for (size,) in con.execute("SELECT size FROM modules")) <= 250


_WRITER = textwrap.dedent("""
    import random, sys, time
    sys.path.insert(0, sys.argv[3])
    from test_cache_index import record
    from jaxtrace_nb._cache import _cache_index as index
    con = index.connect(sys.argv[1])
    who = index.RunInfo(f"host{sys.argv[2]}")
    rng = random.Random(int(sys.argv[2]))
    worst = 0.0
    for i in range(int(sys.argv[4])):
        r = record(name=f"jit_f{rng.randrange(10)}", key=f"k{sys.argv[2]}-{i}",
                   parts={"computation": f"{rng.randrange(1 << 60):064x}"},
                   module=bytes(rng.randrange(256) for _ in range(2000)) if i % 3 == 0 else None)
        start = time.perf_counter()
        index.compare(con, r, None)
        index.put(con, r, who, "f", None)
        if i % 50 == 0:
            index.prune(con)
        worst = max(worst, time.perf_counter() - start)
    print(worst)
""")


def test_several_processes_write_at_once(tmp_path):
    path = str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite")
    tests = os.path.dirname(os.path.abspath(__file__))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, path, str(n), tests, "120"],
            env=dict(os.environ, PYTHONPATH=REPO),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    outputs = [w.communicate(timeout=300) for w in writers]
    assert [w.returncode for w in writers] == [0] * 6, [err[-2000:] for _, err in outputs]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    per_name = dict(
        con.execute("SELECT module_name, count(*) FROM keys GROUP BY module_name").fetchall()
    )
    assert len(per_name) == 10 and max(per_name.values()) <= index.MAX_KEYS_PER_NAME
    assert (
        max(n for (n,) in con.execute("SELECT count(*) FROM modules GROUP BY module_name"))
        <= index.MAX_MODULES_PER_NAME
    )


_CONNECTER = textwrap.dedent("""
    import sys, time
    from jaxtrace_nb._cache import _cache_index as index
    start = float(sys.argv[2])
    while time.time() < start:
        pass
    index.connect(sys.argv[1]).close()
""")


def test_several_processes_make_the_same_new_index_at_one_instant(tmp_path):
    # Switching a new file to WAL while another process makes it returns SQLITE_BUSY at once,
    # without the busy handler: before connect retried it, 23 of 360 such connections failed.
    for trial in range(8):
        path = str(tmp_path / str(trial) / "index.sqlite")
        start = str(time.time() + 2.0)  # after every process has imported
        connecters = [
            subprocess.Popen(
                [sys.executable, "-c", _CONNECTER, path, start],
                env=dict(os.environ, PYTHONPATH=REPO),
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        errors = [c.communicate(timeout=120)[1] for c in connecters]
        assert [c.returncode for c in connecters] == [0] * 6, [e[-500:] for e in errors]
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_writer_thread_compares_writes_and_contains_failures(tmp_path):
    faults = []
    writer = index.IndexWriter(
        str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite"),
        WHO,
        lambda stage, e: faults.append(stage),
    )
    first = writer.submit(
        record(key="jit_step-1"), compare=True, function="step", location="m.py:1"
    )
    second = writer.submit(record(key="jit_step-2", parts={"XLA flags": "x" * 64}), compare=True)
    assert writer.flush(30) and first.done.is_set() and second.done.is_set()
    assert first.comparison.closest is None and second.comparison.closest.key == "jit_step-1"
    assert first.record is None  # written: the writer keeps no module
    (tmp_path / "file").write_text("")
    broken = index.IndexWriter(
        str(tmp_path / "file" / "jaxtrace_nb" / "index.sqlite"),
        WHO,
        lambda stage, e: faults.append(stage),
    )
    job = broken.submit(record(), compare=True)
    assert job.done.wait(30) and job.comparison is None and "cannot be used" in job.error
    assert broken.submit(record(), compare=True) is None and faults == ["persistent cache index"]
    writer.close()
    broken.close()


def test_an_index_of_another_schema_is_not_written(tmp_path):
    path = str(tmp_path / "i.sqlite")
    index.connect(path).execute("UPDATE meta SET value='99' WHERE name='schema'")
    with pytest.raises(sqlite3.DatabaseError, match="schema 99"):
        index.connect(path)


def test_the_index_goes_beside_a_local_cache_and_to_the_user_folder_for_a_bucket(
    tmp_path, monkeypatch
):
    assert index.index_path("/data/cache") == "/data/cache/jaxtrace_nb/index.sqlite"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bucket = index.index_path("gs://bucket/cache")
    assert bucket.startswith(
        str(tmp_path / "jaxtrace_nb" / "index-")
    ) and bucket != index.index_path("gs://b/c")
    assert index.index_path("") is None


# ------------------------------------------------------------------ words
def _compare(new, *earlier, con_dir):
    con = index.connect(str(con_dir / "i.sqlite"))
    for r in earlier:
        index.put(con, r, index.RunInfo("host-b"), "step", "model.py:7")
    return index.compare(con, new, "model.py:7")


def test_verdicts():
    assert verdict(record(outcome="hit")) == "hit"
    slow = record(outcome="not_written", eligible=False, reason="compiled in 0.010 s, under `x`=1")
    assert verdict(slow) == "not cached: compiled in 0.010 s, under `x`=1"
    assert verdict(record()) == "miss" and verdict(record(components=())).startswith(
        "miss (not explained"
    )
    assert [verdict_word(t) for t in ("hit", "miss: x", "not cached: y", None)] == [
        "hit",
        "miss",
        "not cached",
        "",
    ]
    assert notable_miss("miss: XLA flags differ") and not notable_miss(
        "miss: the first compile of `f` with this"
    )
    assert not notable_miss("hit") and not notable_miss("not cached: x") and not notable_miss(None)


def test_each_part_in_words(tmp_path):
    a = record(key="jit_step-a", facts={"xla_flags": ["--a=1", "--b=2"]})
    flags = record(
        key="jit_step-b", parts={"XLA flags": "x" * 64}, facts={"xla_flags": ["--b=2", "--c=3"]}
    )
    words = explain(flags, _compare(flags, a, con_dir=tmp_path), run="mine")
    assert words.text.startswith(
        "miss: XLA flags differ: `--c=3` added, `--a=1` removed (closest earlier key of "
        "`jit_step`: the run of "
    )
    assert "pid" in words.text and "on host-b" in words.text and words.hint_id == "cache.xla_flags"

    devices = record(
        key="jit_step-c",
        parts={"accelerator_config": "d" * 64},
        facts={"devices": {"count": 8, "kinds": {"TPU v4": 8}}},
    )
    text = explain(devices, _compare(devices, a, con_dir=tmp_path / "d"), run="mine").text
    assert text.startswith(
        "miss: devices differ: 1 cpu device → 8 TPU v4 devices (the program runs on 1) ("
    )

    upgrade = record(
        key="jit_step-d",
        parts={"jax_lib version": "j" * 64, "computation": "c" * 64, "compile_options": "o" * 64},
        facts={"jaxlib": "0.11.0", "jax": "0.11.0"},
    )
    words = explain(upgrade, _compare(upgrade, a, con_dir=tmp_path / "u"), run="mine")
    assert words.text.startswith(
        "miss: jaxlib 0.10.2 → 0.11.0 (JAX 0.10.2 → 0.11.0); the compile options and the "
        "computation differ with it, as each JAX version makes them its "
        "own way ("
    )
    assert words.hint_id == "cache.jax_version"

    options = record(key="jit_step-e", parts={"compile_options": "o" * 64})
    words = explain(
        options,
        _compare(options, a, con_dir=tmp_path / "o"),
        run="mine",
        options=[("env_option_overrides", "[]", "[('xla_cpu_enable_fast_math', True)]")],
    )
    assert words.text.startswith(
        "miss: compile options differ: `env_option_overrides`: [] → "
        "[('xla_cpu_enable_fast_math', True)] ("
    )
    assert words.hint_id == "cache.compiler_options"


def test_the_computation_in_words(tmp_path):
    a = record(key="jit_step-a")
    b = record(
        key="jit_step-b",
        parts={"computation": "c" * 64},
        facts={"options": {"jax_enable_x64": "True"}},
    )
    comparison = _compare(b, a, con_dir=tmp_path)
    argument = Difference("argument", "tensor<3xf32>", "tensor<3xf64>", path="params['w']")
    words = explain(b, comparison, run="mine", computation=argument)
    assert words.text.startswith(
        "miss: JAX options differ: `jax_enable_x64` False → True; the computation differs "
        "in argument `params['w']`: tensor<3xf32> → tensor<3xf64> ("
    )
    assert words.hint_id == "cache.options" and "`jax_enable_x64`" in words.hint
    constant = Difference(
        "op",
        "%cst = stablehlo.constant dense<5.0e-01> : tensor<f32>",
        "%cst = stablehlo.constant dense<7.0e-01> : tensor<f32>",
        source="/w/model.py:6",
        name="jit(step)/mul",
        via_use=True,
    )
    c = record(key="jit_step-c", parts={"computation": "c" * 64})
    words = explain(
        c,
        _compare(c, a, con_dir=tmp_path / "c"),
        run="mine",
        computation=constant,
        retrace=Retrace("shape", "x"),
        place=lambda where: where.replace("/w/model.py", "In[3]"),
    )
    assert words.text.startswith(
        "miss: the computation differs first at In[3]:6 (`jit(step)/mul`, "
        "`stablehlo.constant`): `5.0e-01` → `7.0e-01`; this compile "
        "follows a retrace "
        "(shape at `x`) ("
    )
    assert words.hint_id == "cache.constant" and words.hint.startswith(
        "In[3]:6 puts a value captured from Python"
    )
    gone = explain(c, comparison, run="mine", computation=None).text
    assert "the computation differs (the earlier module is no longer in the index)" in gone


def test_a_key_seen_before_first_compiles_and_the_same_run(tmp_path):
    a = record(key="jit_step-a", outcome="not_written", reason="compiled in 0.1 s, under `m`=1")
    same = _compare(a, a, con_dir=tmp_path)
    assert explain(a, same, run="mine").text.startswith(
        "miss: this key was compiled before (the run of "
    )
    assert explain(a, same, run="mine").text.endswith(
        "and not written then: compiled in 0.1 s, under `m`=1"
    )
    written = record(key="jit_step-w", cache_dir=str(tmp_path / "gone"))
    text = explain(written, _compare(written, written, con_dir=tmp_path / "w"), run="mine").text
    assert (
        "its entry is no longer in the cache (evicted under `jax_compilation_cache_max_size`, or "
        "deleted)" in text
    )
    first = explain(
        record(name="jit_new", key="jit_new-1"),
        CacheComparison(None, None, (), None, None),
        run="x",
    )
    assert first.text == (
        "miss: the first compile of `jit_new` with this cache (its index holds no earlier key of "
        "that name)"
    )
    b = record(key="jit_step-b", parts={"XLA flags": "x" * 64})
    comparison = _compare(b, a, con_dir=tmp_path / "r")
    assert (
        "(closest earlier key of `jit_step`: this run)"
        in explain(b, comparison, run=comparison.closest.run, location="model.py:7").text
    )


# ------------------------------------------------------------------ the first differing operation
OLD = """module @jit_step {
  func.func public @main(%arg0: tensor<3xf32>, %arg1: tensor<2x3xf32>) \
-> (tensor<f32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32>
    %1 = stablehlo.multiply %arg1, %0 : tensor<2x3xf32>
    return %1 : tensor<f32>
  }
}"""
NEW = """#loc1 = loc("params['w']")
module @jit_step {
  func.func public @main(%arg0: tensor<3xf32> loc("params['w']"), %arg1: tensor<2x3xf32> loc("x")) \
-> (tensor<f32> {jax.result_info = "result"}) {
    %cst = stablehlo.constant dense<0.699999988> : tensor<f32> loc(#loc5)
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x3xf32> loc(#loc7)
    %1 = stablehlo.multiply %arg1, %0 : tensor<2x3xf32> loc(#loc7)
    return %1 : tensor<f32> loc(#loc5)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("/site-packages/jax/_src/numpy/ufuncs.py":10:4)
#loc3 = loc("/work/model.py":6:11 to :30)
#loc4 = loc("/work/train.py":20:1)
#loc5 = loc("jit(step)"(#loc4))
#loc6 = loc(callsite(#loc2 at callsite(#loc3 at #loc4)))
#loc7 = loc("jit(step)/mul"(#loc6))"""


def test_the_first_differing_operation_is_placed_at_the_users_line():
    found = first_difference(OLD, NEW, is_library=lambda path: "site-packages" in path)
    assert found == Difference(
        "op",
        "%cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>",
        "%cst = stablehlo.constant dense<0.699999988> : tensor<f32>",
        "/work/model.py:6",
        "jit(step)/mul",
        None,
        True,
    )
    assert first_difference(OLD, NEW.replace("0.699999988", "5.000000e-01")).kind == "none"
    x64 = NEW.replace("0.699999988", "5.000000e-01").replace(
        "%arg0: tensor<3xf32>", "%arg0: tensor<3xf64>"
    )
    assert first_difference(OLD, x64) == Difference(
        "argument", "tensor<3xf32>", "tensor<3xf64>", path="params['w']"
    )
    renamed = NEW.replace("0.699999988", "5.000000e-01").replace('"result"', "\"result['b']\"")
    assert first_difference(OLD, renamed) == Difference("result", "result", "result['b']")
    assert changed_part(
        "%0 = stablehlo.add %1, %2 : tensor<f32>", "%0 = stablehlo.multiply %1, %2 : tensor<f32>"
    ) == ("stablehlo.multiply", "stablehlo.add", "stablehlo.multiply")


# ------------------------------------------------------------------ with the cache off
def test_with_the_persistent_cache_off_nothing_of_jax_is_rebound_and_no_key_is_read(
    jt, monkeypatch
):
    import jax
    import jax.numpy as jnp
    from jax._src import cache_key, compilation_cache

    from jaxtrace_nb._jax._cache_key import KeyReader
    from jaxtrace_nb._recording._listeners import Listeners

    if compilation_cache.is_persistent_cache_enabled():
        pytest.skip("this process runs with JAX's persistent cache on")
    calls = []
    monkeypatch.setattr(KeyReader, "begin", lambda self, frame: calls.append("begin"))
    probe = jt.get_session().probe
    theirs = (cache_key.hashlib, cache_key._log_cache_key_hash)
    listeners = probe.listeners
    assert not probe.keys.on and "_duration" not in vars(listeners)
    assert listeners.on_duration.__func__ is Listeners.on_duration
    assert (type(theirs[0]).__name__, theirs[1].__module__) == ("module", "jax._src.cache_key")
    jax.jit(lambda x: x * 3 + 1)(jnp.ones(5))
    assert calls == [] and jt.log()["persistent_cache"].isna().all()
    try:  # turned on (no compile while on: JAX would open this cache for the whole process)
        jax.config.update("jax_compilation_cache_dir", "/nonexistent/jaxtrace-test-cache")
        assert probe.keys.on and cache_key.hashlib is not theirs[0]
        assert "_duration" in vars(listeners)
    finally:
        jax.config.update("jax_compilation_cache_dir", None)
    assert not probe.keys.on and (cache_key.hashlib, cache_key._log_cache_key_hash) == theirs
    assert "_duration" not in vars(listeners)


def test_stop_gives_jax_back_its_own_cache_key_functions_and_option_hooks(tmp_path):
    code = textwrap.dedent("""
        import json, sys, jax
        from jax._src import cache_key, config
        options = (config.compilation_cache_dir, config.enable_compilation_cache)
        def state():
            return (cache_key.hashlib, cache_key._log_cache_key_hash, \
*(o._update_global_hook for o in options))
        theirs = state()
        jax.config.update("jax_compilation_cache_dir", sys.argv[1])
        import jaxtrace_nb as jt
        for _ in range(3):
            jt.start()
            on = cache_key.hashlib is not theirs[0] \
and cache_key._log_cache_key_hash is not theirs[1]
            jt.stop()
        print(json.dumps([on, state() == theirs]))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO, JAX_PLATFORMS="cpu"),
        check=True,
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [True, True]


def test_time_to_settle_is_bounded_when_the_index_is_held(tmp_path):
    """A read waits for the writer at most the settle time; the miss is then worded at a later
    read."""
    from jaxtrace_nb._cache._cache_explainer import CacheExplainer
    from jaxtrace_nb._log._events import Event, EventLog

    log = EventLog()
    explainer = CacheExplainer(
        log, fault=lambda *a: None, host=lambda: "h", place=str, is_library=lambda p: False
    )
    cache = tmp_path / "cache"
    path = index.index_path(str(cache))
    os.makedirs(os.path.dirname(path))
    holder = index.connect(path)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    event = Event(function="step", location="m.py:1", kind="trace", cause="first", seq=0)
    explainer.submit(event, record(cache_dir=str(cache)))
    assert event.persistent_cache == "miss"
    start = time.monotonic()
    explainer.settle(timeout=0.5)
    assert time.monotonic() - start < 3 and event.persistent_cache == "miss"
    holder.execute("COMMIT")
    explainer.settle()
    assert event.persistent_cache.startswith("miss: the first compile of `jit_step`")


def test_the_writer_starts_on_a_record_after_its_delay_unless_asked_sooner(tmp_path, monkeypatch):
    """A record waits for a quiet moment, `WRITE_DELAY_S` without a new one (the work JAX does right
    after a compile keeps the GIL); a flush, a `hurry` and a read that words a miss
    (`CacheExplainer.settle`) start it at once."""
    from jaxtrace_nb._cache._cache_explainer import CacheExplainer
    from jaxtrace_nb._log._events import Event, EventLog

    monkeypatch.setattr(index, "WRITE_DELAY_S", 0.3)
    writer = index.IndexWriter(
        str(tmp_path / "a" / "jaxtrace_nb" / "index.sqlite"), WHO, lambda *a: None
    )
    job = writer.submit(record(key="jit_step-1"), compare=True)
    assert not job.done.wait(0.15) and job.done.wait(
        30
    )  # not before its delay, and then on its own
    monkeypatch.setattr(index, "WRITE_DELAY_S", 3600.0)
    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 3600.0)
    job = writer.submit(record(key="jit_step-2"), compare=True)
    assert not job.done.wait(0.3)
    writer.hurry()
    assert job.done.wait(30)
    job = writer.submit(record(key="jit_step-3"), compare=True)
    assert not job.done.wait(0.3)
    assert writer.flush(30) and job.done.is_set()
    writer.close()

    log = EventLog()
    explainer = CacheExplainer(
        log, fault=lambda *a: None, host=lambda: "h", place=str, is_library=lambda p: False
    )
    cache = tmp_path / "cache"
    event = Event(function="step", location="m.py:1", kind="trace", cause="first", seq=0)
    explainer.submit(event, record(cache_dir=str(cache)))
    explainer.settle(timeout=30)
    assert event.persistent_cache.startswith("miss: the first compile of `jit_step`")
    explainer.flush()


def _transactions(monkeypatch) -> list:
    """The ``BEGIN IMMEDIATE`` of the index's connections, counted from now on."""
    begun = []
    enter = index._transaction.__enter__

    def counting(self):
        con = enter(self)
        begun.append(self)
        return con

    monkeypatch.setattr(index._transaction, "__enter__", counting)
    return begun


def test_a_burst_of_records_is_written_once_quiet_in_one_transaction(tmp_path, monkeypatch):
    """Records that come closer together than `WRITE_DELAY_S` (a warm start's hits) wait for the
    burst to end, then go in one transaction, each compared with those before it in the burst; a
    steady stream waits no longer than `MAX_WRITE_WAIT_S` for a quiet moment."""
    monkeypatch.setattr(
        index, "WRITE_DELAY_S", 2.0
    )  # (records 0.1 s apart: a loaded machine's stalls allowed)
    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 3600.0)
    path = str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite")
    index.connect(path).close()  # made (its schema written) before the count
    begun = _transactions(monkeypatch)
    writer = index.IndexWriter(path, WHO, lambda *a: None)
    jobs = []
    for n in range(5):
        jobs.append(
            writer.submit(
                record(key=f"jit_step-{n}", parts={"XLA flags": f"{n}" * 64}), compare=True
            )
        )
        assert not any(job.done.wait(0.1) for job in jobs)  # (0.1 s apart: none written meanwhile)
    assert all(job.done.wait(30) for job in jobs)
    assert len(begun) == 1  # (the first write's global pruning in it)
    assert [job.comparison.closest.key if job.comparison.closest else None for job in jobs] == [
        None,
        "jit_step-0",
        "jit_step-1",
        "jit_step-2",
        "jit_step-3",
    ]  # the most recent of equals
    writer.close()

    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 0.4)
    writer = index.IndexWriter(path, WHO, lambda *a: None)
    first = writer.submit(record(key="jit_step-a"), compare=False)
    stream_start = time.monotonic()
    n = 0
    while not first.done.is_set() and time.monotonic() - stream_start < 10:
        n += 1
        writer.submit(record(key=f"jit_step-stream-{n}"), compare=False)
        time.sleep(0.05)
    assert first.done.is_set() and time.monotonic() - stream_start < 5
    writer.close()


def test_a_failing_record_of_a_batch_costs_only_itself(tmp_path, monkeypatch):
    """One record that cannot be written rolls its batch back; the writer then writes the batch's
    records one by one, and only that one fails (counted once as a fault)."""
    faults = []
    put_rows = index._put_rows

    def failing(con, prepared, *args, **kwargs):
        if prepared.record.key == "jit_step-bad":
            raise sqlite3.OperationalError("injected")
        return put_rows(con, prepared, *args, **kwargs)

    monkeypatch.setattr(index, "_put_rows", failing)
    monkeypatch.setattr(index, "WRITE_DELAY_S", 3600.0)
    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 3600.0)
    path = str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite")
    writer = index.IndexWriter(path, WHO, lambda stage, e: faults.append(stage))
    jobs = [
        writer.submit(record(key=key, parts={"XLA flags": key[-1] * 64}), compare=True)
        for key in ("jit_step-1", "jit_step-bad", "jit_step-2")
    ]
    assert writer.flush(30)
    assert [job.error for job in jobs] == [None, "OperationalError: injected", None]
    assert jobs[2].comparison.closest.key == "jit_step-1" and faults == ["persistent cache index"]
    assert {k for (k,) in sqlite3.connect(path).execute("SELECT key FROM keys")} == {
        "jit_step-1",
        "jit_step-2",
    }
    writer.close()


def test_a_commit_that_fails_is_reported_and_leaves_no_transaction_open(tmp_path, monkeypatch):
    """Where the index cannot take WAL (a rollback journal), a reader's lock makes the writer's
    COMMIT fail: the records are reported not written, the transaction is rolled back (none left
    open to swallow later records or hold the lock), and the next record is written."""
    monkeypatch.setattr(index, "BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(index, "WRITE_DELAY_S", 3600.0)
    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 3600.0)
    connect = index.connect

    def rollback_journal(path, **kwargs):
        con = connect(path, **kwargs)
        con.execute("PRAGMA journal_mode=DELETE")
        return con

    monkeypatch.setattr(index, "connect", rollback_journal)
    path = str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite")
    faults = []
    writer = index.IndexWriter(path, WHO, lambda stage, e: faults.append(stage))
    first = writer.submit(record(key="jit_step-first"), compare=False)
    assert (
        writer.flush(30) and first.error is None
    )  # (its connection open, with a rollback journal)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM keys").fetchone()  # a shared lock until its COMMIT
    jobs = [writer.submit(record(key=f"jit_step-{n}"), compare=True) for n in range(2)]
    assert writer.flush(30)
    assert all(job.error and "locked" in job.error for job in jobs) and faults, [
        job.error for job in jobs
    ]
    reader.execute("COMMIT")
    later = writer.submit(record(key="jit_step-later"), compare=False)
    assert writer.flush(30) and later.error is None
    assert {k for (k,) in sqlite3.connect(path).execute("SELECT key FROM keys")} == {
        "jit_step-first",
        "jit_step-later",
    }
    writer.close()


def test_a_flush_marker_is_never_left_waiting_and_an_idle_hurry_hurries_nothing_later(
    tmp_path, monkeypatch
):
    """A flush's marker that reaches the writer after it found nothing hurried still writes what
    waits with it at once; a `hurry` with nothing waiting does not make a later record skip its
    quiet wait."""
    monkeypatch.setattr(index, "WRITE_DELAY_S", 3600.0)
    monkeypatch.setattr(index, "MAX_WRITE_WAIT_S", 3600.0)
    writer = index.IndexWriter(
        str(tmp_path / "cache" / "jaxtrace_nb" / "index.sqlite"), WHO, lambda *a: None
    )
    job = writer.submit(record(key="jit_step-1"), compare=False)
    marker = index.Job(None, False, None, None)
    writer._queue.put(marker)  # as `flush` does, without its hurry (the race: cleared meanwhile)
    assert marker.done.wait(30) and job.done.is_set()
    writer.hurry()
    time.sleep(0.3)  # (the wake-up taken, with nothing waiting)
    job = writer.submit(record(key="jit_step-2"), compare=False)
    assert not job.done.wait(0.5)
    assert writer.flush(30) and job.done.is_set()
    writer.close()
