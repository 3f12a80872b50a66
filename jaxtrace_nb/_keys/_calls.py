"""A traced call read back from JAX in the user's terms: `DecodedCall` and its arguments.

An argument is a `StaticArg` (static as a whole: ``static_argnums``, a ``Partial``'s
function), a `TreeArg` (its treedef, with its leaves' abstract values or placeholders) or a
`SkeletonArg` (an object rebuilt with placeholders); each emits its leaves into a `Walker`.
The user's names come from the function's own parameters (`parameters`, `arg_name`).
"""

from __future__ import annotations

import inspect
import re
from typing import TYPE_CHECKING, Any, NamedTuple

from ._leaves import placeholders

if TYPE_CHECKING:
    from ._walker import Walker

SRC_INFO = re.compile(r"^(?P<name>.*) at (?P<file>.*):(?P<line>\d+)$")  # JAX's "f at file:line"


class StaticArg(NamedTuple):
    """An argument that is static as a whole (static_argnums, a Partial's function, ...)."""

    value: Any
    origin: str
    holder: Any = None  # `HeldStatic`: the value in JAX's key, for one without a weak reference

    def emit(self, walker: Walker, path: str) -> None:
        walker.static(path, self.value, self.origin, self.holder)


class TreeArg(NamedTuple):
    """An argument given as its treedef; its leaves are `vals[start:]` (abstract values or
    `Placeholder`s)."""

    td: Any
    vals: list
    start: int = 0

    def emit(self, walker: Walker, path: str) -> None:
        walker.tree(path, self.td, self.vals, self.start)

    def placeholders(self) -> list:
        """One `Placeholder` per leaf, for rebuilding the argument as a skeleton."""
        return placeholders(self.td, self.vals, self.start)


class SkeletonArg(NamedTuple):
    """An argument given as a skeleton object (placeholders and static values)."""

    obj: Any

    def emit(self, walker: Walker, path: str) -> None:
        walker.emit(path, self.obj)


class DecodedCall(NamedTuple):
    """A traced call in the user's terms: the decoder's reading of a plain ``jax.jit`` call, or a
    library adapter's of its own jit wrapper's."""

    jit_kind: str  # a `JitKind`
    user_fun: Any  # the user's function object, or None (e.g. a module's __call__)
    identity: tuple | None  # (qualname, filename, line) where `user_fun` does not give it
    arguments: list  # [(argument name, StaticArg | TreeArg | SkeletonArg), ...] in the user's order
    function_leaf: tuple | None  # (path, Leaf): the function itself, a static part of the key
    call: tuple  # ((argument, "position" | "keyword"), ...)


def parameters(fn: Any, drop_first: bool = False) -> tuple[list[str], str | None]:
    """Positional parameter names, and the *args name if any."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except Exception:
        return [], None
    if drop_first and params:
        params = params[1:]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return positional, var


def arg_name(i: int, positional: list[str], var: str | None) -> str:
    """The name of positional argument `i`: its parameter's, else ``args[k]`` (or the *args
    name)."""
    if i < len(positional):
        return positional[i]
    return f"{var or 'args'}[{i - len(positional)}]"


def raw_identity(fun: Any, debug_info: Any) -> tuple[str, str, int]:
    """(qualified name, file, first line) of a traced function, from its code where it has one."""
    try:
        target = inspect.unwrap(fun)
    except Exception:
        target = fun
    code = getattr(target, "__code__", None)
    if code is None and not isinstance(target, type):
        code = getattr(getattr(type(target), "__call__", None), "__code__", None)
    qual = getattr(fun, "__qualname__", None) or getattr(target, "__qualname__", None)
    if not isinstance(qual, str):
        qual = getattr(debug_info, "func_name", None) or type(fun).__name__
    if code is not None:
        return qual, code.co_filename, code.co_firstlineno
    return (qual, *src_from_debug(debug_info))


def src_from_debug(debug_info: Any) -> tuple[str, int]:
    """(file, line) of JAX's debug info's "f at file:line", or ("?", 0)."""
    match = SRC_INFO.match(str(getattr(debug_info, "func_src_info", "") or ""))
    if match:
        return match["file"], int(match["line"])
    return "?", 0


def argument(part, vals: list, origin: str):
    """A `StaticArg` or a `TreeArg` for one argument (a layout's `ArgPart`) of a traced call."""
    if part.static:
        return StaticArg(part.value, origin, part.holder)
    return TreeArg(part.tree, vals, part.start)
