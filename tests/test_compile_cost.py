"""Graph size, unrolled loops, compile cost and the persistent compilation cache."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._cost import count_equations, find_unrolled
from jaxtrace_nb._records import Unrolled


def test_find_unrolled_on_plain_sequences():
    assert find_unrolled(["dot_general", "tanh", "add"] * 200 + ["reduce_sum"]) == Unrolled(200, 3, 0)
    assert find_unrolled(["mul"] * 5 + ["dot", "add", "dot", "add", "tanh"] * 40) == Unrolled(40, 5, 5)
    assert find_unrolled(["dot", "tanh"] * 15) is None  # too few repetitions for a loop
    assert find_unrolled(["a", "b", "c", "d"] * 3) is None
    assert find_unrolled([]) is None


def _longest_block(names: list, min_repeats: int = 16):
    """The best repetition over every block length (the reference `find_unrolled` must agree with)."""
    best = None
    for period in range(1, len(names) // min_repeats + 1):
        run, start_of_run = 0, 0
        for i in range(len(names) - period):
            if names[i] == names[i + period]:
                if run == 0:
                    start_of_run = i
                run += 1
                repeats = run // period + 1
                if repeats >= min_repeats and (best is None or repeats * period > best.equations):
                    best = Unrolled(repeats, period, start_of_run)
            else:
                run = 0
    return best


@pytest.mark.parametrize("seed", range(40))
def test_find_unrolled_finds_the_longest_repetition_of_generated_programs(seed):
    import random

    rng = random.Random(seed)
    alphabet = ["dot", "add", "tanh", "mul", "exp", "sub"]
    block = [rng.choice(alphabet) for _ in range(rng.randint(1, 5))]
    names = ([rng.choice(alphabet) for _ in range(rng.randint(0, 30))] + block * rng.randint(10, 60)
             + [rng.choice(alphabet) for _ in range(rng.randint(0, 30))])
    found, expected = find_unrolled(names), _longest_block(names)
    assert (found is None) == (expected is None)
    if found is not None:
        assert found.equations == expected.equations
        assert names[found.start:found.start + found.equations] == names[found.start:found.start + found.period] * found.repeats


def _every_equation(jaxpr) -> int:
    """Equations of `jaxpr` and of every jaxpr in any parameter of any equation (no shortcut)."""
    total = 0
    for eqn in jaxpr.eqns:
        total += 1
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub) if type(sub).__name__ == "ClosedJaxpr" else sub
                if type(inner).__name__ == "Jaxpr":
                    total += _every_equation(inner)
    return total


def test_equation_count_reaches_every_sub_jaxpr():
    @jax.custom_jvp
    def soft(x):
        return jnp.log1p(jnp.exp(x))

    soft.defjvp(lambda p, t: (soft(p[0]), t[0] * jax.nn.sigmoid(p[0])))

    def program(x):
        x = jax.jit(lambda y: jnp.sin(y) * 2)(x)
        x = jax.lax.cond(x.sum() > 0, jnp.cos, lambda y: jax.jit(jnp.tanh)(y) + 1, x)
        x, _ = jax.lax.scan(lambda c, _: (jax.checkpoint(lambda z: soft(z) * c)(c), None), x, None, length=3)
        x = jax.lax.while_loop(lambda c: c.sum() < 10, lambda c: c + jax.vmap(jnp.exp)(c), x)
        return jax.grad(lambda y: soft(y).sum())(x)

    jaxpr = jax.make_jaxpr(program)(jnp.ones(3)).jaxpr
    for _ in range(2):  # the second time from the per-primitive memory of which parameters hold jaxprs
        assert count_equations(jaxpr, {}) == _every_equation(jaxpr) > len(jaxpr.eqns) + 10


def test_every_optional_jaxpr_parameter_of_jax_is_named_so():
    """The equation count looks inside a parameter that is None in one equation only when its name
    says "jaxpr" (`_cost._jaxpr_params`): in the installed JAX's sources, every function argument
    annotated as an optional jaxpr (the rules of a primitive take its parameters so) is named so."""
    import ast
    import pathlib

    def members(annotation):  # the types of a union: `A | B`, Optional[A], Union[A, B]
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return members(annotation.left) + members(annotation.right)
        if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).split(".")[-1] in ("Optional",
                                                                                                      "Union"):
            inner = annotation.slice
            return [t for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner]) for t in members(e)] + \
                (["None"] if ast.unparse(annotation.value).endswith("Optional") else [])
        return [ast.unparse(annotation).split(".")[-1]]

    optional, files = [], 0
    for path in pathlib.Path(jax.__file__).parent.joinpath("_src").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        files += 1
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
                types = members(arg.annotation) if arg.annotation is not None else []
                if "None" in types and {"Jaxpr", "ClosedJaxpr"} & set(types):
                    optional.append((arg.arg, f"{path.name}:{node.lineno}"))
    assert files > 100 and optional, (files, optional)  # the scan saw JAX, and found Pallas's pallas_jaxpr
    assert [(name, where) for name, where in optional if "jaxpr" not in name] == []


def _unrolled(x):
    for _ in range(200):
        x = jnp.tanh(x @ x) + x
    return x


def _scanned(x):
    def body(c, _):
        return jnp.tanh(c @ c) + c, None

    return jax.lax.scan(body, x, None, length=200)[0]


def test_unrolled_loop_hint_and_equation_counts(jt):
    x = jnp.ones((8, 8))
    jax.jit(_unrolled)(x)
    jax.jit(_scanned)(x)
    df = jt.log(internal=False).set_index("function")
    loop, scan = df.loc["_unrolled"], df.loc["_scanned"]
    assert loop["loop_repeats"] == 200
    assert "Python loop of about 200 iterations" in loop["hint"] and "lax.scan" in loop["hint"]
    assert loop["loop_line"] == f"{__file__}:{_unrolled.__code__.co_firstlineno + 2}"
    assert pd_isna(scan["loop_repeats"]) and "Python loop" not in scan["hint"]
    closed_loop, closed_scan = jax.make_jaxpr(_unrolled)(x), jax.make_jaxpr(_scanned)(x)
    assert loop["eqns"] == loop["eqns_total"] == len(closed_loop.jaxpr.eqns) == 600
    assert scan["eqns"] == len(closed_scan.jaxpr.eqns) == 1
    body = closed_scan.jaxpr.eqns[0].params["jaxpr"].jaxpr
    assert scan["eqns_total"] == 1 + len(body.eqns)


def pd_isna(value):
    import pandas as pd

    return bool(pd.isna(value))


def test_compile_cost_columns_and_summary(jt):
    x = jnp.ones((16, 16))
    jax.jit(_unrolled)(x)
    row = jt.log(internal=False).iloc[0]
    assert row["flops"] > 200 * 2 * 16**3  # 200 matmuls of 16x16
    assert row["arg_bytes"] == row["out_bytes"] == 16 * 16 * 4
    assert row["temp_bytes"] >= 0
    assert row["compile_s_per_keqn"] == pytest.approx(row["compile_s"] / 0.6)
    jax.jit(_scanned)(x)
    by_eqns = jt.summary(by="eqns")
    assert by_eqns["function"].tolist() == ["_unrolled", "_scanned"]
    assert by_eqns.loc[0, "eqns"] == 600 and by_eqns.loc[0, "loop_repeats"] == 200
    assert jt.summary(by="compile_s")["compile_s"].is_monotonic_decreasing


def test_capture_cost_off_records_no_graph(jt):
    from jaxtrace_nb._session import get_session

    probe = get_session().probe
    probe.capture_cost = False
    try:
        jax.jit(_unrolled)(jnp.ones((4, 4)))
    finally:
        probe.capture_cost = True
    row = jt.log(internal=False).iloc[0]
    assert pd_isna(row["eqns"]) and pd_isna(row["flops"]) and row["hint"] == ""


_CHILD = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jaxtrace_nb as jt
    jt.start()

    @jax.jit
    def cached_fn(x):
        for _ in range(30):
            x = jnp.sin(x) @ x
        return x

    cached_fn(jnp.ones((8, 8))).block_until_ready()
    row = jt.log(internal=False).iloc[0]
    print(json.dumps({"hit": None if row["cache_hit"] is None else bool(row["cache_hit"]),
                      "saved": row["cache_saved_s"], "compile_s": row["compile_s"]}))
    print(json.dumps(jt.summary()[["cache_hits", "cache_saved_s"]].iloc[0].tolist()))
""")


