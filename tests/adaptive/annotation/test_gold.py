"""Gold cells (adaptive/annotation/gold.py): annotators scored on cells with a known answer, and an
anytime-valid flag for those below a careful annotator's accuracy."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import polars as pl
import pytest
from statsmodels.stats.proportion import proportion_confint

import evalset
from adaptive.annotation.gold import GoldRule, gold_rows, read_gold, simulate_gold

GOLD = pl.DataFrame(
    {
        "item_id": ["g1", "g2", "g3"],
        "system_a": ["x", "x", "x"],
        "system_b": ["y", "y", "y"],
        "answer": ["a", "B ", "tie"],
    }
)


def _judgment(item: str, a: str, b: str, winner: str, who: str = "w1") -> dict:
    return {"item_id": item, "system_a": a, "system_b": b, "winner": winner, "annotator_id": who}


def test_a_judgment_in_the_other_order_is_scored_in_the_gold_rows_order():
    judgments = pl.DataFrame(
        [
            _judgment("g1", "y", "x", "b"),  # x wins, shown second: right
            _judgment("g2", "y", "x", "a"),  # y wins: right
            _judgment("g3", "y", "x", "b"),  # wrong (a tie)
            _judgment("g1", "x", "y", "b"),  # a repeat of g1: not scored
            _judgment("p9", "x", "y", "b"),  # not gold: not scored
            _judgment("g1", "x", "y", "b", who=""),  # anonymous: not scored
        ]
    )
    (row,) = gold_rows(judgments, GOLD)
    assert (row["annotator_id"], row["n_gold"], row["n_right"]) == ("w1", 3, 2)
    low, high = proportion_confint(2, 3, alpha=0.05, method="wilson")
    assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx((low, high), abs=1e-12)


def test_the_flag_is_the_sequential_probability_ratio_crossing_one_over_the_level():
    """Wrong answers multiply the ratio by (1 - 0.5) / (1 - 0.8) = 2.5: 2.5^3 = 15.6 < 20,
    2.5^4 = 39 >= 20, so the fourth wrong answer in a row flags (level 0.05)."""
    gold = pl.DataFrame(
        {"item_id": [f"g{i}" for i in range(6)], "system_a": "x", "system_b": "y", "answer": "a"}
    )
    rows = [_judgment(f"g{i}", "x", "y", "b") for i in range(6)]  # all wrong
    (row,) = gold_rows(pl.DataFrame(rows), gold)
    assert row["flagged"] and row["flagged_after"] == 4
    assert row["max_ratio"] == pytest.approx(2.5**6)
    assert "after 4 of them" in row["reason"]
    (kept,) = gold_rows(pl.DataFrame(rows[:3]), gold)
    assert not kept["flagged"] and kept["flagged_after"] is None


def test_gold_ids_are_read_as_the_judgments_ids_and_a_cell_holds_one_answer():
    spaced = GOLD.with_columns(pl.col("system_a") + " ", dimension=pl.lit(""))
    (row,) = gold_rows(pl.DataFrame([_judgment("g1", "x", "y", "a")]), spaced)
    assert row["n_right"] == 1  # "x " is x, and an empty dimension holds for every one
    both = pl.concat([GOLD.head(1), GOLD.head(1).with_columns(dimension=pl.lit("overall"))],
                     how="diagonal")  # fmt: skip
    with pytest.raises(ValueError, match="gold row 2: the cell of row 1 again"):
        read_gold(both)
    with pytest.raises(ValueError, match="no judgment of a gold cell"):
        gold_rows(pl.DataFrame([_judgment("p9", "x", "y", "a")]), GOLD)


@pytest.mark.parametrize(
    "bad, message",
    [
        (GOLD.with_columns(pl.lit("maybe").alias("answer")), "gold row 1: answer 'maybe'"),
        (GOLD.with_columns(pl.lit("x").alias("system_b")), "gold row 1: a pair of one system"),
        (
            pl.concat(
                [GOLD, GOLD.head(1).rename({"system_a": "system_b", "system_b": "system_a"})],
                how="diagonal",
            ),
            "gold row 4: the cell of row 1 again",
        ),
        (GOLD.drop("answer"), "need the column(s) ['answer']"),
    ],
)
def test_bad_gold_cells_are_refused_naming_the_row(bad, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        read_gold(bad)


def _rates(campaigns: int, **options) -> tuple[float, float]:
    """Recall of the careless annotators and specificity on the careful ones."""
    caught, spared = [], []
    for seed in range(campaigns):
        judgments, gold, careless = simulate_gold(np.random.default_rng(seed), **options)
        for row in gold_rows(judgments, gold):
            (caught if row["annotator_id"] in careless else spared).append(row["flagged"])
    return float(np.mean(caught)) if caught else float("nan"), 1.0 - float(np.mean(spared))


def test_random_annotators_are_flagged_within_30_gold_judgments_and_careful_ones_are_not():
    """10% random clickers among 50 annotators, 30 gold judgments each, 20 campaigns
    (research/gold_checks.py runs 200 and the variants)."""
    recall, specificity = _rates(20)
    assert recall >= 0.9 and specificity >= 0.95
    recall, specificity = _rates(20, careless_answers=("a", "b"))  # no tie button
    assert recall >= 0.9 and specificity >= 0.95


def test_annotators_exactly_as_accurate_as_careful_are_flagged_at_most_at_the_level():
    """The null's edge (accuracy 0.8 for every careful annotator): Ville's bound, 5%."""
    _, specificity = _rates(20, careful_accuracy=(0.8, 0.8), careless_share=0.0)
    assert specificity >= 0.95


def test_the_python_door_reads_files_and_takes_the_rule(tmp_path):
    judgments, gold, careless = simulate_gold(np.random.default_rng(3))
    judgments.write_csv(tmp_path / "j.csv")
    gold.write_csv(tmp_path / "gold.csv")
    table = evalset.gold(tmp_path / "j.csv", tmp_path / "gold.csv")
    assert table.to_dicts() == gold_rows(judgments, gold)
    as_pandas = pd.DataFrame(gold.to_dicts())
    assert evalset.gold(judgments, as_pandas).to_dicts() == table.to_dicts()
    stricter = evalset.gold(judgments, gold, careful=0.9, careless=0.6, level=0.01)
    assert stricter.to_dicts() == gold_rows(judgments, gold, GoldRule(0.9, 0.6, 0.01))
    with pytest.raises(ValueError, match="careless < careful"):
        evalset.gold(judgments, gold, careful=0.5, careless=0.6)


def test_the_command_line_gives_the_python_rows_and_names_a_bad_gold_row(tmp_path, capsys):
    from services.cli import main

    judgments, gold, _ = simulate_gold(np.random.default_rng(4), num_annotators=12)
    judgments.write_csv(tmp_path / "j.csv")
    gold.write_csv(tmp_path / "gold.csv")
    argv = ["gold", "--data", str(tmp_path / "j.csv"), "--gold", str(tmp_path / "gold.csv")]
    assert main([*argv, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == evalset.gold(judgments, gold).to_dicts()
    assert "flagged" in out.err
    gold.with_columns(pl.lit("maybe").alias("answer")).write_csv(tmp_path / "gold.csv")
    assert main(argv) != 0
    assert "gold row 1: answer 'maybe'" in capsys.readouterr().err
