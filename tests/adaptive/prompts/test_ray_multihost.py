"""`evalset loco` on a two-host Ray cluster: head and worker in separate network namespaces.

The cluster is ``deploy/ray_netns.sh`` (the local rehearsal deploy/README.md
documents): two hosts with their own network stacks and addresses (10.77.0.1,
10.77.0.2) joined by a veth pair, one CPU each. The CLI runs on the head host
with ``RAY_ADDRESS`` pointing at it, exactly as on a real cluster. Ray's state
API says which host ran each fold; the results must equal a serial run's.

Needs root and iproute2 (skipped otherwise); about 2 minutes. Run with
``pytest -m slow tests/adaptive/prompts/test_ray_multihost.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "deploy" / "ray_netns.sh"
BIN = Path(sys.executable).parent
DATA = ROOT / "data" / "chateval_ncm" / "judgments.csv"
HEAD_IP, WORKER_IP = "10.77.0.1", "10.77.0.2"
NUM_FOLDS = 17  # ChatEval NCM: 17 comparisons
# small settings: the test is about where folds run, not about the figure
LOCO_ARGS = ["--grid", "10,25", "--num-random", "2", "--policies", "random,prompt"]
LOCO_ARGS += ["--format", "json", "--data", str(DATA)]

# about 90 s on an idle 2-core machine; the limits leave room for a heavily shared one
pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(2400)]


def _unavailable() -> str | None:
    """Why this machine cannot host the rehearsal cluster (None when it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: it creates network namespaces and a veth pair"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` (ip netns)"
    if not (BIN / "ray").exists() or not (BIN / "evalset").exists():
        return f"needs the ray and evalset commands in {BIN}"
    probe = f"evprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _script(name: str, *args: str, timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "NETNS_NAME": name, "RAY_BIN": str(BIN / "ray")}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout, **kw
    )


def _remove_stale() -> None:
    """Tear down rehearsal clusters left by test runs that were killed (their pid is gone)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for pid in {int(m) for m in re.findall(r"^evr(\d+)-(?:head|work)\b", listed, re.M)}:
        if not Path(f"/proc/{pid}").exists():
            _script(f"evr{pid}", "down")


@pytest.fixture(scope="module")
def cluster():
    reason = _unavailable()
    if reason:
        pytest.skip(reason)
    _remove_stale()
    name = f"evr{os.getpid()}"
    try:
        up = _script(name, "up")
        assert up.returncode == 0, f"cluster did not start:\n{up.stdout}\n{up.stderr}"
        count = (
            "import ray; ray.init(log_to_driver=False); print(sum(n['Alive'] for n in ray.nodes()))"
        )
        nodes = _script(name, "exec", str(BIN / "python"), "-c", count, timeout=120)
        assert nodes.stdout.strip().splitlines()[-1] == "2", nodes.stderr
        yield name
    finally:
        # runs on failure and on a pytest-timeout too: every process of both hosts, by pid
        _script(name, "down", timeout=120)


def _fold_hosts(name: str) -> dict[str, tuple[str, str]]:
    """Task name -> (state, node IP), from the head's state API (Ray's own record)."""
    snippet = f"""
import json
from ray.util.state import list_nodes, list_tasks
api = "http://{HEAD_IP}:8265"
ip = {{n.node_id: n.node_ip for n in list_nodes(address=api)}}
tasks = list_tasks(address=api, filters=[("func_or_class_name", "=", "_run_item")],
                   detail=True, limit=1000, raise_on_missing_output=False)
print(json.dumps({{t.name: [t.state, ip.get(t.node_id, "?")] for t in tasks}}))
"""
    out = _script(name, "exec", str(BIN / "python"), "-c", snippet, timeout=120)
    assert out.returncode == 0, out.stderr
    return {k: tuple(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def test_loco_folds_run_on_both_hosts_and_match_serial(cluster):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    serial = subprocess.run(
        [str(BIN / "evalset"), "loco", "--workers", "1", *LOCO_ARGS],
        env=env,
        capture_output=True,
        text=True,
        timeout=1000,
        cwd=ROOT,
    )
    assert serial.returncode == 0, serial.stderr

    remote = _script(
        cluster, "exec", str(BIN / "evalset"), "loco", "--workers", "2", *LOCO_ARGS, timeout=1000
    )
    assert remote.returncode == 0, remote.stderr
    assert "Connected to Ray cluster" in remote.stderr  # joined RAY_ADDRESS, not a local runtime
    assert f"{NUM_FOLDS} folds (200 prompts) on Ray with 2 workers" in remote.stderr
    assert "on 2 node(s)" in remote.stderr

    # the same figures, whichever host ran a fold
    rows_serial, rows_remote = json.loads(serial.stdout), json.loads(remote.stdout)
    assert len(rows_remote) == len(rows_serial) == 1 + 2 * 2
    for s, r in zip(rows_serial, rows_remote):
        assert (s["policy"], s["k"], r["n_folds"]) == (r["policy"], r["k"], NUM_FOLDS)
        for column in ("se_mean", "se_sd", "draw_sd", "rmse_vs_full"):
            assert r[column] == pytest.approx(s[column], rel=0, abs=1e-12), (s, r)

    # each worker's group of folds (one compiled program per group) ran once, to
    # completion, and both hosts ran one
    hosts = _fold_hosts(cluster)
    assert sorted(hosts) == sorted(f"fold_group_task[{j}]" for j in range(2))
    assert {state for state, _ in hosts.values()} == {"FINISHED"}
    per_host = {ip: sum(1 for _, h in hosts.values() if h == ip) for ip in (HEAD_IP, WORKER_IP)}
    assert all(count >= 1 for count in per_host.values()), per_host
    print(f"fold groups per host: {per_host}")
