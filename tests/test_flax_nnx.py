"""Flax NNX: ``nnx.jit`` traces explained in the module's own attribute names (issue 13).

What NNX flattens to ``model.states[0][1]`` and a ``GraphDef`` is read back as
``model.l1.kernel``, ``model.count``, ``optimizer.opt_state[0].mu['l1']['kernel']``,
``rngs.default.key``; the function is the user's, never NNX's ``JitFn``.
"""

import functools
import gc
import inspect
import weakref

import jax
import jax.numpy as jnp
import optax  # installed by the [test] extra: a broken install fails this file, it never skips it
import pytest
from _support import rows
from flax import nnx


def _set(variable, value):
    """Give an NNX Variable a new value (``set_value`` from Flax 0.12.1; ``.value =`` in 0.12.0)."""
    setter = getattr(variable, "set_value", None)
    if setter is not None:
        setter(value)
    else:
        variable.value = value


@pytest.fixture(autouse=True)
def _never_unknown(jt):
    """No NNX trace may be left unexplained: `unknown` means an identical cache key, never "could
    not tell"."""
    yield
    causes = jt.log()["cause"].tolist()
    assert "unknown" not in causes
    assert jt.faults() == {}


class MLP(nnx.Module):
    def __init__(self, rngs, din=2, dout=3):
        self.l1 = nnx.Linear(din, dout, rngs=rngs)
        self.count = 0  # a plain Python attribute: static, part of the GraphDef

    def __call__(self, x):
        return self.l1(x)


def leaves_of(name: str) -> dict:
    """The leaves (path -> Leaf) of the last recorded trace of the function named `name`."""
    from jaxtrace_nb._recording._session import get_session

    (state,) = [
        s
        for s in get_session().functions.values()
        if s.identity is not None and s.identity.name == name
    ]
    return state.keys[-1].signature.get().leaves


def where(fn) -> str:
    code = inspect.unwrap(fn).__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


# ------------------------------------------------------------ the user's names
def test_python_attribute_change_is_static_at_its_name(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x)
    model.count += 1
    train_step(model, x)
    name = "test_python_attribute_change_is_static_at_its_name.<locals>.train_step"
    assert rows(jt) == [
        (name, "first", None, None, None),
        (name, "static", "model.count", "0", "1"),
    ]
    event = jt.log(internal=False).iloc[-1]
    assert event["explanation"] == "`model.count` changed static value: 0 → 1."
    assert "plain Python attribute of an NNX module" in event["hint"]
    assert "static graph" in event["hint"]
    assert "nnx.Variable" in event["hint"]


