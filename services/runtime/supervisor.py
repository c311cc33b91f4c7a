"""Supervision of re-estimation in a process of its own (``EVALSET_WORKER=process``).

To the service the worker process is a :class:`Notifier` (``create_app`` passes the
:class:`~services.runtime.worker.WorkerProcess` that builds one; this module does not know
it, since the worker process itself runs a :class:`~services.runtime.state.ServiceState`).
:class:`WorkerSupervisor` starts it a moment after the service, replaces it when it exits
(at once when a batch finds it dead, else at the next check), and stops it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol

from services.runtime.startup import STARTUP_GRACE_SECONDS
from services.settings import Settings

log = logging.getLogger("evalset.refit")


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


class WorkerSupervisor:
    """The worker process of one service: :attr:`worker` (the current one), how often it was
    replaced (:attr:`restarts`, :attr:`last_restart_at`), and the thread that watches it
    every ``settings.supervise_seconds`` until ``stopping`` is set."""

    def __init__(self, settings: Settings, worker_fn: NotifierFn, stopping: threading.Event):
        self.settings = settings
        self.worker = worker_fn(settings)
        self.restarts = 0
        self.last_restart_at: datetime | None = None
        #: the worker was started (the supervising thread starts it after the grace period)
        self.started = False
        self._worker_fn = worker_fn
        self._stopping = stopping
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the supervising thread; it starts the worker (which catches up and polls
        the store itself) and restarts it when it exits, without waiting for the next batch."""
        self._thread = threading.Thread(target=self._run, name="worker-supervisor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # a starting worker is a second Python importing the fit stack: it would take the
        # CPU this process needs to answer its first requests, so it starts a moment later
        if self._stopping.wait(STARTUP_GRACE_SECONDS):
            return
        with self._lock:
            if not self._stopping.is_set():
                self.worker.start()
                self.started = True
        while not self._stopping.wait(self.settings.supervise_seconds):
            self.ensure()

    def ensure(self) -> None:
        """Replace a dead worker process; the new one catches up from the store."""
        if not self.started:
            return
        with self._lock:
            if self.worker.alive() or self._stopping.is_set():
                return
            code = self.worker.exitcode()
            self.worker = self._worker_fn(self.settings)
            self.worker.start()
            self.restarts += 1
            self.last_restart_at = datetime.now(UTC)
        log.warning("re-estimation worker exited (code %s); restarted", code)

    def alive(self) -> bool:
        """The worker runs, or is about to start."""
        return bool(self.worker.alive()) or not self.started

    def notify(
        self, project_id: str, dimensions: tuple[str, ...], last_seq: int, accepted_at: float
    ) -> None:
        """Tell the worker (replaced first if it died) that a batch was stored."""
        self.ensure()
        self.worker.notify(project_id, dimensions, last_seq, accepted_at)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker (``stopping`` is set already) and wait for the supervising thread."""
        with self._lock:  # not between the start of the worker and its flag
            if self.started:
                self.worker.stop()
        if self._thread is not None:
            self._thread.join(timeout)


__all__ = ["Notifier", "NotifierFn", "WorkerSupervisor"]
