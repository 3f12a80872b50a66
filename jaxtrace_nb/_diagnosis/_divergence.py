"""Keys of one function compared across the processes of a `jax.distributed` run: pure, no JAX.

A process's key of a trace travels as a `PortableKey`: every argument leaf under the user's path
with a *form* (what the recorder kept of the leaf for JAX's comparison, written so that two forms
are equal exactly when the kept values are: an array's abstract value as its `ArrayToken`, a static
value's plain form as its `Witness` holds it) and the text the views show. Its `digest` (SHA-256
over the paths and forms, never over the texts) is what processes exchange first; the whole key is
fetched only when digests differ, to name the leaves by comparing their forms.

What cannot travel: a static value JAX compares by identity (a function, an object without a plain
form) is another object in every process, so its form is its type and the recorder's stable name
of it (``form`` starts with ``identity:``); one kept only by a weak reference or a hash travels as
its type and text (``text:``), and a difference found there is said to be one of texts. A hash or
an address inside a token (`Local`) never travels: it travels as ``~`` beside the text or name
that stands for it, since Python randomises string hashes per process. The trace context is not
compared (JAX's axis environment holds per-process identities).

Who differs (`judge`): the processes are grouped by the digest of their n-th compared key of the
function (the processes that did not trace it within the grace period are a group of their own);
the largest group is the reference; of two groups as large, the processes that did not trace the
key (a lone retrace differs, whatever its index), and only between two that each traced a key of
their own, the group holding the lowest process index (process 0's). Every other group differs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any, NamedTuple

from .._core._values import Local
from .._core._vocabulary import LeafKind
from .._core._witness import Witness
from .._keys._signature import NODE_SUFFIX, Signature

STDERR_PREFIX = "jaxtrace_nb: divergence"
_MAX_TEXT = 200
_MAX_LEAVES_NAMED = 3
MISSING = "(no trace)"
NOT_SHOWN = "differs in metadata not shown"  # two forms differ, their texts read alike


class DivergenceError(RuntimeError):
    """Raised, with ``jt.start(divergence="raise")``, in a process of a `jax.distributed` run whose
    cache key for a jitted function differs from the other processes' (or that traced a key they did
    not), at the trace, before the traced program is compiled or run. Public as
    ``jaxtrace_nb.DivergenceError``; its message is the line the other processes print.

    `finding` is the comparison (`Finding`): the function, the processes, each differing leaf.

    Example::

        jt.start(divergence="raise")
        try:
            step(global_batch, scale)
        except jt.DivergenceError as e:
            print(e)                                   # the line every process printed
            print(e.finding.divergent[0].leaves[0])    # (path, before, after, by_text)
            raise
    """

    def __init__(self, *args, finding: Finding | None = None):
        super().__init__(*args)
        self.finding = finding


DivergenceError.__module__ = "jaxtrace_nb"


def function_id(name: str, filename: str) -> str:
    """The function as processes name it between them: its qualified name and file *name* (the
    processes of a run may run different checkouts)."""
    text = f"{name}|{os.path.basename(filename or '')}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_key(found: Finding, keys) -> str:
    """The log's `key` of the function `found` is about, among this process's function `keys`
    ("file::name"), or the finding's own."""
    for key in keys:
        file, _, name = key.rpartition("::")
        if function_id(name, file) == found.function_id:
            return key
    return found.key


class PortableKey(NamedTuple):
    """One process's key of one trace, as it travels between processes."""

    leaves: tuple  # ((path, form, text), ...) in argument order

    def digest(self) -> str:
        data = json.dumps([[p, f] for p, f, _ in self.leaves], ensure_ascii=True)
        return hashlib.sha256(data.encode()).hexdigest()[:32]

    def to_json(self) -> str:
        return json.dumps([list(leaf) for leaf in self.leaves], ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> PortableKey:
        return cls(tuple(tuple(map(str, leaf)) for leaf in json.loads(text)))


class _NotPortable(Exception):
    pass


_LOCAL = "~"  # what a `Local` (a hash, an address: this process's own) travels as

_ATOMS = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis))


