"""Whose code a file is: an installed distribution's (a library's, the standard library's), or the
user's own.

A hint may tell the user to change code only where that code is theirs to change (a loop in
Optax's tree map or a field of Flax's ``nnx.Dropout`` is not). What is installed is read from the
interpreter's own install paths (``sysconfig``: the standard library, ``purelib``, ``platlib``),
the ``site-packages`` folders on ``sys.path``, and every installed distribution's recorded files
(``importlib.metadata``: the folders of its top-level packages, wherever it was installed). A
project the user develops (an editable install, or setuptools' ``.egg-info`` in its source tree)
is not installed code: its files stay theirs.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported when first asked: `import jaxtrace_nb` stays light)
    import importlib.metadata

_MAX_FILES_READ = 200_000  # recorded files read in all, to bound the first question's cost


def is_installed(filename: str | None) -> bool:
    """Whether `filename` is a file of an installed distribution or of the standard library.

    Example::

        >>> import json
        >>> is_installed(json.__file__), is_installed("/home/me/train.py")
        (True, False)
    """
    if not filename or filename.startswith("<"):
        return filename is not None and filename.startswith("<frozen")
    path = os.path.normpath(os.path.abspath(filename))
    # the install paths first; the distributions' recorded files (read once) only past them
    return path.startswith(_install_roots()) or path.startswith(_distribution_roots())


def is_users_module(module: str | None) -> bool:
    """Whether the module named `module` (imported) is the user's own code: its file is not an
    installed distribution's, or it is ``__main__`` (a script, a notebook's cells). False where it
    is not imported or has no file (not the user's to change, as far as anyone can tell)."""
    if module == "__main__":
        return True
    found = sys.modules.get(module or "")
    filename = getattr(found, "__file__", None)
    return bool(filename) and not is_installed(filename)


def is_users_type(qualified: str | None) -> bool:
    """Whether the class named `qualified` ("package.module.Class", as `Signature.owners` names
    containers) is declared by the user's own code: the longest imported module its name starts
    with is the user's."""
    parts = (qualified or "").split(".")
    for end in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:end])
        if module in sys.modules:
            return is_users_module(module)
    return False


@functools.lru_cache(maxsize=1)
def _install_roots() -> tuple[str, ...]:
    import sysconfig

    roots = set()
    paths = sysconfig.get_paths()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(name):
            roots.add(os.path.normpath(os.path.abspath(paths[name])))
    roots.update(
        os.path.normpath(os.path.abspath(p))
        for p in sys.path
        if p and os.path.basename(os.path.normpath(p)) in ("site-packages", "dist-packages")
    )
    return tuple(root + os.sep for root in sorted(roots))


@functools.lru_cache(maxsize=1)
def _distribution_roots() -> tuple[str, ...]:
    return tuple(folder + os.sep for folder in sorted(_distribution_folders()))


def _is_development(dist: importlib.metadata.Distribution) -> bool:
    """Whether `dist` is a project the user develops rather than one they installed: an editable
    install (its ``direct_url.json`` says so, PEP 660), or setuptools' ``.egg-info`` in a source
    tree outside every install path (``pip install -e .`` leaves one in the project's folder, on
    ``sys.path`` when Python runs from there; its ``SOURCES.txt`` lists the project's files)."""
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            if json.loads(direct).get("dir_info", {}).get("editable"):
                return True
        except ValueError:
            pass
    if dist.read_text("SOURCES.txt") is None:
        return False
    base = os.path.normpath(os.path.abspath(str(dist.locate_file("")))) + os.sep
    return not base.startswith(_install_roots())


def _distribution_folders() -> set[str]:
    """The folders of every installed distribution's top-level packages (its recorded ``.py``
    files' first folder), wherever the distribution was installed."""
    import importlib.metadata

    folders: set[str] = set()
    read = 0
    try:
        distributions = list(importlib.metadata.distributions())
    except Exception:
        return folders
    for dist in distributions:
        try:
            if _is_development(dist):
                continue
            files = dist.files or ()
        except Exception:
            continue
        for file in files:
            read += 1
            if read > _MAX_FILES_READ:
                return folders
            parts = file.parts
            if len(parts) < 2 or not parts[-1].endswith(".py") or parts[0] in ("..", "."):
                continue
            try:
                folders.add(os.path.normpath(os.path.abspath(str(dist.locate_file(parts[0])))))
            except Exception:
                continue
    return folders
