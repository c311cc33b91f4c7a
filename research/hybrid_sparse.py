"""Sparse subsamples of MT-Bench through the decision doors: human-only and hybrid (GPT-4) rows
on 5-30% of the human judgments (and on all of them), each decided sign checked against the full log's own raw sign.

For each fraction and seed a random subset of the human judgment rows is kept in file order;
``evalset.decisions`` is asked with and without ``judge=`` (the doors' defaults: unit prompt,
alpha 0.05 Bonferroni over the compared pairs, margin 0.1). A reversal is a sign decision
against the sign of the comparison's net preference over the judgments the subsample left out
(held out: its own raw judgments, counted here without the product's code; on the full log, over
all of them). Equivalence decisions are counted apart.

Run: ``nice -n 10 .venv/bin/python research/hybrid_sparse.py`` (about two minutes); rows go to
``research/hybrid/sparse.jsonl`` (rewritten), one per fraction and rule.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "hybrid" / "sparse.jsonl"
DATA = ROOT / "data/mtbench/judgments.csv"
JUDGE = ROOT / "data/mtbench/judge_gpt4.csv"


def raw_signs(humans: pl.DataFrame) -> dict[tuple[str, str], float]:
    """Each ordered pair's net preference for its second system over every logged judgment."""
    rows = humans.with_columns(
        pl.when(pl.col("winner") == "b")
        .then(1.0)
        .when(pl.col("winner") == "a")
        .then(-1.0)
        .otherwise(0.0)
        .alias("y")
    )
    out: dict[tuple[str, str], float] = {}
    for (a, b), group in rows.group_by(["system_a", "system_b"]):
        y = float(group["y"].sum())
        out[(str(a), str(b))] = out.get((str(a), str(b)), 0.0) + y
        out[(str(b), str(a))] = out.get((str(b), str(a)), 0.0) - y
    return out


def check(decided: pl.DataFrame, signs: dict[tuple[str, str], float]) -> dict[str, int]:
    sign = decided.filter(pl.col("decision").is_in(["A better", "B better"]))
    wrong = 0
    for row in sign.iter_rows(named=True):
        net = signs.get((row["system_a"], row["system_b"]), 0.0)
        says_b = row["decision"] == "B better"
        if net == 0 or (net > 0) != says_b:
            wrong += 1
    return {
        "signs": sign.height,
        "equivalent": int((decided["decision"] == "equivalent").sum()),
        "reversals": wrong,
    }


def main() -> None:
    import evalset
    from adaptive.core.data import read_judgments

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3, 1.0])
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    humans = read_judgments(DATA).select(
        "item_id", "system_a", "system_b", "annotator_id", "winner", "dimension"
    )
    judge = pl.read_csv(JUDGE)
    indexed = humans.with_row_index("i")
    with open(args.out, "w") as out:
        for fraction in args.fractions:
            totals = {
                rule: {"signs": 0, "equivalent": 0, "reversals": 0} for rule in ("human", "hybrid")
            }
            seeds = args.seeds if fraction < 1 else 1  # the whole log is one run
            for seed in range(seeds):
                keep = indexed.sample(fraction=fraction, seed=seed).sort("i")
                held = indexed.join(keep.select("i"), on="i", how="anti")
                signs = raw_signs((held if held.height else indexed).drop("i"))
                sub = keep.drop("i")
                for rule, frame in (
                    ("human", evalset.decisions(sub)),
                    ("hybrid", evalset.decisions(sub, judge=judge)),
                ):
                    for k, v in check(frame, signs).items():
                        totals[rule][k] += v
            for rule, t in totals.items():
                row = {
                    "data": "mtbench",
                    "fraction": fraction,
                    "seeds": seeds,
                    "rule": rule,
                    "reference": "held-out judgments" if fraction < 1 else "all judgments",
                    "human_judgments": int(round(fraction * humans.height)),
                    "signs_per_run": t["signs"] / seeds,
                    "equivalent_per_run": t["equivalent"] / seeds,
                    "reversals": t["reversals"],
                }
                out.write(json.dumps(row) + "\n")
                print(row, flush=True)


if __name__ == "__main__":
    main()
