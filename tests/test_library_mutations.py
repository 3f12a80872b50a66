"""Real library objects, one change at a time: JAX decides whether it retraces, the log names why.

Guarantee tested: a jitted function (``jax.jit``, ``eqx.filter_jit``, an ``eqx.filter_jit``
method, ``jax.jit(model.apply)`` of a linen module, ``nnx.jit``) is called with a real library
object (an Equinox ``MLP``, ``Linear`` or custom module, Flax linen ``variables`` as a dict or
``FrozenDict``, a ``TrainState``, a ``flax.struct`` dataclass, an NNX module or
``nnx.Optimizer``, an optax ``adam`` or ``chain`` state, a ``register_dataclass`` dataclass in
both declaration forms, a NamedTuple), then with a copy in which exactly one thing changed, then
with the first object again. Then:

* the function has exactly as many recorded traces as JAX ran its Python body, and that is the
  number the change implies: two, or one where JAX's cache key compares equal (an equal but not
  identical bound method, a static of equal value and another type, dict keys in another order,
  a Python scalar's value under ``jax.jit``, keyword passing under ``eqx.filter_jit``, which binds
  arguments to the signature first);
* the retrace's ``cause`` is the category of the change, ``leaf`` the changed leaf in the user's
  names (``model.layers[1].weight``, ``opt_state[0].mu['dense']['kernel']``, ``cfg.depth``,
  ``self.act``), ``before`` / ``after`` its old and new value; never ``unknown``;
* a callable field holding an equal but not identical bound method is never blamed for another
  change (every object with such a field holds a freshly bound one in each copy).

A seeded generator picks the object, the change, the jit and every detail (which leaf, which
dtype, which direction). The seeds run through ``UNITS`` in an order shuffled by the seed's round:
every supported (object, change) pair once, the changes whose outcome depends on the jit once per
jit, and every jit of every object at least once. A second generator changes an object twice in
a row (B = A changed, C = A or B changed elsewhere): each retrace names the change against the
earlier key it is closest to.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import warnings
from typing import Any, Callable, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import pytest

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
    from flax import linen as nn
    from flax import nnx, struct
    from flax.core import FrozenDict, freeze, unfreeze
    from flax.training import train_state

JITS = {"jax.jit": jax.jit, "eqx.filter_jit": eqx.filter_jit, "nnx.jit": nnx.jit}
MUTATIONS = (
    "container",
    "key_order",
    "static",
    "static_equal",
    "fn_lambda",
    "fn_partial",
    "fn_bound_new",
    "fn_bound_equal",
    "fn_closure",
    "key_type",
    "dtype",
    "weak_type",
    "scalar_value",
    "shape",
    "keyword",
    "none",
)
JIT_DEPENDENT = ("keyword", "weak_type", "scalar_value")
STATIC_FORMS = (
    "eqx.field(static=True)",
    "struct.field(pytree_node=False)",
    "register_dataclass(meta_fields=…)",
    "field(metadata={'static': True})",
    "NNX attribute",
    "filter_jit non-array leaf",
)
DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32)
KEY_PAIRS = (
    (("jax.random.PRNGKey(3)", jax.random.PRNGKey(3)), ("jax.random.key(3)", jax.random.key(3))),
    (
        ("jax.random.key(3)", jax.random.key(3)),
        ("jax.random.key(3, impl='rbg')", jax.random.key(3, impl="rbg")),
    ),
    (
        ("jax.random.PRNGKey(3)", jax.random.PRNGKey(3)),
        ("jax.random.PRNGKey(3, impl='rbg')", jax.random.PRNGKey(3, impl="rbg")),
    ),
)
_SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "i32", "uint32": "u32"}


# ------------------------------------------------------------------ callables held in fields
class Gate:
    def __init__(self, k: float = 2.0):
        self.k = k

    def forward(self, x):
        return x * self.k


def _scaled(k, x):
    return k * x


def _make_lambda():
    return lambda x: x * 2


# ------------------------------------------------------------------ the library objects
def _block_class():
    """A fresh Equinox module class: its `eqx.filter_jit` method, cached per class, starts with no
    traces."""
    runs: list = []

    class Block(eqx.Module):
        w: jax.Array
        extras: dict
        lr: Any
        key: jax.Array
        fn: Callable = eqx.field(static=True)
        act: str = eqx.field(static=True)
        depth: int = eqx.field(static=True)

        @eqx.filter_jit
        def run(self):
            runs.append("self")

    Block.runs = runs
    return Block


@struct.dataclass
class StructConfig:
    w: jax.Array
    layers: list
    lr: Any
    key: jax.Array
    depth: int = struct.field(pytree_node=False)
    act: Callable = struct.field(pytree_node=False)


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["w", "layers", "lr", "key"],
    meta_fields=["depth", "act"],
)
@dataclasses.dataclass
class MetaFieldsConfig:
    w: jax.Array
    layers: list
    lr: Any
    key: jax.Array
    depth: int
    act: Callable


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class MetadataConfig:
    w: jax.Array
    layers: list
    lr: Any
    key: jax.Array
    depth: int = dataclasses.field(metadata={"static": True})
    act: Callable = dataclasses.field(metadata={"static": True})


class Batch(NamedTuple):
    x: jax.Array
    y: jax.Array
    lr: Any
    key: jax.Array
    extra: list


_LINEN_RUNS: list = []


class LinenNet(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        _LINEN_RUNS.append("variables")
        return nn.BatchNorm(use_running_average=True)(nn.Dense(self.width)(x))


class NnxNet(nnx.Module):
    def __init__(self, rngs, width, act, key, scale):
        self.l1 = nnx.Linear(2, width, rngs=rngs)
        self.scale = nnx.Param(scale)
        self.key = nnx.Variable(key)
        self.arrs = nnx.data([jnp.ones(2), jnp.zeros((2, width))])
        self.depth = 2
        self.act = act

    def __call__(self, x):
        return self.act(self.l1(x)) * self.scale


def _key(rng: random.Random, typed: bool):
    seed = rng.randrange(1000)
    return jax.random.key(seed) if typed else jax.random.PRNGKey(seed)


def _params(rng: random.Random):
    width = rng.randint(2, 4)
    return {
        "dense": {"kernel": jnp.ones((2, width)), "bias": jnp.zeros(width)},
        "scale": jnp.ones(()),
    }


def _mlp(rng):
    return eqx.nn.MLP(
        2, 2, width_size=rng.randint(2, 5), depth=2, key=jax.random.PRNGKey(rng.randrange(100))
    )


def _linear(rng):
    return eqx.nn.Linear(
        rng.randint(2, 4), rng.randint(2, 4), key=jax.random.PRNGKey(rng.randrange(100))
    )


def _block(rng):
    extras = {"a": jnp.zeros(2), "b": [jnp.ones(1), jnp.ones((2, 2))]}
    key = _key(rng, rng.random() < 0.5)
    return _block_class()(jnp.ones(rng.randint(1, 3)), extras, 0.5, key, jax.nn.relu, "relu", 2)


def _config(cls):
    def build(rng):
        return cls(
            jnp.ones(rng.randint(1, 3)),
            [jnp.zeros(2), jnp.ones((1, 2))],
            0.5,
            _key(rng, rng.random() < 0.5),
            2,
            jax.nn.relu,
        )

    return build


def _linen_variables(rng):
    return LinenNet(rng.randint(2, 4)).init(jax.random.PRNGKey(0), jnp.ones((1, 2)))


_LINEN = LinenNet(3)
_ADAM = optax.adam(1e-3)
_CHAIN = optax.chain(
    optax.clip_by_global_norm(1.0), optax.add_decayed_weights(1e-4), optax.adam(1e-3)
)


def _train_state(rng):
    variables = _LINEN.init(jax.random.PRNGKey(rng.randrange(100)), jnp.ones((1, 2)))
    return train_state.TrainState.create(
        apply_fn=_LINEN.apply, params=variables["params"], tx=_ADAM
    )


def _batch(rng):
    n = rng.randint(1, 4)
    return Batch(
        jnp.ones((n, 2)), jnp.zeros(n, jnp.int32), 0.5, _key(rng, rng.random() < 0.5), [jnp.ones(1)]
    )


class Spec(NamedTuple):
    """What an object kind offers: a builder, its parameter name, its jits and its mutable slots."""

    param: str
    jits: tuple
    build: Callable
    statics: tuple = ()  # (field, values): node metadata
    static_form: str | None = None
    fn_field: str | None = None
    fn_form: str | None = None
    owner: Callable | None = None  # (fresh owner, method name) for bound methods
    closure_field: str | None = None
    key_field: str | None = None
    scalar_field: str | None = None
    containers: tuple = ()  # steps to a list/tuple/dict/FrozenDict node
    dicts: tuple = ()  # steps to a dict or FrozenDict node with several keys


def _linen_owner():
    return LinenNet(3), "apply"


def _gate_owner():
    return Gate(), "forward"


BOTH = ("jax.jit", "eqx.filter_jit")
METHOD = "eqx.filter_jit method"
APPLY = "jax.jit(model.apply)"
APPLY_MUTATIONS = ("container", "key_order", "dtype")  # what `model.apply` can still compute with
_CONFIG_SLOTS = dict(
    statics=(("depth", (2, 3, 4)),),
    fn_field="act",
    owner=_gate_owner,
    key_field="key",
    scalar_field="lr",
    containers=((("attr", "layers"),),),
)
SPECS = {
    "eqx.nn.MLP": Spec(
        "model",
        ("eqx.filter_jit",),
        _mlp,
        statics=(("width_size", (2, 3, 4, 5, 6)), ("use_bias", (True, False)), ("in_size", (2, 7))),
        static_form="eqx.field(static=True)",
        fn_field="activation",
        fn_form="filter_jit non-array leaf",
        owner=_gate_owner,
        containers=((("attr", "layers"),),),
    ),
    "eqx.nn.Linear": Spec(
        "model",
        BOTH,
        _linear,
        statics=(
            ("in_features", (2, 3, 4, 9)),
            ("out_features", (2, 3, 4, 9)),
            ("use_bias", (True, False)),
        ),
        static_form="eqx.field(static=True)",
    ),
    "eqx.Module": Spec(
        "model",
        BOTH + (METHOD,),
        _block,
        statics=(("act", ("relu", "gelu", "tanh")), ("depth", (1, 2, 3))),
        static_form="eqx.field(static=True)",
        fn_field="fn",
        fn_form="eqx.field(static=True)",
        owner=_gate_owner,
        key_field="key",
        scalar_field="lr",
        containers=((("attr", "extras"), ("key", "b")),),
        dicts=((("attr", "extras"),),),
    ),
    "linen variables": Spec(
        "variables",
        BOTH + (APPLY,),
        _linen_variables,
        containers=((), (("key", "params"),), (("key", "batch_stats"),)),
        dicts=((), (("key", "params"),)),
    ),
    "linen FrozenDict": Spec(
        "variables",
        BOTH + (APPLY,),
        lambda rng: freeze(_linen_variables(rng)),
        containers=((),),
        dicts=((),),
    ),
    "TrainState": Spec(
        "state",
        BOTH,
        _train_state,
        fn_field="apply_fn",
        fn_form="struct.field(pytree_node=False)",
        owner=_linen_owner,
        closure_field="tx",
        scalar_field="step",
        containers=((("attr", "params"),),),
        dicts=((("attr", "params"),),),
    ),
    "flax.struct": Spec(
        "cfg",
        BOTH,
        _config(StructConfig),
        static_form="struct.field(pytree_node=False)",
        fn_form="struct.field(pytree_node=False)",
        **_CONFIG_SLOTS,
    ),
    "register_dataclass meta_fields": Spec(
        "cfg",
        BOTH,
        _config(MetaFieldsConfig),
        static_form="register_dataclass(meta_fields=…)",
        fn_form="register_dataclass(meta_fields=…)",
        **_CONFIG_SLOTS,
    ),
    "register_dataclass field metadata": Spec(
        "cfg",
        BOTH,
        _config(MetadataConfig),
        static_form="field(metadata={'static': True})",
        fn_form="field(metadata={'static': True})",
        **_CONFIG_SLOTS,
    ),
    "optax.adam state": Spec(
        "opt_state",
        BOTH,
        lambda rng: _ADAM.init(_params(rng)),
        containers=(
            (("index", 0), ("attr", "mu")),
            (("index", 0), ("attr", "nu"), ("key", "dense")),
        ),
        dicts=((("index", 0), ("attr", "mu")), (("index", 0), ("attr", "nu"), ("key", "dense"))),
    ),
    "optax.chain state": Spec(
        "opt_state",
        BOTH,
        lambda rng: _CHAIN.init(_params(rng)),
        containers=((), (("index", 2),)),
        dicts=((("index", 2), ("index", 0), ("attr", "mu")),),
    ),
    "NamedTuple": Spec(
        "batch",
        BOTH,
        _batch,
        key_field="key",
        scalar_field="lr",
        containers=((("attr", "extra"),),),
    ),
    "nnx.Module": Spec(
        "model",
        ("nnx.jit",),
        None,
        static_form="NNX attribute",
        fn_field="act",
        fn_form="NNX attribute",
        owner=_gate_owner,
        key_field="key",
        scalar_field="scale",
        containers=((("attr", "arrs"),),),
        statics=(("depth", (2, 3, 4)),),
    ),
    "nnx.Optimizer": Spec("optimizer", ("nnx.jit",), None, closure_field="tx"),
}


def _supports(spec: Spec, mutation: str) -> bool:
    if mutation == "container":
        return bool(spec.containers)
    if mutation == "key_order":
        return bool(spec.dicts)
    if mutation == "static":
        return bool(spec.statics)
    if mutation == "static_equal":
        return any(isinstance(v, int) for _, values in spec.statics for v in values)
    if mutation in ("fn_lambda", "fn_partial", "fn_bound_new", "fn_bound_equal"):
        return spec.fn_field is not None
    if mutation == "fn_closure":
        return spec.closure_field is not None
    if mutation == "key_type":
        return spec.key_field is not None
    if mutation in ("weak_type", "scalar_value"):
        return spec.scalar_field is not None and (mutation == "weak_type" or spec.build is not None)
    if mutation == "none":
        return spec.param != "optimizer"
    return True


def _jits(spec: Spec, mutation: str) -> tuple:
    return tuple(
        jit
        for jit in spec.jits
        if not (jit == APPLY and mutation not in APPLY_MUTATIONS)
        and not (jit == METHOD and mutation == "keyword")
    )


def _units() -> list:
    """(object kind, mutation, jit or None for a seeded choice): every supported pair once, the
    mutations whose outcome depends on the jit once per jit, and each jit of an object given to one
    of its pairs at least."""
    units = []
    for kind, spec in SPECS.items():
        supported = [m for m in MUTATIONS if _supports(spec, m)]
        units += [(kind, m, jit) for m in supported if m in JIT_DEPENDENT for jit in _jits(spec, m)]
        free = [m for m in supported if m not in JIT_DEPENDENT]
        assigned: dict = {}
        for jit in spec.jits:
            if not any(unit[0] == kind and unit[2] == jit for unit in units):
                assigned[next(m for m in free if m not in assigned and jit in _jits(spec, m))] = jit
        units += [(kind, m, assigned.get(m)) for m in free]
    return sorted(units, key=str)


UNITS = _units()
SEEDS = range(len(UNITS))


# ------------------------------------------------------------------ what a case expects
class Expect(NamedTuple):
    """How `before` or `after` must read: equal to, starting with, or containing `text`; or like
    the other side (`same`, for two alike objects that JAX compares by identity: the one side
    reads as the other, then says where they differ)."""

    how: str
    text: str = ""

    def matches(self, value, other) -> bool:
        if value is None:
            return False
        return {
            "exact": value == self.text,
            "starts": str(value).startswith(self.text),
            "contains": self.text in str(value),
            "same": _alike(value, other),
        }[self.how]


def _alike(value, other) -> bool:
    """Two texts of values that read alike: one the other, with the part that differs after it."""
    if not value or not other or value == other:
        return False  # (values JAX found unequal never read the same)
    short, long = sorted((str(value), str(other)), key=len)
    return long.startswith(short + " (")


def _exactly(before: str, after: str) -> tuple:
    return Expect("exact", before), Expect("exact", after)


class Case(NamedTuple):
    kind: str
    mutation: str
    jit: str
    param: str
    before: Any
    after: Any
    retrace: bool
    cause: str | None = None
    leaf: str | None = None
    leaf_prefix: bool = False
    shows: tuple = ()
    before_by_keyword: bool = False
    after_by_keyword: bool = False
    static_form: str | None = None
    detail: str = ""

    def swapped(self) -> Case:
        shows = (self.shows[1], self.shows[0]) if self.shows else ()
        return self._replace(
            before=self.after,
            after=self.before,
            shows=shows,
            before_by_keyword=self.after_by_keyword,
            after_by_keyword=self.before_by_keyword,
            detail=self.detail + " (reversed)",
        )


def aval_text(x) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float, jax.Array)):
        raise TypeError(x)
    if not isinstance(x, jax.Array):
        return ("f32" if isinstance(x, float) else "i32") + "[] (weak)"
    if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return f"{x.dtype}[{','.join(map(str, x.shape))}]"
    return f"{_SHORT[x.dtype.name]}[{','.join(map(str, x.shape))}]" + (
        " (weak)" if x.weak_type else ""
    )


def _path_text(steps) -> str:
    return "".join(
        f".{k}" if how == "attr" else f"[{k!r}]" if how == "key" else f"[{k}]" for how, k in steps
    )


def _with(obj, name, value):
    """`obj` with field `name` set to `value`, the way its library builds a changed copy."""
    if hasattr(obj, "_replace"):
        return obj._replace(**{name: value})
    if isinstance(obj, eqx.Module):
        new = copy.copy(obj)
        object.__setattr__(new, name, value)
        return new
    return dataclasses.replace(obj, **{name: value})


def _child(obj, step):
    how, k = step
    return getattr(obj, k) if how == "attr" else obj[k]


def _set_at(obj, steps, fn):
    """`obj` with the node reached by `steps` replaced by `fn(node)`."""
    if not steps:
        return fn(obj)
    (how, k), rest = steps[0], steps[1:]
    new = _set_at(_child(obj, steps[0]), rest, fn)
    if how == "attr" or (how == "index" and hasattr(obj, "_replace")):
        return _with(obj, k if how == "attr" else obj._fields[k], new)
    if isinstance(obj, FrozenDict):
        return FrozenDict({**obj, k: new})
    if isinstance(obj, dict):
        return {**obj, k: new}
    items = list(obj)
    items[k] = new
    return type(obj)(items)


def _other_container(node):
    if isinstance(node, FrozenDict):
        return unfreeze(node)
    if isinstance(node, dict):
        return freeze(node)
    return tuple(node) if isinstance(node, list) else list(node)


def _array_leaves(obj, floating=False):
    """(key path, array) of every non-key array leaf."""
    leaves = jax.tree_util.tree_flatten_with_path(obj)[0]
    return [
        (p, v)
        for p, v in leaves
        if isinstance(v, jax.Array)
        and not jnp.issubdtype(v.dtype, jax.dtypes.prng_key)
        and (not floating or jnp.issubdtype(v.dtype, jnp.floating))
    ]


def _replace_leaf(obj, path, new):
    return jax.tree_util.tree_map_with_path(lambda p, v: new if p == path else v, obj)


def _new_shape(shape, rng):
    if not shape:
        return (rng.randint(1, 3),)
    return shape[:-1] + (shape[-1] + rng.randint(1, 2),)


def _other_dtype(rng, dtype):
    return rng.choice([d for d in DTYPES if jnp.dtype(d) != dtype])


class Change(NamedTuple):
    obj: Any
    cause: str
    leaf: str
    shows: tuple
    detail: str


def _one_change(spec, mutation, rng, obj) -> Change | None:
    """`obj` with one change of kind `mutation`, made without touching `obj`; None where it has no
    such slot."""
    p = spec.param
    if mutation == "container":
        if not spec.containers:
            return None
        steps = rng.choice(spec.containers)
        node = functools.reduce(_child, steps, obj)
        new = _other_container(node)
        return Change(
            _set_at(obj, steps, lambda _: new),
            "structure",
            p + _path_text(steps),
            (
                Expect("starts", type(node).__name__ + " "),
                Expect("starts", type(new).__name__ + " "),
            ),
            f"{p}{_path_text(steps)}: {type(node).__name__} → {type(new).__name__}",
        )
    if mutation == "static":
        if not spec.statics:
            return None
        field, values = rng.choice(spec.statics)
        old = getattr(obj, field)
        new = rng.choice([v for v in values if v != old])
        return Change(
            _with(obj, field, new),
            "static",
            f"{p}.{field}",
            _exactly(repr(old), repr(new)),
            f"{field}: {old!r} → {new!r}",
        )
    if mutation == "fn_lambda":
        if spec.fn_field is None:
            return None
        old = getattr(obj, spec.fn_field)
        return Change(
            _with(obj, spec.fn_field, _make_lambda()),
            "static",
            f"{p}.{spec.fn_field}",
            (Expect("contains", old.__func__.__qualname__), Expect("contains", "<lambda>")),
            f"{spec.fn_field}: {old.__func__.__qualname__} → a lambda",
        )
    if mutation == "key_type":
        if spec.key_field is None:
            return None
        old = getattr(obj, spec.key_field)
        new = (
            jax.random.PRNGKey(3)
            if jnp.issubdtype(old.dtype, jax.dtypes.prng_key)
            else jax.random.key(3)
        )
        return Change(
            _with(obj, spec.key_field, new),
            "dtype",
            f"{p}.{spec.key_field}",
            _exactly(aval_text(old), aval_text(new)),
            f"{spec.key_field}: {aval_text(old)} → {aval_text(new)}",
        )
    path, leaf = rng.choice(_array_leaves(obj, floating=mutation == "dtype"))
    where = p + jax.tree_util.keystr(path)
    if mutation == "dtype":
        new, cause = leaf.astype(_other_dtype(rng, leaf.dtype)), "dtype"
    elif mutation == "shape":
        new, cause = jnp.zeros(_new_shape(leaf.shape, rng), leaf.dtype), "shape"
    else:
        new, cause = None, "structure"
    new_text = "None" if new is None else aval_text(new)
    return Change(
        _replace_leaf(obj, path, new),
        cause,
        where,
        _exactly(aval_text(leaf), new_text),
        f"{where}: {aval_text(leaf)} → {new_text}",
    )


def _overlap(a: str, b: str) -> bool:
    return a == b or any(x.startswith(y + sep) for x, y in ((a, b), (b, a)) for sep in ".[")


def _functions(mutation, spec):
    """Two callables for a function-identity mutation, with what before/after must show."""
    if mutation == "fn_lambda":
        return _make_lambda(), _make_lambda(), Expect("contains", "<lambda>")
    if mutation == "fn_partial":
        return (
            functools.partial(_scaled, 2.0),
            functools.partial(_scaled, 2.0),
            Expect("contains", "partial("),
        )
    owner, method = spec.owner()
    if mutation == "fn_bound_equal":
        return getattr(owner, method), getattr(owner, method), None
    name = getattr(owner, method).__func__.__qualname__
    return getattr(owner, method), getattr(spec.owner()[0], method), Expect("contains", name)


def _generic(kind, spec, jit, mutation, rng) -> Case:
    """A mutation of a pytree object; a callable field holds an equal but not identical bound method
    before and after (unless the mutation is of that field), which JAX's `==` finds unchanged."""
    case = _mutate(kind, spec, jit, mutation, rng)
    if spec.fn_field is None or mutation.startswith("fn_"):
        return case
    owner, method = spec.owner()
    return case._replace(
        before=_with(case.before, spec.fn_field, getattr(owner, method)),
        after=_with(case.after, spec.fn_field, getattr(owner, method)),
    )


