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

from .._core._values import printable, summarize_static
from .._core._vocabulary import Cause, JitKind, Origin, StrEnum
from .._keys._calls import (
    DecodedCall,
    SkeletonArg,
    TreeArg,
    arg_name,
    parameters,
    raw_identity,
    src_from_debug,
)
from .._keys._leaves import Placeholder, aval_leaf
from .._keys._signature import static_leaf
from ._registry import Evidence, Hint, JitWrapper, Library, register


class EqxOrigin(StrEnum):
    """What makes a value static under Equinox."""

    FILTER_JIT = "filter_jit"  # a non-array argument leaf under eqx.filter_jit
    STATIC_FIELD = "eqx.field(static=True)"


@register
class Equinox(Library):
    name = module = "equinox"
    jit = JitWrapper(JitKind.EQUINOX, "equinox")
    precedence = 30
    origins = {
        EqxOrigin.FILTER_JIT: " (a non-array argument under `eqx.filter_jit`)",
        EqxOrigin.STATIC_FIELD: " (`eqx.field(static=True)`)",
    }
    hints = (
        Hint(
            "static.filter_jit_number",
            "`eqx.filter_jit` treats a Python {type} as static, so every new value of {p} "
            "compiles again: pass "
            "`jnp.asarray(...)` to make it a traced array.",
            True,
        ),
        Hint(
            "static.eqx_field",
            "{p} is an `eqx.field(static=True)`: every new value compiles again. If it changes, "
            "make it an ordinary "
            "field holding an array.",
            True,
        ),
        Hint(
            "static.library_field",
            "{p} is a static field that `{owner}` declares (`eqx.field(static=True)` in its "
            "library): each new "
            "value compiles again, by the library's design.",
            False,
        ),
        Hint(
            "static.library_number",
            "{p} is a Python {type} given to a library's `eqx.filter_jit` function, which treats "
            "it as static: each "
            "new value compiles again. Whether the library accepts an array there is its own "
            "choice (its "
            "documentation says).",
            False,
        ),
    )

    def wraps(self, fun: Any) -> bool:
        return _is_filter_jit(fun)

    def decode_call(self, start, decoder) -> DecodedCall | None:
        return decode_filter_jit(start)

    def walk_node(self, walker, path: str, obj: Any) -> bool:
        """An `eqx.Module`'s `field(static=True)` values: part of its treedef, shown as leaves."""
        module = getattr(sys.modules.get("equinox"), "Module", None)
        if module is None or not isinstance(obj, module):
            return False
        static = [f.name for f in dataclasses.fields(obj) if f.metadata.get("static", False)]
        walker.static_fields(path, obj, static, EqxOrigin.STATIC_FIELD)
        return False

    def hint(self, evidence: Evidence):
        new = evidence.new
        if evidence.cause != Cause.STATIC or new.by_identity:
            return None
        if new.origin == EqxOrigin.FILTER_JIT and new.type_name in ("int", "float", "complex"):
            if (
                evidence.library
            ):  # (Diffrax rejects a tracer as `max_steps`: the fix is not the user's to make)
                return "static.library_number", {"type": new.type_name}
            return "static.filter_jit_number", {"type": new.type_name}
        if new.origin == EqxOrigin.STATIC_FIELD:
            if (
                evidence.owner_is_library
            ):  # (Lineax's operator `tags`: the library's own static field)
                return "static.library_field", {"owner": evidence.owner.rsplit(".", 1)[-1]}
            return "static.eqx_field", {}
        return None


def is_filter_jit_wrapper(obj: Any) -> bool:
    """Whether `obj` is what ``eqx.filter_jit`` returns: Equinox's ``_JitWrapper`` (0.13), told by
    its type without importing Equinox."""
    kind = type(obj)
    return kind.__name__ == "_JitWrapper" and (kind.__module__ or "").startswith("equinox")


_CALL_FRAMES = 60  # how far above a trace's frame Equinox's `_call` is looked for


def filter_jit_call(frame: Any) -> tuple[Any, tuple, dict] | None:
    """(the ``eqx.filter_jit`` wrapper, the call's args, kwargs) of the call that led to the trace
    announced at `frame`: the locals of Equinox's ``_call(jit_wrapper, is_lower, args, kwargs)``
    (``equinox/_jit.py``, 0.13) above it; None where there is no such frame, or for ``.lower``."""
    for _ in range(_CALL_FRAMES):
        if frame is None:
            return None
        if _jit_code(frame.f_code, "_call"):
            local = frame.f_locals
            wrapper, args, kwargs = (local.get(n) for n in ("jit_wrapper", "args", "kwargs"))
            if (
                local.get("is_lower") is False
                and is_filter_jit_wrapper(wrapper)
                and type(args) is tuple
                and type(kwargs) is dict
            ):
                return wrapper, args, kwargs
            return None
        frame = frame.f_back
    return None


