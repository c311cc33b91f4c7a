"""Scale: fast fit, skill-only update, next batch and replay at 100k and 1M judgments.

A sparse campaign: ``--systems`` systems (200), each compared with its 10
neighbours on a random ring (1,000 comparisons of the 19,900 pairs), prompts
growing with the judgments (one prompt per ``--judgments-per-prompt`` = 50
judgments: 2,000 prompts at 100k, 20,000 at 1M), every judgment a random
(comparison, prompt) cell judged by one of 500 annotators, outcomes drawn from
the graded-response model (per-system skills, per-prompt discrimination and
tie threshold). Each size runs in its own process (fresh memory baseline) and
measures, in this order:

* ``fast fit``: the default model's MAP + Laplace fit of every judgment
  (:func:`adaptive.estimation.streaming.fit_snapshot`), compile included (a new shape
  compiles once), and the warm refit a streaming update then does;
* ``skill-only update``: items held from a full fit without the cell effect
  (:func:`adaptive.estimation.streaming.skill_snapshot`), after a batch of 100 new judgments;
* ``next batch``: preparing the recommender's snapshot once
  (``snapshot_from_posteriors`` of benchmarks/named_snapshots.py) and one 100-cell
  :func:`adaptive.recommend.recommend` request;
* ``replay``: :func:`adaptive.simulation.replay.replay` of the adaptive policy, 10 seeds.

Peak memory is the process's peak resident set (sampled every 10 ms) during
each step. The table gives each figure at each size and the ratio 1M / 100k:
10 is linear growth.

    nice python benchmarks/scale.py                              # 100k and 1M, about 2 min
    python benchmarks/scale.py --sizes 2000,20000 --seeds 2      # smoke (a test runs this)
    python benchmarks/scale.py --sizes 1000000 --only replay --profile /tmp/replay.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl

STEPS = ("fit", "skill", "batch", "replay")  # and "default_fit", asked for by name


# ------------------------------------------------------------------ the campaign


def ring_pairs(rng: np.random.Generator, num_systems: int, degree: int = 10) -> np.ndarray:
    """(C, 2) system pairs: each system with its ``degree`` nearest on a random ring."""
    order = rng.permutation(num_systems)
    pairs = {
        tuple(sorted((int(order[i]), int(order[(i + k) % num_systems]))))
        for i in range(num_systems)
        for k in range(1, degree // 2 + 1)
    }
    return np.array(sorted(pairs), np.int64)


def simulate(
    num_judgments: int,
    *,
    num_systems: int = 200,
    judgments_per_prompt: int = 50,
    num_annotators: int = 500,
    seed: int = 0,
) -> pl.DataFrame:
    """Judgments in the common schema (one dimension), vectorised (1M rows in about a second)."""
    rng = np.random.default_rng(seed)
    num_prompts = max(num_judgments // judgments_per_prompt, 1)
    pairs = ring_pairs(rng, num_systems)
    skill = rng.normal(0.0, 1.0, num_systems)
    alpha = np.exp(rng.normal(0.0, 0.3, num_prompts))
    kappa = np.exp(rng.normal(np.log(0.5), 0.3, num_prompts))  # tie half-width per prompt
    comp = rng.integers(len(pairs), size=num_judgments)
    prompt = rng.integers(num_prompts, size=num_judgments)
    a, b = pairs[comp, 0], pairs[comp, 1]
    swap = rng.random(num_judgments) < 0.5  # either system may be shown first
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    z = alpha[prompt] * (skill[b] - skill[a])
    p_b = 1.0 / (1.0 + np.exp(-(z - kappa[prompt])))
    p_a = 1.0 / (1.0 + np.exp(z + kappa[prompt]))
    u = rng.random(num_judgments)
    winner = np.where(u < p_b, "b", np.where(u < p_b + p_a, "a", "tie"))
    names = np.array([f"sys{i:03d}" for i in range(num_systems)])
    return pl.DataFrame(
        {
            "item_id": np.char.add("p", prompt.astype(str)),
            "system_a": names[a],
            "system_b": names[b],
            "annotator_id": np.char.add(
                "w", rng.integers(num_annotators, size=num_judgments).astype(str)
            ),
            "winner": winner,
            "dimension": "overall",
            "seq": np.arange(1, num_judgments + 1),
        }
    )


# ------------------------------------------------------------------ measuring


def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024


class PeakRss:
    """The process's peak resident set between :meth:`reset` calls (a sampling thread)."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def now() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.now())

    def reset(self) -> None:
        self.peak = self.now()

    def close(self) -> None:
        self._stop.set()


