"""Hints followed mechanically on every library's programs (issue 55).

``test_hints_proven.py`` proves each instruction on one small program written for it. This file
generates the programs instead: five libraries (Equinox, Flax NNX, Flax linen, Optax, Diffrax),
each a real model or optimizer from the library, jitted the way its users jit (``eqx.filter_jit``,
``nnx.jit``, ``jax.jit``), times every way a call can vary (`VARIATIONS`). For each pair:

* the program runs as written, recorded; the event after ``step``'s first trace (or the first trace
  itself, for a variation of the body) is JAX's: a new trace or compile, read from the log;
* every instruction that event gives is applied by `FIXES`, chosen by the hint's id alone, with
  the values the hint's own text names (a dtype, a parameter) — the test does not know which
  variation made it;
* the fixed program runs recorded: ``step`` traces once and compiles no more, and each call's
  outputs equal the original's (padded rows sliced off), except the calls whose inputs the fix
  changed in value (a cast of float64 to float32).

Where every instruction's precondition fails (a value change that passing it always cannot
remove, a conversion that makes another abstract value, another static object, a library's own
loop), the event gives no instruction, and `WITHHELD` checks the instruction it stands in for:
applied anyway, it still retraces. Nested, ``step`` called inside another jitted function: its
rows carry no hint and the outer function's fix stops both. `EXPECTED` pins what each pair is
told, so a change in the advice is a reviewed change here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
import warnings
from collections.abc import Callable
from typing import Any

import diffrax
import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

with warnings.catch_warnings():
    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # Flax 0.12.0 reads `jax.array_ref`, deprecated in JAX 0.8
    from flax import nnx

from _support import describe, step_rows

from jaxtrace_nb._diagnosis._hints import HINTS
from jaxtrace_nb._jax._internals import trace_context_function, trace_context_names

WIDTH = 3
ROWS = 4


# ------------------------------------------------------------------ the libraries
@dataclasses.dataclass(frozen=True)
class Library:
    """One library's program: `build` makes its state from the library's own objects, `apply`
    maps that state and a batch ``x`` of shape ``(n, WIDTH)`` to ``{"rows": (n, ...), "state":
    ...}`` (only "rows" has the batch axis), and `jit` jits a step the way its users do."""

    name: str
    build: Callable[[], Any]
    apply: Callable[[Any, jax.Array], dict]
    jit: Callable[[Callable], Callable]


def _jax_jit(step):
    return jax.jit(step, static_argnames=("act",))


def _equinox():
    model = eqx.nn.MLP(WIDTH, WIDTH, 8, 2, key=jax.random.key(0))
    return Library(
        "equinox",
        lambda: model,
        lambda model, x: {"rows": jax.vmap(model)(x), "state": ()},
        eqx.filter_jit,
    )


def _flax_nnx():
    def build():
        return nnx.Sequential(
            nnx.Linear(WIDTH, 8, rngs=nnx.Rngs(0)),
            nnx.relu,
            nnx.Linear(8, WIDTH, rngs=nnx.Rngs(1)),
        )

    return Library(
        "flax_nnx",
        build,
        lambda model, x: {"rows": model(x), "state": ()},
        lambda step: nnx.jit(step, static_argnames=("act",)),
    )


def _flax_linen():
    module = nn.Sequential([nn.Dense(8), nn.relu, nn.Dense(WIDTH)])
    params = module.init(jax.random.key(0), jnp.zeros((1, WIDTH)))
    return Library(
        "flax_linen",
        lambda: params,
        lambda params, x: {"rows": module.apply(params, x), "state": ()},
        _jax_jit,
    )


def _optax():
    optim = optax.adamw(1e-2)
    params = {"w": jnp.linspace(-1.0, 1.0, WIDTH * WIDTH).reshape(WIDTH, WIDTH), "b": jnp.ones(3)}

    def apply(state, x):
        params, opt_state = state

        def loss(p):  # a row of zeros (padding) adds nothing to the loss nor to its gradient
            return jnp.sum((x @ p["w"]) ** 2)

        grads = jax.grad(loss)(params)
        updates, opt_state = optim.update(grads, opt_state, params)
        return {"rows": x @ params["w"], "state": optax.apply_updates(params, updates)}

    return Library("optax", lambda: (params, optim.init(params)), apply, _jax_jit)


def _diffrax():
    def apply(rate, x):
        term = diffrax.ODETerm(lambda t, y, args: -args * y)
        solution = diffrax.diffeqsolve(
            term, diffrax.Tsit5(), t0=0.0, t1=1.0, dt0=0.1, y0=x * 1.0, args=rate
        )
        return {"rows": solution.ys[-1], "state": ()}

    return Library("diffrax", lambda: jnp.asarray(0.5), apply, _jax_jit)


LIBRARIES = {
    lib.name: lib for lib in (_equinox(), _flax_nnx(), _flax_linen(), _optax(), _diffrax())
}


# ------------------------------------------------------------------ calls and programs
@dataclasses.dataclass(frozen=True)
class Call:
    """One call of ``step(state, x, key, scale=1.0, bias=None, act=jnp.tanh)``: the arguments
    passed (by parameter name), which of them by position, a context it runs in, and whether it
    jits a new ``step`` first."""

    values: dict[str, Any]
    positional: tuple[str, ...] = ("x", "key")
    context: Callable[[], Any] | None = None
    fresh_jit: bool = False


def _key(seed: int, typed: bool = True):
    return jax.random.key(seed) if typed else jax.random.PRNGKey(seed)


def _batch(rows: int = ROWS, dtype=jnp.float32):
    return (np.arange(rows * WIDTH).reshape(rows, WIDTH) % 5).astype(dtype)


def _base(**values) -> dict:
    return {"x": _batch(), "key": _key(0), **values}


def _body(library: Library, loop: str | None):
    def step(state, x, key, scale=1.0, bias=None, act=jnp.tanh):
        out = library.apply(state, x)
        rows = act(out["rows"]) * scale + 1e-3 * jax.random.normal(key, out["rows"].shape)
        if bias is not None:
            rows = rows + _offset(bias)
        if loop == "unrolled":
            for i in range(40):
                rows = _loop_body(i, rows)
        elif loop == "rolled":
            rows = jax.lax.fori_loop(0, 40, _loop_body, rows)
        return {"rows": rows, "state": out["state"]}

    return step


def _outer(inner):
    def outer(state, x, key, scale=1.0, bias=None, act=jnp.tanh):
        return inner(state, x, key, scale=scale, bias=bias, act=act)

    return outer


def _offset(bias):
    """One row added to every output row, whatever kind of container `bias` is: its numbers
    summed in rows of `WIDTH` (a scalar where they are fewer)."""
    flat = jnp.concatenate([jnp.ravel(jnp.asarray(leaf)) for leaf in jax.tree.leaves(bias)])
    return flat.reshape(-1, WIDTH).sum(0) if flat.size % WIDTH == 0 else flat.sum()


def _loop_body(i, rows):
    return jnp.sin(rows) * 0.9 + 0.01 * i


@dataclasses.dataclass(frozen=True)
class Program:
    """A variation's calls on one library, and the body's loop (None, "unrolled" or "rolled")."""

    calls: tuple[Call, ...]
    loop: str | None = None
    place_state: Any = None  # a placement for the library's state before the first call
    nested: bool = False  # `step` called inside another function jitted the same way, `outer`


def run(library: Library, program: Program) -> list:
    state = library.build()
    if program.place_state is not None:
        if isinstance(state, nnx.Module):
            nnx.update(state, jax.device_put(nnx.state(state), program.place_state))
        else:
            state = jax.device_put(state, program.place_state)
    step = None
    outputs = []
    for call in program.calls:
        if step is None or call.fresh_jit:
            step = library.jit(_body(library, program.loop))
            if program.nested:
                step = library.jit(_outer(step))
        args = [call.values[name] for name in call.positional if name in call.values]
        kwargs = {k: v for k, v in call.values.items() if k not in call.positional}
        with call.context() if call.context else contextlib.nullcontext():
            outputs.append(step(state, *args, **kwargs))
    return outputs


# ------------------------------------------------------------------ the variations
class Scaled:
    """A callable whose class defines no ``__eq__``: compared by identity."""

    def __call__(self, rows):
        return rows * 0.5


def _scaled_tanh(rows):
    return jnp.tanh(rows) * 0.5


def _same_name_act():
    def act(rows):
        return jnp.tanh(rows) * 0.5

    return act


def _mesh_sharding():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("batch",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))


def _x64():
    return jax.enable_x64(True)


VARIATIONS: dict[str, Callable[[], Program]] = {
    "shape": lambda: Program((Call(_base()), Call(_base(x=_batch(2))))),
    "dtype": lambda: Program(
        (Call(_base(x=_batch(dtype=np.int32))), Call(_base(x=_batch(dtype=np.float32))))
    ),
    "x64": lambda: Program(
        (Call(_base(x=_batch(dtype=np.float64)), context=_x64), Call(_base(), context=_x64))
    ),
    "key_kind": lambda: Program((Call(_base(key=_key(0, typed=False))), Call(_base(key=_key(1))))),
    "weak_scale": lambda: Program(
        (Call(_base(scale=0.5)), Call(_base(scale=jnp.asarray(0.25, jnp.float32))))
    ),
    "bias_none": lambda: Program((Call(_base(bias=None)), Call(_base(bias=jnp.full(WIDTH, 0.5))))),
    "scale_omitted": lambda: Program((Call(_base()), Call(_base(scale=1.0)))),
    "by_keyword": lambda: Program((Call(_base()), Call(_base(), positional=("x",)))),
    "array_then_number": lambda: Program(
        (Call(_base(scale=jnp.asarray(0.5, jnp.float32))), Call(_base(scale=0.25)))
    ),
    "weak_inner": lambda: Program(
        (Call(_base(bias={"b": 0.5})), Call(_base(bias={"b": jnp.asarray(0.25, jnp.float32)})))
    ),
    "number_value": lambda: Program((Call(_base(scale=0.5)), Call(_base(scale=0.25)))),
    "container_type": lambda: Program(
        (
            Call(_base(bias=(jnp.ones(WIDTH), jnp.ones(WIDTH)))),
            Call(_base(bias=[jnp.ones(WIDTH), jnp.ones(WIDTH)])),
        )
    ),
    "container_kind": lambda: Program(
        (Call(_base(bias=jnp.full(WIDTH, 0.5, jnp.float32))), Call(_base(bias=[0.5] * WIDTH)))
    ),
    # An array and a list holding one: `jnp.asarray` of the list has another shape.
    "container_around": lambda: Program(
        (Call(_base(bias=jnp.ones(WIDTH))), Call(_base(bias=[jnp.ones(WIDTH)])))
    ),
    "new_function": lambda: Program(
        (Call(_base(), fresh_jit=True), Call(_base(x=_batch() + 1), fresh_jit=True))
    ),
    "lambda_act": lambda: Program(
        tuple(Call(_base(act=lambda rows: jnp.tanh(rows) * 0.5)) for _ in range(2))
    ),
    "partial_act": lambda: Program(
        tuple(Call(_base(act=functools.partial(jnp.multiply, 0.5))) for _ in range(2))
    ),
    "instance_act": lambda: Program(tuple(Call(_base(act=Scaled())) for _ in range(2))),
    "jit_act": lambda: Program(tuple(Call(_base(act=jax.jit(_scaled_tanh))) for _ in range(2))),
    "same_name_act": lambda: Program(tuple(Call(_base(act=_same_name_act())) for _ in range(2))),
    "committed": lambda: Program(
        (Call(_base()), Call(_base(x=jax.device_put(_batch(), jax.devices()[0]))))
    ),
    "mesh": lambda: Program(
        (Call(_base()), Call(_base(x=jax.device_put(_batch(), _mesh_sharding()))))
    ),
    "precision": lambda: Program(
        (Call(_base()), Call(_base(), context=lambda: jax.default_matmul_precision("highest")))
    ),
    "unrolled_loop": lambda: Program((Call(_base()),), loop="unrolled"),
    # A precondition fails: no instruction.
    "scale_value": lambda: Program((Call(_base()), Call(_base(scale=2.0)))),
    "act_value": lambda: Program((Call(_base(act=jnp.tanh)), Call(_base(act=jnp.sin)))),
}


# ------------------------------------------------------------------ the fixes, by hint id
@dataclasses.dataclass(frozen=True)
class Told:
    """What the event told: its hint ids, the changed leaf, and the hints' texts."""

    hint_ids: tuple[str, ...]
    leaf: str
    hint: str


