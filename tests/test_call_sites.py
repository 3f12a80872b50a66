"""One differential program per JAX call site that starts a trace (issue 11).

JAX starts a trace from many places: `jit` (in `pjit.py`) and, for every transformation
and control-flow primitive, a direct call of `partial_eval.trace_to_jaxpr` — with
different calling conventions (`debug_info` positional or keyword, extra flags). An
observer that got one convention wrong broke grad-through-pmap, remat-of-scan, checkify
of `while_loop` and `jit(grad(shard_map))`. So this module keeps, for each call site in
the inventory of the installed JAX (`tests/jax_inventory_data.py`), a small program
that reaches it through public APIs only, and checks three things:

* **reach** — a test-only `sys.setprofile` probe, active for one run of one program,
  sees the call of `trace_to_jaxpr` / `trace_to_jaxpr_nocache` / `_create_pjit_jaxpr`
  and maps the calling frame (`frame.f_back`: file and line) to its inventory site.
  Every site a program is written for must be seen.
* **same with and without recording** — the program runs with jaxtrace_nb stopped, then
  under `jt.start()`: every step's outputs bit for bit, exceptions (type, message with
  addresses masked), warnings, body runs, cache sizes, and the stack depth inside the
  traced user functions (`len(inspect.stack())` relative to the program, as JAX's
  `TracebackTest` counts it) must be identical; the traceback of each expected error
  must name the same frames; and each jitted body a program registers (`r.jit`) must be
  recorded once per run, so that a probe that silently records nothing cannot pass.
* **coverage** — a parametrized test over the inventory fails for every call site of the
  installed JAX that has no program, unless it is in `UNREACHABLE` with its reason.

Programs name their sites as ``"file::function#index"`` (the inventory key without
line numbers); sites of other JAX versions may be listed too and are ignored where
the installed JAX lacks them. A program needing an API that the installed JAX lacks is
skipped with the missing API's name, and only then.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import pathlib
import sys
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support import error, inventory_tool, outcome, run_program, without_and_with_recording
from jax import lax
from jax_inventory_data import INVENTORY

import jaxtrace_nb as jt

JAX_ROOT = pathlib.Path(jax.__file__).resolve().parent.parent


def site_id(site: dict) -> str:
    return f"{site['file']}::{site['function']}#{site['index']}"


@functools.cache
def live_sites() -> tuple[dict, ...]:
    """The installed JAX's trace call sites, with the line span of each call."""
    tool = inventory_tool()
    return tuple(tool.extract(tool.read_tree(JAX_ROOT), lines=True)["trace_to_jaxpr"])


def inventory_sites() -> list[dict]:
    """The inventory's sites for the installed JAX (its own extraction if the version is
    missing: test_jax_inventory fails for that, and coverage is still checked here)."""
    entry = INVENTORY.get(jax.__version__)
    if entry is None:
        return [dict(s) for s in live_sites()]
    return [s for s in entry["trace_to_jaxpr"] if (JAX_ROOT / s["file"]).exists()]  # shipped


# --- The reach probe ---------------------------------------------------------------------

_TRACE_FUNCTIONS = {
    ("jax/_src/interpreters/partial_eval.py", "trace_to_jaxpr"),
    ("jax/_src/interpreters/partial_eval.py", "trace_to_jaxpr_nocache"),
    ("jax/_src/pjit.py", "_create_pjit_jaxpr"),
}
_CACHE_WRAPPER_FILES = {"jax/_src/linear_util.py", "jax/_src/util.py"}  # Python cache wrappers


@functools.cache
def _relative(filename: str) -> str:
    try:
        return pathlib.Path(filename).resolve().relative_to(JAX_ROOT).as_posix()
    except ValueError:
        return filename


def reached_sites(program_fn) -> tuple[set[str], list[str]]:
    """Run `program_fn` once under a profile hook; (site ids reached, unmapped callers)."""
    calls: list[tuple[str, int, str]] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        if (_relative(code.co_filename), code.co_name) not in _TRACE_FUNCTIONS:
            return
        caller = frame.f_back
        while caller is not None and _relative(caller.f_code.co_filename) in _CACHE_WRAPPER_FILES:
            caller = caller.f_back
        if caller is not None:
            calls.append(
                (_relative(caller.f_code.co_filename), caller.f_lineno, caller.f_code.co_name)
            )

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run_program(program_fn)
    finally:
        sys.setprofile(previous)
    reached, unmapped = set(), []
    for file, line, name in calls:
        match = [
            s for s in live_sites() if s["file"] == file and s["lines"][0] <= line <= s["lines"][1]
        ]
        if match:
            reached.add(site_id(match[0]))
        else:
            unmapped.append(f"{file}:{line} in {name}")
    return reached, unmapped


# --- Programs ------------------------------------------------------------------------------


class Program:
    def __init__(self, fn, sites, needs):
        self.fn, self.sites, self.needs = fn, tuple(sites), tuple(needs)

    def missing_api(self) -> str | None:
        """The first API in `needs` the installed JAX lacks, or None."""
        for dotted in self.needs:
            parts = dotted.split(".")
            for i in range(len(parts), 0, -1):  # the longest importable module prefix
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                    break
                except ImportError:
                    continue
            else:
                return dotted
            try:
                with warnings.catch_warnings():  # a deprecated API is still there
                    warnings.simplefilter("ignore")
                    for attr in parts[i:]:
                        obj = getattr(obj, attr)
            except AttributeError:
                return dotted
        return None


PROGRAMS: dict[str, Program] = {}


def program(*sites: str, needs: tuple[str, ...] = ()):
    """Register a program written to reach `sites`; `needs`: public APIs it uses that some
    JAX versions lack (module path + attribute, or a config flag as ``jax.config.jax_…``)."""

    def register(fn):
        PROGRAMS[fn.__name__] = Program(fn, sites, needs)
        return fn

    return register


def depth(r, label: str) -> None:
    """Note the stack depth here (inside a traced user function), relative to the program."""
    r.steps.append((f"depth in {label}", len(inspect.stack()) - r.base_depth))


def raising(r, label: str, thunk) -> None:
    """A step expected to raise: its outcome plus the frames of the traceback the user sees
    (JAX filters its own frames; an observer's frames would show)."""
    try:
        value = thunk()
    except Exception as e:  # noqa: BLE001 - the outcome is what we compare
        frames = tuple(
            (pathlib.Path(f.filename).name, f.name) for f in traceback.extract_tb(e.__traceback__)
        )
        r.steps.append((label, (*error(e), frames)))
    else:
        r.steps.append((label, ("did not raise", outcome(value))))


