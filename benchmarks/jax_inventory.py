"""An inventory of the JAX internals jaxtrace_nb observes, per JAX version (issue 11).

jaxtrace_nb observes JAX without wrapping any call: it hooks ``test_event`` where JAX
starts a real trace and reads locals of the frames that record JAX's
``jax.monitoring`` durations. Whether that is right depends on facts about JAX's
source that change from release to release. This module lists those facts for one
source tree, from its syntax tree only (JAX is never imported):

``test_event``
    every ``test_event(...)`` / ``util.test_event(...)`` call in ``jax/_src``: file,
    enclosing function, event name; for the events the probe hooks
    (:data:`HOOKED_EVENTS`) also the parameter and local names of the enclosing function
    (the hook reads ``fun``, ``in_avals``, ``debug_info`` from that frame).
``trace_to_jaxpr``
    every call site of ``trace_to_jaxpr`` / ``trace_to_jaxpr_nocache`` (and, for JAX
    0.8.x, ``_create_pjit_jaxpr``) in ``jax/_src`` and ``jax/experimental``: file,
    enclosing function, calling convention (positional count, keyword names, ``*`` /
    ``**`` splats), the debug-info argument and, where it is visible nearby, the
    ``traced_for`` kind it carries (best effort; ``None`` when not visible).
``log_elapsed_time``
    every ``log_elapsed_time(..., event=...)`` call: file, enclosing function, the event
    expression, and the parameter and local names of the enclosing function (the
    ``jax.monitoring`` listeners read some of them).

A call site is keyed by (file, enclosing function qualname, occurrence index of that
callee within the function, calling convention), never by line number: line numbers
churn with every unrelated edit. Qualnames follow Python's ``__qualname__``
(``outer.<locals>.inner``, ``Class.method``, ``<module>``); comprehensions are not
scopes here, so keys do not depend on the Python version.

Regenerate ``tests/jax_inventory_data.py`` (from the repository root; only the standard
library is needed, but the Python must parse the newest source: JAX 0.11+ uses 3.12
syntax, so use Python >= 3.12 for those tags)::

    python3.12 -m benchmarks.jax_inventory --fresh --git-dir /path/to/jax/.git --tags \\
        jax-v0.8.0 jax-v0.8.1 jax-v0.8.2 jax-v0.8.3 jax-v0.9.0 jax-v0.9.0.1 jax-v0.9.1 \\
        jax-v0.9.2 jax-v0.10.0 jax-v0.10.1 jax-v0.10.2 jax-v0.11.0 HEAD
    python -m benchmarks.jax_inventory --src /path/to/site-packages   # add one tree

Entries are keyed by ``_version`` in ``jax/version.py``. Each run merges into the
existing data module (the versions it extracts are replaced); ``--fresh`` starts from an
empty one. The output is deterministic: the same sources give the same bytes, whatever
the Python version (checked for 3.11 and 3.12).

Where the logic lives: here, and only here. ``tests/test_jax_inventory.py`` (compare
the installed JAX with the data module) and ``tests/test_call_sites.py`` (map running
frames to sites) load this file by path, because pytest puts ``tests/``, not the
repository root, on ``sys.path``; the data module holds names, never JAX code.
"""

from __future__ import annotations

import argparse
import ast
import pathlib
import pprint
import re
import subprocess
import sys

#: test_event names whose frames jaxtrace_nb reads (0.9+: partial_eval; 0.8.x: pjit).
HOOKED_EVENTS = ("trace_to_jaxpr", "create_pjit_jaxpr", "pjit._infer_params_impl")
#: Callees whose call sites are listed under "trace_to_jaxpr".
TRACE_CALLEES = ("trace_to_jaxpr", "trace_to_jaxpr_nocache", "_create_pjit_jaxpr")
#: Module aliases through which those callees are called (besides a bare name).
TRACE_MODULES = ("pe", "partial_eval", "pjit")
#: Folders scanned, relative to the root holding the ``jax`` package.
SCANNED = {
    "test_event": ("jax/_src/",),
    "trace_to_jaxpr": ("jax/_src/", "jax/experimental/"),
    "log_elapsed_time": ("jax/_src/", "jax/experimental/"),
}
#: Names of functions or classes that build a DebugInfo from a ``traced_for`` literal.
_DEBUG_INFO_BUILDERS = ("debug_info", "DebugInfo", "_debug_info", "tracing_debug_info")
#: A file is parsed only if it has text that may be one of the calls listed (a fast filter).
_NEEDLE = re.compile(r"\b(?:test_event|log_elapsed_time|%s)\s*\(" % "|".join(TRACE_CALLEES))
DATA_MODULE = pathlib.Path(__file__).resolve().parent.parent / "tests" / "jax_inventory_data.py"
KINDS = ("test_event", "trace_to_jaxpr", "log_elapsed_time")