def _equal_statics(spec):
    """(field, value, an equal value of another type) for each int or bool static."""
    return [
        (field, v, (1 if v else 0) if isinstance(v, bool) else float(v))
        for field, values in spec.statics
        for v in values
        if isinstance(v, int)
    ]


def _mutate(kind, spec, jit, mutation, rng) -> Case:
    """A mutation of a pytree object, made the way its library makes changed copies."""
    p = spec.param
    before = spec.build(rng)
    base = Case(kind, mutation, jit, p, before, before, True)
    if mutation == "key_order":
        steps = rng.choice(spec.dicts)
        node = functools.reduce(_child, steps, before)
        reordered = type(node)(dict(reversed(list(node.items()))))
        return base._replace(
            after=_set_at(before, steps, lambda _: reordered),
            retrace=False,
            detail=f"{p}{_path_text(steps)}: keys {list(node)} → {list(reordered)}",
        )
    if mutation == "static_equal":
        field, old, new = rng.choice(_equal_statics(spec))
        return base._replace(
            before=_with(before, field, old),
            after=_with(before, field, new),
            retrace=False,
            detail=f"{field}: {old!r} → {new!r}",
        )
    if mutation.startswith("fn_") and mutation != "fn_closure":
        f1, f2, shows = _functions(mutation, spec)
        case = base._replace(
            before=_with(before, spec.fn_field, f1),
            after=_with(before, spec.fn_field, f2),
            static_form=spec.fn_form,
            detail=f"{spec.fn_field}: {f1!r} / {f2!r}",
        )
        if shows is None:
            return case._replace(retrace=False)
        return case._replace(cause="static", leaf=f"{p}.{spec.fn_field}", shows=(shows, shows))
    if mutation == "fn_closure":
        return base._replace(
            after=_with(before, spec.closure_field, optax.adam(1e-3)),
            cause="static",
            leaf=f"{p}.{spec.closure_field}",
            leaf_prefix=True,
            shows=(Expect("same"), Expect("same")),
            detail=f"{spec.closure_field} = optax.adam(1e-3) built again",
        )
    if mutation == "key_type":
        (old_name, old), (new_name, new) = rng.choice(KEY_PAIRS)
        return base._replace(
            before=_with(before, spec.key_field, old),
            after=_with(before, spec.key_field, new),
            cause="dtype" if old.dtype != new.dtype else "shape",
            leaf=f"{p}.{spec.key_field}",
            shows=_exactly(aval_text(old), aval_text(new)),
            detail=f"{old_name} → {new_name}",
        )
    if mutation in ("weak_type", "scalar_value"):
        return _scalar(base, spec, jit, mutation, rng)
    if mutation == "keyword":
        by_keyword = jit != "eqx.filter_jit"
        return base._replace(
            retrace=by_keyword,
            after_by_keyword=True,
            **(
                {"cause": "structure", "leaf": p, "shows": _exactly("by position", "by keyword")}
                if by_keyword
                else {}
            ),
        )
    change = _one_change(spec, mutation, rng, before)
    return base._replace(
        after=change.obj,
        cause=change.cause,
        leaf=change.leaf,
        shows=change.shows,
        detail=change.detail,
        static_form=spec.static_form if mutation == "static" else None,
    )