def _parameter(told: Told) -> str:
    match = re.match(r"\w+", told.leaf or "")
    assert match, f"no parameter named in the leaf {told.leaf!r}"
    return match.group(0)


def _each(calls, name, change):
    return tuple(
        dataclasses.replace(c, values={**c.values, name: change(c.values[name])})
        if name in c.values
        else c
        for c in calls
    )


def _at_leaf(told: Told, change: Callable) -> Callable:
    """`change` applied to the leaf the event names inside its parameter (``bias['b']``,
    ``bias[0]``), or to the parameter itself."""
    steps = [
        key if key is not None else int(index)
        for key, index in (
            (m.group(1), m.group(2))
            for m in re.finditer(r"\['([^']*)'\]|\[(\d+)\]", told.leaf[len(_parameter(told)) :])
        )
    ]

    def apply(value, steps=steps):
        if not steps:
            return change(value)
        head, *rest = steps
        if isinstance(value, dict):
            return {**value, head: apply(value[head], rest)}
        items = list(value)
        items[head] = apply(items[head], rest)
        return type(value)(items)

    return apply


def _fix_asarray(program: Program, told: Told) -> Program:
    """The conversion the hint's text shows, `jnp.asarray(..., jnp.<dtype>)` or without a dtype,
    applied to the leaf it names in every call."""
    (dtype,) = re.findall(r"jnp\.asarray\([^,)]+(?:, jnp\.(\w+))?\)", told.hint)
    change = _at_leaf(told, lambda v: jnp.asarray(v, dtype or None))
    return dataclasses.replace(program, calls=_each(program.calls, _parameter(told), change))