# ---------------------------------------------------------------------------------------
# Reading a source tree


def read_tree(root) -> dict[str, str]:
    """``{relative path: source}`` of ``jax/version.py`` and every ``.py`` under the scanned
    folders of ``root`` (the directory holding the ``jax`` package, e.g. site-packages)."""
    root = pathlib.Path(root)
    files = {"jax/version.py": (root / "jax" / "version.py").read_text(encoding="utf-8")}
    for folder in sorted({f for fs in SCANNED.values() for f in fs}):
        for path in sorted((root / folder).rglob("*.py")):
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return files


def read_git(git_dir, rev: str) -> dict[str, str]:
    """Like :func:`read_tree`, for revision ``rev`` of a (bare) git repository."""
    git = ["git", f"--git-dir={git_dir}"]
    folders = sorted({f for fs in SCANNED.values() for f in fs})
    names = (
        subprocess.run(
            [*git, "ls-tree", "-r", "-z", "--name-only", rev, "--", *folders],
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    paths = ["jax/version.py", *sorted(n for n in names if n.endswith(".py"))]
    batch = subprocess.run(
        [*git, "cat-file", "--batch"],
        check=True,
        capture_output=True,
        input="".join(f"{rev}:{p}\n" for p in paths).encode(),
    ).stdout
    files, pos = {}, 0
    for path in paths:
        header_end = batch.index(b"\n", pos)
        _, kind, size = batch[pos:header_end].decode().split()
        if kind != "blob":
            raise ValueError(f"{rev}:{path} is a {kind}, not a file")
        start = header_end + 1
        files[path] = batch[start : start + int(size)].decode("utf-8")
        pos = start + int(size) + 1
    return files


def _commit(git_dir, rev: str) -> str:
    args = ["git", f"--git-dir={git_dir}", "rev-parse", "--short=12", f"{rev}^{{commit}}"]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()


def version_of(files: dict[str, str]) -> str:
    """The ``_version`` string assigned in ``jax/version.py``."""
    for node in ast.parse(files["jax/version.py"]).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == "_version"
        ):
            return ast.literal_eval(node.value)
    raise ValueError("jax/version.py assigns no _version")


# ---------------------------------------------------------------------------------------
# Scopes, names and calls


def _callee(call: ast.Call) -> tuple[str | None, str | None]:
    """(module alias or None, name) for ``name(...)``, ``alias.name(...)`` and
    ``a.b.alias.name(...)`` (the alias is the last component before the name)."""
    f = call.func
    if isinstance(f, ast.Name):
        return None, f.id
    if isinstance(f, ast.Attribute):
        base = f.value
        if isinstance(base, ast.Name):
            return base.id, f.attr
        if isinstance(base, ast.Attribute):
            return base.attr, f.attr
    return None, None


def _params(fn) -> list[str]:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return []
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return names


def _own_nodes(scope):
    """Nodes of ``scope``'s body that belong to it (nested defs, classes, lambdas excluded,
    but their names, decorators and defaults included; comprehensions included)."""
    stack = list(scope.body) if not isinstance(scope, ast.Lambda) else [scope.body]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            stack.extend(getattr(node, "decorator_list", ()))
            continue
        if isinstance(node, ast.ClassDef):
            stack.extend(node.decorator_list)
            stack.extend(node.bases)
            stack.extend(k.value for k in node.keywords)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _locals(scope) -> list[str]:
    """Names bound in ``scope`` itself, parameters excluded (Python's local-variable rule)."""
    bound, declared = set(), set()
    comp_targets = set()
    for node in _own_nodes(scope):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.comprehension):
            comp_targets.update(id(n) for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.NamedExpr):
            bound.add(node.target.id)
    for node in _own_nodes(scope):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, (ast.Store, ast.Del))
            and id(node) not in comp_targets
        ):
            bound.add(node.id)
    return sorted(bound - declared - set(_params(scope)))


