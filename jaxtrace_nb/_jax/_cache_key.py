"""Reading JAX's persistent compilation cache key as JAX computes it (probe layer).

JAX's key (``jax._src.cache_key.get``) is one SHA-256 over eight parts fed one after the other
into a single hash object (`CACHE_KEY_COMPONENTS`), so it cannot be split afterwards; JAX
computes each part's own hash only for its DEBUG log, by computing every part a second time.
jaxtrace_nb reads the parts as JAX computes them instead:

* ``cache_key.hashlib`` is rebound, in that module only, to a namespace whose ``sha256()``
  returns a `_KeyHash` when ``get`` itself calls it: the same running SHA-256, plus one per part;
* ``cache_key._log_cache_key_hash``, which ``get`` calls after each part, is wrapped: JAX's own
  runs first, unchanged, then the part is closed.

Nothing is serialized or hashed twice by JAX: the cost added is a second SHA-256 over the same
bytes and keeping references to them (the canonical module JAX hashed, the small parts). A
listener of ``compile_requests_use_cache`` then reads the frame of
``compiler.compile_or_get_cached`` (the key, the module, the devices) and takes the parts whose
running digest is the key's.

Both rebinds exist only while JAX's persistent cache is on (a cache directory, and
``jax_enable_compilation_cache``), followed through those two options' update hooks: with the
cache off nothing of JAX is rebound and no code of this module runs at a compile.

The explanation path (`_cache_text`) runs only when a view asks for the words of a miss,
never at a compile.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import sys
import threading
import weakref
from typing import Any, Callable, NamedTuple

from .._core._bounded import Bounded
from .._core._values import clip, printable

# The parts of JAX's persistent compilation cache key, in the order JAX hashes them, by JAX's
# own names (its ``cache_key.get``): the key is one SHA-256 over all of them.
CACHE_KEY_COMPONENTS = (
    "computation",
    "jax_lib version",
    "backend version",
    "XLA flags",
    "compile_options",
    "accelerator_config",
    "compression",
    "custom_hook",
)


class CacheKeyRecord(NamedTuple):
    """One compile that consulted JAX's persistent compilation cache, and the key it looked up.

    `components` holds each part's own SHA-256 (hex) as JAX computed it, in the order of
    `CACHE_KEY_COMPONENTS` (empty when they could not be read); `facts` the readable side of
    the parts (texts, numbers and lists only: JAX and jaxlib versions, the XLA flags that enter
    the key, devices, JAX options that shape the program). The bytes are the serialized compile
    options and the canonical module exactly as JAX hashed them; `module_ref` weakly refers to
    the module JAX compiled (with its source locations), for the first differing operation."""

    key: str  # JAX's key: "<module name>-<sha256 hex>"
    module_name: str  # "jit_step"
    components: tuple  # ((name, sha256 hex), ...) in JAX's order
    facts: dict
    outcome: str  # "hit" | "written" | "not_written" (looked up, missed, and JAX did not write it)
    reason: str  # why JAX did not write it ("" otherwise)
    eligible: bool  # False: JAX would not cache this compile (too fast, too small, host callbacks)
    seconds: float | None  # the compile's seconds (JAX's backend_compile_duration)
    cache_dir: str  # where JAX's cache is
    compile_options: bytes | None  # serialized compile options, as hashed
    module_bytes: bytes | None  # the canonical module's bytecode, as hashed (not kept for a hit)
    module_ref: weakref.ref | None  # the module JAX compiled, with locations (not kept for a hit)
    # The user's path of each argument of the module's ``main`` (its locations, read at the compile,
    # so that a miss explained after JAX let the module go still names them); () where not read
    arg_paths: tuple = ()
    # The module's bytecode with its locations, taken at the compile of a miss to explain: JAX lets
    # the module go after compiling it, and its first differing operation is said at the user's line
    module_located: bytes | None = None


REQUEST_EVENT = "/jax/compilation_cache/compile_requests_use_cache"
TASK_EVENT = "/jax/compilation_cache/tasks_using_cache"

_KEEP_PART_BYTES = 1 << 16  # a part's bytes are kept (for its readable side) up to this size
_MAX_MODULE_BYTES = 64 << 20  # the canonical module is kept up to this size (a reference, no copy)
_RECENT_KEYS = 4  # keys computed on one thread and not taken yet (PGLE computes two per compile)
_MAX_DEVICES_READ = 64  # device kinds are read from at most this many devices
_MAX_FLAGS = 64
# The parts with a readable text: the others (the computation, compile options, accelerator
# config) are serialized protos, compared by hash and worded when a view asks (`_cache_text`).
_READABLE_COMPONENTS = (
    "jax_lib version",
    "backend version",
    "XLA flags",
    "compression",
    "custom_hook",
)
_TEXTS = Bounded(256)  # a part's chunks -> their texts
# JAX options that change the program JAX lowers (so its "computation" part), named in the words.
PROGRAM_OPTIONS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_dtype_promotion",
    "jax_numpy_rank_promotion",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_softmax_custom_jvp",
    "jax_use_shardy_partitioner",
    "jax_compilation_cache_include_metadata_in_key",
)
_NEEDED_LOCALS = ("cache_key", "module_name", "computation", "backend", "devices", "host_callbacks")


class _KeyHash:
    """Stands in for the hash object of ``cache_key.get``: the same running SHA-256 (the key),
    and each part's own SHA-256 with its bytes (a reference to the canonical module; the other
    parts up to `_KEEP_PART_BYTES`)."""

    __slots__ = ("_total", "_part", "_size", "_chunks", "parts", "module_bytes", "__weakref__")

    def __init__(self, data: bytes = b""):
        self._total = hashlib.sha256()
        self._part = hashlib.sha256()
        self._size = 0
        self._chunks: list = []
        self.parts: list = []  # [(name, sha256 hex, chunks or None)]
        self.module_bytes: bytes | None = None
        if data:
            self.update(data)

    def update(self, data) -> None:
        self._total.update(data)
        self._part.update(data)
        self._size += len(data)
        if self._size <= _KEEP_PART_BYTES or (not self.parts and len(self._chunks) == 0):
            self._chunks.append(data if type(data) is bytes else bytes(data))

    def digest(self) -> bytes:
        return self._total.digest()

    def hexdigest(self) -> str:
        return self._total.hexdigest()

    def close(self, name: str) -> None:
        """The part `name` is complete (JAX has just logged it)."""
        chunks = self._chunks if self._size <= _KEEP_PART_BYTES else None
        if (
            not self.parts
            and len(self._chunks) == 1
            and self._size == len(self._chunks[0]) <= _MAX_MODULE_BYTES
        ):
            self.module_bytes = self._chunks[
                0
            ]  # the computation: JAX's one update of its canonical module
            chunks = None
        self.parts.append(
            (str(name), self._part.hexdigest(), tuple(chunks) if chunks is not None else None)
        )
        self._part = hashlib.sha256()
        self._size = 0
        self._chunks = []


class _HashlibFor:
    """``hashlib`` as ``jax._src.cache_key`` sees it while keys are read: ``sha256`` called from
    ``get`` gives a `_KeyHash`; everything else is the real module's."""

    def __init__(self, real, get_code, keep: Callable[[_KeyHash], None]):
        self._real, self._get_code, self._keep = real, get_code, keep

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    def sha256(self, data: bytes = b"", **kwargs):
        if (
            kwargs or sys._getframe(1).f_code is not self._get_code
        ):  # JAX's DEBUG re-hash, or another caller
            return self._real.sha256(data, **kwargs)
        tee = _KeyHash(data)
        self._keep(tee)
        return tee


