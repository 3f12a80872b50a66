"""One thread of jaxtrace_nb's own that runs short jobs in order, off the user's thread.

The line profile of a program is made there while XLA compiles it: XLA's compile releases the
GIL, so on a machine with a core to spare, Python running then costs JAX's own thread nothing,
where the same work at a compile's end adds its whole time to the compile the user waits for
(`docs/performance.md`, "Persistent cache").
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any


class Background:
    """A daemon thread, started at the first job (and again in a forked child, which has none).

    A job starts `delay` seconds after its submission at the earliest: the Python JAX runs between
    a lowering and the XLA compile (the cache key's hashes, the cache's read) releases the GIL in
    short calls, and a thread that took it then would make JAX's thread wait for it. `hurry` starts
    the job waited for now (XLA has begun a compile: the GIL is free for long).
    Jobs must not raise: each contains its own faults. Nothing waits for a job; whoever needs a
    job's result before the thread has made it makes it itself.

    Example::

        profiling = Background("jaxtrace_nb-profile", delay=0.005)
        profiling.submit(print, "made off the user's thread")
    """

    def __init__(self, name: str, delay: float = 0.0):
        self.name = name
        self.delay = delay
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._pid: int | None = None
        self._hurried = threading.Event()

    def submit(self, job: Callable[[Any], None], argument: Any, delay: float | None = None) -> None:
        """Run ``job(argument)`` in the thread, after the jobs submitted before it, `delay` seconds
        from now at the earliest (the thread's own delay if None)."""
        jobs = self._queue
        if jobs is None or self._pid != os.getpid():
            jobs = self._start()
        jobs.put((time.monotonic() + (self.delay if delay is None else delay), job, argument))

    def hurry(self) -> None:
        """Start the job the thread waits for now (or end its `pause`), or the next job if none
        waits."""
        self._hurried.set()

    def pause(self, seconds: float) -> bool:
        """(In a job.) Wait `seconds`, unless hurried meanwhile (True then)."""
        if self._hurried.wait(seconds):
            self._hurried.clear()
            return True
        return False

    def _start(self) -> queue.SimpleQueue:
        with self._lock:
            if self._queue is None or self._pid != os.getpid():
                jobs: queue.SimpleQueue = queue.SimpleQueue()
                self._hurried = threading.Event()  # (a forked child's copy may be set)
                threading.Thread(
                    target=_run, args=(jobs, self._hurried), name=self.name, daemon=True
                ).start()
                self._queue, self._pid = jobs, os.getpid()
            return self._queue


def _run(jobs: queue.SimpleQueue, hurried: threading.Event) -> None:
    while True:
        start, job, argument = jobs.get()
        wait = start - time.monotonic()
        if wait > 0 and hurried.wait(wait):
            hurried.clear()
        job(argument)
