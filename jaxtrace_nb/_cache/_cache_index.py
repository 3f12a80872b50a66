"""The index beside JAX's persistent compilation cache: every key's parts, across runs and
processes.

One SQLite file per cache (`index_path`: ``<cache dir>/jaxtrace_nb/index.sqlite``; JAX's own
eviction only looks at its ``*-cache`` files), shared by every process using that cache:

* **safe with several writers**: WAL journal, a busy timeout, and every batch of writes (at most
  `_MAX_BATCH` records) one ``BEGIN IMMEDIATE`` transaction (the write lock is taken first, so two
  writers never deadlock upgrading a read); readers never wait for writers;
* **bounded**: at most `MAX_KEYS_PER_NAME` keys per computation name and `MAX_KEYS` in all (the
  least recently seen go first), canonical modules for `MAX_MODULES_PER_NAME` keys per name, at
  most `MAX_MODULE_BYTES` each (compressed) and `MAX_MODULES_BYTES` in all;
* **off the user's thread**: one `IndexWriter` thread per index writes and compares, so a busy
  index never blocks a compile; a full queue drops records (counted), never waits.

What it holds of a key: who computed it (host, pid, run), when, its outcome, each part's hash,
the parts' readable side (`CacheKeyRecord.facts`), the compile options and, for keys that missed,
the canonical module JAX hashed, compressed. No arrays, no argument values: the same program JAX
itself stores beside it (its cache holds the compiled executable).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, NamedTuple

from .._jax._cache_key import CACHE_KEY_COMPONENTS, CacheKeyRecord, entry_path
from .._keys._records import CacheComparison, EarlierKey

SCHEMA = 1
MAX_KEYS_PER_NAME = 256
MAX_KEYS = 20_000
MAX_MODULES_PER_NAME = 16
MAX_MODULE_BYTES = 16 << 20  # compressed; a larger module is indexed without it
MAX_MODULES_BYTES = 256 << 20
# records waiting in the writer's queue (as many again in a batch it gathers); more are dropped
MAX_QUEUED = 1024
BUSY_TIMEOUT_S = 10.0
_PRUNE_EVERY = 256  # writes between two global prunings (and one at the first write)
_MAX_BATCH = (
    64  # records in one of the writer's transactions (other processes wait for its write lock)
)
_CANDIDATES = MAX_KEYS_PER_NAME  # every key of a name is compared with a new one
# The writer starts once no record has come for this long (unless a flush or a read asks sooner),
# and then writes every record waiting in one transaction: its Python would otherwise take the GIL
# from the user's thread in the work JAX does right after a compile (its output shardings, the cache
# write, the first call), which then waits for it; and a burst of compiles (a warm start's hits, a
# tenth of a second apart) wakes it once, not once a compile (`docs/performance.md`, "Persistent
# cache").
WRITE_DELAY_S = 0.25
MAX_WRITE_WAIT_S = 2.0  # ... but no record waits longer than this for a quiet moment
INDEX_DIR = "jaxtrace_nb"
INDEX_FILE = "index.sqlite"

_DDL = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys(
    key TEXT PRIMARY KEY,
    module_name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen INTEGER NOT NULL DEFAULT 1,
    run TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    function TEXT,
    location TEXT,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    written INTEGER NOT NULL DEFAULT 0,
    components TEXT NOT NULL,
    facts TEXT NOT NULL,
    compile_options BLOB,
    computation TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS keys_by_name ON keys(module_name, last_seen);
CREATE INDEX IF NOT EXISTS keys_by_time ON keys(last_seen);
CREATE TABLE IF NOT EXISTS modules(
    computation TEXT PRIMARY KEY,
    module_name TEXT NOT NULL,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    last_seen REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS modules_by_name ON modules(module_name, last_seen);
"""
_KEY_COLUMNS = (
    "key",
    "run",
    "host",
    "pid",
    "first_seen",
    "last_seen",
    "function",
    "location",
    "outcome",
    "reason",
    "written",
    "components",
    "facts",
    "compile_options",
)


