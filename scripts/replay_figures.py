"""The figures of docs/replay.md: every policy under one decision rule, on real and simulated logs.

Usage:
    python scripts/replay_figures.py [--seeds 20] [--synthetic-seeds 50] [--out results.json]

Prints one markdown table per setting (judgments until every comparison is closed or can no
longer move, mean ± sd over seeds; ratio to uniform; comparisons closed; reversals; wrong-sign
and wrong-equivalence rates with known truth; judgments until half the comparisons are closed)
and writes every row, with the anytime curves, to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from adaptive.core.cells import build_cells  # noqa: E402
from adaptive.core.data import read_judgments, validate_judgments  # noqa: E402
from adaptive.leaderboards.damr import read_ratings, to_pairwise  # noqa: E402
from adaptive.simulation.replay import (  # noqa: E402
    ORACLE,
    POLICIES,
    ReplayConfig,
    fit_truth,
    log_from_cells,
    replay,
    semi_synthetic,
    summarize_replays,
    synthetic_campaign,
)
from adaptive.stopping.decisions import DecisionRule  # noqa: E402


def run(label, logs, rule, seeds, batch_size=100):
    """logs: a Log (real: the same log every seed) or a function seed -> Log (fresh campaigns)."""
    config = ReplayConfig(batch_size=batch_size, rule=rule)
    rows = []
    # with known truth, the oracle (largest true |Δ| first) shows what ordering could buy
    for policy in POLICIES + ((ORACLE,) if callable(logs) else ()):
        traces, replayed = [], []
        for seed in range(seeds):
            replayed.append(logs(seed) if callable(logs) else logs)
            traces.append(replay(seed, replayed[-1], policy, config))
        rows.append(
            {"setting": label, "unit": rule.unit, **summarize_replays(traces, replayed, rule)}
        )
    base = next(r["judgments_mean"] for r in rows if r["policy"] == "uniform")
    rr = next(r["half_closed_judgments"] for r in rows if r["policy"] == "round_robin")
    for r in rows:
        r["ratio_to_uniform"] = r["judgments_mean"] / base
        h = r["half_closed_judgments"]
        r["half_closed_ratio_to_round_robin"] = h / rr if h and rr else None
    return rows


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(rows) -> str:
    head = (
        "| policy | judgments (mean ± sd) | share of log | ratio to uniform | closed | "
        "half closed after | vs round robin | spent on closed | reversals (max) | "
        "wrong sign | wrong equiv. | campaigns with an error |"
    )
    out = [head, "|" + "---|" * 12]
    for r in rows:
        out.append(
            f"| {r['policy']} | {r['judgments_mean']:.0f} ± {r['judgments_sd']:.0f} | "
            f"{fmt(r['share_of_log'])} | {fmt(r['ratio_to_uniform'])} | "
            f"{r['closed_mean']:.1f} / {r['comparisons']} | {fmt(r['half_closed_judgments'], 0)} | "
            f"{fmt(r['half_closed_ratio_to_round_robin'])} | {r['spent_on_closed_mean']:.0f} | "
            f"{r['reversals_max']} | {fmt(r['wrong_sign_rate'], 4)} | "
            f"{fmt(r['wrong_equivalence_rate'], 4)} | {fmt(r['campaigns_with_error'], 3)} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="replays per policy on real logs")
    parser.add_argument("--synthetic-seeds", type=int, default=50, help="simulated campaigns")
    parser.add_argument("--only", help="run only settings whose label contains this text")
    parser.add_argument("--out", default="replay_figures.json")
    args = parser.parse_args()
    data = ROOT / "data"
    settings = []

    ncm = log_from_cells(build_cells(read_judgments(data / "chateval_ncm" / "judgments.csv")))
    teacher = read_judgments(data / "ai_teacher_test" / "judgments.csv")
    dbdc = log_from_cells(build_cells(read_judgments(data / "chateval_dbdc" / "judgments.csv")))
    for unit in ("prompt", "judgment"):
        rule = DecisionRule(unit=unit)
        settings.append((f"real chateval_ncm ({unit} unit)", ncm, rule, args.seeds, 100))
        for dim in ("teacher_like", "understanding", "helpfulness"):
            log = log_from_cells(build_cells(teacher, dimension=dim))
            label = f"real ai_teacher_test {dim} ({unit} unit)"
            settings.append((label, log, rule, args.seeds, 50))
        settings.append((f"real chateval_dbdc ({unit} unit)", dbdc, rule, args.seeds, 20))
    # MRBench's graded tutor labels as pairs within each dialogue (adaptive.leaderboards.damr): one
    # judgment per cell, so the prompt unit only
    pairs = to_pairwise(read_ratings(data / "mrbench" / "ratings.csv"))
    pairs = validate_judgments(pairs.drop("weight", "score_a", "score_b"))
    for dim in ("Mistake_Identification", "Providing_Guidance", "Actionability"):
        log = log_from_cells(build_cells(pairs, dimension=dim))
        label = f"real mrbench {dim}, pairs from graded labels (prompt unit)"
        settings.append((label, log, DecisionRule(), args.seeds, 50))

    truth = fit_truth(ncm)
    for unit, factor in (("prompt", 1), ("prompt", 4), ("judgment", 1), ("judgment", 4)):

        def fresh(seed, factor=factor):
            return semi_synthetic(
                np.random.default_rng([seed, 7]), ncm, truth, prompts_factor=factor
            )

        label = f"semi-synthetic chateval_ncm, {factor}x prompts ({unit} unit)"
        settings.append((label, fresh, DecisionRule(unit=unit), args.synthetic_seeds, 100))
    teacher_log = log_from_cells(build_cells(teacher, dimension="teacher_like"))
    teacher_truth = fit_truth(teacher_log)

    def fresh_teacher(seed):
        rng = np.random.default_rng([seed, 8])
        return semi_synthetic(rng, teacher_log, teacher_truth, prompts_factor=4)

    settings.append(
        (
            "semi-synthetic ai_teacher_test teacher_like, 4x prompts (prompt unit)",
            fresh_teacher,
            DecisionRule(),
            args.synthetic_seeds,
            50,
        )
    )

    regimes = {
        "heterogeneous: |Δ| ~ U(0.05, 0.6), random signs": None,
        "all alike: |Δ| = 0.3": [0.3] * 10,
        "all alike: |Δ| = 0.15": [0.15] * 10,
        "all near 0: Δ in [-0.03, 0.03]": list(np.linspace(-0.03, 0.03, 10)),
        "one at 0.08, nine at 0.4": [0.08] + [0.4] * 9,
    }
    for name, nets in regimes.items():

        def campaign(seed, nets=nets):
            rng = np.random.default_rng([seed, 9])
            effects = nets
            if effects is None:
                effects = rng.uniform(0.05, 0.6, 10) * rng.choice([-1, 1], 10)
            return synthetic_campaign(
                rng, effects, num_prompts=1000, tie_share=0.25, spread=0.5, random_share=0.1
            )

        label = f"synthetic regime, 10 comparisons x 1,000 prompts: {name}"
        settings.append((label, campaign, DecisionRule(), args.synthetic_seeds, 50))

    results = []
    for label, logs, rule, seeds, batch in settings:
        if args.only and args.only not in label:
            continue
        start = time.time()
        rows = run(label, logs, rule, seeds, batch)
        results += rows
        print(f"\n### {label}\n\n{seeds} seeds, batches of {batch}, {time.time() - start:.0f} s\n")
        print(table(rows), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1, default=float))
    print(f"\nrule: {DecisionRule().describe(17)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
