"""Graph size, unrolled loops, compile cost and the persistent compilation cache."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._keys._records import Unrolled
from jaxtrace_nb._recording._cost import count_equations, find_unrolled


def test_find_unrolled_on_plain_sequences():
    assert find_unrolled(["dot_general", "tanh", "add"] * 200 + ["reduce_sum"]) == Unrolled(
        200, 3, 0
    )
    assert find_unrolled(["mul"] * 5 + ["dot", "add", "dot", "add", "tanh"] * 40) == Unrolled(
        40, 5, 5
    )
    assert find_unrolled(["dot", "tanh"] * 15) is None  # too few repetitions for a loop
    assert find_unrolled(["a", "b", "c", "d"] * 3) is None
    assert find_unrolled([]) is None


def _longest_block(names: list, min_repeats: int = 16):
    """The best repetition over every block length (the reference `find_unrolled` must agree
    with)."""
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
    names = (
        [rng.choice(alphabet) for _ in range(rng.randint(0, 30))]
        + block * rng.randint(10, 60)
        + [rng.choice(alphabet) for _ in range(rng.randint(0, 30))]
    )
    found, expected = find_unrolled(names), _longest_block(names)
    assert (found is None) == (expected is None)
    if found is not None:
        assert found.equations == expected.equations
        assert (
            names[found.start : found.start + found.equations]
            == names[found.start : found.start + found.period] * found.repeats
        )


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
        x, _ = jax.lax.scan(
            lambda c, _: (jax.checkpoint(lambda z: soft(z) * c)(c), None), x, None, length=3
        )
        x = jax.lax.while_loop(lambda c: c.sum() < 10, lambda c: c + jax.vmap(jnp.exp)(c), x)
        return jax.grad(lambda y: soft(y).sum())(x)

    jaxpr = jax.make_jaxpr(program)(jnp.ones(3)).jaxpr
    for _ in range(
        2
    ):  # the second time from the per-primitive memory of which parameters hold jaxprs
        assert count_equations(jaxpr, {}) == _every_equation(jaxpr) > len(jaxpr.eqns) + 10


def _jax_equations(jaxpr) -> int:
    """Equations of `jaxpr` and of every sub-jaxpr, as JAX's own ``core.subjaxprs`` finds them."""
    from jax._src import core

    return len(jaxpr.eqns) + sum(_jax_equations(sub) for sub in core.subjaxprs(jaxpr))


def _library_programs():
    """Real programs of JAX's control flow and transformations, Equinox, Flax NNX and Optax."""
    import equinox as eqx
    import optax
    from flax import nnx

    x = jnp.linspace(0.1, 1.0, 4)

    @jax.custom_vjp
    def clip_grad(v):
        return v

    clip_grad.defvjp(lambda v: (v, None), lambda _, g: (jnp.clip(g, -1, 1),))

    mlp = eqx.nn.MLP(4, 4, 8, 2, key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)
    optimizer = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    state = optimizer.init(params)

    def equinox_step(p, s, v):
        loss = lambda q: jnp.sum(jax.vmap(eqx.combine(q, static))(v[None]) ** 2)
        grads = eqx.filter_grad(loss)(p)
        updates, s = optimizer.update(grads, s, p)
        return eqx.apply_updates(p, updates), s

    linear = nnx.Linear(4, 4, rngs=nnx.Rngs(0))
    graph, weights = nnx.split(linear)

    def flax_loss(w, v):
        return jnp.sum(nnx.merge(graph, w)(v) ** 2)

    return {
        "switch": lambda v: jax.lax.switch(
            1, [jnp.sin, jnp.cos, lambda u: jax.jit(jnp.tanh)(u)], v
        ),
        "fori_loop": lambda v: jax.lax.fori_loop(0, 3, lambda i, c: c * jnp.sin(c) + i, v),
        "map": lambda v: jax.lax.map(lambda u: jax.lax.cond(u > 0.5, jnp.sin, jnp.cos, u), v),
        "associative_scan": lambda v: jax.lax.associative_scan(jnp.add, v),
        "custom_vjp_grad": lambda v: jax.grad(lambda u: jnp.sum(clip_grad(u) ** 2))(v),
        "remat_scan": lambda v: jax.lax.scan(
            jax.checkpoint(lambda c, u: (c + jnp.sin(u), c)), 0.0, v
        ),
        "vmap_while": jax.vmap(lambda u: jax.lax.while_loop(lambda c: c < 2, lambda c: c * 1.5, u)),
        "jvp_of_cond": lambda v: jax.jvp(
            lambda u: jax.lax.cond(u.sum() > 0, jnp.exp, jnp.log1p, u), (v,), (v,)
        ),
        "equinox_optax_step": lambda v: equinox_step(params, state, v),
        "flax_nnx_grad": lambda v: jax.grad(flax_loss)(weights, v),
    }, x