@functools.cache
def _mesh():
    """A 1-D mesh over all devices with an Auto axis (works with one CPU device)."""
    return jax.sharding.Mesh(np.array(jax.devices()), ("x",))


def _sharded(f):
    P = jax.sharding.PartitionSpec
    return jax.shard_map(f, mesh=_mesh(), in_specs=P("x"), out_specs=P("x"))


class _flag:
    """Set a JAX config flag for one program, restoring it after (nothing leaks)."""

    def __init__(self, name, value):
        self.name, self.value = name, value

    def __enter__(self):
        self.old = getattr(jax.config, self.name)
        jax.config.update(self.name, self.value)

    def __exit__(self, *exc):
        jax.config.update(self.name, self.old)


JIT = "jax/_src/pjit.py::_trace_for_jit#1"
PJIT = "jax/_src/pjit.py::_trace_for_jit#0"
JIT_08 = "jax/_src/pjit.py::_infer_params_impl#0"  # JAX 0.8.x: _create_pjit_jaxpr
CACHED_011 = "jax/_src/interpreters/partial_eval.py::trace_to_jaxpr#0"  # 0.11+: cached -> nocache
JIT_ANY = (JIT, JIT_08, CACHED_011)  # whichever the installed JAX has
CONDITIONALS = "jax/_src/lax/control_flow/conditionals.py"
LOOPS = "jax/_src/lax/control_flow/loops.py"
SOLVES = "jax/_src/lax/control_flow/solves.py"
CHECKIFY = "jax/_src/checkify.py"
SHARD_MAP = "jax/_src/shard_map.py"
REMAT = "jax/_src/ad_checkpoint.py"
PARTIAL_EVAL = "jax/_src/interpreters/partial_eval.py"
CUSTOM_DERIVATIVES = "jax/_src/custom_derivatives.py"
STATE = "jax/_src/state/discharge.py"
SPARSE = "jax/experimental/sparse/transform.py"
PALLAS = "jax/_src/pallas"

X = np.linspace(-1.0, 2.0, 6, dtype=np.float32)


@program(*JIT_ANY)
def jit_plain(r):
    @jax.jit
    def f(x, y):
        r.body("f")
        depth(r, "f")
        return jnp.sin(x) * y + 1

    r.jit("f", f)
    r.step("f32", lambda: f(X, 2.0))
    r.step("f32 again", lambda: f(X + 1, 3.0))
    r.step("int", lambda: f(jnp.arange(6), 2))

    @jax.jit
    def g(x, y):  # traces that raise: not registered, whether they are events is the probe's call
        r.body("g")
        if x.ndim > 1:
            raise ValueError(f"user error for {x.aval.str_short()}")
        return x * y

    raising(r, "shape error", lambda: g(X, jnp.ones(5)))
    raising(r, "user error", lambda: g(X.reshape(2, 3), 1.0))


@program(PJIT, needs=("jax.experimental.pjit.pjit",))
def pjit_resource_env(r):
    from jax.experimental import pjit as pjit_module

    def f(x):
        r.body("f")
        depth(r, "f")
        return x * 2

    g = r.jit("f", pjit_module.pjit(f))  # deprecated, but public: jit's use_resource_env branch
    r.step("pjit", lambda: g(X))


@program(*JIT_ANY, "jax/_src/pjit.py::_transpose_jaxpr_fancy#0")  # 0.11.1+: grad(jit)
def jit_nested_vmap_eval_shape_aot(r):
    def inner(x):
        r.body("inner")
        depth(r, "inner")
        return jnp.cos(x) ** 2

    outer = jax.jit(lambda x: jax.jit(inner)(x) + 1)
    r.step("nested", lambda: outer(X))
    r.step("vmap(jit)", lambda: jax.vmap(jax.jit(inner))(X.reshape(2, 3)))
    r.step("eval_shape", lambda: jax.eval_shape(jax.jit(inner), X).shape)
    r.step("aot", lambda: jax.jit(inner).lower(X).compile()(X))
    r.step("jvp(jit)", lambda: jax.jvp(jax.jit(inner), (X,), (X,)))
    r.step("grad(jit)", lambda: jax.grad(lambda x: jax.jit(inner)(x).sum())(X))


@program(*JIT_ANY, needs=("jax.export.export",))
def jit_export(r):
    def f(x):
        r.body("f")
        depth(r, "f")
        return jnp.tanh(x).sum()

    def roundtrip():
        exported = jax.export.export(jax.jit(f))(jax.ShapeDtypeStruct(X.shape, X.dtype))
        return jax.export.deserialize(exported.serialize()).call(X)

    r.step("export", roundtrip)


@program(*JIT_ANY, needs=("jax.pmap",))
def grad_vjp_through_pmap(r):
    def f(x):
        r.body("f")
        depth(r, "f")
        return jnp.sin(x) * x

    n = len(jax.devices())
    xs = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    pf = jax.pmap(f)
    r.step("pmap", lambda: pf(xs))
    r.step("grad(pmap)", lambda: jax.grad(lambda x: pf(x).sum())(xs))
    r.step("vjp(pmap)", lambda: jax.vjp(pf, xs)[1](jnp.ones_like(xs)))
    r.step("pmap(grad)", lambda: jax.pmap(jax.grad(lambda x: f(x).sum()))(xs))


@program(f"{CONDITIONALS}::cond#0", f"{CONDITIONALS}::cond#1")
def cond_branches(r):
    def true_fun(x):
        r.body("true")
        depth(r, "true branch")
        return jnp.sin(x)

    def false_fun(x):
        r.body("false")
        return jnp.cos(x)

    r.step("cond", lambda: lax.cond(X[0] > 0, true_fun, false_fun, X))
    r.step("jit(cond)", lambda: jax.jit(lambda x: lax.cond(x[0] > 0, true_fun, false_fun, x))(X))
    r.step("vmap(cond)", lambda: jax.vmap(lambda x: lax.cond(x > 0, true_fun, false_fun, x))(X))
    raising(r, "mismatched branches", lambda: lax.cond(X[0] > 0, true_fun, lambda x: x.sum(), X))


@program(f"{CONDITIONALS}::_switch_internal#0")
def switch_branches(r):
    def branch(k):
        def fn(x):
            r.body(f"branch{k}")
            depth(r, f"branch{k}")
            return x * k

        return fn

    r.step("switch", lambda: lax.switch(1, [branch(0), branch(1), branch(2)], X))
    r.step(
        "jit(switch)", lambda: jax.jit(lambda i, x: lax.switch(i, [branch(0), branch(1)], x))(1, X)
    )


