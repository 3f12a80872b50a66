"""Whether a line of source sits inside a Python loop (a ``for`` or ``while`` statement, or a
comprehension): the unrolled-loop hint asks the user to roll up a loop of their own, so the line
it names must be in one.

Read from the file's source as Python's `linecache` has it (a notebook cell's too), parsed once
per file and kept in a bounded cache of line ranges.
"""

from __future__ import annotations

import ast
import linecache

from ._bounded import Bounded

_MAX_FILES = 256
_LOOPS = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)
_ranges: Bounded = Bounded(_MAX_FILES)  # file name -> ((first line, last line), ...) of its loops


def in_loop(filename: str, line: int) -> bool:
    """Whether line `line` of `filename` is inside a loop statement or a comprehension.

    Example::

        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        ...     _ = f.write("x = 0\\nfor i in range(3):\\n    x += i\\n")
        >>> in_loop(f.name, 1), in_loop(f.name, 3)
        (False, True)
    """
    ranges = _ranges.get(filename)
    if ranges is None:
        ranges = _ranges.put(filename, _loop_ranges(filename))
    return any(first <= line <= last for first, last in ranges)


def _loop_ranges(filename: str) -> tuple:
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, _LOOPS)
    )
