"""Persistent compilation cache misses explained: the session's side of the index (`_cache_index`).

At a compile (the user's thread) a key's record is handed to the writer thread of its cache's
index and the compile's event gets its verdict (`_cache_words.verdict`); nothing else runs there.
The writer compares a miss's key with the index and writes it. The words of a miss are made when
the log is read (`settle`, called before every read: a view, `jt.log()`, a report): the compile
options and the modules are decoded then, on the reader's thread, only for the misses whose
compile options or computation differ, and each event gets its text and hint, once.

Bounded: at most `MAX_PENDING` misses wait for their words (older ones are said not explained), and
a miss holds no module bytes while it waits, only a weak reference to JAX's module.
"""

from __future__ import annotations

import atexit
import collections
import threading
import time
import weakref
from collections.abc import Callable

from .._core._vocabulary import EventKind
from .._diagnosis._diagnose import join_hints, join_ids
from .._diagnosis._module_diff import Difference, Differs, first_difference
from .._jax._cache_key import CACHE_KEY_COMPONENTS, CacheKeyRecord
from .._keys._records import CacheComparison, EarlierKey
from .._log._events import Event, EventLog
from ._cache_index import IndexWriter, Reader, RunInfo, index_path
from ._cache_words import MISS, Retrace, compile_option_changes, explain, verdict

MAX_PENDING = 256
SETTLE_S = (
    10.0  # a read waits at most this long for the index's answers (another process may hold it)
)
EXIT_FLUSH_S = 5.0  # at exit, records still queued get this long to reach the index
_ALL: weakref.WeakSet = weakref.WeakSet()  # every explainer, flushed at exit
UNREAD = Difference(Differs.UNREAD, "", "")  # the modules were not compared


