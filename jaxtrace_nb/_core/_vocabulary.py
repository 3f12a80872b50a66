"""The named vocabularies the layers share: how a function was jitted, what made a value static,
what caused a trace, what kind an event and a leaf are.

Each is a str-valued enum: a member is equal to its value and hashes as it does, and its ``str()``
is its value. The records carry members from where they are made to the log (`Diagnosis.cause`,
`FunctionIdentity.jit_kind`, `Leaf.kind`, and the `Event`'s ``kind``, ``cause`` and ``jit``), and
code compares members, never string literals; tables, JSON lines and DataFrames show the values,
the strings they always showed. A log read back from disk holds plain strings, equal to the members.

`Origin` holds the mechanisms JAX itself has; a library adapter declares its own origins (a
str-valued enum of its own) with the words a hint names them by (`_adapters`).
"""

from __future__ import annotations

import enum

try:
    StrEnum = enum.StrEnum
except AttributeError:  # Python 3.10

    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        """A str-valued enum whose ``str()`` and ``format()`` are its value (as Python 3.11's)."""

        __str__ = str.__str__
        __format__ = str.__format__


class JitKind(StrEnum):
    """Whose jit wrapper made a traced call: the DataFrame's ``jit`` column."""

    JIT = "jit"  # jax.jit itself
    EQUINOX = "equinox"  # eqx.filter_jit
    NNX = "nnx"  # flax.nnx.jit


class LoweringKind(StrEnum):
    """The kind of a signature read at a lowering (its `Signature.jit_kind`)."""

    LOWERING = "lowering"  # the function's own traced program
    # A program JAX derived from a jitted function's traced program, keeping no argument names (a
    # JVP
    # or a transpose, under `jax.grad`, `jax.vjp`, `jax.jvp`).
    DERIVED = "lowering (derived)"
    # Another program with the function's argument names, kept as derived from it (batched by
    # `jax.vmap`): `_diagnosis.kept_lowering`.
    TRANSFORMED = "lowering (transformed)"


class Origin(StrEnum):
    """What made a static leaf static, for JAX's own mechanisms (a library adapter adds its own)."""

    STATIC_ARGNUMS = "static_argnums"  # jax.jit's static_argnums / static_argnames
    NODE_METADATA = "pytree metadata"  # a custom node's auxiliary data
    FUNCTION = "function"  # the jitted function itself (eqx.filter_jit's static function)


class Cause(StrEnum):
    """Why a function was traced (or compiled) again: the DataFrame's ``cause`` column."""

    FIRST = "first"
    SHAPE = "shape"
    DTYPE = "dtype"
    WEAK_TYPE = "weak_type"
    STATIC = "static"
    STRUCTURE = "structure"
    NEW_FUNCTION = "new_function"
    CONTEXT = "context"
    SHARDING = "sharding"
    UNKNOWN = "unknown"


class EventKind(StrEnum):
    """What an event of the log is: the DataFrame's ``kind`` column."""

    TRACE = "trace"  # a trace (a miss of JAX's tracing cache), with the compile that followed it
    COMPILE = "compile"  # a compile without a new trace
    # processes of one `jax.distributed` run traced different keys for one function (`_divergence`)
    DIVERGENCE = "divergence"


class DivergenceMode(StrEnum):
    """What a process does when its key for a function differs from the other processes':
    ``jt.start(divergence=...)``."""

    WARN = "warn"  # report it (stderr, the log), never stop the program
    RAISE = "raise"  # report it, and raise `DivergenceError` in the differing process
    OFF = "off"  # compare nothing


class LeafKind(StrEnum):
    """What a leaf of a signature is (`Leaf.kind`)."""

    ARRAY = "array"  # an abstract value: JAX keys on its type
    STATIC = "static"  # a static value: JAX keys on its hash and equality
    NONE = "none"  # ``None``: an empty pytree
    NODE = "node"  # a pytree node: its type and auxiliary data
