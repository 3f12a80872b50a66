"""The package's shape, counted from its source with `ast` (issue 44's before / after figures).

    python benchmarks/structure.py                 # print the counts for jaxtrace_nb/
    python benchmarks/structure.py --out FILE      # and write them to FILE

Counts, each with where it comes from:

- records built by position: calls of a class the package defines (or ``tuple.__new__(Class,
  (...))``) with four or more positional arguments, and with six or more;
- integer subscripts: ``x[1]``, ``x[-2]`` and deeper (any integer constant other than 0 and -1),
  and, apart, ``x[0]`` and ``x[-1]``;
- string comparisons of a cause or a kind: ``==``, ``!=``, ``in`` and ``not in`` against a string
  constant that is a value of `Cause`, `JitKind`, `Origin` or an event kind (``"trace"``,
  ``"compile"``, ...), or a tuple / set of them;
- modules per folder;
- the longest chain of package imports (module level or inside functions, as
  ``tests/test_imports.py`` reads them), with the chain itself;
- lines over 100 characters, as a share of all lines.
"""

from __future__ import annotations

import argparse
import ast
import collections
import functools
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaxtrace_nb"
EVENT_KINDS = {"trace", "compile", "lower", "cache_hit", "first_call"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, tuple[pathlib.Path, ast.Module]]:
    return {
        _module_name(p): (p, ast.parse(p.read_text(encoding="utf-8")))
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def _vocabulary() -> set[str]:
    sys.path.insert(0, str(ROOT))
    from jaxtrace_nb._core._vocabulary import Cause, JitKind, Origin

    return {m.value for enum in (Cause, JitKind, Origin) for m in enum} | EVENT_KINDS


def _classes(trees) -> set[str]:
    return {
        node.name
        for _, tree in trees.values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }


def _callee(node: ast.Call) -> str | None:
    func = node.func
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else None
    )


def positional_records(trees, classes: set[str], least: int = 4) -> collections.Counter:
    found = collections.Counter()
    for name, (_, tree) in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = _callee(node)
            if callee in classes and len(node.args) >= least:
                found[name] += 1
            elif (
                callee == "__new__"
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "tuple"
                and len(node.args) == 2
                and isinstance(node.args[1], ast.Tuple)
                and len(node.args[1].elts) >= least
            ):
                found[name] += 1
    return found


def _integer(node) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _integer(node.operand)
        return -inner if inner is not None else None
    return None


def integer_subscripts(trees) -> tuple[collections.Counter, collections.Counter]:
    deep, ends = collections.Counter(), collections.Counter()
    for name, (_, tree) in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript):
                index = _integer(node.slice)
                if index is not None:
                    (ends if index in (0, -1) else deep)[name] += 1
    return deep, ends


def _strings(node) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        return [s for e in node.elts for s in _strings(e)]
    return []


def string_comparisons(trees, vocabulary: set[str]) -> collections.Counter:
    found = collections.Counter()
    for name, (_, tree) in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
            ):
                strings = [s for side in [node.left, *node.comparators] for s in _strings(side)]
                if strings and any(s in vocabulary for s in strings):
                    found[name] += 1
    return found


def imports(trees) -> dict[str, set[str]]:
    """Each module's package imports, relative ones resolved (a name imported from a package that
    is a module of it counts as that module)."""
    graph = {}
    for name, (path, tree) in trees.items():
        package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
        if name == "__init__":
            package = []
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{module}.{alias.name}" if module else alias.name
                    targets.add(sub if sub in trees else module)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxtrace_nb"):
                targets.add(node.module.removeprefix("jaxtrace_nb").lstrip(".") or "__init__")
            elif isinstance(node, ast.Import):
                targets |= {
                    a.name.removeprefix("jaxtrace_nb.")
                    for a in node.names
                    if a.name.startswith("jaxtrace_nb.")
                }
        graph[name] = {t for t in targets if t in trees and t != name}
    return graph


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path of imports (the graph has no cycle: tests/test_imports.py)."""

    @functools.lru_cache(maxsize=None)
    def chain(module: str) -> tuple[str, ...]:
        below = [chain(t) for t in graph[module]]
        return (module, *max(below, key=len, default=()))

    return list(max((chain(m) for m in graph), key=len))


def long_lines() -> tuple[int, int]:
    total = over = 0
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            total += 1
            over += len(line) > 100
    return over, total


def report() -> str:
    trees = _sources()
    records = positional_records(trees, _classes(trees))
    records6 = positional_records(trees, _classes(trees), 6)
    deep, ends = integer_subscripts(trees)
    compared = string_comparisons(trees, _vocabulary())
    folders = collections.Counter(str(p.parent.relative_to(ROOT)) for p, _ in trees.values())
    chain = longest_chain(imports(trees))
    over, total = long_lines()

    def top(counter: collections.Counter) -> str:
        return ", ".join(f"{m} {n}" for m, n in counter.most_common(6))

    lines = [
        f"modules: {len(trees)}",
        f"records built by position (>= 4 positional arguments): {sum(records.values())}  "
        f"[{top(records)}]",
        f"records built by position (>= 6 positional arguments): {sum(records6.values())}",
        f"integer subscripts other than [0] and [-1]: {sum(deep.values())}  [{top(deep)}]",
        f"integer subscripts [0] and [-1]: {sum(ends.values())}",
        f"string comparisons of a cause or a kind: {sum(compared.values())} in {len(compared)} "
        "modules  "
        f"[{top(compared)}]",
        "modules per folder: " + ", ".join(f"{f} {n}" for f, n in sorted(folders.items())),
        f"longest import chain: {len(chain)} modules: {' -> '.join(chain)}",
        f"lines over 100 characters: {over} of {total} ({100 * over / total:.1f} %)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the counts here")
    args = parser.parse_args()
    text = report()
    print(text)
    if args.out:
        import subprocess

        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip()
            or "?"
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "jaxtrace_nb"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
        header = (
            "# python benchmarks/structure.py, package at commit "
            f"{commit}{' (modified)' if dirty else ''}\n"
        )
        pathlib.Path(args.out).write_text(header + text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