@program(
    "jax/_src/lax/control_flow/common.py::_make_closed_jaxpr#0",
    f"{CONDITIONALS}::_transpose_jaxpr_fancy#0",
)
def grad_of_cond(r):
    def loss(x):
        r.body("loss")
        depth(r, "loss")
        return lax.cond(x[0] > 0, jnp.sin, jnp.cos, x).sum()

    r.step("grad(cond)", lambda: jax.grad(loss)(X))
    r.step("jit(grad(cond))", lambda: jax.jit(jax.grad(loss))(X))


@program(f"{LOOPS}::scan.<locals>._create_jaxpr#0")
def scan_under_transformations(r):
    def step(c, x):
        r.body("step")
        depth(r, "scan body")
        return c * 0.9 + x, jnp.sin(c)

    def run(xs):
        return lax.scan(step, 0.0, xs)

    r.step("scan", lambda: run(X))
    r.step("grad(scan)", lambda: jax.grad(lambda xs: run(xs)[0])(X))
    r.step("vmap(scan)", lambda: jax.vmap(run)(X.reshape(2, 3)))
    r.step("linearize(scan)", lambda: jax.linearize(lambda xs: run(xs)[1], X)[1](X))
    raising(r, "bad carry", lambda: lax.scan(lambda c, x: (c[None], x), 0.0, X))

    def failing_step(c, x):
        raise ValueError(f"user error at carry {c.aval.str_short()}")

    raising(
        r, "user error in body", lambda: jax.grad(lambda xs: lax.scan(failing_step, 0.0, xs)[0])(X)
    )


@program(f"{LOOPS}::scan_nocarry#0", needs=("jax.config.jax_scan3",))
def scan3_flag(r):
    def step(c, x):
        r.body("step")
        depth(r, "scan3 body")
        return c + x, c * x

    with _flag("jax_scan3", True):
        r.step("scan3", lambda: lax.scan(step, 0.0, X))


@program(
    f"{LOOPS}::while_loop.<locals>._create_jaxpr#0", f"{LOOPS}::while_loop.<locals>._create_jaxpr#1"
)
def while_and_fori(r):
    def cond(c):
        r.body("cond")
        depth(r, "while cond")
        return c[0] < 5

    def body(c):
        r.body("body")
        depth(r, "while body")
        return c[0] + 1, c[1] * 1.5

    r.step("while_loop", lambda: lax.while_loop(cond, body, (0, X)))
    r.step("fori_loop", lambda: lax.fori_loop(0, 4, lambda i, x: x + i, X))
    r.step("vmap(while)", lambda: jax.vmap(lambda x: lax.while_loop(cond, body, (0, x))[1])(X))


@program("jax/_src/interpreters/ad.py::_jvp_jaxpr#0")
def jvp_of_while(r):
    def body(c):
        r.body("body")
        depth(r, "jvp while body")
        return c[0] + 1, jnp.sin(c[1])

    def f(x):
        return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]

    r.step("jvp(while)", lambda: jax.jvp(f, (X,), (jnp.ones_like(X),)))


@program(
    f"{LOOPS}::_scan_state_partial_discharge_rule#0",
    f"{LOOPS}::_scan_state_discharge_rule#0",  # 0.11.1+: renamed
    f"{STATE}::_discharge_state#0",  # 0.11.1+: the rule discharges the body's refs
    needs=("jax.new_ref",),
)
def scan_with_a_ref(r):
    def f(xs):
        acc = jax.new_ref(jnp.zeros(()))

        def step(c, x):
            r.body("step")
            depth(r, "scan body with ref")
            acc[...] += x
            return c + x, x * 2

        c, ys = lax.scan(step, 0.0, xs)
        return c + acc[...], ys

    r.step("scan+ref", lambda: f(X))
    r.step("jit(scan+ref)", lambda: jax.jit(f)(X))


@program(
    f"{LOOPS}::_while_partial_discharge_rule#0",
    f"{LOOPS}::_while_partial_discharge_rule#1",
    f"{LOOPS}::_while_discharge_rule#0",  # 0.11.1+: renamed
    f"{LOOPS}::_while_discharge_rule#1",
    needs=("jax.new_ref",),
)
def while_with_a_ref(r):
    def f(x):
        acc = jax.new_ref(jnp.zeros(()))

        def body(c):
            r.body("body")
            acc[...] += c[1]
            return c[0] + 1, c[1] * 2

        def cond(c):
            return c[0] < acc[...] + 3

        i, y = lax.while_loop(cond, body, (0, x.sum()))
        return y + acc[...]

    r.step("jit(while+ref)", lambda: jax.jit(f)(X))


@program(
    f"{LOOPS}::_scan_partial_eval_custom#0",
    f"{REMAT}::_trace_to_jaxpr#0",
    f"{REMAT}::_transpose_jaxpr#0",
    f"{PARTIAL_EVAL}::_partial_eval_jaxpr_nounits#0",  # 0.11.1+: hoisting in the scan's rule
)
def remat_of_scan(r):
    def step(c, x):
        r.body("step")
        depth(r, "remat scan body")
        return jnp.sin(c) * x, c

    def loss(xs):
        return lax.scan(step, 1.0, xs)[0]

    for name in ("nothing_saveable", "dots_saveable", "everything_saveable"):
        policy = getattr(jax.checkpoint_policies, name)
        r.step(
            f"grad(checkpoint(scan), {name})",
            lambda policy=policy: jax.grad(jax.checkpoint(loss, policy=policy))(X),
        )
    r.step(
        "scan(checkpoint(body))",
        lambda: jax.grad(lambda xs: lax.scan(jax.checkpoint(step), 1.0, xs)[0])(X),
    )


@program(
    f"{REMAT}::_remat3#0",
    f"{REMAT}::_remat3.<locals>.decorator#0",  # 0.11.1+: traced inside the decorator
    needs=("jax.config.jax_remat3",),
)
def remat3_flag(r):
    def f(x):
        r.body("f")
        depth(r, "remat3 body")
        return jnp.sin(x).sum()

    with _flag("jax_remat3", True):
        r.step("grad(checkpoint)", lambda: jax.grad(jax.checkpoint(f))(X))