class Pending:
    """A compile between its cache lookup and its end, on one thread."""

    __slots__ = (
        "key",
        "module_name",
        "parts",
        "module_bytes",
        "module_ref",
        "backend",
        "devices",
        "host_callbacks",
        "outcome",
    )

    def __init__(
        self, key, module_name, parts, module_bytes, module_ref, backend, devices, host_callbacks
    ):
        self.key, self.module_name, self.parts = key, module_name, parts
        self.module_bytes, self.module_ref = module_bytes, module_ref
        self.backend, self.devices, self.host_callbacks = backend, devices, host_callbacks
        self.outcome = "missed"  # until a hit or a write is reported


class KeyReader:
    """Reads the parts of each persistent cache key JAX computes, while JAX's cache is on.

    `on_switch(on)` is told when reading starts and stops (the probe then listens to the
    cache's events, or not)."""

    def __init__(self, on_switch: Callable[[bool], None]):
        self._on_switch = on_switch
        self._tls = threading.local()
        self._modules: tuple | None = None  # (cache_key, compilation_cache, config)
        self._hooks: list = []  # [(option state, JAX's own update hook, ours)]
        self._rebound: tuple | None = None  # (our hashlib, our log function, JAX's log function)
        self.reason = "not installed"  # why keys are not read ('' when they can be)
        self._jax_version = "?"

    @property
    def on(self) -> bool:
        return self._rebound is not None

    # ------------------------------------------------------------ install
    def install(self) -> str:
        """Follow JAX's persistent cache options; read keys while the cache is on. Returns a
        one-line notice when keys cannot be read on this JAX ('' when they can)."""
        self.reason = _detect()
        if self.reason:
            return (
                f"jaxtrace_nb: {self.reason}; persistent compilation cache misses are not "
                "explained."
            )
        import jax
        from jax._src import cache_key, compilation_cache, config

        self._jax_version = jax.__version__
        self._modules = (cache_key, compilation_cache, config)
        for state in (config.compilation_cache_dir, config.enable_compilation_cache):
            theirs = state._update_global_hook

            def hook(value, theirs=theirs):
                if theirs is not None:
                    theirs(value)
                self._follow()

            state._update_global_hook = hook
            self._hooks.append((state, theirs, hook))
        self._follow()
        return ""

    def uninstall(self) -> None:
        for state, theirs, ours in self._hooks:
            if getattr(state, "_update_global_hook", None) is ours:
                state._update_global_hook = theirs
        self._hooks = []
        self._switch(False)
        self._modules = None

    def _follow(self) -> None:
        """Read keys exactly while JAX's persistent cache is on."""
        try:
            self._switch(bool(self._modules and self._modules[1].is_persistent_cache_enabled()))
        except Exception:
            self._switch(False)

    def _switch(self, on: bool) -> None:
        if on == self.on or (on and self._modules is None):
            return
        if on:
            cache_key = self._modules[0]
            theirs = cache_key._log_cache_key_hash

            def log_part(hash_obj, name, hashfn):
                theirs(hash_obj, name, hashfn)  # JAX's own DEBUG lines, unchanged
                if type(hash_obj) is _KeyHash:
                    hash_obj.close(name)

            ours = _HashlibFor(cache_key.hashlib, cache_key.get.__code__, self._keep)
            cache_key.hashlib, cache_key._log_cache_key_hash = ours, log_part
            self._rebound = (ours, log_part, theirs)
        else:
            cache_key = self._modules[0] if self._modules else None
            ours, log_part, theirs = self._rebound
            if cache_key is not None:
                if cache_key.hashlib is ours:
                    cache_key.hashlib = ours._real
                if cache_key._log_cache_key_hash is log_part:
                    cache_key._log_cache_key_hash = theirs
            self._rebound = None
            self._tls = threading.local()
        self._on_switch(on)

    def _keep(self, tee: _KeyHash) -> None:
        recent = self._tls.__dict__.get("recent")
        if recent is None:
            recent = self._tls.recent = collections.deque(maxlen=_RECENT_KEYS)
        recent.append(tee)

    # ------------------------------------------------------------ compiles
    def begin(self, frame) -> Pending | None:
        """At ``compile_requests_use_cache``: the key JAX looks up, from the frame of
        ``compile_or_get_cached`` (`frame`), with its parts."""
        if frame is None or frame.f_code.co_name != "compile_or_get_cached":
            return None
        local = frame.f_locals
        key = local.get("cache_key")
        if type(key) is not str:
            return None
        digest = key.rpartition("-")[2]
        tee = None
        recent = self._tls.__dict__.get("recent")
        if recent:
            for candidate in reversed(recent):
                if candidate.parts and candidate.hexdigest() == digest:
                    tee = candidate
                    break
            recent.clear()  # older keys are never looked up: free their modules
        module = local.get("computation")
        try:
            module_ref = weakref.ref(module) if module is not None else None
        except TypeError:
            module_ref = None
        callbacks = local.get("host_callbacks")
        return Pending(
            key,
            str(local.get("module_name") or key.rpartition("-")[0]),
            tuple(tee.parts) if tee is not None else (),
            tee.module_bytes if tee is not None else None,
            module_ref,
            local.get("backend"),
            local.get("devices"),
            len(callbacks) if callbacks is not None else 0,
        )

    def finish(self, pending: Pending, seconds: float | None) -> CacheKeyRecord:
        """The compile ended after `seconds`: its record, with why JAX did not write it, if it did
        not."""
        outcome = {"hit": "hit", "written": "written"}.get(pending.outcome, "not_written")
        parts = pending.parts
        names = tuple(name for name, _, _ in parts)
        components = (
            tuple((name, digest) for name, digest, _ in parts)
            if names == CACHE_KEY_COMPONENTS
            else ()
        )
        chunks = {name: texts for name, _, texts in parts}
        hit = outcome == "hit"
        reason, eligible = (
            self._not_written(pending, seconds) if outcome == "not_written" else ("", True)
        )
        return CacheKeyRecord(
            key=pending.key,
            module_name=pending.module_name,
            components=components,
            facts=self._facts(pending, chunks),
            outcome=outcome,
            reason=reason,
            eligible=eligible,
            seconds=seconds,
            cache_dir=self._cache_dir(),
            compile_options=_joined(chunks.get("compile_options")),
            module_bytes=None if hit else pending.module_bytes,
            module_ref=None if hit else pending.module_ref,
            arg_paths=() if hit else _argument_paths(pending.module_ref),
        )

    def _facts(self, pending: Pending, chunks: dict) -> dict:
        """The readable side of the key's parts (texts, numbers and lists only)."""
        facts: dict[str, Any] = {"jax": self._jax_version}
        texts = {name: _texts(chunks.get(name)) for name in _READABLE_COMPONENTS}
        facts["jaxlib"] = texts["jax_lib version"][0] if texts["jax_lib version"] else None
        facts["backend"] = texts["backend version"]
        facts["xla_flags"] = texts["XLA flags"][:_MAX_FLAGS]
        facts["compression"] = texts["compression"][0] if texts["compression"] else ""
        facts["custom_hook"] = texts["custom_hook"][0] if texts["custom_hook"] else ""
        try:
            facts["devices"] = _devices(pending.backend.devices())
        except Exception:
            pass
        try:
            facts["program_devices"] = _devices(pending.devices.flat)
        except Exception:
            pass
        config = self._modules[2] if self._modules else None
        states = getattr(config, "config_states", {})
        options = {}
        for name in PROGRAM_OPTIONS:
            state = states.get(name)
            if state is not None:
                try:
                    options[name] = clip(repr(state.value), 80)
                except Exception:
                    pass
        facts["options"] = options
        return facts

    def _not_written(self, pending: Pending, seconds: float | None) -> tuple[str, bool]:
        """Why JAX did not write an entry for a compile it missed (its own checks, in its order),
        and whether the compile was eligible for the cache at all."""
        try:
            from jax._src import compiler, config, distributed

            process = distributed.global_state.process_id
            min_time = config.persistent_cache_min_compile_time_secs.value
            min_size = config.persistent_cache_min_entry_size_bytes.value
            writes_callbacks = "host_callbacks" not in compiler._cache_write.__code__.co_varnames
        except Exception:
            return "JAX did not write its entry", True
        if process:
            return f"only process 0 writes the cache, and this is process {process}", True
        if pending.host_callbacks and not writes_callbacks:
            return (
                "it uses host callbacks (`jax.debug.print`, `jax.pure_callback`, …), which this "
                "JAX never caches"
            ), False
        if seconds is not None and seconds < min_time:
            return (
                f"compiled in {seconds:.3f} s, under `jax_persistent_cache_min_compile_time_secs`="
                f"{min_time:g}"
            ), False
        if seconds is not None and seconds < min_time + 0.05 * max(1.0, min_time):
            return (
                f"compiled in about {seconds:.3f} s, at "
                f"`jax_persistent_cache_min_compile_time_secs`={min_time:g} (JAX times the XLA "
                "compile alone, a little less)"
            ), False
        if min_size > 0:
            return (
                f"its entry was under `jax_persistent_cache_min_entry_size_bytes`={min_size} (or "
                "JAX could not write it)"
            ), False
        return (
            "JAX did not write its entry (larger than `jax_compilation_cache_max_size`, or the "
            "write failed)",
            True,
        )

    def stored(self, key: str) -> bool | None:
        """Whether JAX's cache holds an entry of `key` now (its lookup will likely hit); None where
        that is not a file beside us (a bucket, no cache)."""
        path = entry_path(self._cache_dir(), key)
        return os.path.exists(path) if path is not None else None

    def _cache_dir(self) -> str:
        """Where JAX's cache is: the directory it opened (a later change of the option is ignored
        by JAX), else the option's value."""
        try:
            cache = self._modules[1]._cache
            path = getattr(cache, "_path", None) or getattr(cache, "path", None)
            if path is None:
                inner = getattr(
                    cache, "_cache", None
                )  # a cache that checks contents wraps the files
                path = getattr(inner, "_path", None) or getattr(inner, "path", None)
            if path is None:
                path = self._modules[2].compilation_cache_dir.value
            return os.fspath(path) if path is not None else ""
        except Exception:
            return ""


