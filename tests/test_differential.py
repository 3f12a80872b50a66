"""Same results with and without recording (issue 5, item 1).

Each program of the corpus builds fresh function objects and runs a few steps. It runs
twice, first with jaxtrace_nb never started, then under ``jt.start()``; the two
outcomes must be identical: every step's outputs bit for bit (dtype, shape, bytes),
every raised exception's type and message (object addresses masked), every warning,
how many times each traced Python body ran, and each jitted function's
``_cache_size()``. The recorded run must also have recorded one trace event per run of
each registered jitted body, attributed to that function.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _support import explained_misses, run_program, without_and_with_recording

import jaxtrace_nb as jt
from jaxtrace_nb._recording._session import get_session

CORPUS = {}


def program(fn):
    CORPUS[fn.__name__] = fn
    return fn


@program
def jit_shapes_and_weak_types(r):
    @jax.jit
    def f(x):
        r.body("f")
        return x * 2 + 1

    r.jit("f", f)
    r.step("f32[3]", lambda: f(jnp.ones(3)))
    r.step("f32[3] again", lambda: f(jnp.arange(3.0)))
    r.step("f32[4]", lambda: f(jnp.ones(4)))
    r.step("python float", lambda: f(1.5))
    r.step("python int", lambda: f(3))
    r.step("numpy f64", lambda: f(np.linspace(0, 1, 3)))


@program
def jit_dtypes(r):
    @jax.jit
    def f(x):
        r.body("f")
        return x + x

    r.jit("f", f)
    for dt in (jnp.float32, jnp.int32, jnp.float16, jnp.bfloat16, jnp.uint8, bool):
        r.step(str(dt), lambda dt=dt: f(jnp.ones(2, dt)))


@program
def jit_static_argnums(r):
    @functools.partial(jax.jit, static_argnums=(1,))
    def f(x, n):
        r.body("f")
        return x**n

    r.jit("f", f)
    for n in (1, 2, 2, 3, 1):
        r.step(f"n={n}", lambda n=n: f(jnp.arange(3.0), n))
    r.step("unhashable static", lambda: f(jnp.ones(2), [1]))


@program
def jit_static_argnames_and_kwargs(r):
    @functools.partial(jax.jit, static_argnames=("mode",))
    def f(x, y=None, *, mode="sum"):
        r.body("f")
        out = x if y is None else x + y
        return out.sum() if mode == "sum" else out.max()

    r.jit("f", f)
    r.step("x", lambda: f(jnp.ones(3)))
    r.step("x, y", lambda: f(jnp.ones(3), jnp.ones(3)))
    r.step("x, y=", lambda: f(jnp.ones(3), y=jnp.ones(3)))
    r.step("mode", lambda: f(jnp.ones(3), mode="max"))
    r.step("bad kw", lambda: f(jnp.ones(3), z=1))


@program
def jit_donated(r):
    @functools.partial(jax.jit, donate_argnums=0)
    def f(x, y):
        r.body("f")
        return x + y, x * y

    r.jit("f", f)
    x = jnp.ones(4)
    r.step("donate", lambda: f(x, jnp.ones(4)))
    r.step("donated deleted", lambda: x.is_deleted())
    r.step("reuse donated", lambda: f(x, jnp.ones(4)))
    r.step("fresh", lambda: f(jnp.zeros(4), jnp.ones(4)))


@program
def jit_pytrees(r):
    @jax.jit
    def f(tree):
        r.body("f")
        return jax.tree_util.tree_map(lambda a: a * 3, tree)

    r.jit("f", f)
    r.step("dict", lambda: f({"a": jnp.ones(2), "b": (jnp.zeros(1), None)}))
    r.step("dict same", lambda: f({"b": (jnp.ones(1), None), "a": jnp.zeros(2)}))
    r.step("key added", lambda: f({"a": jnp.ones(2), "b": (jnp.zeros(1), None), "c": 1.0}))
    r.step("None to array", lambda: f({"a": jnp.ones(2), "b": (jnp.zeros(1), jnp.ones(1))}))
    r.step("int keys", lambda: f({1: jnp.ones(2), 2: jnp.ones(2)}))
    r.step("mixed keys", lambda: f({1: jnp.ones(2), "a": jnp.ones(2)}))


@program
def jit_nested_jits(r):
    @jax.jit
    def inner(x):
        r.body("inner")
        return jnp.sin(x)

    @jax.jit
    def outer(x):
        r.body("outer")
        return inner(x) + inner(2 * x)

    r.jit("outer", outer)
    r.step("outer", lambda: outer(jnp.ones(3)))
    r.step("outer again", lambda: outer(jnp.ones(3)))
    r.step("inner alone", lambda: inner(jnp.ones(3)))
    r.step("outer new shape", lambda: outer(jnp.ones(5)))


@program
def jit_method_partial_callable(r):
    class Scaler:
        def __init__(self, k):
            self.k = k

        def __call__(self, x):
            r.body("call")
            return x * self.k

    def g(x, k):
        r.body("g")
        return x + k

    call = jax.jit(Scaler(3.0))
    part = jax.jit(functools.partial(g, k=2.0))
    r.step("callable", lambda: call(jnp.ones(2)))
    r.step("partial", lambda: part(jnp.ones(2)))
    r.step("partial again", lambda: part(jnp.ones(2)))


@program
def jit_recreated_lambda(r):
    outs = []
    for i in range(4):
        f = jax.jit(lambda x: (r.body("lambda"), x + 1)[1])
        outs.append(f)
        r.step(f"new lambda {i}", lambda f=f: f(jnp.ones(2)))
    r.step("first again", lambda: outs[0](jnp.ones(2)))


@program
def jit_control_flow(r):
    @jax.jit
    def f(x, n):
        r.body("f")

        def body(c, xi):
            r.body("scan")
            return c + xi, c * xi

        c, ys = jax.lax.scan(body, 0.0, x)
        y = jax.lax.cond(c > 0, lambda v: v * 2, lambda v: -v, ys)

        def cond_fun(s):
            r.body("while_cond")
            return s[0] < n

        def body_fun(s):
            r.body("while_body")
            return s[0] + 1, s[1] * 1.5

        _, z = jax.lax.while_loop(cond_fun, body_fun, (0, c))
        w = jax.lax.fori_loop(0, 3, lambda i, a: a + i, 0.0)
        return y, z, w, jax.lax.switch(n % 2, [jnp.sin, jnp.cos], c)

    r.jit("f", f)
    r.step("scan/cond/while", lambda: f(jnp.arange(4.0), 3))
    r.step("again", lambda: f(jnp.arange(4.0), 5))
    r.step("new length", lambda: f(jnp.arange(6.0), 3))


@program
def jit_grad_vmap(r):
    def loss(w, x):
        r.body("loss")
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    @jax.jit
    def step(w, xs):
        r.body("step")
        g = jax.vmap(jax.grad(loss), in_axes=(None, 0))(w, xs)
        v, h = jax.value_and_grad(loss)(w, xs[0])
        return w - 0.1 * g.mean(0), v, h, jax.jacfwd(jnp.sin)(w[:, 0])

    r.jit("step", step)
    w = jnp.linspace(-1, 1, 6).reshape(3, 2)
    xs = jnp.linspace(0, 1, 12).reshape(4, 3)
    r.step("step", lambda: step(w, xs))
    r.step("step again", lambda: step(w * 2, xs))
    r.step("hessian", lambda: jax.jit(jax.hessian(lambda v: jnp.sum(v**3)))(jnp.ones(3)))


@program
def jit_checkpoint(r):
    @jax.checkpoint
    def block(x):
        r.body("block")
        return jnp.sin(jnp.sin(x))

    @jax.jit
    def f(x):
        r.body("f")
        return jax.grad(lambda v: jnp.sum(block(block(v))))(x)

    policy = jax.checkpoint_policies.nothing_saveable
    g = jax.jit(jax.grad(lambda v: jnp.sum(jax.checkpoint(jnp.cos, policy=policy)(v))))
    r.jit("f", f)
    r.step("remat grad", lambda: f(jnp.arange(3.0)))
    r.step("remat grad again", lambda: f(jnp.arange(3.0) + 1))
    r.step("policy", lambda: g(jnp.ones(2)))


@program
def jit_custom_vjp_jvp(r):
    @jax.custom_vjp
    def clip_grad(x):
        return x

    def fwd(x):
        r.body("fwd")
        return x, None

    def bwd(_, g):
        r.body("bwd")
        return (jnp.clip(g, -1.0, 1.0),)

    clip_grad.defvjp(fwd, bwd)

    @jax.custom_jvp
    def softplus(x):
        return jnp.log1p(jnp.exp(x))

    softplus.defjvp(lambda p, t: (softplus(p[0]), t[0] * jax.nn.sigmoid(p[0])))

    @jax.jit
    def f(x):
        r.body("f")
        return jax.grad(lambda v: jnp.sum(clip_grad(v) * 10.0 + softplus(v)))(x)

    r.jit("f", f)
    r.step("custom", lambda: f(jnp.arange(3.0)))
    r.step("custom again", lambda: f(jnp.arange(3.0)))


@program
def jit_aot(r):
    @jax.jit
    def f(x, y):
        r.body("f")
        return x @ y

    r.jit("f", f)
    x, y = jnp.ones((2, 3)), jnp.ones((3, 4))
    lowered = f.lower(x, y)
    compiled = lowered.compile()
    r.step("text has dot", lambda: "dot" in lowered.as_text())
    r.step("compiled", lambda: compiled(x, y))
    r.step("compiled wrong shape", lambda: compiled(x, jnp.ones((3, 5))))
    r.step("jit after aot", lambda: f(x, y))
    r.step("trace only", lambda: f.trace(x, y).jaxpr.in_avals)
    r.step("eval_shape", lambda: jax.eval_shape(f, x, y).shape)
    r.step("make_jaxpr", lambda: len(jax.make_jaxpr(jax.jit(jnp.matmul))(x, y).eqns))


@program
def jit_clear_caches(r):
    @jax.jit
    def f(x):
        r.body("f")
        return x - 1

    r.jit("f", f)
    r.step("first", lambda: f(jnp.ones(2)))
    jax.clear_caches()
    r.step("after clear", lambda: f(jnp.ones(2)))
    r.step("cached", lambda: f(jnp.ones(2)))
    jax.clear_caches()
    r.step("after second clear", lambda: f(jnp.ones(2)))


@program
def jit_disable_jit(r):
    @jax.jit
    def f(x):
        r.body("f")
        return x * 4

    with jax.disable_jit():
        r.step("eager", lambda: f(jnp.ones(2)))
        r.step("eager python bool", lambda: bool(f(jnp.ones(())) > 0))
    r.step("jitted", lambda: f(jnp.ones(2)))
    r.step("cache size", lambda: f._cache_size())


@program
def jit_context_managers(r):
    @jax.jit
    def f(x, y):
        r.body("f")
        return x @ y

    r.jit("f", f)
    a = jnp.linspace(0, 1, 4).reshape(2, 2)
    r.step("default", lambda: f(a, a))
    with jax.default_matmul_precision("highest"):
        r.step("precision", lambda: f(a, a))
    with jax.numpy_rank_promotion("raise"):
        r.step("rank promotion", lambda: f(a, a))
    r.step("default again", lambda: f(a, a))


@program
def jit_committed_device(r):
    @jax.jit
    def f(x):
        r.body("f")
        return x + 2

    r.jit("f", f)
    x = jnp.ones(3)
    r.step("uncommitted", lambda: f(x))
    r.step("committed", lambda: f(jax.device_put(x, jax.devices()[0])))
    r.step("uncommitted again", lambda: f(x))


@program
def prng_keys(r):
    def sample(key, n):
        r.body("sample")
        k1, k2 = jax.random.split(key)
        return jax.random.normal(k1, (n,)), jax.random.uniform(k2, (2,)), jax.random.fold_in(key, 3)

    s = jax.jit(sample, static_argnums=1)
    r.jit("sample", s)
    r.step("typed key", lambda: s(jax.random.key(0), 3))
    r.step("typed key again", lambda: s(jax.random.key(1), 3))
    r.step("raw key", lambda: s(jax.random.PRNGKey(0), 3))
    r.step("threefry impl", lambda: s(jax.random.key(2, impl="threefry2x32"), 4))
    r.step(
        "vmapped keys",
        lambda: jax.jit(jax.vmap(lambda k: jax.random.bits(k, (2,))))(
            jax.random.split(jax.random.key(5), 3)
        ),
    )


@program
def raise_while_tracing(r):
    @jax.jit
    def f(x):
        r.body("f")
        if x.shape[0] > 2:
            raise ValueError(f"too long: {x.shape}")
        return x

    @jax.jit
    def g(x):
        r.body("g")
        return jnp.dot(x, jnp.ones((5, 5)))

    @jax.jit
    def h(x):
        r.body("h")
        if x > 0:  # a concretization error
            return x
        return -x

    @jax.jit
    def outer(x):
        r.body("outer")
        return f(x) * 2

    r.step("ok", lambda: f(jnp.ones(2)))
    r.step("user raise", lambda: f(jnp.ones(3)))
    r.step("user raise again", lambda: f(jnp.ones(3)))
    r.step("shape error", lambda: g(jnp.ones(3)))
    r.step("tracer bool", lambda: h(1.0))
    r.step("nested raise", lambda: outer(jnp.ones(4)))
    r.step("nested ok", lambda: outer(jnp.ones(1)))
    r.step("not an array", lambda: f("text"))
    r.step("bad static", lambda: jax.jit(lambda x, s: x, static_argnums=1)(1.0, {"a": 1}))


@program
def raise_at_runtime_and_nans(r):
    @jax.jit
    def f(x):
        r.body("f")
        return jnp.log(x), x / 0.0, jnp.sqrt(-x), jnp.array([-0.0, np.nan])

    @jax.jit
    def checked(x):
        r.body("checked")
        return eqx.error_if(x, x < 0, "negative input")

    r.jit("f", f)
    r.step("nan/inf", lambda: f(jnp.array([0.0, 1.0, -1.0])))
    r.step("error_if ok", lambda: checked(jnp.ones(2)))
    r.step("error_if raises", lambda: checked(-jnp.ones(2)))


class MLP(eqx.Module):
    layers: list
    act: callable = eqx.field(static=True)

    def __init__(self, key, act=jax.nn.relu):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(3, 4, key=k1), eqx.nn.Linear(4, 2, key=k2)]
        self.act = act

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = self.act(layer(x))
        return self.layers[-1](x)


@program
def eqx_filter_jit(r):
    @eqx.filter_jit
    def f(model, x, scale, flag=False):
        r.body("f")
        y = jax.vmap(model)(x) * scale
        return y.sum() if flag else y

    r.jit("f", f)
    model = MLP(jax.random.key(0))
    x = jnp.linspace(0, 1, 6).reshape(2, 3)
    r.step("first", lambda: f(model, x, 2.0))
    r.step("same", lambda: f(model, x, 2.0))
    r.step("new python scale", lambda: f(model, x, 3.0))
    r.step("array scale", lambda: f(model, x, jnp.asarray(3.0)))
    r.step("flag kw", lambda: f(model, x, 2.0, flag=True))
    r.step("static field", lambda: f(MLP(jax.random.key(0), act=jnp.tanh), x, 2.0))
    r.step("new model same type", lambda: f(MLP(jax.random.key(1)), x, 2.0))
    r.step("filter_jit(module)", lambda: eqx.filter_jit(model)(x[0]))


@program
def eqx_inline_nested(r):
    @eqx.filter_jit(inline=True)
    def inner(x, n):
        r.body("inner")
        return x * n

    @eqx.filter_jit
    def outer_eqx(x):
        r.body("outer_eqx")
        return inner(x, 2) + inner(x, 3)

    @jax.jit
    def outer_jax(x):
        r.body("outer_jax")
        return inner(x, 4)

    r.jit("outer_eqx", outer_eqx)
    r.jit("outer_jax", outer_jax)
    r.step("eqx outer", lambda: outer_eqx(jnp.ones(2)))
    r.step("jax outer", lambda: outer_jax(jnp.ones(2)))
    r.step("inline alone", lambda: inner(jnp.ones(2), 5))
    r.step("again", lambda: (outer_eqx(jnp.ones(2)), outer_jax(jnp.ones(3))))


@program
def eqx_callable_attribute_recreated(r):
    class Model(eqx.Module):
        w: jax.Array
        fn: callable

        def __init__(self):
            self.w = jnp.ones(2)
            self.fn = jax.jit(jnp.sin)

    @eqx.filter_jit
    def step(model, x):
        r.body("step")
        return model.fn(model.w * x)

    r.jit("step", step)
    m = Model()
    r.step("first", lambda: step(m, 1.0))
    r.step("same model", lambda: step(m, 1.0))
    r.step("re-initialised", lambda: step(Model(), 1.0))


@program
def eqx_optax_training(r):
    model = MLP(jax.random.key(3))
    optim = optax.adam(1e-2)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(model, opt_state, x, y):
        r.body("step")

        @eqx.filter_value_and_grad
        def loss_fn(m):
            return jnp.mean((jax.vmap(m)(x) - y) ** 2)

        loss, grads = loss_fn(model)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    r.jit("step", step)
    x = jnp.linspace(-1, 1, 12).reshape(4, 3)
    y = jnp.ones((4, 2))
    losses = []
    for i in range(3):
        model, opt_state, loss = step(model, opt_state, x, y)
        losses.append(loss)
        r.step(
            f"step {i}", lambda m=model, s=opt_state, l=loss: (eqx.filter(m, eqx.is_array), s, l)
        )
    r.step("new batch shape", lambda: step(model, opt_state, x[:2], y[:2])[2])


@program
def eqx_filter_transforms(r):
    @eqx.filter_jit
    def f(model, xs):
        r.body("f")
        grads = eqx.filter_grad(lambda m, x: jnp.sum(m(x)))(model, xs[0])
        ys = eqx.filter_vmap(model)(xs)
        return eqx.filter(grads, eqx.is_array), ys

    model = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.key(4))
    r.step("grad+vmap", lambda: f(model, jnp.ones((5, 3))))
    r.step("again", lambda: f(model, jnp.zeros((5, 3))))
    r.step("bad shape", lambda: f(model, jnp.ones((5, 4))))


@program
def eqx_static_fields_and_enums(r):
    @dataclasses.dataclass(frozen=True)
    class Config:
        depth: int
        name: str

    class Net(eqx.Module):
        w: jax.Array
        cfg: Config = eqx.field(static=True)

    @eqx.filter_jit
    def f(net, x):
        r.body("f")
        return net.w * x * net.cfg.depth

    r.jit("f", f)
    r.step("cfg 1", lambda: f(Net(jnp.ones(2), Config(1, "a")), 1.0))
    r.step("cfg 1 equal", lambda: f(Net(jnp.ones(2), Config(1, "a")), 1.0))
    r.step("cfg 2", lambda: f(Net(jnp.ones(2), Config(2, "a")), 1.0))
    r.step("x array", lambda: f(Net(jnp.ones(2), Config(2, "a")), jnp.ones(2)))


@program
def jit_many_leaves_and_eager_ops(r):
    @jax.jit
    def f(xs):
        r.body("f")
        return sum(xs)

    r.jit("f", f)
    r.step("200 leaves", lambda: f([jnp.full((2,), i, jnp.float32) for i in range(200)]))
    r.step(
        "eager ops", lambda: (jnp.ones(3)[1:] * 2, jnp.cumsum(jnp.arange(5)), jnp.sort(jnp.ones(4)))
    )
    r.step("x64 numpy to eager", lambda: jnp.asarray(np.ones(3)) + np.float64(1.0))


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_same_results_with_and_without_recording(name):
    faults_before = jt.faults()
    (without, _), (with_recording, r), events = without_and_with_recording(
        lambda: run_program(CORPUS[name])
    )
    assert with_recording == without
    assert jt.faults() == faults_before
    traces = events[(events["kind"] == "trace") & ~events["nested"]]
    for fn_name in r.jitted:
        recorded = traces[traces["function"].str.split(".").str[-1] == fn_name]
        assert len(recorded) == r.bodies.get(fn_name, 0), (fn_name, recorded[["function", "cause"]])


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 25


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_causes_agree_with_jax_explain_cache_misses(name):
    """For every miss JAX's own explainer explains, our cause is one of the same category."""
    jt.stop()
    jt.reset()
    try:
        with explained_misses() as misses:
            jt.start()
            run_program(CORPUS[name])
            events = [e for e in get_session().log.events() if e.kind == "trace"]
    finally:
        jt.stop()
        jt.reset()
    explained = misses.explained(events)
    # JAX explains no trace of a function in a file excluded from its tracebacks (Equinox's, from
    # 0.9 on) nor of an inline one; any other retrace it explains.
    retraced = [e for e in events if e.cause != "first" and e.jit != "equinox" and not e.internal]
    assert explained or not retraced, "JAX explained none"
    assert not misses.disagreements(explained)
