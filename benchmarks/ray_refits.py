"""Re-estimation of several keys: the local refresher (one key at a time) vs fits on Ray.

    python benchmarks/ray_refits.py [--dimensions 4] [--judgments 20000] [--parallel 2]

``--dimensions`` keys (dimensions of one project) of ``--judgments`` simulated judgments each
(``--systems`` systems, ``--prompts`` prompts) are re-estimated by a started
:class:`~services.runtime.refresher.Refresher`, first with ``refits="local"`` (the default:
one fast-update thread, fits in this process), then with ``refits="ray"`` and
``refit_parallel=--parallel`` on a Ray runtime started on this machine with that many CPUs,
in the same run. Each does a *cold* round (every key's first fit; includes compiling the
fit, once in this process locally, once in each Ray worker) and ``--warm-rounds`` *warm*
rounds (``--grow`` more judgments per key each, a warm-started fit of the same padded
shape, as after each batch in the service). A round is timed from notifying every key to
the refresher being idle. No persistent compilation cache is used, so both sides compile.
Prints one JSON object: wall seconds of the cold round and of all warm rounds on each side,
the ratios local / Ray (> 1: Ray is faster), the nodes the Ray fits ran on, and the largest
difference between the two sides' snapshots of the same judgments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Any

import numpy as np
import polars as pl

# both sides compile (a cache written by the local run would spare the Ray workers theirs)
os.environ["EVALSET_JAX_CACHE_DIR"] = ""

from adaptive.estimation.snapshot import Snapshot  # noqa: E402
from adaptive.estimation.source import Source  # noqa: E402
from services.runtime.refresher import Refresher  # noqa: E402
from services.settings import Settings  # noqa: E402

#: what differs between two fits of the same judgments: when, how long, where
UNCOMPARED = {"created_at", "fit_seconds"}
UNCOMPARED_DIAGNOSTICS = {"seconds", "fitted_on"}


def simulate(num: int, num_systems: int, num_prompts: int, seed: int) -> pl.DataFrame:
    """``num`` judgments of random pairs on random prompts, graded by a logistic model."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=num_systems)
    a = rng.integers(num_systems, size=num)
    b = (a + rng.integers(1, num_systems, size=num)) % num_systems
    u = (
        skill[b]
        - skill[a]
        + rng.logistic(size=num)
        + rng.normal(0, 0.5, num_prompts)[rng.integers(num_prompts, size=num)]
    )
    winner = np.where(u > 0.5, "b", np.where(u < -0.5, "a", "tie"))
    prompt = rng.integers(num_prompts, size=num)
    return pl.DataFrame(
        {
            "item_id": [f"q{p:04d}" for p in prompt],
            "system_a": [f"s{i:02d}" for i in a],
            "system_b": [f"s{i:02d}" for i in b],
            "annotator_id": [f"w{k % 40}" for k in range(num)],
            "winner": winner.tolist(),
        }
    )


class Memory:
    """The store side of the refresher, in memory: each key's judgments, the visible prefix."""

    def __init__(self, frames: dict[str, pl.DataFrame], systems: tuple[str, ...]) -> None:
        self.frames, self.systems = frames, systems
        self.visible = dict.fromkeys(frames, 0)
        self.published: dict[str, list[Snapshot]] = {k: [] for k in frames}

    def load(self, key: str) -> Source | None:
        frame = self.frames[key].head(self.visible[key])
        n = frame.height
        return None if n == 0 else Source(frame, key, self.systems, n, n)

    def publish(self, key: str, snapshot: Snapshot) -> int:
        self.published[key].append(snapshot)
        return len(self.published[key])

    def latest(self, key: str) -> Snapshot | None:
        return self.published[key][-1] if self.published[key] else None


