"""A plain ``jax.jit`` trace's signature, its leaves read when first asked for.

A retrace of a plain ``jax.jit`` function whose every argument is a tree of dicts with string
keys, lists, tuples and None keeps only its arguments' plans and abstract values (never a user
object) until a diagnosis asks for its leaves (`DeferredSignature.get`). The parts of JAX's
cache key are kept as their hashes (`key_hashes`).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from .._core._vocabulary import JitKind
from .._jax._layouts import KEY_PARTS
from ._signature import Signature
from ._walker import Walker


class PlannedArgument(NamedTuple):
    """One argument of a deferred signature: its name, its treedef's plan, its first leaf."""

    name: str
    plan: tuple
    start: int


class DeferredSignature:
    """A trace's signature whose leaves are read when first asked for (`get`), from the plans
    of its arguments' treedefs and their abstract values (never a user object)."""

    __slots__ = (
        "function_token",
        "_context",
        "_call",
        "_hashes",
        "_plans",
        "_vals",
        "_built",
        "n_leaves",
    )

    def __init__(
        self,
        function_token: tuple,
        context: tuple,
        call: tuple,
        hashes: tuple,
        plans: tuple,
        vals: Sequence,
        n_leaves: int,
    ):
        # the function (`function_token`), the `Signature`'s trace context ((values, texts)) and
        # call, the hashes of JAX's key's parts (in the order of `KEY_PARTS`), the arguments
        # (`PlannedArgument`s)
        self.function_token, self._context, self._call, self._hashes = (
            function_token,
            context,
            call,
            hashes,
        )
        self._plans, self._vals, self._built = plans, vals, None
        self.n_leaves = n_leaves

    def get(self) -> Signature:
        built = self._built
        if built is not None:
            return built
        plans, vals, context, call, hashes = (
            self._plans,
            self._vals,
            self._context,
            self._call,
            self._hashes,
        )
        if (
            plans is None or context is None
        ):  # another thread built it meanwhile (it sets `_built` first)
            return self._built
        walker = Walker(())
        for name, plan, start in plans:
            walker.apply_plan(name, plan, vals, start)
        values, texts = context
        built = self._built = Signature(
            function_token=self.function_token,
            context=texts,
            leaves=walker.leaves,
            function_path=None,
            jit_kind=JitKind.JIT,
            call=call,
            owners=None,
            key_parts=tuple(zip(KEY_PARTS, hashes)),
            context_values=values,
        )
        self._plans = self._vals = self._context = self._call = self._hashes = None
        return built


def key_parts(key: tuple) -> tuple:
    """((part, hash), ...) of JAX's tracing-cache key (`cache_key`; JAX hashed its parts
    already)."""
    return tuple(zip((name for name, _ in key), key_hashes(key)))


def key_hashes(key: tuple) -> tuple:
    """The hash of each part of `key` (`cache_key`), None where one cannot be hashed."""
    hashes = []
    for _, value in key:
        try:
            hashes.append(hash(value))
        except Exception:
            hashes.append(None)
    return tuple(hashes)