def _portable(value: Any) -> str:
    """A text of a plain form, equal for two forms exactly when they are equal (``repr`` of a float
    round-trips; a frozenset's items sorted; NaN, which equals nothing, kept apart). A weak
    reference (an object compared by identity) has none."""
    t = type(value)
    if t is float and value != value:
        raise _NotPortable  # a NaN is equal only to itself in JAX's cache: another process's is not
    if t is Local:
        return _LOCAL
    if t in _ATOMS:
        return f"{t.__name__}:{value!r}"
    if t is tuple:
        return "(" + ",".join(_portable(v) for v in value) + ")"
    if t is frozenset:
        return "{" + ",".join(sorted(_portable(v) for v in value)) + "}"
    raise _NotPortable


def _leaf_form(leaf) -> str:
    kind, witness = leaf.kind, leaf.witness
    if kind == LeafKind.ARRAY:
        return "array:" + repr(tuple(leaf.token))
    if kind == LeafKind.STATIC:
        if leaf.by_identity or (type(witness) is Witness and witness.by_identity):
            return f"identity:{leaf.type_name}:{leaf.name or leaf.text}"
        if type(witness) is Witness:
            kept, value = witness.plain()
            try:
                if kept:
                    return f"static:{leaf.type_name if witness.typed else ''}:{_portable(value)}"
            except _NotPortable:
                pass
        return f"text:{leaf.type_name}:{leaf.text}"  # (its token holds its hash: `Local`)
    try:
        return f"{kind}:{_portable(_plain(leaf.token))}"
    except _NotPortable:
        return f"text:{kind}:{leaf.type_name}:{leaf.text}"


def _plain(token: Any) -> Any:
    """A token made of builtins (a named tuple as a tuple); anything else is not portable."""
    if isinstance(token, tuple):
        return tuple(_plain(v) for v in token)
    if isinstance(token, frozenset):
        return frozenset(_plain(v) for v in token)
    if type(token) is Local:
        return token
    if isinstance(token, (int, float, bool, str, bytes, type(None))):
        return token
    raise _NotPortable


def portable_key(signature: Signature) -> PortableKey:
    """The key of a trace as it travels: its argument leaves and how each argument was passed."""
    # (A node's path keeps its suffix here, so that it never meets a leaf's: `differing_leaves`.)
    leaves = [(path, *_pair(leaf)) for path, leaf in signature.leaves.items()]
    for name, how in signature.call:
        leaves.append((f"({name} passed)", f"call:{how}", how))
    return PortableKey(tuple((str(p), f, t) for p, f, t in leaves))


def _pair(leaf) -> tuple[str, str]:
    text = leaf.text if len(leaf.text) <= _MAX_TEXT else leaf.text[: _MAX_TEXT - 1] + "…"
    return _leaf_form(leaf), text


class LeafDifference(NamedTuple):
    path: str
    before: str  # the text on the reference processes ("(no such leaf)" where it has none)
    after: str  # the text on the differing processes
    by_text: bool  # compared by text only (a value that cannot travel between processes)


