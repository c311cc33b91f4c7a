"""API tokens this process has read: token hash -> project, trusted for a while."""

from __future__ import annotations

import time

from services.lru import LRU
from services.store import Store
from services.store import repository as repo

#: tokens kept at most (least recently used dropped first)
TOKENS = 10_000


class TokenCache:
    """token hash -> project, trusted for ``ttl`` seconds after it was read from the store.

    A revoked (deleted) token therefore stops working on every replica within ``ttl``
    seconds of the deletion's commit; unknown tokens are never cached (a new one works
    at once).
    """

    def __init__(self, maxsize: int = TOKENS) -> None:
        self._entries: LRU[tuple[str, str], tuple[str, float]] = LRU(maxsize)

    def get(self, store: Store, token: str, ttl: float) -> str | None:
        hit = self.cached(store, token)
        if hit is not None:
            return hit
        with store.read() as conn:
            project_id = repo.project_for_token(conn=conn, token=token)
        key = (store.url, repo.hash_token(token))
        if project_id is None:
            self._entries.pop(key)
        elif ttl > 0:
            self._entries[key] = (project_id, time.monotonic() + ttl)
        return project_id

    def cached(self, store: Store, token: str) -> str | None:
        """The cached project of a token, without a store lookup (None when not cached)."""
        hit = self._entries.get((store.url, repo.hash_token(token)))
        return hit[0] if hit is not None and hit[1] > time.monotonic() else None

    def forget(self, token_hash_prefix: str) -> None:
        """Drop cached entries of a revoked token in this process at once."""
        for key in [k for k in self._entries if k[1].startswith(token_hash_prefix)]:
            self._entries.pop(key)
