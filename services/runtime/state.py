"""The service's process-wide state: one object per process, composed of small ones.

:class:`ServiceState` holds the settings, the store, the caches requests read (the
:class:`~services.runtime.snapshots.SnapshotCache` of judgments, snapshots and answers;
prepared batches; hybrid answers; tallies; tokens) and the parts that run on threads, each
an object of its own that a start starts and a stop stops:

* re-estimation in this process (``worker="thread"``): the
  :class:`~services.runtime.events.RecordingRefresher` (:mod:`services.runtime.refresher`
  on :mod:`adaptive.estimation.streaming`), the :class:`~services.runtime.events.EventWriter`
  that stores its events, and the :class:`~services.runtime.store_watch.StoreWatch` that
  catches it up with the store;
* or in a process of its own (``worker="process"``): the
  :class:`~services.runtime.supervisor.WorkerSupervisor` of a
  :class:`~services.runtime.supervisor.Notifier` that ``create_app`` builds;
* the :class:`~services.runtime.startup.TallyWarmup` of the running tallies after a start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from adaptive.estimation.snapshot import Snapshot
from adaptive.estimation.streaming import Source
from services.lru import LRU
from services.runtime.background import BackgroundJobs
from services.runtime.events import EventWriter, RecordingRefresher
from services.runtime.refresher import Refresher
from services.runtime.snapshots import Key, SnapshotCache
from services.runtime.startup import TallyWarmup
from services.runtime.store_watch import StoreWatch
from services.runtime.supervisor import Notifier, NotifierFn, WorkerSupervisor
from services.runtime.tally import Tallies
from services.runtime.tokens import TokenCache
from services.settings import Settings
from services.store import Store
from services.store.leader import Leadership

#: a thread's last wait at a stop, in seconds
JOIN_SECONDS = 10


@dataclass
class ServiceState:
    """Everything a request or the worker needs; one per process (built by :meth:`create`)."""

    settings: Settings
    store: Store
    refresher: Refresher | None = None
    leader: Leadership | None = None  # which projects this process re-estimates (PostgreSQL)
    #: re-estimation in a process of its own (``settings.worker == "process"``)
    supervisor: WorkerSupervisor | None = None
    #: prepared recommender states of the next batch, and what of them does not depend on
    #: the judgments (services/api/routes/next_batch.py)
    batch_states: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(16))
    batch_bases: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(16))
    #: hybrid decisions answered, and the routing's reports (services/api/routes/hybrid.py)
    hybrid_answers: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(32))
    hybrid_reports: LRU[tuple[Any, ...], Any] = field(default_factory=lambda: LRU(32))
    #: answers computed on a background thread (pruning, the default model's significance)
    jobs: BackgroundJobs = field(default_factory=BackgroundJobs)
    #: token hash -> project, trusted for settings.token_cache_seconds (one per app, as a
    #: replica has one)
    tokens: TokenCache = field(default_factory=TokenCache)
    #: running decisions and cell counts per project, advanced by each stored batch
    tallies: Tallies = field(default_factory=Tallies)
    #: set by :meth:`stop`: every thread of the parts below ends
    stopping: threading.Event = field(default_factory=threading.Event)
    snapshots: SnapshotCache = field(init=False)
    events: EventWriter = field(init=False)
    warmup: TallyWarmup = field(init=False)
    watch: StoreWatch | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.snapshots = SnapshotCache(self.store)
        self.events = EventWriter(self.store, self.stopping)
        self.warmup = TallyWarmup(self.store, self.tallies, self.stopping)

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
            state.supervisor = WorkerSupervisor(settings, worker_fn, state.stopping)
        elif settings.streaming:
            state.refresher = RecordingRefresher(
                sink=state.events.queue,
                load_fn=state.snapshots.load_source,
                publish_fn=state.snapshots.publish,
                latest_fn=state.snapshots.latest_fast,
                config=settings,
            )
            state.watch = StoreWatch(store, settings, state.refresher, state.leads, state.stopping)
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
        self.stopping.clear()
        if warm:  # requests are served at once; the projects' running tallies load behind them
            self.warmup.start()
        if self.supervisor is not None:
            self.supervisor.start()
        elif self.refresher is not None and self.watch is not None:
            self.refresher.start()
            self.events.start()
            # batches stored by other replicas wake this one at once (LISTEN/NOTIFY)
            self.watch.start(listen=self.leader is not None)

    def stop(self) -> None:
        """Stop every thread (the refresher's events stored first), then close the store."""
        self.stopping.set()
        if self.supervisor is not None:
            self.supervisor.stop(JOIN_SECONDS)
        if self.watch is not None:
            self.watch.join(JOIN_SECONDS)
        self.warmup.join(JOIN_SECONDS)
        if self.refresher is not None:
            self.refresher.stop()
        self.events.join(JOIN_SECONDS)
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
        if self.supervisor is not None:
            self.supervisor.notify(project_id, dimensions, last_seq, accepted)
        elif self.refresher is not None:
            if not self.leads(project_id):
                return  # the leader's store poll picks the batch up
            for dimension in dimensions:
                self.refresher.notify(
                    (project_id, dimension), last_seq=last_seq, accepted_at=accepted
                )

    # -- what /health reads

    @property
    def streaming(self) -> bool:
        """Whether snapshots are re-estimated (in a thread or in the worker process)."""
        return self.refresher is not None or self.supervisor is not None

    @property
    def starting(self) -> bool:
        """Still loading the running tallies, or the worker process not started yet."""
        return self.warmup.warming or (self.supervisor is not None and not self.supervisor.started)

    def worker_alive(self) -> bool:
        if self.supervisor is not None:
            return self.supervisor.alive()
        if isinstance(self.refresher, RecordingRefresher):
            return self.refresher.threads_alive()
        return False

    @property
    def worker(self) -> Notifier | None:
        """The current worker process (``settings.worker == "process"``), else None."""
        return None if self.supervisor is None else self.supervisor.worker

    @property
    def restarts(self) -> int:
        """How often the worker process was replaced."""
        return 0 if self.supervisor is None else self.supervisor.restarts

    @property
    def last_restart_at(self) -> datetime | None:
        return None if self.supervisor is None else self.supervisor.last_restart_at

    # -- the snapshot cache, as the worker and requests read it

    def load_source(self, key: Key) -> Source | None:
        """Judgments of (project, dimension) (:meth:`SnapshotCache.load_source`)."""
        return self.snapshots.load_source(key)

    def publish(self, key: Key, snapshot: Snapshot) -> int | None:
        """Store a snapshot; None when a newer one of its method is stored (another replica)."""
        return self.snapshots.publish(key, snapshot)

    def latest_fast(self, key: Key) -> Snapshot | None:
        return self.snapshots.latest_fast(key)

    def snapshot(
        self, project_id: str, dimension: str, method: str | None = None
    ) -> Snapshot | None:
        """The newest stored snapshot (decoded once per version and cached)."""
        return self.snapshots.snapshot(project_id, dimension, method)

    def answer(
        self,
        project_id: str,
        snapshot: Snapshot,
        options: tuple[Any, ...],
        compute: Callable[[], Any],
    ) -> Any:
        """``compute()``, kept per snapshot version (:meth:`SnapshotCache.answer`)."""
        return self.snapshots.answer(project_id, snapshot, options, compute)
