"""The next shape's stand-in campaign reaches the rows and prompts asked, on new cells."""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl
import pytest

from services.runtime.shapes import NEW_PROMPT, fit_rows, grow_to

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from freshness import simulate  # noqa: E402  (the benchmarks' campaign generator)


def _frame(num: int, comparisons: int = 10, prompts: int = 50) -> pl.DataFrame:
    """``num`` judgments cycling through the cells prompt by prompt (300: 30 prompts)."""
    return pl.DataFrame(simulate(num, 5, comparisons, prompts, seed=1))


def test_rows_are_judged_cells_when_merged_and_judgments_otherwise() -> None:
    frame = _frame(700)  # 500 cells, 200 of them judged twice
    assert fit_rows(frame, merged=True) == 500
    assert fit_rows(frame, merged=False) == 700
    # a cell is an unordered pair: the same pair judged the other way round is one cell
    flipped = frame.head(1).with_columns(
        pl.col("system_b").alias("system_a"), pl.col("system_a").alias("system_b")
    )
    assert fit_rows(frame.vstack(flipped), merged=True) == 500


@pytest.mark.parametrize("rows", [320, 480, 499])
def test_merged_growth_lands_on_free_cells_of_known_prompts(rows: int) -> None:
    cell = pl.col("judgment_id").str.slice(1).cast(pl.Int64) % 500
    frame = _frame(900).filter((cell % 10 + cell // 10) % 5 < 2)  # (pair + prompt) % 5 < 2
    assert fit_rows(frame, merged=True) == 200  # 2 of every 5 cells, every pair and prompt
    assert frame["item_id"].n_unique() == 50
    grown = grow_to(frame, rows=rows - 120, prompts=50, merged=True, seed=3)
    assert fit_rows(grown, merged=True) == rows - 120
    assert grown["item_id"].n_unique() == 50  # no new prompt was needed
    assert grown.head(frame.height).equals(frame)  # the campaign's own judgments are untouched
    assert grown.schema == frame.schema


def test_past_the_free_cells_new_prompts_take_the_known_pairs() -> None:
    frame = _frame(500)  # every cell judged
    grown = grow_to(frame, rows=530, prompts=50, merged=True, seed=4)
    assert fit_rows(grown, merged=True) == 530
    new = grown.filter(pl.col("item_id").str.starts_with(NEW_PROMPT.format("")))
    assert new.height == 30 and new["item_id"].n_unique() == 3  # 10 pairs per prompt


def test_more_prompts_are_asked_for_each_new_prompt_is_used() -> None:
    frame = _frame(300)  # 30 prompts
    grown = grow_to(frame, rows=300, prompts=64, merged=True, seed=5)
    assert grown["item_id"].n_unique() == 64
    assert fit_rows(grown, merged=True) == 334  # one cell on each new prompt
    unmerged = grow_to(frame, rows=350, prompts=64, merged=False, seed=5)
    assert unmerged.height == 350 and unmerged["item_id"].n_unique() == 64


def test_a_shape_already_reached_adds_nothing() -> None:
    frame = _frame(300)
    assert grow_to(frame, rows=100, prompts=10, merged=True) is frame