def _scalar(base: Case, spec, jit, mutation, rng) -> Case:
    """A Python scalar slot (`lr = 0.5`, `step = 0`): its weak type, or its value."""
    p, field = base.param, spec.scalar_field
    current = getattr(base.before, field)
    python = rng.choice([0.5, 0.25]) if isinstance(current, float) else rng.choice([0, 1])
    dtype = jnp.float32 if isinstance(python, float) else jnp.int32
    leaf = f"{p}.{field}"
    if mutation == "scalar_value":
        other = python * 3 + 1
        before, after = _with(base.before, field, python), _with(base.before, field, other)
        if jit == "jax.jit":
            return base._replace(
                before=before, after=after, retrace=False, detail=f"{field}: {python!r} → {other!r}"
            )
        return base._replace(
            before=before,
            after=after,
            cause="static",
            leaf=leaf,
            shows=_exactly(repr(python), repr(other)),
            static_form="filter_jit non-array leaf",
            detail=f"{field}: {python!r} → {other!r}",
        )
    strong = jnp.asarray(python, dtype)
    weak = rng.choice([python, jnp.asarray(python)])
    case = base._replace(
        before=_with(base.before, field, weak),
        after=_with(base.before, field, strong),
        leaf=leaf,
        detail=f"{field}: {weak!r} → {strong!r}",
    )
    if jit.startswith("eqx.filter_jit") and not isinstance(weak, jax.Array):
        return case._replace(
            cause="static",
            shows=_exactly(repr(weak), aval_text(strong)),
            static_form="filter_jit non-array leaf",
        )
    return case._replace(cause="weak_type", shows=_exactly(aval_text(weak), aval_text(strong)))


