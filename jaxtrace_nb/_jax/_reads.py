"""Every private name of JAX that jaxtrace_nb reads, with the JAX versions it was checked on.

A read is a name of a module under ``jax._src`` (a function, a module-level object, a config
state), or a JAX function whose frame's locals are read while it runs (a trace, a lowering, a
compile, a persistent-cache lookup). Each names the reader in this folder that makes it and the
JAX release series it applies to. Porting a JAX release means: run
``python -m benchmarks.jax_reads --git-dir JAX_GIT --tags jax-vX.Y.Z`` (each read looked for in
that release's source), fix the readers it finds missing, and add the series here.

`tests/test_jax_reads.py` checks both ways on the installed JAX: every ``jax._src`` import in
this folder is a listed read, and every read listed for the installed series resolves (a name
is bound in its module; a frame's function is defined there with the locals read).
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class ReadKind(enum.Enum):
    NAME = "name"  # a name bound in a ``jax._src`` module (function, object, config state)
    FRAME = "frame"  # a function of that module whose running frame's locals are read
    REBOUND = "rebound"  # a name of that module rebound while recording (and restored after)


class Read(NamedTuple):
    """One read of JAX's internals."""

    module: str  # "jax._src.interpreters.partial_eval"
    name: str  # the name in it: a module-level name, or a function's name (FRAME)
    kind: ReadKind
    reader: str  # the function of this folder that reads it ("_layouts.detect_layout")
    series: tuple[str, ...]  # the JAX release series it applies to ("0.9", "0.10", "0.11")
    locals: tuple[str, ...] = ()  # FRAME: the locals read


_ALL = ("0.8", "0.9", "0.10", "0.11")
_SINCE_09 = ("0.9", "0.10", "0.11")
_PE = "jax._src.interpreters.partial_eval"
_PJIT = "jax._src.pjit"
_PXLA = "jax._src.interpreters.pxla"

