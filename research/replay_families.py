"""What the comparison family and the multiplicity rule cost: replays of the bundled logs.

For each log and unit, `evalset replay` with the adaptive and uniform policies under each
(family, correction): the log's compared pairs or every pair of its systems, Bonferroni or
e-Holm. Writes one JSON line per (log, unit, family, correction, policy) to
`research/replay_families/rows.jsonl` and prints the table docs/decisions.md shows.

    python research/replay_families.py --seeds 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "research" / "replay_families" / "rows.jsonl"
LOGS = (
    ("chateval_ncm", "judgment"),
    ("chateval_ncm", "prompt"),
    ("ai_teacher_test", "judgment"),
)
SETTINGS = (
    ("compared", "bonferroni"),
    ("compared", "e-holm"),
    ("all-pairs", "bonferroni"),
    ("all-pairs", "e-holm"),
)


def run(log: str, unit: str, family: str, correction: str, seeds: int) -> list[dict]:
    data = ROOT / "data" / log / "judgments.csv"
    argv = [sys.executable, "-m", "services.cli", "replay", "--data", str(data)]
    argv += ["--seeds", str(seeds), "--policy", "adaptive,uniform", "--unit", unit]
    argv += ["--family", family, "--correction", correction, "--format", "json", "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    rows = json.loads(done.stdout)
    for row in rows:
        row.pop("curve", None)
        row |= {"log": log, "correction": correction}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for log, unit in LOGS:
        for family, correction in SETTINGS:
            rows += run(log, unit, family, correction, args.seeds)
            print(f"{log} {unit} {family} {correction}: done", file=sys.stderr)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(
        "| log | dimension | unit | family (size) | correction | adaptive | closed | uniform "
        "| closed | reversals |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    keyed = {(r["log"], r["dimension"], r["unit"], r["family"], r["correction"], r["policy"]): r
             for r in rows}  # fmt: skip
    for (log, dim, unit, family, correction, policy), r in keyed.items():
        if policy != "adaptive":
            continue
        u = keyed[(log, dim, unit, family, correction, "uniform")]
        print(
            f"| {log} | {dim} | {unit} | {family} ({r['family_size']}) | {correction} "
            f"| {r['judgments_mean']:,.0f} | {r['closed_mean']:.1f} | {u['judgments_mean']:,.0f} "
            f"| {u['closed_mean']:.1f} | {max(r['reversals_max'], u['reversals_max'])} |"
        )


if __name__ == "__main__":
    main()