class _Scopes(ast.NodeVisitor):
    """Every call with its enclosing scope (qualname and node), in source order."""

    def __init__(self):
        self.calls: list[tuple[ast.Call, str, ast.AST]] = []
        self.functions: dict[str, list[ast.AST]] = {}  # plain name -> definitions in this file
        self._stack: list[tuple[str, ast.AST, bool]] = []  # (qualname, node, is_function)
        self.parent: dict[int, ast.AST | None] = {}  # id(scope) -> enclosing scope (None: module)

    def _qualname(self, name: str) -> str:
        if not self._stack:
            return name
        parent, _, is_function = self._stack[-1]
        return f"{parent}.<locals>.{name}" if is_function else f"{parent}.{name}"

    def _enter(self, node, name, is_function):
        self.parent[id(node)] = self._stack[-1][1] if self._stack else None
        self._stack.append((self._qualname(name), node, is_function))
        if is_function and name != "<lambda>":
            self.functions.setdefault(name, []).append(node)
        if isinstance(node, ast.Lambda):
            self.visit(node.body)
        else:
            for child in node.body:
                self.visit(child)
        self._stack.pop()

    def _outer_parts(self, node):
        for part in (*getattr(node, "decorator_list", ()), *getattr(node, "bases", ())):
            self.visit(part)
        if hasattr(node, "args"):
            for d in (*node.args.defaults, *node.args.kw_defaults):
                if d is not None:
                    self.visit(d)

    def visit_FunctionDef(self, node):
        self._outer_parts(node)
        self._enter(node, node.name, True)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self._outer_parts(node)
        self._enter(node, "<lambda>", True)

    def visit_ClassDef(self, node):
        self._outer_parts(node)
        for k in node.keywords:
            self.visit(k)
        self._enter(node, node.name, False)

    def visit_Call(self, node):
        qualname, scope, _ = self._stack[-1] if self._stack else ("<module>", None, True)
        self.calls.append((node, qualname, scope))
        self.generic_visit(node)


# ---------------------------------------------------------------------------------------
# traced_for, best effort


def _kinds_of(expr, scope, scopes: _Scopes, depth: int = 0) -> set[str]:
    """``traced_for`` literals a debug-info expression can carry, as far as visible."""
    if expr is None or depth > 6:
        return set()
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        return _kinds_of(expr.body, scope, scopes, depth + 1) | _kinds_of(
            expr.orelse, scope, scopes, depth + 1
        )
    if isinstance(expr, ast.Call):
        _, name = _callee(expr)
        if name in _DEBUG_INFO_BUILDERS:  # debug_info("scan", ...), api_util.debug_info(...)
            arg = next(
                (k.value for k in expr.keywords if k.arg == "traced_for"),
                expr.args[0] if expr.args else None,
            )
            return _kinds_of(arg, scope, scopes, depth + 1)
        if isinstance(expr.func, ast.Attribute):  # dbg._replace(...), dbg.with_unknown_names()
            kw = next((k.value for k in expr.keywords if k.arg == "traced_for"), None)
            if kw is not None:
                return _kinds_of(kw, scope, scopes, depth + 1)
            return _kinds_of(expr.func.value, scope, scopes, depth + 1)
        if isinstance(expr.func, ast.Name):  # dbg_fn() with dbg_fn = lambda: debug_info(...)
            return _kinds_of(expr.func, scope, scopes, depth + 1)
        return set()
    if isinstance(expr, ast.Lambda):
        return _kinds_of(expr.body, expr, scopes, depth + 1)
    if isinstance(expr, ast.Name):
        while scope is not None and not isinstance(scope, ast.Module):
            if expr.id in _params(scope):
                return _kinds_from_callers(scope, expr.id, scopes, depth + 1)
            if expr.id in _locals(scope):
                return _kinds_of_assigned(expr.id, scope, scopes, depth)
            scope = scopes.parent.get(id(scope))  # a free variable: the enclosing function's
            while isinstance(scope, ast.ClassDef):
                scope = scopes.parent.get(id(scope))
    return set()