def _fix_cast_to_first(program: Program, told: Told) -> Program:
    name = _parameter(told)
    dtype = np.asarray(program.calls[0].values[name]).dtype
    return dataclasses.replace(
        program, calls=_each(program.calls, name, lambda v: jnp.asarray(v, dtype))
    )


def _fix_typed_keys(program: Program, told: Told) -> Program:
    name = _parameter(told)

    def typed(key):
        return (
            key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)
        )

    return dataclasses.replace(program, calls=_each(program.calls, name, typed))


def _fix_pad(program: Program, told: Told) -> Program:
    name = _parameter(told)
    rows = max(np.shape(c.values[name])[0] for c in program.calls)
    return dataclasses.replace(
        program,
        calls=_each(
            program.calls,
            name,
            lambda v: np.pad(v, ((0, rows - v.shape[0]),) + ((0, 0),) * (v.ndim - 1)),
        ),
    )


def _fix_not_none(program: Program, told: Told) -> Program:
    name = _parameter(told)
    array = next(c.values[name] for c in program.calls if c.values.get(name) is not None)
    return dataclasses.replace(
        program,
        calls=_each(program.calls, name, lambda v: jnp.zeros_like(array) if v is None else v),
    )


def _fix_pass_always(program: Program, told: Told) -> Program:
    name = _parameter(told)
    value = inspect.signature(_body(None, None)).parameters[name].default  # passed always
    return dataclasses.replace(
        program,
        calls=tuple(
            c if name in c.values else dataclasses.replace(c, values={**c.values, name: value})
            for c in program.calls
        ),
    )


