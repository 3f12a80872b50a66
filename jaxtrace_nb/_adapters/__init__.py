"""Library adapters: each module here teaches jaxtrace_nb one library (`_registry.Adapter`).

Every module of this package whose name does not start with an underscore is imported here
and registers its adapter (`_registry.register`); a new library is one new module, plus its
tests. What the rest of jaxtrace_nb asks of the libraries goes through the functions below:
which packages are library code, which adapters apply to a trace now, whose jit wrapper made a
call, how each origin of a static value is named, and the libraries' hints.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import _registry
from ._registry import Adapter, Choice, Evidence, Hint, JitWrapper, Library, register

__all__ = [
    "Adapter",
    "Choice",
    "Evidence",
    "Hint",
    "JitWrapper",
    "Library",
    "register",
    "active",
    "adapters",
    "choose_hint",
    "hints",
    "library_packages",
    "origins",
    "wrapper_package",
]


def _import_adapters() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


_import_adapters()


def adapters() -> tuple:
    """Every registered adapter, in precedence order."""
    return _registry.registered()


def active() -> tuple:
    """The adapters whose library is imported in this process, in precedence order."""
    return tuple(adapter for adapter in _registry.registered() if adapter.available())


def library_packages() -> tuple[str, ...]:
    """The packages whose frames and functions are the libraries', not the user's."""
    return tuple(
        dict.fromkeys(package for adapter in _registry.registered() for package in adapter.packages)
    )


def wrapper_package(jit_kind: str) -> str | None:
    """The package whose jit wrapper makes calls of `jit_kind` (None for a plain ``jax.jit``)."""
    for adapter in _registry.registered():
        if adapter.jit is not None and adapter.jit.kind == jit_kind:
            return adapter.jit.package
    return None


def origins() -> dict[str, str]:
    """Each origin of a static value -> how a hint names its mechanism
    (" (`static_argnums`/...)")."""
    return {
        origin: words
        for adapter in _registry.registered()
        for origin, words in adapter.origins.items()
    }


def hints() -> tuple[Hint, ...]:
    """The libraries' own hints."""
    return tuple(hint for adapter in _registry.registered() for hint in adapter.hints)


def choose_hint(evidence: Evidence) -> Choice | None:
    """The first library hint that fits `evidence`, asking the adapters in precedence order."""
    for adapter in _registry.registered():
        found = adapter.hint(evidence)
        if found is not None:
            return found
    return None