class CacheExplainer:
    """Sends each cache key to its index, and words the misses when the log is read.

    `fault(stage, exc)` counts a failure; `host()` is this machine's name; `place(location)` shows
    a source location as the log keeps it (a notebook cell as ``In[5]:3``); `is_library(path)` tells
    a library's file from the user's."""

    def __init__(
        self,
        log: EventLog,
        *,
        fault: Callable[[str, BaseException], None],
        host: Callable[[], str],
        place: Callable[[str], str],
        is_library: Callable[[str], bool],
    ):
        self._log = log
        self._fault = fault
        self._host = host
        self._place = place
        self._is_library = is_library
        self._who: RunInfo | None = None
        self._writers: dict[str, IndexWriter] = {}
        self._lock = threading.Lock()  # the writers
        self._settling = threading.Lock()
        self._pending: collections.deque = collections.deque()  # (event, record without bytes, job)
        _ALL.add(self)

    @property
    def run(self) -> str:
        return self._who.run if self._who is not None else ""

    # ------------------------------------------------------------ compiles
    def submit(self, event: Event | None, record: CacheKeyRecord) -> None:
        """A compile's key (the user's thread): its event's verdict now, its record to the index."""
        if event is not None:
            event.persistent_cache = verdict(record)
            self._log.updated(event)
        path = index_path(record.cache_dir)
        writer = self._writer(path) if path is not None else None
        if writer is None:
            return
        explains = (
            event is not None
            and record.outcome != "hit"
            and record.eligible
            and bool(record.components)
        )
        job = writer.submit(
            record,
            compare=explains,
            function=event.function if event is not None else None,
            location=event.location if event is not None else None,
        )
        if not explains:
            return
        if job is None:
            self._said(
                event,
                f"{MISS} (not explained: {writer.error or 'the index beside the cache is busy'})",
            )
            return
        pending = self._pending
        pending.append(
            (event, record._replace(module_bytes=None, module_located=self._located(record)), job)
        )
        while len(pending) > MAX_PENDING:
            self._said(
                pending.popleft()[0], f"{MISS} (not explained: too many misses waited for a view)"
            )

    def _writer(self, path: str) -> IndexWriter | None:
        writer = self._writers.get(path)
        if writer is None:
            with self._lock:
                writer = self._writers.get(path)
                if writer is None:
                    if self._who is None:
                        self._who = RunInfo(self._host())
                    writer = self._writers[path] = IndexWriter(path, self._who, self._fault)
        return writer

    # ---------------------------------------------------------------- reads
    def settle(self, timeout: float = SETTLE_S) -> None:
        """Word every miss whose index comparison is done (waiting up to `timeout` for it)."""
        if not self._pending or not self._settling.acquire(blocking=False):
            return
        try:
            for writer in list(self._writers.values()):
                writer.hurry()
            deadline = time.monotonic() + timeout
            while self._pending:
                event, record, job = self._pending[0]
                if not job.done.wait(max(0.0, deadline - time.monotonic())):
                    break
                self._pending.popleft()
                self._explain(event, record, job)
        finally:
            self._settling.release()

    def flush(self, timeout: float = EXIT_FLUSH_S) -> None:
        """Wait up to `timeout` for the records queued so far to be written."""
        deadline = time.monotonic() + timeout
        for writer in list(self._writers.values()):
            writer.flush(max(0.0, deadline - time.monotonic()))

    def _explain(self, event: Event, record: CacheKeyRecord, job) -> None:
        try:
            comparison = job.comparison
            if comparison is None:
                self._said(
                    event, f"{MISS} (not explained: {job.error or 'the index did not answer'})"
                )
                return
            options = computation = None
            differing = comparison.differing
            closest = comparison.closest
            if closest is not None and "jax_lib version" not in differing:
                if "compile_options" in differing:
                    options = _decoded_options(closest.compile_options, record.compile_options)
                if (
                    "computation" in differing
                ):  # (a helper's is not shown: its modules are not compared)
                    computation = (
                        UNREAD
                        if event.internal
                        else self._computation(
                            closest.module_bytes, record, comparison.module_bytes
                        )
                    )
            words = explain(
                record,
                comparison,
                run=self.run,
                options=options,
                computation=computation,
                retrace=Retrace(event.cause, event.leaf) if event.kind == EventKind.TRACE else None,
                location=event.location,
                place=self._place,
            )
            event.persistent_cache = words.text
            if words.hint_id:
                event.hint = join_hints(event.hint, words.hint)
                event.hint_ids = join_ids(event.hint_ids, words.hint_id)
            self._log.updated(event)
        except Exception as e:
            self._fault("persistent cache", e)
            self._said(event, f"{MISS} (not explained: an internal error, counted in jt.faults())")

    def _located(self, record: CacheKeyRecord) -> bytes | None:
        """The compiled module's bytecode with its locations, while JAX still holds the module."""
        module = record.module_ref() if record.module_ref is not None else None
        if module is None:
            return None
        try:
            from .._jax._cache_text import located_bytecode

            return located_bytecode(module)
        except Exception as e:
            self._fault("persistent cache", e)
            return None

    def _computation(self, old: bytes | None, record: CacheKeyRecord, new_bytes: bytes | None):
        if old is None:
            return None
        from .._jax._cache_text import canonical_text, located_text, module_text

        module = record.module_ref() if record.module_ref is not None else None
        if module is not None:
            new = module_text(module)
        elif record.module_located is not None:
            new = located_text(record.module_located)
        elif new_bytes is not None:
            new = canonical_text(new_bytes)  # JAX let the module go: no source lines
        else:
            return None
        return first_difference(canonical_text(old), new, self._is_library, record.arg_paths)

    def _said(self, event: Event, text: str) -> None:
        event.persistent_cache = text
        self._log.updated(event)


def _decoded_options(old: bytes | None, new: bytes | None):
    """The compile options' fields that differ (None when they cannot be decoded here)."""
    if not old or not new:
        return None
    from .._jax._cache_text import compile_options_fields

    try:
        return compile_option_changes(compile_options_fields(old), compile_options_fields(new))
    except Exception:
        return None  # decoded by another jaxlib, or not at all: the words say they differ


