"""What a lookup in JAX's persistent compilation cache found, in words (pure, no JAX).

Every compile made while the cache is on gets a verdict in the `persistent_cache` column:

* ``hit``: served by the cache (nothing else is claimed);
* ``not cached: …``: JAX would not cache this compile (too fast, too small, host callbacks): not a
  miss;
* ``miss: …``: JAX looked the key up and found no entry, and why: the same key seen before and not
  written then (or evicted since); the first compile of that name with this cache; or the parts of
  the key that differ from the closest earlier key of the same name, each in words (flags added or
  removed, versions, devices, compile options, JAX options, the first differing operation of the
  computation with the line of the user's code it comes from).

`verdict` is said at the compile; `explain` once the index beside the cache has compared the key
(`_cache_index`) and, lazily, the compile options and modules were decoded (`_cache_explainer`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import NamedTuple

from .._core._values import clip
from .._core._vocabulary import Cause
from .._diagnosis import _hints as hints
from .._diagnosis._module_diff import Difference, Differs, changed_part
from .._jax._cache_key import CacheKeyRecord
from .._keys._records import CacheComparison, EarlierKey

HIT, MISS, NOT_CACHED = "hit", "miss", "not cached"
FIRST_COMPILE = f"{MISS}: the first compile of "
MAX_TEXT = 1500
_MAX_OP = 160
_MAX_LISTED = 3
# The parts in words, and the order they are told in (versions first: a new jaxlib changes every
# part).
_ORDER = (
    "jax_lib version",
    "backend version",
    "XLA flags",
    "accelerator_config",
    "compile_options",
    "computation",
    "compression",
    "custom_hook",
)


class Explained(NamedTuple):
    text: str  # the `persistent_cache` column: "miss: …"
    hint_id: str | None
    hint: str


def verdict(record: CacheKeyRecord) -> str:
    """What the compile's lookup found, as said at once (a miss is explained later)."""
    if record.outcome == "hit":
        return HIT
    if not record.eligible:
        return f"{NOT_CACHED}: {record.reason}"
    if not record.components:
        return f"{MISS} (not explained: the parts of its key could not be read)"
    return MISS


def verdict_word(text: str | None) -> str:
    """The leading word(s) of a `persistent_cache` text: "hit", "miss", "not cached" ("" for
    none)."""
    if not text:
        return ""
    for word in (HIT, NOT_CACHED, MISS):
        if text.startswith(word):
            return word
    return ""


def notable_miss(text: str | None) -> bool:
    """Whether a `persistent_cache` text is a miss worth showing: not a hit, not a compile JAX would
    not cache, not the first compile of its name with this cache."""
    return bool(text) and text.startswith(MISS) and not text.startswith(FIRST_COMPILE)


class Retrace(NamedTuple):
    """The trace a compile follows: its cause and leaf (the event's)."""

    cause: Cause | str | None
    leaf: str | None


def explain(
    record: CacheKeyRecord,
    comparison: CacheComparison,
    *,
    run: str,
    options: list[tuple[str, str, str]] | None = None,
    computation: Difference | None = None,
    retrace: Retrace | None = None,
    location: str | None = None,
    place: Callable[[str], str] = lambda where: where,
) -> Explained:
    """The words of a miss, from its comparison with the index (`options`: the compile options'
    fields that differ, when decoded; `computation`: where the modules first differ, when found;
    `retrace`: the trace's own cause and leaf when this compile follows a retrace; `location`: where
    the compiled function is defined; `place` shows a source location as the log keeps it)."""
    name = f"`{record.module_name}`"
    same = comparison.same
    if same is not None:
        who = _run_words(same, run)
        if same.written and comparison.entry_exists is False:
            text = (
                f"this key was written by {who}, and its entry is no longer in the cache (evicted "
                "under `jax_compilation_cache_max_size`, or deleted)"
            )
        elif same.written:
            text = (
                f"the cache holds an entry for this key (written by {who}) that JAX did not use (a "
                "read error: see JAX's warning; or `jax_compilation_cache_check_contents`, which "
                "compiles each key once per process)"
            )
        else:
            text = (
                f"this key was compiled before ({who}) and not written then: "
                f"{same.reason or 'not eligible'}"
            )
        return Explained(_clip(f"{MISS}: {text}"), None, "")
    closest = comparison.closest
    if closest is None:
        return Explained(
            f"{FIRST_COMPILE}{name} with this cache (its index holds no earlier key of that name)",
            None,
            "",
        )
    sentences, hint_id, hint = _differences(
        record, closest, comparison.differing, options, computation, place
    )
    if (
        retrace is not None
        and retrace.cause not in (None, Cause.FIRST)
        and "computation" in comparison.differing
    ):
        leaf = f" at `{retrace.leaf}`" if retrace.leaf else ""
        sentences.append(f"this compile follows a retrace ({retrace.cause}{leaf})")
    where = f"closest earlier key of {name}: {_run_words(closest, run)}"
    if closest.location and closest.function and closest.location != location:
        where += f", compiled for `{closest.function}` at {place(closest.location)}"
    text = f"{MISS}: " + "; ".join(sentences) + f" ({where})"
    return Explained(_clip(text), hint_id, hint)