def index_path(cache_dir: str) -> str | None:
    """Where the index of the cache in `cache_dir` is: beside it when it is a local directory, else
    (a bucket, ``gs://…``) in the user's cache folder, one index per cache; None without a cache."""
    if not cache_dir:
        return None
    if "://" not in cache_dir:
        return os.path.join(cache_dir, INDEX_DIR, INDEX_FILE)
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(cache_dir.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return os.path.join(home, "jaxtrace_nb", f"index-{digest}.sqlite")


def connect(path: str, *, create: bool = True) -> sqlite3.Connection:
    """A connection to the index at `path` (made, with its tables, when `create`): autocommit, WAL,
    waiting up to `BUSY_TIMEOUT_S` for another writer. Raises `sqlite3.Error` or `OSError`."""
    if create:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    elif not os.path.exists(path):
        raise FileNotFoundError(path)
    uri = f"file:{path}" + ("" if create else "?mode=ro")
    con = sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        if create:
            _while_locked(lambda: _set_up(con))
        schema = _while_locked(
            lambda: con.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
        )
        if create and schema is None:

            def insert() -> None:
                with _transaction(con):
                    con.execute("INSERT OR IGNORE INTO meta VALUES('schema', ?)", (str(SCHEMA),))

            _while_locked(insert)
        elif schema is not None and schema[0] != str(SCHEMA):
            raise sqlite3.DatabaseError(
                f"index schema {schema[0]} is not {SCHEMA} (another jaxtrace_nb version)"
            )
    except BaseException:
        con.close()
        raise
    return con


def _set_up(con: sqlite3.Connection) -> None:
    if con.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        con.execute("PRAGMA journal_mode=WAL")  # kept in the file: every later connection uses it
    con.execute("PRAGMA synchronous=NORMAL")
    con.executescript(_DDL)  # each statement on its own (IF NOT EXISTS: any process may come first)


def _while_locked(step: Callable[[], Any]) -> Any:
    """`step()`, run again while SQLite says "database is locked", for up to `BUSY_TIMEOUT_S`.

    SQLite returns SQLITE_BUSY at once, without its busy handler, where waiting could deadlock:
    switching a new file to WAL while another process makes the same file is such a case (a CI run
    of `test_several_processes_write_at_once` met it, 2026-11-29)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.2)


class _transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception, and where the ``COMMIT``
    itself fails: the connection never stays inside a transaction)."""

    def __init__(self, con: sqlite3.Connection):
        self.con = con

    def __enter__(self):
        self.con.execute("BEGIN IMMEDIATE")
        return self.con

    def __exit__(self, exc_type, *_):
        if not self.con.in_transaction:
            return False
        if exc_type is None:
            try:
                self.con.execute("COMMIT")
                return False
            except BaseException:
                _rollback(self.con)
                raise
        _rollback(self.con)
        return False


def _rollback(con: sqlite3.Connection) -> None:
    try:
        con.execute("ROLLBACK")
    except sqlite3.Error:
        pass


class RunInfo:
    """Who writes: this process's run id ("host:pid:start"), host and pid."""

    __slots__ = ("run", "host", "pid")

    def __init__(self, host: str):
        self.host = host
        self.pid = os.getpid()
        self.run = f"{host}:{self.pid}:{time.time_ns():x}"


def compare(
    con: sqlite3.Connection, record: CacheKeyRecord, location: str | None
) -> CacheComparison:
    """`record`'s key against the index: the same key seen before, else the closest other key of
    the same name (fewest differing parts; then fewest differing argument types and JAX options,
    for keys whose parts differ alike (`_finer`); then one compiled for the same function; then one
    whose module is kept; then the most recent), and which parts differ. Reads only (never waits
    for a writer)."""
    row = con.execute(
        f"SELECT {', '.join(_KEY_COLUMNS)} FROM keys WHERE key=?", (record.key,)
    ).fetchone()
    if row is not None:
        same = _earlier(row)
        exists = None
        entry = entry_path(record.cache_dir, record.key) if same.written else None
        if entry is not None:
            exists = os.path.exists(entry)
        return CacheComparison(
            same=same, closest=None, differing=(), entry_exists=exists, module_bytes=None
        )
    mine = dict(record.components)
    best = None
    # Only what ranks a candidate is decoded (its parts' hashes); the closest one's row after. (One
    # query: another process may prune a key between two.)
    location_at, components_at, seen_at, facts_at = (
        _KEY_COLUMNS.index(c) for c in ("location", "components", "last_seen", "facts")
    )
    for *row, kept in con.execute(
        f"SELECT {', '.join(_KEY_COLUMNS)}, EXISTS(SELECT 1 FROM modules WHERE "
        "modules.computation = "
        "keys.computation) FROM keys WHERE module_name=? AND key<>? ORDER BY last_seen DESC "
        "LIMIT ?",
        (record.module_name, record.key, _CANDIDATES),
    ):
        theirs = dict(json.loads(row[components_at]))
        if set(theirs) != set(mine):
            continue
        differing = tuple(
            name for name in CACHE_KEY_COMPONENTS if name in mine and theirs[name] != mine[name]
        )
        # (a computation that differs is told best against an earlier key whose module is kept)
        rank = (
            len(differing),
            _finer(record.facts, row[facts_at]),
            row[location_at] != location,
            "computation" in differing and not kept,
            -float(row[seen_at]),
        )
        if best is None or rank < best[0]:
            best = (rank, row, differing)
    if best is None:
        return CacheComparison(
            same=None, closest=None, differing=(), entry_exists=None, module_bytes=None
        )
    _, row, differing = best
    earlier = _earlier(row)
    if "computation" in differing and "jax_lib version" not in differing:
        data = con.execute(
            "SELECT data FROM modules WHERE computation=?",
            (dict(earlier.components).get("computation"),),
        ).fetchone()
        if data is not None:
            earlier = earlier._replace(module_bytes=zlib.decompress(data[0]))
        return CacheComparison(
            same=None,
            closest=earlier,
            differing=differing,
            entry_exists=None,
            module_bytes=record.module_bytes,
        )
    return CacheComparison(
        same=None, closest=earlier, differing=differing, entry_exists=None, module_bytes=None
    )


def _finer(mine: dict, theirs_json: str) -> int:
    """How many argument types (by the user's path) and JAX options differ between two compiles:
    what tells apart keys whose parts differ alike (a batch size and a dtype both change only the
    computation)."""
    try:
        theirs = json.loads(theirs_json)
    except (TypeError, ValueError):
        return 0
    a, b = (
        dict(map(tuple, mine.get("arguments") or ())),
        dict(map(tuple, theirs.get("arguments") or ())),
    )
    n = sum(1 for path in a.keys() | b.keys() if a.get(path) != b.get(path))
    x, y = mine.get("options") or {}, theirs.get("options") or {}
    return n + sum(1 for name in x.keys() | y.keys() if x.get(name) != y.get(name))


class _Prepared(NamedTuple):
    """A record's rows as they are written, the compression done (outside the write lock)."""

    record: CacheKeyRecord
    computation: str
    written: int
    module: bytes | None  # the canonical module, compressed (a key that missed; None if too large)
    options: bytes | None  # the compile options, compressed


def _prepared(record: CacheKeyRecord) -> _Prepared | None:
    if not record.components:
        return None
    module = None
    if record.module_bytes is not None and record.outcome != "hit":
        module = zlib.compress(record.module_bytes, 1)
        if len(module) > MAX_MODULE_BYTES:
            module = None
    return _Prepared(
        record=record,
        computation=dict(record.components).get("computation", ""),
        written=1 if record.outcome == "written" else 0,
        module=module,
        options=zlib.compress(record.compile_options, 1) if record.compile_options else None,
    )


def put(
    con: sqlite3.Connection,
    record: CacheKeyRecord,
    who: RunInfo,
    function: str | None,
    location: str | None,
    now: float | None = None,
) -> None:
    """Remember `record`'s key (and its canonical module, for a key that missed), in one
    transaction, keeping the per-name bounds."""
    prepared = _prepared(record)
    if prepared is not None:
        with _transaction(con):
            _put_rows(con, prepared, who, function, location, time.time() if now is None else now)


def _put_rows(
    con: sqlite3.Connection,
    prepared: _Prepared,
    who: RunInfo,
    function: str | None,
    location: str | None,
    now: float,
) -> None:
    """`put`'s statements, inside a transaction of the caller's."""
    record, computation, written, module, options = prepared
    updated = con.execute(
        "UPDATE keys SET last_seen=?, seen=seen+1, run=?, host=?, pid=?, outcome=?, reason=?, "
        "written=max(written, ?), function=coalesce(?, function), location=coalesce(?, location) "
        "WHERE key=?",
        (
            now,
            who.run,
            who.host,
            who.pid,
            record.outcome,
            record.reason,
            written,
            function,
            location,
            record.key,
        ),
    ).rowcount
    if not updated:
        con.execute(
            "INSERT INTO keys(key, module_name, first_seen, last_seen, run, host, pid, function, "
            "location, outcome, "
            "reason, written, components, facts, compile_options, computation) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.key,
                record.module_name,
                now,
                now,
                who.run,
                who.host,
                who.pid,
                function,
                location,
                record.outcome,
                record.reason,
                written,
                json.dumps(record.components),
                json.dumps(record.facts, default=str),
                options,
                computation,
            ),
        )
        con.execute(
            "DELETE FROM keys WHERE module_name=? AND key NOT IN (SELECT key FROM keys WHERE "
            "module_name=? ORDER BY last_seen DESC LIMIT ?)",
            (record.module_name, record.module_name, MAX_KEYS_PER_NAME),
        )
    if module is not None:
        con.execute(
            "INSERT INTO modules(computation, module_name, size, data, last_seen) "
            "VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(computation) DO UPDATE SET last_seen=excluded.last_seen",
            (computation, record.module_name, len(module), module, now),
        )
        con.execute(
            "DELETE FROM modules WHERE module_name=? AND computation NOT IN "
            "(SELECT computation FROM modules WHERE module_name=? ORDER BY last_seen DESC LIMIT ?)",
            (record.module_name, record.module_name, MAX_MODULES_PER_NAME),
        )


