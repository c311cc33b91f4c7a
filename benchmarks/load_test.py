"""Load test: sustained ingest in batches over real HTTP while re-estimation runs.

Starts ``evalset serve`` on a free loopback port (a fresh SQLite file unless
``--database-url``), registers a campaign, posts a warm-up so that a first
snapshot exists, then for ``--duration`` seconds posts batches of ``--batch``
judgments from ``--writers`` client threads while ``--readers`` threads ask for
significance, one thread reads ``GET /decisions`` and one asks ``POST /next-batch``
(each every ``--read-interval`` seconds). Prints throughput and p50/p99 latencies as
JSON (each read's p99 also as a ratio to the POST p99 of the same run), with the
offered rate (``--rate`` batches/s x ``--batch``), the judgments stored when the
reads ended, the CPU seconds the server and its worker process spent while
measuring, and the load average before and after.

Example:
    python benchmarks/load_test.py --duration 30 --rate 10 --worker process  # 500/s offered
    python benchmarks/load_test.py --database-url postgresql+psycopg://postgres@127.0.0.1/bench
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
from latency import summarize_ms


def register_campaign(client: httpx.Client, project: str, campaign: Campaign, admin: dict) -> dict:
    """Create ``project`` and register the campaign's systems and prompts; its token's headers."""
    r = client.post("/projects", json={"project_id": project}, headers=admin)
    r.raise_for_status()
    headers = {"Authorization": f"Bearer {r.json()['token']}"}
    client.post(
        f"/projects/{project}/systems",
        json={"systems": [{"system_id": s} for s in campaign.systems]},
        headers=headers,
    ).raise_for_status()
    client.post(
        f"/projects/{project}/prompts",
        json={"prompts": [{"prompt_id": p, "text": p} for p in campaign.prompts]},
        headers=headers,
    ).raise_for_status()
    return headers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentiles(values: list[float]) -> dict[str, float | int]:
    return summarize_ms(values, quantiles=(50, 99), digits=2)


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU time (user + system) of a process and of each of its children, from ``/proc``.

    The server's own figure is the request path; a child's is the re-estimation worker
    (``EVALSET_WORKER=process``) or the multiprocessing resource tracker. Linux only:
    empty elsewhere.
    """
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read(p: int) -> tuple[int, float] | None:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        # after the command: state, ppid, ..., utime (12th), stime (13th)
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / tick

    out: dict[str, float] = {}
    own = read(pid)
    if own is None:
        return out
    out["server"] = own[1]
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            child = read(int(entry))
            if child is not None and child[0] == pid:
                out[f"child_{entry}"] = child[1]
    return out


