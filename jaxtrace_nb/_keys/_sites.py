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

from .._core._bounded import Bounded
from .._core._values import printable
from ._records import Binding

CELL_FILE = re.compile(r"^<ipython-input-\d+-[0-9a-f]+>$|ipykernel_\d+[/\\]\d+\.py$")
MAX_CALL_SITE_DEPTH = 64
_MAX_KEPT = 4096
MAX_BINDING_FRAMES = 8  # user frames searched for the variable holding a new function object
_STORES = frozenset(("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF"))


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
    """The stack of the last `call_site`: the library frames' code objects up to the user's
    frame."""

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
        self._locations = Bounded(
            _MAX_KEPT
        )  # (file name, line) -> its location text, outside cells
        self._lines = Bounded(_MAX_KEPT)  # (id(code), offset) -> KnownLine
        self._call_path: CallPath | None = None  # the stack of the last `call_site`, as it keeps it
        self._last_site = LastSite(_dead_ref, -1, "")
        self._package_dirs: dict[str, tuple] = {}  # a library's package name -> its folders
        self._store_lines = Bounded(
            _MAX_KEPT
        )  # (id(code), variable name) -> (weak ref to the code, lines)

    def location(self, filename: str, line: int) -> str:
        """ "file:line", or "In[5]:3" for a notebook cell (asked each time; other files' texts are
        kept)."""
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
            known = self._library_files.put(
                filename, bool(self.library_dirs) and filename.startswith(self.library_dirs)
            )
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
        line = (
            seen.line
            if seen is not None and seen.code() is code
            else self._line(key, code, frame.f_lineno)
        )
        filename = code.co_filename
        text = self._locations.get((filename, line))
        if text is None:
            return self.location(filename, line)
        seen = self._lines.get(key)
        if seen is not None:  # (`_line` keeps the weak reference to the code)
            # tuple.__new__: a NamedTuple's own __new__ is a Python function, and this may run per
            # retrace.
            self._last_site = tuple.__new__(LastSite, (seen.code, lasti, text))
        return text

    def _line(self, key: tuple, code: Any, line: int) -> int:
        """Keep `line` for `key` (`call_site`), with a weak reference to `code`, which `key` names
        by id."""
        try:
            ref = weakref.ref(code)
        except TypeError:
            return line
        self._lines.put(key, KnownLine(ref, line))
        return line

    # ------------------------------------------------------------------ bindings
    def binding(self, fun: Any, frame=None) -> Binding | None:
        """Where the user's code bound `fun`, a function object traced for the first time: the
        innermost user frame (from `frame` outwards) with a variable that holds it, or holds the
        jit wrapper around it, and the lines of that frame's code that assign the variable. None
        when no readable frame holds it (``jax.jit(f)(x)``: made where it is called) or when that
        frame's code assigns no such variable.

        What Python keeps: which variable holds an object, and where the code assigns it; not which
        assignment ran (an object keeps no record of where it was made), so every assigning line is
        named. Only variables that can be read without side effects are read (`_variables`): a
        module's (a script, a notebook cell) and, from Python 3.13, a function's. Nothing is called
        on the user's objects but `callable` and the read of their instance dictionary."""
        f, frames = frame, 0
        while f is not None and frames < MAX_BINDING_FRAMES:
            code = f.f_code
            if self.is_library(code.co_filename) or code.co_filename.startswith("<frozen"):
                f = f.f_back
                continue
            frames += 1
            name = _holder(_variables(f), fun, self.library_dirs)
            if name is not None:
                stores = self._stores(code, name)
                if not stores:
                    return None  # held, not assigned by this code (a global another function sets)
                return Binding(
                    printable(name, 100), tuple(self.location(code.co_filename, n) for n in stores)
                )
            f = f.f_back  # not held here (a parameter, a function frame not read): the caller's
        return None

    def _stores(self, code: Any, name: str) -> tuple[int, ...]:
        """The lines of `code` that assign the variable `name` (its bytecode's stores), kept per
        code."""
        key = (id(code), name)
        known = self._store_lines.get(key)
        if known is not None and known[0]() is code:
            return known[1]
        import dis

        lines = []
        for instruction in dis.get_instructions(code):
            if instruction.opname in _STORES and instruction.argval == name:
                line = instruction.positions.lineno if instruction.positions else None
                if line is not None and line not in lines:
                    lines.append(line)
        found = tuple(lines)
        try:
            self._store_lines.put(key, (weakref.ref(code), found))
        except TypeError:
            pass
        return found


def _variables(frame) -> Any:
    """`frame`'s variables where reading them changes nothing, else None: a module's code (a script,
    a notebook cell) stores its variables in its globals; a function's are read through
    ``f_locals`` only from Python 3.13 (a view, PEP 667). Before, ``f_locals`` of a running function
    is a snapshot the frame keeps: it would hold every local value alive until the function returns,
    even one the function deletes."""
    if frame.f_code.co_name == "<module>":
        return frame.f_globals
    if sys.version_info >= (3, 13):
        try:
            return frame.f_locals
        except Exception:
            return None
    return None


def _holder(names, fun: Any, library_dirs: tuple[str, ...]) -> str | None:
    """The name of the variable in `names` that holds `fun`, or the jit object wrapping it: its
    instance dictionary's ``__wrapped__`` (``jax.jit``, ``nnx.jit``), or, for an object of a
    library's own type, its ``__wrapped__`` attribute (``eqx.filter_jit``'s, a property). No code of
    the user's objects runs."""
    if names is None:
        return None
    try:
        items = list(names.items())
    except Exception:
        return None
    for name, value in items:
        if value is fun:
            return name
        if not callable(value):
            continue
        try:
            own = object.__getattribute__(value, "__dict__")
        except Exception:
            continue
        if type(own) is not dict:
            continue
        if own.get("__wrapped__") is fun:
            return name
        if _library_type(value, library_dirs):
            try:
                if getattr(value, "__wrapped__", None) is fun:
                    return name
            except Exception:
                continue
    return None


def _library_type(value: Any, library_dirs: tuple[str, ...]) -> bool:
    module = sys.modules.get(getattr(type(value), "__module__", "") or "")
    file = getattr(module, "__file__", None) or ""
    return bool(library_dirs) and file.startswith(library_dirs)
