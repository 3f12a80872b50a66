"""What JAX compares of a static value in its cache key, kept without holding the user's object.

JAX's tracing-cache key holds every static value (a ``static_argnums`` argument, a custom
node's metadata, an ``eqx.field(static=True)``) and compares it with ``==``; a
``static_argnums`` value is wrapped in JAX's ``Static``, whose ``==`` also requires the same
type. A `Witness` lets the diagnosis ask that same question later:

* a small immutable builtin value (an int, a short string, a tuple of them) is kept as is;
* any other object is kept as a weak reference, with its hash. JAX's cache holds the object
  while its entry lives, so the reference is alive whenever JAX itself could compare with it;
* an object that takes no weak reference is kept as its hash only.

Two witnesses are equal when the objects are equal by ``==`` (JAX's own comparison); when one
object is gone, by their hashes (consistent with ``==`` for any value JAX accepts as static),
and a gone object compared by identity differs from any live one.
"""

from __future__ import annotations

import weakref
from typing import Any

_HELD_SCALARS = (int, float, bool, complex, type(None), type(Ellipsis))
_MAX_HELD_CHARS = 256
_MAX_HELD_ITEMS = 16


def _holdable(obj: Any, depth: int = 0) -> bool:
    """Whether `obj` is a small value made only of immutable builtins (no user object)."""
    t = type(obj)
    if t in _HELD_SCALARS:
        return t is not int or obj.bit_length() <= 256
    if t is str or t is bytes:
        return len(obj) <= _MAX_HELD_CHARS
    if (t is tuple or t is frozenset) and depth < 3 and len(obj) <= _MAX_HELD_ITEMS:
        return all(_holdable(item, depth + 1) for item in obj)
    return False


class Witness:
    """A static value as JAX's cache key compares it (see the module's docstring)."""

    __slots__ = ("held", "ref", "hash", "type_ref", "typed", "by_identity")

    def __init__(self, obj: Any, typed: bool = False):
        self.typed = typed  # compared as JAX's ``Static``: the same type, then ``==``
        t = type(obj)
        self.held, self.ref = _MISSING, None
        try:
            self.type_ref = weakref.ref(t)
        except TypeError:  # (every class takes weak references; a defensive default)
            self.type_ref = None
        try:
            self.by_identity = t.__eq__ is object.__eq__
        except Exception:
            self.by_identity = False
        if _holdable(obj):
            self.held = obj
        else:
            try:
                self.ref = weakref.ref(obj)
            except TypeError:
                pass
        try:
            self.hash = hash(obj)
        except Exception:
            self.hash = None

    def value(self) -> Any:
        """The object, or `_MISSING` when it is gone or was never kept."""
        if self.held is not _MISSING:
            return self.held
        obj = self.ref() if self.ref is not None else None
        return _MISSING if obj is None else obj

    def equals(self, other: Witness) -> bool:
        """Whether JAX's ``==`` finds the two values equal."""
        if self is other:
            return True
        if self.typed or other.typed:
            mine, theirs = self.type_ref, other.type_ref
            if mine is None or theirs is None or mine() is not theirs():
                return False
        a, b = self.value(), other.value()
        if a is not _MISSING and b is not _MISSING:
            if a is b:
                return True
            try:
                return bool(a == b)
            except Exception:  # an __eq__ that raises: JAX could not have cached it as equal either
                return False
        if self.by_identity or other.by_identity:
            return False  # a gone object is not the live one (nor another gone one, kept apart by JAX)
        return self.hash is not None and self.hash == other.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Witness) and self.equals(other)

    def __hash__(self) -> int:
        return hash(self.hash)  # (values JAX compares equal hash equal)

    def __repr__(self) -> str:
        kept = "held" if self.held is not _MISSING else "weak" if self.ref is not None else "hash"
        return f"Witness({kept}, typed={self.typed})"


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


def values_equal(old: Any, new: Any) -> bool:
    """JAX's ``==`` of two kept comparison values (avals, held context values, witnesses)."""
    if old is new:
        return True
    try:
        return bool(old == new)
    except Exception:
        return False