def _profiled_equations(jaxpr) -> int:
    """Equations in all as a line profile counts them: its rows' self counts (`_make` takes
    `eqns_total` from them instead of counting again)."""
    from jaxtrace_nb._recording._lineprof import LineProfiler

    return sum(
        own for _, own, _ in LineProfiler(lambda f: False, lambda f, n: f"{f}:{n}").profile(jaxpr)
    )


def test_equation_count_agrees_with_jaxs_own_sub_jaxprs():
    """JAX's own ``core.subjaxprs`` (every jaxpr in any parameter) is the oracle of `eqns_total`, as
    counted alone and as a line profile's walk counts it, over real programs of control flow,
    transformations and libraries; twice, the second time from the per-primitive memory of which
    parameters may hold jaxprs (made by the first)."""
    programs, x = _library_programs()
    for _ in range(2):
        for name, program in programs.items():
            jaxpr = jax.make_jaxpr(program)(x).jaxpr
            assert (
                count_equations(jaxpr, {}) == _jax_equations(jaxpr) == _profiled_equations(jaxpr)
            ), name


_KIND_BY_EQUATION = textwrap.dedent("""
    import jax, jax.numpy as jnp, lineax as lx
    from jax._src import core
    from jaxtrace_nb._recording._cost import count_equations
    from jaxtrace_nb._recording._lineprof import LineProfiler

    def jax_equations(jaxpr):
        return len(jaxpr.eqns) + sum(jax_equations(sub) for sub in core.subjaxprs(jaxpr))

    matrix = jnp.eye(3) * 2.0
    def by_matrix(b):  # lineax's filter primitive: no jaxpr in its `static` tuple
        return lx.linear_solve(lx.MatrixLinearOperator(matrix), b).value
    def by_function(b):  # the same primitive: a closure over a traced value, \
converted to a jaxpr in `static`
        traced = matrix * b[0]
        operator = lx.FunctionLinearOperator(lambda v: traced @ v, \
jax.ShapeDtypeStruct((3,), jnp.float32))
        return lx.linear_solve(operator, b, solver=lx.LU()).value
    for program in (by_matrix, by_function):  # the primitive first seen without a jaxpr
        jaxpr = jax.make_jaxpr(program)(jnp.ones(3)).jaxpr
        print(count_equations(jaxpr, {}), jax_equations(jaxpr))
        assert sum(own for _, own, _ in \
LineProfiler(lambda f: False, lambda f, n: f).profile(jaxpr)) \
            == jax_equations(jaxpr)
""")


def test_a_sequence_parameter_is_read_in_every_equation():
    """Equinox's filter primitives (lineax's ``linear_solve``) hold a jaxpr in their ``static``
    tuple in some equations only: a first equation without one must not make the primitive
    plain for the rest of the process (a fresh one, so that it is seen first here)."""
    out = subprocess.run(
        [sys.executable, "-c", _KIND_BY_EQUATION],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    ).stdout.split()
    (matrix_ours, matrix_jax, function_ours, function_jax) = map(int, out)
    assert matrix_ours == matrix_jax and function_ours == function_jax > matrix_jax


def test_every_optional_jaxpr_parameter_of_jax_is_named_so():
    """The equation count looks inside a parameter that is None in one equation only when its name
    says "jaxpr" (`_cost._jaxpr_params`): in the installed JAX's sources, every function argument
    annotated as an optional jaxpr (the rules of a primitive take its parameters so) is named so."""
    import ast
    import pathlib

    def members(annotation):  # the types of a union: `A | B`, Optional[A], Union[A, B]
        if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
            return members(annotation.left) + members(annotation.right)
        if isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).split(".")[
            -1
        ] in ("Optional", "Union"):
            inner = annotation.slice
            return [
                t
                for e in (inner.elts if isinstance(inner, ast.Tuple) else [inner])
                for t in members(e)
            ] + (["None"] if ast.unparse(annotation.value).endswith("Optional") else [])
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
    assert files > 100 and optional, (
        files,
        optional,
    )  # the scan saw JAX, and found Pallas's pallas_jaxpr
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