@program(
    f"{CHECKIFY}::checkify.<locals>.checked_fun#0",
    f"{CHECKIFY}::checkify_while_body_jaxpr#0",
    f"{CHECKIFY}::jaxpr_to_checkify_jaxpr#0",
    needs=("jax.experimental.checkify.checkify",),
)
def checkify_of_while_loop(r):
    from jax.experimental import checkify

    def f(x):
        r.body("f")
        depth(r, "checkified f")
        checkify.check(jnp.all(x > -5), "x too small")
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] / c[0]), (0, x))[1]

    checked = checkify.checkify(f, errors=checkify.all_checks)
    r.step("ok", lambda: checked(X)[1])
    r.step("error text", lambda: checked(X)[0].get())
    r.step("failing check", lambda: checked(X - 10)[0].get())
    raising(r, "throw", lambda: checked(X - 10)[0].throw())


@program(
    f"{CHECKIFY}::shard_map_error_check#0",
    f"{SHARD_MAP}::_shard_map_staging#0",
    needs=("jax.shard_map", "jax.experimental.checkify.checkify"),
)
def checkify_of_shard_map(r):
    from jax.experimental import checkify

    def f(x):
        r.body("f")
        checkify.check(jnp.all(x < 100), "too big")
        return x * 2

    r.step("checkify(shard_map)", lambda: checkify.checkify(_sharded(f))(X)[1])


@program(
    f"{SHARD_MAP}::_shard_map_staging#0",
    f"{SHARD_MAP}::_promote_scalar_residuals_jaxpr#0",
    needs=("jax.shard_map",),
)
def jit_grad_shard_map(r):
    def f(x):
        r.body("f")
        depth(r, "shard_map body")
        return jnp.sin(jnp.sin(x.sum())) * x

    r.step("shard_map", lambda: _sharded(f)(X))
    r.step("jit(grad(shard_map))", lambda: jax.jit(jax.grad(lambda x: _sharded(f)(x).sum()))(X))
    r.step("vjp(shard_map)", lambda: jax.vjp(_sharded(f), X)[1](X))


@program(f"{SHARD_MAP}::_add_reshapes#0", f"{SHARD_MAP}::_add_reshapes#1", needs=("jax.shard_map",))
def remat_of_shard_map(r):
    def f(x):
        r.body("f")
        return jnp.sin(jnp.sin(x.sum())) * x

    policy = jax.checkpoint_policies.everything_saveable
    r.step(
        "grad(checkpoint(shard_map))",
        lambda: jax.grad(lambda x: jax.checkpoint(_sharded(f), policy=policy)(x).sum())(X),
    )


@program(f"{SOLVES}::custom_root#0", f"{SOLVES}::custom_root#1", f"{SOLVES}::custom_root#2")
def custom_root_under_grad(r):
    def solve(g, y0):
        r.body("solve")
        depth(r, "custom_root solve")
        return y0 - g(y0) / 2

    def sqrt(a):
        return lax.custom_root(lambda y: y**2 - a, 1.0, solve, lambda g, y: y / 2)

    r.step("root", lambda: sqrt(2.0))
    r.step("grad(root)", lambda: jax.grad(sqrt)(2.0))


@program(
    f"{SOLVES}::custom_linear_solve#0",
    f"{SOLVES}::custom_linear_solve#1",
    f"{SOLVES}::custom_linear_solve#2",
    f"{SOLVES}::custom_linear_solve#3",
)
def custom_linear_solve_under_grad(r):
    a = np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)
    b = np.array([1.0, 2.0], np.float32)

    def matvec(v):
        r.body("matvec")
        depth(r, "matvec")
        return a @ v

    def solve(mv, rhs):
        return jnp.linalg.solve(a, rhs)

    def transpose_solve(vm, rhs):
        return jnp.linalg.solve(a.T, rhs)

    r.step("solve", lambda: lax.custom_linear_solve(matvec, b, solve, transpose_solve))
    r.step(
        "grad(solve)",
        lambda: jax.grad(
            lambda b: lax.custom_linear_solve(matvec, b, solve, transpose_solve).sum()
        )(b),
    )
    r.step(
        "grad(symmetric)",
        lambda: jax.grad(lambda b: lax.custom_linear_solve(matvec, b, solve, symmetric=True).sum())(
            b
        ),
    )


@program("jax/_src/lax/lax.py::_variadic_reduction_jaxpr#0")
def reductions_with_custom_computations(r):
    def add(a, b):
        r.body("add")
        depth(r, "reducer")
        return a + b

    def argmax(a, b):
        pick = a[0] >= b[0]
        return jnp.where(pick, a[0], b[0]), jnp.where(pick, a[1], b[1])

    r.step("reduce", lambda: lax.reduce(X, np.float32(0), add, (0,)))
    r.step(
        "variadic reduce",
        lambda: lax.reduce((X, jnp.arange(6)), (np.float32(-np.inf), 0), argmax, (0,)),
    )


@program("jax/_src/lax/lax.py::_reduction_jaxpr#0")
def scatter_apply(r):
    def fn(v):
        r.body("fn")
        depth(r, "scatter apply fn")
        return jnp.sin(v)

    r.step(".at[].apply", lambda: jnp.asarray(X).at[2].apply(fn))
    r.step(".at[].add", lambda: jnp.asarray(X).at[1:3].add(5.0))


@program("jax/_src/lax/lax.py::_trace_composite_to_jaxpr#0", needs=("jax.lax.composite",))
def composite(r):
    def double(x):
        r.body("double")
        depth(r, "composite body")
        return x * 2

    r.step("composite", lambda: lax.composite(double, name="jaxtrace.double")(X))
    r.step("jit(composite)", lambda: jax.jit(lax.composite(double, name="jaxtrace.double"))(X))


@program(*JIT_ANY)
def associative_scan_and_custom_derivatives(r):
    @jax.custom_jvp
    def softplus(x):
        r.body("softplus")
        depth(r, "custom_jvp")
        return jnp.log1p(jnp.exp(x))

    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * jax.nn.sigmoid(p[0])))

    @jax.custom_vjp
    def clip_grad(x):
        return x

    clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))

    r.step("associative_scan", lambda: lax.associative_scan(jnp.add, X))
    r.step("jit(grad(custom_jvp))", lambda: jax.jit(jax.grad(lambda x: softplus(x).sum()))(X))
    r.step("grad(custom_vjp)", lambda: jax.grad(lambda x: (clip_grad(x) * 10).sum())(X))
    r.step("linearize", lambda: jax.linearize(lambda x: softplus(x) * 2, X)[1](X))