def _fix_by_keyword(program: Program, told: Told) -> Program:
    name = _parameter(told)
    return dataclasses.replace(
        program,
        calls=tuple(
            dataclasses.replace(c, positional=tuple(p for p in c.positional if p != name))
            for c in program.calls
        ),
    )


def _fix_first_type(program: Program, told: Told) -> Program:
    name = _parameter(told)
    first = type(program.calls[0].values[name])
    return dataclasses.replace(program, calls=_each(program.calls, name, first))


def _fix_jit_once(program: Program, told: Told) -> Program:
    return dataclasses.replace(
        program,
        calls=tuple(dataclasses.replace(c, fresh_jit=i == 0) for i, c in enumerate(program.calls)),
    )


def _fix_reuse(program: Program, told: Told) -> Program:
    name = _parameter(told)
    first = program.calls[0].values[name]
    return dataclasses.replace(program, calls=_each(program.calls, name, lambda _: first))


def _fix_commit(program: Program, told: Told) -> Program:
    name = _parameter(told)
    device = jax.devices()[0]
    return dataclasses.replace(
        program, calls=_each(program.calls, name, lambda v: jax.device_put(v, device))
    )


def _fix_on_mesh(program: Program, told: Told) -> Program:
    name = _parameter(told)
    placed = [
        c.values[name].sharding
        for c in program.calls
        if isinstance(getattr(c.values[name], "sharding", None), jax.sharding.NamedSharding)
    ]
    return dataclasses.replace(
        program, calls=_each(program.calls, name, lambda v: jax.device_put(v, placed[0]))
    )


