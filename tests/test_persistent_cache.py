"""Why did JAX's persistent compilation cache miss? Process pairs sharing one cache directory.

Process A trains one step of a small model (`programs/cache_pair.py`) and fills the cache; process
B does the same with one change injected, and must name that change, and only it:

XLA flags, `jax_enable_x64`, the device count (`--xla_force_host_platform_device_count`), a changed
closure constant, a changed model line, compile options (`jax_default_matmul_precision`,
`jax.jit(compiler_options=...)`), another JAX version (a second virtualenv,
`JAXTRACE_SECOND_JAX_PYTHON`; CI makes one, elsewhere the case is skipped) and no change at all (a
hit, nothing claimed).

Every B starts from A's cache as A left it (the index beside it included), restored at the same
path: on JAX 0.8 – 0.10 the cache's own path enters the key (XLA's
``xla_gpu_per_fusion_autotune_cache_dir`` debug option, set under it), so a moved cache misses, as
`test_a_moved_cache_is_named` shows.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import pytest

PROGRAMS = pathlib.Path(__file__).parent / "programs"
REPO = PROGRAMS.parent.parent
SECOND_JAX = os.environ.get("JAXTRACE_SECOND_JAX_PYTHON")


def _run(cache, work, env=(), python=sys.executable, log=None) -> dict:
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PAIR_", "XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR"))
    }
    environment.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), **dict(env))
    args = [python, str(PROGRAMS / "cache_pair.py"), str(cache), str(work)] + (
        [str(log)] if log else []
    )
    done = subprocess.run(
        args, env=environment, capture_output=True, text=True, timeout=300, cwd=work.parent
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """Process A: the cache it filled (a copy of it as A left it), and what it said."""
    root = tmp_path_factory.mktemp("pair")
    out = _run(root / "cache", root / "a", log=root / "a.jsonl")
    shutil.copytree(root / "cache", root / "as_a_left_it")
    return root, out


def _restored(root) -> pathlib.Path:
    shutil.rmtree(root / "cache")
    shutil.copytree(root / "as_a_left_it", root / "cache")
    return root / "cache"


def _second(first, tmp_path, env=(), python=sys.executable) -> dict:
    root, _ = first
    out = _run(_restored(root), tmp_path / "b", env, python, log=tmp_path / "b.jsonl")
    assert out["faults"] == {}
    return out


def _step(out) -> dict:
    (event,) = out["step"]
    return event


def test_the_first_compile_says_so(first):
    _, out = first
    assert out["faults"] == {}
    assert _step(out)["cache"] == (
        "miss: the first compile of `jit_step` with this cache (its index holds no "
        "earlier key of that name)"
    )


def test_no_change_is_a_hit_and_claims_nothing(first, tmp_path):
    root, a = first
    out = _run(
        "-", tmp_path / "b", {"JAX_COMPILATION_CACHE_DIR": str(_restored(root))}.items()
    )  # by the variable
    assert out["loss"] == a["loss"] and out["faults"] == {}
    step = _step(out)
    assert (step["cache"], step["hint_ids"], step["hint"] or None) == ("hit", None, None)
    assert set(out["verdicts"]) == {"hit"}  # JAX's own helpers compiled by A too: every one a hit


def test_recording_changes_no_key_jax_computes(first, tmp_path):
    """The same program without jaxtrace_nb, in a cache of its own at the same path: JAX writes the
    same entries (the same keys), with the same loss."""
    root, a = first
    shutil.rmtree(root / "cache")
    try:
        out = _run(root / "cache", tmp_path / "a", {"PAIR_NO_RECORD": "1"}.items())
        written = sorted(p.name for p in (root / "cache").glob("*-cache"))
    finally:
        _restored(root)
    assert out["loss"] == a["loss"]
    assert written and written == sorted(p.name for p in (root / "as_a_left_it").glob("*-cache"))


def test_each_part_is_the_hash_jax_itself_logs(tmp_path):
    """With JAX's DEBUG log of the key on (which hashes every part a second time), the parts the
    index keeps are JAX's own, key by key."""
    import jaxtrace_nb as jt

    out = _run(tmp_path / "cache", tmp_path / "a", {"PAIR_DEBUG_KEY": "1"}.items())
    logged = out["debug_parts"]
    keys = jt.load(tmp_path / "cache").set_index("key")
    assert "jit_step" in {k.rpartition("-")[0] for k in logged} and set(logged) <= set(keys.index)
    assert all(len(parts) == 8 for parts in logged.values())
    for key, parts in logged.items():
        assert {name: keys.loc[key, f"part: {name}"] for name in parts} == parts, key


