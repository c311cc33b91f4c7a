"""A store that cannot take a request (SQLite's disk full or file locked, PostgreSQL
stopped or its connection lost) is answered 503 ``unavailable`` with ``Retry-After``,
never 500; ``/health`` says when writes fail; every refused batch sent again is stored
once, and every acknowledged batch is stored.

The faults are real: a small tmpfs that fills (root only), a throwaway PostgreSQL cluster
stopped mid-ingest (the shared server is never stopped), real lock and connection errors.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from services.api.errors import RETRY_AFTER_SECONDS
from services.settings import Settings
from services.store import Store, unavailable_reason
from services.store import repository as repo
from tests.factories import PG_ADMIN_URL, ThreadServer, free_port, pg_skip_reason

SYSTEMS = [f"s{k}" for k in range(4)]
PROMPTS = [f"q{k}" for k in range(50)]


def start_project(api: httpx.Client) -> tuple[str, dict]:
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = api.post("/projects", json={"project_id": project_id})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    for path, body in (
        ("systems", {"systems": [{"system_id": s} for s in SYSTEMS]}),
        ("prompts", {"prompts": [{"prompt_id": q} for q in PROMPTS]}),
    ):
        r = api.post(f"/projects/{project_id}/{path}", json=body, headers=headers)
        assert r.status_code == 200, r.text
    return project_id, headers


def batch(number: int, size: int) -> list[dict]:
    """``size`` judgments with ids of their own (a long annotator id fills pages fast)."""
    return [
        {
            "judgment_id": f"b{number}-{k}",
            "item_id": PROMPTS[(number * size + k) % len(PROMPTS)],
            "system_a": SYSTEMS[k % 2],
            "system_b": SYSTEMS[2 + k % 2],
            "winner": "ab"[k % 2],
            "annotator_id": f"w{k % 7}-" + "x" * 150,
        }
        for k in range(size)
    ]


class Ingest:
    """Posts batches and keeps what the service answered to each."""

    def __init__(self, api: httpx.Client, project_id: str, headers: dict) -> None:
        self.api, self.project_id, self.headers = api, project_id, headers
        self.sent: dict[int, list[dict]] = {}
        self.acknowledged: set[int] = set()
        self.refused: set[int] = set()
        self.statuses: dict[int, int] = {}
        self.unexpected: list[tuple[int, int, str]] = []

    def post(self, number: int, rows: list[dict]) -> int:
        self.sent[number] = rows
        try:
            r = self.api.post(
                f"/projects/{self.project_id}/judgments",
                json={"judgments": rows},
                headers=self.headers,
            )
        except httpx.TransportError as exc:  # never acknowledged: send it again later
            self.refused.add(number)
            self.unexpected.append((number, 0, repr(exc)))
            return 0
        self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
        if r.status_code == 200:
            self.acknowledged.add(number)
            self.refused.discard(number)
        elif r.status_code == 503 and self.refusal_is_retryable(r):
            self.refused.add(number)
        else:
            self.refused.add(number)
            self.unexpected.append((number, r.status_code, r.text[:300]))
        return r.status_code

    @staticmethod
    def refusal_is_retryable(r: httpx.Response) -> bool:
        error = r.json()["error"]
        return error["code"] == "unavailable" and r.headers.get("retry-after") == str(
            RETRY_AFTER_SECONDS
        )

    def resend_refused(self, attempts: int = 20, wait: float = 0.5) -> None:
        import time

        for _ in range(attempts):
            for number in sorted(self.refused):
                self.post(number, self.sent[number])
            if not self.refused:
                return
            time.sleep(wait)

    def stored_ids(self, store: Store) -> set[str]:
        with store.read() as conn:
            rows = repo.fetch_judgments(conn=conn, project_id=self.project_id)
        return {r["judgment_id"] for r in rows}

    def all_ids(self) -> set[str]:
        return {row["judgment_id"] for rows in self.sent.values() for row in rows}


def health(api: httpx.Client) -> dict:
    r = api.get("/health")
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------- which errors are faults


def test_store_faults_are_told_from_defects_on_sqlite(tmp_path: Path) -> None:
    """A locked file is a fault (retry); a missing table or a broken constraint is not."""
    path = tmp_path / "locked.db"
    store = Store(f"sqlite:///{path}")
    store.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        waiter = store.engine.connect()
        waiter.exec_driver_sql("PRAGMA busy_timeout=0")
        with pytest.raises(OperationalError) as locked:
            waiter.exec_driver_sql("BEGIN IMMEDIATE")
        waiter.close()
    finally:
        holder.rollback()
        holder.close()
    assert unavailable_reason(locked.value) == "the database is locked"
    with store.read() as conn, pytest.raises(OperationalError) as missing:
        conn.execute(text("SELECT * FROM no_such_table"))
    assert unavailable_reason(missing.value) is None
    with store.write() as conn:
        repo.create_project(conn=conn, project_id="p", name="p", description="", dimensions=[])
    with pytest.raises(DBAPIError) as duplicate, store.write() as conn:
        conn.execute(text("INSERT INTO projects (project_id, name) VALUES ('p', 'p')"))
    assert isinstance(duplicate.value, IntegrityError)
    assert unavailable_reason(duplicate.value) is None
    # a refused write that is not a fault does not mark the write path failing
    assert store.write_failure(60) is None
    store.dispose()


@pytest.mark.postgres
def test_store_faults_are_told_from_defects_on_postgres() -> None:
    """Nothing listening, a session the server ends: faults; a syntax error: a defect."""
    reason = pg_skip_reason()
    if reason:
        pytest.skip(reason)
    closed = Store(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres")
    with pytest.raises(OperationalError) as refused, closed.write() as conn:
        conn.execute(text("SELECT 1"))
    assert unavailable_reason(refused.value) == "the store is not reachable"
    failure = closed.write_failure(60)
    assert failure is not None and failure.reason == "the store is not reachable"
    assert closed.write_failure(0) is None  # older than the window
    closed.dispose()
    store = Store(PG_ADMIN_URL)
    with store.read() as conn, pytest.raises(DBAPIError) as syntax:
        conn.execute(text("SELEC 1"))
    assert unavailable_reason(syntax.value) is None
    with pytest.raises(DBAPIError) as ended, store.read() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
        conn.execute(text("SELECT 1"))
    assert unavailable_reason(ended.value) is not None, ended.value
    store.dispose()


# ---------------------------------------------------------------- SQLite: a full disk


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where`` (needs root: skip otherwise)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (no other size-limited filesystem here)")
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> Path:
    """A file that takes every free byte of ``directory``'s filesystem."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):  # then the last pages, then the last bytes
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_is_503_with_retry_after_and_every_refused_batch_is_stored_later(
    tmp_path: Path,
) -> None:
    """Was: 58 of 58 writes ``500 internal_error (OperationalError)`` while ``/health``
    said ``ok``; a client that does not retry a 500 dropped batches never stored."""
    with small_filesystem(tmp_path / "disk", "6m") as disk:
        url = f"sqlite:///{disk / 'full.db'}"
        with ThreadServer(Settings(database_url=url, streaming=False)) as server:
            api = httpx.Client(base_url=server.url, timeout=60)
            project_id, headers = start_project(api)
            ingest = Ingest(api, project_id, headers)
            for number in range(3):
                assert ingest.post(number, batch(number, 100)) == 200
            assert health(api)["store_writable"] is True
            filler = fill(disk)
            for number in range(3, 13):
                ingest.post(number, batch(number, 100))
            refused = sorted(ingest.refused)
            print(f"full disk: {ingest.statuses}, {len(refused)} batches refused")
            assert ingest.refused, ingest.statuses
            assert not ingest.unexpected, ingest.unexpected  # 503 unavailable only
            state = health(api)
            assert state["store_writable"] is False and state["status"] == "degraded", state
            assert "full" in state["last_write_failure"]["reason"], state
            assert state["store_reachable"] is True  # reads still answer
            # the keep-alive connection survived every 503
            r = api.get(f"/projects/{project_id}/judgments", headers=headers)
            assert r.status_code == 200, r.text
            filler.unlink()
            ingest.resend_refused()
            assert not ingest.refused and not ingest.unexpected, ingest.unexpected
            state = health(api)
            assert state["store_writable"] is True and state["last_write_failure"] is None
            assert ingest.stored_ids(server.state.store) == ingest.all_ids()
            api.close()
        # acknowledged = stored, read again from the file by a new process' store
        store = Store(url)
        assert ingest.stored_ids(store) == ingest.all_ids()
        assert len(ingest.all_ids()) == 13 * 100
        store.dispose()