def _kinds_of_assigned(name: str, scope, scopes: _Scopes, depth: int) -> set[str]:
    kinds = set()
    for node in _own_nodes(scope):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            kinds |= _kinds_of(node.value, scope, scopes, depth + 1)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
        ):
            kinds |= _kinds_of(node.value, scope, scopes, depth + 1)
    return kinds


def _kinds_from_callers(fn, param: str, scopes: _Scopes, depth: int) -> set[str]:
    """The kinds callers in the same file pass for parameter ``param`` of ``fn``."""
    if isinstance(fn, ast.Lambda):
        return set()
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    kinds = set()
    for call, _, caller in scopes.calls:
        if _callee(call)[1] != fn.name:
            continue
        arg = next((k.value for k in call.keywords if k.arg == param), None)
        if arg is None and param in positional:
            i = positional.index(param)
            if i < len(call.args) and not any(
                isinstance(a, ast.Starred) for a in call.args[: i + 1]
            ):
                arg = call.args[i]
        kinds |= _kinds_of(arg, caller, scopes, depth)
    return kinds


# ---------------------------------------------------------------------------------------
# Extraction


def _convention(call: ast.Call) -> dict:
    return {
        "positional": sum(not isinstance(a, ast.Starred) for a in call.args),
        "keywords": tuple(k.arg for k in call.keywords if k.arg is not None),
        "star_args": any(isinstance(a, ast.Starred) for a in call.args),
        "star_kwargs": any(k.arg is None for k in call.keywords),
    }


def _debug_arg(call: ast.Call, callee: str):
    """The debug-info argument: keyword ``debug_info``/``dbg``, else the third positional
    (``trace_to_jaxpr(fun, in_avals, debug_info, ...)``); None for ``_create_pjit_jaxpr``."""
    kw = next((k.value for k in call.keywords if k.arg in ("debug_info", "dbg")), None)
    if kw is not None or callee == "_create_pjit_jaxpr":
        return kw
    plain = [a for a in call.args if not isinstance(a, ast.Starred)]
    return plain[2] if len(plain) >= 3 and len(plain) == len(call.args) else None


def _in_scope(path: str, kind: str) -> bool:
    return path.startswith(SCANNED[kind])


