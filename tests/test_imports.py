"""The package's import drawing: imports run one way, down the layers, with no circle.

Read from the source with `ast` (every ``import`` and ``from`` of a package module, at module
level or inside a function), not by importing: what a module may import does not depend on
what happens to be imported already. Each module has a layer (`LAYERS`); a module imports
only modules of its own layer or below, and the graph has no cycle. A new module must be given
a layer here, and `import jaxtrace_nb` imports no JAX.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "jaxtrace_nb"

# Lower layers know nothing of higher ones: values → signatures and leaves → the argument walk →
# the library adapters → diagnosis and hints → the probe (JAX's hooks, the decoder) → the log →
# the lifecycle → the session → views → glue.
LAYERS = {
    0: {"_values", "_witness", "_bounded", "_background", "_format", "_missing", "_processes", "_vocabulary"},
    1: {"_signature", "_records", "_jax_tree", "_leaves", "_plans", "_sites"},
    2: {"_walker", "_calls", "_changes", "_jax_layouts", "_lowering", "_deferred"},
    3: set(),  # every module of the folder `_adapters/` (`FOLDER_LAYERS`): a new adapter is one file
    4: {"_hints", "_diagnosis", "_module_diff", "_cache_words"},
    5: {"_jax_internals", "_decode", "_cost", "_lineprof", "_measure", "_listeners", "_probe", "_jax_cache_key", "_jax_cache_text"},
    6: {"_log", "_frames", "_cache_index"},
    7: {"_functions", "_drafts", "_lifecycle"},
    8: {"_session", "_self_check", "_persist", "_watch", "_cache_explainer", "_baseline"},
    9: {"_report", "_rows", "_views", "_widget", "_display", "_standalone", "_census", "_timeline", "_where"},
    10: {"_ipython", "_pytest_plugin", "_pytest_results", "_run", "_cli", "__init__", "__main__"},
}
# Folders whose every module is of one layer.
FOLDER_LAYERS = {"_adapters": 3}
# The only modules that name JAX's internals (``jax._src``): the probe's.
READS_JAX_INTERNALS = {"_jax_layouts", "_jax_internals", "_probe", "_jax_cache_key", "_jax_cache_text"}
LAYER = {module: layer for layer, modules in LAYERS.items() for module in modules}
# The layers' names in docs/design.md's table, in order.
LAYER_NAMES = ["values", "signatures", "argument walk", "adapters", "diagnosis", "probe", "log", "lifecycle",
               "session", "views", "glue"]


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts)
        name = "_adapters" if name == "_adapters.__init__" else name
        out[name] = path
        if name.split(".")[0] in FOLDER_LAYERS:
            LAYER[name] = FOLDER_LAYERS[name.split(".")[0]]
    return out


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """The package modules `name` imports (relative imports resolved)."""
    package_parts = name.split(".")[:-1] if name != "_adapters" else ["_adapters"]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package_parts[:len(package_parts) - (node.level - 1)] if node.level > 1 else package_parts
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module:
                found.add(target)
            else:  # from . import a, b
                found.update(".".join(base + [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxtrace_nb."):
            found.add(node.module.removeprefix("jaxtrace_nb."))
    modules = _modules()
    return {m for m in found if m in modules and m != name}


def test_every_module_has_a_layer():
    assert sorted(set(_modules()) - set(LAYER)) == []


def test_imports_run_down_the_layers():
    wrong = [(name, target) for name, path in _modules().items() for target in _imports(name, path)
             if LAYER.get(target, -1) > LAYER.get(name, 99)]
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    graph = {name: _imports(name, path) for name, path in _modules().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack + [target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_importing_the_package_imports_no_jax():
    code = "import sys, jaxtrace_nb; print(sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_jax_internals_are_named_only_in_the_probe():
    named = {name for name, path in _modules().items() if "jax._src" in path.read_text()}
    assert sorted(named - READS_JAX_INTERNALS) == []


def test_the_design_docs_layer_table_is_this_tests():
    """docs/design.md's table of layers names the modules `LAYERS` gives each layer (a folder of
    `FOLDER_LAYERS` as `folder/*`), in the same order."""
    import re

    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    table = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    documented = {name.strip(): set(re.findall(r"`([^`]+)`", modules)) for name, modules in rows[1:]}
    assert list(documented) == LAYER_NAMES
    modules = set(_modules())
    for layer, name in enumerate(LAYER_NAMES):
        expected = {m for m in LAYERS[layer] if m != "__main__"}
        expected |= {f"{folder}/*" for folder, at in FOLDER_LAYERS.items() if at == layer}
        listed = {m for m in documented[name] if m in modules or m.endswith("/*")}
        assert listed == expected, name
