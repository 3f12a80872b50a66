"""Live comparison of cache keys across the processes of a `jax.distributed` run.

At a top-level trace of a user's jitted function whose arguments include an array that is not
fully addressable (a global array over several processes' devices), the probe hands the trace's
record to `Peers.on_trace`. The key travels through JAX's own coordination service (its key-value
store, read by `_jax._internals.distributed`), under ``jaxtrace_nb/`` (`ROOT`); a cache-hit
call never reaches this code, and a function that only sees process-local arrays is never compared.

Per compared trace (the n-th of function F in every process), in each of N processes:

1. ``set F/n/p/<process> = digest`` and ``increment F/n/count``;
2. the process whose increment reaches N reads ``F/n/p/`` (N digests) and sets ``F/n/done`` to the
   groups (the largest group's digest, and the processes of any other); every other process waits
   for ``F/n/done`` (``blocking_key_value_get`` a quarter second at a time, at most the grace
   period, less where every process still missing has since published the key of a later trace
   of this process's: `_moved_on`); one that decides without them adds `_EARLY` to the count, and
   the last to come withdraws the finding where its key matches (`withdrawal`);
3. if the digests differ, the lowest process of each group sets ``F/n/key/<digest>`` to its whole
   key, and each process fetches the keys it lacks to name the leaves (`_divergence`);
4. one process claims the finding and appends it to ``alerts/<k>``, which every process's watcher
   thread follows: a process that traced nothing (a cache hit while another process retraced)
   reports it too.

So a process makes 3 operations per compared trace when every process agrees (the last one 4), a
constant, whatever N; the coordinator serves 3N + 1 (docs/divergence.md). Besides, each process's
watcher holds one long poll (``blocking_key_value_get``, renewed every quarter second) while it
follows, and `close` makes 2 operations once. `close` (``jt.stop()``, the exit) waits for nothing
longer than `_CLOSE_MAX_S`: a comparison still waiting then is abandoned, said once on stderr.

In ``"warn"`` mode each comparison runs on a worker thread from the moment XLA begins the trace's
compile (the GIL is free then), and the program never waits for it; in
``"raise"`` mode it runs in the trace, which waits for the other processes (at most the grace
period) and raises `DivergenceError` in a process that differs, before JAX compiles or runs the
traced program. Every other failure here (the store's errors, a missing JAX internal) is counted
as a fault (``jt.faults()["divergence"]``) and reported once, never raised.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .._core._vocabulary import DivergenceMode
from .._diagnosis._divergence import (
    DivergenceError,
    Finding,
    Group,
    PortableKey,
    finding,
    function_id,
    portable_key,
    withdrawal,
)
from .._jax import _internals as jaxi

ROOT = "jaxtrace_nb"
DEFAULT_GRACE_S = 60.0
_WATCH_POLL_MS = 250  # (a thread of ours in JAX's client at exit aborts: `close` joins it)
_MAX_COUNTS = 100_000  # functions counted, at most
_MAX_WAITING = 256  # comparisons waiting for the other processes at once, at most
_MAX_WORKERS = 8  # threads comparing at once, at most
_MAX_DELAY_S = 0.5  # a comparison waits for XLA's compile to start at most this long
_SLICE_S = 0.25  # a wait for the other processes looks again whether to go on this often
# What a process that decided ``F/n`` before every process counted adds to ``F/n/count`` (the
# processes counted are the count modulo this): the last to come knows a finding was made early.
_EARLY = 1 << 20
# `Peers.close`, in seconds from its start: it waits for the comparisons under way until
# `_PENDING_S`, for the other processes to get there until `_CLOSE_S`, for the comparisons that
# their coming decided until `_DECIDED_S`, and for its threads to leave JAX's client (a slice, a
# poll) until `_CLOSE_MAX_S`
_PENDING_S, _CLOSE_S, _DECIDED_S, _CLOSE_MAX_S = 0.3, 0.6, 0.85, 1.05
ABANDONED = (
    "jaxtrace_nb: divergence: {n} comparison(s) with the other processes abandoned at stop or exit "
    "(still waiting for another process's key; not reported)"
)


WATCH, CLOSE = "watch", "close"  # the operations of the alerts' watcher and of `Peers.close`


class Store:
    """JAX's key-value client, each operation counted (`operations`, `bytes`) by its name, or by
    what it serves (`WATCH`, `CLOSE`) where that is not a comparison."""

    def __init__(self, client: Any, traffic: collections.Counter | None = None):
        self.client = client
        self.operations: collections.Counter = collections.Counter()
        self.bytes = 0
        self.traffic = traffic  # (also counted there: the operations of every store, and "bytes")

    def set(self, key: str, value: str, overwrite: bool = False, op: str = "set") -> None:
        self._count(op, key, value)
        if overwrite:
            self.client.key_value_set(key, value, allow_overwrite=True)
        else:
            self.client.key_value_set(key, value)

    def increment(self, key: str, op: str = "increment", amount: int = 1) -> int:
        self._count(op, key, "")
        return int(self.client.key_value_increment(key, amount))

    def wait(self, key: str, seconds: float, op: str = "blocking_get") -> str:
        self._count(op, key, "")
        value = self.client.blocking_key_value_get(key, max(1, int(seconds * 1000)))
        self._received(len(value))
        return value

    def entries(self, prefix: str) -> list[tuple[str, str]]:
        self._count("dir_get", prefix, "")
        found = self.client.key_value_dir_get(prefix)
        self._received(sum(len(k) + len(v) for k, v in found))
        return found

    def _count(self, op: str, key: str, value: str) -> None:
        self.operations[op] += 1
        if self.traffic is not None:
            self.traffic[op] += 1
        self._received(len(key) + len(value))

    def _received(self, n: int) -> None:
        self.bytes += n
        if self.traffic is not None:
            self.traffic["bytes"] += n


class Comparison(NamedTuple):
    """One trace's key to compare with the other processes' n-th key of its function."""

    function: str
    location: str
    log_key: str  # the function's key in the log
    function_id: str
    number: int
    key: PortableKey | None  # None until made from `signature` (off the trace path in "warn" mode)
    digest: str
    process: int
    processes: int
    grace_s: float
    signature: Any = None  # the trace's `Signature` (or its deferred form), where `key` is None
    ticket: int = 0  # this process's comparisons, numbered in the order it traced them
    generation: int = 0  # `Peers.close`s before it: a comparison of an earlier one is abandoned


class _Abandoned(Exception):
    """The comparison was abandoned (`Peers.close`): stop waiting, report nothing."""


def _about(job: Comparison) -> dict:
    """What a finding about `job` says of its function and key."""
    return {
        "function": job.function,
        "location": job.location,
        "key": job.log_key,
        "function_id": job.function_id,
        "number": job.number,
        "grace_s": job.grace_s,
    }


def encode_groups(published: dict[int, str]) -> str:
    """``F/n/done``: the largest group's digest, and the processes of every other group."""
    by_digest: dict[str, list[int]] = {}
    for process, digest in sorted(published.items()):
        by_digest.setdefault(digest, []).append(process)
    rest = max(by_digest, key=lambda d: (len(by_digest[d]), -by_digest[d][0]))
    return json.dumps({"rest": rest, "listed": {d: p for d, p in by_digest.items() if d != rest}})


