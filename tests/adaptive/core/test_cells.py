"""Judgments -> cells: orientation, net ratings, rescaling, redundancy groups."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells, prompt_rating_matrix, rescale_net_rating
from adaptive.core.data import validate_judgments


def frame(rows):
    cols = ["item_id", "system_a", "system_b", "annotator_id", "winner"]
    return validate_judgments(pl.DataFrame([dict(zip(cols, r)) for r in rows]))


def test_reversed_rows_fold_into_one_comparison_with_flipped_sign():
    df = frame(
        [
            ("p1", "x", "y", "w1", "b"),  # y better
            ("p1", "y", "x", "w2", "a"),  # y better, written the other way round
            ("p1", "x", "y", "w3", "tie"),
        ]
    )
    cells = build_cells(df)
    assert cells.num_comparisons == 1
    assert cells.comparison_names() == [("x", "y")]
    assert cells.judgment_y.tolist() == [2, 2, 1]  # B better, B better, tie
    assert cells.cell_net.tolist() == [2]
    assert cells.cell_count.tolist() == [3]


def test_orientation_can_be_chosen():
    df = frame([("p1", "x", "y", "w1", "b"), ("p2", "x", "y", "w1", "b")])
    cells = build_cells(df, orientation=[("y", "x")])
    assert cells.comparison_names() == [("y", "x")]
    assert cells.judgment_y.tolist() == [0, 0]  # A (= y) better
    assert cells.comparison_index("x", "y") == (0, -1)


def test_rescaling_is_identity_for_three_annotators_and_rounds_away_from_zero():
    net = np.arange(-3, 4)
    assert rescale_net_rating(net, np.full(7, 3)).tolist() == net.tolist()
    assert rescale_net_rating(np.array([1, -1, 1, 5]), np.array([1, 2, 6, 6])).tolist() == [
        3,
        -2,
        1,
        3,
    ]


def test_groups_average_ratings_and_down_weight_judgments():
    df = frame(
        [
            ("p1", "x", "y", "w1", "b"),
            ("p1", "x", "y", "w2", "b"),
            ("p1", "x", "y", "w3", "b"),  # p1: +3
            ("p2", "x", "y", "w1", "a"),  # p2: -1 of 1 -> -3 rescaled
            ("p3", "x", "y", "w1", "tie"),
        ]
    )
    cells = build_cells(df, groups=[["p1", "p2"]])
    assert cells.num_items == 2
    assert cells.item_members[0] == ("p1", "p2")
    grouped = cells.cell_item == 0
    assert cells.cell_rating[grouped].tolist() == [0]  # mean of +3 and -3
    assert np.allclose(cells.judgment_weight[cells.judgment_item == 0], 0.5)
    assert np.allclose(cells.judgment_weight[cells.judgment_item == 1], 1.0)


def test_prompt_in_two_groups_is_an_error():
    df = frame([("p1", "x", "y", "w1", "b"), ("p2", "x", "y", "w1", "a")])
    with pytest.raises(ValueError, match="two redundancy groups"):
        build_cells(df, groups=[["p1", "p2"], ["p2"]])


def test_several_dimensions_need_a_choice():
    df = validate_judgments(
        pl.DataFrame(
            {
                "item_id": ["p1", "p1"],
                "system_a": ["x", "x"],
                "system_b": ["y", "y"],
                "annotator_id": ["w", "w"],
                "winner": ["a", "b"],
                "dimension": ["d1", "d2"],
            }
        )
    )
    with pytest.raises(ValueError, match="several dimensions"):
        build_cells(df)
    assert build_cells(df, dimension="d2").judgment_y.tolist() == [2]


def test_rating_matrix_on_chateval():
    from adaptive.core.data import read_judgments

    cells = build_cells(read_judgments("data/chateval_ncm/judgments.csv"))
    values, mask = prompt_rating_matrix(cells)
    assert values.shape == (200, 17)
    assert mask.sum() == len(cells.cell_rating) == 3185
    assert np.abs(values).max() == 3
    # Glove_OS: 87 identical-reply prompts have no judgments (dataset README)
    i, _ = cells.comparison_index("S2SAttn_OpenSubtitles_noPTE", "S2SAttn_OpenSubtitles")
    assert mask[:, i].sum() == 113
