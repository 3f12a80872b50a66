"""What JAX compares of a static value in its cache key, kept without holding the user's object.

JAX's tracing-cache key holds every static value (a ``static_argnums`` argument, a custom
node's metadata, an ``eqx.field(static=True)``) and compares it the way a dict lookup does:
the same object, or ``==`` (checked on JAX 0.10.2: the same NaN object twice hits, two NaN
objects miss). A ``static_argnums`` value is wrapped in JAX's ``Static``, whose ``==`` also
requires the same type. A `Witness` lets the diagnosis ask that same question later, with the
value as it was when JAX compared it (at the trace), never a hash standing for equality:

* a small immutable builtin value (an int, a short string, a tuple of them) is kept as is;
* any other value that has a plain form (`canonical`: NumPy scalars and dtypes, long tuples,
  strings, frozensets, dataclasses and named tuples of such values, and of objects compared by
  identity, which the form holds weakly) keeps that form, taken at the trace: two plain forms
  are equal exactly when JAX's ``==`` finds the values equal, and a value mutated after its
  trace is compared as it was;
* any other object is kept as a weak reference. JAX's cache holds the object while its entry
  lives, so the reference is alive whenever JAX itself could compare with it; an object
  compared by identity that is gone differs from any live one;
* what is left (no plain form, no weak reference, or gone while compared by ``==``) is
  *incomparable*: its hash is kept as evidence of a difference only (JAX's ``==`` implies equal
  hashes). Two incomparable values with equal hashes are not named as a change, and
  `certain` tells the diagnosis that it cannot say they are equal: it says so in JAX's terms.

A value kept by reference (weakly, or through JAX's own key: `holder`) and a dataclass that is
not frozen can change after JAX compared it. Such a value is compared when JAX compares it: at
its trace, right after JAX's lookup missed, `LookupVerdicts` asks JAX's question (its hash, then
``==`` of the live objects) of each earlier value at the same place of the same function, and
the answers (`Witness.verdicts`) decide later, whatever the objects became.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable

from ._values import Local, summarize_static

_HELD_SCALARS = (int, float, bool, complex, type(None), type(Ellipsis))
_MAX_HELD_CHARS = 256
_MAX_HELD_ITEMS = 16
_MAX_CANONICAL_ATOMS = (
    1024  # values and fields a plain form may hold (a string costs one per 16 characters)
)
_MAX_CANONICAL_DEPTH = 8


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


class _NoForm(Exception):
    pass


def canonical(obj: Any) -> Any:
    """A plain form of `obj` made of builtins, equal to another's exactly when JAX's ``==`` finds
    the values equal, or `_MISSING` where there is none (a class with its own ``__eq__``)."""
    try:
        return _canonical(obj, 0, [_MAX_CANONICAL_ATOMS])
    except _NoForm:
        return _MISSING
    except Exception:  # (an attribute that raises: no form)
        return _MISSING


def _spend(budget: list, n: int) -> None:
    budget[0] -= n
    if budget[0] < 0:
        raise _NoForm


def _canonical(obj: Any, depth: int, budget: list) -> Any:
    if depth > _MAX_CANONICAL_DEPTH:
        raise _NoForm
    t = type(obj)
    if t in _HELD_SCALARS:
        _spend(budget, 1)
        return obj if t is not int or obj.bit_length() <= 4096 else _no_form()
    if t is str or t is bytes:
        _spend(budget, 1 + len(obj) // 16)
        return obj
    if t is tuple:
        _spend(budget, 1)
        return tuple(_canonical(item, depth + 1, budget) for item in obj)
    if t is frozenset:
        _spend(budget, 1)
        return frozenset(_canonical(item, depth + 1, budget) for item in obj)
    module = getattr(t, "__module__", "") or ""
    if module == "numpy" or module.startswith("numpy."):
        import numpy as np  # (numpy is loaded: the value is one of its objects)

        if isinstance(obj, np.generic) and obj.dtype.kind in "biufc?":
            _spend(budget, 1)
            return obj.item()  # (a NumPy scalar equals the Python number it holds)
        if isinstance(obj, np.dtype):
            _spend(budget, 1)
            return ("numpy.dtype", obj.str, obj.name)
        raise _NoForm
    if isinstance(obj, tuple) and hasattr(t, "_fields") and t.__eq__ is tuple.__eq__:
        _spend(budget, 1)  # a named tuple compares as a tuple
        return tuple(_canonical(item, depth + 1, budget) for item in obj)
    if _identity_compared(t):
        _spend(budget, 1)  # a weak reference compares as its object while it lives, then as itself
        try:
            return weakref.ref(obj)
        except TypeError:
            raise _NoForm from None
    if dataclasses.is_dataclass(obj) and _generated_eq(t):
        _spend(budget, 1)  # a dataclass's own ``==``: the same class, then its compared fields
        fields = tuple(
            _canonical(object.__getattribute__(obj, f.name), depth + 1, budget)
            for f in dataclasses.fields(obj)
            if f.compare
        )
        return ("dataclass", module, t.__qualname__, Local(id(t)), fields)
    raise _NoForm


def _field_names(obj: Any) -> tuple | None:
    if isinstance(obj, tuple) and hasattr(type(obj), "_fields"):
        return tuple(map(str, type(obj)._fields))
    if dataclasses.is_dataclass(obj):
        return tuple(f.name for f in dataclasses.fields(obj) if f.compare)
    return None


def differing_part(old: Witness, new: Witness) -> str | None:
    """Where two values kept as plain forms first differ, as a path (``.init``, ``[2]``) and what
    differs there ("another object", or both values), or None where that cannot be said."""
    a, b = old.held, new.held
    if a is _MISSING or b is _MISSING:
        return None
    fields = new.fields if new.fields == old.fields else None
    if (
        type(a) is tuple
        and len(a) == 5
        and a[:1] == ("dataclass",)
        and type(b) is tuple
        and b[:1] == ("dataclass",)
    ):
        a, b = a[4], b[4]
    return _first_difference(a, b, fields)


def _first_difference(a: Any, b: Any, fields: tuple | None) -> str | None:
    if type(a) is tuple and type(b) is tuple:
        if len(a) != len(b):
            return f"{len(a)} items → {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            if x is y or _equal(x, y):
                continue
            where = f".{fields[i]}" if fields is not None and i < len(fields) else f"[{i}]"
            inner = _first_difference(x, y, None)
            return (
                f"{where}{inner if inner and inner[:1] in '.[' else ': ' + (inner or '')}".rstrip(
                    ": "
                )
            )
        return None
    if type(a) is weakref.ReferenceType or type(b) is weakref.ReferenceType:
        return "another object"
    if type(a) is frozenset and type(b) is frozenset:
        return f"{len(b - a)} added, {len(a - b)} removed"
    if type(a) in _PLAIN and type(b) in _PLAIN:  # (builtin reprs run no user code)
        text = f"{a!r} → {b!r}"
        return text if len(text) <= 60 else text[:59] + "…"
    return None


_PLAIN = (int, float, bool, str, bytes, type(None))


def _equal(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:
        return False


def _identity_compared(t: type) -> bool:
    try:
        return t.__eq__ is object.__eq__
    except Exception:
        return False


def _no_form() -> Any:
    raise _NoForm


def _mutable_dataclass(t: type) -> bool:
    """Whether `t` is a dataclass whose fields may change after a trace (not frozen): the one
    kind of value with a plain form that can."""
    params = getattr(t, "__dataclass_params__", None)
    return params is not None and not params.frozen


def _generated_eq(t: type) -> bool:
    """Whether `t`'s ``__eq__`` is the one ``dataclasses`` writes (it compiles it from text)."""
    params = getattr(t, "__dataclass_params__", None)
    eq = t.__dict__.get("__eq__")
    code = getattr(eq, "__code__", None)
    return bool(
        params is not None and params.eq and code is not None and code.co_filename == "<string>"
    )