def test_function_is_the_users_own_not_nnx_wrapper(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    train_step(MLP(nnx.Rngs(0)), jnp.ones((4, 2)))
    line = inspect.currentframe().f_lineno - 1
    df = jt.log(internal=False)
    assert df["function"].tolist() == [
        "test_function_is_the_users_own_not_nnx_wrapper.<locals>.train_step"
    ]
    assert df["location"].tolist() == [where(train_step)]
    assert df["location"].iloc[0].startswith(__file__)
    assert df["jit"].tolist() == ["nnx"]
    assert df["cause"].tolist() == ["first"]
    assert df["call_site"].tolist() == [f"{__file__}:{line}"]
    assert "compilation.py" not in df["location"].iloc[0]


def test_attribute_added_is_structure_at_its_name(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x)
    model.extra = 5
    train_step(model, x)
    (_, (_, cause, leaf, before, after)) = rows(jt)
    assert (cause, leaf, before, after) == ("structure", "model.extra", "(absent)", "5")
    assert "`model.extra`" in jt.log(internal=False).iloc[-1]["hint"]


def test_param_dtype_change_is_dtype_at_the_param(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x)
    _set(model.l1.kernel, model.l1.kernel[...].astype(jnp.bfloat16))
    train_step(model, x)
    assert rows(jt)[-1][1:] == ("dtype", "model.l1.kernel", "f32[2,3]", "bf16[2,3]")
    hint = jt.log(internal=False).iloc[-1]["hint"]
    assert "`model.l1.kernel`" in hint and "`Param`" in hint


def test_param_shape_change_is_shape_at_the_param(jt):
    @nnx.jit
    def total(model):
        return model.l1.kernel[...].sum()

    model = MLP(nnx.Rngs(0))
    total(model)
    _set(model.l1.kernel, jnp.ones((2, 4)))
    total(model)
    assert rows(jt)[-1][1:] == ("shape", "model.l1.kernel", "f32[2,3]", "f32[2,4]")
    assert "`model.l1.kernel`" in jt.log(internal=False).iloc[-1]["hint"]


def test_variable_type_change_is_structure_at_the_variable(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x)
    model.l1.bias = nnx.BatchStat(model.l1.bias[...])
    train_step(model, x)
    assert rows(jt)[-1][1:] == ("structure", "model.l1.bias", "Param", "BatchStat")


def test_counter_in_a_variable_does_not_retrace(jt):
    class Counting(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(2, 3, rngs=rngs)
            self.calls = nnx.Variable(jnp.array(0, jnp.int32))

        def __call__(self, x):
            self.calls[...] += 1
            return self.l1(x)

    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = Counting(nnx.Rngs(0)), jnp.ones((4, 2))
    for _ in range(3):
        train_step(model, x)
    assert int(model.calls[...]) == 3
    assert [r[1] for r in rows(jt)] == ["first"]
    leaves = leaves_of("test_counter_in_a_variable_does_not_retrace.<locals>.train_step")
    assert leaves["model.calls"].text == "i32[]"


def test_attribute_counted_inside_the_step_retraces_every_call(jt):
    class Counting(MLP):
        def __call__(self, x):
            self.count += (
                1  # NNX carries the new GraphDef out of the jit: the next call has a new key
            )
            return self.l1(x)

    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = Counting(nnx.Rngs(0)), jnp.ones((4, 2))
    for _ in range(3):
        train_step(model, x)
    assert [r[1:] for r in rows(jt)] == [
        ("first", None, None, None),
        ("static", "model.count", "0", "1"),
        ("static", "model.count", "1", "2"),
    ]


# ------------------------------------------------------------- Optimizer, Rngs
def step_with_optimizer():
    @nnx.jit
    def train_step(model, optimizer, x):
        loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
        optimizer.update(model, grads)
        return loss

    return train_step


def test_optimizer_leaves_under_its_own_attribute_names(jt):
    train_step = step_with_optimizer()
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    train_step(model, optimizer, jnp.ones((4, 2)))
    leaves = leaves_of("step_with_optimizer.<locals>.train_step")
    arrays = {path: leaf.text for path, leaf in leaves.items() if leaf.kind == "array"}
    assert arrays == {
        "model.l1.bias": "f32[3]",
        "model.l1.kernel": "f32[2,3]",
        "optimizer.opt_state[0].count": "i32[]",
        "optimizer.opt_state[0].mu['l1']['bias']": "f32[3]",
        "optimizer.opt_state[0].mu['l1']['kernel']": "f32[2,3]",
        "optimizer.opt_state[0].nu['l1']['bias']": "f32[3]",
        "optimizer.opt_state[0].nu['l1']['kernel']": "f32[2,3]",
        "optimizer.step": "u32[]",
        "x": "f32[4,2]",
    }
    statics = {path: leaf.text for path, leaf in leaves.items() if leaf.kind == "static"}
    assert statics["model.count"] == "0"
    assert statics["model.l1.in_features"] == "2"
    assert statics["optimizer.wrt"] == "<class flax.nnx.variablelib.Param>"
    # The optax transformation: one static attribute, or (Flax 0.12.0) a node whose functions are
    # statics.
    assert (
        statics["optimizer.tx"].startswith("GradientTransformationExtraArgs(")
        if "optimizer.tx" in statics
        else statics["optimizer.tx.init"].startswith("<function ")
    )
    assert not any("states" in p or "_graphdef" in p or "_pytree__" in p for p in leaves)
    assert leaves["optimizer.step (structure)"].text == "OptState"
    assert leaves["optimizer.opt_state[0] (structure)"].text == "ScaleByAdamState"


def test_optimizer_state_dtype_change_names_the_moment(jt):
    train_step = step_with_optimizer()
    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    train_step(model, optimizer, x)
    _set(optimizer.opt_state[0].mu["l1"]["kernel"], jnp.zeros((2, 3), jnp.bfloat16))
    train_step(model, optimizer, x)
    assert rows(jt)[-1][1:] == (
        "dtype",
        "optimizer.opt_state[0].mu['l1']['kernel']",
        "f32[2,3]",
        "bf16[2,3]",
    )
    hint = jt.log(internal=False).iloc[-1]["hint"]
    assert "optax's `ScaleByAdamState`" in hint


def test_optimizer_recreated_is_static_at_its_transformation(jt):
    train_step = step_with_optimizer()
    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    for _epoch in range(2):
        optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)  # built again each epoch
        for _ in range(2):
            train_step(model, optimizer, x)
    (first, second) = rows(jt, "step_with_optimizer.<locals>.train_step")
    assert first[1] == "first"
    assert second[1] == "static" and second[2] in (
        "optimizer.tx",
        "optimizer.tx.init",
    )  # the latter: Flax 0.12.0
    # alike, yet unequal: its functions compare by identity, and the text says which one differs
    assert second[4].startswith(second[3] + " (") and "another object" in second[4]
    hint = jt.log(internal=False).iloc[-1]["hint"]
    assert "optax transformation" in hint and "the optimizer once" in hint


def test_rngs_keys_and_counts_under_the_stream_names(jt):
    @nnx.jit
    def sample(rngs):
        return jax.random.normal(rngs.default(), (2,))

    sample(nnx.Rngs(0))
    sample(nnx.Rngs(1))  # new seed, same types: no retrace
    leaves = leaves_of("test_rngs_keys_and_counts_under_the_stream_names.<locals>.sample")
    assert leaves["rngs.default.key"].text == "key<fry>[]"
    assert leaves["rngs.default.count"].text == "u32[]"
    assert leaves["rngs.default.tag"].text == "'default'"
    sample(nnx.Rngs(0, dropout=1))  # a new stream
    (first, added) = rows(jt)
    assert first[1] == "first"
    # the stream as a whole (`RngStream`), or its first leaf where added containers are not
    # collapsed
    assert added[1:] in (
        ("structure", "rngs.dropout", "(absent)", "RngStream"),
        ("structure", "rngs.dropout.count", "(absent)", "u32[]"),
    )


# ------------------------------------------------------------- how it is called
def test_static_argnums_keywords_and_plain_arguments(jt):
    @functools.partial(nnx.jit, static_argnums=(2,))
    def train_step(model, x, n, *, scale=1.0):
        return model(x).sum() * n * scale

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x, 2, scale=1.0)
    train_step(model, x, 3, scale=1.0)
    train_step(model, jnp.ones((5, 2)), 3, scale=1.0)
    train_step(model, jnp.ones((5, 2)), 3, scale=jnp.float32(2.0))
    assert [r[1:] for r in rows(jt)] == [
        ("first", None, None, None),
        ("static", "n", "2", "3"),
        ("shape", "x", "f32[4,2]", "f32[5,2]"),
        ("weak_type", "scale", "f32[] (weak)", "f32[]"),
    ]