def prune(con: sqlite3.Connection) -> None:
    """Keep the global bounds: the `MAX_KEYS` most recently seen keys, and modules up to
    `MAX_MODULES_BYTES` (the most recently seen first)."""
    with _transaction(con):
        _prune_rows(con)


def _prune_rows(con: sqlite3.Connection) -> None:
    con.execute(
        "DELETE FROM keys WHERE key NOT IN (SELECT key FROM keys ORDER BY last_seen DESC LIMIT ?)",
        (MAX_KEYS,),
    )
    total, doomed = 0, []
    for computation, size in con.execute(
        "SELECT computation, size FROM modules ORDER BY last_seen DESC"
    ):
        total += size
        if total > MAX_MODULES_BYTES:
            doomed.append((computation,))
    con.executemany("DELETE FROM modules WHERE computation=?", doomed)


def find(path: str) -> str | None:
    """The index at `path`: an index file, or a cache directory holding one (None if neither)."""
    if os.path.isdir(path):
        inside = index_path(path)
        return inside if inside is not None and os.path.isfile(inside) else None
    return path if path.endswith(".sqlite") and os.path.isfile(path) else None


class Reader:
    """The index at `path`, read only (`jt.load`, ``python -m jaxtrace_nb report``)."""

    def __init__(self, path: str):
        self._con = connect(path, create=False)

    def keys(self) -> list[tuple[str, int, EarlierKey]]:
        """(computation name, times computed, the key) of every key, oldest first."""
        rows = self._con.execute(
            f"SELECT module_name, seen, {', '.join(_KEY_COLUMNS)} FROM keys ORDER BY first_seen"
        ).fetchall()
        return [(name, seen, _earlier(row)) for name, seen, *row in rows]

    def module(self, key: EarlierKey) -> bytes | None:
        """The canonical module of `key`, when the index kept it."""
        row = self._con.execute(
            "SELECT data FROM modules WHERE computation=?",
            (dict(key.components).get("computation"),),
        ).fetchone()
        return zlib.decompress(row[0]) if row is not None else None

    def close(self) -> None:
        self._con.close()