def test_persistent_cache_hit_is_marked(tmp_path):
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "cache")], env=env,
                             capture_output=True, text=True, timeout=120, check=True).stdout
        lines = out.strip().splitlines()
        runs.append((json.loads(lines[-2]), json.loads(lines[-1])))
    (first, first_summary), (second, second_summary) = runs
    assert first["hit"] is False and second["hit"] is True
    assert isinstance(second["saved"], float)  # JAX's own figure: negative when loading was slower
    assert first_summary[0] == 0 and second_summary == [1, second["saved"]]


def test_xla_figures_are_skipped_when_reading_them_would_cost_a_share_of_the_compile(jt, monkeypatch):
    from jaxtrace_nb import _listeners

    params = {f"w{i}": jnp.ones(2) for i in range(8)}
    monkeypatch.setattr(_listeners, "XLA_COST_S_PER_ARGUMENT", 1.0)  # as if reading them took 1 s per argument
    jax.jit(lambda p: jax.tree.map(lambda a: a + 1, p))(params)
    skipped = jt.log(internal=False).iloc[-1]
    assert skipped["compile_s"] > 0 and pd_isna(skipped["flops"]) and pd_isna(skipped["arg_bytes"])
    monkeypatch.undo()
    jax.jit(lambda p: jax.tree.map(lambda a: a * 3, p))(params)
    read = jt.log(internal=False).iloc[-1]
    assert read["arg_bytes"] == 8 * 2 * 4