# Checked on: 0.8.0 and 0.10.2 by installing them (CI runs both; tests/test_jax_reads.py), and
# on 0.8.0, 0.9.0, 0.10.2, 0.11.0 from source (benchmarks/results/jax-reads-*.txt).
READS: tuple[Read, ...] = (
    # -- a trace starts: the hook, and the announcing frame's locals (_layouts)
    Read(_PE, "test_event", ReadKind.REBOUND, "_layouts.detect_layout", _SINCE_09),
    Read(_PE, "trace_to_jaxpr", ReadKind.NAME, "_layouts.detect_layout", _SINCE_09),
    Read(
        _PE,
        "trace_to_jaxpr",
        ReadKind.FRAME,
        "_layouts.FlatTreeLayout.read",
        ("0.9", "0.10"),
        ("fun", "in_avals", "debug_info"),
    ),
    Read(
        _PE,
        "trace_to_jaxpr_nocache",
        ReadKind.FRAME,
        "_layouts.FTLayout.read",
        ("0.11",),
        ("fun", "in_avals", "debug_info"),
    ),
    Read(
        "jax._src.tree_util", "FlatTree", ReadKind.NAME, "_layouts.detect_layout", ("0.9", "0.10")
    ),
    Read("jax._src.tree_util", "Static", ReadKind.NAME, "_layouts.detect_layout", ("0.9", "0.10")),
    Read("jax._src.flattree", "FTStatic", ReadKind.NAME, "_layouts.detect_layout", ("0.11",)),
    Read(_PJIT, "_trace_for_jit", ReadKind.FRAME, "_layouts.FlatTreeLayout.jitted", _SINCE_09),
    # (0.9.0 and 0.9.1 have no ``_infer_params`` frame: ``jitted`` reads None there, and the
    # announcing frame's ``fun`` is read instead)
    Read(
        _PJIT,
        "_infer_params",
        ReadKind.FRAME,
        "_layouts.FlatTreeLayout.jitted",
        ("0.10", "0.11"),
        ("fun",),
    ),
    # -- `run --warm`: the jit call of a function's first trace, and its jitted function again
    Read(
        _PJIT,
        "_infer_params",
        ReadKind.FRAME,
        "_layouts.FlatTreeLayout.jit_call",
        ("0.10", "0.11"),
        ("fun", "ji", "args", "kwargs"),
    ),
    Read(_PJIT, "_cpp_pjit", ReadKind.NAME, "_internals.remade_jit", _ALL),
    Read("jax._src.util", "test_event", ReadKind.REBOUND, "_layouts.detect_layout", ("0.8",)),
    Read(
        _PJIT, "_create_pjit_jaxpr", ReadKind.FRAME, "_layouts.PjitLayout.read", ("0.8",), ("fun",)
    ),
    Read(
        _PJIT,
        "_infer_params_impl",
        ReadKind.FRAME,
        "_layouts.PjitLayout.read",
        ("0.8",),
        ("fun", "ji", "dbg", "in_avals", "in_tree"),
    ),
    Read(
        _PJIT,
        "_infer_params_internal",
        ReadKind.FRAME,
        "_layouts.PjitLayout.read",
        ("0.8",),
        ("args", "kwargs"),
    ),
    # -- what the probe asks of JAX at a trace (_internals)
    Read(_PJIT, "fun_name", ReadKind.NAME, "_internals._fun_name", _ALL),
    Read("jax._src.core", "trace_ctx", ReadKind.NAME, "_internals._is_top_level", _ALL),
    Read("jax._src.core", "AbstractValue", ReadKind.NAME, "_internals.all_abstract", _ALL),
    Read(
        "jax._src.config", "trace_context", ReadKind.NAME, "_internals.trace_context_function", _ALL
    ),
    Read(
        "jax._src.config",
        "trace_context_names",
        ReadKind.NAME,
        "_internals.trace_context_names",
        ("0.10", "0.11"),
    ),
    Read("jax._src.config", "config_states", ReadKind.NAME, "_config.own_configuration", _ALL),
    # -- a stage ends: the frames reporting seconds to jax.monitoring (_internals)
    Read(
        _PJIT,
        "_trace_for_jit",
        ReadKind.FRAME,
        "_internals.trace_end_locals",
        _SINCE_09,
        ("dbg", "args_ft"),
    ),
    Read(
        _PXLA,
        "_cached_lowering_to_hlo",
        ReadKind.FRAME,
        "_internals.lowering_inputs",
        _ALL,
        (
            "closed_jaxpr",
            "in_avals",
            "num_const_args",
            "semantic_in_shardings",
            "in_layouts",
            "donated_invars",
            "lowering_result",
        ),
    ),
    Read(
        _PXLA,
        "_cached_compilation",
        ReadKind.FRAME,
        "_internals.compile_inputs",
        _ALL,
        ("computation", "da", "compiler_options_kvs", "xla_executable"),
    ),
    Read(_PXLA, "lower_sharding_computation", ReadKind.FRAME, "_internals.LOWERING_FRAMES", _ALL),
    Read(
        "jax._src.interpreters.mlir",
        "lower_jaxpr_to_module",
        ReadKind.FRAME,
        "_internals.LOWERING_FRAMES",
        _ALL,
    ),
    # -- JAX's caches followed (_internals)
    Read(_PE, "trace_to_jaxpr", ReadKind.NAME, "_internals._cache_holders", _SINCE_09),
    # -- what a program costs, and where (_internals)
    Read("jax._src.source_info_util", "user_frames", ReadKind.NAME, "_internals.user_frames", _ALL),
    Read("jax._src.lib", "xla_client", ReadKind.NAME, "_internals.traceback_lines", _ALL),
    Read(
        "jax._src.traceback_util",
        "register_exclusion",
        ReadKind.NAME,
        "_internals.exclude_from_tracebacks",
        _ALL,
    ),
    Read(
        "jax._src.monitoring",
        "_unregister_event_duration_listener_by_callback",
        ReadKind.NAME,
        "_internals.listener_api",
        ("0.8",),
    ),
    # -- several processes (_internals)
    Read("jax._src.distributed", "global_state", ReadKind.NAME, "_internals.distributed", _ALL),
    Read(
        "jax._src.xla_bridge",
        "backends_are_initialized",
        ReadKind.NAME,
        "_internals.process_index",
        _ALL,
    ),
    Read(
        _PJIT,
        "_infer_params_impl",
        ReadKind.FRAME,
        "_internals.spans_processes",
        ("0.8",),
        ("explicit_args",),
    ),
    # -- the persistent compilation cache's key (_cache_key, _cache_text)
    Read("jax._src.cache_key", "hashlib", ReadKind.REBOUND, "_cache_key.KeyReader._switch", _ALL),
    Read(
        "jax._src.cache_key",
        "_log_cache_key_hash",
        ReadKind.REBOUND,
        "_cache_key.KeyReader._switch",
        _ALL,
    ),
    Read("jax._src.cache_key", "get", ReadKind.NAME, "_cache_key._detect", _ALL),
    Read(
        "jax._src.compilation_cache",
        "is_persistent_cache_enabled",
        ReadKind.NAME,
        "_cache_key.KeyReader._follow",
        _ALL,
    ),
    Read(
        "jax._src.compilation_cache",
        "_cache",
        ReadKind.NAME,
        "_cache_key.KeyReader._cache_dir",
        _ALL,
    ),
    Read(
        "jax._src.config",
        "compilation_cache_dir",
        ReadKind.NAME,
        "_cache_key.KeyReader.install",
        _ALL,
    ),
    Read(
        "jax._src.config",
        "enable_compilation_cache",
        ReadKind.NAME,
        "_cache_key.KeyReader.install",
        _ALL,
    ),
    Read(
        "jax._src.compiler",
        "compile_or_get_cached",
        ReadKind.FRAME,
        "_cache_key.KeyReader.begin",
        _ALL,
        ("cache_key", "computation", "host_callbacks", "module_name", "backend", "devices"),
    ),
    Read("jax._src.config", "config_states", ReadKind.NAME, "_cache_key.KeyReader._facts", _ALL),
    Read(
        "jax._src.config",
        "persistent_cache_min_compile_time_secs",
        ReadKind.NAME,
        "_cache_key.KeyReader._not_written",
        _ALL,
    ),
    Read(
        "jax._src.config",
        "persistent_cache_min_entry_size_bytes",
        ReadKind.NAME,
        "_cache_key.KeyReader._not_written",
        _ALL,
    ),
    Read(
        "jax._src.compiler",
        "_cache_write",
        ReadKind.NAME,
        "_cache_key.KeyReader._not_written",
        _ALL,
    ),
    Read(
        "jax._src.distributed",
        "global_state",
        ReadKind.NAME,
        "_cache_key.KeyReader._not_written",
        _ALL,
    ),
    Read(
        "jax._src.interpreters.mlir",
        "make_ir_context",
        ReadKind.NAME,
        "_cache_text.canonical_text",
        _ALL,
    ),
    Read("jax._src.lib.mlir", "ir", ReadKind.NAME, "_cache_text.canonical_text", _ALL),
)
