"""The re-estimation worker's events, logged and stored: :class:`RecordingRefresher` hands
every event to a queue, and :class:`EventWriter`'s thread stores them in batches (readable
at ``GET /projects/{id}/events``), each named by the replica that recorded it."""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
from datetime import UTC, datetime
from typing import Any

from services.runtime.refit_checks import COMPILE_LIMIT_SECONDS
from services.runtime.refresher import Refresher, RefreshEvent
from services.store import Store
from services.store import repository as repo

log = logging.getLogger("evalset.refit")
#: this process, as a stored event names it
REPLICA = f"{socket.gethostname()}:{os.getpid()}"
#: events stored in one transaction at most
BATCH = 500
#: events stored between two prunings of the stored events
PRUNE_EVERY = 1000


def _alarming(event: RefreshEvent) -> bool:
    """A fit that failed or was rejected, a compile past the limit, a diverging live path."""
    if event.kind in ("rejected", "failed"):
        return True
    if event.kind == "compiled":
        return event.seconds > COMPILE_LIMIT_SECONDS
    return event.kind == "compared" and '"diverging": true' in event.detail


class RecordingRefresher(Refresher):
    """A :class:`Refresher` whose events (every fit, its outcome, why it was rejected) are
    logged and handed to ``sink`` (the service stores them: ``GET /projects/{id}/events``)."""

    def __init__(self, *, sink: queue.Queue[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sink = sink

    def _record(self, event: RefreshEvent) -> None:
        super()._record(event)
        level = logging.WARNING if _alarming(event) else logging.INFO
        log.log(
            level,
            "%s %s %s v%s n=%s %.2fs %s",
            event.key,
            event.method,
            event.kind,
            event.version,
            event.num_judgments,
            event.seconds,
            event.detail,
        )
        self._sink.put((event, datetime.now(UTC)))

    def threads_alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)


def event_rows(batch: list[tuple[RefreshEvent, datetime]]) -> list[dict[str, Any]]:
    """The stored rows of ``batch``'s events of (project, dimension) keys (others are skipped),
    their texts cut to the columns' sizes."""
    rows = []
    for event, at in batch:
        key = event.key
        if not (isinstance(key, tuple) and len(key) == 2):
            continue
        rows.append(
            {
                "project_id": str(key[0]),
                "dimension": str(key[1]),
                "created_at": at,
                "kind": event.kind[:32],
                "method": event.method[:16],
                "version": int(event.version or 0),
                "num_judgments": int(event.num_judgments or 0),
                "seconds": float(event.seconds),
                "detail": event.detail[:10_000],
                "replica": REPLICA,
            }
        )
    return rows


class EventWriter:
    """The thread that stores the events put on :attr:`queue`, until ``stopping`` is set and
    the queue is empty (the events of a stopping refresher are stored too)."""

    def __init__(self, store: Store, stopping: threading.Event) -> None:
        self.store = store
        self.queue: queue.Queue[Any] = queue.Queue()
        self._stopping = stopping
        self._thread: threading.Thread | None = None
        self._written = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="event-writer", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                first = self.queue.get(timeout=0.5)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < BATCH:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            self._store(event_rows(batch))

    def _store(self, rows: list[dict[str, Any]]) -> None:
        """Store ``rows``, and prune each of their projects' events every :data:`PRUNE_EVERY`."""
        try:
            with self.store.write() as conn:
                repo.add_events(conn=conn, events=rows)
                self._written += len(rows)
                if self._written >= PRUNE_EVERY:
                    self._written = 0
                    for project_id in {r["project_id"] for r in rows}:
                        repo.prune_events(conn=conn, project_id=project_id)
        except Exception:  # the store may be briefly unavailable; the log has them
            log.exception("could not store %d refit events", len(rows))


__all__ = ["REPLICA", "EventWriter", "RecordingRefresher", "event_rows"]
