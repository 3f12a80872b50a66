"""The diagnosis's less travelled paths, each against the difference the test itself made.

Each test builds two signatures that differ in exactly one way it chose (a part of JAX's key, a
node of JAX's own treedef, the function object passed as an argument, two
leaves of a compile) and checks that the diagnosis says that difference and nothing else. They
were written for the mutants that survived `benchmarks/mutation.py` on these paths (named on each
test); they run in milliseconds, so mutation testing runs them for every mutant.
"""

from __future__ import annotations

import dataclasses

import jax
import pytest

from jaxtrace_nb._core._values import summarize_static
from jaxtrace_nb._core._vocabulary import LoweringKind
from jaxtrace_nb._core._witness import Witness
from jaxtrace_nb._diagnosis._diagnose import (
    Diagnosis,
    InvariantError,
    checked,
    diagnose,
    diagnose_compile,
)
from jaxtrace_nb._keys._jax_tree import handle
from jaxtrace_nb._keys._signature import Signature, array_leaf, node_leaf, static_leaf

PARTS = (("function", 1), ("inputs", 2), ("debug info", 3))


def _sig(leaves: dict, **fields) -> Signature:
    return Signature(("id", 1), (), leaves, **{"key_parts": PARTS, **fields})


def _static(value):
    return static_leaf(summarize_static(value), value=value)


# ------------------------------------------------------------ `unknown`, and what refuses it
def test_unknown_is_refused_where_only_a_leaf_differs():
    """(mutant `checked__mutmut_4`: leaves and context both had to differ to refuse `unknown`)"""
    new, old = _sig({"x": array_leaf((3,), "float32")}), _sig({"x": array_leaf((2,), "float32")})
    with pytest.raises(InvariantError):
        checked(Diagnosis("unknown", None, None, None, "", ""), new, old)


def test_an_identical_key_is_unknown_with_no_leaf_apart():
    """Nothing differs: `unknown`, zero leaves apart. (mutant `_same_key__mutmut_126`)"""
    leaf = array_leaf((2,), "float32")
    d = diagnose(_sig({"x": leaf}), [_sig({"x": leaf})])
    assert (d.cause, d.leaf, d.before, d.after, d.distance) == ("unknown", None, None, None, 0)


def test_a_key_whose_input_part_alone_differs_is_said_in_jaxs_terms():
    """JAX's key differs in its `inputs` part and nowhere the leaves show: said as JAX's input
    pytree, not as an unnamed part. (mutant `_same_key__mutmut_17`)"""
    leaf = array_leaf((2,), "float32")
    new = _sig({"x": leaf}, key_parts=(("function", 1), ("inputs", 9), ("debug info", 3)))
    d = diagnose(new, [_sig({"x": leaf})])
    assert d.cause == "structure" and d.leaf is None
    assert "differs in its input pytree" in d.explanation and "its hash differs" in d.explanation


@jax.tree_util.register_pytree_node_class
class _Box:
    """A pytree node whose metadata (`tag`) the test changes; the walker is not told about it."""

    def __init__(self, x, tag):
        self.x, self.tag = x, tag

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, children):
        return cls(children[0], tag)


@dataclasses.dataclass
class _Holder:  # stands for JAX's FlatTree: what `JaxTree` holds weakly
    tree: object


def test_a_node_data_change_only_jaxs_treedef_shows_is_named_from_it():
    """The leaves read the same, JAX's treedefs differ in a node's data: the diagnosis is JAX's
    treedef comparison, before → after as the test changed it. (mutant `_same_key__mutmut_9`)"""
    before, after = (
        _Holder(jax.tree_util.tree_structure(((_Box(1.0, tag),), {}))) for tag in (3, 4)
    )
    leaf = array_leaf((), "float32")
    new = _sig(
        {"box.x": leaf},
        key_parts=(("function", 1), ("inputs", 9), ("debug info", 3)),
        tree_ref=handle(after),
    )
    d = diagnose(new, [_sig({"box.x": leaf}, tree_ref=handle(before))])
    assert (d.cause, d.before, d.after) == ("static", "3", "4")
    assert "JAX's treedef equality finds the node data different: 3 → 4" in d.explanation
    assert d.leaf is None


