"""Log scale: `jt.log()`, `jt.summary()`, Parquet and CSV export, and memory per event.

The session's own log is filled with synthetic events copied from events recorded for real
(see `_events`), so the public functions run exactly as a user calls them.
"""

from __future__ import annotations

import functools
import gc
import os
import tempfile
import time
import tracemalloc

TRACEMALLOC_MAX = 100_000  # above this, memory comes from the RSS delta only (tracemalloc is slow)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _timed(fn, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def memory_by_field(events: list) -> dict:
    """Average bytes per event held by each field's own objects, and by the event object itself."""
    import sys

    from jaxtrace_nb._log._events import COLUMNS

    shared = {id(None), id(True), id(False)}
    out = {"(event object)": sum(sys.getsizeof(e) for e in events) / len(events)}
    for name in COLUMNS:
        values = [getattr(e, name) for e in events]
        own = [
            v for v in values if id(v) not in shared and not (isinstance(v, int) and -5 <= v <= 256)
        ]
        out[name] = sum(sys.getsizeof(v) for v in own) / len(events)
    return dict(sorted(((k, round(v, 1)) for k, v in out.items() if v >= 1), key=lambda kv: -kv[1]))


def worker(quick: bool) -> dict:
    """Per log size: seconds of log(), summary(), exports; bytes per event; profiles at the goal
    size."""
    from _events import real_templates, synthetic
    from _stats import profile_top

    import jaxtrace_nb as jt
    from jaxtrace_nb._recording._session import get_session
    from jaxtrace_nb._views._frames import export_frame

    sizes = (1_000, 10_000) if quick else (10_000, 100_000, 1_000_000)
    profile_size = 10_000 if quick else 100_000
    templates = real_templates()
    session = get_session()
    jt.log(), jt.summary()  # import pandas and warm up outside the timings
    results = []
    for n in sizes:
        jt.reset()
        session.log.set_max_events(n)
        gc.collect()
        rss_before = _rss_bytes()
        traced = n <= TRACEMALLOC_MAX
        if traced:
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
        for event in synthetic(templates, n):
            session.log.append(event)
        traced_bytes = tracemalloc.get_traced_memory()[0] - before if traced else None
        if traced:
            tracemalloc.stop()
        gc.collect()
        rss_delta = _rss_bytes() - rss_before
        repeats = 2 if n >= 1_000_000 else 3 if quick else 5
        row = {
            "events": n,
            "repeats": repeats,
            "bytes_per_event_tracemalloc": traced_bytes / n if traced else None,
            "bytes_per_event_rss": rss_delta / n,
            "log_s": _timed(jt.log, repeats),
            "summary_s": _timed(jt.summary, repeats),
        }
        frame = jt.log()
        row["frame_bytes_per_event"] = int(frame.memory_usage(deep=True).sum()) / n
        with tempfile.TemporaryDirectory() as tmp:
            for ext in ("parquet", "csv"):
                path = os.path.join(tmp, f"events.{ext}")
                row[f"{ext}_s"] = _timed(functools.partial(export_frame, frame, path), repeats)
                row[f"{ext}_bytes_per_event"] = os.path.getsize(path) / n
        del frame
        if n == profile_size:
            row["memory_by_field"] = memory_by_field(session.log.events()[:10_000])
            row["profile_log"] = profile_top(jt.log)
            row["profile_summary"] = profile_top(jt.summary)
        results.append(row)
    jt.reset()
    session.log.set_max_events(100_000)
    return {"template_events": len(templates), "sizes": results}