def _differences(
    record: CacheKeyRecord, earlier: EarlierKey, differing: tuple, options, computation, place
):
    old, new = earlier.facts or {}, record.facts or {}
    parts = [p for p in _ORDER if p in differing]
    sentences: list[str] = []
    hint_id, hint = None, ""
    if "jax_lib version" in parts:
        sentences.append(
            f"jaxlib {old.get('jaxlib') or '?'} → {new.get('jaxlib') or '?'}"
            + (
                f" (JAX {old.get('jax')} → {new.get('jax')})"
                if old.get("jax") != new.get("jax")
                else ""
            )
        )
        others = [_PART_WORDS[p] for p in parts if p != "jax_lib version"]
        if others:
            sentences.append(
                f"{_listed(others)} differ with it, as each JAX version makes them its own way"
            )
        return sentences, "cache.jax_version", hints.text("cache.jax_version")
    for part in parts:
        if part == "backend version":
            sentences.append(
                f"backend {' '.join(old.get('backend') or ['?'])} → "
                f"{' '.join(new.get('backend') or ['?'])}"
            )
        elif part == "XLA flags":
            sentences.append(_flags(old.get("xla_flags") or [], new.get("xla_flags") or []))
            hint_id = hint_id or "cache.xla_flags"
        elif part == "accelerator_config":
            sentences.append(_devices(old, new))
            if old.get("devices") != new.get("devices") or old.get("program_devices") != new.get(
                "program_devices"
            ):
                hint_id = hint_id or "cache.devices"
        elif part == "compile_options":
            sentence, overrides = _compile_options(options, "XLA flags" in parts)
            sentences.append(sentence)
            if overrides and "XLA flags" not in parts:
                hint_id = hint_id or "cache.compiler_options"
        elif part == "computation":
            changed = _option_changes(old.get("options") or {}, new.get("options") or {})
            if changed:
                sentences.append(
                    "JAX options differ: " + ", ".join(f"`{n}` {a} → {b}" for n, a, b in changed)
                )
                if hint_id is None:
                    hint_id = "cache.options"
                    hint = hints.text(
                        "cache.options", options=_listed([f"`{n}`" for n, _, _ in changed])
                    )
            sentences.append(_computation(computation, place))
            if (
                hint_id is None
                and computation is not None
                and computation.kind == Differs.OP
                and "constant" in computation.new
                and computation.source
            ):
                hint_id = "cache.constant"
                hint = hints.text("cache.constant", where=place(computation.source))
        elif part == "compression":
            sentences.append(
                f"compression {old.get('compression') or '?'} → {new.get('compression') or '?'} "
                "(the `zstandard` package is installed for one run only)"
            )
        elif part == "custom_hook":
            sentences.append(
                "JAX's cache key custom hook (`cache_key.custom_hook`) returns another string"
            )
    if hint_id is not None and not hint:
        hint = hints.text(hint_id)
    return sentences, hint_id, hint


_PART_WORDS = {
    "computation": "the computation",
    "backend version": "the backend version",
    "XLA flags": "the XLA flags",
    "compile_options": "the compile options",
    "accelerator_config": "the accelerator configuration",
    "compression": "the compression",
    "custom_hook": "the custom hook",
    "jax_lib version": "the jaxlib version",
}