def _fix_commit_module_too(program: Program, told: Told) -> Program:
    return dataclasses.replace(_fix_commit(program, told), place_state=jax.devices()[0])


def _fix_mesh_module_too(program: Program, told: Told) -> Program:
    on_mesh = _fix_on_mesh(program, told)
    (mesh,) = {c.values[_parameter(told)].sharding.mesh for c in on_mesh.calls}
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return dataclasses.replace(on_mesh, place_state=replicated)


def _fix_context_once(program: Program, told: Told) -> Program:
    (context,) = {c.context for c in program.calls if c.context is not None}
    return dataclasses.replace(
        program, calls=tuple(dataclasses.replace(c, context=context) for c in program.calls)
    )


def _fix_roll_loop(program: Program, told: Told) -> Program:
    return dataclasses.replace(program, loop="rolled")


FIXES: dict[str, Callable[[Program, Told], Program]] = {
    "weak_type.argument": _fix_asarray,
    "weak_type.inner": _fix_asarray,
    "dtype.x64": _fix_asarray,
    "dtype.cast": _fix_cast_to_first,
    "dtype.key": _fix_typed_keys,
    "shape": _fix_pad,
    "structure.none": _fix_not_none,
    "structure.not_passed": _fix_pass_always,
    "structure.call": _fix_by_keyword,
    "structure.container_type": _fix_first_type,
    "structure.container_kind": _fix_asarray,
    "kind.static_to_array": _fix_asarray,
    "kind.array_to_static": _fix_asarray,
    "static.filter_jit_number": _fix_asarray,
    "new_function": _fix_jit_once,
    "identity.lambda": _fix_reuse,
    "identity.partial": _fix_reuse,
    "identity.jit": _fix_reuse,
    "identity.same_name": _fix_reuse,
    "identity.instance": _fix_reuse,
    "sharding": _fix_commit,
    "sharding.mesh": _fix_on_mesh,
    "sharding.nnx": _fix_commit_module_too,
    "sharding.mesh_nnx": _fix_mesh_module_too,
    "context": _fix_context_once,
    "unrolled_loop": _fix_roll_loop,
}


def _x64_named() -> bool:
    """Whether this JAX names `jax_enable_x64` in the trace context jaxtrace_nb reads."""
    context = trace_context_function()()
    return "jax_enable_x64" in trace_context_names(len(context))