def run(
    config: Settings, frames: dict[str, pl.DataFrame], systems: tuple[str, ...], sizes: list[int]
) -> dict[str, Any]:
    """Both rounds through a started refresher: seconds per round and what it published."""
    memory = Memory(frames, systems)
    refresher = Refresher(
        load_fn=memory.load, publish_fn=memory.publish, latest_fn=memory.latest, config=config
    )
    refresher.start()  # with refits="ray", joins (starts) Ray here, outside the timing
    seconds = []
    try:
        for n in sizes:
            start = time.perf_counter()
            for key in frames:
                memory.visible[key] = n
                refresher.notify(key, last_seq=n)
            if not refresher.wait_idle(3600):
                raise RuntimeError("the refresher did not finish within an hour")
            seconds.append(time.perf_counter() - start)
    finally:
        refresher.stop()
    failed = [e for e in refresher.events if e.kind != "published"]
    if failed:
        raise RuntimeError(f"not every fit was published: {failed}")
    return {"seconds": seconds, "published": memory.published}


def max_difference(a: Snapshot, b: Snapshot) -> float:
    """The largest absolute difference between two snapshots' numbers (inf when anything
    else, a name, a shape, a flag, differs)."""
    worst = 0.0
    for field in dataclasses.fields(Snapshot):
        if field.name in UNCOMPARED:
            continue
        x, y = getattr(a, field.name), getattr(b, field.name)
        if field.name == "diagnostics":
            x = {k: v for k, v in x.items() if k not in UNCOMPARED_DIAGNOSTICS}
            y = {k: v for k, v in y.items() if k not in UNCOMPARED_DIAGNOSTICS}
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return float("inf")
            pairs = [(x[k], y[k]) for k in x]
        else:
            pairs = [(x, y)]
        for u, v in pairs:
            if isinstance(u, np.ndarray | float):
                u, v = np.asarray(u, np.float64), np.asarray(v, np.float64)
                if u.shape != v.shape:
                    return float("inf")
                if u.size:
                    worst = max(worst, float(np.nanmax(np.abs(u - v))))
            elif u != v:
                return float("inf")
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dimensions", type=int, default=4)
    parser.add_argument("--judgments", type=int, default=20_000)
    parser.add_argument(
        "--grow", type=int, default=200, help="judgments per key added for each warm round"
    )
    parser.add_argument("--warm-rounds", type=int, default=5)
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--parallel", type=int, default=2, help="refit_parallel of the Ray run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    systems = tuple(f"s{i:02d}" for i in range(args.systems))
    sizes = [args.judgments + r * args.grow for r in range(1 + args.warm_rounds)]
    frames = {
        f"dim{k}": simulate(sizes[-1], args.systems, args.prompts, args.seed + k).with_columns(
            dimension=pl.lit(f"dim{k}")
        )
        for k in range(args.dimensions)
    }
    common = {"nuts": False, "prepare_next_shape": False, "seed": args.seed}
    local = run(Settings(**common), frames, systems, sizes)
    remote = run(
        Settings(**common, refits="ray", refit_parallel=args.parallel), frames, systems, sizes
    )
    import ray

    ray.shutdown()
    diff = max(
        max_difference(a, b)
        for key in frames
        for a, b in zip(local["published"][key], remote["published"][key], strict=True)
    )
    nodes = {s.diagnostics["fitted_on"] for snaps in remote["published"].values() for s in snaps}
    times = {
        side: {"cold": out["seconds"][0], "warm": sum(out["seconds"][1:])}
        for side, out in (("local", local), ("ray", remote))
    }
    report = {
        "dimensions": args.dimensions,
        "judgments_per_dimension": [sizes[0], sizes[-1]],
        "warm_rounds": args.warm_rounds,
        "systems": args.systems,
        "prompts": args.prompts,
        "cpus": os.cpu_count(),
        "refit_parallel": args.parallel,
        **{f"{side}_{r}_seconds": round(t[r], 2) for side, t in times.items() for r in t},
        **{
            f"{r}_ratio_local_over_ray": round(times["local"][r] / times["ray"][r], 2)
            if times["ray"][r]
            else None
            for r in ("cold", "warm")
        },
        "ray_nodes": len(nodes),
        "snapshots_max_abs_difference": diff,
        "snapshots_identical": diff == 0.0,
        "load_average_1min": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
