"""The fast path's rows on the bundled logs are the ones it gave before its data were merged
into per-cell category counts (tests/adaptive/estimation/fixtures/fast_path_rows.json, made
on the commit it names with the command it names)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = Path(__file__).with_name("fixtures") / "fast_path_rows.json"
#: absolute tolerance of a float that comes from the judgments alone
TOLERANCE = 1e-6
#: the columns that come from the judgments alone (no model): to ``TOLERANCE``
DATA_ONLY = {"observed_net", "observed_se", "observed_ci_low", "observed_ci_high",
             "net_preference", "n_judgments", "n_prompts"}  # fmt: skip
#: a float of the model's draws may move by this share of the Monte Carlo error of the
#: interval's end the row reports (``ci_mcse``): merging the judgments into counts sums the
#: potential in another order, and float32 L-BFGS stops a hair away (measured: 1.3% at most)
MCSE_SHARE = 0.25
#: the draws of the default fast path; a tail probability may move by a draw or so crossing 0
NUM_DRAWS = 4000


def _close(key: str, now, before, row: dict) -> bool:
    """Equal; a float within 1e-6, or (the model's) within a share of the row's own Monte
    Carlo error (a probability: within a draw or so)."""
    if not isinstance(before, float) or not isinstance(now, (int, float)):
        return now == before
    if math.isnan(before):
        return math.isnan(now)
    gap = abs(now - before)
    if gap <= TOLERANCE:
        return True
    if key in DATA_ONLY:
        return False
    if key in ("p_b_better", "p_two_sided"):
        return gap <= 2.0 / NUM_DRAWS + 1e-12
    return gap <= MCSE_SHARE * row["ci_mcse"]


@pytest.mark.parametrize(
    "case", ["default/chateval_ncm", "default/mtbench", "paper/chateval_ncm", "paper/mtbench"]
)
def test_the_fast_paths_rows_on_the_bundled_logs_are_unchanged(case):
    import evalset

    fixture = json.loads(FIXTURE.read_text())
    preset, name = case.split("/")
    options = {"preset": "paper", "method": "fast"} if preset == "paper" else {}
    rows = evalset.significance(ROOT / "data" / name / "judgments.csv", seed=0, **options)
    before = fixture["rows"][case]
    assert rows.height == len(before)
    for now, was in zip(rows.to_dicts(), before):
        assert set(now) == set(was)
        off = {k: (now[k], was[k]) for k in was if not _close(k, now[k], was[k], was)}
        assert not off, f"{was['system_a']} vs {was['system_b']}: {off}"
