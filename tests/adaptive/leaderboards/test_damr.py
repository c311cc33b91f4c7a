"""MRBench DAMR and the graded-labels -> pairwise conversion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from adaptive.core.data import validate_judgments
from adaptive.leaderboards import bt, damr

MRBENCH = Path(__file__).resolve().parents[3] / "data" / "mrbench"


@pytest.fixture(autouse=True)
def _skip_slow_unless_selected(request):
    if request.node.get_closest_marker("slow") and "slow" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("slow: run with -m slow")


def _ratings(rows):
    return pl.DataFrame(rows, schema=["item_id", "system", "dimension", "label"], orient="row")


def test_damr_counts_the_desired_label_per_dimension():
    r = _ratings(
        [
            ("d1", "T", "Revealing_of_the_Answer", "No"),
            ("d2", "T", "Revealing_of_the_Answer", "Yes (and the answer is correct)"),
            ("d1", "T", "Tutor_Tone", "Neutral"),
            ("d2", "T", "Tutor_Tone", "Encouraging"),
            ("d1", "T", "Coherence", "Yes"),
            ("d2", "T", "Coherence", "To some extent"),
            ("d3", "T", "Coherence", "Yes"),
        ]
    )
    rows = {x["dimension"]: x for x in damr.damr(r)}
    assert rows["Revealing_of_the_Answer"]["damr"] == 50.0
    assert rows["Tutor_Tone"]["damr"] == 50.0
    assert rows["Coherence"]["damr"] == pytest.approx(200 / 3)
    assert rows["Coherence"]["n"] == 3
    # the paper's "non-offensive" reading of the tone counts Neutral too
    tone = damr.damr(r, desired={"Tutor_Tone": ("Encouraging", "Neutral")})
    assert {x["dimension"]: x["damr"] for x in tone}["Tutor_Tone"] == 100.0


def test_pairwise_conversion_orders_by_label_and_weights_each_label_once():
    r = _ratings(
        [
            ("d1", "A", "Coherence", "Yes"),
            ("d1", "B", "Coherence", "To some extent"),
            ("d1", "C", "Coherence", "Yes"),
            ("d2", "A", "Coherence", "No"),
            ("d2", "B", "Coherence", "Yes"),
        ]
    )
    pairs = damr.to_pairwise(r)
    got = {(x["item_id"], x["system_a"], x["system_b"]): x for x in pairs.iter_rows(named=True)}
    assert set(got) == {("d1", "A", "B"), ("d1", "A", "C"), ("d1", "B", "C"), ("d2", "A", "B")}
    assert got[("d1", "A", "B")]["winner"] == "a"
    assert got[("d1", "A", "C")]["winner"] == "tie"
    assert got[("d1", "B", "C")]["winner"] == "b"
    assert got[("d2", "A", "B")]["winner"] == "b"
    # k = 3 replies: every reply is in 2 pairs of weight 1/2, so it counts once
    assert got[("d1", "A", "B")]["weight"] == 0.5 and got[("d2", "A", "B")]["weight"] == 1.0
    for system in "ABC":
        w = pairs.filter(
            (pl.col("item_id") == "d1")
            & ((pl.col("system_a") == system) | (pl.col("system_b") == system))
        )["weight"].sum()
        assert w == pytest.approx(1.0)
    # the result is valid input for the judgment pipeline
    assert validate_judgments(pairs).height == 4


def test_revealing_ranks_no_over_correct_over_incorrect():
    assert damr.label_score("Revealing_of_the_Answer", "No") > damr.label_score(
        "Revealing_of_the_Answer", "Yes (and the answer is correct)"
    )
    assert damr.label_score(
        "Revealing_of_the_Answer", "Yes (and the answer is correct)"
    ) > damr.label_score("Revealing_of_the_Answer", "Yes (but the answer is incorrect)")
    with pytest.raises(ValueError):
        damr.label_score("Coherence", "Maybe")


def test_mrbench_v1_damr_against_the_paper():
    ratings = damr.read_ratings(MRBENCH / "ratings.csv", subset="v1")
    assert ratings["item_id"].n_unique() == 192
    rows = damr.compare_with_paper(damr.damr(ratings))
    assert len(rows) == 9 * 8
    diff = {(r["system"], r["dimension"]): r["difference"] for r in rows}
    # rows that agree with Table 3: every cell within 5.3 points (most within 3)
    close = ("GPT4", "Llama31405B", "Llama318B", "Mistral", "Sonnet", "Phi3")
    for system in close:
        cells = [diff[(system, d)] for d in damr.DIMENSIONS]
        assert max(abs(c) for c in cells) < 5.3, (system, cells)
    # Gemini's released labels are far better than the paper's in every dimension
    assert min(diff[("Gemini", d)] for d in damr.DIMENSIONS) > 15
    # Expert: a near-constant offset (about 11 replies fewer desired in the paper) ...
    expert = [diff[("Expert", d)] for d in damr.DIMENSIONS if d != "Tutor_Tone"]
    assert all(5 <= c <= 7.5 for c in expert)
    # ... and a tone column that only fits "non-offensive" (Encouraging or Neutral)
    assert diff[("Expert", "Tutor_Tone")] < -70
    # Novice: the paper divides by 60 Bridge dialogues, the release has 53 Novice replies
    novice = {r["dimension"]: r for r in rows if r["system"] == "Novice"}
    assert novice["Mistake_Identification"]["n"] == 53
    assert 100 * novice["Mistake_Identification"]["n_desired"] / 60 == pytest.approx(
        43.33, abs=0.01
    )


def test_pairwise_bradley_terry_ranks_tutors_like_damr():
    ratings = damr.read_ratings(MRBENCH / "ratings.csv", subset="v1").filter(
        pl.col("dimension") == "Mistake_Identification"
    )
    pairs = damr.to_pairwise(ratings)
    judgments = validate_judgments(pairs)
    config = bt.BTConfig(by="pooled", ties="davidson", method="mle", position=False)
    fit = bt.fit_dimension(
        judgments, "Mistake_Identification", config, weight=damr.pairwise_weights(pairs)
    )
    ability = {r["system"]: r["mean"] for r in bt.ability_rows(fit)}
    rates = {r["system"]: r["damr"] for r in damr.damr(ratings)}
    systems = sorted(rates)
    from scipy.stats import spearmanr

    rho = spearmanr([ability[s] for s in systems], [rates[s] for s in systems]).statistic
    assert rho > 0.9
    assert ability["Llama31405B"] > ability["Phi3"]


def test_cli_damr_json_and_pairwise_out(tmp_path, capsys):
    from services.cli import main

    out = tmp_path / "pairs.csv"
    code = main(["damr", "--data", str(MRBENCH / "ratings.csv"), "--subset", "v1",
                 "--compare-paper", "--format", "json", "--pairwise-out", str(out), "--quiet"])  # fmt: skip
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"system", "dimension", "damr", "paper_damr", "difference"} <= set(rows[0])
    pairs = pl.read_csv(out)
    assert set(pairs["winner"].unique().to_list()) <= {"a", "b", "tie"}
    assert np.all(pairs["weight"].to_numpy() > 0)
