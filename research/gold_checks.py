"""Gold cells: recall of careless annotators and specificity on careful ones, on simulated
campaigns (adaptive.annotation.gold.simulate_gold), for the default rule (careful 0.8, careless 0.5,
level 0.05). Rows: research/gold/checks.jsonl.

    python research/gold_checks.py [--campaigns 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from adaptive.annotation.gold import GoldRule, gold_rows, simulate_gold

ROWS = Path(__file__).parent / "gold" / "checks.jsonl"

#: the settings: the issue's (10% careless clicking a/b/tie), no tie button, the null's edge
#: (every careful annotator exactly at 0.8), and careful annotators below the rule's 0.8
SETTINGS = {
    "10% careless, a/b/tie clicks": {},
    "10% careless, a/b clicks": {"careless_answers": ("a", "b")},
    "careful exactly 0.8 (null edge)": {"careful_accuracy": (0.8, 0.8), "careless_share": 0.0},
    "careful 0.7-0.8 (below the rule)": {"careful_accuracy": (0.7, 0.8)},
    # sparse: 10% and 30% of the 30 gold judgments each
    "sparse: 3 gold judgments each": {"num_gold": 3},
    "sparse: 9 gold judgments each": {"num_gold": 9},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--campaigns", type=int, default=200)
    args = parser.parse_args()
    rule = GoldRule()
    ROWS.parent.mkdir(exist_ok=True)
    with ROWS.open("w") as out:
        for name, options in SETTINGS.items():
            start = time.perf_counter()
            caught, spared, after = [], [], []
            # against each annotator's own raw answers: a flag on one right at least as
            # often as careful would go against its raw accuracy
            flagged_above = 0
            for seed in range(args.campaigns):
                judgments, gold, careless = simulate_gold(np.random.default_rng(seed), **options)
                for row in gold_rows(judgments, gold, rule):
                    flagged_above += row["flagged"] and row["accuracy"] >= rule.careful
                    if row["annotator_id"] in careless:
                        caught.append(row["flagged"])
                        if row["flagged"]:
                            after.append(row["flagged_after"])
                    else:
                        spared.append(not row["flagged"])
            record = {
                "setting": name,
                "campaigns": args.campaigns,
                "annotators_per_campaign": 50,
                "gold_judgments_each": options.get("num_gold", 30),
                "careless": len(caught),
                "careful": len(spared),
                "recall": round(float(np.mean(caught)), 4) if caught else None,
                "specificity": round(float(np.mean(spared)), 4),
                "median_gold_judgments_to_flag": float(np.median(after)) if after else None,
                "flagged_with_raw_accuracy_at_least_careful": int(flagged_above),
                "seconds": round(time.perf_counter() - start, 1),
                "rule": {"careful": rule.careful, "careless": rule.careless, "level": rule.level},
            }
            out.write(json.dumps(record) + "\n")
            print(json.dumps(record))


if __name__ == "__main__":
    main()