def _earlier(row) -> EarlierKey:
    (
        key,
        run,
        host,
        pid,
        first_seen,
        last_seen,
        function,
        location,
        outcome,
        reason,
        written,
        components,
        facts,
        options,
    ) = row
    return EarlierKey(
        key=key,
        run=run,
        host=host,
        pid=int(pid),
        first_seen=float(first_seen),
        last_seen=float(last_seen),
        function=function,
        location=location,
        outcome=outcome,
        reason=reason or "",
        written=bool(written),
        components=tuple(tuple(p) for p in json.loads(components)),
        facts=json.loads(facts),
        compile_options=zlib.decompress(options) if options else None,
        module_bytes=None,
    )


# ------------------------------------------------------------------ writer thread
_WAKE = object()  # put by `IndexWriter.hurry`: stop waiting for a quiet moment


class Job:
    """One record on its way to the index; `done` once written (and compared, when asked)."""

    __slots__ = ("record", "compare", "function", "location", "came", "done", "comparison", "error")

    def __init__(
        self, record: CacheKeyRecord, compare: bool, function: str | None, location: str | None
    ):
        self.record, self.compare, self.function, self.location = (
            record,
            compare,
            function,
            location,
        )
        self.came = time.monotonic()
        self.done = threading.Event()
        self.comparison: CacheComparison | None = None
        self.error: str | None = None