def _probe():
    from jaxtrace_nb._recording._session import get_session

    return get_session().probe


def test_compile_cost_columns_and_summary(jt, monkeypatch):
    monkeypatch.setattr(
        _probe(), "xla_cost_share", float("inf")
    )  # XLA's figures read at every compile
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
    from jaxtrace_nb._recording._session import get_session

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
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(tmp_path / "cache")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        lines = out.strip().splitlines()
        runs.append((json.loads(lines[-2]), json.loads(lines[-1])))
    (first, first_summary), (second, second_summary) = runs
    assert first["hit"] is False and second["hit"] is True
    assert isinstance(second["saved"], float)  # JAX's own figure: negative when loading was slower
    assert first_summary[0] == 0 and second_summary == [1, second["saved"]]


def test_xla_figures_are_read_only_where_their_predicted_cost_fits_the_share(jt, monkeypatch):
    from jaxtrace_nb._recording._cost import XlaReads

    probe = _probe()
    params = {f"w{i}": jnp.ones(2) for i in range(8)}
    monkeypatch.setattr(probe, "xla_cost_share", 0.0)
    jax.jit(lambda p: jax.tree.map(lambda a: a + 1, p))(params)
    none = jt.log(internal=False).iloc[-1]
    assert none["compile_s"] > 0 and pd_isna(none["flops"]) and pd_isna(none["arg_bytes"])
    monkeypatch.setattr(probe, "xla_cost_share", 1.0)
    free, costly = ((1, 0.0), (2, 0.0)), ((1, 1e9), (2, 1e9))  # as if reading cost nothing / 1e9 s
    monkeypatch.setattr(probe.measurer, "_xla_reads", XlaReads(prior=(free, costly)))
    jax.jit(lambda p: jax.tree.map(lambda a: a * 3, p))(params)
    flops_only = jt.log(internal=False).iloc[-1]
    assert flops_only["flops"] == 8 * 2 and pd_isna(flops_only["arg_bytes"])
    monkeypatch.setattr(probe.measurer, "_xla_reads", XlaReads(prior=(costly, free)))
    jax.jit(lambda p: jax.tree.map(lambda a: a * 4, p))(params)
    bytes_only = jt.log(internal=False).iloc[-1]
    assert (
        pd_isna(bytes_only["flops"])
        and bytes_only["arg_bytes"] == 8 * 2 * 4
        and bytes_only["out_bytes"] > 0
    )


_UNTRACED_COMPILE = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp
    import jaxtrace_nb as jt
    jt.start()
    jt.get_session().probe.xla_cost_share = float(sys.argv[1])
    g = jax.jit(lambda a: jnp.sin(a) * 2)
    x = jnp.ones(16)
    g(x)
    g(jax.device_put(x, jax.devices()[1]))  # the same trace, lowered and compiled for one device
    event = [e for e in jt.get_session().log.events() if not e.internal][-1]
    print(event.kind, event.arg_bytes, event.flops)
