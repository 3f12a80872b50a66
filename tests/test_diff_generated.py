"""The diff and the diagnosis on plain signatures, against the one change each generated case
applied.

A seeded generator builds a signature of a few leaves (arrays of several shapes, dtypes and weak
types, static ints, None) under user paths, then applies exactly one change of a kind it chose to
one leaf it chose, and writes down what it did: the cause that change is, the leaf's path, and its
text before and after (written here from the change, e.g. ``f16[2,3] (weak)``). The diagnosis
against the earlier signatures (the one changed, and older ones further away) must name exactly
that. No JAX: these run in milliseconds, so mutation testing (`benchmarks/mutation.py`) runs them
for every mutant.
"""

from __future__ import annotations

import random

import pytest

from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._diagnosis._diagnose import FIRST, diagnose
from jaxtrace_nb._keys._signature import (
    NONE_LEAF,
    Signature,
    array_leaf,
    closest,
    diff_leaves,
    static_leaf,
)

SHORT = {"float32": "f32", "float16": "f16", "int32": "i32", "bfloat16": "bf16", "float64": "f64"}
PATHS = [
    "x",
    "params['w']",
    "params['b']",
    "batch[0]",
    "batch[1].mask",
    "n",
    "opt_state[0].mu['w']",
]


def _text(spec) -> str:
    """A leaf's text, written from its spec: ``f32[2,3]``, ``i32[] (weak)``, ``7``, ``None``."""
    kind = spec[0]
    if kind == "array":
        _, shape, dtype, weak = spec
        return f"{SHORT[dtype]}[{','.join(map(str, shape))}]" + (" (weak)" if weak else "")
    return "None" if kind == "none" else str(spec[1])


def _leaf(spec):
    kind = spec[0]
    if kind == "array":
        _, shape, dtype, weak = spec
        return array_leaf(shape, dtype, weak)
    if kind == "static":
        return static_leaf(summarize_static(spec[1]), value=spec[1])
    return NONE_LEAF


def _signature(specs: dict, fun: int = 1) -> Signature:
    return Signature(
        ("id", fun), (), {path: _leaf(spec) for path, spec in specs.items()}, None, "jit"
    )


def _random_spec(rng):
    r = rng.random()
    if r < 0.65:
        return (
            "array",
            tuple(rng.randint(1, 4) for _ in range(rng.randint(0, 3))),
            rng.choice(["float32", "int32", "bfloat16"]),
            rng.random() < 0.2,
        )
    if r < 0.9:
        return ("static", rng.randint(0, 9))
    return ("none",)


def _change(rng, spec):
    """(the changed spec, the cause it is), one change of a kind `spec` allows."""
    kind = spec[0]
    if kind == "array":
        _, shape, dtype, weak = spec
        options = ["dtype", "weak_type", "structure"] + (["shape"] if shape else [])
        what = rng.choice(options)
        if what == "shape":
            i = rng.randrange(len(shape))
            return (
                "array",
                shape[:i] + (shape[i] + rng.randint(1, 3),) + shape[i + 1 :],
                dtype,
                weak,
            ), "shape"
        if what == "dtype":
            return ("array", shape, "float16" if dtype != "float16" else "float64", weak), "dtype"
        if what == "weak_type":
            return ("array", shape, dtype, not weak), "weak_type"
        return ("none",), "structure"
    if kind == "static":
        return ("static", spec[1] + rng.randint(1, 5)), "static"
    return ("array", (2,), "float32", False), "structure"


def case(seed: int):
    rng = random.Random(seed)
    paths = rng.sample(PATHS, rng.randint(1, len(PATHS)))
    specs = {path: _random_spec(rng) for path in paths}
    path = rng.choice(paths)
    changed, cause = _change(rng, specs[path])
    new = {**specs, path: changed}
    # Older signatures, each further from `new`: every leaf but the changed one also changed once.
    older = []
    for _ in range(rng.randint(0, 2)):
        far = dict(new)
        for other in paths:
            far[other] = _change(rng, far[other])[0]
        far["extra"] = ("static", 0)  # and one leaf more: at least two changes away
        older.append(far)
    return specs, new, older, path, cause


@pytest.mark.parametrize("seed", range(150))
def test_the_diagnosis_is_the_change_applied(seed):
    specs, new, older, path, cause = case(seed)
    previous = [_signature(s) for s in older] + [_signature(specs)]
    random.Random(seed).shuffle(previous)  # the closest one wins wherever it is
    d = diagnose(_signature(new), previous)
    assert (d.cause, d.leaf, d.before, d.after) == (
        cause,
        path,
        _text(specs[path]),
        _text(new[path]),
    ), (specs, new)
    assert path in d.explanation


@pytest.mark.parametrize("seed", range(40))
def test_the_diff_holds_the_changed_leaf_and_nothing_else(seed):
    specs, new, _, path, _ = case(seed)
    changes = diff_leaves(_signature(new), _signature(specs))
    assert [(c.path, c.old.text, c.new.text) for c in changes] == [
        (path, _text(specs[path]), _text(new[path]))
    ]
    assert diff_leaves(_signature(specs), _signature(dict(specs))) == []


def test_the_closest_earlier_signature_is_the_one_changed_once():
    specs, new, older, path, _ = case(7)
    seed = 7
    while not older:  # a case with signatures further away
        seed += 1
        specs, new, older, path, _ = case(seed)
    target = _signature(specs)
    found, changes, context = closest(_signature(new), [_signature(s) for s in older] + [target])
    assert found is target and [c.path for c in changes] == [path] and context == []
    assert diagnose(_signature(new), []) == FIRST


@pytest.mark.parametrize("seed", range(20))
def test_a_sharded_leaf_shows_each_axis_and_its_change(seed):
    """A leaf with an explicit sharding shows each dimension with its mesh axes (``4@x``); sharding
    one more dimension is a change of that leaf, before and after written here from the axes
    applied. A dtype outside the short table keeps its own name."""
    rng = random.Random(seed)
    shape = tuple(rng.randint(1, 8) for _ in range(rng.randint(1, 3)))
    axes = tuple(rng.choice([None, "x", "y", ("x", "y")]) for _ in shape)
    dtype = rng.choice(["float32", "float8_e4m3fn", "int4"])
    short = SHORT.get(dtype, dtype)

    def text(ax):
        if not any(ax):
            return f"{short}[{','.join(map(str, shape))}]"
        return f"{short}[{','.join(f'{d}@{a}' if a else str(d) for d, a in zip(shape, ax))}]"

    i = rng.randrange(len(shape))
    changed = axes[:i] + ("z" if axes[i] != "z" else "x",) + axes[i + 1 :]
    before, after = (
        array_leaf(shape, dtype, sharding=axes),
        array_leaf(shape, dtype, sharding=changed),
    )
    assert (before.text, after.text) == (text(axes), text(changed))
    sig = lambda leaf: Signature(
        ("id", 1), (), {"x": leaf, "n": static_leaf(summarize_static(3), value=3)}, None, "jit"
    )
    assert [(c.path, c.old.text, c.new.text) for c in diff_leaves(sig(after), sig(before))] == [
        ("x", text(axes), text(changed))
    ]


def test_two_hints_keep_both_ids():
    from jaxtrace_nb._diagnosis._diagnose import join_ids

    assert [join_ids("a", "b"), join_ids(None, "b"), join_ids("a", None), join_ids(None, None)] == [
        "a,b",
        "b",
        "a",
        None,
    ]
