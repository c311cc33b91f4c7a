"""Checks of each decision row's B-share interval (the sign test inverted, adaptive.stopping.evidence).

1. Null campaigns: every comparison has no preference (B's share of non-ties 1/2); how often
   does any comparison of a campaign get a share interval that excludes 1/2, at the end of a
   campaign and at 5 / 15 / 30% of it (Bonferroni at alpha 0.05 over the campaign's
   comparisons: at most 5% of campaigns may)?
2. The bundled logs, whole and in random subsamples of 5 / 15 / 30% of their judgments (row
   order kept): every row whose share interval excludes 1/2 is compared with the sign of the
   comparison's own raw judgments on the whole log; and the row's decision with its interval
   (a B-better row's lower bound at least 1/2, an open row's interval holding 1/2).

    python research/share_interval_checks.py
"""

from __future__ import annotations

import numpy as np
import polars as pl

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.stopping.decision_rows import decision_rows
from adaptive.stopping.decisions import decide

LOGS = ("chateval_ncm", "mtbench", "ai_teacher_test")


def _dims(frame: pl.DataFrame) -> list[str]:
    return frame["dimension"].unique(maintain_order=True).to_list()


SHARES = (0.05, 0.15, 0.30, 1.0)


def null_campaigns(campaigns: int = 200, comparisons: int = 10, per: int = 300) -> None:
    rng = np.random.default_rng(0)
    flagged = dict.fromkeys(SHARES, 0)
    for _ in range(campaigns):
        n = comparisons * per
        comparison = rng.integers(0, comparisons, n)
        signed = np.where(rng.random(n) < 0.3, 0, np.where(rng.random(n) < 0.5, 1, -1))
        for share in SHARES:
            keep = np.arange(int(n * share))
            d = decide(comparison[keep], keep, signed[keep], comparisons)
            flagged[share] += bool(((d.share_low >= 0.5) | (d.share_high <= 0.5)).any())
    print(f"null campaigns ({campaigns} of {comparisons} comparisons x {per} judgments):")
    for share in SHARES:
        print(f"  {share:>4.0%} of the data: {flagged[share]} campaigns with any share interval "
              f"apart from 1/2 ({flagged[share] / campaigns:.1%})")  # fmt: skip


def raw_sign(frame: pl.DataFrame) -> dict[tuple[str, str, str], float]:
    """Each comparison's own raw net preference on the whole log, oriented system_a -> b."""
    out = {}
    for dim in _dims(frame):
        cells = build_cells(frame, dimension=dim)
        signed = cells.judgment_y.astype(np.float64) - 1.0
        for c, (a, b) in enumerate(cells.comparison_names()):
            out[(dim, a, b)] = float(signed[cells.judgment_comparison == c].mean())
    return out


def real_logs(seeds: int = 5) -> None:
    for log in LOGS:
        frame = read_judgments(f"data/{log}/judgments.csv")
        truth = raw_sign(frame)
        for share in SHARES:
            apart = wrong = inconsistent = rows_seen = 0
            for seed in range(seeds if share < 1 else 1):
                rng = np.random.default_rng(seed)
                keep = np.sort(rng.choice(frame.height, int(frame.height * share), replace=False))
                part = frame[keep] if share < 1 else frame
                for dim in _dims(part):
                    cells = build_cells(part, dimension=dim)
                    d = decide(
                        cells.judgment_comparison,
                        cells.judgment_prompt,
                        cells.judgment_y.astype(np.float64) - 1.0,
                        cells.num_comparisons,
                    )
                    names = [(dim, a, b) for a, b in cells.comparison_names()]
                    for row in decision_rows(d, names):
                        rows_seen += 1
                        low, high = row["b_share_low"], row["b_share_high"]
                        if row["decision"] == "B better":
                            inconsistent += low < 0.5
                        elif row["decision"] == "A better":
                            inconsistent += high > 0.5
                        elif row["decision"] == "undecided":
                            inconsistent += not low < 0.5 < high
                        if low >= 0.5 or high <= 0.5:
                            apart += 1
                            a, b = row["system_a"], row["system_b"]
                            # a subsample may orient the pair the other way round
                            raw = truth.get((dim, a, b), -truth.get((dim, b, a), np.nan))
                            wrong += (raw < 0) if low >= 0.5 else (raw > 0)
            print(
                f"{log} at {share:.0%} ({seeds if share < 1 else 1} subsamples): {rows_seen} rows, "
                f"{apart} share intervals apart from 1/2, {wrong} against the whole log's raw "
                f"sign, {inconsistent} rows whose interval disagrees with their decision"
            )


if __name__ == "__main__":
    null_campaigns()
    real_logs()
