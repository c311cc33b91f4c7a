"""The durable judgment store: one code path (SQLAlchemy Core) for SQLite and PostgreSQL.

:class:`Store` owns the engine and hands out transactions; the functions in
:mod:`services.store.repository` take the connection as a keyword argument and
do one job each. Embedded SQLite runs in WAL mode with ``synchronous=FULL`` (an
acknowledged transaction survives a power loss, not only a killed process), its
file created readable by its owner only (0600), and write transactions take the
write lock up front (``BEGIN IMMEDIATE``) so that concurrent writers wait for
each other instead of failing; PostgreSQL is used as is.

A store that cannot take a request now but may soon (SQLite's disk full or file locked,
PostgreSQL stopped or its connection lost) raises SQLAlchemy's error as usual;
:func:`unavailable_reason` tells it from a defect, and :meth:`Store.write_failure` says
whether the newest write failed that way (``/health``'s write path).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from services.lru import LRU

# SQLAlchemy and Alembic load when a store is opened, not when the package is imported:
# the shared validators (services.store.validation) are read by every command line entry
if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"
#: the parsed cells a store keeps of the leases it read, at most (least recently read first out)
LEASE_CELLS = 200_000
#: where a store's connections carry that cache (:func:`repository.active_leased_cells`)
LEASE_CELLS_KEY = "lease_cells"

__all__ = ["Store", "WriteFailure", "unavailable_reason"]

#: SQLite result codes (the low byte of an extended code) of a store that cannot take a
#: request now but may soon: busy, locked, out of memory, read-only, I/O error, full,
#: cannot open, lock protocol
_SQLITE_REASONS = {
    5: "the database is locked",
    6: "the database is locked",
    7: "the store is out of memory",
    8: "the database is read-only",
    10: "the database's disk failed to read or write",
    13: "the database or disk is full",
    14: "the database file cannot be opened",
    15: "the database is locked",
}
#: PostgreSQL SQLSTATE classes of the same: connection exception, transaction rollback
#: (serialization failure, deadlock), insufficient resources (disk full, out of memory),
#: operator intervention (shutdown, cancelled statement), system error (I/O)
_POSTGRES_REASONS = {
    "08": "the store is not reachable",
    "40": "the store rolled the transaction back (a concurrent one)",
    "53": "the store is out of disk space or memory",
    "57": "the store is shutting down or cancelled the statement",
    "58": "the store's disk failed",
}


class WriteFailure(NamedTuple):
    """The newest write that failed because the store could not take it."""

    at: datetime
    reason: str  # :func:`unavailable_reason`'s words
    monotonic: float


def unavailable_reason(exc: BaseException) -> str | None:
    """Why the store cannot take a request now, when a retry may succeed (disk full,
    database locked, server stopped, connection lost, no pooled connection free); None for
    any other error (a defect: a constraint, a syntax error, a missing table).

    Example:
        >>> import sqlite3; from sqlalchemy.exc import OperationalError
        >>> conn = sqlite3.connect(":memory:")
        >>> try:
        ...     conn.execute("SELECT * FROM nowhere")
        ... except sqlite3.Error as exc:
        ...     unavailable_reason(OperationalError("SELECT", {}, exc)) is None
        True
    """
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.TimeoutError):
        return "no connection to the store is free"
    if isinstance(exc, sa.DisconnectionError):
        return "the connection to the store was lost"
    if not isinstance(exc, sa.DBAPIError):
        return None
    if exc.connection_invalidated:
        return "the connection to the store was lost"
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        return _SQLITE_REASONS.get(code & 0xFF)
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate is None:
        # no server answered: the connection was refused, closed or broken
        if isinstance(exc, (sa.OperationalError, sa.InterfaceError)):
            return "the store is not reachable"
        return None
    return _POSTGRES_REASONS.get(sqlstate[:2])


class Store:
    """A database: migrations, and read and write transactions.

    Example:
        >>> store = Store("sqlite:///:memory:"); store.migrate()
        >>> with store.read() as conn:
        ...     from services.store import repository
        ...     repository.get_project(conn=conn, project_id="x") is None
        True
    """

    def __init__(self, url: str, *, echo: bool = False, synchronous: str = "FULL") -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, EXTRA or NORMAL, not {synchronous!r}")
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite:
            database = parsed.database or ""
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
                # the judgments and token hashes are the owner's: create the file 0600
                # (SQLite gives its -wal and -shm files the database file's permissions)
                os.close(os.open(database, os.O_RDWR | os.O_CREAT, 0o600))
            self.engine: Engine = create_engine(
                url,
                echo=echo,
                connect_args={"check_same_thread": False, "timeout": 60},
            )
            _configure_sqlite(
                self.engine,
                in_memory=database in ("", ":memory:"),
                synchronous=synchronous.upper(),
            )
        else:
            self.engine = create_engine(url, echo=echo, pool_size=10, max_overflow=20)
        self._write_engine = self.engine.execution_options(store_write=True)
        # SQLite has one writer at a time: this process's writers queue here and each goes as
        # soon as the one before commits, instead of in SQLite's busy handler, which polls
        # with sleeps growing to 100 ms (a request's write behind a batch's waited that long)
        self._write_lock = threading.RLock() if self.is_sqlite else None
        self._write_failure: WriteFailure | None = None
        #: the parsed cells of the leases read, by lease id (:func:`repository.active_leased_cells`)
        self.lease_cells: LRU[str, Any] = LRU(LEASE_CELLS, weight=len)

    def migrate(self) -> None:
        """Bring the schema to the newest migration (idempotent; safe with several replicas)."""
        from alembic import command
        from alembic.config import Config
        from sqlalchemy import text

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self._write_engine.begin() as conn:
            if not self.is_sqlite:
                # replicas starting together apply migrations one at a time
                conn.execute(text("SELECT pg_advisory_xact_lock(72657401)"))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (a consistent view on PostgreSQL and SQLite alike)."""
        with self.engine.begin() as conn:
            conn.info[LEASE_CELLS_KEY] = self.lease_cells
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction: all of it is committed, or none of it.

        One that fails because the store cannot take it (:func:`unavailable_reason`) is
        remembered until a write commits (:meth:`write_failure`).
        """
        try:
            if self._write_lock is None:
                with self._write_engine.begin() as conn:
                    conn.info[LEASE_CELLS_KEY] = self.lease_cells
                    yield conn
            else:
                with self._write_lock, self._write_engine.begin() as conn:
                    conn.info[LEASE_CELLS_KEY] = self.lease_cells
                    yield conn
        except Exception as exc:
            reason = unavailable_reason(exc)
            if reason is not None:
                self._write_failure = WriteFailure(datetime.now(UTC), reason, time.monotonic())
            raise
        self._write_failure = None

    def write_failure(self, within_seconds: float) -> WriteFailure | None:
        """The newest write that failed because the store could not take it, if it failed
        in the last ``within_seconds`` and no write committed after it."""
        failure = self._write_failure
        if failure is None or time.monotonic() - failure.monotonic > within_seconds:
            return None
        return failure

    def dispose(self) -> None:
        self.engine.dispose()


def _configure_sqlite(engine: Engine, *, in_memory: bool, synchronous: str) -> None:
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # let SQLAlchemy emit BEGIN itself (pysqlite's own BEGIN is deferred)
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        # FULL (default): each commit is on disk before it is acknowledged, so an
        # acknowledged batch survives a power loss; NORMAL only survives a killed process
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("store_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
