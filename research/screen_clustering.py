"""Ranked screens and the robust intervals: per-cell units against cell-or-screen units.

A ranked screen shows one annotator k systems' outputs for one prompt; its k(k-1)/2 pairs
share the annotator's impression of each output. The simulator keeps every judgment's
marginal exactly the graded-response model's (alpha 1.2, thresholds -0.6 / 0.6, skills
evenly from -0.6 to 0.6) and makes a screen's pairs dependent through a Gaussian copula:
z_ab = (g_b - g_a + e_ab) / sqrt(2 shift_sd^2 + 1), g the screen's shift of each system
(sd ``shift_sd``), e independent; u = Phi(z) picks the category. Each campaign is fitted
twice with the default model: without ``screen_id`` (each cell one unit, as before) and
with it (:func:`adaptive.estimation.fitting.cluster_of_observations`). Coverage is of the median
estimate over campaigns (the sandwich is about variance; the model's own scale of theta
differs from the simulator's, so the generating values are not the centre).

    python research/screen_clustering.py --campaigns 40 --jsonl research/calibration/screen_clustering.jsonl
    python research/screen_clustering.py --summarize research/calibration/screen_clustering.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
from scipy.special import expit, ndtr


def simulate(rng, *, num_systems=5, num_prompts=60, shift_sd=1.5, alpha=1.2, cut=0.6):
    """One screen per prompt, every pair of ``num_systems``; validated judgments."""
    from adaptive.core.data import read_judgments

    skill = np.linspace(-0.6, 0.6, num_systems)
    rows = []
    for p in range(num_prompts):
        g = rng.normal(0.0, shift_sd, num_systems)
        for a in range(num_systems):
            for b in range(a + 1, num_systems):
                u = ndtr((g[b] - g[a] + rng.normal()) / np.sqrt(2 * shift_sd**2 + 1))
                theta = skill[b] - skill[a]
                p_a, p_b = 1 - expit(alpha * (theta + cut)), expit(alpha * (theta - cut))
                winner = "a" if u < p_a else ("tie" if u < 1 - p_b else "b")
                rows.append((f"p{p}", f"s{a}", f"s{b}", f"w{p % 7}", winner, f"scr{p}"))
    columns = ["item_id", "system_a", "system_b", "annotator_id", "winner", "screen_id"]
    return read_judgments(pl.DataFrame(rows, schema=columns, orient="row"))


def run(*, parameterization, shift_sd, campaigns, seed=0, num_prompts=60, num_draws=400):
    """Rows: one per campaign and units (``cell`` or ``screen``), theta's means and sds."""
    from adaptive.core.cells import build_cells
    from adaptive.estimation.fitting import fit_cells, preset_config

    rng = np.random.default_rng(seed)
    config = preset_config(parameterization=parameterization, num_draws=num_draws)
    rows = []
    for c in range(campaigns):
        judgments = simulate(rng, num_prompts=num_prompts, shift_sd=shift_sd)
        for units, data in (("cell", judgments.drop("screen_id")), ("screen", judgments)):
            post = fit_cells(build_cells(data), config)
            rows.append(
                {
                    "parameterization": parameterization,
                    "shift_sd": shift_sd,
                    "seed": seed,
                    "campaign": c,
                    "units": units,
                    "mean": post.mean("theta").tolist(),
                    "sd": post.sd("theta").tolist(),
                }
            )
    return rows


def coverage(rows) -> dict[tuple, float]:
    """95% coverage of the median estimate, per (parameterization, shift_sd, units)."""
    frame = pl.DataFrame(rows)
    out = {}
    for key, group in frame.group_by("parameterization", "shift_sd", "units", maintain_order=True):
        mean, sd = np.array(group["mean"].to_list()), np.array(group["sd"].to_list())
        centre = np.median(mean, axis=0)
        out[key] = float((np.abs(mean - centre) <= 1.96 * sd).mean())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=40)
    parser.add_argument("--jsonl", type=Path)
    parser.add_argument("--summarize", type=Path)
    args = parser.parse_args()
    if args.summarize:
        rows = [json.loads(line) for line in args.summarize.read_text().splitlines()]
    else:
        rows = []
        for parameterization in ("comparison", "system"):
            for shift_sd in (0.0, 1.5):
                rows += run(
                    parameterization=parameterization, shift_sd=shift_sd, campaigns=args.campaigns
                )
        if args.jsonl:
            args.jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for (param, shift, units), cover in coverage(rows).items():
        print(f"{param:<10} shift_sd {shift:.1f} units {units:<6} coverage {cover:.3f}")


if __name__ == "__main__":
    main()