def _set(variable, value):
    """Give an NNX Variable a new value (``set_value`` from Flax 0.12.1; ``.value =`` in 0.12.0)."""
    setter = getattr(variable, "set_value", None)
    if setter is not None:
        setter(value)
    else:
        variable.value = value


_NNX_VARIABLES = {"l1.kernel": (lambda m: m.l1, "kernel"), "l1.bias": (lambda m: m.l1, "bias")}
_OPT_VARIABLES = {
    f"opt_state[0].{moment}['l1']['{name}']": (
        lambda o, moment=moment: getattr(o.opt_state[0], moment)["l1"],
        name,
    )
    for moment in ("mu", "nu")
    for name in ("kernel", "bias")
}


def _variable(owner, name):
    return getattr(owner, name) if isinstance(owner, nnx.Module) else owner[name]


class NnxChange(NamedTuple):
    apply: Callable  # changes an NNX object in place, the same way each time
    cause: str
    leaf: str
    shows: tuple
    detail: str


def _nnx_change(kind, spec, mutation, rng, template) -> NnxChange:
    """One in-place change of kind `mutation` to an NNX object built like `template`."""
    p = spec.param
    if mutation == "static":
        old = template.depth
        new = rng.choice([v for v in dict(spec.statics)["depth"] if v != old])
        return NnxChange(
            lambda m: setattr(m, "depth", new),
            "static",
            f"{p}.depth",
            _exactly(repr(old), repr(new)),
            f"depth: {old!r} → {new!r}",
        )
    if mutation == "container":
        return NnxChange(
            lambda m: setattr(m, "arrs", nnx.data(tuple(m.arrs))),
            "structure",
            f"{p}.arrs",
            (Expect("starts", "list "), Expect("starts", "tuple ")),
            "arrs: list → tuple",
        )
    if mutation == "fn_lambda":
        fn = _make_lambda()
        return NnxChange(
            lambda m: setattr(m, "act", fn),
            "static",
            f"{p}.act",
            (Expect("contains", "Gate.forward"), Expect("contains", "<lambda>")),
            "act: a lambda",
        )
    if mutation == "key_type":
        old = template.key[...]
        new = (
            jax.random.PRNGKey(3)
            if jnp.issubdtype(old.dtype, jax.dtypes.prng_key)
            else jax.random.key(3)
        )
        return NnxChange(
            lambda m: setattr(m, "key", nnx.Variable(new)),
            "dtype",
            f"{p}.key",
            _exactly(aval_text(old), aval_text(new)),
            f"key: {aval_text(old)} → {aval_text(new)}",
        )
    if mutation == "weak_type":
        old = template.scale[...]
        new = jnp.asarray(0.5, jnp.float32) if old.weak_type else jnp.asarray(0.5)
        return NnxChange(
            lambda m: _set(m.scale, new),
            "weak_type",
            f"{p}.scale",
            _exactly(aval_text(old), aval_text(new)),
            f"scale: {aval_text(old)} → {aval_text(new)}",
        )
    variables = (
        _OPT_VARIABLES
        if kind == "nnx.Optimizer"
        else {**_NNX_VARIABLES, "arrs[0]": None, "arrs[1]": None}
    )
    name = rng.choice(sorted(variables))
    index = int(name[-2]) if name.startswith("arrs") else None
    if index is not None:
        old = template.arrs[index]
    else:
        owner, attr = variables[name]
        old = _variable(owner(template), attr)[...]
    if mutation == "dtype":
        new, cause = old.astype(_other_dtype(rng, old.dtype)), "dtype"
    elif mutation == "shape":
        new, cause = jnp.zeros(_new_shape(old.shape, rng), old.dtype), "shape"
    else:
        new, cause = None, "structure"

    def apply(m):
        if index is not None:
            m.arrs[index] = new
        elif new is None:
            setattr(owner(m), attr, None)
        else:
            _set(_variable(owner(m), attr), new)

    new_text = "None" if new is None else aval_text(new)
    return NnxChange(
        apply,
        cause,
        f"{p}.{name}",
        _exactly(aval_text(old), new_text),
        f"{name}: {aval_text(old)} → {new_text}",
    )