# What each variation is told, on every library unless `EXPECTED_ON` says otherwise: the hint ids
# of the event after the first trace (None: JAX did not trace or compile again).
EXPECTED = {
    "shape": "shape",
    "dtype": "dtype.cast",
    "x64": "dtype.x64",
    "key_kind": "dtype.key",
    "weak_scale": "weak_type.argument",
    "array_then_number": "weak_type.argument",
    "weak_inner": "weak_type.inner",
    "number_value": None,
    "bias_none": "structure.none",
    "scale_omitted": "structure.not_passed",
    "by_keyword": "structure.call",
    "container_type": "structure.container_type",
    "container_kind": "structure.container_kind",
    "container_around": "structure.changed",
    "new_function": "new_function",
    "lambda_act": "identity.lambda",
    "partial_act": "identity.partial",
    "instance_act": "identity.instance",
    "jit_act": "identity.jit",
    "same_name_act": "identity.same_name",
    "committed": "sharding",
    "mesh": "sharding.mesh",
    "precision": "context",
    "unrolled_loop": "unrolled_loop",
    # Through `jax.jit` and `nnx.jit` a Python float is traced: passing it always stops the
    # retrace, whatever its value. Through `eqx.filter_jit` it is static (below).
    "scale_value": "structure.not_passed",
    "act_value": "identity.other",
}
EXPECTED_ON = {
    # `eqx.filter_jit` keeps a Python number static: its kind and its value are the key.
    ("equinox", "weak_scale"): "kind.static_to_array",
    ("equinox", "number_value"): "static.filter_jit_number",
    ("equinox", "array_then_number"): "kind.array_to_static",
    ("equinox", "weak_inner"): "kind.static_to_array",
    ("equinox", "scale_value"): "structure.not_passed_value",
    # It binds its arguments to the signature: by position or by keyword is one call.
    ("equinox", "by_keyword"): None,
    # Its list of Python floats is static: `jnp.asarray` makes float32 of it only without x64,
    # which the trace context names from JAX 0.10.2 on (before: explained, not told).
    ("equinox", "container_kind"): (
        "structure.container_kind" if _x64_named() else "structure.changed"
    ),
    # `nnx.jit` writes its outputs back into the module: the module is placed too.
    ("flax_nnx", "committed"): "sharding.nnx",
    ("flax_nnx", "mesh"): "sharding.mesh_nnx",
}
# Explanations that stand in for an instruction whose precondition failed, by variation: the hint
# id told, and the instruction withheld. Applied anyway, that instruction leaves the retrace
# (`test_explanation_where_the_instruction_would_fail`).
WITHHELD = {
    "scale_value": ("structure.not_passed_value", "structure.not_passed"),
    "container_around": ("structure.changed", "structure.container_kind"),
}

PAIRS = [(lib, var) for lib in LIBRARIES for var in VARIATIONS]


def _recorded(jt, library: Library, program: Program):
    """The program's outputs, and its `step` rows."""
    with jt.watch() as watch:
        outputs = run(library, program)
    return outputs, step_rows(watch)


def _told(rows, program: Program) -> Told | None:
    """What the event after `step`'s first trace told (for a loop in the body, the first trace's);
    None where JAX neither traced nor compiled again."""
    at = 0 if program.loop else 1
    if len(rows) <= at:
        return None
    row = rows.iloc[at]
    ids = tuple((row["hint_ids"] or "").split(",")) if row["hint_ids"] else ()
    return Told(ids, row["leaf"] or "", row["hint"] or "")


def _leaves(output) -> list:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(output)]


def _narrowed(before, after) -> bool:
    """Whether the fix made a float64 array float32: the computation is another one."""
    return (
        isinstance(before, (np.ndarray, jax.Array))
        and before.dtype == np.float64
        and np.asarray(after).dtype != np.float64
    )


def _assert_same_outputs(program: Program, fixed: Program, outputs, fixed_outputs) -> None:
    """Each call's outputs equal the original's (rows the fix padded sliced off), but for a call
    whose inputs the fix narrowed."""
    compared = 0
    for call, fixed_call, out, fixed_out in zip(program.calls, fixed.calls, outputs, fixed_outputs):
        if any(
            _narrowed(call.values.get(name), fixed_call.values.get(name)) for name in call.values
        ):
            continue
        rows = out["rows"].shape[0]
        fixed_out = {**fixed_out, "rows": fixed_out["rows"][:rows]}
        for a, b in zip(_leaves(out), _leaves(fixed_out), strict=True):
            np.testing.assert_array_equal(a, b)
        compared += 1
    assert compared, "no call's outputs could be compared"


@pytest.mark.parametrize(("library", "variation"), PAIRS)
def test_hint_followed_stops_the_retrace(jt, library, variation):
    """The pair is told what `EXPECTED` says; every instruction it gives, applied by `FIXES` from
    the hint's id and text alone, leaves one trace and the same outputs."""
    lib, program = LIBRARIES[library], VARIATIONS[variation]()
    outputs, rows = _recorded(jt, lib, program)
    if not program.loop:  # the library's own loops (Optax's tree maps, Diffrax's steps): no advice
        assert rows.iloc[0]["hint_ids"] is None, describe(rows.iloc[:1])
    told = _told(rows, program)
    expected = EXPECTED_ON.get((library, variation), EXPECTED[variation])
    assert (",".join(told.hint_ids) if told else None) == expected, describe(rows)
    instructions = [h for h in (told.hint_ids if told else ()) if HINTS[h].instruction]
    if not instructions:
        return
    fixed = program
    for hint_id in instructions:
        fixed = FIXES[hint_id](fixed, told)
    fixed_outputs, fixed_rows = _recorded(jt, lib, fixed)
    assert fixed_rows["kind"].tolist() == ["trace"], (
        f"{instructions} followed, still: {describe(fixed_rows)}"
    )
    if program.loop:  # one loop equation for the repeats
        assert rows.iloc[0]["eqns"] - fixed_rows.iloc[0]["eqns"] >= rows.iloc[0]["loop_repeats"]
    _assert_same_outputs(program, fixed, outputs, fixed_outputs)


