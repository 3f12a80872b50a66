"""Optax: its package, and the hints for optimizer states and transformations.

Optax has no jit wrapper and its states are plain pytrees (named tuples), read as any other;
what it adds is evidence for the hints: a leaf inside an optax state (an owner of an
``optax.`` type), or an optax transformation compared by identity.
"""

from __future__ import annotations

from .._core._vocabulary import Cause, LeafKind
from ._registry import Evidence, Hint, Library, register


@register
class Optax(Library):
    name = module = "optax"
    precedence = 20
    hints = (
        Hint(
            "dtype.optax",
            "{p} lives in optax's `{owner}`, created by the optimizer's `init`: its dtype follows "
            "the parameters "
            "given to `init`. Initialise the optimizer with parameters of the dtype you train "
            "with.",
            True,
        ),
        Hint(
            "identity.optax",
            "{p} is part of an optax transformation re-created with the same name; it compares by "
            "identity: build "
            "the optimizer once and reuse the same object.",
            True,
        ),
        Hint(
            "structure.optax_none",
            "{p} in optax's `{owner}` switched between an array and None: the optimizer state "
            "changes structure "
            "when gradients are None for some leaves (frozen parameters). Initialise the "
            "optimizer state with the "
            "same filter that selects the trainable leaves, e.g. `optim.init(eqx.filter(model, "
            "filter_spec))`.",
            True,
        ),
    )

    def hint(self, evidence: Evidence):
        owner = next((o for o in evidence.owners if o.startswith("optax")), "")
        old, new = evidence.old, evidence.new
        if evidence.cause == Cause.DTYPE and owner:
            return "dtype.optax", {"owner": owner.rsplit(".", 1)[-1]}
        if evidence.cause == Cause.STATIC and (new.type_name.startswith("optax") or owner):
            # by identity: re-created (its name was checked first); by value: alike, yet unequal, as
            # its functions inside compare by identity
            if new.by_identity or (old is not None and old.text == new.text):
                return "identity.optax", {}
        if evidence.cause == Cause.STRUCTURE and owner:
            kinds = {old.kind if old else None, new.kind if new else None}
            if LeafKind.NONE in kinds and kinds & {LeafKind.ARRAY, LeafKind.NODE}:
                return "structure.optax_none", {"owner": owner.rsplit(".", 1)[-1]}
        return None
