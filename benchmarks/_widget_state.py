"""Widget: building and updating the live trace table's state (Python side) for many events.

Mirrors what `%tracewatch` does in a kernel: a `TraceTable` over an empty `Report` that
follows the session log (`follow`), a live update after a cell (`flush` after one new
event), the static report re-rendered for the display update (`static_bundle`), a click on
a column header (`resort_s`: the kernel only records the new order, the browser sorts), and
a click on a function (`history_s`: the kernel builds its grouped history).
"""

from __future__ import annotations

import gc
import time


def worker(quick: bool) -> dict:
    """Median-able samples of each step for a log of 10^4 events (10^3 in quick mode)."""
    from _events import real_templates, synthetic

    from jaxtrace_nb._log._events import EventLog
    from jaxtrace_nb._views._report import Report
    from jaxtrace_nb._views._widget import TraceTable

    n = 1_000 if quick else 10_000
    repeats = 3 if quick else 5
    templates = real_templates()
    samples: dict[str, list[float]] = {
        "build_and_follow_s": [],
        "live_update_s": [],
        "display_update_s": [],
        "resort_s": [],
        "history_s": [],
    }
    functions = 0
    for _ in range(repeats):
        log = EventLog(max_events=n + 10)
        events = list(synthetic(templates, n))
        functions = len({event.key for event in events})
        for event in events:
            log.append(event)
        extra = next(synthetic(templates, 1))
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
        table.static_bundle()
        samples["display_update_s"].append(time.perf_counter() - start)

        start = time.perf_counter()
        table.sort_by = "function" if table.sort_by != "function" else "total_s"
        samples["resort_s"].append(time.perf_counter() - start)

        busiest = max(table.rows, key=lambda r: r["traces"])["key"]
        start = time.perf_counter()
        table.selected = busiest
        samples["history_s"].append(time.perf_counter() - start)
        table.close()
    return {"status": "ok", "events": n, "functions": functions, "repeats": repeats} | samples
