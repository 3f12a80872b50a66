"""Widget: building and updating the live trace table's state (Python side) for many events.

Mirrors what `%tracewatch` does in a kernel: a `TraceTable` over an empty `Report` that
follows the session log (`follow`), a live update after a cell (`flush` after one new
event), the static fallback re-rendered for the display update (`_repr_mimebundle_`), and a
click on a column header (a trait change that re-sorts).
"""

from __future__ import annotations

import gc
import importlib.util
import time


def available() -> bool:
    """Whether the widget module exists in this checkout."""
    return importlib.util.find_spec("jaxtrace_nb._widget") is not None


def worker(quick: bool) -> dict:
    """Median-able samples of each step for a log of 10^4 events (10^3 in quick mode)."""
    if not available():
        return {"status": "pending: jaxtrace_nb._widget does not exist yet"}
    from jaxtrace_nb._log import EventLog
    from jaxtrace_nb._views import Report
    from jaxtrace_nb._widget import TraceTable

    from _events import real_templates, synthetic

    n = 1_000 if quick else 10_000
    repeats = 3 if quick else 5
    templates = real_templates()
    samples: dict[str, list[float]] = {"build_and_follow_s": [], "live_update_s": [], "display_update_s": [],
                                       "resort_s": []}
    for _ in range(repeats):
        log = EventLog(max_events=n + 10)
        for event in synthetic(templates, n):
            log.append(event)
        extra = synthetic(templates, 1)[0]
        gc.collect()
        start = time.perf_counter()
        table = TraceTable(Report((), "bench"))
        table.follow(log, 0)
        samples["build_and_follow_s"].append(time.perf_counter() - start)

        start = time.perf_counter()
        log.append(extra)
        table.flush()
        samples["live_update_s"].append(time.perf_counter() - start)

        start = time.perf_counter()
        table._repr_mimebundle_()
        samples["display_update_s"].append(time.perf_counter() - start)

        start = time.perf_counter()
        table.sort_by = "function" if table.sort_by != "function" else "total_s"
        samples["resort_s"].append(time.perf_counter() - start)
        table.close()
    return {"status": "ok", "events": n, "functions": 200, "repeats": repeats} | samples
