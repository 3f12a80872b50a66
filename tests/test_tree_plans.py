"""Tree plans: a treedef of plain containers read once, and reused, gives exactly the walk's leaves.

`Walker.tree` reads a treedef of dicts with string keys, lists, tuples and None through a plan
made from it once (`tree_plan`); every other treedef node by node (`Walker.walk_tree`). A
seeded generator builds such trees (and ones with custom nodes inside) and compares the two
readings: the same leaves in the same order, the same owners and flat positions.

Each generated case must take the path it is there for: the planned reading applies a plan (a
spy counts them), the reference reading applies none (plans switched off, `_without_plans`), and
a plain call is read at once and compared. The generators' seeds that cannot (a tree with no
plannable part, a call with a static argument or a custom node) are left out when collected, not
passed vacuously.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from jaxtrace_nb._keys import _plans
from jaxtrace_nb._keys._leaves import Placeholder, aval_leaf
from jaxtrace_nb._keys._plans import tree_plan
from jaxtrace_nb._keys._walker import Walker

SEEDS = range(600)  # of which those read through a plan are kept (`PLANNED_SEEDS`)


class Pair(NamedTuple):
    a: Any
    b: Any


class Empty(NamedTuple):
    pass


class Box(eqx.Module):
    w: Any


def _leaf(rng: random.Random):
    shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 2)))
    return jax.core.ShapedArray(
        shape, rng.choice((jnp.float32, jnp.int32, jnp.bfloat16)), weak_type=rng.random() < 0.2
    )


def _tree(rng: random.Random, depth: int, custom: bool):
    r = rng.random()
    if depth == 0 or r < 0.25:
        return None if rng.random() < 0.1 else _leaf(rng)
    n = rng.randint(0, 4)
    kids = [_tree(rng, depth - 1, custom) for _ in range(n)]
    choice = rng.randrange(6 if custom else 3)
    if choice == 0:
        keys = rng.sample(
            rng.choice((["w", "b", "x", "a'b", "ü"], [3, 0, 1, 7]))
            if custom
            else ["w", "b", "x", "a'b", "ü"],
            n,
        )
        return dict(zip(keys, kids))
    if choice == 1:
        return kids
    if choice == 2:
        return tuple(kids)
    if choice == 3:
        return Pair(kids[0] if kids else None, _tree(rng, depth - 1, custom))
    if choice == 4:
        return Empty() if rng.random() < 0.3 else [Pair(_leaf(rng), None)]
    return Box(kids)


class _without_plans:
    """No plan is found or applied while inside: every tree is walked node by node, subtrees under
    custom nodes too (the reference reading, independent of any plan)."""

    def __enter__(self):
        from jaxtrace_nb._keys import _walker
        from jaxtrace_nb._recording import _decode

        self._saved = [(m, m.argument_plan) for m in (_plans, _walker, _decode)]
        for module, _ in self._saved:
            module.argument_plan = lambda td, make=None: None
        return self

    def __exit__(self, *exc):
        for module, original in self._saved:
            module.argument_plan = original


class _counting_plans:
    """Counts the plans (not single leaves) `Walker.apply_plan` applies while inside."""

    def __enter__(self):
        self.applied, self._original = 0, Walker.apply_plan

        def apply_plan(walker, prefix, plan, vals, start):
            self.applied += plan is not _plans.SINGLE_LEAF
            return self._original(walker, prefix, plan, vals, start)

        Walker.apply_plan = apply_plan
        return self

    def __exit__(self, *exc):
        Walker.apply_plan = self._original


def _read(td, vals, planned: bool) -> tuple:
    walker = Walker(())
    if planned:
        walker.tree("x", td, vals, 2)
    else:
        with _without_plans():
            walker.walk_tree("x", td, vals, 2)
    return list(walker.leaves.items()), walker.owners, walker.flat_paths


def _plan_case(seed: int) -> tuple:
    """(treedef, leaves) of generated tree `seed`, after two leaves of other arguments."""
    rng = random.Random(seed)
    custom = seed % 3 == 0
    vals, td = jax.tree_util.tree_flatten(
        _tree(rng, 4, custom), is_leaf=lambda x: isinstance(x, jax.core.ShapedArray)
    )
    vals = [_leaf(rng), _leaf(rng)] + [
        Placeholder(aval_leaf(v), 2 + i) if rng.random() < 0.2 else v for i, v in enumerate(vals)
    ]
    return td, vals


def _plans_applied(seed: int) -> int:
    td, vals = _plan_case(seed)
    with _counting_plans() as counted:
        Walker(()).tree("x", td, vals, 2)
    return counted.applied


PLANNED_SEEDS = [
    seed for seed in SEEDS if _plans_applied(seed)
]  # a tree with no plannable part: left out


def test_most_generated_trees_are_read_through_a_plan():
    assert len(PLANNED_SEEDS) >= 300, len(PLANNED_SEEDS)
    assert any(seed % 3 == 0 for seed in PLANNED_SEEDS)  # plain subtrees under custom nodes too


@pytest.mark.parametrize("seed", PLANNED_SEEDS)
def test_a_plan_reads_exactly_what_the_walk_reads(seed):
    # A treedef whose hash an unplannable one of an earlier test had is walked, by design
    # (`tree_plan`):
    # this test is about the plan, so it starts from no such memory.
    _plans._UNPLANNED.clear()
    td, vals = _plan_case(seed)
    walked = _read(td, vals, planned=False)
    for _ in range(2):  # the plan made, then the plan again, as the next trace reuses it
        with _counting_plans() as counted:
            assert _read(td, vals, planned=True) == walked
        assert counted.applied > 0, "the planned reading applied no plan"


def test_only_plain_containers_are_planned_and_no_treedef_is_kept():
    plain = jax.tree_util.tree_structure({"w": [1, (2, None)], "z": {"a": 2}})
    assert tree_plan(plain) is not None
    for other in ({"w": Box(1)}, [Pair(1, 2)], [Empty()], {(1, 2): 1}, {"w": {1.5: 2}}, {1: 2}):
        assert tree_plan(jax.tree_util.tree_structure(other)) is None
    assert all(type(key) is bytes for key in _plans._PLANS)  # JAX's serialization, not the treedef


def _retraces(tag: str) -> None:
    """One function retraced by a shape, a dtype, a structure, a key and a None change."""
    f = jax.jit(lambda p, y: jax.tree_util.tree_leaves(p)[0].sum() + y)
    f.__name__ = tag
    p = {"w": jnp.ones(3), "b": [jnp.ones(2), None]}
    f(p, 1.0)
    f({**p, "w": jnp.ones(4)}, 1.0)
    f({**p, "w": jnp.ones(4, jnp.int32)}, 1.0)
    f({**p, "b": (jnp.ones(2), None)}, 1.0)
    f({**p, "b": [jnp.ones(2), jnp.ones(1)]}, 1.0)
    f({**p, "z": jnp.ones(1)}, jnp.float32(2))


def test_a_deferred_diagnosis_is_the_one_made_at_the_trace(jt):
    from jaxtrace_nb._keys._deferred import DeferredSignature
    from jaxtrace_nb._recording._session import get_session

    fields = ["trace_number", "cause", "leaf", "before", "after", "explanation", "hint"]
    _retraces("deferred")  # diagnosed when the log is read
    deferred = jt.log(internal=False)[fields]
    state = next(
        s for s in get_session().functions.values() if s.identity.name.endswith("<lambda>")
    )
    kept = state.keys[-1].signature
    assert type(kept) is DeferredSignature and kept.get() is kept.get()
    assert kept.n_leaves == len(kept.get().leaves)
    jt.reset()
    with jt.watch(max_traces=100):  # a watch with a limit diagnoses each trace at its start
        _retraces("eager")
    eager = jt.log(internal=False)[fields]
    assert deferred.to_dict("records") == eager.to_dict("records")
    assert list(deferred["cause"]) == [
        "first",
        "shape",
        "dtype",
        "structure",
        "structure",
        "structure",
    ]


def _spec(aval):
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


def _read_both_ways(f, calls: list, monkeypatch) -> tuple[list, list, list]:
    """Trace `f` with each ``(args, kwargs)`` of `calls`, reading every trace both ways: ((the
    record read at once, the record read argument by argument), ...) where the first is not None;
    the code names of the traces not read at once; (the plan found, the plan made afresh) of
    each."""
    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session

    probe = get_session().probe
    compared, fast_none, plans = [], [], []

    def checked(frame):
        layout, decoder = probe.internals.layout, probe.decoder
        local, _ = layout.begin(frame)
        plain = layout.plain_call(local)
        if (
            plain is not None
        ):  # the plan found by JAX's names (from the 3rd trace) is the one made afresh
            try:
                plain.tree.serialize_using_proto()
                fresh = _plans._new_call_plan(plain.tree)
            except Exception:
                fresh = None
            plans.append((_plans.call_plan(plain.tree, plain.names), fresh))
        fast = (
            decoder.plain_jit_record(plain, nested=False, thread=1, cache_generation=0)
            if plain
            else None
        )
        if fast is None:
            fast_none.append(frame.f_code.co_name)
        else:
            with _without_plans():  # the reference: read argument by argument, every tree walked
                slow = decoder.trace_record(
                    layout.read(frame, local),
                    nested=False,
                    thread=1,
                    cache_generation=0,
                    on_fault=lambda stage, exc: pytest.fail(f"{stage}: {exc!r}"),
                )
            compared.append((fast, slow))
        return original(frame)

    original = probe._trace
    jt.reset()
    jt.start()
    try:
        monkeypatch.setattr(probe, "_trace", checked)
        for args, kwargs in calls:
            f.trace(*args, **kwargs)
    finally:
        monkeypatch.undo()
        jt.stop()
        jt.reset()
    for fast, slow in compared:
        assert fast.identity == slow.identity and fast.function_ref() is slow.function_ref()
        assert (fast.nested, fast.thread, fast.cache_generation, fast.arg_names) == (
            slow.nested,
            slow.thread,
            slow.cache_generation,
            slow.arg_names,
        )
        got, expected = fast.signature.get(), slow.signature.get()
        assert list(got.leaves.items()) == list(expected.leaves.items())
        assert got._replace(leaves={}, tree_ref=None) == expected._replace(leaves={}, tree_ref=None)
        assert fast.signature.n_leaves == slow.signature.n_leaves == len(got.leaves)
    return compared, fast_none, plans


def _whole_treedef() -> bool:
    """JAX 0.9 - 0.10 hand the whole call's treedef to the trace; 0.8 and 0.11 are read argument by
    argument."""
    from jaxtrace_nb._jax._internals import detect

    return type(detect().layout).__name__ == "FlatTreeLayout"


_IS_AVAL = lambda x: isinstance(x, jax.core.ShapedArray)  # noqa: E731


def _plain_call_case(seed: int) -> tuple:
    """(positional arguments, keyword arguments, whether the last positional one is static) of
    generated call `seed`; and whether the call is plain (read at once: no static argument, every
    argument a tree of dicts with string keys, lists, tuples and None)."""
    rng = random.Random(seed)
    custom = seed % 4 == 0
    args = [_tree(rng, 3, custom) for _ in range(rng.randint(1, 3))]
    kwargs = {
        name: _tree(rng, 2, custom) for name in rng.sample(["z", "a", "m"], rng.randint(0, 2))
    }
    static = rng.random() < 0.2
    plain = not static and all(
        _plans._new_plan(jax.tree_util.tree_structure(a, is_leaf=_IS_AVAL)) is not None
        for a in (*args, *kwargs.values())
    )
    return args, kwargs, static, plain


PLAIN_CALL_SEEDS = [
    seed for seed in range(160) if _plain_call_case(seed)[3]
]  # the others are never read at once


def _needs_whole_treedef() -> None:
    if not _whole_treedef():
        pytest.skip(
            f"JAX {jax.__version__} hands a trace its arguments one by one: no call is read at once"
        )


@pytest.mark.parametrize("seed", PLAIN_CALL_SEEDS)
def test_a_plain_call_read_at_once_is_the_call_read_argument_by_argument(seed, monkeypatch):
    """A plain ``jax.jit`` retrace read from its whole treedef (`Decoder.plain_jit_record`) gives
    the record that reading it argument by argument, every tree walked (`Decoder.trace_record`
    without plans), gives."""
    _needs_whole_treedef()
    args, kwargs, static, plain = _plain_call_case(seed)
    is_aval = _IS_AVAL
    names = ", ".join(f"p{i}" for i in range(len(args)))
    namespace: dict = {}
    exec(f"def f({names}, *rest, **kw):\n    return 0", namespace)
    f = jax.jit(namespace["f"], static_argnums=(len(args) - 1,) if static else ())
    calls = []
    for shape in (
        (1,),
        (2,),
        (3,),
    ):  # the first trace is read argument by argument; retraces may not be
        marker = jax.ShapeDtypeStruct(shape, jnp.float32)
        spec = jax.tree.map(_spec, (args, kwargs), is_leaf=is_aval)
        if static:
            spec[0][-1] = "static"
        calls.append(((*spec[0], marker), spec[1]))
    compared, fast_none, plans = _read_both_ways(f, calls, monkeypatch)
    assert plain and len(compared) == 2, fast_none  # both retraces read at once, and compared
    assert len(plans) == 3 and all(got == fresh for got, fresh in plans), plans


@pytest.mark.parametrize("seed", range(40))
def test_a_function_whose_tree_changes_between_retraces_is_read_as_each_call_is(seed, monkeypatch):
    """One function retraced with trees that change and come back (a key added, a list for a tuple,
    an entry None): the plan kept with its last tree serves only a retrace with that same tree, and
    every reading at once is the reading argument by argument."""
    _needs_whole_treedef()
    rng = random.Random(1000 + seed)
    is_aval = lambda x: isinstance(x, jax.core.ShapedArray)  # noqa: E731
    trees = [_tree(rng, 3, False) for _ in range(3)]
    f = jax.jit(lambda tree, marker: 0)
    calls = []
    for k in range(8):
        tree = trees[0] if k < 2 else rng.choice(trees)
        calls.append(
            (
                (
                    jax.tree.map(_spec, tree, is_leaf=is_aval),
                    jax.ShapeDtypeStruct((k + 1,), jnp.float32),
                ),
                {},
            )
        )
    compared, fast_none, plans = _read_both_ways(f, calls, monkeypatch)
    plain = all(
        _plans._new_plan(jax.tree_util.tree_structure(t, is_leaf=is_aval)) is not None
        for t in trees
    )
    assert plain and len(compared) == 7, fast_none  # every retrace read at once, and compared
    assert len(plans) == 8 and all(got == fresh for got, fresh in plans), plans


def test_a_tree_with_a_str_subclass_key_is_read_but_not_kept(monkeypatch):
    """A dict key of a ``str`` subclass is a user object. Such a call serializes as its
    ``str``-keyed twin does, so it is read at once with the twin's plan; its treedef is not kept
    with the plan."""
    from jaxtrace_nb._recording._session import get_session

    class Key(str):
        pass

    f = jax.jit(lambda tree, marker: 0)
    calls = []
    for k, key in enumerate(("a", Key("a"), Key("a"), "a")):
        tree = {
            key: jax.ShapeDtypeStruct((2,), jnp.float32),
            "b": jax.ShapeDtypeStruct((), jnp.int32),
        }
        calls.append(((tree, jax.ShapeDtypeStruct((k + 1,), jnp.float32)), {}))

    kept: list = []  # after each trace: the treedefs the decoder keeps

    def trace_and_look(*args):
        result = f.trace(*args)
        kept.append([entry[4] for entry in get_session().probe.decoder._named_plans.values()])
        return result

    compared, fast_none, _ = _read_both_ways(
        type("F", (), {"trace": staticmethod(trace_and_look)}), calls, monkeypatch
    )
    assert len(compared) == (3 if _whole_treedef() else 0), fast_none
    # (The first trace is read argument by argument.) Not kept after the Key-keyed calls; kept after
    # the str-keyed one.
    assert all(tree is None or _plans.keys_are_str(tree) for trees in kept for tree in trees)
    if _whole_treedef():
        assert [any(tree is None for tree in trees) for trees in kept[1:]] == [True, True, False]
    assert _plans.keys_are_str(jax.tree_util.tree_structure({"a": 1, "b": [{"c": 2}]}))
    assert not _plans.keys_are_str(jax.tree_util.tree_structure({"a": [{Key("c"): 2}]}))


def test_a_plan_found_by_names_needs_every_dict_key_in_a_name():
    """Two calls whose treedefs hash alike and whose leaves JAX names alike, told apart: an entry
    holding None or an empty container shows in no name, so such a call is never found by names."""
    x = jnp.ones(2)
    first = jax.tree_util.tree_structure(((({"a": None, "b": x}),), {}))
    second = jax.tree_util.tree_structure(((({"a0": None, "b": x}),), {}))
    names = ("p['b']",)
    assert hash(first) == hash(second) and first != second
    for td in (first, second, first, second):
        assert _plans.call_plan(td, names) == _plans._new_call_plan(td)
    assert _plans.call_plan(first, names) != _plans.call_plan(second, names)
    shown = jax.tree_util.tree_structure((({"a": x, "b": x},), {}))
    renamed = jax.tree_util.tree_structure((({"a": x, "c": x},), {}))
    assert hash(shown) == hash(renamed)
    for td, leaf_names in ((shown, ("p['a']", "p['b']")), (renamed, ("p['a']", "p['c']"))) * 2:
        assert _plans.call_plan(td, leaf_names) == _plans._new_call_plan(td)
    assert (hash(shown), 2, shown.num_nodes, ("p['a']", "p['b']")) in _plans._NAMED_CALL_PLANS
