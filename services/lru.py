"""One bounded cache for every long-lived part of the service: least recently used out first.

The service keeps decoded snapshots, prepared recommender states, running tallies, rate
buckets and the cells of leases it has read; each is an :class:`LRU` owned by the object
that lives as long as it should (the store, the service's runtime), never a module global.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(_value: object) -> int:
    return 1


class LRU(Generic[K, V]):
    """A thread-safe mapping of at most ``maxsize`` weight (one per entry unless ``weight``
    says otherwise) that drops the least recently read or written entries first.

    Example:
        >>> cache = LRU[str, int](2)
        >>> cache["a"] = 1; cache["b"] = 2; cache.get("a"); cache["c"] = 3
        1
        >>> sorted(cache)
        ['a', 'c']
        >>> cells = LRU[str, list[int]](3, weight=len)
        >>> cells["x"] = [1, 2]; cells["y"] = [3, 4]; list(cells)
        ['y']
    """

    def __init__(self, maxsize: int, *, weight: Callable[[V], int] = _one) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be positive, not {maxsize}")
        self.maxsize = maxsize
        self._weight = weight
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key`` (now the most recent), else ``default``."""
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            return self._entries[key]

    def __setitem__(self, key: K, value: V) -> None:
        with self._lock:
            self._put(key, value)

    def _put(self, key: K, value: V) -> None:
        """Store ``value`` as the most recent and drop the oldest beyond the bound (call
        with the lock held)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._total -= self._weight(old)
        self._entries[key] = value
        self._total += self._weight(value)
        while self._total > self.maxsize and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._total -= self._weight(dropped)

    def setdefault(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, or ``make()`` stored under it (``make`` runs outside the
        lock; when another thread stored a value first, theirs is kept and returned)."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = make()
        with self._lock:
            if key in self._entries:  # another thread stored it meanwhile: keep theirs
                self._entries.move_to_end(key)
                return self._entries[key]
            self._put(key, value)
            return value

    def pop(self, key: K) -> V | None:
        """Drop ``key``; its value, or None when it was not kept."""
        with self._lock:
            value = self._entries.pop(key, None)
            if value is not None:
                self._total -= self._weight(value)
            return value

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        """The keys, least recent first (a copy: safe while others write)."""
        with self._lock:
            return iter(list(self._entries))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0
