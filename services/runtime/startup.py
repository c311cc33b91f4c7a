"""What a start does behind the first requests: :class:`TallyWarmup` loads the projects'
running tallies on a thread, a moment after the start (:data:`STARTUP_GRACE_SECONDS`, which
the worker process's start waits too: :mod:`services.runtime.supervisor`)."""

from __future__ import annotations

import logging
import threading

from services.runtime.tally import PROJECTS, Tallies
from services.store import Store
from services.store import repository as repo

log = logging.getLogger("evalset.refit")
#: after a start, the worker process and the tallies' loading wait this long, so that the
#: service answers its first requests (``/health``) without competing with them for the CPU
STARTUP_GRACE_SECONDS = 1.0


class TallyWarmup:
    """Loads every project's running tally after a start (decisions then read only new
    judgments); :attr:`warming` while it runs (``/health`` says catching up)."""

    def __init__(self, store: Store, tallies: Tallies, stopping: threading.Event) -> None:
        self.store = store
        self.tallies = tallies
        self.warming = False
        self._stopping = stopping
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.warming = True
        self._thread = threading.Thread(target=self._run, name="tally-warm", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        if self._stopping.wait(STARTUP_GRACE_SECONDS):  # after the first requests
            self.warming = False
            return
        try:
            with self.store.read() as conn:
                project_ids = repo.list_project_ids(conn=conn)
            for project_id in project_ids[-PROJECTS:]:
                if self._stopping.is_set():
                    return
                tally = self.tallies.project(project_id)
                with tally.lock:
                    self.tallies.advance(self.store, project_id)
        except Exception:  # a request loads its project's tally itself
            log.exception("could not load the running tallies")
        finally:
            self.warming = False


__all__ = ["STARTUP_GRACE_SECONDS", "TallyWarmup"]