# ------------------------------------------------------------ a new function object as an argument
def test_a_function_passed_as_the_argument_it_is_names_both_objects():
    """`eqx.filter_jit(f)(...)` sees `f` as an argument leaf: a new object there is `new_function`,
    before → after the two objects, one leaf apart. (mutants `_new_function__mutmut_30`, `_34`)"""

    def f():
        pass

    def g():
        pass

    x = array_leaf((2,), "float32")
    old = Signature(("id", 1), (), {"fn": _static(f), "x": x}, "fn")
    new = Signature(("id", 1), (), {"fn": _static(g), "x": x}, "fn")
    d = diagnose(new, [old])
    assert (d.cause, d.leaf, d.distance) == ("new_function", "fn", 1)
    assert (
        d.before == old.leaves["fn"].text
        and d.after == new.leaves["fn"].text
        and d.before != d.after
    )


# ------------------------------------------------------------ compiles without a new trace
def _lowering(token, leaves: dict, kind=LoweringKind.LOWERING) -> Signature:
    return Signature(("id", token), (), leaves, None, kind)


def test_a_compile_with_two_changed_leaves_lists_the_second():
    """(mutant `diagnose_compile__mutmut_73`)"""
    old = _lowering(1, {"x": array_leaf((2,), "float32"), "y": array_leaf((2,), "float32")})
    new = _lowering(1, {"x": array_leaf((3,), "float32"), "y": array_leaf((5,), "float32")})
    d = diagnose_compile(new, [old], traced=True)
    assert (d.cause, d.leaf, d.distance) == ("shape", "x", 2)
    assert d.explanation.endswith("Also changed: `y`.")


@dataclasses.dataclass(frozen=True)
class _Program:
    name: str


def test_programs_equal_by_jaxs_eq_are_one_program():
    """Two witnesses of equal (not identical) programs: the same program, compiled again for a new
    shape; not another program."""
    a, b = _Program("p"), _Program("p")
    old = _lowering(Witness(a), {"x": array_leaf((2,), "float32")})
    new = _lowering(Witness(b), {"x": array_leaf((3,), "float32")})
    d = diagnose_compile(new, [old], traced=True)
    assert d.cause == "shape" and d.explanation.startswith("Compiled again without a new trace")


def test_a_witness_and_a_plain_token_are_two_programs():
    """(mutant `_same_program__mutmut_2`: it compared a plain token as a witness and raised)"""
    old = _lowering(7, {"x": array_leaf((2,), "float32")})
    new = _lowering(Witness(_Program("p")), {"x": array_leaf((2,), "float32")})
    d = diagnose_compile(new, [old], traced=True)
    assert d.cause == "first" and d.explanation.startswith("First compile of another program")


@pytest.mark.parametrize(
    "kind, traced, opening",
    [
        (
            LoweringKind.DERIVED,
            True,
            "First compile of a program JAX derived from this function by differentiation",
        ),
        (
            LoweringKind.LOWERING,
            True,
            "First compile of another program under this function's name",
        ),
        (
            LoweringKind.LOWERING,
            False,
            "Compiled without a new trace: the function was traced before recording started",
        ),
    ],
)
def test_a_compile_of_another_program_keeps_its_fields(kind, traced, opening):
    """(mutant `_other_program__mutmut_84`: the fields shifted by one)"""
    new = _lowering(2, {"x": array_leaf((2,), "float32")}, kind)
    d = diagnose_compile(new, [], traced=traced)
    assert (d.cause, d.leaf, d.before, d.after, d.hint) == ("first", None, None, None, "")
    assert d.explanation.startswith(opening)


def test_a_custom_node_is_told_from_a_container():
    """(mutants `is_custom_node__mutmut_3`, `_8`)"""
    from jaxtrace_nb._keys._signature import CUSTOM_NODE, is_custom_node

    assert is_custom_node(node_leaf((CUSTOM_NODE, "m.Box"), "Box"))
    assert not is_custom_node(node_leaf(("dict", ("a",)), "dict with keys 'a'"))
    assert not is_custom_node(array_leaf((2,), "float32"))


# ------------------------------------------- survivors of mutation-2026-11-26-42b3aaa.txt
# Real programs: the test changes one thing (or two, in a known order) and JAX retraces; the
# event must name what the test changed, in the test's own words.
def _last(jt) -> dict:
    return jt.log(internal=False).iloc[-1].to_dict()


def test_a_replaced_container_is_named_before_a_leaf_that_comes_first(jt):
    """Two changes: a shape at the first argument, a list replaced by a tuple at the second; the
    replaced container is the change told, the shape is listed after it. (mutants
    `collapse__mutmut_71`, `collapse__mutmut_73`: sorted by path, or replaced last)"""
    import jax.numpy as jnp

    f = jax.jit(lambda a_array, z_container: a_array.sum() + z_container[0].sum())
    f(jnp.ones(2), [jnp.ones(1), jnp.ones(1)])
    f(jnp.ones(3), (jnp.ones(1), jnp.ones(1)))
    e = _last(jt)
    assert (e["cause"], e["leaf"]) == ("structure", "z_container")
    assert (e["before"], e["after"]) == ("list of 2 f32[1] arrays", "tuple of 2 f32[1] arrays")
    assert "Also changed: `a_array` (shape)" in e["explanation"]


