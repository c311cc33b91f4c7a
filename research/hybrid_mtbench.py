"""MT-Bench replayed with GPT-4's verdicts: human judgments to close, hybrid vs human-only, reversals.

The population of each comparison is its cells that humans judged (GPT-4 judged every cell);
a request draws one of the cell's logged human judgments at random (with replacement), so the
estimand is the full log's own Δ and a reversal is a decision against the log's own sign. Each
comparison may spend as many human judgments as its log holds. Alpha 0.05 over the 15
comparisons (Bonferroni), margin 0.1, decisions after every 10 judgments of a comparison.
``human_only`` is the product's human-only rule (:mod:`adaptive.stopping.decisions`, unit
``judgment``: resampled draws); the hybrids decide signs by their e-processes.

A ``doors`` row adds the log itself in its arrival order through the decision doors
(``evalset.decisions`` with and without ``judge=``, unit ``prompt``): comparisons decided, the
human judgments summed at their closes, and whether the two agree on every decision.

Run: ``nice -n 10 .venv/bin/python research/hybrid_mtbench.py`` (a minute); rows go to
``research/hybrid/mtbench_signs.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from adaptive.core.data import read_judgments
from adaptive.simulation.hybrid_replay import HYBRID_POLICIES, log_population, replay_log
from evalset.hybrid import read_verdicts

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(__file__).parent / "hybrid" / "mtbench_signs.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    humans = read_judgments(ROOT / "data/mtbench/judgments.csv")
    judge = read_verdicts(ROOT / "data/mtbench/judge_gpt4.csv")
    logs = log_population(humans, judge)
    rows = replay_log(
        range(args.seeds), logs, list(HYBRID_POLICIES), alpha=args.alpha, margin=args.margin
    )
    base = rows[0]["human_judgments_mean"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as out:
        for row in rows:
            row = {
                "data": "mtbench",
                **row,
                "ratio_to_human_only": row["human_judgments_mean"] / base,
            }
            out.write(json.dumps(row) + "\n")
            print(row, flush=True)
        row = doors()
        out.write(json.dumps(row) + "\n")
        print(row, flush=True)


def doors() -> dict:
    """The log through ``evalset.decisions``: human-only rows and hybrid rows with GPT-4."""
    import evalset

    data, judge = ROOT / "data/mtbench/judgments.csv", ROOT / "data/mtbench/judge_gpt4.csv"
    human = evalset.decisions(data)
    hybrid = evalset.decisions(data, judge=judge)
    return {
        "data": "mtbench",
        "policy": "doors",
        "human_only_closed": int((human["decision"] != "undecided").sum()),
        "hybrid_closed": int((hybrid["decision"] != "undecided").sum()),
        "human_only_judgments_at_close": int(human["closed_at"].sum()),
        "hybrid_judgments_at_close": int(hybrid["closed_at"].sum()),
        "same_decisions": human["decision"].to_list() == hybrid["decision"].to_list(),
    }


if __name__ == "__main__":
    main()
