"""Diffrax: ``diffrax.diffeqsolve``'s statics in the user's terms.

``diffeqsolve`` is an ``eqx.filter_jit`` function: its call is Equinox's to read (`equinox`),
and every argument that is not an array (the solver, the ``SaveAt``, the step-size controller,
the terms' functions, Python numbers) is part of what it compiles for. This adapter adds what
Diffrax users need on top:

* Diffrax, Lineax and Optimistix frames are library code: the call site is the user's line
  that called ``diffeqsolve``, and Diffrax's own jitted helpers are internal.
* ``SaveAt(t0=…, t1=…, ts=…, steps=…, fn=…)`` is shorthand for one ``SubSaveAt`` in
  ``SaveAt.subs``: its options are shown as the user wrote them (``saveat.ts``, not
  ``saveat.subs.ts``), each static one with origin `DiffraxOrigin.SAVEAT`.
* ``max_steps`` sizes the buffers ``diffeqsolve`` compiles (a Python int, never an array):
  origin `DiffraxOrigin.MAX_STEPS`, not the hint to pass an array.
* Another solver, step-size controller, term or adjoint type is a new program by design, and so
  is another ``SaveAt`` (another number of save times): explanations say so, instead of the
  hints to convert a container or to pad an array.

Tolerances, ``t0``, ``t1``, ``dt0`` and ``args`` stay Equinox's: a Python float there is static,
and ``jnp.asarray(...)`` makes it traced (``static.filter_jit_number``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._core._values import name_values_by
from .._core._vocabulary import Cause, LeafKind, StrEnum
from .._keys._calls import DecodedCall, SkeletonArg
from .._keys._leaves import Placeholder, custom_node_leaf
from ._registry import Evidence, Hint, Library, register
from .equinox import EqxOrigin, decode_filter_jit, filter_jit_function

name_values_by("lineax._tags._HasRepr", "string")  # Lineax's operator tags: `symmetric_tag`, ...


class DiffraxOrigin(StrEnum):
    """What makes a value static under ``diffrax.diffeqsolve``, in Diffrax's terms."""

    SAVEAT = "diffrax.SaveAt option"
    MAX_STEPS = "diffeqsolve max_steps"


@register
class Diffrax(Library):
    name = module = "diffrax"
    packages = ("diffrax", "lineax", "optimistix")
    precedence = 25  # before Equinox: it reads `diffeqsolve`'s `eqx.filter_jit` call first
    origins = {
        DiffraxOrigin.SAVEAT: " (an option of `diffrax.SaveAt`: what `diffeqsolve` saves, which "
        "shapes its output)",
        DiffraxOrigin.MAX_STEPS: " (`max_steps` of `diffrax.diffeqsolve`: it sizes the buffers "
        "`diffeqsolve` compiles, so it is a Python int, never an array)",
    }
    hints = (
        Hint(
            "diffrax.component",
            "{p} was a `{before}` and is now a `{after}`: `diffrax.diffeqsolve` compiles once for "
            "each type of "
            "solver, step-size controller, term and adjoint it is given, so a different one "
            "compiles again, as "
            "expected when comparing them.",
            False,
        ),
        Hint(
            "diffrax.saveat",
            "{p} is part of the `diffrax.SaveAt`, which decides what `diffeqsolve` saves and so "
            "the shape of its "
            "output: each new choice (another number of times in `ts`, `ts` given or not) "
            "compiles again, as "
            "expected when it changes.",
            False,
        ),
    )

    def decode_call(self, start, decoder) -> DecodedCall | None:
        fun = filter_jit_function(start)
        if not _is_diffeqsolve(fun):
            return None
        call = decode_filter_jit(start)
        if call is None:
            return None
        arguments = [
            (name, _max_steps(part) if name == "max_steps" else part)
            for name, part in call.arguments
        ]
        return call._replace(arguments=arguments)

    def walk_node(self, walker, path: str, obj: Any) -> bool:
        if _is(obj, "SaveAt"):
            return _walk_saveat(walker, path, obj)
        return False

    def hint(self, evidence: Evidence):
        old, new = evidence.old, evidence.new
        if evidence.cause not in (Cause.STRUCTURE, Cause.SHAPE):
            return None
        if (
            old is not None
            and new is not None
            and old.kind == new.kind == LeafKind.NODE
            and old.type_name != new.type_name
            and _is_diffrax_type(old.type_name)
            and _is_diffrax_type(new.type_name)
        ):
            return "diffrax.component", {
                "before": _short(old.type_name),
                "after": _short(new.type_name),
            }
        if evidence.owner.startswith("diffrax.") and evidence.owner.endswith(".SaveAt"):
            return "diffrax.saveat", {}
        return None


def _is_diffeqsolve(fun: Any) -> bool:
    return getattr(fun, "__name__", None) == "diffeqsolve" and (
        getattr(fun, "__module__", None) or ""
    ).startswith("diffrax")


def _is(obj: Any, name: str) -> bool:
    t = type(obj)
    return t.__name__ == name and (getattr(t, "__module__", "") or "").startswith("diffrax")


def _is_diffrax_type(qualified: str) -> bool:
    return qualified.startswith("diffrax.")


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


def _retagged(item: Any, origin: str) -> Any:
    """`item` with `origin` when it is a static leaf Equinox made (a non-array value), else as
    is."""
    if (
        type(item) is Placeholder
        and item.leaf.kind == LeafKind.STATIC
        and item.leaf.origin == EqxOrigin.FILTER_JIT
    ):
        return Placeholder(item.leaf._replace(origin=origin), item.index)
    return item


def _max_steps(part: Any) -> Any:
    if type(part) is SkeletonArg:
        return SkeletonArg(_retagged(part.obj, DiffraxOrigin.MAX_STEPS))
    return part


def _fields(obj: Any) -> list[tuple[str, Any]] | None:
    """(name, value) of each field of a dataclass (read without running user code), else None."""
    if not dataclasses.is_dataclass(obj):
        return None
    try:
        return [(f.name, object.__getattribute__(obj, f.name)) for f in dataclasses.fields(obj)]
    except AttributeError:
        return None


def _walk_saveat(walker, prefix: str, saveat: Any) -> bool:
    """A ``SaveAt`` whose ``subs`` is one ``SubSaveAt`` (the shorthand ``SaveAt(t1=True)``): that
    ``SubSaveAt``'s options under the ``SaveAt``'s own path, as the user wrote them; any other
    ``subs`` (a tree of ``SubSaveAt``\\ s) is walked as it is."""
    fields, subs = _fields(saveat), None
    for name, value in fields or ():
        if name == "subs":
            subs = _fields(value) if _is(value, "SubSaveAt") else None
    if fields is None or subs is None:
        return False
    walker.node(prefix, custom_node_leaf(type(saveat), len(fields)))
    for name, value in fields:
        for inner, item in subs if name == "subs" else [(name, value)]:
            walker.emit(f"{prefix}.{inner}", _retagged(item, DiffraxOrigin.SAVEAT))
    return True