def _nnx_builder(kind, rng, scale=None):
    """A function building NNX objects alike (same seed, width, key kind, optax transformation)."""
    width, seed, typed = rng.randint(2, 4), rng.randrange(100), rng.random() < 0.5
    scale = jnp.asarray(0.5, jnp.float32) if scale is None else scale
    tx = optax.adam(1e-3)
    gate = Gate()

    def build(fn=None, opt_tx=tx):
        act = gate.forward if fn is None else fn
        model = NnxNet(nnx.Rngs(seed), width, act, _key(random.Random(seed), typed), scale)
        return nnx.Optimizer(model, opt_tx, wrt=nnx.Param) if kind == "nnx.Optimizer" else model

    return build


def _nnx(kind, spec, mutation, rng) -> Case:
    """A mutation of an NNX module or optimizer: two objects built alike, the second one changed in
    place."""
    p = spec.param
    build = _nnx_builder(kind, rng, scale=jnp.asarray(0.5) if mutation == "weak_type" else None)
    before = build()
    base = Case(kind, mutation, "nnx.jit", p, before, before, True)
    if mutation == "keyword":
        return base._replace(
            after_by_keyword=True,
            cause="structure",
            leaf=p,
            shows=_exactly("by position", "by keyword"),
        )
    if mutation == "fn_closure":
        return base._replace(
            after=build(opt_tx=optax.adam(1e-3)),
            cause="static",
            leaf=f"{p}.tx",
            leaf_prefix=True,
            shows=(Expect("same"), Expect("same")),
            detail="nnx.Optimizer(model, optax.adam(1e-3)) again",
        )
    if mutation.startswith("fn_"):
        act, act2, shows = _functions(mutation, spec)
        case = base._replace(
            before=build(act),
            after=build(act2),
            static_form=spec.fn_form,
            detail=f"act: {act!r} / {act2!r}",
        )
        if shows is None:
            return case._replace(retrace=False)
        return case._replace(cause="static", leaf=f"{p}.act", shows=(shows, shows))
    after = build()
    if mutation == "static_equal":
        before.depth, after.depth = 2, 2.0
        return base._replace(after=after, retrace=False, detail="depth: 2 → 2.0")
    change = _nnx_change(kind, spec, mutation, rng, before)
    change.apply(after)
    return base._replace(
        after=after,
        cause=change.cause,
        leaf=change.leaf,
        shows=change.shows,
        detail=change.detail,
        static_form=spec.static_form if mutation == "static" else None,
    )