def test_a_key_added_and_a_shape_changed_are_told_in_argument_order(jt):
    """A dict gains a key at the first argument, the second changes shape: no container was
    replaced, so the first argument's change is told first. (mutant `replaced_container__mutmut_10`,
    which took any two leaves JAX compares as different, arrays included, for replaced
    containers)"""
    import jax.numpy as jnp

    f = jax.jit(lambda a_dict, z_array: a_dict["w"].sum() + z_array.sum())
    f({"w": jnp.ones(2)}, jnp.ones(2))
    f({"w": jnp.ones(2), "v": jnp.ones(2)}, jnp.ones(3))
    e = _last(jt)
    assert (e["cause"], e["leaf"]) == ("structure", "a_dict['v']")
    assert "Also changed: `z_array` (shape)" in e["explanation"]


@pytest.mark.parametrize("gone", [False, True])
def test_a_leaf_added_or_removed_shows_its_own_text_and_absent(jt, gone):
    """A dict entry removed (or added): its array's text on its side, "(absent)" on the other.
    (mutants `describe__mutmut_15`, `describe__mutmut_20`)"""
    import jax.numpy as jnp

    f = jax.jit(lambda d: sum(v.sum() for v in d.values()))
    small, large = {"w": jnp.ones(2)}, {"w": jnp.ones(2), "v": jnp.ones((2, 3), jnp.int32)}
    for d in (large, small) if gone else (small, large):
        f(d)
    e = _last(jt)
    assert (e["cause"], e["leaf"]) == ("structure", "d['v']")
    assert (e["before"], e["after"]) == (
        ("i32[2,3]", "(absent)") if gone else ("(absent)", "i32[2,3]")
    )


@pytest.mark.parametrize(
    "values",
    [(-1, -2), (tuple(range(20)), tuple(range(1, 21)))],
    ids=["ints whose hashes collide", "a tuple too long to hold"],
)
def test_a_static_value_jax_finds_changed_is_named_even_where_hashes_say_equal(jt, values):
    """JAX's ``==`` decides: -1 and -2 hash alike in CPython (our witness holds small values and
    compares them); a 20-item tuple is not held (only its hash is kept, and it differs). (mutants
    `_holdable__mutmut_2`: nothing held, the hashes of -1 and -2 compared;
    `Witness.__init____mutmut_18`: every hash alike)"""
    assert hash(-1) == hash(-2)
    f = jax.jit(lambda x, k: x * len(str(k)), static_argnums=1)
    for v in values:
        f(1.0, v)
    e = _last(jt)
    assert (e["trace_number"], e["cause"], e["leaf"]) == (2, "static", "k")
    assert e["before"] != e["after"]


def test_a_nested_static_value_reads_as_python_prints_it():
    """64 items of budget: 8 tuples of 6 ints (57 items) fit whole. (mutant `_fmt__mutmut_3`, an
    item counted twice)"""
    value = tuple(tuple(range(6)) for _ in range(8))
    assert summarize_static(value).text == repr(value)


def test_a_dict_in_a_node_s_data_reads_as_python_prints_it():
    """A dict reaches a summary as a custom node's data (JAX compares it with ``==``). (mutant
    `_fmt_one__mutmut_191`: the budget left out, every dict summarized as "<dict object>")"""
    value = {"a": 1, "b": (2, "c")}
    assert summarize_static(value).text == repr(value)


def test_a_static_method_is_named_by_its_qualified_name():
    """(mutant `_callable_name__mutmut_11`: the bare `__name__`)"""

    class Model:
        def forward(self):
            return 0

    assert summarize_static(Model.forward).name == Model.forward.__qualname__


