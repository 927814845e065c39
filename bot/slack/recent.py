"""`Recent`: what the notifier remembers of what it posted, a bounded amount, the oldest forgotten first."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

REMEMBERED = 2000
"""Runs, notices and cards a notifier remembers; the oldest are forgotten first."""

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """A dict that forgets its oldest entries beyond `limit`; callers hold the notifier's lock."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self.limit, self._items = limit, OrderedDict[K, V]()

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def pop(self, key: K) -> V | None:
        return self._items.pop(key, None)