def generate(seed: int) -> Case:
    """The case of `seed`: the unit at its place in its round's shuffled order, details from
    `seed`."""
    units = list(UNITS)
    random.Random(seed // len(units)).shuffle(units)
    kind, mutation, jit = units[seed % len(units)]
    rng = random.Random(seed)
    spec = SPECS[kind]
    jit = jit or rng.choice(_jits(spec, mutation))
    case = (
        _nnx(kind, spec, mutation, rng)
        if spec.build is None
        else _generic(kind, spec, jit, mutation, rng)
    )
    if jit == METHOD:
        case = case._replace(param="self", leaf=case.leaf and "self" + case.leaf[len(spec.param) :])
    symmetric = mutation not in ("keyword", "fn_closure")
    return case.swapped() if symmetric and rng.random() < 0.5 else case


# ------------------------------------------------------------------ running a case
def _body(param: str, runs: list):
    """The traced function, its one parameter named as users name such an object."""

    def model(model):
        runs.append(param)

    def variables(variables):
        runs.append(param)

    def state(state):
        runs.append(param)

    def cfg(cfg):
        runs.append(param)

    def opt_state(opt_state):
        runs.append(param)

    def batch(batch):
        runs.append(param)

    def optimizer(optimizer):
        runs.append(param)

    return locals()[param]


def _runner(jit: str, param: str, first):
    """(call(obj, by_keyword), the list each traced body run appends to, the function's qualified
    name)."""
    if jit == METHOD:
        cls = type(first)
        return (lambda obj, by_keyword: obj.run()), cls.runs, f"{cls.__qualname__}.run"
    if jit == APPLY:
        width = first["params"]["Dense_0"]["kernel"].shape[1]
        step = jax.jit(
            LinenNet(width).apply
        )  # a new instance: its bound `apply` is unequal to earlier ones
        _LINEN_RUNS.clear()
        x = jnp.ones((1, 2))
        return (lambda obj, by_keyword: step(obj, x)), _LINEN_RUNS, "Module.apply"
    runs: list = []
    body = _body(param, runs)
    step = JITS[jit](body)
    return (
        (lambda obj, by_keyword: step(**{param: obj}) if by_keyword else step(obj)),
        runs,
        body.__qualname__,
    )


def _traces(jt, function: str) -> list[dict]:
    """The function's recorded events, which must all be traces: no compile here happens without
    one."""
    df = jt.log(internal=False)
    df = df[df["function"] == function]
    assert df["kind"].tolist() == ["trace"] * len(df), df[["kind", "cause", "leaf", "explanation"]]
    columns = ["cause", "leaf", "before", "after", "explanation", "hint"]
    return [
        {c: (None if v != v else v) for c, v in zip(columns, row)}
        for row in df[columns].itertuples(index=False)
    ]


def _check_retrace(what, event, cause, leaf, shows, leaf_prefix=False):
    leaf_ok = event["leaf"] is not None and (
        event["leaf"] == leaf or (leaf_prefix and event["leaf"].startswith(leaf + "."))
    )
    assert (event["cause"], leaf_ok) == (cause, True), (
        f"{what}: expected {cause} at {leaf}, got {event}"
    )
    expect_before, expect_after = shows
    assert expect_before.matches(event["before"], event["after"]), (
        f"{what}: before {expect_before}, got {event}"
    )
    assert expect_after.matches(event["after"], event["before"]), (
        f"{what}: after {expect_after}, got {event}"
    )


def _describe(case: Case) -> str:
    return f"{case.kind} × {case.mutation} × {case.jit}: {case.detail or '-'}"


@pytest.mark.parametrize("seed", SEEDS)
def test_one_mutation_of_a_library_object(jt, seed):
    case = generate(seed)
    call, runs, function = _runner(case.jit, case.param, case.before)
    call(case.before, case.before_by_keyword)
    call(case.after, case.after_by_keyword)
    call(case.before, case.before_by_keyword)
    what = _describe(case)
    traces = _traces(jt, function)
    assert jt.faults() == {}, f"{what}: {jt.faults()}"

    assert len(runs) == (2 if case.retrace else 1), (
        f"ground truth: JAX traced {len(runs)}× for {what}"
    )
    assert len(traces) == len(runs), f"{what}: JAX traced {len(runs)}×, recorded {traces}"
    assert [t["cause"] for t in traces][:1] == ["first"], f"{what}: {traces}"
    assert "unknown" not in [t["cause"] for t in traces], f"{what}: {traces}"
    if case.retrace:
        _check_retrace(what, traces[1], case.cause, case.leaf, case.shows, case.leaf_prefix)


def test_every_object_mutation_and_jit_is_generated():
    cases = [generate(seed) for seed in SEEDS]
    assert len(SEEDS) >= len(UNITS)
    assert {c.kind for c in cases} == set(SPECS)
    assert {c.mutation for c in cases} == set(MUTATIONS)
    assert {c.jit for c in cases} == set(JITS) | {METHOD, APPLY}
    assert {(c.kind, c.mutation) for c in cases} == {(k, m) for k, m, _ in UNITS}
    for kind, mutation, jit in UNITS:
        if jit is not None:
            assert any((c.kind, c.mutation, c.jit) == (kind, mutation, jit) for c in cases), (
                kind,
                mutation,
                jit,
            )
    for kind, spec in SPECS.items():
        assert {c.jit for c in cases if c.kind == kind} == set(spec.jits), kind
    assert {c.static_form for c in cases if c.retrace and c.cause == "static"} >= set(STATIC_FORMS)
    no_retrace = {(c.mutation, c.jit) for c in cases if not c.retrace}
    assert {
        ("fn_bound_equal", "jax.jit"),
        ("fn_bound_equal", "eqx.filter_jit"),
        ("fn_bound_equal", "nnx.jit"),
        ("scalar_value", "jax.jit"),
        ("keyword", "eqx.filter_jit"),
        ("static_equal", "jax.jit"),
        ("static_equal", "eqx.filter_jit"),
        ("static_equal", "nnx.jit"),
        ("key_order", "jax.jit"),
        ("key_order", "eqx.filter_jit"),
    } <= no_retrace
    assert all(c.retrace == (c.cause is not None) for c in cases)
    assert all(c.shows for c in cases if c.retrace)


# ------------------------------------------------------------------ two changes in a row
CHAIN_MUTATIONS = ("container", "static", "fn_lambda", "key_type", "dtype", "shape", "none")
NNX_CHAIN_MUTATIONS = CHAIN_MUTATIONS + ("weak_type",)
CHAIN_KINDS = sorted(kind for kind in SPECS if kind != "nnx.Optimizer")
CHAIN_SEEDS = range(3 * len(CHAIN_KINDS))


def _with_equal_bound_method(spec, owner, obj):
    """`obj` holding a fresh bound method of `owner` in its callable field (equal to the last one,
    not identical), unless it holds a lambda."""
    if spec.fn_field is None or getattr(getattr(obj, spec.fn_field), "__name__", "") == "<lambda>":
        return obj
    return _with(obj, spec.fn_field, getattr(*owner))


def generate_chain(seed: int):
    """Object A, B = A with one change, C = A or B with another change at a leaf of its own."""
    rng = random.Random(10_000 + seed)
    kind = CHAIN_KINDS[seed % len(CHAIN_KINDS)]
    spec = SPECS[kind]
    if spec.build is None:
        return _nnx_chain(kind, spec, rng)
    jit = rng.choice([jit for jit in spec.jits if jit != APPLY])
    owner = spec.owner() if spec.fn_field is not None else None
    a = _with_equal_bound_method(spec, owner, spec.build(rng))
    while True:
        m1, m2 = rng.choice(CHAIN_MUTATIONS), rng.choice(CHAIN_MUTATIONS)
        first = _one_change(spec, m1, rng, a)
        from_b = rng.random() < 0.5
        second = first and _one_change(spec, m2, rng, first.obj if from_b else a)
        if second and not _overlap(first.leaf, second.leaf):
            break
    b = _with_equal_bound_method(spec, owner, first.obj)
    c = _with_equal_bound_method(spec, owner, second.obj)
    param = "self" if jit == METHOD else spec.param
    changes = tuple(
        change._replace(leaf=param + change.leaf[len(spec.param) :]) for change in (first, second)
    )
    return kind, jit, param, (a, b, c), changes, from_b


def _nnx_chain(kind, spec, rng):
    build = _nnx_builder(kind, rng)
    a = build()
    while True:
        first, second = (
            _nnx_change(kind, spec, rng.choice(NNX_CHAIN_MUTATIONS), rng, a) for _ in range(2)
        )
        if not _overlap(first.leaf, second.leaf):
            break
    from_b = rng.random() < 0.5
    b, c = build(), build()
    first.apply(b)
    for change in (first, second) if from_b else (second,):
        change.apply(c)
    return kind, "nnx.jit", spec.param, (a, b, c), (first, second), from_b


@pytest.mark.parametrize("seed", CHAIN_SEEDS)
def test_two_changes_in_a_row_each_named_against_its_closest_key(jt, seed):
    kind, jit, param, objects, (first, second), from_b = generate_chain(seed)
    call, runs, function = _runner(jit, param, objects[0])
    for obj in objects + objects:
        call(obj, False)
    what = (
        f"{kind} × {jit}: B = A with {first.detail}; C = {'B' if from_b else 'A'} with "
        f"{second.detail}"
    )
    traces = _traces(jt, function)
    assert jt.faults() == {}, f"{what}: {jt.faults()}"

    assert len(runs) == 3, f"ground truth: JAX traced {len(runs)}× for {what}"
    assert len(traces) == 3, f"{what}: JAX traced 3×, recorded {traces}"
    assert traces[0]["cause"] == "first", f"{what}: {traces}"
    _check_retrace(what + " [B against A]", traces[1], first.cause, first.leaf, first.shows)
    _check_retrace(
        what + f" [C against {'B' if from_b else 'A'}]",
        traces[2],
        second.cause,
        second.leaf,
        second.shows,
    )


def test_every_object_kind_is_changed_twice_in_a_row():
    chains = [generate_chain(seed) for seed in CHAIN_SEEDS]
    assert {kind for kind, *_ in chains} == set(CHAIN_KINDS)
    assert {from_b for *_, from_b in chains} == {True, False}
    causes = {change.cause for *_, changes, _ in chains for change in changes}
    assert causes >= {"structure", "static", "dtype", "shape"}
