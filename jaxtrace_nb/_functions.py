"""What the session knows of each jitted function: its counts, its recent signatures (for the
diagnosis), the function objects seen (weakly, to tell a re-created function from a changed
input). Bounded per function; no user array, tracer or object.
"""

from __future__ import annotations

import collections

from ._records import Binding, FunctionIdentity, TraceRecord
from ._signature import Signature

SIGNATURES_PER_FUNCTION = 8
LEAF_BUDGET_PER_FUNCTION = 200_000  # leaves kept across a function's stored signatures


class FunctionState:
    """What the session knows of one function (by its key): counts, recent signatures, the
    function objects seen (weakly)."""

    __slots__ = ("identity", "traces", "compiles", "signatures", "lowerings", "refs", "location", "cell",
                 "cache_generation", "arg_names", "failed")

    def __init__(self, identity: FunctionIdentity | None):
        self.identity = identity
        self.traces = 0
        self.compiles = 0
        self.signatures: collections.deque[Signature] = collections.deque(maxlen=SIGNATURES_PER_FUNCTION)
        self.lowerings: collections.deque[Signature] = collections.deque(maxlen=SIGNATURES_PER_FUNCTION)
        self.refs: collections.deque = collections.deque(maxlen=SIGNATURES_PER_FUNCTION)
        self.location: str | None = None
        self.cell: int | None = None
        self.cache_generation = 0
        self.arg_names: dict | None = None  # JAX's argument name -> the user's path
        self.failed = 0  # trace attempts that raised (not recorded as traces)


def keep(signatures: collections.deque, signature: Signature) -> collections.deque:
    """`signatures` with `signature` appended, keeping fewer when signatures are large."""
    keep = max(1, min(SIGNATURES_PER_FUNCTION, LEAF_BUDGET_PER_FUNCTION // max(1, signature.n_leaves)))
    if signatures.maxlen != keep:
        signatures = collections.deque(signatures, maxlen=keep)
    signatures.append(signature)
    return signatures


def new_object(state: FunctionState, record: TraceRecord, cell: int | None) -> tuple[bool, str | None]:
    """Whether the traced function object is one not seen before, and why (a re-run cell).

    Function objects are told apart by their weak references (one per live object, kept in the
    function's state), so the answer holds after the function itself is gone."""
    if not state.traces or record.function_ref is None:
        return False, None
    ref = record.function_ref
    if any(seen is ref for seen in state.refs):
        return False, None
    identity = record.identity
    if state.location is not None and state.location != identity.location:
        return True, (f"its cell was run again: defined at {identity.location}, was {state.location}"
                      if identity.in_cell else f"re-defined at {identity.location}, was {state.location}")
    if cell is not None and state.cell is not None and state.cell != cell and identity.in_cell:
        return True, f"re-created in cell {cell}, last traced in cell {state.cell}"
    if record.binding is not None:
        return True, created_note(record.binding)
    return True, None


def created_note(binding: Binding) -> str:
    """Where a re-created function object came from, as far as Python can tell (`CallSites.binding`):
    the line assigning the variable that held it, or every line that assigns it."""
    if len(binding.lines) == 1:
        return f"re-created at {binding.lines[0]}, where `{binding.name}` is assigned"
    return f"re-created where `{binding.name}` is assigned: {' or '.join(binding.lines)}"


def user_names(state: FunctionState, signature: Signature) -> Signature:
    """A lowering signature under the user's argument paths instead of JAX's names."""
    names = state.arg_names
    if not names:
        return signature
    return signature._replace(leaves={names.get(path, path): leaf for path, leaf in signature.leaves.items()})
