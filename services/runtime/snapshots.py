"""The store as the re-estimation worker and the requests read it: judgments per key read
incrementally, snapshots stored and decoded once per version, answers kept per snapshot.

:class:`SnapshotCache` gives the worker its ``load_fn`` / ``publish_fn`` / ``latest_fn``
(:mod:`services.runtime.refresher`) and lets a request read the newest snapshot without
fitting anything. It owns its caches, each bounded by :class:`~services.lru.LRU` but the
judgments of the keys this process re-estimates (one frame per key it fits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from adaptive.estimation.snapshot import FAST, Snapshot, decode_snapshot, encode_snapshot
from adaptive.estimation.streaming import Source
from services.lru import LRU
from services.store import Store
from services.store import repository as repo

Key = tuple[str, str]  # (project_id, dimension)

_COLUMNS = ["item_id", "system_a", "system_b", "annotator_id", "winner", "screen_id", "shown_first"]
_SCHEMA = {"seq": pl.Int64, **dict.fromkeys(_COLUMNS, pl.Utf8)}


@dataclass
class _Cached:
    frame: pl.DataFrame
    last_seq: int


class SnapshotCache:
    """One process's view of the stored judgments and snapshots (see the module's docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._frames: dict[Key, _Cached] = {}
        self._snapshots: LRU[tuple[str, str, int], Snapshot] = LRU(16)
        self._answers: LRU[tuple[Any, ...], Any] = LRU(64)

    # -- the worker's view of the store

    def load_source(self, key: Key) -> Source | None:
        """Judgments of (project, dimension), read incrementally by sequence number.

        On PostgreSQL a transaction with a lower sequence number can commit after
        one with a higher number, so the cached count is checked and the cache
        rebuilt when rows were missed.
        """
        project_id, dimension = key
        cached = self._frames.get(key)
        after = cached.last_seq if cached else 0
        with self.store.read() as conn:
            rows, last_seq = repo.fetch_judgment_columns(
                conn=conn, project_id=project_id, dimension=dimension, after_seq=after
            )
            total = repo.count_judgments(conn=conn, project_id=project_id, dimension=dimension)
            systems = tuple(
                s["system_id"] for s in repo.list_systems(conn=conn, project_id=project_id)
            )
            new = pl.DataFrame(rows, schema=_SCHEMA, orient="row") if rows else None
            frame = cached.frame if cached else pl.DataFrame(schema=_SCHEMA)
            if new is not None:
                frame = pl.concat([frame, new])
            if frame.height != total:
                rows, last_seq = repo.fetch_judgment_columns(
                    conn=conn, project_id=project_id, dimension=dimension, after_seq=0
                )
                frame = pl.DataFrame(rows, schema=_SCHEMA, orient="row")
        if frame.height == 0:
            return None
        self._frames[key] = _Cached(frame=frame, last_seq=last_seq)
        return Source(
            judgments=frame.with_columns(pl.lit(dimension).alias("dimension")),
            dimension=dimension,
            systems=systems,
            num_judgments=frame.height,
            last_seq=last_seq,
        )

    def publish(self, key: Key, snapshot: Snapshot) -> int | None:
        """Store a snapshot; None when a newer one of its method is stored (another replica)."""
        project_id, dimension = key
        payload = encode_snapshot(snapshot)
        with self.store.write() as conn:
            version = repo.save_snapshot(
                conn=conn,
                project_id=project_id,
                dimension=dimension,
                num_judgments=snapshot.num_judgments,
                last_seq=snapshot.last_seq,
                method=snapshot.method,
                fit_seconds=snapshot.fit_seconds,
                diagnostics=snapshot.diagnostics,
                payload=payload,
            )
            repo.prune_snapshots(conn=conn, project_id=project_id, dimension=dimension)
        return version

    def latest_fast(self, key: Key) -> Snapshot | None:
        """The newest stored fast snapshot of ``key`` (the worker's warm start after a restart)."""
        return self.snapshot(*key, method=FAST)

    # -- what requests read

    def snapshot(
        self, project_id: str, dimension: str, method: str | None = None
    ) -> Snapshot | None:
        """The newest stored snapshot (decoded once per version and cached)."""
        with self.store.read() as conn:
            meta = repo.latest_snapshot_meta(
                conn=conn, project_id=project_id, dimension=dimension, method=method
            )
            if meta is None:
                return None
            cache_key = (project_id, dimension, int(meta["version"]))
            hit = self._snapshots.get(cache_key)
            if hit is not None:
                return hit
            payload = repo.snapshot_payload(
                conn=conn, project_id=project_id, dimension=dimension, version=meta["version"]
            )
        snapshot = decode_snapshot(
            payload,
            dimension=dimension,
            version=int(meta["version"]),
            num_judgments=int(meta["num_judgments"]),
            last_seq=int(meta["last_seq"]),
            method=meta["method"],
            created_at=meta["created_at"].timestamp(),
            fit_seconds=float(meta["fit_seconds"]),
            diagnostics=dict(meta["diagnostics"]),
        )
        self._snapshots[cache_key] = snapshot
        return snapshot

    def answer(
        self,
        project_id: str,
        snapshot: Snapshot,
        options: tuple[Any, ...],
        compute: Callable[[], Any],
    ) -> Any:
        """``compute()``, an answer that depends on ``snapshot`` and ``options`` only, kept
        per snapshot version: a snapshot's significance table is read many times between
        two re-estimations (its interval ends' Monte Carlo errors are most of its cost)."""
        key = (project_id, snapshot.dimension, snapshot.version, snapshot.method, options)
        return self._answers.setdefault(key, compute)


__all__ = ["Key", "SnapshotCache"]
