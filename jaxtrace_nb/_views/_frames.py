"""The log as DataFrames: `jt.log()` (one row per event), `jt.summary()` (one row per function),
and their export. pandas is imported only when a frame is built.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._core._missing import number
from .._core._vocabulary import Cause, EventKind
from .._diagnosis._diagnose import CAUSES
from .._log._events import COLUMN_TYPES, COLUMNS, Event


def events_frame(events: Iterable[Event]):
    """A DataFrame with one row per event and the documented dtypes."""
    import pandas as pd

    rows = [e.as_tuple() for e in events]
    df = pd.DataFrame.from_records(rows, columns=list(COLUMNS))
    return _typed(df)


def _typed(df):
    import pandas as pd

    for name, kind in COLUMN_TYPES:
        column = df[name]
        if kind == "datetime":
            df[name] = pd.to_datetime(column, utc=False)
        elif kind == "Int64":
            df[name] = pd.to_numeric(column, errors="coerce").astype("Int64")
        elif kind == "float64":
            df[name] = pd.to_numeric(column, errors="coerce").astype("float64")
        elif kind == "bool":
            df[name] = column.astype(bool)
        elif kind == "boolean":
            df[name] = column.astype("boolean")
        elif kind == "cause":
            df[name] = pd.Categorical(column, categories=list(CAUSES))
        elif kind == "kind":
            df[name] = pd.Categorical(column, categories=[k.value for k in EventKind])
        else:
            if kind == "jit":  # the members' plain strings, as this text column always held
                column = column.map(str, na_action="ignore")
            column = column.astype(object)
            df[name] = column.where(
                column.notna(), None
            )  # missing text is None, whatever pandas inferred
    return df


# The columns of `jt.summary()`, in order (the views' per-function table is
# `_report.TABLE_COLUMNS`).
SUMMARY_FRAME_COLUMNS = (
    "function",
    "location",
    "internal",
    "nested",
    "traces",
    "compiles",
    "trace_s",
    "lower_s",
    "compile_s",
    "total_s",
    "eqns",
    "eqns_total",
    "loop_repeats",
    "cache_hits",
    "cache_saved_s",
    "precompiled_s",
    "last_cause",
    "last_leaf",
    "cells",
    "key",
)


def _add(total: float | None, value) -> float | None:
    """`total` + `value`, where None (nothing recorded yet) + a missing value stays None."""
    value = number(value)
    return total if value is None else (value if total is None else total + value)


def function_row(events: list[Event]) -> dict:
    """Aggregate one function's events (in order) into its summary row.

    Seconds are the sum of what JAX reported, None when it reported none (a trace nested in
    another jit has no seconds of its own); `eqns` and `eqns_total` are those of the
    function's largest trace (top level; sub-jaxprs included).
    """
    first = events[0]
    row = {
        "function": first.function,
        "location": first.location,
        "internal": bool(first.internal),
        "nested": bool(first.nested),
        "traces": 0,
        "compiles": 0,
        "trace_s": None,
        "lower_s": None,
        "compile_s": None,
        "total_s": None,
        "eqns": None,
        "eqns_total": None,
        "loop_repeats": None,
        "cache_hits": 0,
        "cache_saved_s": 0.0,
        "precompiled_s": 0.0,
        "precompiles": 0,
        "last_cause": None,
        "last_leaf": None,
        "cells": "",
        "key": first.key,
        "retraces": 0,
        "leaves": "",
        "tests": (),
    }
    cells: list = []
    tests: dict = {}
    leaves: list = []
    trace, compile_, first_ = EventKind.TRACE, EventKind.COMPILE, Cause.FIRST  # looked up once
    diverged = EventKind.DIVERGENCE
    for e in events:
        if e.kind == diverged:  # not a trace of this process: its group row says it
            continue
        if e.kind == trace:
            row["traces"] += 1
            row["nested"] = row["nested"] and bool(e.nested)
        if e.compile_s is not None or e.kind == compile_:
            row["compiles"] += 1
        for col in ("trace_s", "lower_s", "compile_s"):
            row[col] = _add(row[col], getattr(e, col))
        row["cache_saved_s"] = _add(row["cache_saved_s"], e.cache_saved_s)
        if (
            e.precompiled is True
        ):  # done by `jt.precompile`'s workers, not waited for by the program
            row["precompiles"] += e.kind == compile_ or e.compile_s is not None
            for col in ("trace_s", "lower_s", "compile_s"):
                row["precompiled_s"] = _add(row["precompiled_s"], getattr(e, col))
        for col in ("eqns", "eqns_total", "loop_repeats"):
            value = number(getattr(e, col))
            if value is not None and (row[col] is None or value > row[col]):
                row[col] = int(value)
        if e.cache_hit is True:
            row["cache_hits"] += 1
        if e.cause != first_ or row["last_cause"] is None:
            row["last_cause"], row["last_leaf"] = e.cause, e.leaf
        if e.cause != first_:
            row["retraces"] += 1
        if e.cell is not None and e.cell not in cells:
            cells.append(e.cell)
        if e.leaf and e.leaf not in leaves:
            leaves.append(e.leaf)
        if e.test:
            tests[e.test] = None
    for col in ("trace_s", "lower_s", "compile_s"):
        row["total_s"] = _add(row["total_s"], row[col])
    row["cells"] = ", ".join(str(c) for c in cells)
    row["leaves"] = "\n".join(leaves)
    row["tests"] = tuple(tests)
    return row


def summary_frame(events: Iterable[Event]):
    """One row per function: counts, seconds, equations, last cause and leaf, the cells involved.

    Most total seconds first.
    """
    import pandas as pd

    by_function: dict[str, list[Event]] = {}
    for e in events:
        by_function.setdefault(e.key, []).append(e)
    rows = sorted(
        (function_row(history) for history in by_function.values()),
        key=lambda r: -(r["total_s"] or 0.0),
    )
    df = pd.DataFrame.from_records(
        [tuple(r[c] for c in SUMMARY_FRAME_COLUMNS) for r in rows],
        columns=list(SUMMARY_FRAME_COLUMNS),
    )
    df["last_cause"] = pd.Categorical(df["last_cause"], categories=list(CAUSES))
    for col in ("traces", "compiles", "cache_hits"):
        df[col] = df[col].astype("int64")
    for col in ("eqns", "eqns_total", "loop_repeats"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    for col in ("trace_s", "lower_s", "compile_s", "total_s", "cache_saved_s", "precompiled_s"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("internal", "nested"):
        df[col] = df[col].astype(bool)
    return df


def cache_keys_frame(path: str):
    """The index beside a persistent compilation cache (`_cache_index`), one row per key, oldest
    first: the computation's name, who computed it and when, its last outcome, the readable side
    of its parts, and each part's own hash (``part: <name>``)."""
    import pandas as pd

    from .._cache._cache_index import Reader
    from .._jax._cache_key import CACHE_KEY_COMPONENTS

    reader = Reader(path)
    try:
        keys = reader.keys()
    finally:
        reader.close()
    rows = []
    for name, seen, key in keys:
        facts = key.facts or {}
        devices = facts.get("devices") or {}
        row = {
            "name": name,
            "key": key.key,
            "first_seen": pd.Timestamp(key.first_seen, unit="s", tz="UTC"),
            "last_seen": pd.Timestamp(key.last_seen, unit="s", tz="UTC"),
            "seen": seen,
            "host": key.host,
            "pid": key.pid,
            "function": key.function,
            "location": key.location,
            "outcome": key.outcome,
            "reason": key.reason or None,
            "written": key.written,
            "jax": facts.get("jax"),
            "jaxlib": facts.get("jaxlib"),
            "xla_flags": " ".join(facts.get("xla_flags") or []),
            "devices": devices.get("count"),
            "device_kinds": ", ".join(devices.get("kinds") or {}),
        }
        parts = dict(key.components)
        row.update({f"part: {c}": parts.get(c) for c in CACHE_KEY_COMPONENTS})
        rows.append(row)
    columns = [
        "name",
        "key",
        "first_seen",
        "last_seen",
        "seen",
        "host",
        "pid",
        "function",
        "location",
        "outcome",
        "reason",
        "written",
        "jax",
        "jaxlib",
        "xla_flags",
        "devices",
        "device_kinds",
        *(f"part: {c}" for c in CACHE_KEY_COMPONENTS),
    ]
    df = pd.DataFrame.from_records(rows, columns=columns)
    for column in ("first_seen", "last_seen"):
        df[column] = pd.to_datetime(df[column], utc=True).dt.tz_convert(None)
    return df


def export_frame(df, path: str) -> str:
    """Write `df` to `path` as CSV, Parquet or JSON, chosen by the file's extension."""
    lower = str(path).lower()
    if lower.endswith(".csv"):
        df.to_csv(path, index=False)
    elif lower.endswith(".parquet"):
        out = df.copy()
        for col in out.columns:
            if out[col].dtype == object:
                out[col] = out[col].astype("string")
        out.to_parquet(path, index=False)
    elif lower.endswith(".json"):
        df.to_json(path, orient="records", date_format="iso", indent=1)
    else:
        raise ValueError(f"cannot export to {path!r}: use a .csv, .parquet or .json file name")
    return str(path)