class Campaign:
    """Simulated judgments: systems with true skills, prompts, annotators."""

    def __init__(self, num_systems: int, num_prompts: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.systems = [f"sys{i:02d}" for i in range(num_systems)]
        self.skill = self.rng.normal(size=num_systems)
        self.prompts = [f"prompt{j:04d}" for j in range(num_prompts)]
        self.pairs = list(itertools.combinations(range(num_systems), 2))
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def batch(self, size: int) -> list[dict]:
        with self.lock:
            ids = [next(self.counter) for _ in range(size)]
            picks = self.rng.integers(0, len(self.pairs), size)
            prompts = self.rng.integers(0, len(self.prompts), size)
            noise = self.rng.logistic(size=size)
        rows = []
        for k, pick, p, e in zip(ids, picks, prompts, noise):
            a, b = self.pairs[int(pick)]
            u = self.skill[b] - self.skill[a] + e
            rows.append(
                {
                    "judgment_id": f"load-{k}",
                    "item_id": self.prompts[int(p)],
                    "system_a": self.systems[a],
                    "system_b": self.systems[b],
                    "annotator_id": f"ann{k % 25}",
                    "winner": "b" if u > 0.5 else "a" if u < -0.5 else "tie",
                }
            )
        return rows


def start_server(
    database_url: str, port: int, *, nuts: bool, worker: str = "thread", admin_token: str = ""
) -> subprocess.Popen:
    """``evalset serve`` with its production defaults: admin token, body, time and rate limits."""
    env = {
        **os.environ,
        "EVALSET_ADMIN_TOKEN": admin_token,
        "EVALSET_DATABASE_URL": database_url,
        "EVALSET_PORT": str(port),
        "EVALSET_NUTS": "true" if nuts else "false",
        "EVALSET_WORKER": worker,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "serve", "--log-level", "error"], env=env
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of sustained load")
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=1)
    parser.add_argument(
        "--read-interval",
        type=float,
        default=0.05,
        help="seconds between the reads of each reader (significance, decisions, next-batch)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="target batches per second over all writers (0: as fast as possible)",
    )
    parser.add_argument("--systems", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=2000, help="judgments before measuring")
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--url", help="use a running server instead of starting one")
    parser.add_argument("--nuts", action="store_true", help="also run scheduled NUTS refits")
    parser.add_argument(
        "--worker",
        choices=["thread", "process"],
        default="thread",
        help="where the server re-estimates (EVALSET_WORKER)",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="do not wait for a first snapshot (a server without re-estimation answers 409)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--admin-token",
        default=os.environ.get("EVALSET_ADMIN_TOKEN", ""),
        help="admin token of a --url server (a started server gets a random one)",
    )
    args = parser.parse_args(argv)
    if not args.url and not args.admin_token:
        args.admin_token = secrets.token_urlsafe(24)

    tmp = tempfile.TemporaryDirectory()
    proc = None
    if args.url:
        base = args.url.rstrip("/")
    else:
        port = free_port()
        db = args.database_url or f"sqlite:///{Path(tmp.name) / 'load.db'}"
        proc = start_server(
            db, port, nuts=args.nuts, worker=args.worker, admin_token=args.admin_token
        )
        base = f"http://127.0.0.1:{port}"
    campaign = Campaign(args.systems, args.prompts, args.seed)
    project = f"load-{int(time.time())}"
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            admin = {"Authorization": f"Bearer {args.admin_token}"} if args.admin_token else {}
            headers = register_campaign(client, project, campaign, admin)
            client.post(
                f"/projects/{project}/judgments",
                json={"judgments": campaign.batch(args.warmup)},
                headers=headers,
            ).raise_for_status()
            start = time.monotonic()
            while (
                not args.no_wait
                and client.get(f"/projects/{project}/significance", headers=headers).status_code
                != 200
            ):
                if time.monotonic() - start > 300:
                    raise RuntimeError("no first snapshot after 300 s")
                time.sleep(0.2)
            first_snapshot_s = time.monotonic() - start

        post_lat: list[float] = []
        get_lat: list[float] = []
        decisions_lat: list[float] = []
        next_batch_lat: list[float] = []
        decisions_seen = [0]
        errors: list[str] = []
        accepted = [0]
        versions: set[int] = set()
        lock = threading.Lock()
        stop_at = time.monotonic() + args.duration
        interval = args.writers / args.rate if args.rate > 0 else 0.0

        def writer() -> None:
            with httpx.Client(base_url=base, timeout=60, headers=headers) as c:
                next_at = time.monotonic()
                while time.monotonic() < stop_at:
                    body = {"judgments": campaign.batch(args.batch)}
                    t0 = time.perf_counter()
                    r = c.post(f"/projects/{project}/judgments", json=body)
                    dt = time.perf_counter() - t0
                    with lock:
                        post_lat.append(dt)
                        if r.status_code == 200:
                            accepted[0] += r.json()["accepted"]
                        else:
                            errors.append(f"POST {r.status_code}")
                    if interval:
                        next_at += interval
                        time.sleep(max(0.0, next_at - time.monotonic()))

        def reader() -> None:
            with httpx.Client(base_url=base, timeout=60, headers=headers) as c:
                while time.monotonic() < stop_at:
                    t0 = time.perf_counter()
                    r = c.get(f"/projects/{project}/significance")
                    dt = time.perf_counter() - t0
                    with lock:
                        get_lat.append(dt)
                        if r.status_code == 200:
                            versions.add(r.json()["snapshot"]["version"])
                        elif not (args.no_wait and r.status_code == 409):
                            errors.append(f"GET {r.status_code}")
                    time.sleep(args.read_interval)

        def decisions_reader() -> None:
            with httpx.Client(base_url=base, timeout=60, headers=headers) as c:
                while time.monotonic() < stop_at:
                    t0 = time.perf_counter()
                    r = c.get(f"/projects/{project}/decisions")
                    dt = time.perf_counter() - t0
                    with lock:
                        decisions_lat.append(dt)
                        if r.status_code == 200:
                            decisions_seen[0] = max(decisions_seen[0], r.json()["num_judgments"])
                        else:
                            errors.append(f"decisions {r.status_code}")
                    time.sleep(args.read_interval)

        def next_batch_reader() -> None:
            with httpx.Client(base_url=base, timeout=60, headers=headers) as c:
                while time.monotonic() < stop_at:
                    body = {"size": 10, "lease_seconds": 1.0, "annotator_id": "ann3"}
                    t0 = time.perf_counter()
                    r = c.post(f"/projects/{project}/next-batch", json=body)
                    dt = time.perf_counter() - t0
                    with lock:
                        next_batch_lat.append(dt)
                        if r.status_code != 200 and not (args.no_wait and r.status_code == 409):
                            errors.append(f"next-batch {r.status_code}")
                    time.sleep(args.read_interval)

        threads = [threading.Thread(target=writer) for _ in range(args.writers)]
        threads += [threading.Thread(target=reader) for _ in range(args.readers)]
        threads += [
            threading.Thread(target=decisions_reader),
            threading.Thread(target=next_batch_reader),
        ]
        load_before = os.getloadavg()
        cpu_before = cpu_seconds(proc.pid) if proc is not None else {}
        t_start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t_start
        cpu_after = cpu_seconds(proc.pid) if proc is not None else {}
        with httpx.Client(base_url=base, timeout=60, headers=headers) as c:
            status = c.get(f"/projects/{project}").json()
        post_p99 = percentiles(post_lat).get("p99_ms", 0.0) or 0.0

        def read(values: list[float]) -> dict:
            out = dict(percentiles(values))
            if post_p99 and "p99_ms" in out:
                out["p99_over_post_p99"] = round(float(out["p99_ms"]) / float(post_p99), 2)
            return out

        report = {
            "duration_s": round(elapsed, 2),
            "worker": args.worker,
            "batch": args.batch,
            "writers": args.writers,
            "offered_judgments_per_s": args.rate * args.batch if args.rate > 0 else None,
            "judgments_accepted": accepted[0],
            "throughput_judgments_per_s": round(accepted[0] / elapsed, 1),
            "post": percentiles(post_lat),
            "significance_get": percentiles(get_lat),
            "decisions_get": read(decisions_lat),
            "next_batch_post": read(next_batch_lat),
            "judgments_seen_by_decisions": decisions_seen[0],
            "errors": len(errors),
            "error_statuses": sorted(set(errors)),
            "first_snapshot_s": round(first_snapshot_s, 2),
            "snapshot_versions_seen_by_readers": len(versions),
            "stored_judgments": status["num_judgments"],
            "latest_snapshot": status["snapshots"][0] if status["snapshots"] else None,
            # CPU seconds spent during the measured window: the server (request path) and
            # its children (the worker process, when EVALSET_WORKER=process)
            "cpu_s": {
                k: round(v - cpu_before.get(k, 0.0), 2)
                for k, v in cpu_after.items()
                if v - cpu_before.get(k, 0.0) >= 0.01
            },
            "cpu_count": os.cpu_count(),
            "load_average_before": load_before,
            "load_average": os.getloadavg(),
        }
        print(json.dumps(report, indent=1, default=str))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