def differing_leaves(reference: PortableKey, other: PortableKey) -> list[LeafDifference]:
    """The leaves whose forms differ between two keys, in argument order."""
    ref = {p: (f, t) for p, f, t in reference.leaves}
    mine = {p: (f, t) for p, f, t in other.leaves}
    out = []
    for path in list(ref) + [p for p in mine if p not in ref]:
        a, b = ref.get(path), mine.get(path)
        if a is not None and b is not None and a[0] == b[0]:
            continue
        out.append(
            LeafDifference(
                path.removesuffix(NODE_SUFFIX),
                "(no such leaf)" if a is None else a[1],
                "(no such leaf)" if b is None else b[1],
                bool(a and b and a[0].startswith("text:")),
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class Group:
    """The processes that traced one key (or, `digest` None, none within the grace period)."""

    digest: str | None
    processes: tuple[int, ...]


def judge(groups: list[Group]) -> tuple[Group, list[Group]]:
    """(the reference group, the groups that differ from it): the largest group. Of two groups as
    large, the processes that did not trace the key are the reference: the others traced a key
    they did not (a lone retrace differs, whatever its process index). Only between two groups
    that each traced a key of their own does the lower process index decide."""
    ordered = sorted(
        groups,
        key=lambda g: (
            -len(g.processes),
            g.digest is not None,
            min(g.processes, default=math.inf),
        ),
    )
    return ordered[0], ordered[1:]


@dataclasses.dataclass(frozen=True)
class Divergent:
    """One group of processes that differs from the reference, with what differs."""

    processes: tuple[int, ...]
    traced: bool  # False: these processes did not trace the key within the grace period
    leaves: tuple[LeafDifference, ...]
    against: str = ""  # what `leaves` were compared with, where not the reference's own key


@dataclasses.dataclass(frozen=True)
class Finding:
    """A function whose n-th compared key is not the same in every process."""

    function: str
    location: str
    key: str  # the log's key of the function in the process that found it ("file::name")
    function_id: str  # the function as processes name it between them (`function_id`)
    number: int  # the n-th key of the function compared across processes
    reference: tuple[int, ...]  # the processes of the reference key (`judge`)
    reference_traced: bool
    divergent: tuple[Divergent, ...]
    grace_s: float
    # the processes that did not trace the key were known to have gone past it (they traced a
    # later key, or stopped) before the grace period ended
    moved_on: bool = False
    withdrawn: bool = False  # a late key arrived and matched: this finding was a false alarm

    @property
    def ident(self) -> tuple:
        if self.withdrawn:
            return (self.function_id, self.number, "withdrawn")
        return (self.function_id, self.number, self.reference_traced)

    def differs(self, process: int) -> bool:
        return any(process in d.processes for d in self.divergent)

    def message(self) -> str:
        """The one line every process prints (and `DivergenceError` says)."""
        if self.withdrawn:
            return (
                f"{STDERR_PREFIX} in `{self.function}`"
                + (f" ({self.location})" if self.location else "")
                + f", compared key #{self.number}: withdrawn: every process has traced the same "
                f"key (one came after {self.grace_s:g} s); the divergence reported for it was a "
                "false alarm"
            )
        parts = []
        for d in self.divergent:
            parts.append(_divergent_text(self, d))
        where = f" ({self.location})" if self.location else ""
        return (
            f"{STDERR_PREFIX} in `{self.function}`{where}, compared key #{self.number}: "
            + "; ".join(parts)
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Finding:
        data = json.loads(text)
        divergent = tuple(
            Divergent(
                processes=tuple(d["processes"]),
                traced=d["traced"],
                leaves=tuple(LeafDifference(*leaf) for leaf in d["leaves"]),
                against=d.get("against", ""),
            )
            for d in data["divergent"]
        )
        return cls(
            function=data["function"],
            location=data["location"],
            key=data["key"],
            function_id=data["function_id"],
            number=int(data["number"]),
            reference=tuple(data["reference"]),
            reference_traced=data["reference_traced"],
            divergent=divergent,
            grace_s=float(data["grace_s"]),
            moved_on=bool(data.get("moved_on", False)),
            withdrawn=bool(data.get("withdrawn", False)),
        )


def processes_text(processes) -> str:
    processes = sorted(processes)
    if len(processes) == 1:
        return f"process {processes[0]}"
    if len(processes) > 8:
        return f"{len(processes)} processes ({', '.join(map(str, processes[:6]))}, …)"
    return "processes " + ", ".join(map(str, processes))


def _divergent_text(f: Finding, d: Divergent) -> str:
    ref, mine = processes_text(f.reference), processes_text(d.processes)
    if not d.traced:
        return (
            f"{mine} did not trace it{_absent(f)} (traced by {ref})"
            + (f": {_leaves_text(d.leaves, mine, ref, reverse=True)}" if d.leaves else "")
            + (f" {d.against}" if d.against else "")
        )
    if not f.reference_traced:
        head = f"{mine} traced it, {ref} did not{_absent(f)}"
    else:
        head = f"{mine} traced another key than {ref}"
    if not d.leaves and d.against:  # (nothing known to name them against)
        return f"{head} {d.against}"
    if not d.leaves:
        return (
            head
            + " (every argument leaf compared equal: the difference is in what is not compared)"
        )
    return f"{head}: {_leaves_text(d.leaves, ref, mine)}" + (f" {d.against}" if d.against else "")


def _absent(f: Finding) -> str:
    """How a process that did not trace the key was found not to have."""
    if f.moved_on:
        return ", and has since gone past it"
    return f" within {f.grace_s:g} s"


def _leaves_text(leaves, ref: str, mine: str, reverse: bool = False) -> str:
    """The differing leaves as "`path`: before on … → after on …"; a leaf whose two texts read
    alike (its difference lies in what the texts leave out) is never shown as one."""
    visible = [leaf for leaf in leaves if leaf.before != leaf.after]
    unseen = len(leaves) - len(visible)
    if not visible:
        first = f"`{leaves[0].path}`"
        if unseen == 1:
            return f"{first}: {NOT_SHOWN}"
        return f"{first} and {unseen - 1} more leaves: each {NOT_SHOWN}"
    shown = []
    for leaf in visible[:_MAX_LEAVES_NAMED]:
        before, after = (leaf.after, leaf.before) if reverse else (leaf.before, leaf.after)
        a, b = (mine, ref) if reverse else (ref, mine)
        note = " (compared as text)" if leaf.by_text else ""
        shown.append(f"`{leaf.path}`: {before} on {a} → {after} on {b}{note}")
    if len(visible) > _MAX_LEAVES_NAMED:
        shown.append(f"and {len(visible) - _MAX_LEAVES_NAMED} more leaves")
    if unseen:
        shown.append(
            f"and {unseen} {'leaf that' if unseen == 1 else 'leaves that each'} {NOT_SHOWN}"
        )
    return ", ".join(shown)


def finding(
    *,
    function: str,
    location: str,
    key: str,
    function_id: str,
    number: int,
    groups: list[Group],
    keys: dict,
    grace_s: float,
    previous: PortableKey | None = None,
    moved_on: bool = False,
) -> Finding | None:
    """The finding of one comparison (None when every process traced the same key).

    `groups`: the processes by digest (digest None: did not trace within the grace period);
    `keys`: digest -> `PortableKey` of the keys fetched; `previous`: where only processes that
    traced no key are the reference, the key they share (this process's last compared key, when
    every process agreed on it), against which the leaves are named."""
    if len(groups) < 2:
        return None
    reference, others = judge(groups)
    divergent = []
    for g in others:
        against = ""
        if reference.digest is not None and g.digest is not None:
            leaves = _diff(keys.get(reference.digest), keys.get(g.digest))
        elif g.digest is None:  # they did not trace: named against their last key, if known
            leaves = _diff(previous, keys.get(reference.digest))
            against = "" if previous is not None else "(their last key is not known here)"
        else:  # the reference traced nothing new: against the key every process last agreed on
            leaves = _diff(previous, keys.get(g.digest))
            against = (
                f"(against key #{number - 1}, which every process traced)"
                if previous is not None
                else "(no earlier key every process agreed on is known here)"
            )
        divergent.append(Divergent(g.processes, g.digest is not None, tuple(leaves), against))
    return Finding(
        function=function,
        location=location,
        key=key,
        function_id=function_id,
        number=number,
        reference=reference.processes,
        reference_traced=reference.digest is not None,
        divergent=tuple(divergent),
        grace_s=grace_s,
        moved_on=moved_on,
    )


def withdrawal(processes: int, **about) -> Finding:
    """The withdrawal of a finding (`about`: its ``function``, ``location``, ``key``,
    ``function_id``, ``number`` and ``grace_s``): every one of the `processes` traced the same key,
    one of them after the grace period."""
    return Finding(
        **about,
        reference=tuple(range(processes)),
        reference_traced=True,
        divergent=(),
        withdrawn=True,
    )


def _diff(a: PortableKey | None, b: PortableKey | None) -> list[LeafDifference]:
    if a is None or b is None:
        return []
    return differing_leaves(a, b)


def event_fields(f: Finding, process: int | None) -> dict:
    """The log's fields of a divergence seen from `process`: the first differing leaf, its value on
    the reference processes (`before`) and on the differing ones (`after`), and the line."""
    leaf = before = after = None
    for d in f.divergent:
        if d.leaves:
            visible = [x for x in d.leaves if x.before != x.after]
            first = visible[0] if visible else d.leaves[0]
            leaf = first.path
            before, after = (
                (first.after, first.before) if not d.traced else (first.before, first.after)
            )
            if not visible:  # (texts that read alike are never shown as a change)
                before = after = None
            if process is not None and process in d.processes:
                break
    return {
        "function": f.function,
        "location": f.location or None,
        "key": f.key,
        "trace_number": f.number,
        "leaf": leaf,
        "before": before,
        "after": after,
        "explanation": f.message(),
    }
