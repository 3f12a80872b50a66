"""Plans: a treedef of plain containers read once, into steps every later trace replays.

A treedef made only of dicts with string keys, lists, tuples and None is read node by node
once (`tree_plan`); the steps (`LeafStep`, `ConstStep`, `SeqStep`) give, for any abstract
values in that treedef, exactly the leaves the walk gives (``tests/test_tree_plans.py``).
A `CallPlan` does the same for a whole traced call's ``(args, kwargs)``. Plans are found by
JAX's own serialization of the treedef (bytes): comparing treedefs would call a user's dict
key's ``__eq__``, and no treedef is kept. All plans together hold a bounded number of leaves.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

from .._core._bounded import Bounded, BoundedSet
from ._leaves import child_keys, container_leaf
from ._signature import NODE_SUFFIX, NONE_LEAF, Leaf


@dataclasses.dataclass(frozen=True, slots=True)
class LeafStep:
    """A leaf: the value at `index`, counted from the argument's first leaf."""

    path: str  # the path suffix under the argument
    index: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConstStep:
    """A leaf the same at every trace with this treedef (a dict's keys, a None)."""

    path: str
    leaf: Leaf


@dataclasses.dataclass(frozen=True, slots=True)
class SeqStep:
    """A list or tuple node of `n` children, named `name` ("list", "tuple"); `first`: the index of
    its first child when every child is a leaf (their types are part of its text), else None."""

    path: str
    name: str
    n: int
    first: int | None


Plan = tuple  # of LeafStep | ConstStep | SeqStep, in the walk's order
SINGLE_LEAF: Plan = (LeafStep("", 0),)  # the plan of an argument that is one leaf

_MAX_PLANS = 512
_MAX_PLANNED_LEAVES = 500_000  # leaves of the planned treedefs, all together


class _SharedBudget:
    """Bounded caches sharing one budget of leaves: when one of them is full, or their plans would
    hold more leaves than the budget, all of them are emptied together."""

    __slots__ = ("caches", "limit", "leaves")

    def __init__(self, limit: int, *caches: Bounded):
        self.caches, self.limit, self.leaves = caches, limit, 0

    def keep(self, cache: Bounded, key: Any, plan: Any, leaves: int) -> None:
        """Keep `plan` (of `leaves` leaves) under `key` in `cache`, one of this budget's caches."""
        if len(cache) >= cache.limit or self.leaves + leaves > self.limit:
            for each in self.caches:
                each.clear()
            self.leaves = 0
        cache.put(key, plan)
        self.leaves += leaves


_PLANS = Bounded(
    _MAX_PLANS
)  # JAX's serialization of a treedef of dicts, lists, tuples and None -> its plan
_CALL_PLANS = Bounded(
    _MAX_PLANS
)  # JAX's serialization of a call's (args, kwargs) treedef -> CallPlan or False
# (hash of the treedef, its leaves, its nodes, JAX's argument names) -> `CallPlan`, for calls whose
# names show every dict key (see `call_plan`).
_NAMED_CALL_PLANS = Bounded(_MAX_PLANS)
_BUDGET = _SharedBudget(_MAX_PLANNED_LEAVES, _PLANS, _CALL_PLANS, _NAMED_CALL_PLANS)
_UNPLANNED = BoundedSet(
    4 * _MAX_PLANS
)  # hashes of treedefs holding other nodes or keys (JAX hashes them per call)


def tree_plan(td: Any) -> Plan | None:
    """The steps that `Walker.tree` takes for `td`, with paths relative to the argument and
    leaf positions relative to its first leaf; None unless `td` is made of dicts with string
    keys, lists, tuples and None (found by JAX's serialization of it, see the module's
    docstring)."""
    try:
        key = hash(td)
    except Exception:  # node data that cannot be hashed: walked
        return None
    if (
        key in _UNPLANNED
    ):  # (a plannable treedef of the same hash is walked instead: slower, the same leaves)
        return None
    try:
        proto = td.serialize_using_proto()
    except Exception:  # another node or key: JAX refuses to serialize it
        proto = None
    plan = _PLANS.get(proto) if proto is not None else None
    if plan is not None:
        return plan
    plan = _new_plan(td) if proto is not None else None
    if plan is None:
        _UNPLANNED.add(key)
        return None
    _BUDGET.keep(_PLANS, proto, plan, td.num_leaves)
    return plan


def argument_plan(td: Any, make: Callable[[Any], Plan | None] | None = None) -> Plan | None:
    """The plan of one argument's treedef (`SINGLE_LEAF` for a leaf) when the argument is plain
    (see `tree_plan`), else None; its signature has as many leaves as the plan has steps. `make`
    builds the plan (default: `tree_plan`, which remembers it)."""
    if td.num_nodes == 1 and td.num_leaves == 1:
        return SINGLE_LEAF
    return (make or tree_plan)(td)