@contextmanager
def measured(out: dict, name: str, rss: PeakRss, profile: cProfile.Profile | None = None):
    rss.reset()
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    try:
        yield
    finally:
        if profile is not None:
            profile.disable()
        out[f"{name}_s"] = time.perf_counter() - start
        out[f"{name}_peak_gb"] = max(rss.peak, rss.now()) / 1e9


def _recommender_posterior(snap, cells):
    """The fast fit's skill draws as the :class:`Posterior` the recommender prepares from."""
    from stan_free_models.posterior import Diagnostics, Posterior

    skill = np.asarray(snap.skill, np.float64)
    theta = skill[:, cells.pair_b] - skill[:, cells.pair_a]
    return Posterior(
        draws={"skill": skill[None], "theta": theta[None]},
        method="laplace",
        diagnostics=Diagnostics(),
    )


def run_size(
    num_judgments: int,
    *,
    seeds: int,
    only: set[str],
    profile_path: str | None,
    replay_budget: int | None = None,
    fit_bytes_per_judgment: float = 6_000,
) -> dict:
    """Every step at one size, in this process; returns the figures."""
    from named_snapshots import snapshot_from_posteriors

    from adaptive.core.cells import build_cells
    from adaptive.estimation.streaming import Source, fit_snapshot, skill_snapshot, stream_config
    from adaptive.recommend import CellState, Request, recommend
    from adaptive.simulation.replay import ReplayConfig, log_from_cells, replay

    rss = PeakRss()
    profile = cProfile.Profile() if profile_path else None
    out: dict = {"judgments": num_judgments}
    with measured(out, "simulate", rss):
        judgments = simulate(num_judgments)
    systems = sorted(set(judgments["system_a"].unique()) | set(judgments["system_b"].unique()))
    out["prompts"] = judgments["item_id"].n_unique()
    out["systems"] = len(systems)
    with measured(out, "cells", rss):
        cells = build_cells(judgments, dimension="overall", systems=systems)
    out["comparisons"] = cells.num_comparisons

    if "default_fit" in only:
        # the default model (prompt-by-comparison effect): what every fast update runs
        with measured(out, "default_fit", rss, profile):
            fit_snapshot(
                judgments,
                dimension="overall",
                systems=systems,
                config=stream_config("fast"),
                last_seq=num_judgments,
            )

    snap = base = None
    # the fit's memory is mostly its item draws (draws x prompts, and prompts grow with the
    # judgments here: 5.7 GB peak at 1M with 20,000 prompts, issue 56); on a shared machine,
    # refuse rather than swap or OOM-kill
    need, free = fit_bytes_per_judgment * num_judgments, available_bytes()
    if only & {"fit", "skill", "batch"} and need > 0.8 * free:
        out["fit_skipped"] = f"needs ~{need / 1e9:.0f} GB, {free / 1e9:.0f} GB available"
    elif only & {"fit", "skill", "batch"}:
        # the fast fit that skill-only updates hold their items from (no cell effect)
        with measured(out, "fit", rss, profile):
            snap, base = fit_snapshot(
                judgments,
                dimension="overall",
                systems=systems,
                config=stream_config("fast", cell_effect=False),
                last_seq=num_judgments,
                with_base=True,
            )
        out["fit_converged"] = base is not None

    if "skill" in only and base is not None:
        # a batch of 100 new judgments on known pairs and prompts
        extra = judgments.sample(100, seed=1).with_columns(
            pl.arange(num_judgments + 1, num_judgments + 101).alias("seq")
        )
        grown = pl.concat([judgments, extra])
        source = Source(grown, "overall", tuple(systems), len(grown), num_judgments + 100)
        init = base.snapshot.mode["global"][: len(systems)]
        skill_snapshot(base, source, init=init)  # compiles the update's shape once
        times = []
        with measured(out, "skill_update", rss, profile):
            for _ in range(3):
                t0 = time.perf_counter()
                update = skill_snapshot(base, source, init=init)
                times.append(time.perf_counter() - t0)
        out["skill_update_s"] = float(np.median(times))
        out["skill_update_ok"] = update is not None

    if "batch" in only and snap is not None:
        posterior = _recommender_posterior(snap, cells)
        snapshot_from_posteriors([posterior], [cells], version=1)  # first call compiles
        with measured(out, "batch_prepare", rss, profile):
            rsnap, _ = snapshot_from_posteriors([posterior], [cells], version=2)
        state = CellState.open(rsnap.num_comparisons, rsnap.num_prompts)
        recommend(0, rsnap, state, Request(size=100))  # warm caches
        times = []
        with measured(out, "batch_request", rss, profile):
            for r in range(5):
                t0 = time.perf_counter()
                batch, _ = recommend(r + 1, rsnap, state, Request(size=100))
                times.append(time.perf_counter() - t0)
        out["batch_request_s"] = float(np.median(times))
        out["batch_size"] = len(batch)

    if "replay" in only:
        log = log_from_cells(cells)
        config = ReplayConfig(budget=replay_budget)
        used, batches = [], 0
        with measured(out, "replay", rss, profile):
            for seed in range(seeds):
                trace = replay(seed, log, "adaptive", config)
                used.append(trace.used)
                batches += len(trace.judgments)
        out["replay_seeds"] = seeds
        out["replay_batches"] = batches
        out["replay_per_batch_s"] = out["replay_s"] / max(batches, 1)
        out["replay_judgments_used"] = float(np.mean(used))

    if profile is not None:
        profile.dump_stats(profile_path)
    rss.close()
    return out


