"""Where a trace comes from in the user's code: locations, library files, the call site.

`CallSites` writes ``file:line`` (``In[5]:3`` for a notebook cell), tells a library's file
from the user's (the library packages come from the adapters' registry), and finds the
innermost frame of the user's own code on the stack, remembering what it can: the library
frames' code objects up to the user's frame, each code object's line per instruction.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import weakref
from typing import Any, Callable, NamedTuple

from ._bounded import Bounded
from ._values import printable

CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|ipykernel_\d+[/\\]\d+\.py$")
MAX_CALL_SITE_DEPTH = 64
_MAX_KEPT = 4096


def package_dirs(name: str) -> tuple[str, ...]:
    """The folders of one package (found without importing it)."""
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    locations = (spec.submodule_search_locations or ()) if spec is not None else ()
    return tuple(os.path.abspath(location) + os.sep for location in locations)


def _dead_ref() -> None:
    return None


class CallPath(NamedTuple):
    """The stack of the last `call_site`: the library frames' code objects up to the user's frame."""

    codes: tuple
    user_code: Callable[[], Any]  # a weak reference to the user frame's code object


class LastSite(NamedTuple):
    """The last answer of `CallSites._site` outside a cell."""

    code: Callable[[], Any]  # a weak reference to the code object
    lasti: int  # the frame's last instruction
    text: str


class KnownLine(NamedTuple):
    code: Callable[[], Any]  # a weak reference to the code object the key names by id
    line: int


class CallSites:
    """Locations and call sites in the user's terms (the `Decoder` is one)."""

    def __init__(self, packages: tuple[str, ...]):
        # The folders of the libraries whose frames and functions are not the user's, whether or
        # not they are imported yet (found without importing them).
        self.library_dirs = tuple(d for name in packages for d in package_dirs(name))
        self.cell_label: Callable[[str], str | None] | None = None  # set by the IPython glue
        self._library_files = Bounded(_MAX_KEPT)  # file name -> in a library's folder
        self._locations = Bounded(_MAX_KEPT)  # (file name, line) -> its location text, outside cells
        self._lines = Bounded(_MAX_KEPT)  # (id(code), offset) -> KnownLine
        self._call_path: CallPath | None = None  # the stack of the last `call_site`, as it keeps it
        self._last_site = LastSite(_dead_ref, -1, "")
        self._package_dirs: dict[str, tuple] = {}  # a library's package name -> its folders

    def location(self, filename: str, line: int) -> str:
        """"file:line", or "In[5]:3" for a notebook cell (asked each time; other files' texts are kept)."""
        text = self._locations.get((filename, line))
        if text is not None:
            return text
        if CELL_FILE.search(filename):
            label = None
            if self.cell_label is not None:
                try:
                    label = self.cell_label(filename)
                except Exception:
                    label = None
            return printable(f"{label or filename}:{line}", 400)
        return self._locations.put((filename, line), printable(f"{filename}:{line}", 400))

    def is_library(self, filename: str) -> bool:
        known = self._library_files.get(filename)
        if known is None:
            known = self._library_files.put(filename, bool(self.library_dirs) and filename.startswith(self.library_dirs))
        return known

    def in_package(self, filename: str, package: str) -> bool:
        """Whether `filename` is in one of `package`'s folders."""
        dirs = self._package_dirs.get(package)
        if dirs is None:
            dirs = self._package_dirs[package] = package_dirs(package)
        return bool(dirs) and filename.startswith(dirs)

    def call_site(self, frame=None) -> str | None:
        """The innermost frame of the user's own code on the stack, from `frame` (by default the
        caller's) outwards.

        The library frames' code objects up to it are remembered: where the same code objects
        are on the stack again, so is the same answer (each frame's verdict depends on its code
        alone), and no frame is asked again. Its line is kept per code object (weakly) and
        instruction: finding a line scans the code's line table."""
        if frame is None:
            frame = sys._getframe(1)
        path = self._call_path
        if path is not None:
            f = frame
            try:
                for code in path.codes:
                    if f.f_code is not code:
                        break
                    f = f.f_back
                else:
                    if f.f_code is path.user_code():
                        return self._site(f)
            except AttributeError:  # a shorter stack (`f` is None)
                pass
        library, codes = self._library_files, []
        for _ in range(MAX_CALL_SITE_DEPTH):
            if frame is None:
                return None
            code = frame.f_code
            filename = code.co_filename
            known = library.get(filename)
            if known is None:
                known = self.is_library(filename)
            if not known and not filename.startswith("<frozen"):
                try:
                    self._call_path = CallPath(tuple(codes), weakref.ref(code))
                except TypeError:
                    self._call_path = None
                return self._site(frame)
            codes.append(code)
            frame = frame.f_back
        return None

    def _site(self, frame) -> str:
        """`frame`'s location text, its line found per code object and instruction (the last
        answer outside a cell is kept: a loop that retraces calls from one place)."""
        code = frame.f_code
        lasti = frame.f_lasti
        last = self._last_site
        if last.lasti == lasti and last.code() is code:
            return last.text
        key = (id(code), lasti)
        seen = self._lines.get(key)
        line = seen.line if seen is not None and seen.code() is code else self._line(key, code, frame.f_lineno)
        filename = code.co_filename
        text = self._locations.get((filename, line))
        if text is None:
            return self.location(filename, line)
        seen = self._lines.get(key)
        if seen is not None:  # (`_line` keeps the weak reference to the code)
            # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this may run per retrace.
            self._last_site = tuple.__new__(LastSite, (seen.code, lasti, text))
        return text

    def _line(self, key: tuple, code: Any, line: int) -> int:
        """Keep `line` for `key` (`call_site`), with a weak reference to `code`, which `key` names by id."""
        try:
            ref = weakref.ref(code)
        except TypeError:
            return line
        self._lines.put(key, KnownLine(ref, line))
        return line
