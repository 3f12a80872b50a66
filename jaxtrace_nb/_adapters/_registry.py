"""The contract of a library adapter (`Adapter`), and the registry every adapter module joins.

An adapter teaches jaxtrace_nb one library, in one place: which packages are the library's
(their frames are never the user's call site, their jitted helpers are internal), its jit
wrapper and how to read the wrapper's traced call in the user's names, its pytree nodes,
what makes a value static under it (its origins, and how a hint names each), and its hints.
A module in `jaxtrace_nb._adapters` whose name does not start with an underscore is found and
imported by the package, and registers its adapter with `register`::

    @register
    class Optax(Library):
        name = module = "optax"
        hints = (Hint("dtype.optax", "...", True),)

        def hint(self, evidence):
            ...

Nothing here, and no adapter, imports the library it reads: an adapter recognises the
library's objects by module and name, and is asked only while the library is imported
(`Adapter.available`), except for `Adapter.hint`, which reads plain records only.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, NamedTuple, Protocol

from .._core._installed import is_users_type
from .._core._vocabulary import JitKind

if TYPE_CHECKING:
    from .._core._vocabulary import Cause
    from .._jax._layouts import TraceStart
    from .._keys._calls import DecodedCall
    from .._keys._signature import Leaf
    from .._keys._walker import Walker


class Hint(NamedTuple):
    """One hint, by id: `_hints.HINTS` holds them all, the generic ones and the adapters'."""

    id: str
    template: str  # str.format fields: p (the quoted path), path, and those its `Choice` gives
    instruction: bool  # tells the user what to change (proven by tests/test_hints_proven.py)


class Evidence(NamedTuple):
    """What a hint is chosen from: one change JAX's comparison found, and where it lives."""

    cause: Cause
    path: str  # the changed leaf's path, in the user's terms
    old: Leaf | None  # None: not in the earlier trace
    new: Leaf | None  # None: not in this one
    owners: tuple  # the qualified types of the custom containers holding `path`, innermost first
    library: bool = False  # the traced function is a library's, not the user's

    @property
    def owner_is_library(self) -> bool:
        """Whether the innermost custom container is a library's class (its fields are the
        library's): its module's file is an installed distribution's (`_installed`)."""
        return bool(self.owner) and not is_users_type(self.owner)

    @property
    def owner(self) -> str:
        """The innermost custom container holding the leaf ("" if none)."""
        return self.owners[0] if self.owners else ""


Choice = tuple  # (hint id, {template field: value}): a hint chosen for one change


class JitWrapper(NamedTuple):
    """A library's jit wrapper (``eqx.filter_jit``, ``nnx.jit``)."""

    kind: JitKind  # the `JitKind` of the calls it makes
    package: str  # the package whose frames sit between the user's call and JAX's jit machinery


class CallReader(Protocol):
    """What an adapter may ask of the decoder (the `Decoder` is one)."""

    def plain_call(self, start: TraceStart) -> DecodedCall:
        """The call read as a plain ``jax.jit`` call: the traced function's parameter names, static
        arguments as ``static_argnums`` values."""


class Adapter(Protocol):
    """What jaxtrace_nb knows of one library (see the module's docstring).

    Attributes, fixed for the library:

    * `name`: the library as its users call it ("equinox").
    * `packages`: the top-level packages whose files are the library's own.
    * `jit`: its `JitWrapper` (None: it has none); which traced function is the wrapper's, `wraps`
      says.
    * `origins`: each origin of a static value the adapter makes (an `Origin`, or a member of
      a str-valued enum of its own) -> how a hint names that mechanism, e.g.
      ``" (`eqx.field(static=True)`)"``.
    * `hints`: its own `Hint`\\ s, registered with the generic ones in `_hints.HINTS`.
    * `precedence`: the order adapters are asked in, lowest first; a library built on another
      comes before it (Diffrax before Equinox), JAX's own pytree kinds last.

    Methods: `available`, `wraps`, `decode_call` and `walk_node` are asked only while
    `available()`; `hint` is pure and always asked. For an object it does not recognise, a
    method answers None or False, never raises. `Library` gives each a default.
    """

    name: str
    packages: tuple[str, ...]
    jit: JitWrapper | None
    origins: Mapping[str, str]
    hints: tuple[Hint, ...]
    precedence: int

    def available(self) -> bool:
        """Whether the library is imported (``"equinox" in sys.modules``); it is never imported
        here."""

    def wraps(self, fun: Any) -> bool:
        """Whether `fun`, a function JAX traces, is the library's jit wrapper around a user's
        function."""

    def decode_call(self, start: TraceStart, decoder: CallReader) -> DecodedCall | None:
        """The traced call in the user's names when `start.fun` is the library's jit wrapper
        (or a call it reads better than the wrapper's own adapter); else None. It may ask the
        decoder for the plain ``jax.jit`` reading (`Decoder.plain_call`)."""

    def walk_node(self, walker: Walker, path: str, obj: Any) -> bool:
        """For a pytree node of the library's met at `path` in an argument skeleton: emit what the
        node holds that JAX's key compares (its static fields, its metadata) through `walker`'s
        public methods; return True when it emitted the node's children too (the walker then
        does not walk them)."""

    def hint(self, evidence: Evidence) -> Choice | None:
        """A hint of the library's for one change, or None. Asked after the generic checks that
        always win (see `_hints.for_change`), in `precedence` order; pure."""


class Library:
    """An `Adapter` with nothing to say: subclass it and set what the library has. `module` is the
    module whose import means the library is in use (`available`; None: always), and its top-level
    package is the library's `packages` unless they are given."""

    module: ClassVar[str | None] = None
    name: ClassVar[str] = ""
    packages: ClassVar[tuple[str, ...]] = ()
    jit: ClassVar[JitWrapper | None] = None
    origins: ClassVar[Mapping[str, str]] = {}
    hints: ClassVar[tuple[Hint, ...]] = ()
    precedence: ClassVar[int] = 50

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if not cls.packages and cls.module:
            cls.packages = (cls.module.split(".")[0],)

    def available(self) -> bool:
        return self.module is None or self.module in sys.modules

    def wraps(self, fun: Any) -> bool:
        return False

    def decode_call(self, start: Any, decoder: Any) -> Any:
        return None

    def walk_node(self, walker: Any, path: str, obj: Any) -> bool:
        return False

    def hint(self, evidence: Evidence) -> Choice | None:
        return None

    def __repr__(self) -> str:
        return f"<adapter {self.name}>"


_REGISTERED: list = []


def register(adapter_class: type) -> type:
    """Register an adapter class (a class decorator, returning the class): its one instance joins
    the registry, which keeps adapters in `precedence` order."""
    adapter = adapter_class()
    if any(known.name == adapter.name for known in _REGISTERED):
        raise ValueError(f"a second adapter named {adapter.name!r}")
    _REGISTERED.append(adapter)
    _REGISTERED.sort(key=lambda a: (a.precedence, a.name))
    return adapter_class


def registered() -> tuple:
    """Every registered adapter, in `precedence` order."""
    return tuple(_REGISTERED)
