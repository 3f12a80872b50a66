"""Whether a line of source sits inside a Python loop (a ``for`` or ``while`` statement, or a
comprehension): the unrolled-loop hint asks the user to roll up a loop of their own, so the line
it names must be in one.

Read from the file's source as Python's `linecache` has it (a notebook cell's too), parsed once
per file and kept in a bounded cache of line ranges.
"""

from __future__ import annotations

import ast
import linecache
import threading

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
_PARSE_ATTEMPTS = 3
_PARSING = threading.Lock()  # (one parse at a time: see `_loop_ranges`)
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
    source = "".join(linecache.getlines(filename))
    for attempt in range(_PARSE_ATTEMPTS):
        try:
            with _PARSING:
                tree = ast.parse(source)
            break
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return ()
        except SystemError:
            # CPython 3.11 keeps the AST conversion's recursion depth per interpreter: a parse on
            # another thread meanwhile can fail ours with "AST constructor recursion depth
            # mismatch" (seen on 3.11.7 with a precompile worker tracing; reported in
            # python/cpython#106905 and pytest-dev/pytest#10763). Our own parses are serialized;
            # one that met another thread's is parsed again.
            if attempt == _PARSE_ATTEMPTS - 1:
                raise
    else:
        return ()
    return tuple(
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, _LOOPS)
    )
