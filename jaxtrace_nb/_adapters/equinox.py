"""Equinox: ``eqx.filter_jit`` calls and ``eqx.Module`` static fields, in the user's names.

``eqx.filter_jit(f)`` jits an inner ``fun_wrapped(dynamic_donate, dynamic_nodonate, static)``
(``equinox/_jit.py``). ``static`` (a static argument, so node data in the treedef) is
``(static_fun, static_first, static_rest)``, each a ``(leaves, treedef)`` pair of the
hashable partition, with None where a leaf is dynamic; ``static_rest`` is
``((rest_args…, None), kwargs)`` after ``inspect.signature(f).bind``. The dynamic leaves
are ``{"fun", "first", "rest"}`` dicts of lists in the two dynamic arguments. Merging
both gives each argument back, with placeholders for the arrays.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from .._arguments import (DecodedCall, Placeholder, SkeletonArg, TreeArg, arg_name, aval_leaf, parameters,
                          raw_identity, src_from_debug)
from .._signature import Origin, static_leaf
from .._values import printable, summarize_static


def available() -> bool:
    return "equinox" in sys.modules


def _module_type():
    return getattr(sys.modules.get("equinox"), "Module", None)


def _is_filter_jit(fun: Any) -> bool:
    code = getattr(fun, "__code__", None)
    return (code is not None and code.co_name == "fun_wrapped"
            and code.co_filename.replace("\\", "/").endswith("equinox/_jit.py"))


def wraps(fun: Any) -> bool:
    return _is_filter_jit(fun)


def decode_call(start, static_type, decoder):

    if not _is_filter_jit(start.fun) or len(start.positional) != 3 or not start.positional[2].static:
        return None
    donate, nodonate, static = start.positional
    if donate.static or nodonate.static:
        return None
    (fun_leaves, fun_td), (first_leaves, first_td), (rest_leaves, rest_td) = static.value
    dynamic = _dynamic_avals(start.vals, donate, nodonate)

    def merge(part: str, static_leaves: list) -> list:
        avals = dynamic.get(part, [])
        merged = []
        for i, static in enumerate(static_leaves):
            index, aval = avals[i] if i < len(avals) else (-1, None)
            if aval is not None:
                merged.append(Placeholder(aval_leaf(aval), index))
            else:
                merged.append(Placeholder(static_leaf(summarize_static(static), Origin.FILTER_JIT, static)))
        return merged

    fun_is_module = not (fun_td.num_leaves == 1 and fun_td.num_nodes == 1)
    arguments, identity, function_leaf, user_fun = [], None, None, None
    if fun_is_module:  # eqx.filter_jit(module): the function is the module's __call__
        module = fun_td.unflatten(merge("fun", fun_leaves))
        arguments.append(("self", SkeletonArg(module)))
        call = getattr(type(module), "__call__", None)
        code = getattr(call, "__code__", None)
        if code is not None:
            identity = (call.__qualname__, code.co_filename, code.co_firstlineno)
        else:
            name = getattr(start.debug_info, "func_name", None) or "?"
            identity = (f"{name}.__call__", *src_from_debug(start.debug_info))
        positional, var = parameters(call, drop_first=True)
    else:
        user_fun = fun_leaves[0]
        positional, var = parameters(user_fun)
    first = merge("first", first_leaves)
    names = []
    if first_leaves or dynamic.get("first"):
        name = arg_name(0, positional, var)
        arguments.append((name, TreeArg(first_td, first)))
        names.append(name)
    rest_args, kwargs = rest_td.unflatten(merge("rest", rest_leaves))
    for j, arg in enumerate(rest_args[:-1]):  # the last is Equinox's dummy None
        name = arg_name(j + 1, positional, var)
        arguments.append((name, SkeletonArg(arg)))
        names.append(name)
    for key, arg in kwargs.items():
        arguments.append((str(key), SkeletonArg(arg)))
        names.append(str(key))
    if user_fun is not None:
        qualname = printable(raw_identity(user_fun, start.debug_info)[0])
        function_leaf = (qualname, static_leaf(summarize_static(user_fun), Origin.FUNCTION, user_fun))
    # Equinox binds every argument with inspect.signature: how it was passed never matters.
    call_how = tuple((name, "position") for name in names)
    return DecodedCall("equinox", user_fun, identity, arguments, function_leaf, call_how)


def _dynamic_avals(vals: list, donate, nodonate) -> dict[str, list]:
    """Equinox's dynamic leaves: part ("fun", "first", "rest") -> [(flat index, aval) or (-1, None)]."""
    dynamic: dict[str, list] = {}
    for arg in (donate, nodonate):
        index = arg.start
        keys = arg.tree.node_data()[1]
        for key, part_td in zip(keys, arg.tree.children()):
            entries = dynamic.setdefault(key, [])
            for child in part_td.children():
                if child.num_leaves == 1:
                    entries.append((index, vals[index]))
                    index += 1
                else:
                    entries.append((-1, None))
    return dynamic


def walk_node(walker, prefix: str, obj: Any) -> bool:
    """An `eqx.Module`'s `field(static=True)` values: part of its treedef, shown as leaves."""
    module = _module_type()
    if module is None or not isinstance(obj, module):
        return False
    static = [f.name for f in dataclasses.fields(obj) if f.metadata.get("static", False)]
    walker.static_fields(prefix, obj, static, Origin.EQX_STATIC_FIELD)
    return False
