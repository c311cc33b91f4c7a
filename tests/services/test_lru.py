"""The service's one bounded cache: least recently used out first, by count or by weight."""

from __future__ import annotations

import threading

import pytest

from services.lru import LRU


def test_the_least_recently_read_entry_goes_first():
    cache = LRU[str, int](2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "b" is now the least recent
    cache["c"] = 3
    assert list(cache) == ["a", "c"] and "b" not in cache and len(cache) == 2


def test_a_weighted_cache_keeps_its_total_weight_bounded_but_never_drops_the_newest():
    cells = LRU[str, list[int]](5, weight=len)
    cells["x"], cells["y"] = [1, 2, 3], [4, 5]
    assert list(cells) == ["x", "y"]
    cells["z"] = [6]
    assert list(cells) == ["y", "z"]
    cells["big"] = list(range(9))  # heavier than the bound alone: kept, the rest dropped
    assert list(cells) == ["big"]
    cells["y"] = [1]
    assert list(cells) == ["y"]


def test_setdefault_builds_once_and_keeps_the_first_value_stored():
    cache = LRU[str, object](4)
    made = []
    first = cache.setdefault("k", lambda: made.append(1) or "one")
    again = cache.setdefault("k", lambda: made.append(2) or "two")
    assert first == again == "one" and made == [1]


def test_threads_writing_at_once_leave_it_within_its_bound():
    cache = LRU[int, int](50)

    def write(offset: int) -> None:
        for i in range(2000):
            cache[offset + i % 120] = i
            cache.get(offset + (i * 7) % 120)

    threads = [threading.Thread(target=write, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 50


def test_a_cache_needs_room_for_one_entry():
    with pytest.raises(ValueError, match="maxsize must be positive"):
        LRU[str, int](0)