class PlanArgument(NamedTuple):
    """One argument of a `CallPlan`."""

    where: int | str  # its position, or its keyword
    plan: Plan
    start: int  # its first leaf's index in the call's leaves


class CallPlan(NamedTuple):
    """How to read a call whose every argument is a tree of dicts with string keys, lists, tuples
    and None: its arguments, positional first, then keywords as JAX sorts them; and how many
    leaves its signature has (containers and None included)."""

    arguments: tuple  # of PlanArgument
    n_leaves: int


def call_plan(td: Any, names: tuple | None = None) -> CallPlan | None:
    """The `CallPlan` of a traced call's whole ``(args, kwargs)`` treedef, found by JAX's own
    serialization of it (one call, bytes; see `tree_plan`); None for any other call (a static
    argument, a custom node, a dict key that is not a string).

    `names`, JAX's name of each leaf (``DebugInfo.arg_names``, e.g. ``"params['w']"``), find a
    plan seen before without serializing: the treedef's hash covers its nodes' kinds and
    arities (not dict keys, and no user code runs), and names made of every dict key (each
    ``repr``'d) tell the keys apart. Only a call whose every dict entry holds a leaf is found
    that way (an entry holding ``None`` or an empty container shows in no name)."""
    named = None
    if type(names) is tuple:
        named = (hash(td), td.num_leaves, td.num_nodes, names)
        plan = _NAMED_CALL_PLANS.get(named)
        if plan is not None:
            return plan
    try:
        proto = td.serialize_using_proto()
    except Exception:  # a node or key JAX cannot serialize: static arguments, custom nodes
        return None
    plan = _CALL_PLANS.get(proto)
    if plan is None:
        plan = _new_call_plan(td) or False
        _BUDGET.keep(_CALL_PLANS, proto, plan, td.num_leaves if plan else 0)
    if (
        plan
        and named is not None
        and len(names) == td.num_leaves
        and all(type(n) is str and n for n in names)
        and _every_dict_entry_has_leaves(td)
    ):
        _BUDGET.keep(_NAMED_CALL_PLANS, named, plan, td.num_leaves)
    return plan or None


def keys_are_str(td: Any) -> bool:
    """Whether every dict key in `td` is a ``str`` itself (not a subclass: then the treedef holds no
    user object, and may be kept)."""
    return all(type(k) is str for keys, _ in _dicts(td) for k in keys)


def _every_dict_entry_has_leaves(td: Any) -> bool:
    """Whether every entry of every dict in `td` holds at least one leaf (so its key is in a
    name)."""
    return not any(child.num_leaves == 0 for _, children in _dicts(td) for child in children)


def _dicts(td: Any):
    """(keys, children) of every dict node in `td`."""
    stack = [td]
    while stack:
        node = stack.pop()
        if node.num_nodes == 1:
            continue
        kind, aux = node.node_data()
        children = node.children()
        if kind is dict:
            yield aux, children
        stack.extend(children)


def _new_call_plan(td: Any) -> CallPlan | None:
    if td.node_data()[0] is not tuple or td.num_nodes < 3:
        return None
    args_td, kwargs_td = td.children()
    kw_kind, kw_names = kwargs_td.node_data()
    if (
        args_td.node_data()[0] is not tuple
        or kw_kind is not dict
        or not all(type(k) is str for k in kw_names)
    ):
        return None
    arguments, start, n_leaves = [], 0, 0
    for where, child in (*enumerate(args_td.children()), *zip(kw_names, kwargs_td.children())):
        plan = argument_plan(child, _new_plan)  # (the call's plan is what is remembered)
        if plan is None:
            return None
        arguments.append(PlanArgument(where, plan, start))
        start += child.num_leaves
        n_leaves += len(plan)
    return CallPlan(tuple(arguments), n_leaves)


def _new_plan(td: Any) -> Plan | None:
    steps: list = []
    stack = [("", td, 0)]
    while stack:
        path, td, start = stack.pop()
        if td.num_nodes == 1 and td.num_leaves == 1:
            steps.append(LeafStep(path, start))
            continue
        kind, aux = td.node_data()
        if kind is type(None):
            steps.append(ConstStep(path, NONE_LEAF))
            continue
        if kind is dict:
            if not all(type(k) is str for k in aux):
                return None
        elif not (kind is list or kind is tuple):
            return None
        children = td.children()
        keys = child_keys(kind, aux, len(children))
        if kind is dict:
            steps.append(
                ConstStep(path + NODE_SUFFIX, container_leaf(kind, keys, children, [], start))
            )
        else:
            n = len(keys)
            all_leaves = n and all(c.num_nodes == 1 and c.num_leaves == 1 for c in children)
            steps.append(
                SeqStep(
                    path=path + NODE_SUFFIX,
                    name=kind.__name__,
                    n=n,
                    first=start if all_leaves else None,
                )
            )
        pending = []
        for key, child in zip(keys, children):
            pending.append((path + key, child, start))
            start += child.num_leaves
        stack.extend(reversed(pending))
    return tuple(steps)