def decode_groups(text: str, processes: int) -> list[Group]:
    data = json.loads(text)
    listed = {d: tuple(p) for d, p in data["listed"].items()}
    taken = {p for ps in listed.values() for p in ps}
    rest = tuple(p for p in range(processes) if p not in taken)
    return [Group(data["rest"], rest)] + [Group(d, p) for d, p in listed.items()]


def partial_groups(published: dict[int, str], processes: int) -> list[Group]:
    """The groups of the processes that published a key, and of those that did not (digest None)."""
    by_digest: dict[str, list[int]] = {}
    for process, digest in sorted(published.items()):
        by_digest.setdefault(digest, []).append(process)
    groups = [Group(d, tuple(p)) for d, p in by_digest.items()]
    missing = tuple(p for p in range(processes) if p not in published)
    return groups + ([Group(None, missing)] if missing else [])


class Peers:
    """The comparison of this process's keys with the other processes' (see the module)."""

    def __init__(
        self, report: Callable[[Finding], None], fault: Callable[[str, BaseException], None]
    ):
        self.mode = DivergenceMode.WARN
        self.grace_s = DEFAULT_GRACE_S
        self._report, self._fault = report, fault
        self._lock = threading.Condition()
        self._counts: dict[str, int] = {}  # function id -> keys compared so far
        self._agreed: dict[str, tuple[int, PortableKey]] = {}  # the last key every process traced
        self._reported: set[tuple] = set()
        self._pending = 0
        self._tickets = 0  # comparisons made by this process
        self._generation = 0  # `close`s so far: comparisons made before the last one are abandoned
        # process -> the latest of this process's tickets whose key that process has published too:
        # it has gone past every earlier one (`_moved_on`)
        self._progress: dict[int, int] = {}
        self._compiling = threading.Event()  # set when XLA begins a compile
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: collections.deque = collections.deque()  # made at traces, not handed on yet
        self._dispatcher: threading.Thread | None = None
        self._workers = self._idle = 0  # worker threads, and those free for a job
        self._pid = os.getpid()
        self.traffic: collections.Counter = collections.Counter()  # operations and bytes, all runs
        self._store: Store | None = None
        self._client = None  # the key-value client of the run the alerts were followed in
        self._watcher: threading.Thread | None = None
        self._watcher_stop = threading.Event()  # set: the current watcher is to end
        self._next_alert = 1
        self._closes = 0
        self._exit_registered = False
        self.compared = 0  # keys compared (traces published)

    # ------------------------------------------------------------------ the trace path
    def on_trace(self, record, frame) -> None:
        """A top-level trace of a user's function (`record`, announced by `frame`): compare its key
        if its arguments span processes. Raises `DivergenceError` in ``"raise"`` mode, by design."""
        __tracebackhide__ = True
        if self.mode == DivergenceMode.OFF or record.signature is None:
            return
        try:
            run = jaxi.distributed()
            if run is None or not jaxi.spans_processes(frame):
                return
            job = self._comparison(record, run)
            self._watch(run.client)
        except Exception as e:
            self._fault("divergence", e)
            return
        if self.mode == DivergenceMode.RAISE:
            found = self._compare(job)
            if found is not None and found.differs(job.process):
                raise DivergenceError(found.message(), finding=found)
            return
        with self._lock:
            if self._pending >= _MAX_WAITING:
                self._fault("divergence", RuntimeError("too many comparisons waiting; one skipped"))
                return
            self._pending += 1
            self._waiting.append(job)  # (no thread woken here: see `_dispatch`)
            if self._pid != os.getpid():  # a forked child has none of its parent's threads
                self._pid, self._workers, self._idle, self._dispatcher = os.getpid(), 0, 0, None
                self._jobs = queue.SimpleQueue()
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="jaxtrace_nb-dispatch", daemon=True
                )
                self._dispatcher.start()

    def beside_compile(self) -> None:
        """JAX lowered a program, and XLA compiles it now (releasing the GIL): comparisons start."""
        if self._waiting:
            self._compiling.set()

    def _dispatch(self) -> None:
        """Hand the comparisons to the workers when XLA compiles, or `_MAX_DELAY_S` after they were
        made at the latest: a thread woken while JAX traces would make JAX's thread wait for the
        GIL."""
        while True:
            self._compiling.wait(_MAX_DELAY_S)
            self._compiling.clear()
            while self._waiting:
                self._submit(self._waiting.popleft())

    def _submit(self, job: Comparison) -> None:
        """`job` to a worker thread: an idle one, else a new one up to `_MAX_WORKERS` (so that a
        comparison waiting for a late process holds up no other), else the queue."""
        with self._lock:
            spawn = self._idle == 0 and self._workers < _MAX_WORKERS
            if spawn:
                self._workers += 1
            else:
                self._idle -= 1  # (taken: the next job waits for another)
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name="jaxtrace_nb-compare", daemon=True).start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            self._compare_later(jobs.get())
            with self._lock:
                self._idle += 1

    def _comparison(self, record, run) -> Comparison:
        identity = record.identity
        fid = function_id(identity.name, identity.filename)
        with self._lock:
            if fid not in self._counts and len(self._counts) >= _MAX_COUNTS:
                self._counts.clear()  # (bounded: a function counted afresh compares as a new one)
                self._agreed.clear()
            number = self._counts[fid] = self._counts.get(fid, 0) + 1
            self._tickets += 1
            ticket, generation = self._tickets, self._generation
        return Comparison(
            function=identity.name,
            location=identity.location,
            log_key=identity.key,
            function_id=fid,
            number=number,
            key=None,
            digest="",
            process=run.process,
            processes=run.processes,
            grace_s=self.grace_s,
            signature=record.signature,
            ticket=ticket,
            generation=generation,
        )

    # ------------------------------------------------------------------ the comparison
    def _compare_later(self, job: Comparison) -> None:
        try:
            self._compare(job)
        finally:
            with self._lock:
                self._pending -= 1
                self._lock.notify_all()

    def _compare(self, job: Comparison) -> Finding | None:
        """Publish `job`'s key, wait for the others', and report what differs (contained)."""
        try:
            store = self._store
            if store is None or self._abandoned(job):
                return None
            if job.key is None:
                key = portable_key(job.signature.get())
                job = job._replace(key=key, digest=key.digest(), signature=None)
            self.compared += 1
            prefix = f"{ROOT}/{job.function_id}/{job.number}/"
            store.set(f"{prefix}p/{job.process}", job.digest)
            count = store.increment(f"{prefix}count")
            if count % _EARLY >= job.processes:
                published = self._published(store, prefix)  # (each set its digest before counting)
                groups = partial_groups(published, job.processes)
                store.set(f"{prefix}done", encode_groups(published))
                moved_on = False
                if count >= _EARLY and len(groups) == 1:  # a finding made before this key came
                    self._withdraw(store, job)
            else:
                groups, moved_on = self._await_groups(store, job, prefix)
                if any(g.digest is None for g in groups):  # decided before every process came
                    count = store.increment(f"{prefix}count", amount=_EARLY)
                    if count % _EARLY >= job.processes:  # (they all came meanwhile)
                        groups = partial_groups(self._published(store, prefix), job.processes)
                        moved_on = False
            self._passed(job, groups)
            if len(groups) == 1:
                with self._lock:
                    self._agreed[job.function_id] = (job.number, job.key)
                return None
            found = self._finding(store, job, prefix, groups, moved_on)
            if self._abandoned(job):
                return None
            self._found(store, found, prefix)
            return found
        except _Abandoned:
            return None
        except Exception as e:
            if not self._abandoned(job):  # (after `close`, JAX's client may be gone: not ours)
                self._fault("divergence", e)
            return None

    def _await_groups(self, store: Store, job: Comparison, prefix: str) -> tuple[list[Group], bool]:
        """(the groups of ``F/n`` once the last process sets them; or, once the grace period has
        passed or every process still missing has moved on (`_moved_on`), those of the processes
        that published, whether they moved on). Raises `_Abandoned` after `close`."""
        deadline = time.monotonic() + job.grace_s
        while True:
            left = deadline - time.monotonic()
            try:
                text = store.wait(f"{prefix}done", min(_SLICE_S, max(left, 0.001)))
                return decode_groups(text, job.processes), False
            except Exception as e:
                if not jaxi.timed_out(e):  # (not set within the slice: look again)
                    raise
            if self._abandoned(job):
                raise _Abandoned
            if left <= _SLICE_S or self._moved_on(job):
                published = self._published(store, prefix)
                moved_on = self._moved_on(job, published)
                if left <= _SLICE_S or moved_on:
                    return partial_groups(published, job.processes), moved_on

    def _moved_on(self, job: Comparison, published: dict[int, str] | None = None) -> bool:
        """Whether every other process that has not published ``F/n`` (all, without `published`)
        has since published the key of a later comparison of this process's: it went past this
        trace without tracing it, and is not still coming."""
        with self._lock:
            progress = dict(self._progress)
        others = (p for p in range(job.processes) if p != job.process)
        missing = [p for p in others if published is None or p not in published]
        if published is None:
            return any(progress.get(p, 0) > job.ticket for p in missing)
        return bool(missing) and all(progress.get(p, 0) > job.ticket for p in missing)

    def _passed(self, job: Comparison, groups: list[Group]) -> None:
        """The processes that published `job`'s key have gone past every earlier comparison."""
        with self._lock:
            for g in groups:
                if g.digest is not None:
                    for p in g.processes:
                        if self._progress.get(p, 0) < job.ticket:
                            self._progress[p] = job.ticket

    def _abandoned(self, job: Comparison) -> bool:
        return job.generation != self._generation

    @staticmethod
    def _published(store: Store, prefix: str) -> dict[int, str]:
        return {int(k.rsplit("/", 1)[1]): v for k, v in store.entries(f"{prefix}p/")}

    def _finding(
        self, store: Store, job: Comparison, prefix: str, groups: list[Group], moved_on: bool
    ) -> Finding:
        keys = {job.digest: job.key}
        mine = next(g for g in groups if job.process in g.processes)
        if min(mine.processes) == job.process:
            store.set(f"{prefix}key/{job.digest}", job.key.to_json(), overwrite=True)
        for g in groups:
            if g.digest is not None and g.digest not in keys:
                try:
                    keys[g.digest] = PortableKey.from_json(
                        store.wait(f"{prefix}key/{g.digest}", job.grace_s)
                    )
                except Exception as e:
                    self._fault("divergence", e)
        with self._lock:
            agreed = self._agreed.get(job.function_id)
        previous = agreed[1] if agreed is not None and agreed[0] == job.number - 1 else None
        return finding(
            **_about(job),
            groups=groups,
            keys=keys,
            previous=previous,
            moved_on=moved_on,
        )

    def _found(self, store: Store, found: Finding | None, prefix: str) -> None:
        if found is None:
            return
        self._report_once(found)
        claim = f"{prefix}alerted/{'traced' if found.reference_traced else 'missing'}"
        try:
            store.set(claim, "1")
        except Exception:
            return  # another process claimed it: it alerts
        index = store.increment(f"{ROOT}/alerts/count")
        store.set(f"{ROOT}/alerts/{index}", found.to_json())

    def _withdraw(self, store: Store, job: Comparison) -> None:
        """Every process's key of ``F/n`` has come and they agree, but a process that decided
        without the late ones reported a divergence: withdrawn, in every process."""
        found = withdrawal(job.processes, **_about(job))
        self._report_once(found)
        index = store.increment(f"{ROOT}/alerts/count")
        store.set(f"{ROOT}/alerts/{index}", found.to_json())

    def _report_once(self, found: Finding) -> None:
        """Each finding once; a withdrawal only where its finding was reported (and a finding
        never after its withdrawal)."""
        with self._lock:
            if found.ident in self._reported:
                return
            if len(self._reported) >= _MAX_COUNTS:
                self._reported.clear()
            self._reported.add(found.ident)
            earlier = [(found.function_id, found.number, traced) for traced in (True, False)]
            if not found.withdrawn and (found.function_id, found.number, "withdrawn") in (
                self._reported
            ):
                return
            if found.withdrawn and not any(ident in self._reported for ident in earlier):
                return
        try:
            self._report(found)
        except Exception as e:
            self._fault("divergence", e)

    # ------------------------------------------------------------------ every process hears
    def _watch(self, client: Any) -> None:
        """Follow the findings other processes append (started at the first comparison)."""
        with self._lock:
            if self._store is not None and self._store.client is client:
                if self._watcher is not None and self._watcher.is_alive():
                    return
            if self._store is None or self._store.client is not client:
                if self._client is not client:
                    self._client, self._next_alert = client, 1
                self._store = Store(client, self.traffic)
            self._watcher_stop.set()  # (this watcher's own: `close` sets it to let it go)
            self._watcher_stop = stop = threading.Event()
            self._watcher = threading.Thread(
                target=self._follow,
                args=(self._store, stop),
                name="jaxtrace_nb-alerts",
                daemon=True,
            )
            self._watcher.start()
            if not self._exit_registered:  # after JAX's own shutdown was registered: runs before it
                self._exit_registered = True
                atexit.register(self.close)

    def _follow(self, store: Store, stop: threading.Event) -> None:
        while not stop.is_set():
            index = self._next_alert
            try:
                text = store.wait(f"{ROOT}/alerts/{index}", _WATCH_POLL_MS / 1000, op=WATCH)
            except Exception:
                run = jaxi.distributed()
                if run is None or run.client is not store.client:
                    return  # JAX's distributed run ended
                continue
            if stop.is_set():
                return  # (`close` reads what is left itself)
            self._alert(index, text)

    def _alert(self, index: int, text: str) -> None:
        """The finding appended as ``alerts/<index>``, reported once (the watcher and `close` may
        both read it)."""
        with self._lock:
            if index != self._next_alert:
                return
            self._next_alert += 1
        try:
            self._report_once(Finding.from_json(text))
        except Exception as e:
            self._fault("divergence", e)

    def close(self) -> None:
        """Before recording stops (or the process exits): give the comparisons under way a moment,
        wait a moment for the other processes to get here (where all do, none of them is still
        coming to a comparison of this process's, which then ends at once), abandon what still
        waits (said once on stderr), report the findings other processes appended, and stop
        following; `_CLOSE_MAX_S` in all, at most. Contained."""
        try:
            start = time.monotonic()
            self._compiling.set()
            watcher = self._watcher
            self._stop_watching()  # (`close` reads the findings left itself)
            self._wait_pending(start + _PENDING_S)
            store, run = self._store, jaxi.distributed()
            ours = store is not None and run is not None and run.client is store.client
            if ours and self._all_here(store, run.processes, start + _CLOSE_S):
                with self._lock:
                    for p in range(run.processes):
                        self._progress[p] = self._tickets + 1
            self._wait_pending(start + _DECIDED_S)
            with self._lock:
                abandoned = self._pending
                self._generation += 1  # (every comparison still waiting stops at its next look)
            if abandoned:
                print(ABANDONED.format(n=abandoned), file=sys.stderr, flush=True)
            if watcher is not None and watcher is not threading.current_thread():
                watcher.join(timeout=max(start + _CLOSE_MAX_S - time.monotonic(), 0.0))
            self._wait_pending(start + _CLOSE_MAX_S)  # (the abandoned ones, leaving)
            if not ours:
                return
            while True:  # the findings the watcher has not read
                index = self._next_alert
                try:
                    text = store.client.key_value_try_get(f"{ROOT}/alerts/{index}")
                except Exception:
                    break
                self._alert(index, text)
            with self._lock:
                self._store = None  # (a later comparison follows again, from the next finding)
        except Exception as e:
            self._fault("divergence", e)

    def _all_here(self, store: Store, processes: int, deadline: float) -> bool:
        """Whether every process reached its `close` (this one's n-th) before `deadline`."""
        self._closes += 1
        prefix = f"{ROOT}/close/{self._closes}/"
        if store.increment(f"{prefix}count", op=CLOSE) >= processes:
            store.set(f"{prefix}done", "1", op=CLOSE)
            return True
        try:
            store.wait(f"{prefix}done", max(deadline - time.monotonic(), 0.001), op=CLOSE)
            return True
        except Exception:
            return False  # (the others are not there yet: not waited for)

    def _wait_pending(self, deadline: float) -> None:
        with self._lock:
            while self._pending and time.monotonic() < deadline:
                self._lock.wait(0.05)

    def _stop_watching(self) -> None:
        self._watcher_stop.set()  # (the watcher ends at its next look: `close` joins it)
        self._watcher = None