def _is_filter_jit(fun: Any) -> bool:
    code = getattr(fun, "__code__", None)
    return code is not None and _jit_code(code, "fun_wrapped")


def _jit_code(code: Any, name: str) -> bool:
    """Whether `code` is `name`'s in ``equinox/_jit.py``."""
    return code.co_name == name and code.co_filename.replace("\\", "/").endswith("equinox/_jit.py")


def filter_jit_function(start) -> Any:
    """The function (or module) `eqx.filter_jit` wraps in the traced call `start`, else None."""
    if (
        not _is_filter_jit(start.fun)
        or len(start.positional) != 3
        or not start.positional[2].static
    ):
        return None
    try:
        (fun_leaves, fun_td), _, _ = start.positional[2].value
    except (TypeError, ValueError):
        return None
    return (
        fun_leaves[0] if fun_td.num_leaves == 1 and fun_td.num_nodes == 1 and fun_leaves else None
    )


def decode_filter_jit(start) -> DecodedCall | None:
    """An ``eqx.filter_jit`` call in the user's names (see the module's docstring); None for another
    call."""
    if (
        not _is_filter_jit(start.fun)
        or len(start.positional) != 3
        or not start.positional[2].static
    ):
        return None
    donate, nodonate, static = start.positional
    if donate.static or nodonate.static:
        return None
    (fun_leaves, fun_td), (first_leaves, first_td), (rest_leaves, rest_td) = static.value
    dynamic = _dynamic_avals(start.vals, donate, nodonate)

    def merge(part: str, static_leaves: list) -> list:
        return _merged(dynamic.get(part, []), static_leaves)

    arguments, identity, function_leaf, user_fun = [], None, None, None
    if not (
        fun_td.num_leaves == 1 and fun_td.num_nodes == 1
    ):  # eqx.filter_jit(module): its __call__
        module = fun_td.unflatten(merge("fun", fun_leaves))
        arguments.append(("self", SkeletonArg(module)))
        identity = _module_call_identity(module, start.debug_info)
        positional, var = parameters(getattr(type(module), "__call__", None), drop_first=True)
    else:
        user_fun = fun_leaves[0]
        positional, var = parameters(user_fun)
    names = []
    if first_leaves or dynamic.get("first"):
        name = arg_name(0, positional, var)
        arguments.append((name, TreeArg(first_td, merge("first", first_leaves))))
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
        function_leaf = (
            qualname,
            static_leaf(summarize_static(user_fun), Origin.FUNCTION, user_fun),
        )
    # Equinox binds every argument with inspect.signature: how it was passed never matters.
    call_how = tuple((name, "position") for name in names)
    return DecodedCall(
        jit_kind=JitKind.EQUINOX,
        user_fun=user_fun,
        identity=identity,
        arguments=arguments,
        function_leaf=function_leaf,
        call=call_how,
    )


def _merged(avals: list, static_leaves: list) -> list:
    """One part's leaves: a placeholder for each dynamic leaf's aval, a static leaf for each
    other."""
    merged = []
    for i, static in enumerate(static_leaves):
        index, aval = avals[i] if i < len(avals) else (-1, None)
        if aval is not None:
            merged.append(Placeholder(aval_leaf(aval), index))
        else:
            merged.append(
                Placeholder(static_leaf(summarize_static(static), EqxOrigin.FILTER_JIT, static))
            )
    return merged


def _module_call_identity(module: Any, debug_info: Any) -> tuple:
    """(qualname, file, line) of an `eqx.Module`'s ``__call__``, the function a jitted module
    runs."""
    call = getattr(type(module), "__call__", None)
    code = getattr(call, "__code__", None)
    if code is not None:
        return call.__qualname__, code.co_filename, code.co_firstlineno
    name = getattr(debug_info, "func_name", None) or "?"
    return f"{name}.__call__", *src_from_debug(debug_info)


def _dynamic_avals(vals: list, donate, nodonate) -> dict[str, list]:
    """Equinox's dynamic leaves: part ("fun", "first", "rest") -> [(flat index, aval) or (-1,
    None)]."""
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
