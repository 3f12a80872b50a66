"""The recording session: starts and stops the probe, owns the log and the lifecycle between them.

The probe (the only part that reads JAX) reports to the `Lifecycle`, which turns its records
into events for the `EventLog`; views, watches and the IPython glue read the log. Nothing here
holds a user array, tracer or object, and nothing here imports JAX.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import warnings

from .._cache._cache_explainer import CacheExplainer
from .._core._vocabulary import DivergenceMode
from .._diagnosis._divergence import Finding, event_fields, local_key
from .._keys._key_index import forget as forget_key_indexes
from .._log._events import EventLog
from ._lifecycle import FunctionState, Lifecycle
from ._peers import Peers
from ._probe import Probe
from ._self_check import run_self_check_with

# The notices printed in this process: each once, however often recording starts again
_SAID: set[str] = set()


class JaxtraceWarning(UserWarning):
    """A failure inside jaxtrace_nb (never inside the user's program)."""


class Session:
    """Owns the probe, the log and the trace lifecycle between them; starts and stops recording."""

    def __init__(self):
        self.log = EventLog()
        self.lifecycle = Lifecycle(
            self.log,
            fault=self.fault,
            cell=lambda: self.current_cell,
            place=self._place,
            test=lambda: self.current_test,
        )
        self.probe = Probe(self.lifecycle)
        self.peers = Peers(report=self._diverged, fault=self.fault)
        self.probe.peers = self.peers
        self.cache = CacheExplainer(
            self.log,
            fault=self.fault,
            host=self._hostname,
            place=self._source_place,
            is_library=self._is_library,
        )
        self.lifecycle.cache_keys = self.cache.submit
        self.log.before_read = self.settle  # (its one owner: what the probe and lifecycle hold, in)
        self.current_cell: int | None = None
        self.current_test: str | None = (
            None  # the pytest node id of the test running (the pytest plugin)
        )
        self.notice = ""
        self.untested_ok = (
            False  # record in full on a newer JAX without the self-check (the check itself)
        )
        self.fault_counts: collections.Counter = collections.Counter()
        self._lock = threading.RLock()
        self._users = 0
        self._started = False  # jt.start() holds one use until jt.stop()
        self._persist: tuple | None = None  # (writer, unsubscribe)
        self._where: tuple | None = None  # (host, JAX process index), read at the first event
        self._host: str | None = None
        self.log.on_fault = lambda exc: self.fault("log", exc)

    # ------------------------------------------------------------ lifecycle
    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                try:
                    self.notice = self.probe.install(
                        None if self.untested_ok else run_self_check_with(_checking_session)
                    )
                except Exception as e:
                    self.fault("install", e)
                if self.notice and self.notice not in _SAID:
                    _SAID.add(self.notice)
                    print(self.notice, file=sys.stderr)
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                try:
                    self.probe.uninstall()
                except Exception as e:
                    self.fault("uninstall", e)

    def start(
        self,
        persist: str | None = None,
        divergence: str | None = None,
        divergence_grace_s: float | None = None,
    ) -> None:
        with self._lock:
            if divergence is not None:
                if divergence not in tuple(DivergenceMode):
                    raise ValueError(
                        f"divergence must be 'warn', 'raise' or 'off', not {divergence!r}"
                    )
                self.peers.mode = DivergenceMode(divergence)
            if divergence_grace_s is not None:
                if not divergence_grace_s > 0:
                    raise ValueError("divergence_grace_s must be a positive number of seconds")
                self.peers.grace_s = float(divergence_grace_s)
            if persist is not None:
                self.persist_to(persist)
            if not self._started:
                self._started = True
                self.acquire()

    def stop(self) -> None:
        if self._persist is not None:
            try:
                self.settle()  # (what a read would still add, into the file too)
            except Exception as e:
                self.fault("persist", e)
        with self._lock:
            self.peers.close()  # (before the log closes: the other processes' findings, in it)
            self.persist_to(None)
            if self._started:
                self._started = False
                self.release()

    def _diverged(self, found: Finding) -> None:
        """Another process's key differs (`_peers`): one line on stderr, one event in the log."""
        print(found.message(), file=sys.stderr, flush=True)
        fields = event_fields(found, self._place()[1])
        fields["key"] = local_key(found, list(self.lifecycle.functions))
        self.lifecycle.on_divergence(fields, withdraws=found.withdrawn)

    def persist_to(self, path: str | None) -> None:
        """Append every event to `path` as JSON lines from now on (None: stop persisting)."""
        from .._log._persist import JsonlWriter

        with self._lock:
            if self._persist is not None:
                writer, unsubscribe = self._persist
                if path is not None and writer.path == os.fspath(path):
                    return
                unsubscribe()
                writer.close()
                self._persist = None
            if path is not None:
                writer = JsonlWriter(path, on_fault=lambda exc: self.fault("persist", exc))
                self._persist = (writer, self.log.subscribe(writer))
            self.lifecycle.keep_signatures = self._persist is not None

    def settle(self) -> None:
        """Before the log is read: the sizes and line profiles of traces not compiled, every trace's
        event built, every persistent cache miss worded."""
        self.probe.make_pending()
        self.lifecycle.publish()
        self.cache.settle()

    @property
    def functions(self) -> dict[str, FunctionState]:
        """Per-function state, as of every trace recorded so far."""
        return self.lifecycle.current_functions()

    @property
    def recording(self) -> bool:
        return self.probe.installed

    def reset(self) -> None:
        with self.lifecycle.lock:
            self.probe.forget_unprofiled()
            self.lifecycle.reset()
            self.log.reset()
            forget_key_indexes()

    def forget_functions(self) -> None:
        """Count every function afresh from now on (its next trace is its first), keeping the log:
        what a test run from empty JAX caches sees (the pytest plugin's baseline)."""
        with self.lifecycle.lock:
            self.lifecycle.publish()  # the events recorded so far keep what they knew
            self.lifecycle.reset()

    # -------------------------------------------------------------- faults
    def fault(self, stage: str, exc: BaseException) -> None:
        """Count a failure inside jaxtrace_nb and report it once per stage; never raise."""
        try:
            self.fault_counts[stage] += 1
            if self.fault_counts[stage] == 1:
                message = (
                    f"jaxtrace_nb: internal error in stage '{stage}' "
                    f"({type(exc).__name__}: {str(exc)[:200]}); recording continues, "
                    f"further errors in this stage are counted silently (jt.faults())."
                )
                try:
                    warnings.warn(message, JaxtraceWarning, stacklevel=2)
                except Exception:
                    print(message, file=sys.stderr)
        except Exception:
            pass

    def _hostname(self) -> str:
        if self._host is None:
            import socket

            self._host = socket.gethostname()
        return self._host

    def _source_place(self, location: str) -> str:
        """A source location ("file:line") as the log keeps it: a notebook cell's as ``In[5]:3``."""
        label = self.probe.cell_label
        file, _, line = location.rpartition(":")
        if label is not None and file and line.isdigit():
            try:
                cell = label(file)
            except Exception:
                cell = None
            if cell:
                return f"{cell}:{line}"
        return location

    def _is_library(self, path: str) -> bool:
        decoder = self.probe.decoder
        return bool(decoder is not None and decoder.is_library(path))

    def _place(self) -> tuple[str, int | None]:
        """This machine's name and JAX's process index (None until JAX knows it: the probe reads it
        without starting JAX's backends, asked again at the next event)."""
        if self._where is not None:
            return self._where
        process = self.probe.process_index()
        where = (self._hostname(), process)
        if process is not None:
            self._where = where
            self.log.fill_process(process)  # events recorded before JAX knew it: the same process
        return where


def _checking_session() -> Session:
    """A private session for the self-check: records in full without checking, faults only
    counted."""
    session = Session()
    session.untested_ok = True  # this is the check: do not check again
    session.fault = lambda stage, exc: session.fault_counts.update(
        [stage]
    )  # counted, never printed
    return session


SESSION = Session()


def get_session() -> Session:
    return SESSION
