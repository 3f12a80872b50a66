"""What a lowering received, as a signature: the compile cache's key in the user's terms.

JAX's compile cache keys on the traced program object itself (by identity) and on each
argument's type and placement (device, sharding, layout, donation). `lowering_signature`
reads them from the lowering function's locals into one leaf per argument, under JAX's
argument names, each with JAX's own objects as its witness (compared with JAX's ``==``).
"""

from __future__ import annotations

from typing import Any

from .._core._values import clip, summarize_static
from .._core._vocabulary import LoweringKind
from .._core._witness import Witness
from .._jax._internals import LoweringInputs
from ._leaves import aval_leaf
from ._signature import Signature


def lowering_signature(inputs: LoweringInputs | None) -> tuple[Signature, str] | None:
    """(the signature of a lowering, its program's "f at file:line") from what JAX's lowering
    function received (`lowering_inputs`); None when it held no program and argument types."""
    if inputs is None:
        return None
    debug, avals, shardings, layouts, donated = (
        inputs.debug_info,
        inputs.avals,
        inputs.shardings,
        inputs.layouts,
        inputs.donated,
    )
    names = list(getattr(debug, "arg_names", None) or ())
    leaves = {}
    for i, aval in enumerate(avals):
        name = names[i] if i < len(names) and names[i] else f"args[{i}]"
        sharding, layout, donate = _at(shardings, i), _at(layouts, i), bool(_at(donated, i))
        leaf = aval_leaf(aval)
        # JAX's compile cache keys on the program and each argument's type and placement: JAX's
        # own objects, compared with its ``==``
        leaves[name] = leaf._replace(
            detail=placement(sharding, layout, donate), witness=(aval, sharding, layout, donate)
        )
    src_info = str(getattr(debug, "func_src_info", "") or "")
    # The program: JAX's compile cache keys on the traced program object itself (by identity). A
    # program JAX derived from a jitted function (its JVP or transpose under `jax.grad`) keeps no
    # argument names.
    kind = (
        LoweringKind.LOWERING
        if getattr(debug, "arg_names", None) is not None
        else LoweringKind.DERIVED
    )
    return Signature(("program", Witness(inputs.program)), (), leaves, jit_kind=kind), src_info


def _at(items: list, i: int) -> Any:
    return items[i] if i < len(items) else None


UNCOMMITTED = "uncommitted"


def placement(sharding: Any, layout: Any, donated: bool) -> str:
    """An argument's placement at a compile, as text: device, sharding, layout, donation."""
    kind = type(sharding).__name__
    if sharding is None or kind == "UnspecifiedValue":
        text = UNCOMMITTED
    elif kind == "SingleDeviceSharding":
        device = next(iter(getattr(sharding, "device_set", ()) or ()), None)
        text = (
            f"committed to {summarize_static(device).text}" if device is not None else "committed"
        )
    else:
        spec = getattr(sharding, "spec", None)
        text = f"sharded {clip(str(spec), 60)}" if spec is not None else clip(kind, 60)
    if layout is not None:
        text += f", layout {clip(str(layout), 60)}"
    if donated:
        text += ", donated"
    return text
