"""Library adapters: each module teaches the decoder one library's jit wrapper or pytree nodes.

An adapter module offers three functions, and is consulted only while its library is
imported (it never imports the library itself):

* ``available() -> bool``: the library is in ``sys.modules``.
* ``wraps(fun) -> bool``: `fun` is the library's jit wrapper around a user function.
* ``decode_call(start, static_type, decoder) -> DecodedCall | None``: when the traced
  function is the library's own jit wrapper (Equinox's ``filter_jit``, Flax's
  ``nnx.jit``), the user's function and arguments in the user's names; else None.
* ``walk_node(walker, path, obj) -> bool``: for a pytree node of the library's (a
  module, a dataclass, a ``Partial``), emit what the node keeps in its metadata (static
  fields) with `walker.static`; return True when the node's children were walked too.

A new library is a new module here, listed in `_ADAPTERS`.
"""

from __future__ import annotations

from . import equinox, flax_nnx, pytrees

_ADAPTERS = (equinox, flax_nnx, pytrees)  # pytrees last: it handles any other custom node


_WRAPPER_PACKAGES = {"equinox": "equinox", "nnx": "flax"}  # a jit kind -> the package of its jit wrapper


def wrapper_package(jit_kind: str) -> str | None:
    """The package whose jit wrapper makes calls of `jit_kind` (None for a plain ``jax.jit``)."""
    return _WRAPPER_PACKAGES.get(jit_kind)


def active() -> tuple:
    """The adapters whose library is imported in this process."""
    return tuple(adapter for adapter in _ADAPTERS if adapter.available())
