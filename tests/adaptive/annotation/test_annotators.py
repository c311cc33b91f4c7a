"""Annotator screen: position bias (per-annotator intercept) and agreement with the others."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from adaptive.annotation.annotators import (
    ScreenConfig,
    agreement_scores,
    agreement_screen,
    exclude_flagged,
    screen_annotators,
)
from adaptive.core.data import read_judgments, validate_judgments

ATT = Path(__file__).resolve().parents[3] / "data" / "ai_teacher_test"


@pytest.fixture(autouse=True)
def _skip_slow_unless_selected(request):
    if request.node.get_closest_marker("slow") and "slow" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("slow: run with -m slow")


def simulate_panel(
    rng: np.random.Generator,
    *,
    num_items: int = 30,
    num_annotators: int = 12,
    biased: dict[str, float] | None = None,
    random_raters: tuple[str, ...] = (),
    adversarial: tuple[str, ...] = (),
    participation: float = 0.6,
    pair_per_item: bool = False,
) -> pl.DataFrame:
    """Judgments of 3 systems with known qualities; some annotators biased or random.

    ``biased`` maps an annotator to its position intercept (logit of choosing
    the response shown first, on top of the quality difference).
    """
    biased = biased or {}
    systems = ["s0", "s1", "s2"]
    quality = rng.normal(0, 1.2, size=(num_items, 3))
    item_pairs = [rng.choice(3, 2, replace=False) for _ in range(num_items)]
    rows = []
    for w in range(num_annotators):
        name = f"w{w:02d}"
        for item in range(num_items):
            if rng.uniform() > participation:
                continue
            i, j = item_pairs[item] if pair_per_item else rng.choice(3, 2, replace=False)
            if pair_per_item and rng.uniform() < 0.5:
                i, j = j, i
            d = biased.get(name, 0.0) + quality[item, i] - quality[item, j]
            p = 0.5 if name in random_raters else 1 / (1 + np.exp(-d))
            if name in adversarial:
                p = 1 - p
            rows.append(
                {
                    "item_id": f"p{item}",
                    "system_a": systems[i],
                    "system_b": systems[j],
                    "annotator_id": name,
                    "winner": "a" if rng.uniform() < p else "b",
                    "shown_first": "a",
                }
            )
    return validate_judgments(pl.DataFrame(rows))


def test_agreement_scores_leave_the_annotator_out():
    j = validate_judgments(
        pl.DataFrame(
            {
                "item_id": ["p"] * 3,
                "system_a": ["x", "y", "x"],
                "system_b": ["y", "x", "y"],
                "annotator_id": ["u", "v", "w"],
                "winner": ["b", "a", "a"],  # u: y, v: y, w: x
            }
        )
    )
    s = {r["annotator_id"]: r for r in agreement_scores(j).iter_rows(named=True)}
    # alphabetical orientation "x vs y": +1 when y wins
    assert s["u"]["score"] == 1 and s["u"]["others"] == pytest.approx(0.0)
    assert s["w"]["score"] == -1 and s["w"]["others"] == pytest.approx(1.0)


def test_agreement_screen_flags_random_and_adversarial_raters():
    rng = np.random.default_rng(1)
    # every annotator of an item sees the same pair (as in a crowd task with 3+ raters per cell)
    j = simulate_panel(
        rng,
        num_items=60,
        num_annotators=14,
        random_raters=("w00",),
        adversarial=("w01",),
        participation=0.8,
        pair_per_item=True,
    )
    res = agreement_screen(j)
    assert res["w01"]["agreement_flag"] and res["w01"]["agreement_r"] < 0
    assert res["w00"]["agreement_flag"]
    honest = [w for w in res if w not in ("w00", "w01")]
    assert sum(res[w]["agreement_flag"] for w in honest) <= 2
    assert np.mean([res[w]["agreement_r"] for w in honest]) > 0.3


def test_position_screen_needs_shown_first():
    rng = np.random.default_rng(2)
    j = simulate_panel(rng, num_items=10, num_annotators=5).drop("shown_first")
    rows, info = screen_annotators(j, ScreenConfig(method="laplace"))
    assert info["position_source"] == "unavailable"
    assert "shown_first" in info["position_note"]
    assert all(r["position_flag"] is None for r in rows)


def test_position_screen_flags_a_biased_annotator_and_exclusion_keeps_data():
    rng = np.random.default_rng(3)
    j = simulate_panel(rng, num_items=40, num_annotators=6, biased={"w03": 2.5}, participation=0.9)
    rows, info = screen_annotators(j, ScreenConfig(method="laplace"))
    by = {r["annotator_id"]: r for r in rows}
    assert info["position_source"] == "shown_first"
    assert by["w03"]["position_flag"] and by["w03"]["position_intercept"] > 1.0
    assert by["w03"]["position_ci_low"] > 0
    assert "position bias" in by["w03"]["reasons"]
    assert sum(r["position_flag"] for r in rows) <= 2
    kept = exclude_flagged(j, rows)
    assert "w03" not in kept["annotator_id"].to_list()
    assert j.filter(pl.col("annotator_id") == "w03").height > 0  # the input is untouched


def test_cli_annotators_json(tmp_path, capsys):
    from services.cli import main

    rng = np.random.default_rng(4)
    path = tmp_path / "j.csv"
    # without shown_first only the agreement screen runs (and the output says so)
    simulate_panel(rng, num_items=20, num_annotators=6).drop("shown_first").write_csv(path)
    code = main(["annotators", "--data", str(path), "--method", "laplace", "--format", "json",
                 "--quiet"])  # fmt: skip
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 6
    keys = {"annotator_id", "n_judgments", "position_intercept", "agreement_r", "flagged"}
    assert keys <= set(rows[0])
    assert all(r["position_intercept"] is None for r in rows)


@pytest.mark.slow
def test_ai_teacher_test_screen_finds_the_authors_outliers():
    judgments = read_judgments(ATT / "judgments.csv")
    flags = dict(pl.read_csv(ATT / "annotators.csv").select("annotator_id", "outlier_flag").rows())
    rows, info = screen_annotators(judgments, ScreenConfig(assume_a_first=True))
    assert info["position_source"] == "assumed_a"
    flagged = {r["annotator_id"] for r in rows if r["position_flag"]}
    authors = {a for a, f in flags.items() if f > 0}
    assert len(flagged & authors) >= 6
    assert len(flagged - authors) <= 2
    # the authors' flag value is the number of dimensions whose interval excludes 0
    dims = {r["annotator_id"]: r["position_dims_flagged"] for r in rows}
    assert sum(dims[a] == flags[a] for a in authors) >= 6
