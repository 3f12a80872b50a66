"""How values read in every view: short paths, short numbers, code spans (pure, no JAX).

The log keeps full values (the DataFrame, the CSV); the views show them shortened, with the
full value on hover where the view has one:

* a library file as the path inside its package (`optax/tree_utils/_tree_math.py:441`), a
  user file relative to the working folder, a notebook cell as `In[5]:3`;
* a float printed with as few significant digits as still tell `before` from `after`
  (`0.009999999776482582 → 0.009999383240938187` reads `0.01 → 0.00999`);
* text between backticks is code: HTML views put it in `<code>`, the text view keeps the
  backticks.
"""

from __future__ import annotations

import functools
import html
import os
import re
import sys

_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?!\w|\.\d)")
_PATH = re.compile(r"(?<![\w./~-])(?:[A-Za-z]:)?[/\\][^\s:`'\"()<>,]+\.pyw?\b")
_PACKAGE_DIRS = ("site-packages", "dist-packages")
_MIN_DIGITS = 3


def _roots() -> list[str]:
    """Folders a library path is shown relative to: `sys.path` entries, longest first."""
    roots = {os.path.normpath(os.path.abspath(p)) for p in sys.path if p and os.path.isabs(p)}
    return sorted(roots, key=len, reverse=True)


def short_path(path: str | None) -> str:
    """`path` (a file, or `file:line`) as a reader wants it: inside its package, or relative to
    cwd."""
    if not path:
        return path or ""
    return _short_path(path, os.getcwd(), len(sys.path))


@functools.lru_cache(maxsize=4096)
def _short_path(path: str, cwd: str, _path_entries: int) -> str:
    file, sep, line = _split_line(path)
    if not os.path.isabs(file):
        return path
    norm = os.path.normpath(file)
    parts = norm.split(os.sep)
    for marker in _PACKAGE_DIRS:  # also for a log written on another machine
        if marker in parts:
            inside = parts[len(parts) - 1 - parts[::-1].index(marker) + 1 :]
            if inside:
                return "/".join(inside) + sep + line
    if norm.startswith(cwd + os.sep):
        return os.path.relpath(norm, cwd).replace(os.sep, "/") + sep + line
    for root in _roots():
        if norm.startswith(root + os.sep) and root != cwd:
            return os.path.relpath(norm, root).replace(os.sep, "/") + sep + line
    return "…/" + "/".join(parts[-2:]) + sep + line


def _split_line(path: str) -> tuple[str, str, str]:
    """("file", ":", "12") for "file:12"; (path, "", "") when there is no line number."""
    file, sep, line = path.rpartition(":")
    if sep and line.replace(":", "").isdigit() and file:
        return file, sep, line
    return path, "", ""


def short_paths_in(text: str | None) -> str:
    """`text` with every absolute `.py` path in it shortened by `short_path`."""
    if not text:
        return text or ""
    return _PATH.sub(lambda m: short_path(m.group(0)), text)


def _shorten(text: str, digits: int) -> str:
    def one(match: re.Match) -> str:
        token = match.group(0)
        short = format(float(token), f".{digits}g")
        if "e" not in token.lower() and "e" in short:
            short = format(float(token), f".{digits}f").rstrip("0").rstrip(".") or short
        return short if len(short) < len(token) else token

    return _FLOAT.sub(one, text)


def short_numbers(before: str | None, after: str | None) -> tuple[str | None, str | None, int]:
    """`before` and `after` with their floats shortened as far as they still differ when they did;
    also returns the digits used (to shorten the explanation alike)."""
    if before is None and after is None:
        return before, after, 17
    for digits in range(_MIN_DIGITS, 18):
        b = None if before is None else _shorten(before, digits)
        a = None if after is None else _shorten(after, digits)
        if (b != a) == (before != after):
            return b, a, digits
    return before, after, 17


def short_text(text: str | None, digits: int = 6) -> str:
    """Paths and floats of a sentence (an explanation, a hint) shortened."""
    if not text:
        return text or ""
    return _shorten(short_paths_in(text), digits)


def change(before: str | None, after: str | None) -> str:
    """``before → after``, or "" when there is neither."""
    if before is None and after is None:
        return ""
    return f"{before} → {after}"


def code_spans(text: str | None) -> list[tuple[bool, str]]:
    """`text` split into (is_code, piece): the pieces between backticks are code."""
    pieces = (text or "").split("`")
    if len(pieces) % 2 == 0:  # an unmatched backtick: the last one is literal
        pieces[-2:] = [pieces[-2] + "`" + pieces[-1]]
    return [(i % 2 == 1, piece) for i, piece in enumerate(pieces) if piece]


def seconds(value) -> str:
    """Seconds to 3 decimals, or "" when not recorded (NaN or None)."""
    return "" if value is None or value != value else f"{value:.3f}"


def tail(text: str, width: int) -> str:
    """`text` in `width` characters: whole, or its tail after "…" (a qualified name's last part says
    most)."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def listed(items: list[str], most: int = 2) -> str:
    """The first `most` of `items`, comma-separated, and how many more ("a, b +3 more")."""
    shown = ", ".join(items[:most])
    return shown + (f" +{len(items) - most} more" if len(items) > most else "")


def cell_label(cell) -> str:
    """`In[4]` for a cell number, "" without one."""
    return "" if cell is None or cell != cell else f"In[{int(cell)}]"


_BREAK_AFTER = re.compile(r"(?<=[/\[])|(?<=\.)(?!\d)")


def breakable(text) -> str:
    """HTML-escaped `text` that wraps only at spaces and after `.`, `/` or `[` (a `<wbr>` there),
    never inside a word or a number."""
    return "<wbr>".join(html.escape(piece, quote=True) for piece in _BREAK_AFTER.split(str(text)))
