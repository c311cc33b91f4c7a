"""Issue 13: on PostgreSQL one replica re-estimates each project, another takes over
when it dies (a session advisory lock per project, ``services/store/leader.py``)."""

from __future__ import annotations

import json
import os
import statistics
import time
import uuid
from pathlib import Path

import httpx
import pytest

from services.settings import Settings
from services.store import Store
from services.store.leader import Leadership
from tests.factories import SYSTEMS, ProcessServer, ThreadServer, fresh_pg_database, judgments

pytestmark = pytest.mark.postgres


def _project(client: httpx.Client) -> tuple[str, dict]:
    project_id = f"p-{uuid.uuid4().hex[:8]}"
    r = client.post("/projects", json={"project_id": project_id})
    assert r.status_code == 201, r.text
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    client.post(
        f"/projects/{project_id}/systems",
        json={"systems": [{"system_id": s} for s in SYSTEMS]},
        headers=headers,
    ).raise_for_status()
    client.post(
        f"/projects/{project_id}/prompts",
        json={"prompts": [{"prompt_id": f"q{i}"} for i in range(12)]},
        headers=headers,
    ).raise_for_status()
    return project_id, headers


def _wait_snapshot(client: httpx.Client, project_id: str, headers: dict, num: int, limit: float):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        snaps = client.get(f"/projects/{project_id}", headers=headers).json()["snapshots"]
        if snaps and snaps[0]["num_judgments"] >= num:
            return snaps[0]
        time.sleep(0.05)
    # what the replicas did meanwhile (fits started, failed, published), to tell a slow fit
    # from a replica that never took the project
    events = client.get(f"/projects/{project_id}/events", headers=headers).json()["events"]
    raise AssertionError(
        f"no snapshot with {num} judgments within {limit} s; last events: {events[-8:]}"
    )


def test_one_session_holds_a_project_and_frees_it_when_it_ends() -> None:
    with fresh_pg_database() as url:
        a, b = Store(url), Store(url)
        la, lb = Leadership(a), Leadership(b)
        assert la.leads("p1") and la.leads("p1")
        assert not lb.leads("p1") and lb.leads("p2")
        la.release()  # as when the leader's process dies: its session ends
        assert lb.leads("p1") and not la.leads("p1")
        # a thread of the released process that asks again (its store poll, a NOTIFY) takes
        # nothing: a lock taken on a new session after release() would never be freed
        assert not la.leads("p3") and lb.leads("p3")
        lb.release()
        a.dispose()
        b.dispose()


def test_one_replica_re_estimates_and_the_other_takes_over() -> None:
    """Was: every replica re-estimated every project (N replicas, N times the work)."""
    with fresh_pg_database() as url:
        settings = Settings(
            database_url=url, nuts=False, fast_num_draws=200, poll_seconds=0.3, worker="thread"
        )
        with ThreadServer(settings) as a, ThreadServer(settings) as b:
            ca, cb = httpx.Client(base_url=a.url, timeout=60), httpx.Client(base_url=b.url)
            project_id, headers = _project(ca)
            # batches through both replicas; the snapshots come from one of them
            ca.post(
                f"/projects/{project_id}/judgments",
                json={"judgments": judgments(120)},
                headers=headers,
            ).raise_for_status()
            cb.post(
                f"/projects/{project_id}/judgments",
                json={"judgments": judgments(120, start=120)},
                headers=headers,
            ).raise_for_status()
            _wait_snapshot(cb, project_id, headers, 240, 120)
            leaders = [s for s in (a, b) if project_id in s.state.leader.held()]
            assert len(leaders) == 1, "exactly one replica leads the project"
            leader = leaders[0]
            follower = b if leader is a else a
            events = ca.get(f"/projects/{project_id}/events", headers=headers).json()["events"]
            assert events and {e["replica"] for e in events} == {events[0]["replica"]}
            # the leader goes away: the follower takes the project at its next poll
            leader.state.leader.release()
            leader.state.leader = None  # (a dead process would not ask again)
            leader.state.refresher.stop()
            client = cb if follower is b else ca
            client.post(
                f"/projects/{project_id}/judgments",
                json={"judgments": judgments(30, start=240)},
                headers=headers,
            ).raise_for_status()
            started = time.monotonic()
            # the follower's first fit of a new size compiles it while the other test worker
            # runs its own fits: the same 120 s as the first snapshot's
            _wait_snapshot(client, project_id, headers, 270, 120)
            print(f"takeover: a snapshot with the new batch {time.monotonic() - started:.2f} s")
            assert project_id in follower.state.leader.held()
            ca.close()
            cb.close()


def test_a_batch_stored_by_a_follower_wakes_the_leader_at_once() -> None:
    """LISTEN/NOTIFY: the leader does not wait for its store poll (60 s here)."""
    with fresh_pg_database() as url:
        settings = Settings(
            database_url=url, nuts=False, fast_num_draws=200, poll_seconds=60, worker="thread"
        )
        with ThreadServer(settings) as a, ThreadServer(settings) as b:
            ca, cb = httpx.Client(base_url=a.url, timeout=60), httpx.Client(base_url=b.url)
            project_id, headers = _project(ca)
            ca.post(
                f"/projects/{project_id}/judgments",
                json={"judgments": judgments(240)},
                headers=headers,
            ).raise_for_status()
            _wait_snapshot(ca, project_id, headers, 240, 120)
            assert project_id in a.state.leader.held()  # the replica that got the batch leads
            assert project_id not in b.state.leader.held()
            started = time.monotonic()
            cb.post(
                f"/projects/{project_id}/judgments",
                json={"judgments": judgments(10, start=240)},
                headers=headers,
            ).raise_for_status()
            _wait_snapshot(cb, project_id, headers, 250, 30)
            print(
                f"batch via the follower -> leader's snapshot in {time.monotonic() - started:.2f} s"
            )
            ca.close()
            cb.close()


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and its live children (utime + stime)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                pids.append(int(entry.name))
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(stat[11]) + int(stat[12])) / tick
    return total