def test_xla_flags(first, tmp_path):
    step = _step(
        _second(first, tmp_path, {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}.items())
    )
    assert step["cache"].startswith(
        "miss: XLA flags differ: `--xla_cpu_enable_fast_math=false` added (closest "
        "earlier key of `jit_step`: the run of "
    )
    assert step["hint_ids"] == "cache.xla_flags"


def test_x64(first, tmp_path):
    step = _step(_second(first, tmp_path, {"PAIR_X64": "1"}.items()))
    assert step["cache"].startswith(
        "miss: JAX options differ: `jax_enable_x64` False → True; the computation "
        "differs in argument `params[0][0]`: tensor<16x16xf32> → "
        "tensor<16x16xf64> ("
    )
    assert step["hint_ids"] == "cache.options"
    assert "`jax_enable_x64`" in step["hint"]


def test_device_count(first, tmp_path):
    step = _step(
        _second(first, tmp_path, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}.items())
    )
    assert step["cache"].startswith(
        "miss: devices differ: 1 cpu device → 4 cpu devices (the program runs on 1) ("
    )
    assert step["hint_ids"] == "cache.devices"


def test_closure_constant(first, tmp_path):
    step = _step(_second(first, tmp_path, {"PAIR_CONST": "0.7"}.items()))
    model = tmp_path / "b" / "model.py"
    assert step["cache"].startswith(
        f"miss: the computation differs first at {model}:6 (`jit(step)/mul`, "
        "`stablehlo.constant`): `5.000000e-01` → `0.699999988` ("
    )
    assert step["hint_ids"] == "cache.constant"
    assert step["hint"].startswith(f"{model}:6 puts a value captured from Python")


def test_model_line(first, tmp_path):
    step = _step(_second(first, tmp_path, {"PAIR_ACT": "jax.nn.relu"}.items()))
    model = tmp_path / "b" / "model.py"
    assert step["cache"].startswith(
        f"miss: the computation differs first at {model}:6 (`jit(step)/jit(relu)`): "
        "`%4 = stablehlo.tanh %3 : tensor<4x16xf32>` → `%4 = call "
        "@relu(%3)"
    )
    assert step["hint_ids"] is None  # a change of the program is what it is: no advice


def test_matmul_precision(first, tmp_path):
    step = _step(_second(first, tmp_path, {"PAIR_PRECISION": "highest"}.items()))
    model = tmp_path / "b" / "model.py"
    assert step["cache"].startswith(
        f"miss: JAX options differ: `jax_default_matmul_precision` None → 'highest'; "
        f"the computation differs first at {model}:6 "
        "(`jit(step)/dot_general`, "
        "`stablehlo.dot_general`): `DEFAULT, DEFAULT` → `HIGHEST, "
        "HIGHEST` ("
    )
    assert step["hint_ids"] == "cache.options"


def test_jit_compiler_options(first, tmp_path):
    step = _step(
        _second(first, tmp_path, {"PAIR_OPTIONS": '{"xla_cpu_enable_fast_math": true}'}.items())
    )
    assert step["cache"].startswith(
        "miss: compile options differ: `env_option_overrides`: [] → "
        "[('xla_cpu_enable_fast_math', True)] ("
    )
    assert step["hint_ids"] == "cache.compiler_options"


@pytest.mark.skipif(
    not SECOND_JAX and not os.environ.get("CI"),
    reason="set JAXTRACE_SECOND_JAX_PYTHON to a python with another supported JAX",
)
def test_another_jax_version(tmp_path):
    assert SECOND_JAX, "CI must give JAXTRACE_SECOND_JAX_PYTHON (.ci/run)"
    a = _run(tmp_path / "cache", tmp_path / "a", python=SECOND_JAX)
    assert a["jax"] != jax.__version__ and a["faults"] == {}
    b = _run(tmp_path / "cache", tmp_path / "b")
    step = _step(b)
    assert step["cache"].startswith(
        f"miss: jaxlib {a['jax']} → {jax.__version__} (JAX {a['jax']} → {jax.__version__}); "
    )
    assert "differ with it, as each JAX version makes them its own way" in step["cache"]
    assert step["hint_ids"] == "cache.jax_version"
    assert b["faults"] == {}


@pytest.mark.skipif(
    tuple(map(int, jax.__version__.split(".")[:2])) >= (0, 11),
    reason="JAX 0.11 keeps the autotune cache's path out of the key",
)
def test_a_moved_cache_is_named(first, tmp_path):
    root, _ = first
    shutil.copytree(root / "as_a_left_it", tmp_path / "moved")
    step = _step(_run(tmp_path / "moved", tmp_path / "b"))
    assert step["cache"].startswith(
        "miss: compile options differ: "
        "`executable_build_options.debug_options.xla_gpu_per_fusion_autotune_cache_dir`: "
    )
    assert str(tmp_path / "moved") in step["cache"]


