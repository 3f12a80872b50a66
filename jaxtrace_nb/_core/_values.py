"""Bounded, side-effect-free summaries of static values.

User objects are never `repr`-ed unless their type's `repr` is known to be safe and
cheap: the summary is built by this module from the object's type, name and (for
containers, dataclasses and named tuples) its fields, within a character and element
budget. The object itself is never stored: only the returned strings and tokens.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import types
from typing import Any, NamedTuple

MAX_CHARS = 200
_MAX_ITEMS = 8
_MAX_DEPTH = 3

_SCALARS = (bool, int, float, complex, type(None), type(Ellipsis))
_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
)


class Local(int):
    """A hash or an address inside a token: within one process it compares as the number it is;
    it never travels to another process, where the same value has another (`_divergence` leaves
    it out of a key's portable form)."""

    __slots__ = ()


class StaticInfo(NamedTuple):
    """What a signature keeps of a static value: text, type, and a comparable token."""

    text: str  # bounded display text
    type_name: str  # qualified type name
    name: str | None  # stable name of a callable (no address), else None
    by_identity: bool  # compared (hashed) by object identity
    token: tuple  # equal tokens <=> "same static value" for our diff


# Library types whose value is named by one string attribute (read without running their code),
# registered by their adapters: qualified type name -> attribute.
_NAMED_BY: dict[str, str] = {}


def name_values_by(type_name: str, attribute: str) -> None:
    """Summaries of objects of `type_name` (qualified) read as their `attribute`, a string (an
    adapter's word for a library's marker objects, such as Lineax's operator tags)."""
    _NAMED_BY[type_name] = attribute


def _type_name(obj: Any) -> str:
    t = type(obj)
    module = getattr(t, "__module__", "") or ""
    qual = getattr(t, "__qualname__", getattr(t, "__name__", "?"))
    if module in ("builtins", ""):
        return str(qual)
    return f"{module}.{qual}"


def _callable_name(obj: Any) -> str | None:
    """The stable name of a function-like object, e.g. ``jit(sin)``, ``partial(f)``."""
    if isinstance(obj, functools.partial):
        inner = _callable_name(obj.func)
        return f"partial({inner or _type_name(obj.func)})"
    if isinstance(obj, _FUNCTION_TYPES):
        return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    type_name = type(obj).__name__
    if type_name == "PjitFunction":  # the object jax.jit returns
        wrapped = getattr(obj, "__wrapped__", None)
        inner = _callable_name(wrapped) if wrapped is not None else None
        return f"jit({inner or '?'})"
    return None


def _device_name(obj: Any) -> str | None:
    """A JAX device as the user knows it (``cpu:0``, ``cuda:1``); None for anything else."""
    t = type(obj)
    if not (getattr(t, "__module__", "") or "").startswith("jaxlib") or "Device" not in t.__name__:
        return None
    try:
        return f"{obj.platform}:{obj.id}"
    except Exception:
        return None


def _is_identity_compared(obj: Any) -> bool:
    t = type(obj)
    if t in _SCALARS:
        return False
    if isinstance(obj, (*_FUNCTION_TYPES, functools.partial)) or t.__name__ == "PjitFunction":
        return True
    try:
        return t.__hash__ is object.__hash__ and t.__eq__ is object.__eq__
    except Exception:
        return False


def _is_namedtuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(type(obj), "_fields")


class _Budget:
    __slots__ = ("chars", "items")

    def __init__(self, chars: int):
        self.chars = chars
        self.items = 64


def _fmt(obj: Any, budget: _Budget, depth: int) -> str:
    budget.items -= 1
    if budget.items < 0 or budget.chars <= 0:
        return "…"
    out = _fmt_one(obj, budget, depth)
    budget.chars -= len(out)
    return out


def _fmt_one(obj: Any, budget: _Budget, depth: int) -> str:
    t = type(obj)
    if isinstance(obj, enum.Enum):
        return f"{t.__name__}.{obj.name}"
    if t is int and obj.bit_length() > 128:
        return f"int({obj.bit_length()} bits)"
    if t in _SCALARS:
        return repr(obj)  # builtin reprs of exact builtin types run no user code
    if isinstance(obj, (int, float)):  # subclass: show the plain value, not its repr
        return f"{t.__name__}({(int if isinstance(obj, int) else float).__repr__(obj)})"
    if isinstance(obj, str):
        s = str.__str__(obj)
        return repr(s[: budget.chars]) + ("…" if len(s) > budget.chars else "")
    if isinstance(obj, bytes):
        b = bytes.__getitem__(obj, slice(0, budget.chars // 2))
        return repr(b) + ("…" if len(obj) > len(b) else "")
    device = _device_name(obj)
    if device is not None:
        return device
    name = _callable_name(obj)
    if name is not None:
        return f"<{name}>" if name.startswith(("jit(", "partial(")) else f"<function {name}>"
    if isinstance(obj, type):  # qualified: `numpy.float32` and `jax.numpy.float32` are two values
        module = getattr(obj, "__module__", "") or ""
        qual = getattr(obj, "__qualname__", "?")
        return f"<class {qual if module in ('builtins', '') else f'{module}.{qual}'}>"
    module = getattr(t, "__module__", "") or ""
    attribute = _NAMED_BY.get(f"{module}.{getattr(t, '__qualname__', '')}") if _NAMED_BY else None
    if attribute is not None:
        try:
            value = object.__getattribute__(obj, attribute)
        except AttributeError:
            value = None
        if type(value) is str:
            return value[: budget.chars]
    if module == "numpy" or module.startswith("numpy."):
        if t.__name__.endswith("DType") or t.__name__ == "dtype":
            return f"dtype({getattr(obj, 'name', '?')})"
        if getattr(obj, "shape", None) == ():  # numpy scalar: numpy's own repr
            return repr(obj)
        return f"{t.__name__}{list(getattr(obj, 'shape', ()))}"  # never the data
    if depth >= _MAX_DEPTH:
        return f"{_short_type(obj)}(…)"
    if _is_namedtuple(obj):
        fields = t._fields
        items = ((f, tuple.__getitem__(obj, i)) for i, f in enumerate(fields))
        return _fmt_items(f"{t.__name__}(", ")", items, len(fields), budget, depth, "=")
    if t in (tuple, list):
        open_, close = ("(", ")") if t is tuple else ("[", "]")
        if t is tuple and len(obj) == 1:
            close = ",)"
        return _fmt_items(open_, close, ((None, x) for x in obj), len(obj), budget, depth)
    if isinstance(obj, dict):  # (a subclass's items read by dict's own methods: no user code runs)
        pairs = (
            collections.OrderedDict.items(obj) if t is collections.OrderedDict else dict.items(obj)
        )
        items = ((_fmt(k, budget, depth + 1), v) for k, v in pairs)
        open_, close = ("{", "}") if t is dict else (f"{t.__name__}({{", "})")
        return _fmt_items(open_, close, items, dict.__len__(obj), budget, depth, ": ")
    if t in (set, frozenset):
        return _fmt_items(
            f"{t.__name__}({{", "})", ((None, x) for x in obj), len(obj), budget, depth
        )
    if dataclasses.is_dataclass(obj):
        fields = [f.name for f in dataclasses.fields(obj)]
        items = ((f, object.__getattribute__(obj, f)) for f in fields)
        return _fmt_items(f"{t.__name__}(", ")", items, len(fields), budget, depth, "=")
    return f"<{_short_type(obj)} object>"


def _short_type(obj: Any) -> str:
    return getattr(type(obj), "__qualname__", "object")


def _fmt_items(open_, close, items, n, budget, depth, keyed=None):
    parts = []
    for i, (k, v) in enumerate(items):
        if i >= _MAX_ITEMS or budget.chars <= 0 or budget.items <= 0:
            parts.append(f"… +{n - i}")
            break
        val = _fmt(v, budget, depth + 1)
        parts.append(f"{k}{keyed}{val}" if keyed and k is not None else val)
    return open_ + ", ".join(parts) + close


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def printable(text: str, limit: int = MAX_CHARS) -> str:
    """A user-given name as plain text: an exact `str`, at most `limit` characters, every
    non-printable character (control characters, bidi overrides, NUL) written as its
    Python escape (``\\x1b``), so that no terminal or page interprets it."""
    s = str.__str__(text)[: limit + 1]  # a str subclass's own __str__ never runs
    if not s.isprintable():
        s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    return clip(s, limit)


def summarize_static(obj: Any) -> StaticInfo:
    """Summarise a static (hashable, non-array) argument value without storing it.

    The text is at most ``MAX_CHARS`` characters; no user ``__repr__`` runs.
    """
    try:
        text = clip(_fmt(obj, _Budget(MAX_CHARS), 0))
    except Exception:  # a hostile __getattr__/__len__ on a container subclass
        text = f"<{_short_type(obj)} object>"
    type_name = _type_name(obj)
    name = _callable_name(obj)
    by_identity = _is_identity_compared(obj)
    if by_identity:
        token = ("id", type_name, Local(id(obj)))
    else:
        try:
            h = Local(hash(obj))
        except Exception:
            h = None
        token = ("value", type_name, h, text)
    return StaticInfo(
        text=text, type_name=type_name, name=name, by_identity=by_identity, token=token
    )