@program(
    "jax/experimental/scheduling_groups.py::_xla_metadata_call.<locals>.wrapped#0",
    "jax/_src/xla_metadata.py::_xla_metadata_call.<locals>.wrapped#0",
    "jax/_src/xla_metadata.py::_transpose_jaxpr#0",  # 0.11.1+: grad transposes the call
    needs=("jax.experimental.scheduling_groups.xla_metadata_call",),
)
def xla_metadata_call(r):
    from jax.experimental import scheduling_groups

    def f(x):
        r.body("f")
        depth(r, "xla_metadata_call body")
        return x * 2

    r.step("xla_metadata_call", lambda: scheduling_groups.xla_metadata_call(f, tag="t")(X))
    r.step("jit(scheduling_group)", lambda: jax.jit(scheduling_groups.scheduling_group("g")(f))(X))
    tagged = scheduling_groups.xla_metadata_call(f, tag="t")
    r.step("grad(xla_metadata_call)", lambda: jax.grad(lambda x: tagged(x).sum())(X))


@program(f"{CUSTOM_DERIVATIVES}::custom_gradient.<locals>.fwd#0")
def custom_gradient_under_grad(r):
    @jax.custom_gradient
    def clipped_sin(x):
        r.body("clipped_sin")
        depth(r, "custom_gradient")

        def rule(g):
            r.body("rule")
            return (jnp.clip(g * jnp.cos(x), -0.5, 0.5),)

        return jnp.sin(x), rule

    r.step("custom_gradient", lambda: clipped_sin(X))
    r.step("grad(custom_gradient)", lambda: jax.grad(lambda x: clipped_sin(x).sum())(X))
    r.step("jit(grad(custom_gradient))", lambda: jax.jit(jax.grad(lambda x: clipped_sin(x)[0]))(X))


@program(f"{CUSTOM_DERIVATIVES}::_closure_convert_for_avals#0")
def closure_convert_of_a_closure(r):
    def converted_call(a):
        def g(x):
            r.body("g")
            depth(r, "closure-converted g")
            return jnp.sin(x) * a

        converted, hoisted = jax.closure_convert(g, X)
        return converted(X, *hoisted).sum()

    r.step("closure_convert", lambda: converted_call(2.0))
    r.step("grad(closure_convert)", lambda: jax.grad(converted_call)(2.0))


@program(
    f"{CUSTOM_DERIVATIVES}::linear_call#0",
    f"{CUSTOM_DERIVATIVES}::linear_call.<locals>.transpose_thunk#0",
    needs=("jax.custom_derivatives.linear_call",),
)
def linear_call_transposed(r):
    from jax.custom_derivatives import linear_call

    def scaled(scale, x):
        r.body("scaled")
        depth(r, "linear_call fun")
        return scale * x

    def scaled_transpose(scale, ct):
        r.body("scaled_transpose")
        depth(r, "linear_call transpose")
        return scale * ct

    def f(x):
        return linear_call(scaled, scaled_transpose, 3.0, x)

    r.step("linear_call", lambda: f(X))
    r.step("grad(linear_call)", lambda: jax.grad(lambda x: f(x).sum())(X))
    r.step("linear_transpose", lambda: jax.linear_transpose(f, X)(X))


@program("jax/_src/custom_batching.py::custom_vmap.__call__#0")
def custom_vmap_rule(r):
    @jax.custom_batching.custom_vmap
    def f(x):
        r.body("f")
        depth(r, "custom_vmap")
        return jnp.sin(x)

    @f.def_vmap
    def rule(axis_size, in_batched, xs):
        r.body("rule")
        return jnp.cos(xs), in_batched[0]

    r.step("custom_vmap", lambda: f(X))
    r.step("vmap(custom_vmap)", lambda: jax.vmap(f)(X))
    r.step("jit(vmap(custom_vmap))", lambda: jax.jit(jax.vmap(f))(X.reshape(2, 3)))


@program(
    "jax/_src/custom_partitioning.py::custom_partitioning.__call__#0",
    needs=("jax.experimental.custom_partitioning.custom_partitioning",),
)
def custom_partitioning_under_jit(r):
    from jax.experimental.custom_partitioning import custom_partitioning

    @custom_partitioning
    def double(x):
        r.body("double")
        depth(r, "custom_partitioning")
        return x * 2

    def partition(mesh, arg_shapes, result_shape):
        shardings = arg_shapes[0].sharding
        return mesh, lambda x: x * 2, shardings, (shardings,)

    double.def_partition(partition=partition, sharding_rule="i -> i")
    r.step("custom_partitioning", lambda: double(X))
    r.step("jit(custom_partitioning)", lambda: jax.jit(double)(X))


@program("jax/_src/interpreters/mlir.py::lower_fun.<locals>.f_lowered#0")
def lowering_rules_written_in_jax(r):
    def f(x):
        r.body("f")
        depth(r, "f")
        return jnp.sort(x) + x**5  # sort's comparator and integer_pow(y=5) lower via lower_fun

    r.step("jit(sort, x**5)", lambda: jax.jit(f)(X))
    r.step("lower", lambda: jax.jit(f).lower(X).as_text().count("sort"))


@program("jax/_src/lax/eval_jaxpr.py::_transpose_jaxpr#0", needs=("jax.stages.Traced",))
def calling_a_traced_stage(r):
    def f(x):
        r.body("f")
        depth(r, "traced f")
        return jnp.sin(x) * x

    traced = jax.jit(f).trace(X)
    r.step("traced(x)", lambda: traced(X))
    r.step("grad(traced)", lambda: jax.grad(lambda x: traced(x).sum())(X))


@program(
    "jax/_src/compute_on.py::_compute_on.<locals>.wrapped#0",
    "jax/_src/compute_on.py::_transpose_jaxpr#0",
    needs=("jax.experimental.compute_on",),
)
def compute_on_a_function(r):
    from jax.experimental import compute_on as module

    # JAX 0.10-0.11.0 name the function form compute_on2 (compute_on is a context manager there);
    # JAX 0.8-0.9 export only the context manager, which the program then runs under.
    compute_on = getattr(module, "compute_on2", module.compute_on)
    function_form = "f" in inspect.signature(compute_on).parameters

    def f(x):
        r.body("f")
        depth(r, "compute_on body")
        return jnp.sin(x) * 2

    if not function_form:
        jitted = jax.jit(f)
        with compute_on("device_host"):
            r.step("jit under compute_on", lambda: jitted(X))
            r.step("grad under compute_on", lambda: jax.grad(lambda x: jitted(x).sum())(X))
        return
    on_device = compute_on(f, compute_type="device", out_memory_spaces=jax.memory.Space.Device)
    r.step("compute_on", lambda: on_device(X))
    r.step("jit(compute_on)", lambda: jax.jit(on_device)(X))
    r.step("grad(compute_on)", lambda: jax.grad(lambda x: on_device(x).sum())(X))


