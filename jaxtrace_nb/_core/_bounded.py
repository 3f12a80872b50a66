"""The one way jaxtrace_nb keeps a cache: a dict that forgets everything when it is full.

Every cache here holds values derived from something it can derive again (a leaf of an
abstract value, a file's verdict, a plan of a treedef), so forgetting costs a recomputation,
never a wrong answer, and memory stays bounded whatever the program does. Lookups are plain
dict lookups; only `put` (a miss) runs Python.
"""

from __future__ import annotations

from typing import Any


class Bounded(dict):
    """A dict of at most `limit` entries: `put` into a full one empties it first.

    Example::

        leaves = Bounded(4096)
        leaf = leaves.get(aval) or leaves.put(aval, make_leaf(aval))
    """

    __slots__ = ("limit",)

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def put(self, key: Any, value: Any) -> Any:
        """Keep `value` under `key` (emptying a full cache first); returns `value`."""
        if len(self) >= self.limit and key not in self:
            self.clear()
        self[key] = value
        return value


class BoundedSet(set):
    """A set of at most `limit` items: `add` to a full one empties it first."""

    __slots__ = ("limit",)

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def add(self, item: Any) -> None:
        if len(self) >= self.limit and item not in self:
            self.clear()
        super().add(item)