MAX_INDEX_NAMES = 200  # computations listed by `index_report`, the most recently seen first


def index_report(path: str) -> str:
    """The index beside a persistent cache, as text: per computation name, its keys in the order
    they were first computed, each later one with the parts that differ from the closest earlier
    key of that name, in words (the modules compared without source lines: only the index's)."""
    reader = Reader(path)
    try:
        keys = reader.keys()
        by_name: dict[str, list] = {}
        for name, seen, key in keys:
            by_name.setdefault(name, []).append((seen, key))
        lines = [
            f"Persistent compilation cache index ({path}): {len(keys)} key(s) of {len(by_name)} "
            "computation(s)"
        ]
        names = sorted(by_name, key=lambda n: -max(k.last_seen for _, k in by_name[n]))
        for name in names[:MAX_INDEX_NAMES]:
            entries = by_name[name]
            lines.append(f"  {name}: {len(entries)} key(s)")
            for i, (seen, key) in enumerate(entries):
                lines.append(f"    {_key_line(key, seen)}")
                if i:
                    lines.append(f"      {_against(reader, key, [k for _, k in entries[:i]])}")
        if len(names) > MAX_INDEX_NAMES:
            lines.append(
                f"  … {len(names) - MAX_INDEX_NAMES} more computation(s) (jt.load of the cache "
                "directory)"
            )
        return "\n".join(lines)
    finally:
        reader.close()


def _key_line(key: EarlierKey, seen: int) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(key.first_seen))
    outcome = {"written": "written", "hit": "a hit", "not_written": "not written"}.get(
        key.outcome, key.outcome
    )
    reason = f" ({key.reason})" if key.reason else ""
    where = f", for `{key.function}` at {key.location}" if key.function and key.location else ""
    return (
        f"{when}, pid {key.pid} on {key.host}{where}: computed {seen} time(s), last "
        f"{outcome}{reason}; JAX {key.facts.get('jax', '?')}"
    )


def _against(reader: Reader, key: EarlierKey, earlier: list[EarlierKey]) -> str:
    """What differs between `key` and the closest of the `earlier` keys of its name."""
    mine = dict(key.components)
    best = None
    for other in earlier:
        theirs = dict(other.components)
        differing = tuple(n for n in CACHE_KEY_COMPONENTS if n in mine and theirs.get(n) != mine[n])
        if best is None or len(differing) <= len(best[1]):
            best = (other, differing)
    other, differing = best
    computation = None
    if "computation" in differing and "jax_lib version" not in differing:
        old, new = reader.module(other), reader.module(key)
        if old is not None and new is not None:
            from .._jax._cache_text import canonical_text

            try:
                computation = first_difference(canonical_text(old), canonical_text(new))
            except Exception:
                computation = None
    options = (
        _decoded_options(other.compile_options, key.compile_options)
        if "compile_options" in differing and "jax_lib version" not in differing
        else None
    )
    name = key.key.rpartition("-")[0]
    record = CacheKeyRecord(
        key=key.key,
        module_name=name,
        components=key.components,
        facts=key.facts,
        outcome=key.outcome,
        reason=key.reason,
        eligible=True,
        seconds=None,
        cache_dir="",
        compile_options=key.compile_options,
        module_bytes=None,
        module_ref=None,
    )
    words = explain(
        record,
        CacheComparison(
            same=None, closest=other, differing=differing, entry_exists=None, module_bytes=None
        ),
        run="",
        options=options,
        computation=computation,
        location=key.location,
    )
    return words.text.removeprefix(f"{MISS}: ")


@atexit.register
def _flush_all() -> None:
    """At exit, what is queued reaches the index (bounded), so that the next run finds it."""
    for explainer in list(_ALL):
        try:
            explainer.flush()
        except Exception:
            pass
