"""The first difference between two printed StableHLO modules, placed at a line of the user's
source (pure text, no JAX).

The "computation" part of JAX's persistent cache key is the module JAX compiles with its
locations stripped. An earlier run's module is known as JAX hashed it (printed without
locations, `old`); this run's as JAX compiled it (printed with its locations, `new`). With the
location references taken out of `new`, the two print line for line alike up to the first
operation that differs; that operation's location in `new` (a JAX name path such as
``jit(step)/jvp()/mul`` around a call stack of ``"file":line:column`` frames) says where in the
user's code it comes from. A constant carries only the jit's own location: then its first use
(within a few hops) says where it enters the computation. A difference in the signature of
``main`` names the argument (by its pytree path, which JAX gives each argument as its location)
or the result whose type differs.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

from .._core._vocabulary import StrEnum

_ALIAS = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_LOC_REF = re.compile(r'\s+loc\((#loc\d*|"(?:[^"\\]|\\.)*"|unknown)\)')
_FILE = re.compile(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)')
_NAMED = re.compile(r'^"((?:[^"\\]|\\.)*)"\((.*)\)$')
_FUSED = re.compile(r"^fused\[(.*)\]$")
_SSA_RESULT = re.compile(r"^\s*(%[\w.$\-]+)(?::\d+)?(?:,\s*%[\w.$\-]+(?::\d+)?)*\s*=")
_RESULT_INFO = re.compile(r'jax\.result_info\s*=\s*"((?:[^"\\]|\\.)*)"')
_MAX_HOPS = 8
_MAX_DEPTH = 64
MAX_OP_CHARS = 1000


class Differs(StrEnum):
    """What part of two modules differs first (`Difference.kind`)."""

    OP = "op"  # an operation
    ARGUMENT = "argument"  # an argument's type
    RESULT = "result"  # a result's type or name
    SIGNATURE = "signature"  # the number of arguments or results
    NONE = "none"  # nothing: the printed modules are the same
    UNREAD = "unread"  # they were not compared


class Difference(NamedTuple):
    """Where two modules first differ."""

    kind: Differs
    old: str  # the earlier module's line (an argument's type, a result's type)
    new: str  # this module's
    source: str | None = None  # "file:line" of the user's code the operation comes from
    name: str | None = None  # JAX's name path of the operation ("jit(step)/jvp()/mul")
    path: str | None = (
        None  # the argument's or result's pytree path ("params[0][0]", "result['a']")
    )
    via_use: bool = False  # the location is that of the first operation using the differing one


def split_locations(text: str) -> tuple[list[str], list[str | None], dict[str, str]]:
    """A module printed with locations: its lines without location references, each line's
    last location reference, and the alias table (``#loc3`` -> its definition)."""
    aliases: dict[str, str] = {}
    lines: list[str] = []
    refs: list[str | None] = []
    for line in text.splitlines():
        alias = _ALIAS.match(line)
        if alias:
            aliases[alias.group(1)] = alias.group(2)
            continue
        found = _LOC_REF.findall(line)
        lines.append(_LOC_REF.sub("", line))
        refs.append(found[-1] if found else None)
    return lines, refs, aliases


def frames(ref: str | None, aliases: dict[str, str], depth: int = 0) -> list[tuple]:
    """A location as frames, innermost first: ("name", text) and ("file", path, line)."""
    if ref is None or depth > _MAX_DEPTH:
        return []
    text = aliases.get(ref, ref).strip()
    if text.startswith("loc(") and text.endswith(")"):
        text = text[4:-1]
    if text.startswith("#loc"):
        return frames(text, aliases, depth + 1) if text in aliases else []
    if text.startswith("callsite(") and text.endswith(")"):
        inner = text[len("callsite(") : -1]
        at = next(
            (k for k, char, level in _depths(inner) if level == 0 and inner.startswith(" at ", k)),
            -1,
        )
        if at >= 0:
            return frames(inner[:at], aliases, depth + 1) + frames(
                inner[at + 4 :], aliases, depth + 1
            )
    match = _FUSED.match(text)
    if match:
        return [
            f for part in _top_level_split(match.group(1)) for f in frames(part, aliases, depth + 1)
        ]
    match = _NAMED.match(text)
    if match:
        return [("name", _unquote(match.group(1)))] + frames(match.group(2), aliases, depth + 1)
    match = _FILE.match(text)
    if match:
        return [("file", _unquote(match.group(1)), int(match.group(2)))]
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return [("name", _unquote(text[1:-1]))]
    return []


def first_difference(
    old: str,
    new: str,
    is_library: Callable[[str], bool] = lambda path: False,
    arg_paths: tuple = (),
) -> Difference:
    """Where `old` (printed without locations) and `new` (printed with them, or without: then
    `arg_paths` names the arguments, as read at the compile) first differ."""
    old_lines = [line for line in old.splitlines() if not _ALIAS.match(line)]
    old_lines = [_LOC_REF.sub("", line) for line in old_lines]
    new_lines, refs, aliases = split_locations(new)
    i = next(
        (k for k, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
        min(len(old_lines), len(new_lines)),
    )
    if i >= len(old_lines) and i >= len(new_lines):
        return Difference(Differs.NONE, "", "")
    old_line = old_lines[i].strip() if i < len(old_lines) else "(end of module)"
    new_line = new_lines[i].strip() if i < len(new_lines) else "(end of module)"
    if old_line.startswith("func.func") and new_line.startswith("func.func"):
        signature = _signature_difference(old_line, new_line, new.splitlines(), aliases, arg_paths)
        if signature is not None:
            return signature
    at, hops = i, 0
    while at < len(new_lines):
        names = [f[1] for f in frames(refs[at], aliases) if f[0] == "name"]
        if any("/" in n for n in names) or hops >= _MAX_HOPS:
            break
        result = _SSA_RESULT.match(new_lines[at])
        if not result:
            break
        value = re.compile(re.escape(result.group(1)) + r"(?![\w.$\-])")
        use = next(
            (
                j
                for j in range(at + 1, len(new_lines))
                if value.search(new_lines[j].split("=", 1)[-1])
            ),
            None,
        )
        if use is None:
            break
        at, hops = use, hops + 1
    located = frames(refs[at] if at < len(refs) else None, aliases)
    names = [f[1] for f in located if f[0] == "name"]
    files = [f for f in located if f[0] == "file"]
    user = [f for f in files if not is_library(f[1])] or files
    return Difference(
        Differs.OP,
        _short(old_line),
        _short(new_line),
        source=f"{user[0][1]}:{user[0][2]}" if user else None,
        name=next((n for n in names if "/" in n), names[0] if names else None),
        via_use=hops > 0,
    )


def _signature_difference(
    old_line: str, new_line: str, new_text: list[str], aliases: dict, arg_paths: tuple = ()
) -> Difference | None:
    """The first argument or result of ``main`` whose type differs (an argument by its pytree
    path)."""
    raw = next(
        (line.strip() for line in new_text if line.strip().startswith("func.func")), new_line
    )
    old_args, old_results = _signature(old_line)
    new_args, new_results = _signature(raw)
    for i, (old_arg, new_arg) in enumerate(zip(old_args, new_args)):
        old_type, _ = _typed(old_arg)
        new_type, loc = _typed(new_arg)
        if old_type != new_type:
            path = [f[1] for f in frames(loc, aliases) if f[0] == "name"] if loc else []
            if not path and i < len(arg_paths) and arg_paths[i]:
                path = [arg_paths[i]]
            return Difference(
                Differs.ARGUMENT, _short(old_type), _short(new_type), path=path[0] if path else None
            )
    if len(old_args) != len(new_args):
        return Difference(
            Differs.SIGNATURE, f"{len(old_args)} argument(s)", f"{len(new_args)} argument(s)"
        )
    for old_result, new_result in zip(old_results, new_results):
        if old_result != new_result:
            old_type, new_type = _typed(old_result)[0], _typed(new_result)[0]
            old_info, new_info = _RESULT_INFO.search(old_result), _RESULT_INFO.search(new_result)
            if old_type == new_type:  # the same type under another name: the output pytree's keys
                return Difference(
                    Differs.RESULT,
                    _unquote(old_info.group(1)) if old_info else "(unnamed)",
                    _unquote(new_info.group(1)) if new_info else "(unnamed)",
                )
            return Difference(
                Differs.RESULT,
                _short(old_type),
                _short(new_type),
                path=_unquote((new_info or old_info).group(1)) if new_info or old_info else None,
            )
    if len(old_results) != len(new_results):
        return Difference(
            Differs.SIGNATURE, f"{len(old_results)} result(s)", f"{len(new_results)} result(s)"
        )
    return None


def _signature(line: str) -> tuple[list[str], list[str]]:
    """The arguments and results of a ``func.func`` line, each as printed."""
    start = line.find("(")
    if start < 0:
        return [], []
    end = _closing(line, start)
    arguments = _top_level_split(line[start + 1 : end])
    rest = line[end + 1 :].strip()
    results: list[str] = []
    if rest.startswith("->"):
        rest = rest[2:].strip()
        if rest.startswith("("):
            results = _top_level_split(rest[1 : _closing(rest, 0)])
        else:
            results = [rest.split(" attributes ")[0].rstrip(" {")]
    return arguments, results


def _typed(item: str) -> tuple[str, str | None]:
    """("tensor<3xf32>", its location reference or None) of ``%arg0: tensor<3xf32> {…} loc(…)``
    (a result: ``tensor<3xf32> {jax.result_info = …}``)."""
    loc = None
    found = _LOC_REF.findall(" " + item)
    if found:
        loc = found[-1]
        item = _LOC_REF.sub("", " " + item).strip()
    if ":" in item and item.lstrip().startswith("%"):
        item = item.split(":", 1)[1]
    brace = _top_level_find(item, "{")
    return (item[:brace] if brace >= 0 else item).strip(), loc


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\w.$%@#+\-]+|\s+|.')
_OPERATION = re.compile(r"^(?:%[\w.$\-:]+(?:,\s*%[\w.$\-:]+)*\s*=\s*)?\"?([\w.]+)")


def changed_part(old: str, new: str) -> tuple[str, str, str]:
    """(the operation's name, the part of `old` that differs, the part of `new`), cut at whole
    tokens: ``("stablehlo.constant", "5.000000e-01", "0.699999988")``. The whole lines when most of
    them differ."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    old_part, new_part = (
        "".join(a[start : len(a) - end]).strip(),
        "".join(b[start : len(b) - end]).strip(),
    )
    operation = _OPERATION.match(new) or _OPERATION.match(old)
    name = operation.group(1) if operation else ""
    if not old_part or not new_part or len(old_part) + len(new_part) > 0.5 * (len(old) + len(new)):
        return name, old, new
    return name, old_part, new_part


def _short(line: str) -> str:
    line = line.replace("`", "'")
    return line if len(line) <= MAX_OP_CHARS else line[: MAX_OP_CHARS - 1] + "…"


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _depths(text: str):
    """(index, character, nesting depth before it) of each character outside quotes."""
    depth, quoted = 0, False
    for k, char in enumerate(text):
        if char == '"' and (k == 0 or text[k - 1] != "\\"):
            quoted = not quoted
            continue
        if quoted:
            continue
        if char in ")]}>" and not (char == ">" and k and text[k - 1] == "-"):
            depth -= 1
        yield k, char, depth
        if char in "([{<":
            depth += 1


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at `start` (the end of `text` if none)."""
    base = None
    for k, char, depth in _depths(text):
        if k == start:
            base = depth
        elif base is not None and depth == base and char in ")]}>":
            return k
    return len(text)


def _top_level_find(text: str, wanted: str) -> int:
    return next((k for k, char, depth in _depths(text) if char == wanted and depth == 0), -1)


def _top_level_split(text: str) -> list[str]:
    """`a, b(c, d)` -> [`a`, `b(c, d)`]: split at commas outside brackets and quotes."""
    parts, start = [], 0
    for k, char, depth in _depths(text):
        if char == "," and depth == 0:
            parts.append(text[start:k].strip())
            start = k + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]