def extract(files: dict[str, str], *, lines: bool = False) -> dict[str, list[dict]]:
    """The inventory entry of one source tree (``{relative path: source}``).

    Returns ``{"test_event": [...], "trace_to_jaxpr": [...], "log_elapsed_time": [...]}``,
    each a sorted list of plain dicts. With ``lines``, each record also carries
    ``"lines": (first, last)`` of its call, for tests that map a running frame to its site;
    the data module never stores lines.
    """
    out = {kind: [] for kind in KINDS}
    for path in sorted(files):
        if not path.endswith(".py") or not _NEEDLE.search(files[path]):
            continue
        if not any(_in_scope(path, kind) for kind in KINDS):
            continue
        try:
            tree = ast.parse(files[path], filename=path)
        except SyntaxError as e:
            raise SyntaxError(
                f"{path}:{e.lineno}: Python {sys.version.split()[0]} cannot parse this JAX source "
                f"({e.msg}); run the extraction with the newest Python this JAX supports"
            ) from e
        scopes = _Scopes()
        scopes.visit(tree)
        counters: dict[tuple, int] = {}
        for call, qualname, scope in scopes.calls:
            scope = tree if scope is None else scope
            module, name = _callee(call)
            if name == "test_event" and module in (None, "util") and _in_scope(path, "test_event"):
                kind, callee = "test_event", name
                arg = call.args[0] if call.args else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                record = {
                    "event": arg.value if literal else None,
                    "event_expr": None if literal or arg is None else ast.unparse(arg),
                }
                if record["event"] in HOOKED_EVENTS:
                    record |= {"params": tuple(_params(scope)), "locals": tuple(_locals(scope))}
            elif (
                name in TRACE_CALLEES
                and module in (None, *TRACE_MODULES)
                and _in_scope(path, "trace_to_jaxpr")
            ):
                kind, callee = "trace_to_jaxpr", name
                dbg = _debug_arg(call, name)
                kinds = _kinds_of(dbg, scope, scopes)
                record = {
                    "callee": ast.unparse(call.func),
                    **_convention(call),
                    "debug_info": None if dbg is None else ast.unparse(dbg),
                    "traced_for": "|".join(sorted(kinds)) or None,
                }
            elif name == "log_elapsed_time" and _in_scope(path, "log_elapsed_time"):
                event = next((k.value for k in call.keywords if k.arg == "event"), None)
                if event is None:
                    continue
                kind, callee = "log_elapsed_time", name
                record = {
                    "event": ast.unparse(event),
                    "params": tuple(_params(scope)),
                    "locals": tuple(_locals(scope)),
                }
            else:
                continue
            index = counters.get((kind, qualname, callee), 0)
            counters[(kind, qualname, callee)] = index + 1
            site = {"file": path, "function": qualname, "index": index, **record}
            if lines:
                site["lines"] = (call.lineno, call.end_lineno)
            out[kind].append(site)
    for kind in KINDS:
        out[kind].sort(key=lambda s: (s["file"], s["function"], s["index"], repr(s)))
    return out


def site_key(kind: str, site: dict) -> tuple:
    """(file, function, index, convention) of a site: how the inventory names it."""
    if kind == "trace_to_jaxpr":
        convention = (
            site["callee"],
            site["positional"],
            site["keywords"],
            site["star_args"],
            site["star_kwargs"],
        )
    else:
        convention = (
            site["event"] if kind == "log_elapsed_time" else site["event"] or site["event_expr"],
        )
    return (site["file"], site["function"], site["index"], *convention)


def describe(kind: str, site: dict) -> str:
    """One line naming a site, for messages."""
    if kind == "trace_to_jaxpr":
        args = [f"{site['positional']} positional"] + [f"{k}=" for k in site["keywords"]]
        args += ["*args"] * site["star_args"] + ["**kwargs"] * site["star_kwargs"]
        what = f"{site['callee']}({', '.join(args)}) traced_for={site['traced_for']}"
    else:
        what = f"{kind}({site['event'] or site['event_expr']!s})"
    return f"{site['file']} :: {site['function']} #{site['index']}: {what}"


def compare(expected: dict, actual: dict) -> list[str]:
    """Human-readable differences between two inventory entries (empty when equal)."""
    problems = []
    for kind in KINDS:
        exp = {site_key(kind, s): s for s in expected.get(kind, [])}
        act = {site_key(kind, s): s for s in actual.get(kind, [])}
        for key in sorted(act.keys() - exp.keys(), key=repr):
            problems.append(f"[{kind}] not in the inventory: {describe(kind, act[key])}")
        for key in sorted(exp.keys() - act.keys(), key=repr):
            problems.append(f"[{kind}] no longer exists: {describe(kind, exp[key])}")
        for key in sorted(exp.keys() & act.keys(), key=repr):
            if exp[key] != act[key]:
                fields = sorted(
                    f
                    for f in exp[key].keys() | act[key].keys()
                    if exp[key].get(f) != act[key].get(f)
                )
                changes = "; ".join(
                    f"{f}: {exp[key].get(f)!r} -> {act[key].get(f)!r}" for f in fields
                )
                problems.append(f"[{kind}] changed: {describe(kind, exp[key])}: {changes}")
    return problems


# ---------------------------------------------------------------------------------------
# The data module


def _version_key(v: str):
    return tuple(int(p) if p.isdigit() else p for p in v.split("."))


