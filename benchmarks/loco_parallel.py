"""LOCO wall time: serial vs Ray with N workers, measured in the same run, and identity of results.

    python benchmarks/loco_parallel.py [--data FILE] [--workers 2] [--folds 17] [--num-random 20]

Both runs start cold: the serial run compiles the fast fit in this process,
the Ray run in each worker process (the same shapes, in parallel). Prints one
JSON object: seconds for each, the ratio serial / Ray (> 1: Ray is faster),
and whether every fold's numbers are bit-for-bit identical.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _run(data_path: str, config_kwargs: dict, workers: int, folds: list[int] | None, queue) -> None:
    from adaptive.core.cells import build_cells
    from adaptive.core.data import read_judgments
    from adaptive.prompts.loco import LocoConfig, loco_data, run_loco
    from adaptive.prompts.parallel import shutdown

    data = build_cells(read_judgments(data_path))
    start = time.perf_counter()
    results, info = run_loco(
        loco_data(data), LocoConfig(**config_kwargs), workers=workers, folds=folds
    )
    seconds = time.perf_counter() - start
    shutdown()
    queue.put(
        {
            "seconds": seconds,
            "nodes": len(set(info.node_ids)),
            "pids": len(set(info.pids)),
            "se": [{k: v.tolist() for k, v in r.se.items()} for r in results],
            "se_full": [r.se_full for r in results],
        }
    )


def measure(data_path: str, config_kwargs: dict, workers: int, folds: list[int] | None) -> dict:
    """One run in a fresh process, so that neither run inherits the other's compiled functions."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_run, args=(data_path, config_kwargs, workers, folds, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT / "data" / "chateval_ncm" / "judgments.csv"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--folds", type=int, default=0, help="first N folds only (0: all)")
    parser.add_argument("--num-random", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    config = {"num_random": args.num_random, "seed": args.seed}
    folds = list(range(args.folds)) if args.folds else None
    serial = measure(args.data, config, 1, folds)
    parallel = measure(args.data, config, args.workers, folds)
    identical = serial["se_full"] == parallel["se_full"] and all(
        all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
        for a, b in zip(serial["se"], parallel["se"])
    )
    report = {
        "data": os.path.relpath(args.data, ROOT),
        "folds": len(serial["se"]),
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "serial_seconds": round(serial["seconds"], 1),
        "ray_seconds": round(parallel["seconds"], 1),
        "speedup_serial_over_ray": round(serial["seconds"] / parallel["seconds"], 2),
        "ray_worker_processes": parallel["pids"],
        "identical": bool(identical),
        "load_average_1min": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(report, indent=1))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
