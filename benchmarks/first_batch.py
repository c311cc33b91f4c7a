"""A fresh service's first batch: how long annotators wait after the first judgments.

Starts ``evalset serve`` cold (a fresh SQLite file, an empty JAX compilation cache in a new
temporary ``EVALSET_JAX_CACHE_DIR``, the server's defaults otherwise: scheduled NUTS
refits on unless ``--no-nuts``, re-estimation on a thread unless ``--worker process``),
registers a campaign (``--systems`` systems, ``--prompts`` prompts), posts ``--judgments``
simulated judgments in one batch (the generator of ``benchmarks/load_test.py``), then asks ``POST .../next-batch``
until it answers 200 and polls ``GET .../snapshots`` until the first posterior snapshot is
stored. Prints, as JSON: seconds from the post's answer to the first 200 from next-batch
(and the 409s before it), the first batch's ``basis`` and ``basis_note``, seconds to the
first snapshot, and the ratio of the two; then the basis of a batch asked once the snapshot
exists. ``--wait-nuts`` also waits for the first scheduled NUTS refit and reports
``/health``'s checks (its comparison with the live snapshot, the slowest compile of any
fit). ``--out`` appends the row to a JSON-lines file.

Example:
    nice python benchmarks/first_batch.py --judgments 3000 --out research/load/first_batch.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from load_test import Campaign, free_port, register_campaign, start_server


def _first_batch(client: httpx.Client, url: str, headers: dict, timeout: float) -> dict:
    """Ask for a batch until the answer is a 200: the seconds it took, the refusals before."""
    start = time.monotonic()
    refused: list[dict] = []
    while True:
        asked = time.monotonic()
        r = client.post(url, json={"size": 20, "annotator_id": "first"}, headers=headers)
        if r.status_code == 200:
            body = r.json()
            return {
                "first_batch_s": round(time.monotonic() - start, 3),
                "first_batch_request_s": round(time.monotonic() - asked, 3),
                "refused_before": len(refused),
                "refusals": refused[:3],
                "basis": body.get("basis"),
                "basis_note": body.get("basis_note"),
                "cells": len(body["cells"]),
            }
        if r.status_code != 409:
            raise RuntimeError(f"next-batch answered {r.status_code}: {r.text}")
        error = r.json()["error"]
        if len(refused) < 3:
            refused.append({"code": error["code"], "message": error["message"]})
        else:
            refused.append({})
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"no batch after {timeout} s: {error}")
        time.sleep(0.1)


def _first_snapshot(client: httpx.Client, base: str, headers: dict, timeout: float) -> float:
    start = time.monotonic()
    while True:
        r = client.get(f"{base}/snapshots", headers=headers)
        r.raise_for_status()
        if r.json().get("snapshots"):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"no snapshot after {timeout} s")
        time.sleep(0.25)


def _first_nuts(client: httpx.Client, base: str, headers: dict, timeout: float) -> dict:
    """Seconds until the first scheduled NUTS refit ended (published, rejected or failed),
    and how."""
    start = time.monotonic()
    while True:
        r = client.get(f"{base}/events", headers=headers)
        r.raise_for_status()
        ended = [
            e
            for e in r.json()["events"]
            if e["method"] == "nuts" and e["kind"] in ("published", "rejected", "failed")
        ]
        if ended:
            e = ended[0]
            return {
                "first_nuts_s": time.monotonic() - start,
                "first_nuts": {k: e[k] for k in ("kind", "seconds", "num_judgments", "detail")},
            }
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"no NUTS refit ended after {timeout} s")
        time.sleep(1.0)


def _checks(client: httpx.Client, admin: dict, timeout: float = 60.0) -> dict:
    """``/health``'s checks once a comparison is stored (the events are written in batches)."""
    start = time.monotonic()
    while True:
        checks = client.get("/health", headers=admin).json()["checks"]
        if checks["compared"] or time.monotonic() - start > timeout:
            return checks
        time.sleep(0.5)


def _campaign(client: httpx.Client, campaign: Campaign, admin: dict) -> tuple[str, dict]:
    project = f"first-{int(time.time())}"
    headers = register_campaign(client, project, campaign, admin)
    return project, headers


def measure(args: argparse.Namespace) -> dict:
    """One cold start, one post, the first batch and the first snapshot."""
    admin_token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EVALSET_JAX_CACHE_DIR"] = str(Path(tmp) / "jax-cache")  # empty: cold
        port = free_port()
        started = time.monotonic()
        proc = start_server(
            f"sqlite:///{Path(tmp) / 'first.db'}",
            port,
            nuts=not args.no_nuts,
            worker=args.worker,
            admin_token=admin_token,
        )
        health_s = time.monotonic() - started
        base = f"http://127.0.0.1:{port}"
        campaign = Campaign(args.systems, args.prompts, args.seed)
        try:
            with httpx.Client(base_url=base, timeout=120) as client:
                admin = {"Authorization": f"Bearer {admin_token}"}
                project, headers = _campaign(client, campaign, admin)
                posted = time.monotonic()
                client.post(
                    f"/projects/{project}/judgments",
                    json={"judgments": campaign.batch(args.judgments)},
                    headers=headers,
                ).raise_for_status()
                post_s = time.monotonic() - posted
                row = _first_batch(client, f"/projects/{project}/next-batch", headers, 900)
                snapshot_s = _first_snapshot(client, f"/projects/{project}", headers, 1800)
                # seconds since the post's answer, as the first batch is timed
                snapshot_s += row["first_batch_s"]
                after = client.post(
                    f"/projects/{project}/next-batch", json={"size": 20}, headers=headers
                )
                after.raise_for_status()
                if args.wait_nuts:
                    nuts = _first_nuts(client, f"/projects/{project}", headers, 3600)
                    row["first_nuts_s"] = round(nuts["first_nuts_s"] + snapshot_s, 1)
                    row["first_nuts"] = nuts["first_nuts"]
                row["checks"] = _checks(client, admin, 60.0 if args.wait_nuts else 0.0)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    return {
        "benchmark": "first_batch",
        "judgments": args.judgments,
        "systems": args.systems,
        "prompts": args.prompts,
        "worker": args.worker,
        "nuts": not args.no_nuts,
        "seed": args.seed,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "server_health_s": round(health_s, 3),
        "post_s": round(post_s, 3),
        **row,
        "first_snapshot_s": round(snapshot_s, 3),
        "snapshot_over_first_batch": round(snapshot_s / max(row["first_batch_s"], 1e-9), 1),
        "basis_after_snapshot": after.json().get("basis"),
        "load_average_after": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--judgments", type=int, default=3000)
    parser.add_argument("--systems", type=int, default=10)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--worker",
        choices=["thread", "process"],
        default="thread",
        help="where the server re-estimates (EVALSET_WORKER; thread is the default)",
    )
    parser.add_argument(
        "--no-nuts", action="store_true", help="no scheduled NUTS refits (EVALSET_NUTS=false)"
    )
    parser.add_argument(
        "--wait-nuts",
        action="store_true",
        help="also wait for the first scheduled NUTS refit to end (published or rejected), "
        "and report /health's checks (its divergence from the live snapshot when published, "
        "the slowest compile of any fit)",
    )
    parser.add_argument("--out", help="append the row to this JSON-lines file")
    args = parser.parse_args(argv)
    row = measure(args)
    print(json.dumps(row, indent=2))
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
