"""The package's import drawing: imports run one way, down the layers, with no circle.

Read from the source with `ast` (every ``import`` and ``from`` of a package module, at module
level or inside a function), not by importing: what a module may import does not depend on
what happens to be imported already. The layers are the package's folders, in `FOLDERS`' order
(a module's layer is its folder's; ``__init__`` and ``__main__`` at the top are the API, above
all): a module imports only modules of its own folder or of a folder below, and the graph has no
cycle. A new module in a folder needs nothing here; a new folder is given its place in `FOLDERS`
and a row in docs/design.md's table. `import jaxtrace_nb` imports no JAX.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jaxtrace_nb"

# Lower layers know nothing of higher ones: shared value forms → every read of JAX's internals →
# what a key is made of → the
# library adapters → diagnosis → the log → the persistent cache → recording from JAX → views →
# integrations → the API (the package's own ``__init__``).
FOLDERS = [
    "_core",
    "_jax",
    "_keys",
    "_adapters",
    "_diagnosis",
    "_log",
    "_cache",
    "_recording",
    "_views",
    "_integrations",
]
API = len(FOLDERS)  # the package's top-level modules
# The one folder whose modules name JAX's internals (``jax._src``): a JAX release is ported there.
READS_JAX_INTERNALS = "_jax"


def layer(name: str) -> int:
    """A module's layer: its folder's place in `FOLDERS`; top-level modules are the API's."""
    folder = name.split(".")[0]
    return FOLDERS.index(folder) if folder in FOLDERS else API


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__" and len(parts) > 1:  # a folder's own module is the folder
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """The package modules `name` imports (relative imports resolved)."""
    is_folder = path.name == "__init__.py" and name != "__init__"
    package_parts = name.split(".") if is_folder else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = (
                package_parts[: len(package_parts) - (node.level - 1)]
                if node.level > 1
                else package_parts
            )
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                found.add(target)
            else:  # from . import a, b
                found.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxtrace_nb."):
            found.add(node.module.removeprefix("jaxtrace_nb."))
    modules = _modules()
    return {m for m in found if m in modules and m != name}


def test_every_module_is_in_a_layer_folder():
    """Every folder of the package is a layer of `FOLDERS`, with a docstring that says what it
    owns; at the top sit only the API's modules."""
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(FOLDERS)
    assert sorted(name for name in _modules() if "." not in name and name not in FOLDERS) == [
        "__init__",
        "__main__",
    ]
    for folder in FOLDERS:
        assert ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())), folder


def test_imports_run_down_the_layers():
    wrong = [
        (name, target)
        for name, path in _modules().items()
        for target in _imports(name, path)
        if layer(target) > layer(name)
    ]
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    graph = {name: _imports(name, path) for name, path in _modules().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_importing_the_package_imports_no_jax():
    code = (
        "import sys, jaxtrace_nb; print(sorted(m for m in sys.modules if m == 'jax' or "
        "m.startswith('jax.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_jax_internals_are_named_in_one_folder_only():
    """``jax._src`` is imported, or named at all, only in the `READS_JAX_INTERNALS` folder."""
    named = {name for name, path in _modules().items() if "jax._src" in path.read_text()}
    assert named and {name.split(".")[0] for name in named} == {READS_JAX_INTERNALS}


def test_the_design_docs_layer_table_is_the_folders():
    """docs/design.md's table of layers lists the folders in `FOLDERS`' order, each with the
    modules it holds (a folder's own ``__init__`` aside)."""
    import re

    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [
        line.split("|")[1:3]
        for line in table.splitlines()
        if line.startswith("| ") and "---" not in line
    ]
    documented = {
        folder.strip().strip("`/"): set(re.findall(r"`([^`]+)`", modules))
        for folder, modules in rows[1:]
    }
    assert list(documented) == FOLDERS
    for folder in FOLDERS:
        held = {p.stem for p in (PACKAGE / folder).glob("*.py") if p.stem != "__init__"}
        assert {m for m in documented[folder] if not m.endswith((".js", ".css"))} == held, folder


def test_the_design_docs_retrace_walk_names_real_code_and_never_returns():
    """docs/design.md's walk of one retrace: every place it names exists (``module.Class.method``
    or ``module.function`` in the hop's folder), and the folders it passes through never come
    back to one already left."""
    import importlib

    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    table = text.split("## One retrace, hop by hop", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.split("|")[1:5]]
        for line in table.splitlines()
        if line.startswith("| ") and "---" not in line
    ][1:]
    assert len(rows) >= 6
    left: list[str] = []
    for number, folder, where, _ in rows:
        folder, where = folder.strip("`/"), where.strip("`")
        module, *attributes = where.split(".")
        target = importlib.import_module(f"jaxtrace_nb.{folder}.{module}")
        for name in attributes:
            target = getattr(target, name)
        assert callable(target), where
        if not left or left[-1] != folder:
            assert folder not in left, f"hop {number} comes back to {folder}"
            left.append(folder)