""")


def test_a_compile_without_a_recorded_trace_is_read_when_the_share_has_no_bound():
    """Its program's size is unknown (the trace was a hit of JAX's tracing cache): no prediction
    bounds the read, so it is read only with ``xla_cost_share = inf`` (as the README says)."""
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    runs = [
        subprocess.run(
            [sys.executable, "-c", _UNTRACED_COMPILE, share],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env=env,
        ).stdout.split()
        for share in ("0.005", "inf")
    ]
    (bounded, unbounded) = runs
    assert bounded == ["compile", "None", "None"]
    assert unbounded[:2] == ["compile", str(16 * 4)] and float(unbounded[2]) >= 0


class _Executable:
    """An executable whose figures take the seconds given, on a clock the test moves."""

    def __init__(self, clock: list, flops_s: float, bytes_s: float):
        self.clock, self.flops_s, self.bytes_s = clock, flops_s, bytes_s

    def cost_analysis(self):
        self.clock[0] += self.flops_s
        return {"flops": 10.0}

    def get_compiled_memory_stats(self):
        self.clock[0] += self.bytes_s
        return type(
            "Stats",
            (),
            {"argument_size_in_bytes": 1, "output_size_in_bytes": 2, "temp_size_in_bytes": 3},
        )


def test_xla_reads_predict_each_figure_from_a_fixed_and_a_per_equation_cost():
    from jaxtrace_nb._recording import _cost

    clock = [0.0]
    reads = _cost.XlaReads(clock=lambda: clock[0])
    for points, (fixed, rate) in zip(
        _cost.XLA_READ_PRIOR, reads.lines
    ):  # near the prior's two reads
        # (the bytes' line through them would be negative at no equation: through the origin
        # instead)
        assert (
            all(0.99 * t <= fixed + rate * n <= 1.5 * t for n, t in points)
            and fixed >= 0
            and rate > 0
        )
    line = ((10, 1.0e-3 + 10e-6), (1000, 1.0e-3 + 1000e-6))  # 1 ms fixed, 1 µs an equation
    reads = _cost.XlaReads(prior=(line, line), clock=lambda: clock[0])
    assert reads.lines[0] == (pytest.approx(1e-3), pytest.approx(1e-6))
    assert reads.plan(100, budget_s=2.3e-3) == (True, True) and reads.plan(
        100, budget_s=2.1e-3
    ) == (True, False)
    assert reads.plan(100, budget_s=1.0e-3) == (False, False)
    # many small programs whose reads cost 1.2 ms each (eager operations, one equation each): their
    # cost goes to the fixed part, not to every equation of a large program (which 1.2 ms an
    # equation would put at 1.2 s)
    for _ in range(50):
        reads.read(_Executable(clock, flops_s=1.2e-3, bytes_s=1.2e-3), (True, True), 1)
    fixed, rate = reads.lines[0]
    assert 1.1e-3 < fixed < 1.25e-3 and 0 < rate <= 1e-6
    assert reads.plan(1000, budget_s=4.5e-3) == (True, True)
    # reads that cost more per equation move the rate
    for _ in range(20):
        reads.read(_Executable(clock, flops_s=3e-3 + 5000 * 9e-6, bytes_s=0.0), (True, False), 5000)
    assert reads.lines[0][1] > 5e-6
    # a size not known: read only when the budget has no bound, and not timed into the line
    before = list(reads.lines)
    assert reads.plan(None, budget_s=1.0) == (False, False)
    assert reads.plan(None, budget_s=float("inf")) == (True, True)
    reads.read(_Executable(clock, flops_s=1.0, bytes_s=1.0), (True, True), None)
    assert reads.lines == before


@pytest.mark.parametrize("seed", range(4))
def test_may_read_is_false_only_where_no_larger_program_could_be_read(seed):
    """`may_read(n, budget)` lets the compile's end skip measuring a program of at least n
    equations: checked against `plan` at every larger size, over generated lines and budgets. The
    fitted lines never fall (`_fit` keeps their parts at 0 or more); a falling one, set directly,
    makes it say yes."""
    import random

    from jaxtrace_nb._recording import _cost

    rng = random.Random(seed)
    for _ in range(200):
        reads = _cost.XlaReads(
            prior=tuple(
                ((10, rng.uniform(0, 2e-3)), (1000, rng.uniform(0, 8e-3))) for _figure in range(2)
            )
        )
        if rng.random() < 0.2:
            reads.lines = [(rng.uniform(0, 2e-3), rng.uniform(-2e-7, 5e-6)) for _figure in range(2)]
        budget = rng.choice([0.0, rng.uniform(0, 5e-3), float("inf")])
        at_least = rng.randrange(0, 3000)
        if not reads.may_read(at_least, budget):
            assert budget != float("inf") and all(rate >= 0 for _, rate in reads.lines)
            assert not any(
                any(reads.plan(n, budget)) for n in range(at_least, at_least + 20_000, 97)
            )
        elif budget != float("inf") and all(rate >= 0 for _, rate in reads.lines):
            assert any(reads.plan(at_least, budget))
    falling = _cost.XlaReads()
    falling.lines = [(1.0, -1e-6), (1.0, -1e-6)]  # 1 s at no equation, less with more
    assert falling.may_read(10, budget_s=1e-3) and not any(falling.plan(10, budget_s=1e-3))
