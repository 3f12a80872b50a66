"""pytest plugin for ``benchmarks/peer_suites.py``: records outcomes, optionally with jaxtrace_nb
on.

Loaded with ``-p benchmarks._peer_plugin`` in both runs of a peer test file. Environment:

    JAXTRACE_PEER_OUT     where to write the JSON result at session end (required)
    JAXTRACE_PEER_RECORD  "1": call ``jaxtrace_nb.start()`` before collection, for the whole
                          session; otherwise jaxtrace_nb is never imported
    JAXTRACE_PEER_SRC     the peer checkout root: modules imported from it are listed in the
                          result (test files, conftest, helpers), so that a run which picked up
                          the checkout's package instead of the installed one shows
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import sys

import pytest

GUARDED = (
    "jax",
    "jaxlib",
    "equinox",
    "optax",
    "flax",
)  # must come from site-packages, never the checkout
RANK = {"skipped": 0, "xfailed": 1, "passed": 2, "xpassed": 3, "failed": 4, "error": 5}

_record = os.environ.get("JAXTRACE_PEER_RECORD") == "1"
_explain = _record and os.environ.get("JAXTRACE_PEER_EXPLAIN") == "1"
_misses: list = []  # [(context manager, its collector)] while JAX explains its cache misses
_src = os.path.realpath(os.environ.get("JAXTRACE_PEER_SRC", "/nonexistent")) + os.sep
_results: dict[str, dict] = {}
_seconds: dict[str, float] = {}  # per test file: setup + call + teardown of its tests


def _note(nodeid: str, outcome: str, report) -> None:
    old = _results.get(nodeid)
    if old is not None and RANK[old["outcome"]] >= RANK[outcome]:
        return
    entry = {"outcome": outcome}
    if outcome in ("failed", "error", "xpassed"):
        crash = getattr(report.longrepr, "reprcrash", None)
        entry["crash"] = (crash.message if crash else "")[:600]
        entry["text"] = (report.longreprtext or "")[:600]
    _results[nodeid] = entry


def pytest_collect_file(file_path, parent):
    # optax keeps its tests inside the package (optax/_src/alias_test.py). Import the
    # enclosing package from site-packages first, so that --import-mode=importlib loads the
    # test file as a submodule of the INSTALLED package instead of importing the checkout's
    # optax/__init__.py.
    parts, d = [], file_path.parent
    while (d / "__init__.py").is_file():
        parts.insert(0, d.name)
        d = d.parent
    if parts and parts[0] in GUARDED:
        with contextlib.suppress(ImportError):
            importlib.import_module(".".join(parts))


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    if _record:
        import jaxtrace_nb

        if _explain:  # JAX's own explanations, tied to our records (tests/_support.py)
            sys.path.insert(
                0,
                os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"),
            )
            from _support import explained_misses

            context = explained_misses()
            _misses.append((context, context.__enter__()))
        jaxtrace_nb.start()


def pytest_collectreport(report):
    if report.failed:
        _note(report.nodeid or "<collection>", "error", report)


def pytest_runtest_logreport(report):
    xfail = hasattr(report, "wasxfail")
    if (
        getattr(report, "context", None) is not None
    ):  # a unittest subTest; its time is in its test's
        if report.failed:
            _note(report.nodeid, "failed", report)
        return
    file = report.nodeid.split("::")[0]
    _seconds[file] = _seconds.get(file, 0.0) + report.duration
    if report.when == "call":
        if report.skipped:
            _note(report.nodeid, "xfailed" if xfail else "skipped", report)
        else:
            _note(report.nodeid, "xpassed" if xfail and report.passed else report.outcome, report)
    elif report.failed:  # setup or teardown
        _note(report.nodeid, "error", report)
    elif report.skipped:  # skipped (or xfail(run=False)) in setup
        _note(report.nodeid, "xfailed" if xfail else "skipped", report)


def _version(dist: str):
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        return importlib.metadata.version(dist)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    result = {
        "record": _record,
        "exitstatus": int(exitstatus),
        "interrupted": bool(session.shouldstop or session.shouldfail) or exitstatus == 2,
        "outcomes": _results,
        "file_seconds": {f: round(t, 1) for f, t in _seconds.items()},
        "versions": {
            d: _version(d)
            for d in ("jax", "jaxlib", "equinox", "optax", "flax", "pytest", "jaxtrace_nb")
        },
        "python": sys.version.split()[0],
        "module_files": {
            m: getattr(sys.modules.get(m), "__file__", None) for m in (*GUARDED, "jaxtrace_nb")
        },
        "checkout_modules": sorted(
            name
            for name, mod in list(sys.modules.items())
            if (getattr(mod, "__file__", None) or "").startswith(_src)
        ),
        "events": None,
        "faults": None,
        "dropped": None,
    }
    if _record:
        import jaxtrace_nb

        log = jaxtrace_nb.log()
        result.update(events=len(log), faults=jaxtrace_nb.faults(), dropped=jaxtrace_nb.dropped())
        with contextlib.suppress(Exception):  # the diagnoses, for the note on causes
            result["causes"] = {
                str(k): int(v) for k, v in log["cause"].value_counts(dropna=False).items()
            }
            odd = log[log["cause"].isna() | (log["cause"] == "unknown")]
            result["unknown_events"] = [
                {k: (None if v != v else v) for k, v in row.items()}
                for row in odd[
                    [
                        "function",
                        "location",
                        "kind",
                        "trace_number",
                        "cause",
                        "explanation",
                        "internal",
                        "nested",
                    ]
                ]
                .head(300)
                .astype(object)
                .to_dict("records")
            ]
        if _misses:
            from jaxtrace_nb._recording._session import get_session

            context, misses = _misses.pop()
            explained = misses.explained(
                [e for e in get_session().log.events() if e.kind == "trace"]
            )
            result["explained"] = len(explained)
            result["disagree"] = [list(d) for d in misses.disagreements(explained)][:200]
            context.__exit__(None, None, None)
        jaxtrace_nb.stop()
    with open(os.environ["JAXTRACE_PEER_OUT"], "w") as f:
        json.dump(result, f, indent=1)
