"""Look for every read of JAX's internals (`jaxtrace_nb._jax._reads.READS`) in a JAX source tree.

Porting a JAX release starts here: each read listed for the release's series is looked for in its
source, without installing it (the package registry may not serve it yet). A name must be bound
at the top level of its module (a def, a class, an assignment, an import); a frame's function must
be defined in its module, with each local read a parameter or an assigned name of it.

    python -m benchmarks.jax_reads --git-dir /work/.mirror/jax-ml+jax/repo \\
        --tags jax-v0.8.0 jax-v0.10.2 jax-v0.11.0 --out benchmarks/results/jax-reads-COMMIT.txt
    python -m benchmarks.jax_reads --src DIR_HOLDING_THE_jax_PACKAGE

`tests/test_jax_reads.py` runs the same check on the installed JAX.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import re
import subprocess
import sys
from typing import Callable, NamedTuple

from jaxtrace_nb._jax._reads import READS, Read, ReadKind


class Finding(NamedTuple):
    read: Read
    found: bool
    why: str  # what is missing ('' when found)


def series_of(version: str) -> str:
    """'0.11' of '0.11.0', 'jax-v0.11.0' or '0.11.1.dev20260801'."""
    major, minor = re.findall(r"\d+", version)[:2]
    return f"{major}.{minor}"


def source_version(read_source: Callable[[str], str | None]) -> str:
    """The version a JAX source tree says it is (its ``jax/version.py``)."""
    found = re.search(r'_version(?:: str)? = "([^"]+)"', read_source("jax/version.py") or "")
    return found.group(1) if found else "0.0"


def module_path(module: str) -> tuple[str, str]:
    """The two files a module may be: ``jax/_src/x.py`` or ``jax/_src/x/__init__.py``."""
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()

    def bind(target: ast.AST) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)

    for node in ast.walk(tree):  # module level, and inside its if / try blocks
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            bind(node.target)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


def _function_locals(tree: ast.Module, name: str) -> set[str] | None:
    """The parameters and assigned names of the function `name` (any depth), None if none."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            a = node.args
            found = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
            found.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    found.add(inner.id)
                elif isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found.update((x.asname or x.name).split(".")[0] for x in inner.names)
            return found
    return None


def check(read_source: Callable[[str], str | None], series: str) -> list[Finding]:
    """Each read of `series`, looked for in the source `read_source(path)` gives (None: no file)."""
    parsed: dict[str, ast.Module | None] = {}

    def tree(module: str) -> ast.Module | None:
        if module not in parsed:
            parsed[module] = None
            for path in module_path(module):
                text = read_source(path)
                if text is not None:
                    try:
                        parsed[module] = ast.parse(text)
                    except SyntaxError as e:  # JAX 0.11.1+ is written for Python >= 3.12
                        raise SystemExit(
                            f"{path}: {e.msg} (line {e.lineno}); parse it with a "
                            f"newer Python than {sys.version.split()[0]}"
                        ) from e
                    break
        return parsed[module]

    findings = []
    for read in READS:
        if series not in read.series:
            continue
        module = tree(read.module)
        if module is None:
            findings.append(Finding(read, False, f"no module {read.module}"))
        elif read.kind == ReadKind.FRAME:
            local = _function_locals(module, read.name)
            if local is None:
                findings.append(Finding(read, False, f"no function {read.name}"))
            else:
                missing = [name for name in read.locals if name not in local]
                why = f"{read.name} has no local {', '.join(missing)}" if missing else ""
                findings.append(Finding(read, not missing, why))
        else:
            found = read.name in _top_level_names(module)
            findings.append(Finding(read, found, "" if found else f"no name {read.name}"))
    return findings


def from_directory(root: pathlib.Path) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        file = root / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    return read


def from_git(git_dir: str, tag: str) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        done = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{tag}:{path}"], capture_output=True, text=True
        )
        return done.stdout if done.returncode == 0 else None

    return read


def report(label: str, findings: list[Finding]) -> list[str]:
    found = sum(f.found for f in findings)
    lines = [f"{label}: {found} of {len(findings)} reads found"]
    for f in findings:
        what = f"{f.read.module}.{f.read.name} ({f.read.kind.value}; {f.read.reader})"
        lines.append(f"  {'ok  ' if f.found else 'MISS'} {what}{'' if f.found else ': ' + f.why}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", help="a JAX repository's git directory")
    parser.add_argument("--tags", nargs="*", default=[], help="its tags to read (jax-vX.Y.Z)")
    parser.add_argument("--src", help="a directory holding the jax package")
    parser.add_argument("--series", help="the series to check (default: each source's version.py)")
    parser.add_argument("--out", help="write the report here too")
    args = parser.parse_args(argv)
    lines, missing = [], 0
    sources = [(tag, from_git(args.git_dir, tag)) for tag in args.tags]
    if args.src:
        sources.append((args.src, from_directory(pathlib.Path(args.src))))
    for label, read in sources:
        version = source_version(read)
        series = args.series or series_of(version)
        label = f"{label} (JAX {version})"
        findings = check(read, series)
        missing += sum(not f.found for f in findings)
        lines += report(f"{label}, series {series}", findings)
    text = "\n".join(lines)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(
            f"$ python -m benchmarks.jax_reads {' '.join(argv or sys.argv[1:])}\n{text}\n"
        )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