@pytest.mark.parametrize(
    ("library", "variation"),
    [
        pair
        for pair in PAIRS
        if EXPECTED_ON.get(pair, EXPECTED[pair[1]]) == WITHHELD.get(pair[1], ("",))[0]
    ],
)
def test_explanation_where_the_instruction_would_fail(jt, library, variation):
    """Where an explanation stands in for an instruction, that instruction applied anyway (as its
    own text says) still retraces: the precondition it failed was real."""
    lib, program = LIBRARIES[library], VARIATIONS[variation]()
    _, rows = _recorded(jt, lib, program)
    told = _told(rows, program)
    explanation, withheld = WITHHELD[variation]
    assert told.hint_ids == (explanation,)
    as_told = Told((withheld,), told.leaf, HINTS[withheld].template)
    _, fixed_rows = _recorded(jt, lib, FIXES[withheld](program, as_told))
    assert len(fixed_rows) > 1, describe(fixed_rows)


# Instructions about one library's own objects, proven on that library in `test_hints_proven.py`:
# an Optax state, an `eqx.field(static=True)`, an NNX attribute, a dataclass's metadata field.
ONE_LIBRARY = {
    "dtype.optax",
    "identity.optax",
    "structure.optax_none",
    "static.eqx_field",
    "static.nnx_optax",
    "static.nnx_identity",
    "static.nnx_attribute",
    "static.dataclass_meta",
}


def test_every_instruction_a_library_program_can_show_is_followed():
    """Every instruction is shown by a variation here and has a fix, but the persistent cache's
    (two processes: `test_hints_proven.py`) and those about one library's own objects."""
    instructions = {h.id for h in HINTS.values() if h.instruction}
    assert ONE_LIBRARY <= instructions, ONE_LIBRARY - instructions
    shown = {h for h in (*EXPECTED.values(), *EXPECTED_ON.values()) if h}
    generic = {h for h in instructions - ONE_LIBRARY if not h.startswith("cache.")}
    assert generic <= shown, generic - shown
    assert shown & instructions <= set(FIXES), (shown & instructions) - set(FIXES)


@pytest.mark.parametrize("library", LIBRARIES)
def test_nested_traces_carry_no_hint_and_the_outer_fix_stops_them(jt, library):
    """`step` called inside `outer`: its traces are part of `outer`'s, with no hint of their own,
    its retrace labelled a consequence of `outer`'s; `outer`'s retrace is told, and its fix stops
    both."""
    lib = LIBRARIES[library]
    program = dataclasses.replace(VARIATIONS["shape"](), nested=True)
    with jt.watch() as watch:
        run(lib, program)
    df = watch.events[~watch.events["internal"].astype(bool)]
    inner = df[df["function"].str.endswith("step")]
    outer = df[df["function"].str.endswith("outer")]
    assert inner["nested"].all() and inner["hint_ids"].isna().all(), describe(inner)
    again = inner[inner["cause"] != "first"]
    assert (
        len(again) == 1 and again["explanation"].str.contains("consequence of `.*outer`'s").all()
    ), inner["explanation"].tolist()
    assert outer["hint_ids"].tolist() == [None, "shape"], describe(outer)
    told = _told(outer, program)
    fixed = FIXES["shape"](program, told)
    with jt.watch() as watch:
        run(lib, fixed)
    df = watch.events[watch.events["function"].str.contains(r"(?:step|outer)$")]
    assert df["kind"].tolist() == ["trace", "trace"], describe(df)
