"""The durable judgment store: one code path (SQLAlchemy Core) for SQLite and PostgreSQL.

:class:`Store` owns the engine and hands out transactions; the functions in
:mod:`services.store.repository` take the connection as a keyword argument and
do one job each. Embedded SQLite runs in WAL mode with ``synchronous=FULL`` (an
acknowledged transaction survives a power loss, not only a killed process), its
file created readable by its owner only (0600), and write transactions take the
write lock up front (``BEGIN IMMEDIATE``) so that concurrent writers wait for
each other instead of failing; PostgreSQL is used as is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

# SQLAlchemy and Alembic load when a store is opened, not when the package is imported:
# the shared validators (services.store.validation) are read by every command line entry
if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

MIGRATIONS = Path(__file__).parent / "migrations"

__all__ = ["Store"]


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
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction: all of it is committed, or none of it."""
        if self._write_lock is None:
            with self._write_engine.begin() as conn:
                yield conn
            return
        with self._write_lock, self._write_engine.begin() as conn:
            yield conn

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