def _run_pair(url: str, env: dict, seconds: float, *, kills: int = 0) -> dict:
    """Two `evalset serve` replicas; batches through both; optionally SIGKILL the leader."""
    servers = [ProcessServer(url, env=env), ProcessServer(url, env=env)]
    for s in servers:
        s.start()
    clients = [httpx.Client(base_url=s.url, timeout=60) for s in servers]
    project_id, headers = _project(clients[0])
    sent = 0
    batch = 50
    takeovers: list[float] = []
    cpu_before = [_cpu_seconds(s.proc.pid) for s in servers]  # type: ignore[union-attr]

    def post(i: int) -> None:
        nonlocal sent
        for _ in range(5):
            try:
                r = clients[i].post(
                    f"/projects/{project_id}/judgments",
                    json={"judgments": judgments(batch, start=sent, seed=sent)},
                    headers=headers,
                )
                if r.status_code == 200:
                    sent += batch
                    return
            except httpx.HTTPError:
                pass
            i = 1 - i
        raise AssertionError("no replica accepted the batch")

    try:
        started = time.monotonic()
        k = 0
        while time.monotonic() - started < seconds:
            post(k % 2)
            k += 1
            time.sleep(0.1)
        _wait_snapshot(clients[0], project_id, headers, sent, 180)
        cpu_after = [_cpu_seconds(s.proc.pid) for s in servers]  # type: ignore[union-attr]
        for _ in range(kills):
            events = (
                clients[0]
                .get(
                    f"/projects/{project_id}/events", params={"kind": "published"}, headers=headers
                )
                .json()
            )
            last = (
                clients[0]
                .get(
                    f"/projects/{project_id}/events",
                    params={"after_seq": max(0, events["events"][-1]["seq"] - 1)},
                    headers=headers,
                )
                .json()["events"][-1]
            )
            worker_pid = int(last["replica"].rsplit(":", 1)[1])
            leader = next(
                i
                for i, s in enumerate(servers)
                if worker_pid == s.proc.pid  # type: ignore[union-attr]
                or Path(f"/proc/{worker_pid}/stat").exists()
                and int(Path(f"/proc/{worker_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
                == s.proc.pid  # type: ignore[union-attr]
            )
            servers[leader].kill()
            killed_at = time.monotonic()
            post(1 - leader)
            _wait_snapshot(clients[1 - leader], project_id, headers, sent, 300)
            takeovers.append(time.monotonic() - killed_at)
            servers[leader].start()
        stored = clients[0].get(f"/projects/{project_id}", headers=headers).json()
        return {
            "sent": sent,
            "stored": stored["num_judgments"],
            "cpu_seconds": [round(a - b, 2) for a, b in zip(cpu_after, cpu_before)],
            "takeover_seconds": [round(t, 2) for t in takeovers],
        }
    finally:
        for c in clients:
            c.close()
        for s in servers:
            s.stop()


#: SIGKILLs of the leader, and seconds of batches before them, in the slow suite;
#: ``EVALSET_LEADER_KILLS=10 EVALSET_LEADER_SECONDS=40`` repeats the run behind
#: docs/service.md's takeover and CPU figures (about 5 minutes longer)
LEADER_KILLS = int(os.environ.get("EVALSET_LEADER_KILLS", "4"))
LEADER_SECONDS = float(os.environ.get("EVALSET_LEADER_SECONDS", "20"))


@pytest.mark.slow
def test_leader_takeover_over_repeated_kills_and_cpu(tmp_path: Path) -> None:
    """Two replicas: re-estimation CPU about 1x with leader election (vs about 2x without),
    and repeated SIGKILLs of the leader (``LEADER_KILLS``): the follower publishes a
    snapshot with the batch sent after each kill within the bound (poll_seconds + one
    fit), nothing lost."""
    env = {
        "EVALSET_NUTS": "false",
        "EVALSET_POLL_SECONDS": "1",
        "EVALSET_FAST_NUM_DRAWS": "200",
        "EVALSET_JAX_CACHE_DIR": str(tmp_path / "jax"),
    }
    out = {}
    for election in ("false", "true"):
        with fresh_pg_database() as url:
            out[election] = _run_pair(
                url,
                {**env, "EVALSET_LEADER_ELECTION": election},
                LEADER_SECONDS,
                kills=LEADER_KILLS if election == "true" else 0,
            )
    print("leader election:", json.dumps(out))
    on, off = out["true"], out["false"]
    assert on["stored"] == on["sent"] and off["stored"] == off["sent"]
    assert len(on["takeover_seconds"]) == LEADER_KILLS
    assert max(on["takeover_seconds"]) < 60
    print(
        f"takeover median {statistics.median(on['takeover_seconds']):.1f} s, "
        f"max {max(on['takeover_seconds']):.1f} s; CPU on {sum(on['cpu_seconds']):.1f} s, "
        f"off {sum(off['cpu_seconds']):.1f} s"
    )