def test_graph_nodes_inside_a_container_argument(jt):
    @nnx.jit
    def train_step(state, x):
        model, _optimizer = state
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    state = (model, nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param))
    train_step(state, x)
    model.count = 7
    train_step(state, x)
    assert rows(jt)[-1][1:] == ("static", "state[0].count", "0", "7")
    leaves = leaves_of("test_graph_nodes_inside_a_container_argument.<locals>.train_step")
    assert leaves["state[0].l1.kernel"].text == "f32[2,3]"
    assert leaves["state[1].step"].text == "u32[]"


def test_shared_object_is_named_once_and_referenced(jt):
    class Pair(nnx.Module):
        def __init__(self, a):
            self.a = a
            self.b = a  # the same module twice

    @nnx.jit
    def f(pair, other):
        return pair.a.l1.kernel[...].sum() + other.l1.kernel[...].sum()

    model = MLP(nnx.Rngs(0))
    f(Pair(model), model)
    leaves = leaves_of("test_shared_object_is_named_once_and_referenced.<locals>.f")
    assert leaves["pair.a.l1.kernel"].text == "f32[2,3]"
    assert not any(p.startswith(("pair.b.", "other.")) for p in leaves)
    assert leaves["pair.b (structure)"].text == "the same object as pair.a"
    assert leaves["other (structure)"].text == "the same object as pair.a"