def test_a_compile_too_fast_to_cache_is_not_a_miss_and_explains_the_next_one(tmp_path):
    a = _run(tmp_path / "cache", tmp_path / "a", {"PAIR_MIN_TIME": "1000"}.items())
    assert _step(a)["cache"].startswith("not cached: compiled in ")
    assert "under `jax_persistent_cache_min_compile_time_secs`=1000" in _step(a)["cache"]
    assert not any(v.startswith("miss") for v in a["verdicts"])
    b = _run(tmp_path / "cache", tmp_path / "b")
    assert _step(b)["cache"].startswith("miss: this key was compiled before (the run of ")
    assert "and not written then: compiled in " in _step(b)["cache"]


def test_report_over_both_runs_logs(first, tmp_path):
    root, _ = first
    _second(first, tmp_path, {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}.items())
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrace_nb",
            "report",
            str(root / "a.jsonl"),
            str(tmp_path / "b.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=True,
    )
    text = done.stdout
    assert "persistent cache: " in text.splitlines()[0]
    assert (
        "persistent cache miss: XLA flags differ: `--xla_cpu_enable_fast_math=false` added" in text
    )
    assert "hint: The runs that share this cache set different `XLA_FLAGS`" in text


def test_the_index_is_read_by_load_and_report(first, tmp_path):
    import jaxtrace_nb as jt

    root, _ = first
    _second(
        first,
        tmp_path,
        {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false", "PAIR_CONST": "0.7"}.items(),
    )
    keys = jt.load(root / "cache")
    steps = keys[keys["name"] == "jit_step"]
    assert (
        len(steps) == 2
        and steps["written"].all()
        and steps["function"].tolist() == ["step", "step"]
    )
    assert steps["xla_flags"].tolist() == ["", "--xla_cpu_enable_fast_math=false"]
    assert (steps["part: jax_lib version"].nunique(), steps["part: XLA flags"].nunique()) == (1, 2)
    done = subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", str(root / "cache")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=True,
    )
    text = done.stdout
    assert text.startswith(
        f"Persistent compilation cache index ({root / 'cache' / 'jaxtrace_nb' / 'index.sqlite'}):"
    )
    assert "  jit_step: 2 key(s)\n" in text
    assert (
        "      XLA flags differ: `--xla_cpu_enable_fast_math=false` added; the computation differs "
        "first (`stablehlo.constant`): `5.000000e-01` → `0.699999988` (closest earlier key of "
        "`jit_step`: the run of "
    ) in text


def _cached_program(tmp_path, body: str):
    """`prog.py`: JAX's persistent cache in `tmp_path/cache` for every compile, then `body`."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import sys, jax, jax.numpy as jnp\n"
        f"jax.config.update('jax_compilation_cache_dir', {str(tmp_path / 'cache')!r})\n"
        "jax.config.update('jax_persistent_cache_min_compile_time_secs', 0)\n"
        "jax.config.update('jax_persistent_cache_min_entry_size_bytes', 0)\n" + body
    )
    return script


def _run_twice(tmp_path, script, first: str, second: str) -> list[str]:
    """`python -m jaxtrace_nb run --persist runN.jsonl script ARG` with each argument: the
    outputs."""
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR"))
    }
    environment.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    outputs = []
    for argument, log in ((first, "run1.jsonl"), (second, "run2.jsonl")):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "jaxtrace_nb",
                "run",
                "--persist",
                str(tmp_path / log),
                str(script),
                argument,
            ],
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout + done.stderr)
    return outputs


def test_run_and_its_persisted_log_name_the_argument_in_the_users_terms(tmp_path):
    """`python -m jaxtrace_nb run` explains a miss after JAX let the module go: the argument is
    still named as the user's path (read from the module's locations at the compile), in its output
    and in the persisted log, as `jt.log()` names it in a notebook."""
    script = _cached_program(
        tmp_path,
        "n = int(sys.argv[1])\n"
        "@jax.jit\n"
        "def step(params, x):\n"
        "    return jnp.tanh(x @ params[0][0]) @ params[1]\n"
        "params = [(jnp.ones((4, n)),), jnp.ones((n, 2))]\n"
        "print(float(step(params, jnp.ones((3, 4))).sum()))\n",
    )
    outputs = _run_twice(tmp_path, script, "8", "16")
    said = "the computation differs in argument `params[0][0]`: tensor<4x8xf32> → tensor<4x16xf32>"
    assert said in outputs[1]
    persisted = [
        json.loads(line)
        for line in (tmp_path / "run2.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert any(said in str(value) for record in persisted for value in record.values()), persisted


def test_run_locates_a_changed_closure_constant_at_the_users_line(tmp_path):
    """`run` explains its misses after JAX let the compiled module go: the first differing operation
    is still located at the user's line that captured the constant (its bytecode with locations is
    taken at the compile), in the output and in the persisted log."""
    script = _cached_program(
        tmp_path,
        "scale = float(sys.argv[1])\n"
        "@jax.jit\n"
        "def step(params, x):\n"
        "    y = jnp.tanh(x @ params)\n"
        "    return y * scale\n"
        "print(float(step(jnp.ones((4, 4)), jnp.ones((3, 4))).sum()))\n",
    )
    outputs = _run_twice(tmp_path, script, "0.5", "0.7")
    said = (
        "the computation differs first at prog.py:9 (`jit(step)/mul`, `stablehlo.constant`): `0.5` "
        "→ `0.7`"
    )
    assert said in outputs[1], outputs[1]
    assert "hint: prog.py:9 puts a value captured from Python" in outputs[1]
    persisted = [
        json.loads(line)
        for line in (tmp_path / "run2.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert any(
        f"differs first at {script}:9 (`jit(step)/mul`" in str(value)
        for record in persisted
        for value in record.values()
    ), persisted


# Six runs of one program sharing a cache, as a newcomer tries them: the first compile, a hit, then
# one
# change per run; two of them change the same part (the model's constant), in different words.
SIX_RUNS = (
    {},
    {},
    {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"},
    {"PAIR_CONST": "0.7"},
    {"PAIR_CONST": "0.9"},
    {"PAIR_ACT": "jax.nn.relu"},
)


@pytest.fixture(scope="module")
def six_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("six")
    logs = [root / f"run{i}.jsonl" for i in range(1, 7)]
    for env, log in zip(SIX_RUNS, logs):
        _run(
            root / "cache", root / "work", env.items(), log=log
        )  # one model file: one function in the reports
    return root, logs


def _report(*args) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=True,
    )
    return done.stdout


def _steps_misses(log) -> list[str]:
    """The words of each notable miss of `step` in one run's log, as the reports shorten them."""
    from jaxtrace_nb._log._persist import load_events
    from jaxtrace_nb._views._rows import cache_words

    return [cache_words(e) for e in load_events(log) if e.function == "step" and cache_words(e)]