# ------------------------------------------------------------------ the table

ROWS = [
    ("simulate (s)", "simulate_s"),
    ("build cells (s)", "cells_s"),
    ("default-model fast fit, compile included (s)", "default_fit_s"),
    ("default-model fast fit peak memory (GB)", "default_fit_peak_gb"),
    ("fast fit, compile included (s)", "fit_s"),
    ("fast fit peak memory (GB)", "fit_peak_gb"),
    ("skill-only update, 100 new judgments (s)", "skill_update_s"),
    ("next batch: prepare snapshot (s)", "batch_prepare_s"),
    ("next batch: one 100-cell request (s)", "batch_request_s"),
    ("next batch peak memory (GB)", "batch_prepare_peak_gb"),
    ("replay: all seeds (s)", "replay_s"),
    ("replay: per batch of 100 (s)", "replay_per_batch_s"),
    ("replay peak memory (GB)", "replay_peak_gb"),
]


def print_table(results: list[dict], total_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    small, large = results[0], results[-1]
    table = Table(title=f"scale: {small['judgments']:,} -> {large['judgments']:,} judgments")
    table.add_column("figure")
    for r in results:
        table.add_column(f"{r['judgments']:,}", justify="right")
    if len(results) > 1:
        table.add_column("ratio", justify="right")
    for label, key in ROWS:
        if key not in large:
            continue
        values = [r.get(key, float("nan")) for r in results]
        cells = [f"{v:.3f}" if v < 10 else f"{v:.1f}" for v in values]
        if len(results) > 1:
            ratio = values[-1] / values[0] if values[0] else float("nan")
            cells.append(f"{ratio:.1f}x")
        table.add_row(label, *cells)
    console = Console()
    console.print(table)
    shape = ", ".join(
        f"{r['judgments']:,}: {r['systems']} systems, {r.get('comparisons', '?')} comparisons, "
        f"{r['prompts']:,} prompts"
        for r in results
    )
    console.print(f"{shape}; {len(results)} sizes in {total_s:.0f} s")
    for r in results:
        if "fit_skipped" in r:
            console.print(f"{r['judgments']:,}: fast fit skipped ({r['fit_skipped']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="judgments per size")
    parser.add_argument("--seeds", type=int, default=10, help="replay seeds (default 10)")
    parser.add_argument("--only", default=",".join(STEPS), help=f"steps, of {','.join(STEPS)}")
    parser.add_argument(
        "--replay-budget",
        type=int,
        default=500,
        help="judgments per replayed seed (default 500: 5 batches of 100; 0: until the "
        "decisions close, as evalset replay does)",
    )
    parser.add_argument(
        "--fit-bytes-per-judgment",
        type=float,
        default=6_000,
        help="the fast fit's expected memory per judgment (default 6000, measured); a size "
        "whose fit would need more than 80%% of the available memory skips the fit (0: never)",
    )
    parser.add_argument("--profile", help="cProfile the steps into this file (one size)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child: one size
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if args.one is not None:
        result = run_size(
            args.one,
            seeds=args.seeds,
            only=only,
            profile_path=args.profile,
            replay_budget=args.replay_budget or None,
            fit_bytes_per_judgment=args.fit_bytes_per_judgment,
        )
        print(json.dumps(result))
        return 0
    start = time.perf_counter()
    results = []
    for size in [int(s) for s in args.sizes.split(",")]:
        cmd = [sys.executable, __file__, "--one", str(size), "--seeds", str(args.seeds)]
        cmd += ["--replay-budget", str(args.replay_budget)]
        cmd += ["--fit-bytes-per-judgment", str(args.fit_bytes_per_judgment)]
        cmd += ["--only", args.only] + (["--profile", args.profile] if args.profile else [])
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parents[1])
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return done.returncode
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{size:,} judgments: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    print_table(results, time.perf_counter() - start)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
