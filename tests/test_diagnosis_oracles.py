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

from jaxtrace_nb._diagnosis import Diagnosis, InvariantError, checked, diagnose, diagnose_compile
from jaxtrace_nb._jax_tree import handle
from jaxtrace_nb._signature import Signature, array_leaf, node_leaf, static_leaf
from jaxtrace_nb._values import summarize_static
from jaxtrace_nb._vocabulary import LoweringKind
from jaxtrace_nb._witness import Witness

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
    """JAX's key differs in its `inputs` part and nowhere the leaves show: said as JAX's input pytree,
    not as an unnamed part. (mutant `_same_key__mutmut_17`)"""
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
    before, after = (_Holder(jax.tree_util.tree_structure(((_Box(1.0, tag),), {}))) for tag in (3, 4))
    leaf = array_leaf((), "float32")
    new = _sig({"box.x": leaf}, key_parts=(("function", 1), ("inputs", 9), ("debug info", 3)),
               tree_ref=handle(after))
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
    assert d.before == old.leaves["fn"].text and d.after == new.leaves["fn"].text and d.before != d.after


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


@pytest.mark.parametrize("kind, traced, opening", [
    (LoweringKind.DERIVED, True, "First compile of a program JAX derived from this function by differentiation"),
    (LoweringKind.LOWERING, True, "First compile of another program under this function's name"),
    (LoweringKind.LOWERING, False, "Compiled without a new trace: the function was traced before recording started"),
])
def test_a_compile_of_another_program_keeps_its_fields(kind, traced, opening):
    """(mutant `_other_program__mutmut_84`: the fields shifted by one)"""
    new = _lowering(2, {"x": array_leaf((2,), "float32")}, kind)
    d = diagnose_compile(new, [], traced=traced)
    assert (d.cause, d.leaf, d.before, d.after, d.hint) == ("first", None, None, None, "")
    assert d.explanation.startswith(opening)


def test_a_custom_node_is_told_from_a_container():
    """(mutants `is_custom_node__mutmut_3`, `_8`)"""
    from jaxtrace_nb._signature import CUSTOM_NODE, is_custom_node

    assert is_custom_node(node_leaf((CUSTOM_NODE, "m.Box"), "Box"))
    assert not is_custom_node(node_leaf(("dict", ("a",)), "dict with keys 'a'"))
    assert not is_custom_node(array_leaf((2,), "float32"))
