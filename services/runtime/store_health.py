"""The store's write path in ``GET /health``: whether this replica's writes go through.

A store can answer reads and refuse writes (SQLite's disk full, a read-only or locked
file, PostgreSQL out of disk). Every write transaction of the replica
(:meth:`services.store.Store.write`) remembers the newest one that failed because the
store could not take it, until a write commits; ``/health`` says ``store_writable:
false`` (and ``degraded``) while such a failure is less than
:data:`WRITE_FAILURE_SECONDS` old and nothing committed since. The write path is not
probed: ``/health`` itself writes nothing, so an idle replica reports its last writes.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from services.store import Store

#: how long a write that the store could not take keeps ``/health`` degraded (unless a
#: write commits first); clients send a refused batch again after Retry-After seconds,
#: so while the store still refuses, the failure stays fresh
WRITE_FAILURE_SECONDS = 60.0


class WriteFailurePublic(BaseModel):
    """The newest write of this replica that the store could not take."""

    at: datetime
    reason: str = Field(description="why, e.g. the database or disk is full")


def write_failure(store: Store) -> WriteFailurePublic | None:
    """The store's newest write failure, if it is recent and nothing committed since."""
    failure = store.write_failure(WRITE_FAILURE_SECONDS)
    if failure is None:
        return None
    return WriteFailurePublic(at=failure.at, reason=failure.reason)
