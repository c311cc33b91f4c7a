"""Reproduce Sedoc & Ungar's Tables 2/3 on the bundled ChatEval NCM judgments.

Writes a markdown side-by-side table (paper vs ours) with agreement figures; ``--json FILE``
also writes the rows, the agreement figures and the fit's diagnostics (tests/scripts/test_paper_table.py
reads them).

    python scripts/reproduce_paper_table.py --method nuts --b-scale 5 --draws 4000 --out docs/paper_table.md
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from adaptive.core.data import read_judgments  # noqa: E402
from adaptive.estimation.fitting import preset_config  # noqa: E402
from adaptive.estimation.pipeline import analyze  # noqa: E402
from adaptive.estimation.significance import compare  # noqa: E402

PAPER = ROOT / "tests" / "fixtures" / "sedoc_ungar_table3.csv"
DATA = ROOT / "data" / "chateval_ncm" / "judgments.csv"


def side_by_side(rows: list[dict], paper: pl.DataFrame) -> list[dict]:
    ours = {(r["system_a"], r["system_b"]): r for r in rows}
    out = []
    for p in paper.iter_rows(named=True):
        key, sign = (p["system_a"], p["system_b"]), 1.0
        if key not in ours:
            key, sign = key[::-1], -1.0
        o = ours[key]
        lo, hi = sorted((sign * o["ci_low"], sign * o["ci_high"]))
        out.append(
            {
                **p,
                "mean": sign * o["mean"],
                "sd": o["sd"],
                "ci_low": lo,
                "ci_high": hi,
                "significant": o["significant"],
                "significant_adjusted": o["significant_adjusted"],
                "verdict_settled": o["verdict_settled"],
                "n_judgments": o["n_judgments"],
            }
        )
    return out


def agreement(table: list[dict]) -> dict:
    certain = [r for r in table if r["mapping"] == "certain"]
    pairs = {}
    for r in table:  # Cakechat-NCM appears twice in the paper; one pair here
        pairs.setdefault(frozenset((r["system_a"], r["system_b"])), r)
    distinct = list(pairs.values())
    return {
        "rows": len(table),
        "sign_agree_certain": sum(np.sign(r["mean"]) == np.sign(r["paper_mean"]) for r in certain),
        "certain": len(certain),
        "sig_agree_pairs": sum(r["significant"] == r["paper_significant"] for r in distinct),
        "sig_adj_agree_pairs": sum(
            r["significant_adjusted"] == r["paper_significant"] for r in distinct
        ),
        "pairs": len(distinct),
        # verdicts whose interval end is within 2 Monte Carlo errors of 0 (seed-dependent)
        "unsettled_pairs": sum(not r["verdict_settled"] for r in distinct),
        "r_means": float(
            np.corrcoef([r["mean"] for r in table], [r["paper_mean"] for r in table])[0, 1]
        ),
        "r_abs_means": float(
            np.corrcoef([abs(r["mean"]) for r in table], [abs(r["paper_mean"]) for r in table])[
                0, 1
            ]
        ),
        "sd_ratio": float(np.mean([r["sd"] / r["paper_sd"] for r in table])),
    }


def run(
    method: str,
    seed: int,
    group: bool,
    likelihood: str = "net",
    b_scale: float = 2.0,
    **overrides: Any,
) -> tuple[list[dict], dict, float]:
    """The paper preset's fit of the NCM judgments; ``overrides`` replace config fields."""
    judgments = read_judgments(DATA)
    # the paper's model (``evalset significance --preset paper``)
    config = preset_config(
        "paper", method=method, likelihood=likelihood, seed=seed, b_scale=b_scale, **overrides
    )
    start = time.perf_counter()
    result = analyze(judgments, config=config, group_redundant=group)
    seconds = time.perf_counter() - start
    rows = compare(result.posterior, result.cells)
    diag = result.posterior.diagnostics.summary() | {"groups": len(result.groups)}
    return rows, diag, seconds