def test_a_merged_report_explains_every_miss_it_counts(six_runs):
    root, logs = six_runs
    misses = {log.name: _steps_misses(log) for log in logs}
    assert [len(m) for m in misses.values()] == [
        0,
        0,
        1,
        1,
        1,
        1,
    ]  # the first compile and the hit: not notable
    assert len(set(sum(misses.values(), []))) == 4  # four reasons, each in words of its own
    text = _report(*logs)
    headline = text.splitlines()[0]
    assert (
        "persistent cache: 1 hit(s), 5 miss(es) (1 of them a first compile with this cache)"
        in headline
    ), headline
    notes = text[text.index("Retraces and notes") :]
    for log, words in misses.items():
        for said in words:
            assert notes.count(f"persistent cache miss{said[len('miss') :]}") == 1, (
                log,
                said,
                notes,
            )
    for n in (2, 3, 6):  # the notes whatever the number of logs: one, or the first n
        part = _report(*logs[:n]) if n > 1 else _report(logs[2])
        shown = [w for log in (logs[:n] if n > 1 else [logs[2]]) for w in misses[log.name]]
        assert ("Retraces and notes" in part) == bool(shown), (n, part)
        assert all(f"persistent cache miss{w[len('miss') :]}" in part for w in shown), (n, part)


def test_the_html_reports_expanded_groups_say_why_each_compile_missed(six_runs, tmp_path):
    import html as html_module
    import json

    root, logs = six_runs
    page = tmp_path / "six.html"
    subprocess.run(
        [sys.executable, "-m", "jaxtrace_nb", "report", *map(str, logs), "-o", str(page)],
        check=True,
        capture_output=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    text = page.read_text(encoding="utf-8")
    data = text[text.index("<script type='application/json' id='jtnb-data'>") :].split(">", 1)[1]
    histories = json.loads(data[: data.index("</script>")])["histories"]
    (step,) = [h for h in histories.values() if h["title"].startswith("step ")]
    events = [e for g in step["groups"] for e in g["events"]]
    said = {
        "".join(s[1] for _, spans in e["explanation"] for s in spans)
        for e in events
        if e["persistent_cache"] == "miss"
    }
    for words in sum((_steps_misses(log) for log in logs), []):
        assert any(
            f"persistent cache miss{words[len('miss') :]}".replace("`", "") in s for s in said
        ), (words, said)
    static = html_module.unescape(text[text.index("jtnb-groups") :])
    for words in sum((_steps_misses(log) for log in logs), []):
        assert words[len("miss: ") :].replace("`", "")[:60] in static.replace("<code>", "").replace(
            "</code>", ""
        )