@program(
    "jax/experimental/fused.py::fused.<locals>.wrap.<locals>.wrapped#0",
    "jax/experimental/fused.py::_transpose_jaxpr#0",
    needs=("jax.experimental.fused.fused",),
)
def fused_traced(r):
    from jax.experimental.fused import fused

    @fused(out_spaces=(jax.memory.Space.Device,))
    def f(x):
        r.body("f")
        depth(r, "fused body")
        return (jnp.sin(x) * 2,)

    # fused_p lowers on CUDA only: on CPU the program traces (which is where the sites are).
    grad_f = jax.jit(jax.grad(lambda x: f(x)[0].sum()))
    r.step("trace(fused)", lambda: jax.jit(f).trace(X).jaxpr.out_avals[0].str_short())
    r.step("trace(grad(fused))", lambda: grad_f.trace(X).jaxpr.out_avals[0].str_short())


@program(
    f"{SPARSE}::sparsify_raw.<locals>.wrapped#0",
    f"{SPARSE}::_sparsify_jaxpr#0",
    needs=("jax.experimental.sparse.sparsify",),
)
def sparsify_a_function(r):
    from jax.experimental import sparse

    m = sparse.BCOO.fromdense(np.array([[0, 1, 0], [2, 0, 3]], np.float32))

    @sparse.sparsify
    def f(m, v):
        r.body("f")
        depth(r, "sparsified f")
        return jax.jit(lambda a, b: a @ b)(m, v) * 2  # the inner jit: a pjit eqn to sparsify

    r.step("sparsify", lambda: f(m, X[:3]))
    r.step("jit(sparsify)", lambda: jax.jit(f)(m, X[:3]))


@program(
    f"{PARTIAL_EVAL}::abstract_eval_fun#0",
    needs=("jax.experimental.sparse.bcoo_dot_general_sampled",),
)
def sampled_sparse_product(r):
    from jax.experimental import sparse

    indices = sparse.BCOO.fromdense(np.eye(2, dtype=np.float32)).indices
    a, b = X.reshape(2, 3), X.reshape(3, 2)
    numbers = (((1,), (0,)), ((), ()))

    def sampled(a, b):  # its abstract evaluation (under jit, not eagerly) traces twice
        r.body("sampled")
        depth(r, "sampled product")
        return sparse.bcoo_dot_general_sampled(a, b, indices, dimension_numbers=numbers)

    r.step("bcoo_dot_general_sampled", lambda: sampled(a, b))
    r.step("jit(bcoo_dot_general_sampled)", lambda: jax.jit(sampled)(a, b))


@program(
    f"{STATE}::_initial_style_jaxpr#0",
    "jax/_src/state/utils.py::hoist_consts_to_refs#0",
    f"{STATE}::_discharge_state#0",
    needs=("jax.experimental.pallas.run_state",),
)
def run_state_with_a_captured_array(r):
    from jax.experimental import pallas as pl

    weights = jnp.arange(6.0)  # captured: a const of the body, hoisted into a ref

    def body(refs):
        r.body("body")
        depth(r, "run_state body")
        x_ref, y_ref = refs
        y_ref[...] = jnp.sin(x_ref[...]) * weights

    run = pl.run_state(body)
    r.step("run_state", lambda: run((X, jnp.zeros_like(X))))
    r.step("jit(run_state)", lambda: jax.jit(run)((X, jnp.zeros_like(X))))


@program(
    f"{PALLAS}/pallas_call.py::_trace_kernel_to_jaxpr#0",
    f"{PALLAS}/core.py::BlockSpec.to_block_mapping#0",
    f"{PALLAS}/pallas_call.py::_batch_block_mapping#0",
    f"{PALLAS}/hlo_interpreter.py::resolve_physical_types#0",
    f"{PALLAS}/primitives.py::run_scoped#0",
    f"{PALLAS}/cost_estimate.py::estimate_cost#0",
    f"{PALLAS}/pallas_call.py::_pallas_call_state_discharge_rule#0",
    needs=(
        "jax.experimental.pallas.pallas_call",
        "jax.experimental.pallas.run_scoped",
        "jax.new_ref",
    ),
)
def pallas_kernel_interpreted(r):
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        r.body("kernel")
        depth(r, "pallas kernel")

        def scoped(tmp_ref):
            tmp_ref[...] = jnp.sin(x_ref[...])
            o_ref[...] = tmp_ref[...] * 2

        pl.run_scoped(scoped, pl.ANY((3,), jnp.float32))

    block = pl.BlockSpec((3,), lambda i: (i,))
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(X.shape, X.dtype),
        grid=(2,),
        in_specs=[block],
        out_specs=block,
        interpret=True,  # the HLO interpreter: the tests run on CPU
    )
    r.step("pallas_call", lambda: call(X))
    r.step("jit(pallas_call)", lambda: jax.jit(call)(X + 1))
    r.step("vmap(pallas_call)", lambda: jax.vmap(call)(np.stack([X, X * 2])))
    r.step("estimate_cost", lambda: str(pl.estimate_cost(lambda x: jnp.sin(x) @ x, X)))

    def closing_over_a_ref(x):
        seen = jax.new_ref(jnp.zeros_like(x))

        def kernel(x_ref, o_ref):  # the ref is a const of the kernel: discharged under jit
            r.body("kernel with ref")
            seen[...] = x_ref[...] + 1
            o_ref[...] = x_ref[...] * 2

        out_shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.pallas_call(kernel, out_shape=out_shape, interpret=True)(x) + seen[...]

    r.step("jit(pallas_call with a ref)", lambda: jax.jit(closing_over_a_ref)(X))


