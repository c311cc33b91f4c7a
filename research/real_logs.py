"""The default model on every bundled pairwise log: does each Δ interval meet its own data?

For every log and dimension in ``data/`` (ChatEval NCM and DBDC, the AI Teacher Test's
three dimensions, MT-Bench's humans), fits the default model on the fast path and
counts the comparisons whose 95% interval of the net preference does not overlap the
95% interval of the comparison's own observed net preference (the prompt-level t
interval, ``observed_ci_*``), for the Δ users read (``net_*``) and for the model's own
(``model_net_*``), with the seconds each fit took.

    python research/real_logs.py [--jsonl research/real_logs.jsonl]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = {
    "chateval_ncm": ROOT / "data" / "chateval_ncm" / "judgments.csv",
    "chateval_dbdc": ROOT / "data" / "chateval_dbdc" / "judgments.csv",
    "ai_teacher_test": ROOT / "data" / "ai_teacher_test" / "judgments.csv",
    "mtbench": ROOT / "data" / "mtbench" / "judgments.csv",
}


def disjoint(row: dict, prefix: str) -> bool:
    """The ``prefix`` interval and the observed one do not overlap."""
    low, high = row[f"{prefix}_ci_low"], row[f"{prefix}_ci_high"]
    return high < row["observed_ci_low"] or low > row["observed_ci_high"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jsonl", default=None, help="append one line per log and dimension")
    args = parser.parse_args()
    import evalset

    print("log              dimension               comparisons  net apart  model apart  seconds")
    for name, path in LOGS.items():
        judgments = evalset.read(path)
        for dim in sorted(judgments["dimension"].unique()):
            start = time.perf_counter()
            rows = evalset.significance(judgments, dimension=dim).to_dicts()
            seconds = time.perf_counter() - start
            apart = [r for r in rows if disjoint(r, "net")]
            model_apart = [r for r in rows if disjoint(r, "model_net")]
            print(
                f"{name:16s} {dim:22s} {len(rows):11d} {len(apart):10d} "
                f"{len(model_apart):12d} {seconds:8.1f}"
            )
            for r in model_apart:
                print(
                    f"    model apart: {r['system_a']} vs {r['system_b']}: model "
                    f"{r['model_net']:+.3f} [{r['model_net_ci_low']:+.3f}, "
                    f"{r['model_net_ci_high']:+.3f}], observed {r['observed_net']:+.3f} "
                    f"[{r['observed_ci_low']:+.3f}, {r['observed_ci_high']:+.3f}]"
                )
            if args.jsonl:
                with open(args.jsonl, "a") as out:
                    record = dict(
                        log=name,
                        dimension=dim,
                        comparisons=len(rows),
                        net_apart=len(apart),
                        model_apart=len(model_apart),
                        seconds=seconds,
                        rows=[
                            {k: r[k] for k in r if k.startswith(("system", "net", "model", "obs"))}
                            for r in rows
                        ],
                    )
                    out.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
