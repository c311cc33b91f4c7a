"""The store watched for judgments the re-estimation worker has not fitted: written by
another process (``evalset import``, another replica) or before a restart.

:class:`StoreWatch` tells the refresher of every dimension whose newest snapshot is behind
its judgments: at a start, every ``settings.poll_seconds``, and at once when a replica
stores a batch (PostgreSQL ``LISTEN``), the poll remaining the fallback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from services.runtime.refresher import Refresher
from services.settings import Settings
from services.store import Store
from services.store import repository as repo


class StoreWatch:
    """Catches the refresher up with the store (see the module's docstring); ``leads`` says
    whether this process re-estimates a project (leader election), asked at every look."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        refresher: Refresher,
        leads: Callable[[str], bool],
        stopping: threading.Event,
    ) -> None:
        self.store = store
        self.settings = settings
        self.refresher = refresher
        self._leads = leads
        self._stopping = stopping
        self._threads: list[threading.Thread] = []

    def start(self, *, listen: bool) -> None:
        """Catch up now, then poll the store; with ``listen``, wake at each NOTIFY too."""
        self.catch_up()
        targets = [(self._poll, "store-poll")] + (
            [(self._listen, "store-listen")] if listen else []
        )
        for target, name in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)

    def catch_up(self, project_ids: list[str] | None = None) -> None:
        """Notify the refresher of every dimension whose newest snapshot is behind the store."""
        with self.store.read() as conn:
            for project_id in project_ids or repo.list_project_ids(conn=conn):
                if not self._leads(project_id):  # another replica re-estimates it
                    continue
                counts = repo.judgment_counts_by_dimension(conn=conn, project_id=project_id)
                for dimension, (_, last_seq) in counts.items():
                    meta = repo.latest_snapshot_meta(
                        conn=conn, project_id=project_id, dimension=dimension
                    )
                    if meta is None or meta["last_seq"] < last_seq:
                        self.refresher.notify((project_id, dimension), last_seq=last_seq)

    def _poll(self) -> None:
        while not self._stopping.wait(self.settings.poll_seconds):
            try:
                self.catch_up()
            except Exception:  # the store may be briefly unavailable; try again next time
                continue

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
        while not self._stopping.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {repo.JUDGMENTS_CHANNEL}")
                    while not self._stopping.is_set():
                        projects = {n.payload for n in conn.notifies(timeout=0.5, stop_after=64)}
                        if projects:
                            self.catch_up(sorted(projects))
            except Exception:  # reconnect after a pause; the poll covers the gap
                self._stopping.wait(self.settings.poll_seconds)


__all__ = ["StoreWatch"]
