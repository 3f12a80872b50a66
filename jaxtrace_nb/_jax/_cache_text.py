"""The parts of JAX's persistent cache key that `_cache_key` kept, printed.

Runs only when a view asks for the words of a miss (`_cache_explainer`), never at a compile.
"""

from __future__ import annotations

from .._core._values import clip


def canonical_text(bytecode: bytes) -> str:
    """The canonical module JAX hashed (MLIR bytecode, no locations), printed."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        return ir.Module.parse(bytecode).operation.get_asm()


def module_text(module) -> str:
    """The module JAX compiled, printed with its locations (``#loc`` aliases)."""
    return module.operation.get_asm(enable_debug_info=True)


def located_bytecode(module) -> bytes:
    """The module JAX compiled as MLIR bytecode, its locations kept (a few ms for hundreds of
    layers, against seconds of XLA compile; printing it as text costs about ten times more)."""
    import io

    out = io.BytesIO()
    module.operation.write_bytecode(out)
    return out.getvalue()


def located_text(bytecode: bytes) -> str:
    """`located_bytecode`'s module, printed as `module_text` prints it."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        return ir.Module.parse(bytecode).operation.get_asm(enable_debug_info=True)


def compile_options_fields(serialized: bytes) -> dict[str, str]:
    """The compile options JAX hashed, field by field as jaxlib shows them (nested options
    flattened with dots): what `_cache_words` compares."""
    from jax._src.lib import xla_client

    options = xla_client.CompileOptions.ParseFromString(serialized)
    fields: dict[str, str] = {}

    def walk(value, prefix: str, depth: int) -> None:
        for name in dir(value):
            if name.startswith("_") or name in ("ParseFromString", "SerializeAsString"):
                continue
            try:
                item = getattr(value, name)
            except Exception:
                continue
            if callable(item):
                continue
            if name in ("executable_build_options", "debug_options") and depth < 2:
                walk(item, f"{prefix}{name}.", depth + 1)
            elif isinstance(item, (list, tuple)):
                fields[prefix + name] = clip(repr(list(item)), 300)
            else:
                fields[prefix + name] = clip(repr(item), 300)

    walk(options, "", 0)
    return fields