def entry_path(cache_dir: str, key: str) -> str | None:
    """The file of `key`'s entry in JAX's cache at `cache_dir` (``LRUCache``'s ``<key>-cache``,
    JAX 0.8.0 to 0.11.0), None where the cache is not a local directory."""
    if not cache_dir or "://" in cache_dir:
        return None
    return os.path.join(cache_dir, f"{key}-cache")


def _detect() -> str:
    """'' when this JAX computes its key as `KeyReader` reads it; else why not."""
    try:
        from jax._src import cache_key, compilation_cache, compiler, config
    except Exception as e:
        return f"JAX's persistent cache modules are not importable ({type(e).__name__})"
    get = getattr(cache_key, "get", None)
    names = getattr(getattr(get, "__code__", None), "co_names", ())
    if (
        "hashlib" not in names
        or "_log_cache_key_hash" not in names
        or not hasattr(cache_key, "hashlib")
    ):
        return "JAX's persistent cache key is computed in a way jaxtrace_nb does not know"
    compile_fn = getattr(compiler, "compile_or_get_cached", None)
    local_names = getattr(getattr(compile_fn, "__code__", None), "co_varnames", ())
    if not all(name in local_names for name in _NEEDED_LOCALS):
        return "JAX's compile_or_get_cached does not hold what jaxtrace_nb reads"
    if not callable(getattr(compilation_cache, "is_persistent_cache_enabled", None)):
        return "JAX's compilation cache has no is_persistent_cache_enabled"
    for state in (
        getattr(config, "compilation_cache_dir", None),
        getattr(config, "enable_compilation_cache", None),
    ):
        if state is None or not hasattr(state, "_update_global_hook"):
            return "JAX's compilation cache options cannot be followed"
    return ""