class IndexWriter:
    """The thread that owns one index's connection: compares and writes records in order, those
    waiting together in one transaction, once no record has come for `WRITE_DELAY_S`.

    `submit` never blocks; `flush` waits (bounded) for what was submitted before it."""

    def __init__(self, path: str, who: RunInfo, fault: Callable[[str, BaseException], None]):
        self.path = path
        self.who = who
        self._fault = fault
        self._queue: queue.Queue = queue.Queue(maxsize=MAX_QUEUED)
        self._hurried = (
            threading.Event()
        )  # write the records queued now without waiting for a quiet moment
        self.dropped = 0
        self.error: str | None = (
            None  # why the index cannot be used (it then takes no more records)
        )
        self._writes = 0
        self._thread = threading.Thread(
            target=self._run, name="jaxtrace_nb-cache-index", daemon=True
        )
        self._thread.start()

    def submit(
        self,
        record: CacheKeyRecord,
        *,
        compare: bool,
        function: str | None = None,
        location: str | None = None,
    ) -> Job | None:
        if self.error is not None:
            return None
        job = Job(record, compare, function, location)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            self.dropped += 1
            return None
        return job

    def flush(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for every record submitted so far; whether they all are
        in."""
        marker = Job(None, False, None, None)  # type: ignore[arg-type]
        self._hurried.set()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def hurry(self) -> None:
        """Write the records submitted so far now, without waiting for a quiet moment."""
        self._hurried.set()
        try:
            self._queue.put_nowait(_WAKE)  # (a full queue keeps the writer busy anyway)
        except queue.Full:
            pass

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self.hurry()

    def _run(self) -> None:
        con = None
        closing = False
        while not closing:
            batch: list[Job] = []
            closing = self._gather(batch, block=True)
            if not closing and self._quiet_wait(batch):
                closing = True
            closing = (
                self._gather(batch, block=False) or closing
            )  # whatever came meanwhile: in this batch
            if self._queue.empty():
                self._hurried.clear()  # every record hurried is in this batch
            con = self._write(con, batch)
        if con is not None:
            con.close()

    def _gather(self, batch: list, block: bool) -> bool:
        """Take jobs off the queue into `batch` (one, waiting for it, when `block`; else every one
        there); whether the writer is closed."""
        while True:
            closed = self._take(batch, block, None)
            if closed is not False or (block and batch):
                return bool(closed)

    def _quiet_wait(self, batch: list) -> bool:
        """Wait until no record has come for `WRITE_DELAY_S` (at most `MAX_WRITE_WAIT_S` from the
        first one; not past `MAX_QUEUED` records waiting), a flush or a read hurries, or the writer
        is closed (True)."""
        deadline = batch[0].came + MAX_WRITE_WAIT_S
        while not self._hurried.is_set() and len(batch) < MAX_QUEUED:
            wait = min(batch[-1].came + WRITE_DELAY_S, deadline) - time.monotonic()
            if wait <= 0:
                return False
            closed = self._take(batch, True, wait)
            if closed is not False:
                return bool(closed)
        return False

    def _take(self, batch: list, block: bool, timeout: float | None) -> bool | None:
        """One job off the queue into `batch` (a wake-up is none): True if it closes the writer,
        None if the queue stayed empty, else False. A flush's marker hurries what waits with it; a
        wake-up with nothing waiting hurries nothing later."""
        try:
            job = self._queue.get(block=block, timeout=timeout)
        except queue.Empty:
            return None
        if job is None:
            return True
        if job is _WAKE:
            if not batch:
                self._hurried.clear()
            return False
        if job.record is None:
            self._hurried.set()
        batch.append(job)
        return False

    def _write(self, con: sqlite3.Connection | None, batch: list) -> sqlite3.Connection | None:
        """Compare and write `batch`'s records, at most `_MAX_BATCH` a transaction; every job done
        after."""
        jobs = [job for job in batch if job.record is not None]  # (not the flush markers)
        try:
            if jobs and self.error is None and con is None:
                con = self._open()
            written = 0
            while written < len(jobs) and con is not None:
                con = self._write_batch(con, jobs[written : written + _MAX_BATCH])
                written += _MAX_BATCH
            for job in jobs[written:]:  # the index cannot be opened, or its connection was lost
                job.error = self.error or "the index's connection was left inside a transaction"
        finally:
            for job in batch:
                job.record = None  # its module bytes are written, or in the comparison
                job.done.set()
        return con

    def _write_batch(self, con: sqlite3.Connection, jobs: list) -> sqlite3.Connection | None:
        """`jobs` in one transaction; where it fails after taking the write lock, one by one, so
        that a bad record costs only itself. The connection, or None where it is left unusable
        (reopened at the next batch)."""
        prepared = [_prepared(job.record) for job in jobs]  # (compressed before the write lock)
        began = False
        try:
            with _transaction(con):
                began = True
                for job, rows in zip(jobs, prepared):
                    self._put(con, job, rows)
        except Exception as e:
            for job in jobs:
                job.comparison = None
            if not began:  # the write lock not had (another process held it past the busy timeout)
                for job in jobs:
                    job.error = f"{type(e).__name__}: {e}"
                self._fault("persistent cache index", e)
            else:
                for job, rows in zip(jobs, prepared):
                    try:
                        with _transaction(con):
                            self._put(con, job, rows)
                    except Exception as e:
                        job.comparison = None
                        job.error = f"{type(e).__name__}: {e}"
                        self._fault("persistent cache index", e)
        if con.in_transaction:  # (a ROLLBACK that failed too)
            con.close()
            return None
        return con

    def _put(self, con: sqlite3.Connection, job: Job, prepared: _Prepared | None) -> None:
        if job.compare:
            job.comparison = compare(con, job.record, job.location)
        if prepared is not None:
            _put_rows(con, prepared, self.who, job.function, job.location, time.time())
        self._writes += 1
        if self._writes % _PRUNE_EVERY == 1:
            _prune_rows(con)

    def _open(self) -> sqlite3.Connection | None:
        try:
            return connect(self.path)
        except Exception as e:
            self.error = (
                f"the index beside the cache ({self.path}) cannot be used: {type(e).__name__}: {e}"
            )
            self._fault("persistent cache index", e)
            return None