def _flags(old: list[str], new: list[str]) -> str:
    added = [f for f in new if f not in old]
    removed = [f for f in old if f not in new]
    said = [f"`{f}` added" for f in added[:_MAX_LISTED]] + [
        f"`{f}` removed" for f in removed[:_MAX_LISTED]
    ]
    more = len(added) + len(removed) - len(said)
    if more > 0:
        said.append(f"{more} more")
    return "XLA flags differ: " + (", ".join(said) if said else "the same flags, in another form")


def _device_text(devices: dict | None) -> str:
    if not devices:
        return "?"
    kinds = devices.get("kinds") or {}
    count = devices.get("count", 0)
    if len(kinds) == 1:
        kind = next(iter(kinds))
        return f"{count} {kind} device{'s' if count != 1 else ''}"
    return f"{count} devices (" + ", ".join(f"{n} {k}" for k, n in kinds.items()) + ")"


def _devices(old: dict, new: dict) -> str:
    client = (old.get("devices"), new.get("devices"))
    program = (old.get("program_devices"), new.get("program_devices"))
    if client[0] == client[1] and program[0] == program[1]:
        return f"the accelerator configuration differs (the same {_device_text(client[1])})"
    text = f"devices differ: {_device_text(client[0])} → {_device_text(client[1])}"
    if program[0] and program[1]:
        text += (
            f" (the program runs on {program[0].get('count')} → {program[1].get('count')})"
            if program[0] != program[1]
            else f" (the program runs on {program[1].get('count')})"
        )
    return text


def _compile_options(
    changes: list[tuple[str, str, str]] | None, flags_differ: bool
) -> tuple[str, bool]:
    """(the sentence, whether `compiler_options` passed to jit differ)."""
    if changes:
        said = [f"`{field}`: {before} → {after}" for field, before, after in changes[:_MAX_LISTED]]
        if len(changes) > _MAX_LISTED:
            said.append(f"{len(changes) - _MAX_LISTED} more")
        overrides = any(field.endswith("env_option_overrides") for field, _, _ in changes)
        return "compile options differ: " + ", ".join(said), overrides
    if flags_differ:
        return "compile options differ with the XLA flags (XLA's debug options follow them)", False
    if changes is None:
        return "compile options differ", False
    return "compile options differ in a field jaxlib does not show", False


def compile_option_changes(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str, str]]:
    """(field, before, after) of every compile option field that differs
    (`_jax._cache_text.compile_options_fields`)."""
    return [
        (k, old.get(k, "(absent)"), new.get(k, "(absent)"))
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ]


def _option_changes(old: dict, new: dict) -> list[tuple[str, str, str]]:
    return [(k, old[k], new[k]) for k in new if k in old and old[k] != new[k]]


def _computation(d: Difference | None, place: Callable[[str], str]) -> str:
    if d is None:
        return "the computation differs (the earlier module is no longer in the index)"
    if d.kind == Differs.UNREAD:
        return "the computation differs"
    if d.kind == Differs.NONE:
        return (
            "the computation prints the same and its bytecode differs (another MLIR version wrote "
            "it)"
        )
    if d.kind == Differs.ARGUMENT:
        return f"the computation differs in argument `{d.path or '?'}`: {d.old} → {d.new}"
    if d.kind == Differs.RESULT:
        return (
            f"the computation differs in its result{f' `{d.path}`' if d.path else ''}: {d.old} → "
            f"{d.new}"
        )
    if d.kind == Differs.SIGNATURE:
        return f"the computation takes {d.old} → {d.new}"
    at = f" at {place(d.source)}" if d.source else ""
    operation, old, new = changed_part(d.old, d.new)
    names = [f"`{n}`" for n in (d.name, operation if (old, new) != (d.old, d.new) else None) if n]
    return (
        f"the computation differs first{at}{' (' + ', '.join(names) + ')' if names else ''}: "
        f"`{clip(old, _MAX_OP)}` → `{clip(new, _MAX_OP)}`"
    )


def _run_words(earlier: EarlierKey, run: str) -> str:
    if earlier.run == run:
        return "this run"
    when = datetime.datetime.fromtimestamp(earlier.last_seen).strftime("%Y-%m-%d %H:%M:%S")
    return f"the run of {when}, pid {earlier.pid}{f' on {earlier.host}' if earlier.host else ''}"


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _clip(text: str) -> str:
    return clip(text, MAX_TEXT)