def test_a_module_that_defines_a_function_again_says_both_lines(jt, tmp_path, monkeypatch):
    """One name jitted at two definitions of one file: a new function, re-defined at the second
    line, was the first (both read with `inspect`). (mutant `new_object__mutmut_12`: the locations
    compared with ==)"""
    import importlib
    import inspect

    (tmp_path / "twice.py").write_text(
        "import jax\n\ndef f(x):\n    return x + 1\n\nfirst = jax.jit(f)\n\n"
        "def f(x):\n    return x + 2\n\nsecond = jax.jit(f)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    twice = importlib.import_module("twice")
    twice.first(1.0)
    twice.second(1.0)
    e = _last(jt)
    lines = [inspect.getsourcelines(g)[1] for g in (twice.first, twice.second)]
    assert e["cause"] == "new_function"
    assert (
        f"re-defined at {twice.__file__}:{lines[1]}, was {twice.__file__}:{lines[0]}"
        in e["explanation"]
    )


def test_a_function_made_again_by_a_later_cell_names_both_cells(shell):
    """A factory defined in one cell makes a new jitted function in each later cell: the same
    definition line, a new object, "re-created in cell M, last traced in cell N" with the cells the
    test ran; two made in one cell say no cell. (mutants `new_object__mutmut_16`, `_19`,
    `Lifecycle._end__mutmut_23`)"""
    import jaxtrace_nb

    shell.run_cell("%load_ext jaxtrace_nb", store_history=True)
    shell.run_cell("def make():\n    return jax.jit(lambda x: x + 1)\n", store_history=True)
    cells = []
    for _ in range(2):
        cells.append(shell.execution_count)
        shell.run_cell("make()(1.0)", store_history=True)
    shell.run_cell("make()(2.0); make()(3.0)", store_history=True)
    df = jaxtrace_nb.log(internal=False)
    explanations = df[df["cause"] == "new_function"]["explanation"].tolist()
    assert df["cause"].tolist() == ["first", "new_function", "new_function", "new_function"]
    assert f"re-created in cell {cells[1]}, last traced in cell {cells[0]}" in explanations[0]
    assert f"re-created in cell {cells[1] + 1}, last traced in cell {cells[1]}" in explanations[1]
    assert "re-created in cell" not in explanations[2]


def test_a_compile_without_a_trace_names_its_leaf_as_the_user_passed_it(jt):
    """Under `eqx.filter_jit` JAX names the arguments of Equinox's own wrapper; the compile that a
    placement change makes (no new trace) names the user's argument. (mutant
    `user_names__mutmut_4`)"""
    import equinox as eqx
    import jax.numpy as jnp

    @eqx.filter_jit
    def f(model_x, n):
        return model_x * n

    f(jnp.ones(3), 2)
    f(jax.device_put(jnp.ones(3), jax.devices()[0]), 2)  # committed: compiled again, not traced
    e = _last(jt)
    assert (e["kind"], e["cause"], e["leaf"]) == ("compile", "sharding", "model_x")
    assert (e["before"], e["after"]) == (
        "uncommitted",
        f"committed to {jax.devices()[0].platform}:0",
    )


def test_a_function_keeps_its_budget_of_signatures():
    """At most `SIGNATURES_PER_FUNCTION` signatures, fewer when each is large (the leaf budget).
    (mutant `keep__mutmut_1`: every signature kept)"""
    import collections

    from jaxtrace_nb._recording._functions import (
        LEAF_BUDGET_PER_FUNCTION,
        SIGNATURES_PER_FUNCTION,
        keep,
    )

    leaf = array_leaf((2,), "float32")
    kept: collections.deque = collections.deque()
    for _ in range(3 * SIGNATURES_PER_FUNCTION):
        kept = keep(kept, _sig({"x": leaf}))
    assert len(kept) == SIGNATURES_PER_FUNCTION
    large = _sig({f"x{i}": leaf for i in range(LEAF_BUDGET_PER_FUNCTION // 2)})
    for _ in range(5):
        kept = keep(kept, large)
    assert len(kept) == 2 and kept[-1] is large


def test_an_optional_argument_given_an_array_gets_the_none_hint(jt):
    """None, then an array, at one argument: the `structure.none` hint (the one
    tests/test_hints_proven.py proves). (mutant `_structure__mutmut_15`: the new side's kind
    ignored)"""
    import jax.numpy as jnp

    @jax.jit
    def step(x, bias):
        return x if bias is None else x + bias

    step(jnp.ones(3), None)
    step(jnp.ones(3), jnp.ones(3))
    e = _last(jt)
    assert (e["cause"], e["leaf"]) == ("structure", "bias")
    assert "structure.none" in e["hint_ids"].split(",")


def test_a_loop_unrolled_50_times_says_so_with_its_hint_id(jt):
    """(mutant `_set_graph__mutmut_20`: another hint id, which no proof in
    tests/test_hints_proven.py names)"""
    import jax.numpy as jnp

    from jaxtrace_nb._diagnosis._hints import HINTS

    @jax.jit
    def step(x):
        for i in range(50):
            x = (x * 3 + i) % 1000
        return x

    step(jnp.arange(4))
    e = _last(jt)
    assert e["loop_repeats"] == 50
    ids = e["hint_ids"].split(",")
    assert "unrolled_loop" in ids and all(i in HINTS for i in ids)
