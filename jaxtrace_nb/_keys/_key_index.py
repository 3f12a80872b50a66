"""The keys JAX holds for one function, indexed so that a retrace's closest key is found among few
candidates (`closest_held`), with the answer `_signature.search` gives by comparing every key.

Reading the log after N retraces of one function made N diagnoses that each compared every earlier
key: O(N²). The index keeps, per key, a *digest* of each component: the trace context's values,
and each leaf's (an array's shape, dtype and weak type; a static value's hash; a node's token).
Two components JAX's ``==`` finds equal have equal digests (equal values hash equal: the contract
JAX's own dict lookup relies on), so a key whose digests differ at k components differs from the
new key in at least k. Digests only *select* candidates; JAX's comparison (`_signature._score`,
``same_for_jax``) decides each candidate's distance and rank, as in the full search.

Keys are grouped by *layout* (the function, the ways of passing, the trace context's length, each
leaf's path and kind), and within a layout looked up by their digests: all of them (distance 0),
and all but one block of components (distance 1 there). A block holds components of one layer
(context, input pytree, types), so the keys of a bucket at distance one share one rank. A
bucket is read newest first and left once `MAX_TIES` + 1 keys in it are at its least distance:
any older key there can neither be closer nor among the ties named. The keys a lookup cannot
place (another layout, a digest distance of two or more) are compared in full only where their
lower bound does not pass the best found.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from .._core._vocabulary import LeafKind
from .._core._witness import Witness
from ._signature import (
    Found,
    Signature,
    _score,
    call_changes,
    context_changes,
    diff_leaves,
    same_function,
    search,
)

MAX_TIES = 16  # ties named, newest first (the explanations read up to 16)
_MAX_BLOCKS = 32  # masked lookups per key: a layout's components in at most this many blocks
_MASK = (1 << 64) - 1
_CONTEXT, _TREE, _TYPES = 0, 1, 2  # the layers, the order of `_score`'s rank


class HeldKeys(Sequence):
    """The keys JAX held for a function at a trace (`raw`: signatures or `DeferredSignature`s,
    oldest first), each made (`get`) when first read.

    >>> len(HeldKeys(()))
    0
    """

    __slots__ = ("raw",)

    def __init__(self, raw: tuple):
        self.raw = raw

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [s.get() for s in self.raw[i]]
        return self.raw[i].get()


class _Layout:
    """What keys of one layout share: their leaves' paths and kinds, and their blocks."""

    __slots__ = ("id", "function", "call", "kinds", "blocks", "block_of", "keys")

    def __init__(self, layout_id: int, sig: Signature, function: object):
        self.id, self.function, self.call = layout_id, function, sig.call
        self.kinds = {path: leaf.kind for path, leaf in sig.leaves.items()}
        layers = [_CONTEXT] + [
            _TYPES if leaf.kind == LeafKind.ARRAY else _TREE for leaf in sig.leaves.values()
        ]
        by_layer: dict = {}
        for position, layer in enumerate(layers):
            by_layer.setdefault(layer, []).append(position)
        per_block = max(1, -(-len(layers) // _MAX_BLOCKS))
        self.blocks = [
            (layer, positions[i : i + per_block])
            for layer, positions in sorted(by_layer.items())
            for i in range(0, len(positions), per_block)
        ]
        self.block_of = [0] * len(layers)
        for b, (_, positions) in enumerate(self.blocks):
            for position in positions:
                self.block_of[position] = b
        self.keys: list = []  # indices of the keys of this layout, oldest first


def _layout_key(sig: Signature) -> tuple:
    n_context = len(sig.context_values) if sig.context_values else -1
    return (
        sig.function_token,
        sig.call,
        n_context,
        tuple((path, leaf.kind) for path, leaf in sig.leaves.items()),
    )


_UNPLACED = object()  # a component no digest stands for: its key is compared in full


def _digests(sig: Signature) -> list | None:
    """Each component's digest (equal under JAX's ``==`` ⇒ equal digests), or None where one
    cannot be made (the key is then compared in full at every search)."""
    values = sig.context_values
    if values and len(values) == len(sig.context):
        try:
            context = hash(values)
        except Exception:
            return None
    elif values:
        return None
    else:
        context = ("texts", sig.context)
    out = [context]
    for leaf in sig.leaves.values():
        kind, witness, token = leaf.kind, leaf.witness, leaf.token
        if kind == LeafKind.ARRAY:
            # JAX's abstract values are equal only with equal shape, dtype and weak type
            digest = token[1:4] if len(token) >= 4 and token[0] == "array" else _UNPLACED
        elif kind == LeafKind.STATIC:
            # (an object kept itself may be mutated between traces, its hash with it, and still be
            # equal to itself: no digest stands for it)
            digest = (
                ("w", witness.hash)
                if type(witness) is Witness and witness.object_ref is None
                else _UNPLACED
            )
        elif kind == LeafKind.NODE or witness is None:
            digest = token  # (a node's witness is equal only where its token is: its type, keys)
        else:
            digest = _UNPLACED
        if digest is _UNPLACED:
            return None
        out.append(digest)
    return out


def _hashes(digests: list) -> list | None:
    try:
        return [hash((position, d)) & _MASK for position, d in enumerate(digests)]
    except Exception:  # (an unhashable token)
        return None


class _Placed:
    """A key's place in the index: its layout, full digest and block lookups."""

    __slots__ = ("layout", "full", "masked")

    def __init__(self, layout: _Layout, digests: list, hashes: list):
        self.layout = layout
        self.full = (layout.id, tuple(digests))
        total = sum(hashes) & _MASK
        block_sums = [0] * len(layout.blocks)
        for position, h in enumerate(hashes):
            block_sums[layout.block_of[position]] += h
        self.masked = [
            (layout.id, b, (total - s) & _MASK) for b, s in enumerate(block_sums)
        ]  # (equal digests outside block b ⇒ equal entries)


class KeyIndex:
    """The index of one function's keys (`raw`, oldest first), extended as more are held."""

    def __init__(self, raw: tuple):
        self.raw: tuple = ()
        self.layouts: dict = {}  # layout key -> `_Layout`
        self.buckets: dict = {}  # full digests or a block lookup -> key indices, oldest first
        self.unplaced: list = []  # keys compared in full at every search
        self.positions: dict = {}  # id of each key in `raw` -> its index
        self.extend(raw)

    def extend(self, raw: tuple) -> None:
        positions = self.positions
        for i in range(len(self.raw), len(raw)):
            positions[id(raw[i])] = i
            sig = raw[i].get()
            placed = self._place(sig)
            if placed is None:
                self.unplaced.append(i)
                continue
            placed.layout.keys.append(i)
            buckets = self.buckets
            for entry in (placed.full, *placed.masked):
                found = buckets.get(entry)
                if found is None:
                    buckets[entry] = [i]
                else:
                    found.append(i)
        self.raw = raw

    def _place(self, sig: Signature, add: bool = True) -> _Placed | None:
        digests = _digests(sig)
        hashes = _hashes(digests) if digests is not None else None
        if hashes is None:
            return None
        try:
            key = _layout_key(sig)
            layout = self.layouts.get(key)
        except Exception:  # (an unhashable function token or call)
            return None
        if layout is None:
            if not add:
                return _Placed(_Layout(-1, sig, key[0]), digests, hashes)
            layout = self.layouts[key] = _Layout(len(self.layouts), sig, key[0])
        return _Placed(layout, digests, hashes)

    def search(self, new: Signature, first: int, held: Sequence) -> Found:
        """The closest key to `new` among keys `first` … `first + len(held) - 1` of the index
        (`held`: those keys, made), as `_signature.search` finds it, its ties up to `MAX_TIES`."""
        end = first + len(held)
        query = _Query(new, first, end, self.raw)
        placed = self._place(new, add=False)
        if placed is None:
            found = search(new, held)
            return found._replace(ties=found.ties[:MAX_TIES])
        own = placed.layout
        buckets = self.buckets
        query.bucket(buckets.get(placed.full, ()), 0, (0, 0, 0))
        for b, entry in enumerate(placed.masked):
            layer = own.blocks[b][0]
            rank = tuple(int(layer == at) for at in (_CONTEXT, _TREE, _TYPES))
            query.bucket(buckets.get(entry, ()), 1, rank)
        if own.id >= 0 and (query.best is None or query.best >= 2):
            query.scan(own.keys)  # the keys two or more digests away
        others = []
        for layout in self.layouts.values():
            if layout is not own:
                others.append((_layout_bound(new, own, layout), layout.id, layout))
        for bound, _, layout in sorted(others, key=lambda item: item[:2]):
            if query.best is not None and bound > query.best:
                break
            query.bucket(layout.keys, bound, None)
        query.scan(self.unplaced)
        return query.found(held)


def _layout_bound(new: Signature, own: _Layout, other: _Layout) -> int:
    """The components certain to differ between a key of layout `own` and one of `other`: leaves
    in one only or of another kind, ways of passing, the function."""
    kinds, theirs = own.kinds, other.kinds
    n = sum(1 for path in kinds if path not in theirs) + sum(
        1 for path, kind in theirs.items() if kinds.get(path, kind) != kind or path not in kinds
    )
    if own.call != other.call:
        n += len(call_changes(new, Signature((), (), {}, call=other.call)))
    return n + (new.function_path is None and not same_function(own.function, other.function))


class _Query:
    """One search's candidates so far: (score, rank, -index) of those as close as the best."""

    __slots__ = ("new", "first", "end", "raw", "best", "ranked", "seen")

    def __init__(self, new: Signature, first: int, end: int, raw: tuple):
        self.new, self.first, self.end, self.raw = new, first, end, raw
        self.best, self.ranked, self.seen = None, [], set()

    def _judge(self, i: int) -> tuple | None:
        if i in self.seen:
            return None
        self.seen.add(i)
        limit = self.best if self.best is not None else 1 << 30
        score, rank = _score(self.new, self.raw[i].get(), limit)
        if score > limit:
            return None
        if score < limit:
            self.best, self.ranked = score, []
        self.best = score
        self.ranked.append((rank, -i))
        return score, rank

    def bucket(self, keys: list, least: int, rank: tuple | None) -> None:
        """The keys of a bucket, newest first, none closer than `least` (at `least`: with `rank`,
        or one rank for the whole bucket where None): left after `MAX_TIES` + 1 at `least`."""
        at_least, first, end = 0, self.first, self.end
        for j in range(len(keys) - 1, -1, -1):
            if self.best is not None and least > self.best:
                return
            i = keys[j]
            if i >= end:
                continue
            if i < first:
                return  # (older keys JAX no longer held)
            judged = self._judge(i)
            if judged is not None and judged[0] == least and (rank is None or judged[1] == rank):
                at_least += 1
                if at_least > MAX_TIES:
                    return

    def scan(self, keys: list) -> None:
        first, end = self.first, self.end
        for j in range(len(keys) - 1, -1, -1):
            i = keys[j]
            if i < first:
                return
            if i < end:
                self._judge(i)

    def found(self, held: Sequence) -> Found:
        ranked = sorted(self.ranked)
        _, index = ranked[0]
        index = -index - self.first
        old = held[index]
        ties = sorted((-i - self.first for _, i in ranked[1:]), reverse=True)[:MAX_TIES]
        return Found(
            index=index,
            changes=diff_leaves(self.new, old),
            context=context_changes(self.new, old),
            score=self.best,
            ties=tuple(ties),
        )


_INDEXES: list = []  # the kept indexes, the most recently used last
_MAX_INDEXES = 16
_LOCK = threading.Lock()


def closest_held(new: Signature, held: HeldKeys) -> Found:
    """The key of `held` closest to `new`, as `_signature.search` finds it (its ties up to
    `MAX_TIES`), from an index of the function's keys kept between searches.

    >>> from jaxtrace_nb._keys._signature import array_leaf
    >>> a, b = (Signature(("id", 1), (), {"x": array_leaf((n,), "float32")}) for n in (2, 3))
    >>> closest_held(b, HeldKeys((a,))).changes[0].path
    'x'
    """
    raw = held.raw
    if not raw:
        raise ValueError("no key held")
    with _LOCK:
        index, first = _index_for(raw)
        return index.search(new, first, held)


def _index_for(raw: tuple) -> tuple[KeyIndex, int]:
    """The kept index whose keys `raw` continues (where `raw[0]` is in it), extended; or a new one.
    A function's held keys grow at the end, and lose their oldest to the session's bound."""
    for at in range(len(_INDEXES) - 1, -1, -1):
        index = _INDEXES[at]
        kept = index.raw
        first = index.positions.get(id(raw[0]))
        if first is None or kept[first] is not raw[0]:
            continue
        n = min(len(kept) - first, len(raw))
        if kept[first : first + n] != raw[:n]:  # (the same objects: compared by identity first)
            continue
        if 2 * first > len(kept):  # most of it dropped (the session's bound): made again
            del _INDEXES[at]
            break
        if len(raw) > n:
            index.extend(kept + raw[n:])
        _INDEXES.append(_INDEXES.pop(at))
        return index, first
    index = KeyIndex(raw)
    if len(_INDEXES) >= _MAX_INDEXES:
        del _INDEXES[0]
    _INDEXES.append(index)
    return index, 0


def forget() -> None:
    """Drop every kept index (the session's reset)."""
    with _LOCK:
        _INDEXES.clear()
