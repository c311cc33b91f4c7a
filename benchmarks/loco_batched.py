"""LOCO wall time: one fold at a time (run_fold) vs batched (run_folds), same data, same config.

    python benchmarks/loco_batched.py [--data FILE] [--folds 17] [--num-random 20] [--warm] [--vmap]

Each path runs cold in its own fresh process (compilation included: neither inherits
the other's compiled programs), both started by this one run, one after the other, on
the same data and config; ``--warm`` repeats each path in its process once compiled.
``--vmap`` adds the batched path with each round as one vmapped program.
``--baseline-rev REV`` adds the serial path of an earlier revision of this repository
(checked out in a temporary git worktree, run in its own fresh process from there): the
serial run that later changes are measured against. Prints one JSON line: seconds of
each path, the ratio serial / batched (> 1: batched is faster), and the largest absolute
difference of every per-fold figure (each policy's SEs and estimates at every k and
draw, the full-set SE and estimate), overall and per policy, and the folds and policies
whose full prompt order differs (``fold:policy``); with a baseline, the same against the
baseline's serial figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _figures(results) -> list[dict]:
    return [
        {
            "fold": r.fold,
            "se_full": r.se_full,
            "estimate_full": r.estimate_full,
            "se": {k: v.tolist() for k, v in r.se.items()},
            "estimate": {k: v.tolist() for k, v in r.estimate.items()},
            "order": {k: v.tolist() for k, v in r.order.items()},
            "tier": r.tier,
        }
        for r in results
    ]


def _run(data_path: str, config_kwargs: dict, mode: str, folds, warm: bool, queue) -> None:
    queue.put(_timed(data_path, config_kwargs, mode, folds, warm))


def _timed(data_path: str, config_kwargs: dict, mode: str, folds, warm: bool) -> dict:
    try:
        from adaptive.core.cells import build_cells
        from adaptive.core.data import read_judgments
        from adaptive.prompts.loco import LocoConfig, loco_data, run_fold, run_folds
    except ImportError:  # a baseline revision from before adaptive/ had subpackages
        import importlib

        flat = {m: importlib.import_module(f"adaptive.{m}") for m in ("cells", "data", "loco")}
        build_cells, read_judgments = flat["cells"].build_cells, flat["data"].read_judgments
        loco = flat["loco"]
        LocoConfig, loco_data, run_fold, run_folds = (  # noqa: N806
            loco.LocoConfig,
            loco.loco_data,
            loco.run_fold,
            loco.run_folds,
        )

    data = loco_data(build_cells(read_judgments(data_path)))
    config = LocoConfig(**config_kwargs)
    items = list(range(data.num_comparisons)) if folds is None else folds

    def once():
        start = time.perf_counter()
        if mode == "serial":
            results = [run_fold(data, config, f) for f in items]
        else:
            results = run_folds(data, config, items, vmap=mode == "vmap")
        return results, time.perf_counter() - start

    results, cold = once()
    out = {"seconds": cold, "figures": _figures(results)}
    if warm:
        again, out["warm_seconds"] = once()
        out["warm_identical"] = _figures(again) == out["figures"]
    return out


def measure(data_path: str, config_kwargs: dict, mode: str, folds, warm: bool) -> dict:
    """One path in a fresh process, so that it compiles everything it needs itself."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(data_path, config_kwargs, mode, folds, warm, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def measure_revision(rev: str, data_path: str, config_kwargs: dict, folds, warm: bool) -> dict:
    """The serial path of revision ``rev``, in a fresh process that imports that revision's code."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="loco-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), sha],
            check=True,
        )
        try:
            job = {"data": data_path, "config": config_kwargs, "folds": folds, "warm": warm}
            env = {**os.environ, "PYTHONPATH": str(tree)}
            proc = subprocess.run(
                [sys.executable, __file__, "--baseline-worker", json.dumps(job)],
                check=True,
                capture_output=True,
                text=True,
                env=env,
                cwd=tree,
            )
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out.pop("module").startswith(str(tree)):
        raise RuntimeError(f"the baseline did not import {rev}'s code")
    out["revision"] = sha[:10]
    return out


def _baseline_worker(job: str) -> int:
    import adaptive

    spec = json.loads(job)
    out = _timed(spec["data"], spec["config"], "serial", spec["folds"], spec["warm"])
    print(json.dumps({**out, "module": adaptive.__file__}))
    return 0


def differences(a: list[dict], b: list[dict]) -> dict:
    """Largest absolute difference of every per-fold figure, overall and per policy."""
    per: dict[str, float] = {"se_full": 0.0, "estimate_full": 0.0}
    orders_differ = []
    for x, y in zip(a, b):
        assert x["fold"] == y["fold"]
        for key in ("se_full", "estimate_full"):
            per[key] = max(per[key], abs(x[key] - y[key]))
        for field in ("se", "estimate"):
            for policy in x[field]:
                diff = float(np.max(np.abs(np.subtract(x[field][policy], y[field][policy]))))
                name = f"{field}.{policy}"
                per[name] = max(per.get(name, 0.0), diff)
        orders_differ += [f"{x['fold']}:{k}" for k in x["order"] if x["order"][k] != y["order"][k]]
        if x["tier"] != y["tier"]:
            orders_differ.append(f"{x['fold']}:tier")
    return {"max_abs_diff": max(per.values()), "per_figure": per, "orders_differ": orders_differ}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT / "data" / "chateval_ncm" / "judgments.csv"))
    parser.add_argument("--folds", type=int, default=0, help="first N folds only (0: all)")
    parser.add_argument("--num-random", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm", action="store_true", help="also time each path once compiled")
    parser.add_argument("--vmap", action="store_true", help="also the vmapped batched path")
    parser.add_argument(
        "--baseline-rev",
        metavar="REV",
        help="also the serial path of this git revision (e.g. the commit before a change)",
    )
    parser.add_argument("--baseline-worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline_worker:
        return _baseline_worker(args.baseline_worker)
    config = {"num_random": args.num_random, "seed": args.seed}
    folds = list(range(args.folds)) if args.folds else None
    serial = measure(args.data, config, "serial", folds, args.warm)
    batched = measure(args.data, config, "batched", folds, args.warm)
    report = {
        "data": os.path.relpath(args.data, ROOT),
        "folds": len(serial["figures"]),
        "cpus": os.cpu_count(),
        "serial_seconds": round(serial["seconds"], 1),
        "batched_seconds": round(batched["seconds"], 1),
        "speedup": round(serial["seconds"] / batched["seconds"], 2),
        **differences(serial["figures"], batched["figures"]),
    }
    if args.warm:
        report["serial_warm_seconds"] = round(serial["warm_seconds"], 1)
        report["batched_warm_seconds"] = round(batched["warm_seconds"], 1)
        report["warm_speedup"] = round(serial["warm_seconds"] / batched["warm_seconds"], 2)
    if args.vmap:
        vmapped = measure(args.data, config, "vmap", folds, args.warm)
        report["vmap_seconds"] = round(vmapped["seconds"], 1)
        report["vmap_speedup"] = round(serial["seconds"] / vmapped["seconds"], 2)
        report["vmap_max_abs_diff"] = differences(serial["figures"], vmapped["figures"])[
            "max_abs_diff"
        ]
    if args.baseline_rev:
        base = measure_revision(args.baseline_rev, args.data, config, folds, args.warm)
        report["baseline_revision"] = base["revision"]
        report["baseline_serial_seconds"] = round(base["seconds"], 1)
        report["speedup_vs_baseline_serial"] = round(base["seconds"] / batched["seconds"], 2)
        report["serial_speedup_vs_baseline"] = round(base["seconds"] / serial["seconds"], 2)
        against = differences(base["figures"], batched["figures"])
        report["baseline_max_abs_diff"] = against["max_abs_diff"]
        report["baseline_orders_differ"] = against["orders_differ"]
        if args.warm:
            report["baseline_serial_warm_seconds"] = round(base["warm_seconds"], 1)
    report["load_average_1min"] = round(os.getloadavg()[0], 1)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
