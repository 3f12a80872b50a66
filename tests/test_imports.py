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
    3: {"_adapters", "_adapters._registry", "_adapters._nnx_graph", "_adapters.pytrees", "_adapters.equinox",
        "_adapters.flax_nnx", "_adapters.optax", "_adapters.diffrax"},
    4: {"_hints", "_diagnosis", "_module_diff", "_cache_words"},
    5: {"_jax_internals", "_decode", "_cost", "_lineprof", "_listeners", "_probe", "_jax_cache_key", "_jax_cache_text"},
    6: {"_log", "_frames", "_cache_index"},
    7: {"_functions", "_drafts", "_lifecycle"},
    8: {"_session", "_self_check", "_persist", "_watch", "_cache_explainer", "_baseline"},
    9: {"_report", "_rows", "_views", "_widget", "_display", "_standalone", "_census", "_timeline", "_where"},
    10: {"_ipython", "_pytest_plugin", "_pytest_results", "_run", "_cli", "__init__", "__main__"},
}
# The only modules that name JAX's internals (``jax._src``): the probe's.
READS_JAX_INTERNALS = {"_jax_layouts", "_jax_internals", "_probe", "_jax_cache_key", "_jax_cache_text"}
LAYER = {module: layer for layer, modules in LAYERS.items() for module in modules}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts)
        out["_adapters" if name == "_adapters.__init__" else name] = path
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
