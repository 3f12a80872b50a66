"""The installed JAX matches the inventory of the JAX internals jaxtrace_nb relies on (issue 11).

`tests/jax_inventory_data.py` lists, per JAX version, every `test_event(...)` call,
every call site of `trace_to_jaxpr` / `trace_to_jaxpr_nocache` / `_create_pjit_jaxpr`
and every `log_elapsed_time(..., event=...)` call, keyed by file, enclosing function,
occurrence and calling convention (see `benchmarks/jax_inventory.py`). This test
extracts the same from the installed JAX's source and requires equality: a JAX whose
internals moved, or a version the inventory lacks, fails here with the list of sites
that appeared, disappeared or changed, before any probe test has to be debugged.

It imports neither jaxtrace_nb nor `_support` (which does), so it still reports JAX's
facts while the probe is broken.
"""

import pathlib

import jax
from _support import inventory_tool
from jax_inventory_data import INVENTORY

REGENERATE = (
    "Regenerate the inventory from the repository root, with a Python that can parse that JAX "
    "(JAX 0.11+ needs >= 3.12):\n"
    "    python -m benchmarks.jax_inventory --git-dir JAX_GIT_DIR --tags jax-v0.8.0 ... HEAD\n"
    "or, for the installed JAX only:\n"
    "    python -m benchmarks.jax_inventory --src {root}\n"
    "then check each changed site against jaxtrace_nb's probe and tests/test_call_sites.py."
)


def test_installed_jax_matches_the_inventory():
    tool = inventory_tool()
    root = pathlib.Path(jax.__file__).resolve().parent.parent
    files = tool.read_tree(root)
    version = tool.version_of(files)
    assert version == jax.__version__, (version, jax.__version__)
    hint = REGENERATE.format(root=root)
    assert version in INVENTORY, (
        f"JAX {version} is not in tests/jax_inventory_data.py (it has {', '.join(INVENTORY)}).\n"
        + hint
    )
    # The inventory comes from git; a wheel leaves out some files (tests, examples, unbuilt
    # modules). Their sites cannot run here, so only shipped files are compared.
    expected = {
        kind: [s for s in sites if s["file"] in files] for kind, sites in INVENTORY[version].items()
    }
    problems = tool.compare(expected, tool.extract(files))
    assert not problems, (
        f"The installed JAX {version} differs from its inventory entry "
        f"({len(problems)} sites):\n  " + "\n  ".join(problems) + "\n" + hint
    )


def test_every_inventoried_version_has_the_points_the_probe_reads():
    """Each version has a hooked test_event whose frame holds `fun`, and the three
    `log_elapsed_time` events whose listeners read frame locals."""
    tool = inventory_tool()
    for version, entry in INVENTORY.items():
        hooked = [s for s in entry["test_event"] if s["event"] in tool.HOOKED_EVENTS]
        assert hooked, version
        assert any("fun" in s["params"] for s in hooked), version
        events = {s["event"] for s in entry["log_elapsed_time"]}
        assert events >= {
            "dispatch.JAXPR_TRACE_EVENT",
            "dispatch.JAXPR_TO_MLIR_MODULE_EVENT",
            "dispatch.BACKEND_COMPILE_EVENT",
        }, (version, events)


def test_compare_names_what_appeared_disappeared_and_changed():
    tool = inventory_tool()
    site = {
        "file": "jax/_src/a.py",
        "function": "f",
        "index": 0,
        "callee": "pe.trace_to_jaxpr",
        "positional": 3,
        "keywords": (),
        "star_args": False,
        "star_kwargs": False,
        "debug_info": "dbg",
        "traced_for": "scan",
    }
    moved = dict(site, function="g")
    retyped = dict(site, traced_for="while_body")
    old, new = {"trace_to_jaxpr": [site]}, {"trace_to_jaxpr": [moved]}
    assert tool.compare(old, old) == []
    assert tool.compare(old, new) == [
        "[trace_to_jaxpr] not in the inventory: jax/_src/a.py :: g #0: "
        "pe.trace_to_jaxpr(3 positional) traced_for=scan",
        "[trace_to_jaxpr] no longer exists: jax/_src/a.py :: f #0: "
        "pe.trace_to_jaxpr(3 positional) traced_for=scan",
    ]
    assert tool.compare(old, {"trace_to_jaxpr": [retyped]}) == [
        "[trace_to_jaxpr] changed: jax/_src/a.py :: f #0: pe.trace_to_jaxpr(3 positional) "
        "traced_for=scan: traced_for: 'scan' -> 'while_body'"
    ]


SAMPLE = """
from jax._src import dispatch, util
from jax._src.api_util import debug_info
from jax._src.interpreters import partial_eval as pe

def outer(f, avals, args, kw):
    dbg = debug_info("scan", f, (), {})
    def inner():
        return pe.trace_to_jaxpr(f, avals, dbg)
    pe.trace_to_jaxpr(f, avals, debug_info=dbg.with_unknown_names())
    [pe.trace_to_jaxpr(*args, **kw) for _ in range(2)]
    return inner

class Tracer:
    def trace(self, fun, in_avals, debug_info):
        util.test_event("trace_to_jaxpr")
        util.test_event("other")
        jaxpr = None
        with dispatch.log_elapsed_time("{f}", fun_name="f", event=dispatch.JAXPR_TRACE_EVENT):
            jaxpr = fun(*in_avals)
        return jaxpr
"""


def test_extract_reads_scopes_conventions_and_kinds():
    tool = inventory_tool()
    entry = tool.extract({"jax/version.py": '_version = "9.9.9"\n', "jax/_src/m.py": SAMPLE})
    common = {"file": "jax/_src/m.py", "callee": "pe.trace_to_jaxpr"}
    assert entry["trace_to_jaxpr"] == [
        {
            **common,
            "function": "outer",
            "index": 0,
            "positional": 2,
            "keywords": ("debug_info",),
            "star_args": False,
            "star_kwargs": False,
            "debug_info": "dbg.with_unknown_names()",
            "traced_for": "scan",
        },
        {
            **common,
            "function": "outer",
            "index": 1,
            "positional": 0,
            "keywords": (),
            "star_args": True,
            "star_kwargs": True,
            "debug_info": None,
            "traced_for": None,
        },
        {
            **common,
            "function": "outer.<locals>.inner",
            "index": 0,
            "positional": 3,
            "keywords": (),
            "star_args": False,
            "star_kwargs": False,
            "debug_info": "dbg",
            "traced_for": "scan",
        },
    ]
    assert entry["test_event"] == [
        {
            "file": "jax/_src/m.py",
            "function": "Tracer.trace",
            "index": 0,
            "event": "trace_to_jaxpr",
            "event_expr": None,
            "params": ("self", "fun", "in_avals", "debug_info"),
            "locals": ("jaxpr",),
        },
        {
            "file": "jax/_src/m.py",
            "function": "Tracer.trace",
            "index": 1,
            "event": "other",
            "event_expr": None,
        },
    ]
    assert entry["log_elapsed_time"] == [
        {
            "file": "jax/_src/m.py",
            "function": "Tracer.trace",
            "index": 0,
            "event": "dispatch.JAXPR_TRACE_EVENT",
            "params": ("self", "fun", "in_avals", "debug_info"),
            "locals": ("jaxpr",),
        },
    ]
