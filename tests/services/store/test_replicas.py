"""Several ``evalset serve`` replicas on one PostgreSQL database, started by ``deploy/replicas.sh``.

Real processes, real HTTP: replicas started together migrate once, a judgment
stored through one is seen by the other, the same batch sent to both at once is
stored once, both answer from snapshots that cover every judgment, and a slower
replica's fit never turns the latest snapshot back in time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.factories import free_port, fresh_pg_database, judgments, new_project

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy" / "replicas.sh"

pytestmark = pytest.mark.postgres


def _evalset() -> str:
    found = Path(sys.executable).with_name("evalset")
    return str(found) if found.exists() else (shutil.which("evalset") or "evalset")


def _wait_healthy(urls: list[str], proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    pending = list(urls)
    while pending and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"replicas.sh exited with {proc.returncode}: {proc.stderr.read()}")
        for url in list(pending):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    pending.remove(url)
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    assert not pending, f"replicas not healthy: {pending}"


def test_replicas_script_refuses_sqlite() -> None:
    env = {**os.environ, "EVALSET_DATABASE_URL": "sqlite:///x.db", "EVALSET": _evalset()}
    out = subprocess.run(["bash", str(SCRIPT), "8001"], env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "PostgreSQL" in out.stderr


def _fake_evalset(tmp_path: Path, first_run: str) -> Path:
    """An ``evalset`` that records its pid per port; port 1 runs ``first_run`` (shell)."""
    fake = tmp_path / "evalset"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'port="${@: -1}"\n'
        f'echo $$ >> {tmp_path}/"$port".pids\n'
        f'[ "$port" = 1 ] && {{ {first_run} }}\n'
        "exec sleep 120\n"
    )
    fake.chmod(0o755)
    return fake


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_replicas_script_restarts_the_replica_that_exits(tmp_path: Path) -> None:
    """A replica that exits is started again on its port; the others keep running (issue 40:
    the death of one replica used to stop them all); SIGTERM then stops the set."""
    fake = _fake_evalset(
        tmp_path, f"[ -e {tmp_path}/once ] || {{ touch {tmp_path}/once; exit 3; }};"
    )
    env = {
        **os.environ,
        "EVALSET_DATABASE_URL": "postgresql+psycopg://x@127.0.0.1/x",
        "EVALSET": str(fake),
    }
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "1", "2"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while len(_pids(tmp_path / "1.pids")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_pids(tmp_path / "1.pids")) == 2, "the replica that exited was not restarted"
        time.sleep(1.5)
        assert proc.poll() is None
        (other,) = _pids(tmp_path / "2.pids")
        assert Path(f"/proc/{other}").exists(), "the other replica was stopped"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "exited (status 3); starting it again" in err
    for pid in (*_pids(tmp_path / "1.pids"), *_pids(tmp_path / "2.pids")):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_replicas_script_gives_up_on_a_replica_that_keeps_failing(tmp_path: Path) -> None:
    """A replica that exits at every start stops the set, and the script fails, so that its
    supervisor sees it (restarting it forever would hide a broken configuration)."""
    fake = _fake_evalset(tmp_path, "exit 0;")
    env = {
        **os.environ,
        "EVALSET_DATABASE_URL": "postgresql+psycopg://x@127.0.0.1/x",
        "EVALSET": str(fake),
        "REPLICAS_MAX_FAST_EXITS": "3",
    }
    out = subprocess.run(
        ["bash", str(SCRIPT), "1", "2"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1, out.stderr
    assert "giving up" in out.stderr and len(_pids(tmp_path / "1.pids")) == 3
    (other,) = _pids(tmp_path / "2.pids")
    assert not Path(f"/proc/{other}").exists() or "Z" in Path(f"/proc/{other}/stat").read_text()


def test_two_replicas_share_one_database() -> None:
    with fresh_pg_database() as url:
        ports = [free_port(), free_port()]
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        env = {
            **os.environ,
            "EVALSET_DATABASE_URL": url,
            "EVALSET": _evalset(),
            "EVALSET_OPEN": "true",
            "EVALSET_NUTS": "false",
            "EVALSET_WORKER": "thread",
            "EVALSET_POLL_SECONDS": "0.5",
            "EVALSET_FAST_NUM_DRAWS": "200",
            "JAX_PLATFORMS": "cpu",
        }
        proc = subprocess.Popen(
            ["bash", str(SCRIPT), *map(str, ports)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _wait_healthy(urls, proc)
            with (
                httpx.Client(base_url=urls[0], timeout=60) as one,
                httpx.Client(base_url=urls[1], timeout=60) as two,
            ):
                project_id, headers = new_project(one)
                path = f"/projects/{project_id}/judgments"
                # batches through either replica, and one batch through both at once
                assert (
                    one.post(path, json={"judgments": judgments(120)}, headers=headers).json()[
                        "accepted"
                    ]
                    == 120
                )
                assert (
                    two.post(
                        path, json={"judgments": judgments(120, start=120)}, headers=headers
                    ).json()["accepted"]
                    == 120
                )
                same = {"judgments": judgments(60, start=240)}
                with ThreadPoolExecutor(2) as pool:
                    answers = list(
                        pool.map(lambda c: c.post(path, json=same, headers=headers), (one, two))
                    )
                assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
                assert sorted(a.json()["accepted"] for a in answers) == [0, 60]
                for client in (one, two):
                    assert (
                        client.get(f"/projects/{project_id}", headers=headers).json()[
                            "num_judgments"
                        ]
                        == 300
                    )
                # both answer from one stored snapshot that covers every judgment
                deadline = time.monotonic() + 240
                seen: dict[int, int] = {}
                while time.monotonic() < deadline and len(seen) < 2:
                    for i, client in enumerate((one, two)):
                        r = client.get(f"/projects/{project_id}/significance", headers=headers)
                        if r.status_code == 200 and r.json()["snapshot"]["num_judgments"] == 300:
                            seen[i] = r.json()["snapshot"]["version"]
                    time.sleep(0.2)
                assert len(seen) == 2, "no snapshot of all 300 judgments on both replicas"
                time.sleep(2)  # let the slower replica publish its fit too
                snaps = one.get(f"/projects/{project_id}/snapshots", headers=headers).json()
                fast = sorted(
                    (s for s in snaps["snapshots"] if s["method"] == "laplace"),
                    key=lambda s: s["version"],
                )
                counts = [s["num_judgments"] for s in fast]
                assert counts == sorted(counts), f"latest snapshot went back in time: {counts}"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                assert proc.wait(60) == 143
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
        for u in urls:
            with pytest.raises(httpx.HTTPError):
                httpx.get(u + "/health", timeout=1)