@pytest.mark.parametrize("how", ["graph_updates=False", "graph=False", "jax.jit"])
def test_other_jit_modes_give_the_same_names(jt, how):
    mode = how.split("=")[0]
    if mode in ("graph_updates", "graph") and mode not in inspect.signature(nnx.jit).parameters:
        pytest.skip(f"nnx.jit of this Flax has no `{mode}` mode (it came after Flax 0.12.0)")

    def train_step(model, x):
        return model(x).sum()

    jitted = {
        "graph_updates=False": functools.partial(nnx.jit, graph_updates=False),
        "graph=False": functools.partial(nnx.jit, graph=False),
        "jax.jit": jax.jit,
    }[how](train_step)
    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    jitted(model, x)
    model.count += 1
    jitted(model, x)
    model.extra = 5
    jitted(model, x)
    _set(model.l1.kernel, model.l1.kernel[...].astype(jnp.bfloat16))
    jitted(model, x)
    assert [r[1:] for r in rows(jt)] == [
        ("first", None, None, None),
        ("static", "model.count", "0", "1"),
        ("structure", "model.extra", "(absent)", "5"),
        ("dtype", "model.l1.kernel", "f32[2,3]", "bf16[2,3]"),
    ]
    assert "NNX module" in jt.log(internal=False).iloc[1]["hint"]
    leaves = leaves_of("test_other_jit_modes_give_the_same_names.<locals>.train_step")
    assert not any("_pytree__" in p or ".value" in p or "states" in p for p in leaves)


def test_functional_api_split_and_merge(jt):
    @jax.jit
    def forward(split, x):
        graphdef, state = split
        return nnx.merge(graphdef, state)(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    forward(nnx.split(model), x)
    model.count = 1
    forward(nnx.split(model), x)
    _set(model.l1.kernel, model.l1.kernel[...].astype(jnp.bfloat16))
    forward(nnx.split(model), x)
    assert [r[1:] for r in rows(jt)] == [
        ("first", None, None, None),
        ("static", "split[0].count", "0", "1"),  # the GraphDef's Python attribute
        ("dtype", "split[1]['l1']['kernel']", "f32[2,3]", "bf16[2,3]"),  # the State's entry
    ]
    assert "NNX module" in jt.log(internal=False).iloc[1]["hint"]


def test_nnx_containers_are_written_as_users_index_them(jt):
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs)])
            self.extras = nnx.Dict({"scale": nnx.Param(jnp.ones(2))})
            self.pair = nnx.data((jnp.ones(1), {"x": jnp.zeros(2)}))

    @nnx.jit
    def f(net):
        return net.layers[0].kernel[...].sum()

    f(Net(nnx.Rngs(0)))
    leaves = leaves_of("test_nnx_containers_are_written_as_users_index_them.<locals>.f")
    arrays = sorted(p for p, leaf in leaves.items() if leaf.kind == "array")
    assert arrays == [
        "net.extras['scale']",
        "net.layers[0].bias",
        "net.layers[0].kernel",
        "net.pair[0]",
        "net.pair[1]['x']",
    ]
    assert "net.layers._length" not in leaves


# ------------------------------------------------------------ safety
def test_keeps_no_reference_to_the_model(jt):
    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model = MLP(nnx.Rngs(0))
    train_step(model, jnp.ones((4, 2)))
    ref = weakref.ref(model)
    layer = weakref.ref(model.l1)
    del model
    gc.collect()
    assert ref() is None and layer() is None


def test_unexpected_graphdef_degrades_to_every_leaf(jt, monkeypatch):
    from jaxtrace_nb._adapters import flax_nnx

    def broken(*args, **kwargs):
        raise flax_nnx._Unexpected("a GraphDef from another Flax")

    monkeypatch.setattr(flax_nnx, "_read", broken)

    @nnx.jit
    def train_step(model, x):
        return model(x).sum()

    model, x = MLP(nnx.Rngs(0)), jnp.ones((4, 2))
    train_step(model, x)
    _set(model.l1.kernel, jnp.ones((2, 3), jnp.bfloat16))
    train_step(model, x)
    name = "test_unexpected_graphdef_degrades_to_every_leaf.<locals>.train_step"
    assert rows(jt)[-1] == (name, "dtype", "model.states[0][1]", "f32[2,3]", "bf16[2,3]")
    assert jt.faults() == {}


def test_adapter_does_not_import_flax():
    from jaxtrace_nb._adapters import flax_nnx

    source = inspect.getsource(flax_nnx)
    assert "import flax" not in source and "from flax" not in source