def _texts(chunks) -> list[str]:
    """A part's chunks as texts; a part's bytes repeat compile after compile (versions, flags):
    made once per distinct bytes (a bounded memory)."""
    if not chunks:
        return []
    key = tuple(chunks)
    texts = _TEXTS.get(key)
    if texts is None:
        texts = _TEXTS.put(key, [printable(c.decode("utf-8", "replace"), 200) for c in chunks])
    return list(texts)


def _joined(chunks) -> bytes | None:
    return b"".join(chunks) if chunks else None


def _devices(devices) -> dict:
    """How many devices, and how many of each kind (kinds read from at most 64 of them)."""
    kinds: collections.Counter = collections.Counter()
    count = 0
    for device in devices:
        if count < _MAX_DEVICES_READ:
            kinds[printable(str(getattr(device, "device_kind", "?")), 60)] += 1
        count += 1
    return {"count": count, "kinds": dict(kinds)}


_NAME_LOC = re.compile(r'^loc\("((?:[^"\\]|\\.)*)"')
_MAX_ARGUMENT_PATHS = 4096


def _argument_paths(module_ref) -> tuple:
    """The name location of each argument of the module's public ``main`` (JAX writes the user's
    pytree path there: ``loc("params[0][0]")``), or () where it cannot be read."""
    module = module_ref() if module_ref is not None else None
    if module is None:
        return ()
    try:
        for op in module.body.operations:
            name = op.attributes["sym_name"] if "sym_name" in op.attributes else None
            if name is None or str(name).strip('"') != "main":
                continue
            paths = []
            for argument in list(op.regions[0].blocks[0].arguments)[:_MAX_ARGUMENT_PATHS]:
                found = _NAME_LOC.match(str(argument.location))
                paths.append(found.group(1) if found else "")
            return tuple(paths)
    except Exception:
        return ()
    return ()