@program(
    f"{PALLAS}/fuser/fusible.py::fusible.<locals>.decorator.<locals>.wrapper#0",
    f"{PALLAS}/fuser/jaxpr_fusion.py::fuse.<locals>.decorator.<locals>.wrapper#0",
    f"{PALLAS}/fuser/fusible_dtype.py::physicalize.<locals>.wrapper#0",
    f"{PALLAS}/fuser/fusible_dtype.py::physicalize_closed_jaxpr#0",
    f"{PALLAS}/fuser/custom_fusion_lib.py::custom_fusion.__call__#0",
    f"{PALLAS}/fuser/custom_fusion_lib.py::custom_fusion.__call__#1",
    f"{PALLAS}/fuser/fuser_utils.py::make_jaxpr#0",
    f"{PALLAS}/cost_estimate.py::_call_hi_primitive_cost_rule#0",  # a fusible: a hi primitive
    f"{PALLAS}/fuser/fusible_dtype.py::physicalize_jaxpr#0",  # the physicalize rule of run_state
    needs=(
        "jax.experimental.pallas.fuser.fuse",
        "jax.experimental.pallas.fuser.custom_fusion",
        "jax.experimental.pallas.run_state",
    ),
)
def pallas_fuser(r):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import fuser

    @fuser.fusible
    def doubled(x_fn, out_fn):
        r.body("doubled")
        depth(r, "fusible body")
        x = x_fn() * 2
        return x if out_fn is None else out_fn(x)

    @fuser.custom_fusion
    def shifted(x):
        r.body("shifted")
        return x + 1

    shifted.def_pull_block_spec(lambda specs: (specs[0],))
    shifted.def_push_block_spec(lambda specs: (specs[0],))
    shifted.def_eval_rule(lambda _, x: (shifted(x),))
    shifted.def_pallas_impl(lambda x: x + 1)

    def sin_of_doubled(x):
        return jnp.sin(doubled(x))

    r.step("fuse", lambda: fuser.fuse(sin_of_doubled)(X))
    r.step("jit(fuse)", lambda: jax.jit(fuser.fuse(lambda x: doubled(shifted(x))))(X))
    r.step("evaluate", lambda: fuser.evaluate(lambda x: jnp.sin(x) * 2)(X))
    r.step("estimate_cost", lambda: str(pl.estimate_cost(sin_of_doubled, X)))

    def sine_into(refs):
        x_ref, y_ref = refs
        y_ref[...] = jnp.sin(x_ref[...])

    def doubled_sine(x):
        return doubled(pl.run_state(sine_into)((x, jnp.zeros_like(x)))[1])

    r.step("fuse(run_state)", lambda: fuser.fuse(doubled_sine)(X))


@program(
    f"{PALLAS}/core.py::core_map.<locals>.wrapped#0",
    f"{PALLAS}/mpmd.py::_mpmd_map.<locals>.wrapper#0",
    f"{PALLAS}/mpmd.py::_dedup_consts_and_unify_jaxpr_signatures#0",
    f"{PALLAS}/mpmd.py::_mpmd_map_discharge_rule.<locals>._rewrite_to_include_new_outputs#0",
    needs=(
        "jax.experimental.pallas.kernel",
        "jax.experimental.pallas.core_map",
        "jax.experimental.pallas.mosaic_gpu.Mesh",
        "jax.new_ref",
    ),
)
def pallas_kernels_on_a_mesh(r):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu

    mesh = plgpu.Mesh(grid=(2,), grid_names=("x",))  # a mesh object: no GPU needed to interpret

    def with_kernel(x):
        seen = jax.new_ref(jnp.zeros_like(x))

        def body(x_ref, o_ref):  # closes over a ref: a const of the kernel
            r.body("body")
            depth(r, "kernel body")
            seen[...] = x_ref[...] + 1
            o_ref[...] = x_ref[...] * 2

        out_type = jax.ShapeDtypeStruct(x.shape, x.dtype)
        return pl.kernel(body, out_type=out_type, mesh=mesh, interpret=True)(x) + seen[...]

    def with_core_map(x):
        x_ref = jax.new_ref(x)

        @pl.core_map(mesh, interpret=True)
        def _():
            r.body("core_map body")
            x_ref[...] = x_ref[...] * 3

        return x_ref[...]

    r.step("kernel", lambda: with_kernel(X))
    r.step("jit(kernel)", lambda: jax.jit(with_kernel)(X))
    r.step("jit(core_map)", lambda: jax.jit(with_core_map)(X))


_TPU_ONLY = "a TPU kernel (Mosaic): the tests run on CPU"
_GPU_ONLY = "a GPU kernel (Mosaic GPU): the tests run on CPU"
_TRITON = "lowering of a Pallas kernel for Triton (a GPU): the tests run on CPU"

#: Call sites no public API reaches, each with its reason (keep this short and honest). Sites in
#: the TPU and GPU backends of Pallas (`BACKENDS`) are reached only on those devices.
UNREACHABLE = {
    f"{REMAT}::custom_remat.<locals>.call#0": "jax._src.ad_checkpoint.custom_remat is exported "
    "nowhere (no public API calls it)",
    f"{PARTIAL_EVAL}::lower_jaxpr_reference#0": "a reference implementation of lower_jaxpr for "
    "JAX's own debugging, used only once swapped in by hand (pe.lower_jaxpr = ...)",
    "jax/experimental/key_reuse/_core.py::function_type_signature#0": "called only by "
    "check_key_reuse in the private module key_reuse._core (jax.experimental.key_reuse exports "
    "nothing; jax_debug_key_reuse checks a jit's jaxpr with check_key_reuse_jaxpr instead)",
    f"{PALLAS}/pipelining/schedule_api.py::trace_fun#0": "JAX 0.11.0 only: no module imports "
    "jax._src.pallas.pipelining (no public API)",
    f"{PALLAS}/mosaic/core.py::pass_scalars_as_refs#0": "the discharge rule of a core_map over a "
    "TPU TensorCore/SparseCore mesh (pltpu.create_tensorcore_mesh needs a TPU device): "
    + _TPU_ONLY,
    f"{PALLAS}/mosaic/lowering.py::lower_fun.<locals>.f_lowered#0": "Mosaic lowering rules: "
    + _TPU_ONLY,
    f"{PALLAS}/mosaic/pallas_call_registration.py::_rewrite_jaxpr_for_lowering#0": "the TPU "
    "lowering of mpmd_map (mpmd_map_tpu_lowering_rule): " + _TPU_ONLY,
    f"{PALLAS}/mosaic/pipeline.py::emit_pipeline.<locals>.wrapped#0": "pltpu.emit_pipeline "
    "(on CPU, even in TPU interpret mode: 'Unsupported TPU device kind: cpu'): " + _TPU_ONLY,
    f"{PALLAS}/mosaic/pipeline.py::_emit_pipeline_lowering_rule#0": "lowering of "
    "pltpu.emit_pipeline: " + _TPU_ONLY,
    f"{PALLAS}/mosaic/sc_primitives.py::parallel_loop.<locals>.decorator#0": "plsc.parallel_loop "
    "inside a SparseCore kernel: " + _TPU_ONLY,
    f"{PALLAS}/mosaic_gpu/lowering.py::_lower_fn_with_avals.<locals>.inner#0": "Mosaic GPU "
    "lowering of a ref transform: " + _GPU_ONLY,
    f"{PALLAS}/mosaic_gpu/lowering.py::_lower_fun.<locals>.f_lowered#0": "Mosaic GPU lowering "
    "rules: " + _GPU_ONLY,
    f"{PALLAS}/mosaic_gpu/lowering.py::lower_pipelined_jaxpr_to_module#0": "the Mosaic GPU "
    "lowering of a pallas_call: " + _GPU_ONLY,
    f"{PALLAS}/mosaic_gpu/pipeline.py::_uses_arguments#0": "_is_index_invariant in "
    "plgpu.emit_pipeline_warp_specialized, inside a Mosaic GPU kernel: " + _GPU_ONLY,
    f"{PALLAS}/triton/lowering.py::lower_fun.<locals>.f_lowered#0": _TRITON,
    f"{PALLAS}/triton/lowering.py::_reduction_lowering#0": _TRITON,
    f"{PALLAS}/triton/lowering.py::_associative_scan_lowering#0": _TRITON,
}
BACKENDS = tuple(f"{PALLAS}/{backend}/" for backend in ("mosaic", "mosaic_gpu", "triton"))