def markdown(table: list[dict], stats: dict, diag: dict, seconds: float, args) -> str:
    lines = [
        "| paper System A | paper System B | here: A | here: B | paper Δ (sd) | ours Δ (sd) | ours 95% interval | paper sig. | ours sig. | ours Holm | sign agrees |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in table:
        star = lambda b: "*" if b else ""  # noqa: E731
        mapping = " (?)" if r["mapping"] != "certain" else ""
        lines.append(
            f"| {r['paper_system_a']} | {r['paper_system_b']} | {r['system_a']} | {r['system_b']}{mapping} "
            f"| {r['paper_mean']:.3f}{star(r['paper_significant'])} ({r['paper_sd']:.3f}) "
            f"| {r['mean']:.3f}{star(r['significant'])} ({r['sd']:.3f}) "
            f"| [{r['ci_low']:.2f}, {r['ci_high']:.2f}] "
            f"| {'yes' if r['paper_significant'] else 'no'} | {'yes' if r['significant'] else 'no'} "
            f"| {'yes' if r['significant_adjusted'] else 'no'} "
            f"| {'yes' if np.sign(r['mean']) == np.sign(r['paper_mean']) else '**no**'} |"
        )
    head = [
        "# Sedoc & Ungar's Table 3 on the bundled ChatEval NCM judgments",
        "",
        f"Written by `{command(args)}` (docs/statistics.md says what it fits; "
        "`python scripts/readme_tables.py --paper` runs the same).",
        "",
        f"Fit: `{args.method}`, likelihood `{args.likelihood}`, threshold prior sd {args.b_scale}, redundancy grouping {'on' if not args.no_grouping else 'off'} "
        f"({diag['groups']} groups), seed {args.seed}; {seconds:.0f} s on this machine. "
        f"Diagnostics: max R-hat {diag['max_rhat']:.3f}, min bulk ESS {diag['min_ess_bulk']:.0f}, "
        f"divergences {diag['num_divergences']}.",
        "",
        f"- Sign of the mean ability difference agrees on {stats['sign_agree_certain']} of the "
        f"{stats['certain']} rows whose system mapping is certain.",
        f"- Significance (95% interval excludes 0) agrees on {stats['sig_agree_pairs']} of {stats['pairs']} "
        f"distinct system pairs; with Holm's adjustment on {stats['sig_adj_agree_pairs']} of {stats['pairs']}. "
        "Verdicts whose interval end is within 2 Monte Carlo errors of 0 (another seed may flip "
        f"them): {stats['unsettled_pairs']} of {stats['pairs']}.",
        f"- Correlation of the means with the paper's: r = {stats['r_means']:.3f} "
        f"(of their magnitudes: r = {stats['r_abs_means']:.3f}); our posterior sd is on average "
        f"{stats['sd_ratio']:.2f} x the paper's.",
        differences(table),
        "",
    ]
    return "\n".join(head + lines) + "\n"


def differences(table: list[dict]) -> str:
    """The distinct pairs whose 95% verdict differs from the paper's, named."""
    pairs: dict[frozenset, dict] = {}
    for r in table:
        pairs.setdefault(frozenset((r["system_a"], r["system_b"])), r)
    named = [
        f"{r['system_a']} vs {r['system_b']} ("
        + (
            "ours significant, the paper's not"
            if r["significant"]
            else "the paper's significant, ours not"
        )
        + ")"
        for r in pairs.values()
        if r["significant"] != r["paper_significant"]
    ]
    return f"- The {len(named)} verdicts that differ: " + ("; ".join(named) or "none") + "."


def command(args: argparse.Namespace) -> str:
    """The command line that writes docs/paper_table.md with these settings."""
    words = ["python scripts/reproduce_paper_table.py", f"--method {args.method}"]
    if args.likelihood != "net":
        words.append(f"--likelihood {args.likelihood}")
    if args.seed:
        words.append(f"--seed {args.seed}")
    if args.no_grouping:
        words.append("--no-grouping")
    words.append(f"--b-scale {args.b_scale:g}")
    if args.draws is not None:
        words.append(f"--draws {args.draws}")
    return " ".join([*words, "--out docs/paper_table.md"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--method", default="nuts", choices=["nuts", "fast"])
    parser.add_argument("--likelihood", default="net", choices=["net", "judgment"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-grouping", action="store_true")
    parser.add_argument("--b-scale", type=float, default=2.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--json", type=Path, help="also write the rows, agreement figures and diagnostics here"
    )
    parser.add_argument(
        "--draws",
        type=int,
        default=None,
        help="NUTS: draws per chain (default: the preset's); 4000 settles the one verdict "
        "whose interval ends within Monte Carlo error of 0. fast: draws of the Laplace "
        "approximation",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="write the markdown of a run saved with --json (its settings and time), without fitting",
    )
    args = parser.parse_args()
    if args.from_json:
        record = json.loads(args.from_json.read_text())
        text = markdown(
            record["table"],
            record["agreement"],
            record["diagnostics"],
            record["seconds"],
            argparse.Namespace(**record["args"]),
        )
        if args.out:
            args.out.write_text(text)
        print(text)
        return
    draws = "num_samples" if args.method == "nuts" else "num_draws"
    overrides = {} if args.draws is None else {draws: args.draws}
    rows, diag, seconds = run(
        args.method, args.seed, not args.no_grouping, args.likelihood, args.b_scale, **overrides
    )
    table = side_by_side(rows, pl.read_csv(PAPER))
    stats = agreement(table)
    text = markdown(table, stats, diag, seconds, args)
    if args.out:
        args.out.write_text(text)
    if args.json:
        record = {
            "table": table,
            "agreement": stats,
            "diagnostics": diag,
            "seconds": seconds,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        }
        args.json.write_text(json.dumps(record, default=_plain))
    print(text)


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as JSON numbers and lists."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


if __name__ == "__main__":
    main()