class Witness:
    """A static value as JAX's cache key compares it (see the module's docstring)."""

    __slots__ = (
        "held",
        "ref",
        "object_ref",
        "holder",
        "type_ref",
        "typed",
        "by_identity",
        "nan",
        "hash",
        "fields",
        "serial",
        "verdicts",
        "then",
        "__weakref__",
    )

    def __init__(self, obj: Any, typed: bool = False, holder: Callable[[], Any] | None = None):
        self.typed = typed  # compared as JAX's ``Static``: the same type, then ``==``
        t = type(obj)
        self.held, self.ref, self.object_ref, self.holder = _MISSING, None, None, None
        self.serial = next(_SERIALS)  # (which of two witnesses was made first)
        self.verdicts: dict[int, bool] | None = None  # earlier serial -> JAX's ``==`` at the lookup
        self.then: dict[int, str] | None = None  # earlier serial -> its text then, if changed since
        try:
            self.type_ref = weakref.ref(t)
        except TypeError:  # (every class takes weak references; a defensive default)
            self.type_ref = None
        self.by_identity = _identity_compared(t)
        self.nan = t is float and obj != obj
        self.fields = None
        try:
            self.hash = hash(obj)
        except Exception:
            self.hash = None
        if _holdable(obj):
            self.held = obj
            return
        self.fields = None  # a named tuple's or dataclass's field names, to say which one differs
        if not self.by_identity:
            self.held = canonical(obj)  # (taken now: JAX compared the value as it is now)
            if self.held is not _MISSING:
                self.fields = _field_names(obj)
                if _mutable_dataclass(t):  # the object itself, weakly: the same one is equal
                    try:
                        self.object_ref = weakref.ref(obj)
                    except TypeError:
                        pass
        if self.held is _MISSING:
            try:
                self.ref = weakref.ref(obj)
            except TypeError:
                # JAX's key holds the object: reach it there while JAX holds the entry (a weak
                # handle on JAX's structure, never the object)
                self.holder = holder

    def value(self) -> Any:
        """The object (or its plain form), or `_MISSING` when it is gone or was never kept."""
        if self.held is not _MISSING:
            return self.held
        obj = self.ref() if self.ref is not None else None
        return _MISSING if obj is None else obj

    def live(self) -> Any:
        """The object itself while it lives (weakly kept, or held by JAX's key), else `_MISSING`."""
        for ref in (self.object_ref, self.ref):
            if ref is not None:
                obj = ref()
                return _MISSING if obj is None else obj
        if self.holder is not None:
            try:
                return self.holder()
            except Exception:  # (JAX's structure changed shape: not reached)
                return _MISSING
        return _MISSING

    def compared_live(self) -> bool:
        """Whether the value is compared as a live object, which can change after JAX compared it
        (not a builtin or a plain form of a frozen value; not compared by identity)."""
        return not self.by_identity and (
            self.object_ref is not None or self.ref is not None or self.holder is not None
        )

    def verdict(self, other: Witness) -> bool | None:
        """JAX's ``==`` of the two values taken when it compared them (`LookupVerdicts`), or None
        where none was taken."""
        for taker, taken in ((self, other), (other, self)):  # (whichever recorded it)
            found = taker.verdicts
            if found is not None:
                verdict = found.get(taken.serial)
                if verdict is not None:
                    return verdict
        return None

    def as_compared(self, earlier: Witness) -> str | None:
        """The text of `earlier`'s object as JAX compared it with this one, where it was changed in
        place after its own trace (its kept text is the one from then); else None."""
        return None if self.then is None else self.then.get(earlier.serial)

    def equals(self, other: Witness) -> bool:
        """Whether JAX's comparison finds the two values equal (identity, then ``==``); two
        incomparable values, by their hashes (`certain` says which)."""
        if self is other:
            return True
        taken = self.verdict(other)
        if taken is not None:
            return taken
        if self._other_keys(other):
            return False
        if self._same_object(other):
            # One object at both traces (one weak reference while it lives): JAX's lookup finds it
            # equal (its key holds the object), though a plain form taken at each trace differs
            # once it was mutated in between. Where its hash changed with it, JAX 0.8.0 finds it
            # changed and 0.10.2 equal (tests/test_every_key.py): not named, and not `certain`.
            return True
        if self.typed or other.typed:
            mine, theirs = self.type_ref, other.type_ref
            if mine is None or theirs is None or mine() is not theirs():
                return False
        if (self.held is _MISSING) != (other.held is _MISSING) and not (
            self.by_identity or other.by_identity
        ):
            return False  # a plain form and an object without one: not of one class, nor equal
        a, b = self.value(), other.value()
        if a is _MISSING or b is _MISSING:
            if self.by_identity or other.by_identity:
                # a gone object is not the live one (nor another gone one, kept apart by JAX)
                return False
            return self.hash is not None and self.hash == other.hash  # (not certain: see `certain`)
        if a is b:
            return True
        try:
            return bool(a == b)
        except Exception:  # an __eq__ that raises: JAX could not have cached it as equal either
            return False

    def gone(self) -> bool:
        """Whether the value was kept only weakly and its object is gone."""
        held = self.held
        if type(held) is weakref.ReferenceType:
            return held() is None
        if held is _MISSING:
            return self.ref is not None and self.ref() is None
        return False

    def plain(self) -> tuple[bool, Any]:
        """(whether the value is kept as itself or its plain form, that value): what may be written
        down and compared elsewhere (another process), where an object held weakly may not."""
        return self.held is not _MISSING, None if self.held is _MISSING else self.held

    def _same_object(self, other: Witness) -> bool:
        mine = self.object_ref
        return mine is not None and mine is other.object_ref

    def _other_keys(self, other: Witness) -> bool:
        """Two values compared live, of other hashes, not one object: another key to JAX's lookup
        (its dict compares hashes first)."""
        if not (self.compared_live() and other.compared_live()):
            return False
        if self.hash is None or other.hash is None or self.hash == other.hash:
            return False
        a, b = self.live(), other.live()
        return a is _MISSING or b is _MISSING or a is not b

    def certain(self, other: Witness) -> bool:
        """Whether `equals` compared the values themselves (not only their hashes; not one object
        whose hash changed between its traces, which JAX releases tell apart differently)."""
        if self.verdict(other) is not None or self._other_keys(other):
            return True
        if self._same_object(other):
            return self.hash == other.hash
        if self.by_identity or other.by_identity:
            return True
        return self.value() is not _MISSING and other.value() is not _MISSING

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Witness) and self.equals(other)

    def __hash__(self) -> int:
        return 0  # (only compared, never a dict key of its own)

    def __repr__(self) -> str:
        kept = "held" if self.held is not _MISSING else "weak" if self.ref is not None else "none"
        return f"Witness({kept}, typed={self.typed})"