# --- Tests ---------------------------------------------------------------------------------


def _skip_if_missing(prog: Program) -> None:
    missing = prog.missing_api()
    if missing:
        pytest.skip(f"needs {missing}, which JAX {jax.__version__} lacks")


def _with_base_depth(fn):
    def run(r):
        r.base_depth = len(inspect.stack())
        fn(r)

    return run


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_reaches_its_call_sites(name):
    prog = PROGRAMS[name]
    _skip_if_missing(prog)
    installed = {site_id(s) for s in live_sites()}
    targets = set(prog.sites) & installed
    if not targets:
        pytest.skip(f"none of {sorted(prog.sites)} exists in JAX {jax.__version__}")
    reached, unmapped = reached_sites(_with_base_depth(prog.fn))
    assert not unmapped, f"trace calls from sites missing in the extraction: {unmapped}"
    assert targets <= reached, (
        f"{name} did not reach {sorted(targets - reached)}; it reached {sorted(reached)}"
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_is_the_same_with_recording(name):
    prog = PROGRAMS[name]
    _skip_if_missing(prog)
    faults_before = jt.faults()
    (without, _), (with_, r), events = without_and_with_recording(
        lambda: run_program(_with_base_depth(prog.fn))
    )
    (steps_without, warned_without, bodies_without, caches_without) = without
    (steps_with, warned_with, bodies_with, caches_with) = with_
    assert [label for label, _ in steps_with] == [label for label, _ in steps_without]
    differing = [
        f"{label!r}: without recording {a!r:.300}, with {b!r:.300}"
        for (label, a), (_, b) in zip(steps_without, steps_with)
        if a != b
    ]
    assert not differing, f"{len(differing)} step(s) differ:\n" + "\n".join(differing)
    assert warned_with == warned_without
    assert bodies_with == bodies_without
    assert caches_with == caches_without
    assert jt.faults() == faults_before
    traces = events[(events["kind"] == "trace") & ~events["nested"]]
    for fn_name in r.jitted:  # recording is on: each run of a registered jit body is one trace
        recorded = traces[traces["function"].str.split(".").str[-1] == fn_name]
        assert len(recorded) == r.bodies.get(fn_name, 0), (fn_name, recorded[["function", "cause"]])
    # Each trace a one-line lambda step started is called from that lambda's line (read from its
    # source).
    checked = [
        (label, line, row.function, row.call_site)
        for label, line, seqs in r.calls
        if line is not None
        for row in traces[traces["seq"].isin(seqs)].itertuples()
    ]
    assert not [c for c in checked if c[3] != c[1]], checked
    assert len(checked) >= sum(
        r.bodies.get(name, 0) for name in r.jitted
    )  # a registered jit's traces are checked


@pytest.mark.parametrize("site", [site_id(s) for s in inventory_sites()])
def test_every_call_site_has_a_program(site):
    programs = [n for n, p in PROGRAMS.items() if site in p.sites]
    assert programs or site in UNREACHABLE, (
        f"no program reaches {site} (JAX {jax.__version__}): add one to tests/test_call_sites.py "
        f"with @program({site!r}), or list it in UNREACHABLE with the reason"
    )


def test_unreachable_sites_are_real_few_and_unclaimed():
    known = {site_id(s) for entry in INVENTORY.values() for s in entry["trace_to_jaxpr"]}
    assert set(UNREACHABLE) <= known, "UNREACHABLE names a site no inventoried JAX has"
    claimed = {s for p in PROGRAMS.values() for s in p.sites}
    assert not set(UNREACHABLE) & claimed, "a site with a program is not unreachable"
    # A Pallas backend's lowering and kernel APIs need its device (a TPU or a GPU): the suite runs
    # on CPU, so those sites are counted apart; every other entry needs an accepted reason.
    others = [site for site in UNREACHABLE if not site.startswith(BACKENDS)]
    assert len(others) <= 4, "keep this list short: each entry needs an accepted reason"


# --- Stack depth, as JAX's TracebackTest counts it ----------------------------------------


def _depths(make):
    """len(inspect.stack()) inside the traced function, relative to the caller, per run."""
    seen = []

    def body(x):
        seen.append(len(inspect.stack()) - base)
        return x * 2

    base = len(inspect.stack())
    make(body)(jnp.ones(3))
    return seen


def _filter_jit(body):
    import equinox as eqx

    return eqx.filter_jit(body)


DEPTH_CASES = {
    "jit": jax.jit,
    "grad": lambda body: jax.grad(lambda x: body(x).sum()),
    "vmap": jax.vmap,
    "scan": lambda body: lambda xs: lax.scan(lambda c, x: (c, body(x)), 0.0, xs)[1],
    "eqx.filter_jit": _filter_jit,
    "jit(grad(scan))": lambda body: jax.jit(
        jax.grad(lambda xs: lax.scan(lambda c, x: (c + body(x), None), 0.0, xs)[0])
    ),
}


@pytest.mark.parametrize("case", sorted(DEPTH_CASES))
def test_stack_depth_inside_a_trace_is_unchanged_by_recording(case):
    make = DEPTH_CASES[case]
    without, with_, _ = without_and_with_recording(lambda: _depths(make))
    assert without and with_ == without, (without, with_)
