"""Every read of JAX's internals is listed, and every listed read is there in the installed JAX.

`jaxtrace_nb._jax._reads.READS` is the inventory a JAX release is ported with (issue 53): this
module checks it both ways on the JAX that runs the tests (CI: the oldest and the newest the
registry serves), reading the installed JAX's source as `benchmarks/jax_reads.py` reads a tag's.
"""

from __future__ import annotations

import ast
import pathlib

import jax

from benchmarks.jax_reads import check, from_directory, series_of
from jaxtrace_nb._jax import _reads

JAX_FOLDER = pathlib.Path(_reads.__file__).resolve().parent
INSTALLED_ROOT = pathlib.Path(jax.__file__).resolve().parent.parent


def _imported_internals() -> set[tuple[str, str]]:
    """(module, name) of every ``from jax._src… import name`` in the `_jax` folder."""
    found = set()
    for path in JAX_FOLDER.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jax._src"):
                found.update((node.module, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("jax._src") for a in node.names), path
    return found


def test_every_import_of_jax_internals_is_a_listed_read():
    listed = {(r.module, r.name) for r in _reads.READS}
    modules = {r.module for r in _reads.READS}
    unlisted = sorted(
        (module, name)
        for module, name in _imported_internals()
        if (module, name) not in listed and f"{module}.{name}" not in modules
    )
    assert unlisted == []


def test_every_read_listed_for_the_installed_jax_is_there():
    series = series_of(jax.__version__)
    findings = check(from_directory(INSTALLED_ROOT), series)
    assert findings, f"no read is listed for JAX {series}: add the series to READS"
    assert [f"{f.read.module}.{f.read.name}: {f.why}" for f in findings if not f.found] == []


def test_every_read_names_a_reader_of_this_folder():
    import importlib

    for read in _reads.READS:
        module, *attributes = read.reader.split(".")
        target = importlib.import_module(f"jaxtrace_nb._jax.{module}")
        for name in attributes:
            target = getattr(target, name)
        assert read.series and (read.kind != _reads.ReadKind.FRAME or read.name), read


def test_a_missing_read_is_found_missing(tmp_path):
    """The check bites: a tree where one function lost a local and one name is gone."""
    series = series_of(jax.__version__)
    frame = next(
        r
        for r in _reads.READS
        if r.kind == _reads.ReadKind.FRAME and r.locals and series in r.series
    )
    name = next(r for r in _reads.READS if r.kind == _reads.ReadKind.NAME and series in r.series)
    real = from_directory(INSTALLED_ROOT)

    def altered(path: str) -> str | None:
        text = real(path)
        if text is None:
            return None
        if path.startswith(frame.module.replace(".", "/")):
            text = text.replace(frame.locals[-1], frame.locals[-1] + "_renamed")
        if path.startswith(name.module.replace(".", "/")):
            text = text.replace(f"def {name.name}(", f"def {name.name}_renamed(").replace(
                f"{name.name} =", f"{name.name}_renamed ="
            )
        return text

    missing = {(f.read.module, f.read.name) for f in check(altered, series) if not f.found}
    assert (frame.module, frame.name) in missing and (name.module, name.name) in missing