_SERIALS = itertools.count()
_MAX_PLACES = 8192  # (function, path) places whose values are kept for comparison
_MAX_PER_PLACE = 256  # earlier values compared at one place (the most recent)


class LookupVerdicts:
    """JAX's comparison of each value compared live (`Witness.compared_live`) with the earlier
    values at the same place of the same function, taken at the trace: right after JAX's lookup
    compared them, before the program can change them.

    As JAX's lookup: values of other hashes differ without ``==`` being called (a dict's key with
    another hash is another key), a ``static_argnums`` value of another type differs, and ``==``
    decides the rest. An earlier value no longer reachable (gone, or its JAX entry dropped) is
    not compared: JAX no longer holds it either. Bounded: `_MAX_PLACES` places, the
    `_MAX_PER_PLACE` most recent values at each; beyond them a pair is compared at the read.
    """

    def __init__(self):
        self._places: OrderedDict[tuple, list] = OrderedDict()
        self._lock = threading.Lock()  # (traces of several threads)

    def record(self, scope: Any, leaves: dict, paths) -> None:
        """Compare the witness of each of `paths` (those compared live, `Witness.compared_live`)
        among `leaves` (path -> leaf) of a trace of the function `scope` with the earlier ones at
        its path."""
        for path in paths:
            witness = leaves[path].witness
            if type(witness) is Witness and witness.compared_live():
                with self._lock:
                    self._compare(scope, path, witness)

    def clear(self) -> None:
        self._places.clear()

    def _compare(self, scope: Any, path: str, new: Witness) -> None:
        place = (scope, path)
        refs = self._places.get(place)
        if refs is None:
            refs = self._places[place] = []
            if len(self._places) > _MAX_PLACES:
                self._places.popitem(last=False)
        else:
            self._places.move_to_end(place)
        obj = new.live()
        if obj is _MISSING:
            return
        verdicts, kept = {}, []
        for ref in refs:
            old = ref()
            if old is None:
                continue
            kept.append(ref)
            if old.hash != new.hash:
                continue  # (another key to JAX's lookup: `equals` says so without a verdict)
            verdict = _lookup_equal(old, new, obj)
            if verdict is not None:
                verdicts[old.serial] = verdict
                if not verdict:
                    _note_changed_in_place(old, new)
        kept.append(weakref.ref(new))
        refs[:] = kept[-_MAX_PER_PLACE:]
        if verdicts:
            new.verdicts = verdicts


def _note_changed_in_place(old: Witness, new: Witness) -> None:
    """Keep the text of `old`'s object as JAX just compared it, where its plain form (taken at its
    trace) no longer matches it: the program changed it in place since."""
    if old.held is _MISSING or old.object_ref is None:
        return
    other = old.live()
    if other is _MISSING or canonical(other) == old.held:
        return
    if new.then is None:
        new.then = {}
    new.then[old.serial] = summarize_static(other).text


def _lookup_equal(old: Witness, new: Witness, obj: Any) -> bool | None:
    """JAX's lookup comparing `new` (whose object is `obj`) with `old`; None where `old`'s object
    is no longer reachable, or is `obj` itself (one object: `Witness.equals` says how JAX
    releases compare it once its hash changed)."""
    other = old.live()
    if other is _MISSING or other is obj:
        return None
    if old.hash is None or old.hash != new.hash:
        return False
    if (old.typed or new.typed) and (old.type_ref is None or old.type_ref() is not type(obj)):
        return False
    try:
        return bool(other == obj)  # (as a dict lookup: the key it holds, then the new one)
    except Exception:  # (JAX's own lookup would have raised: no entry could be equal)
        return False


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