def _render_site(site: dict, indent: str, width: int = 100) -> str:
    """One site as a dict literal, its fields packed greedily into lines of ``width``."""
    lines, line = [], "{"
    for i, (key, value) in enumerate(site.items()):
        piece = f"{key!r}: {value!r}" + ("," if i < len(site) - 1 else "}")
        if len(indent) + len(line) + len(piece) + 1 > width and line.strip("{ "):
            lines.append(line.rstrip())
            line = " "
        if len(indent) + len(line) + len(piece) > width and isinstance(value, tuple):
            head = f"{line}{key!r}: "
            body = pprint.pformat(value, width=width - len(indent) - len(head), compact=True)
            tail = piece[len(f"{key!r}: {value!r}") :]  # "," or "}"
            piece = body.replace("\n", "\n" + indent + " " * len(head)) + tail
            lines.append(head + piece)
            line = " "
            continue
        line += piece + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(indent + text for text in lines) + ","


def render(inventory: dict[str, dict], sources: dict[str, str]) -> str:
    """The text of ``tests/jax_inventory_data.py``: one record per line, sorted."""
    out = [
        '"""JAX call sites jaxtrace_nb depends on, per JAX version (generated; do not edit).',
        "",
        "Regenerate from the repository root with (see benchmarks/jax_inventory.py; JAX 0.11+",
        "needs Python >= 3.12 to parse):",
        "",
        "    python3.12 -m benchmarks.jax_inventory --fresh --git-dir JAX_GIT_DIR --tags "
        "jax-v0.8.0 ... HEAD",
        "    python -m benchmarks.jax_inventory --src DIR_HOLDING_THE_jax_PACKAGE",
        "",
        "Sources: "
        + ", ".join(f"{v} <- {sources.get(v, '?')}" for v in sorted(inventory, key=_version_key)),
        '"""',
        "",
        "SOURCES = "
        + pprint.pformat(
            dict(sorted(sources.items(), key=lambda kv: _version_key(kv[0]))),
            width=100,
            sort_dicts=False,
        ),
        "",
        "INVENTORY = {",
    ]
    for version in sorted(inventory, key=_version_key):
        out.append(f"    {version!r}: {{")
        for kind in KINDS:
            out.append(f"        {kind!r}: [")
            for site in inventory[version][kind]:
                out.append(_render_site(site, indent=" " * 12))
            out.append("        ],")
        out.append("    },")
    out.append("}")
    return "\n".join(out) + "\n"


def load_data(path=DATA_MODULE) -> tuple[dict, dict]:
    """(INVENTORY, SOURCES) of an existing data module, without importing it."""
    path = pathlib.Path(path)
    if not path.exists():
        return {}, {}
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    return namespace.get("INVENTORY", {}), namespace.get("SOURCES", {})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", help="a JAX git directory (bare is fine)")
    parser.add_argument(
        "--tags", nargs="+", default=[], help="revisions to extract (with --git-dir)"
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        help="a directory holding the jax package (repeatable)",
    )
    parser.add_argument("--out", default=str(DATA_MODULE), help="the data module to write")
    parser.add_argument("--fresh", action="store_true", help="drop versions already in --out")
    args = parser.parse_args(argv)
    if args.tags and not args.git_dir:
        parser.error("--tags needs --git-dir")
    if not args.tags and not args.src:
        parser.error("nothing to extract: give --git-dir with --tags, or --src")

    inventory, sources = ({}, {}) if args.fresh else load_data(args.out)
    trees = [
        (f"git {rev} ({_commit(args.git_dir, rev)})", lambda rev=rev: read_git(args.git_dir, rev))
        for rev in args.tags
    ]
    trees += [(f"src {pathlib.Path(s).name}", lambda s=s: read_tree(s)) for s in args.src]
    for label, read in trees:
        files = read()
        version = version_of(files)
        inventory[version] = extract(files)
        sources[version] = label
        counts = ", ".join(f"{len(inventory[version][k])} {k}" for k in KINDS)
        print(f"{label:>20}  JAX {version:<9} {counts}", file=sys.stderr)
    path = pathlib.Path(args.out)
    path.write_text(render(inventory, sources), encoding="utf-8")
    print(f"wrote {path} ({len(inventory)} versions)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
