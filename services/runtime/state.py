"""The service's process-wide state: the store, the re-estimation worker and a snapshot cache.

This is the glue between the store (SQL) and the refits (no SQL,
:mod:`services.runtime.refresher` on :mod:`adaptive.estimation.streaming`): it gives the worker
its ``load_fn`` / ``publish_fn`` / ``latest_fn`` and lets requests read the newest
snapshot without fitting anything. When re-estimation runs in a process of its own,
the state only holds a :class:`Notifier` for it, built by ``create_app`` (this
module does not know the worker process, which itself runs a ``ServiceState``).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from adaptive.estimation.snapshot import FAST, Snapshot, decode_snapshot, encode_snapshot
from adaptive.estimation.streaming import Source
from services.lru import LRU
from services.runtime.background import (
    BackgroundJobs,
)
from services.runtime.refresher import Refresher, RefreshEvent
from services.runtime.tally import PROJECTS, Tallies
from services.runtime.tokens import TokenCache
from services.settings import Settings
from services.store import Store
from services.store import repository as repo
from services.store.leader import Leadership

Key = tuple[str, str]  # (project_id, dimension)

log = logging.getLogger("evalset.refit")
REPLICA = f"{socket.gethostname()}:{os.getpid()}"
#: after a start, the worker process and the tallies' loading wait this long, so that the
#: service answers its first requests (``/health``) without competing with them for the CPU
STARTUP_GRACE_SECONDS = 1.0


class Notifier(Protocol):
    """Re-estimation running elsewhere (``services.runtime.worker.WorkerProcess``), as the
    service sees it: started, told about every stored batch, watched, stopped."""

    def start(self) -> None: ...

    def alive(self) -> bool: ...

    def exitcode(self) -> int | None: ...

    def notify(
        self, project_id: str, dimensions: tuple[str, ...], last_seq: int, accepted_at: float
    ) -> None: ...

    def stop(self, timeout: float = 30.0) -> None: ...


#: builds the notifier of a process-mode worker from the settings (``create_app`` passes it)
NotifierFn = Callable[[Settings], Notifier]


class RecordingRefresher(Refresher):
    """A :class:`Refresher` whose events (every fit, its outcome, why it was rejected) are
    logged and handed to ``sink`` (the service stores them: ``GET /projects/{id}/events``)."""

    def __init__(self, *, sink: queue.Queue[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sink = sink

    def _record(self, event: RefreshEvent) -> None:
        super()._record(event)
        level = logging.WARNING if event.kind in ("rejected", "failed") else logging.INFO
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


_COLUMNS = ["item_id", "system_a", "system_b", "annotator_id", "winner", "screen_id", "shown_first"]
_SCHEMA = {"seq": pl.Int64, **dict.fromkeys(_COLUMNS, pl.Utf8)}


@dataclass
class _Cached:
    frame: pl.DataFrame
    last_seq: int


@dataclass
class ServiceState:
    """Everything a request or the worker needs; one per process."""

    settings: Settings
    store: Store
    refresher: Refresher | None = None
    _frames: dict[Key, _Cached] = field(default_factory=dict)
    _snapshots: LRU[tuple[str, str, int], Snapshot] = field(default_factory=lambda: LRU(16))
    _answers: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(64))
    #: prepared recommender states of the next batch, and what of them does not depend on
    #: the judgments (services/api/routes/next_batch.py)
    batch_states: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(16))
    batch_bases: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(16))
    #: hybrid decisions answered, and the routing's reports (services/api/routes/hybrid.py)
    hybrid_answers: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(32))
    hybrid_reports: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(32))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: answers computed on a background thread (pruning, the default model's significance)
    jobs: BackgroundJobs = field(default_factory=BackgroundJobs)
    _stop_poll: threading.Event = field(default_factory=threading.Event)
    _poller: threading.Thread | None = None
    _worker: Notifier | None = None  # with settings.worker == "process"
    _worker_fn: NotifierFn | None = None  # builds a replacement when it exits
    _worker_started: bool = False  # the supervisor starts it (STARTUP_GRACE_SECONDS)
    _supervisor: threading.Thread | None = None
    _listener: threading.Thread | None = None
    _events: queue.Queue[Any] = field(default_factory=queue.Queue)
    _event_writer: threading.Thread | None = None
    restarts: int = 0
    last_restart_at: datetime | None = None
    leader: Leadership | None = None  # which projects this process re-estimates (PostgreSQL)
    #: token hash -> project, trusted for settings.token_cache_seconds (one per app, as a
    #: replica has one)
    tokens: TokenCache = field(default_factory=TokenCache)
    #: running decisions and cell counts per project, advanced by each stored batch
    tallies: Tallies = field(default_factory=Tallies)
    #: the running tallies are being loaded after a start (``/health`` says catching up)
    warming: bool = False
    _warmer: threading.Thread | None = None

    @classmethod
    def create(cls, settings: Settings, *, worker_fn: NotifierFn | None = None) -> ServiceState:
        """The state of one process; ``worker_fn`` builds the worker process when
        ``settings.worker == "process"`` (``create_app`` passes ``WorkerProcess``)."""
        store = Store(settings.database_url, synchronous=settings.sqlite_synchronous)
        store.migrate()
        state = cls(settings=settings, store=store)
        if settings.streaming and settings.worker == "process":
            if worker_fn is None:
                store.dispose()
                raise ValueError("a process worker needs worker_fn (create_app passes it)")
            state._worker_fn = worker_fn
            state._worker = worker_fn(settings)
        elif settings.streaming:
            state.refresher = RecordingRefresher(
                sink=state._events,
                load_fn=state.load_source,
                publish_fn=state.publish,
                latest_fn=state.latest_fast,
                config=settings,
            )
            if settings.leader_election and not store.is_sqlite:
                state.leader = Leadership(store)
        return state

    def leads(self, project_id: str) -> bool:
        """Whether this process re-estimates the project (always, without leader election)."""
        return self.leader is None or self.leader.leads(project_id)

    # -- lifecycle

    def start(self, *, warm: bool = True) -> None:
        """Start the worker and queue every dimension whose snapshot is behind its judgments;
        with ``warm``, load the projects' running tallies on a thread (a process that serves
        requests; the worker process does not).

        The same check then runs every ``settings.poll_seconds``, so that judgments
        written by another process (``evalset import``, another replica) get fitted too.
        """
        self._stop_poll.clear()
        # requests are served at once; the projects' running tallies load behind them
        if warm:
            self.warming = True
            self._warmer = threading.Thread(target=self._warm, name="tally-warm", daemon=True)
            self._warmer.start()
        if self._worker is not None:
            # the supervisor starts the worker (it catches up and polls the store itself)
            # and restarts it when it exits, without waiting for the next batch
            self._supervisor = threading.Thread(
                target=self._supervise, name="worker-supervisor", daemon=True
            )
            self._supervisor.start()
            return
        if self.refresher is None:
            return
        self.refresher.start()
        self._event_writer = threading.Thread(
            target=self._write_events, name="event-writer", daemon=True
        )
        self._event_writer.start()
        self.catch_up()
        self._poller = threading.Thread(target=self._poll, name="store-poll", daemon=True)
        self._poller.start()
        if self.leader is not None:
            # batches stored by other replicas wake this one at once (LISTEN/NOTIFY)
            self._listener = threading.Thread(target=self._listen, name="store-listen", daemon=True)
            self._listener.start()

    def _warm(self) -> None:
        """Load every project's running tally (decisions then read only new judgments)."""
        if self._stop_poll.wait(STARTUP_GRACE_SECONDS):  # after the first requests
            self.warming = False
            return
        try:
            with self.store.read() as conn:
                project_ids = repo.list_project_ids(conn=conn)
            for project_id in project_ids[-PROJECTS:]:
                if self._stop_poll.is_set():
                    return
                tally = self.tallies.project(project_id)
                with tally.lock:
                    self.tallies.advance(self.store, project_id)
        except Exception:  # a request loads its project's tally itself
            log.exception("could not load the running tallies")
        finally:
            self.warming = False

    def _listen(self) -> None:
        """Catch up a project as soon as any replica stores a batch of it (PostgreSQL NOTIFY);
        the store poll remains the fallback when the connection is lost."""
        import psycopg
        from sqlalchemy.engine import make_url

        dsn = (
            make_url(self.store.url)
            .set(drivername="postgresql")
            .render_as_string(hide_password=False)
        )
        while not self._stop_poll.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {repo.JUDGMENTS_CHANNEL}")
                    while not self._stop_poll.is_set():
                        projects = {n.payload for n in conn.notifies(timeout=0.5, stop_after=64)}
                        if projects:
                            self.catch_up(sorted(projects))
            except Exception:  # reconnect after a pause; the poll covers the gap
                self._stop_poll.wait(self.settings.poll_seconds)

    def _supervise(self) -> None:
        # a starting worker is a second Python importing the fit stack: it would take the
        # CPU this process needs to answer its first requests, so it starts a moment later
        if self._stop_poll.wait(STARTUP_GRACE_SECONDS):
            return
        with self._lock:
            if self._worker is not None and not self._stop_poll.is_set():
                self._worker.start()
                self._worker_started = True
        while not self._stop_poll.wait(self.settings.supervise_seconds):
            self.ensure_worker()

    def ensure_worker(self) -> None:
        """Replace a dead worker process; the new one catches up from the store."""
        if self._worker is None or self._worker_fn is None or not self._worker_started:
            return
        with self._lock:
            if self._worker.alive() or self._stop_poll.is_set():
                return
            code = self._worker.exitcode()
            self._worker = self._worker_fn(self.settings)
            self._worker.start()
            self.restarts += 1
            self.last_restart_at = datetime.now(UTC)
        log.warning("re-estimation worker exited (code %s); restarted", code)

    @property
    def starting(self) -> bool:
        """Still loading the running tallies, or the worker process not started yet."""
        return self.warming or (self._worker is not None and not self._worker_started)

    def worker_alive(self) -> bool:
        if self._worker is not None:
            return bool(self._worker.alive()) or not self._worker_started  # starting
        if isinstance(self.refresher, RecordingRefresher):
            return self.refresher.threads_alive()
        return False

    def _write_events(self) -> None:
        """Store the worker's events in batches (readable at ``GET /projects/{id}/events``)."""
        written = 0
        while True:
            try:
                first = self._events.get(timeout=0.5)
            except queue.Empty:
                if self._stop_poll.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < 500:
                try:
                    batch.append(self._events.get_nowait())
                except queue.Empty:
                    break
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
            try:
                with self.store.write() as conn:
                    repo.add_events(conn=conn, events=rows)
                    written += len(rows)
                    if written >= 1000:
                        written = 0
                        for project_id in {r["project_id"] for r in rows}:
                            repo.prune_events(conn=conn, project_id=project_id)
            except Exception:  # the store may be briefly unavailable; the log has them
                log.exception("could not store %d refit events", len(rows))

    def _poll(self) -> None:
        while not self._stop_poll.wait(self.settings.poll_seconds):
            try:
                self.catch_up()
            except Exception:  # the store may be briefly unavailable; try again next time
                continue

    def catch_up(self, project_ids: list[str] | None = None) -> None:
        """Notify the worker of every dimension whose newest snapshot is behind the store."""
        if self.refresher is None:
            return
        with self.store.read() as conn:
            for project_id in project_ids or repo.list_project_ids(conn=conn):
                if not self.leads(project_id):  # another replica re-estimates it
                    continue
                counts = repo.judgment_counts_by_dimension(conn=conn, project_id=project_id)
                for dimension, (_, last_seq) in counts.items():
                    meta = repo.latest_snapshot_meta(
                        conn=conn, project_id=project_id, dimension=dimension
                    )
                    if meta is None or meta["last_seq"] < last_seq:
                        self.refresher.notify((project_id, dimension), last_seq=last_seq)

    @property
    def streaming(self) -> bool:
        """Whether snapshots are re-estimated (in a thread or in the worker process)."""
        return self.refresher is not None or self._worker is not None

    def stop(self) -> None:
        self._stop_poll.set()
        with self._lock:  # not between the supervisor's start of the worker and its flag
            if self._worker is not None and self._worker_started:
                self._worker.stop()
        if self._poller is not None:
            self._poller.join(10)
        if self._supervisor is not None:
            self._supervisor.join(10)
        if self._listener is not None:
            self._listener.join(10)
        if self._warmer is not None:
            self._warmer.join(10)
        if self.refresher is not None:
            self.refresher.stop()
        if self._event_writer is not None:
            self._event_writer.join(10)
        if self.leader is not None:
            self.leader.release()
        self.jobs.shutdown()
        self.store.dispose()

    def notify(
        self,
        project_id: str,
        dimensions: tuple[str, ...],
        last_seq: int,
        *,
        accepted_at: float | None = None,
    ) -> None:
        """A batch of these dimensions up to ``last_seq`` was stored: re-estimate soon."""
        accepted = time.monotonic() if accepted_at is None else accepted_at
        if self._worker is not None:
            self.ensure_worker()
            self._worker.notify(project_id, dimensions, last_seq, accepted)
        elif self.refresher is not None:
            if not self.leads(project_id):
                return  # the leader's store poll picks the batch up
            for dimension in dimensions:
                self.refresher.notify(
                    (project_id, dimension), last_seq=last_seq, accepted_at=accepted
                )

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
        return self.snapshot(*key, method=FAST)

    # -- what requests read

    def snapshot_meta(
        self, project_id: str, dimension: str, method: str | None = None
    ) -> repo.SnapshotMeta | None:
        with self.store.read() as conn:
            return repo.latest_snapshot_meta(
                conn=conn, project_id=project_id, dimension=dimension, method=method
            )

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
