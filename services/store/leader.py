"""Which replica re-estimates a project: a PostgreSQL session advisory lock per project.

Every replica's worker asks :meth:`Leadership.leads` before fitting a project. The
first to ask takes the project's lock on a connection of its own and keeps it for
as long as that connection lives; the others get ``False`` and leave the project
alone. When the leader dies (process killed, machine gone), PostgreSQL ends its
session and frees the lock, and the next follower that asks (its store poll, every
``EVALSET_POLL_SECONDS``) takes over and catches up from the stored judgments.

On SQLite (one process owns the file) every replica leads everything.
"""

from __future__ import annotations

import contextlib
import threading

from sqlalchemy import Connection, text

from services.store import Store

#: first key of the two-key advisory locks (the migrations' one-key lock is another space)
LOCK_SPACE = 72657402

__all__ = ["Leadership"]


class Leadership:
    """Session advisory locks of the projects this process re-estimates."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._conn: Connection | None = None
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._released = False

    @property
    def enabled(self) -> bool:
        return not self.store.is_sqlite

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._held.clear()  # a new session holds nothing
            self._conn = self.store.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    def leads(self, project_id: str) -> bool:
        """Whether this process re-estimates ``project_id`` (taking the lock if it is free)."""
        if not self.enabled:
            return True
        with self._lock:
            if self._released:  # a thread that asks after release() takes nothing again
                return False
            try:
                conn = self._connection()
                if project_id in self._held:
                    conn.execute(text("SELECT 1"))  # the session (and its locks) is alive
                    return True
                got = bool(
                    conn.execute(
                        text("SELECT pg_try_advisory_lock(:space, hashtext(:project))"),
                        {"space": LOCK_SPACE, "project": project_id},
                    ).scalar()
                )
            except Exception:
                # the session is gone, and with it every lock: ask again next time
                self._drop()
                return False
            if got:
                self._held.add(project_id)
            return got

    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def _drop(self, *, unlock: bool = False) -> None:
        self._held.clear()
        if self._conn is not None and unlock:
            # at once; closing the session frees them too, but the server notices that
            # a moment later
            with contextlib.suppress(Exception):
                self._conn.execute(text("SELECT pg_advisory_unlock_all()"))
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.invalidate()
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def release(self) -> None:
        """Give up every project for good (closing the session frees its locks).

        A thread of the process that still asks afterwards gets ``False``: it must not
        take a lock again on a new session that nobody would ever close.
        """
        with self._lock:
            self._released = True
            self._drop(unlock=True)