# ---------------------------------------------------------------- PostgreSQL: stopped


def _bin_dir() -> Path | None:
    for found in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(found, "initdb").exists() and Path(found, "pg_ctl").exists():
            return Path(found)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl") else None


class Cluster:
    """``initdb`` + ``pg_ctl`` on a temporary directory (trust authentication, loopback)."""

    def __init__(self, bin_dir: Path, root: Path, port: int) -> None:
        self.bin_dir, self.root, self.port = bin_dir, root, port
        self.data = root / "data"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stdout[-500:]} {done.stderr[-500:]}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w",
            "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    """A running cluster, stopped and deleted afterwards (skips without PostgreSQL's tools)."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip("no initdb/pg_ctl here (/usr/lib/postgresql/*/bin or PATH)")
    root = Path(tempfile.mkdtemp(prefix="evalset-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    cluster = Cluster(bin_dir, root, free_port())
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_stopped_mid_ingest_is_503_and_every_refused_batch_is_stored_later(
    mode: str,
) -> None:
    """Was: requests in flight got 500, later ones 503 without ``Retry-After``. A
    throwaway cluster is stopped (``fast``: sessions ended; ``immediate``: a crash) while
    batches keep coming, and started again; the tokens are checked against the store
    every 0.2 s, so the authentication's store lookup meets the stop too."""
    import threading
    import time

    with throwaway_cluster() as cluster:
        settings = Settings(database_url=cluster.url, streaming=False, token_cache_seconds=0.2)
        with ThreadServer(settings) as server:
            api = httpx.Client(base_url=server.url, timeout=60)
            project_id, headers = start_project(api)
            ingest = Ingest(api, project_id, headers)
            done = threading.Event()

            def run() -> None:
                number = 0
                while not done.is_set():
                    ingest.post(number, batch(number, 50))
                    number += 1
                    time.sleep(0.02)

            def wait_for_acknowledged(count: int) -> None:
                while len(ingest.acknowledged) < count and sender.is_alive():
                    time.sleep(0.01)

            sender = threading.Thread(target=run)
            sender.start()
            try:
                wait_for_acknowledged(10)
                cluster.stop(mode)
                time.sleep(1.5)
                down = health(api)
                assert down["status"] == "degraded" and down["store_reachable"] is False, down
            finally:
                cluster.start()
                # the same process goes on storing batches once the server is back
                wait_for_acknowledged(len(ingest.acknowledged) + 10)
                done.set()
                sender.join(timeout=300)
            during = dict(ingest.statuses)
            refused = sorted(ingest.refused)
            ingest.resend_refused(wait=1.0)
            print(f"postgres stopped ({mode}): {during}, {len(refused)} batches refused")
            assert refused, during  # the stop met the ingest
            assert not ingest.unexpected, ingest.unexpected  # 200 or 503 unavailable only
            assert not ingest.refused
            assert ingest.stored_ids(server.state.store) == ingest.all_ids()
            assert len(ingest.all_ids()) == 50 * len(ingest.sent)
            assert health(api)["status"] == "ok"
            api.close()


def test_every_operation_declares_the_503_with_retry_after(tmp_path: Path) -> None:
    with ThreadServer(
        Settings(database_url=f"sqlite:///{tmp_path / 's.db'}", streaming=False)
    ) as server:
        schema = httpx.get(server.url + "/openapi.json", timeout=30).json()
    operations = [op for ops in schema["paths"].values() for op in ops.values()]
    assert len(operations) > 20
    for operation in operations:
        declared = operation["responses"]["503"]
        assert "Retry-After" in declared["headers"], operation["operationId"]
    health_schema = schema["components"]["schemas"]["ServiceHealth"]["properties"]
    assert {"store_writable", "last_write_failure"} <= set(health_schema)
