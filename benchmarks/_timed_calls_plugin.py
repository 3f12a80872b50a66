"""pytest plugin for ``benchmarks/timed_calls.py``: what jaxtrace_nb's own threads do while a peer
test times a call.

Every ``timeit.Timer.timeit`` call (``timeit.timeit`` and each round of ``timeit.repeat`` go
through it) becomes a row: the test, the seconds it returned, and the CPU seconds each thread
named ``jaxtrace_nb…`` used meanwhile (``time.pthread_getcpuclockid``, Linux). A thread waiting
for the GIL or sleeping uses none, so a row with 0 says that none of our threads ran Python (or
anything else) during that timing. Written to ``TIMED_CALLS_OUT`` (JSON) at session end (not
``JAXTRACE_…``: `peer_suites.run_pytest` passes no such variable on).
"""

from __future__ import annotations

import json
import os
import threading
import time
import timeit

_rows: list[dict] = []
_original = timeit.Timer.timeit


def _our_threads_cpu() -> dict[str, float]:
    seconds = {}
    for thread in threading.enumerate():
        if thread.name.startswith("jaxtrace_nb") and thread.ident is not None:
            try:
                clock = time.pthread_getcpuclockid(thread.ident)
                seconds[thread.name] = time.clock_gettime(clock)
            except (OSError, AttributeError):  # the thread ended meanwhile; not Linux
                pass
    return seconds


def _timed(self, number=timeit.default_number):
    before = _our_threads_cpu()
    result = _original(self, number)
    after = _our_threads_cpu()
    _rows.append(
        {
            "test": os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0],
            "seconds": result,
            "ours_cpu_s": {name: after[name] - before.get(name, 0.0) for name in after},
        }
    )
    return result


timeit.Timer.timeit = _timed


def pytest_sessionfinish(session):
    threads = _our_threads_cpu()
    with open(os.environ["TIMED_CALLS_OUT"], "w") as f:
        json.dump({"timings": _rows, "ours_cpu_s_whole_session": threads}, f)
