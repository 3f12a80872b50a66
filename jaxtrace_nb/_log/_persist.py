"""Crash-safe persistence of the log: one JSON line per event change, flushed at once.

A trace is written when it happens and written again, whole, when its compile seconds
or cost arrive, so a kernel killed in the middle of a huge compile has already written
the trace that caused it. :func:`load_events` keeps the last line of each event and
skips a torn last line.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Callable

from .._core._missing import json_value
from ._events import COLUMNS, Event


class JsonlWriter:
    """A log subscriber appending each new or updated event to `path` as one JSON line."""

    def __init__(self, path: str | os.PathLike, on_fault: Callable[[BaseException], None]):
        self.path = os.fspath(path)
        self._on_fault = on_fault
        self._lock = threading.Lock()
        # One token per recording run: event numbers restart with each process.
        self._run = f"{os.getpid():x}-{time.time_ns():x}"
        self._file = open(self.path, "a", encoding="utf-8")

    def __call__(self, event: Event, what: str) -> None:
        try:
            record = {name: json_value(getattr(event, name)) for name in COLUMNS}
            record["run"] = self._run
            line = json.dumps(record, ensure_ascii=True, allow_nan=False) + "\n"
            with self._lock:
                self._file.write(line)
                self._file.flush()
        except Exception as e:
            self._on_fault(e)

    def close(self) -> None:
        with self._lock:
            try:
                self._file.close()
            except Exception:
                pass


def load_events(path: str | os.PathLike) -> list[Event]:
    """Events written by :class:`JsonlWriter`, in the order they first appeared."""
    latest: dict[tuple, dict] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line torn by a crash, or not ours
            if not isinstance(record, dict) or "seq" not in record:
                continue
            key = (record.get("run"), record["seq"])
            if key in latest:
                latest[key].update(record)
            else:
                latest[key] = record
    # One run is one process: events recorded before JAX knew its process index get the run's.
    process_of_run = {
        r.get("run"): r["process"] for r in latest.values() if r.get("process") is not None
    }
    events = []
    for record in latest.values():
        fields = {name: record.get(name) for name in COLUMNS}
        if fields["process"] is None:
            fields["process"] = process_of_run.get(record.get("run"))
        if isinstance(fields["time"], str):
            try:
                fields["time"] = datetime.datetime.fromisoformat(fields["time"])
            except ValueError:
                fields["time"] = None
        events.append(Event(**fields))
    return events
