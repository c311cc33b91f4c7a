"""Shared fixtures: store URLs (SQLite file, fresh PostgreSQL database) and live API servers."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Several CPU devices let NUTS run its chains in parallel, as the command line does;
# this must happen before anything imports JAX.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

from services.jax_cache import configure_jax  # noqa: E402

# Every worker imports ArviZ at about the same moment; its first import of the day races
# on one temporary file unless the day's stamp is already there (stan_free_models/arviz_safe.py).
from stan_free_models.arviz_safe import stamp_today  # noqa: E402

stamp_today()

# Programs compiled by one test or its subprocess (a CLI run, a served API) are loaded,
# not recompiled, by the next: one cache directory per test run, made by the first process
# (the xdist controller, whose environment its workers inherit) and removed at its end.
# A directory the caller already set is used as it is and kept.
_OWN_JAX_CACHE = None
if not os.environ.get("EVALSET_JAX_CACHE_DIR"):
    _OWN_JAX_CACHE = os.environ["EVALSET_JAX_CACHE_DIR"] = tempfile.mkdtemp(
        prefix="evalset-test-jax-"
    )
# and the tests' own fits share it too (JAX locks the directory: services/jax_cache.py)
configure_jax()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_JAX_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(_OWN_JAX_CACHE, ignore_errors=True)


PG_ADMIN_URL = os.environ.get(
    "EVALSET_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _pg_reason() -> str | None:
    try:
        import psycopg

        dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, connect_timeout=3):
            return None
    except Exception as exc:  # the server is not running or not reachable
        return f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc}"


_PG_SKIP: list[str | None] = []


def pg_skip_reason() -> str | None:
    if not _PG_SKIP:
        _PG_SKIP.append(_pg_reason())
    return _PG_SKIP[0]


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A uniquely named PostgreSQL database, dropped afterwards; yields its URL."""
    import psycopg

    reason = pg_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"evalset_test_{uuid.uuid4().hex[:12]}"
    dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'evalset.db'}"
    else:
        with fresh_pg_database() as url:
            yield url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadServer:
    """The API served by uvicorn on a loopback port, on a thread of this process."""

    def __init__(self, settings: object) -> None:
        import uvicorn

        from services.api import create_app

        self.port = free_port()
        self.app = create_app(settings)  # type: ignore[arg-type]
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)

    @property
    def state(self):  # noqa: ANN201
        return self.app.state.service


class ProcessServer:
    """``evalset serve`` in a child process (can be SIGKILLed and restarted on the same port)."""

    def __init__(self, database_url: str, *, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "EVALSET_DATABASE_URL": database_url,
            "EVALSET_PORT": str(self.port),
            "JAX_PLATFORMS": "cpu",
            # tests create projects anonymously (served mode refuses that unless open)
            "EVALSET_OPEN": "true",
            **(env or {}),
        }
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> None:
        import httpx

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", "--log-level", "error"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}: {err[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the server did not become healthy")

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


@pytest.fixture
def thread_server():
    """Factory: ``with thread_server(settings) as srv: httpx.get(srv.url + ...)``."""
    return ThreadServer
