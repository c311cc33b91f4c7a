"""Ranked screens: the ranking format's pairs, screen_id checks, and a screen as one unit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from adaptive.core.cells import build_cells
from adaptive.core.data import DataError, read_judgments
from adaptive.core.rankings import parse_ranking, ranked_pairs
from adaptive.estimation.fitting import cell_of_observations, cluster_of_observations
from adaptive.stopping.decisions import decide_cells
from adaptive.stopping.rule import DecisionRule

FIXTURE = Path(__file__).parents[2] / "fixtures" / "rankings" / "rankings.csv"


def _pairs(rows):
    return pl.DataFrame(
        rows,
        schema=["item_id", "system_a", "system_b", "annotator_id", "winner", "screen_id"],
        orient="row",
    )


def test_a_ranking_row_becomes_its_pairs_with_ties_and_its_screen():
    frame = pl.DataFrame(
        {
            "item_id": ["p1", "p2"],
            "annotator_id": ["w1", "w2"],
            "ranking": ["y > x = z", "z > x"],
            "dimension": ["fluency", ""],
        }
    )
    out = read_judgments(frame)
    assert out.select("item_id", "system_a", "system_b", "winner", "screen_id", "row").rows() == [
        ("p1", "x", "y", "b", "screen-1", 1),
        ("p1", "x", "z", "tie", "screen-1", 1),
        ("p1", "y", "z", "a", "screen-1", 1),
        ("p2", "x", "z", "b", "screen-2", 2),
    ]
    assert out["dimension"].to_list() == ["fluency"] * 3 + ["overall"]
    # k systems give k(k-1)/2 pairs, each once; a tie is a tie whichever side
    assert len(ranked_pairs(parse_ranking("a > b = c > d > e"))) == 10
    assert ranked_pairs(parse_ranking("b = a")) == [("a", "b", "tie")]


def test_the_bundled_ranking_file_reads_in_every_format(tmp_path):
    csv = read_judgments(FIXTURE)
    screens = pl.read_csv(FIXTURE)
    assert csv.height == 10 * screens.height  # five systems: 10 pairs a screen
    assert csv["screen_id"].n_unique() == screens.height
    # JSONL with the ranking as a list of ranks (a tie within one string) and Parquet
    records = [
        r | {"ranking": [rank.strip() for rank in r["ranking"].split(">")]}
        for r in screens.to_dicts()
    ]
    (tmp_path / "r.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    screens.write_parquet(tmp_path / "r.parquet")
    for path in (tmp_path / "r.jsonl", tmp_path / "r.parquet"):
        assert read_judgments(path).equals(csv)


@pytest.mark.parametrize(
    ("ranking", "reason"),
    [
        ("x > > y", "empty system name"),
        ("x", "fewer than two systems"),
        ("x > y = x", "ranked twice"),
        ("", "empty ranking"),
    ],
)
def test_a_bad_ranking_rejects_the_whole_file_naming_its_row(tmp_path, ranking, reason):
    path = tmp_path / "r.csv"
    pl.DataFrame(
        {"item_id": ["p1", "p2"], "annotator_id": ["w", "w"], "ranking": ["x > y", ranking]}
    ).write_csv(path)
    with pytest.raises(DataError, match=f"line 3, column 'ranking'.*{reason}") as info:
        read_judgments(path)
    assert [p.row for p in info.value.problems] == [3]  # the file's line (header: line 1)


def test_a_screen_id_is_one_prompt_one_annotator_and_each_pair_once():
    good = _pairs([("p1", "x", "y", "w", "a", "s1"), ("p1", "y", "z", "w", "tie", "s1")])
    assert read_judgments(good)["screen_id"].to_list() == ["s1", "s1"]
    with pytest.raises(DataError) as info:
        read_judgments(
            _pairs(
                [
                    ("p1", "x", "y", "w", "a", "s1"),
                    ("p2", "x", "z", "w", "a", "s1"),  # another prompt
                    ("p1", "y", "z", "v", "a", "s1"),  # another annotator
                    ("p1", "y", "x", "w", "b", "s1"),  # x vs y again
                    ("p1", "y", "x", "w", "b", ""),  # no screen: fine
                ]
            )
        )
    assert [(p.row, p.column) for p in info.value.problems] == [
        (2, "item_id"),
        (3, "annotator_id"),
        (4, "screen_id"),
    ]
    assert "x vs y again" in str(info.value)
    with pytest.raises(DataError, match="one row per screen"):
        read_judgments(
            pl.DataFrame(
                {
                    "item_id": ["p1", "p2"],
                    "annotator_id": ["w", "w"],
                    "ranking": ["x > y"] * 2,
                    "screen_id": ["s", "s"],
                }
            )
        )


def test_screen_id_is_kept_where_it_used_to_be_dropped_and_rankings_are_read():
    """Before: a pairwise file's screen_id column vanished silently, a ranking file failed."""
    pairs = read_judgments(_pairs([("p1", "x", "y", "w", "a", "s1")]))
    assert "screen_id" in pairs.columns
    assert read_judgments(FIXTURE).height == 240


def test_a_screen_gives_each_comparison_at_most_one_judgment():
    """unit='judgment' needs no screen rule: a screen has one judgment per comparison (the
    validator rejects a repeated pair), so within a comparison's stream screens are
    independent units; the dependence is across comparisons, which Bonferroni and e-Holm
    allow. unit='prompt' keeps one judgment per cell, a fortiori one per screen."""
    judgments = read_judgments(FIXTURE)
    cells = build_cells(judgments)
    assert cells.judgment_screen is not None
    per = np.unique(np.stack([cells.judgment_screen, cells.judgment_comparison]), axis=1)
    assert per.shape[1] == cells.num_judgments
    rule = DecisionRule(unit="judgment")
    with_screens = decide_cells(cells, rule)
    without = decide_cells(build_cells(judgments.drop("screen_id")), rule)
    np.testing.assert_array_equal(with_screens.outcome, without.outcome)
    assert int(with_screens.num_obs.sum()) == cells.num_judgments


def _components_by_hand(cells) -> int:
    """Union-find over judgments that share a (comparison, prompt) cell or a screen."""
    parent = list(range(cells.num_judgments))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict = {}
    for j in range(cells.num_judgments):
        keys = [("cell", int(cells.judgment_comparison[j]), int(cells.judgment_prompt[j]))]
        if cells.judgment_screen is not None and cells.judgment_screen[j] >= 0:
            keys.append(("screen", int(cells.judgment_screen[j])))
        for key in keys:
            if key in first:
                parent[find(j)] = find(first[key])
            else:
                first[key] = j
    return len({find(j) for j in range(cells.num_judgments)})


def test_robust_units_join_a_screens_cells_and_nothing_more():
    judgments = read_judgments(FIXTURE)
    # one screen per prompt kept: a unit is a screen; all screens: a unit is a prompt
    one = build_cells(judgments.filter(pl.col("screen_id").str.ends_with("-0")))
    both = build_cells(judgments)
    for cells, expected in ((one, 12), (both, 12)):
        cluster = cluster_of_observations(cells, "judgment")
        assert cluster.max() + 1 == _components_by_hand(cells) == expected
        # every two judgments of one cell or one screen share a unit
        cell = cell_of_observations(cells, "judgment")
        for group in (cell, cells.judgment_screen):
            for g in np.unique(group):
                assert np.unique(cluster[group == g]).size == 1
    # without screens the units are the cells, as before
    plain = build_cells(judgments.drop("screen_id"))
    np.testing.assert_array_equal(
        cluster_of_observations(plain, "judgment"), cell_of_observations(plain, "judgment")
    )
    # the paper's net likelihood: one observation per cell, joined by screens into prompts
    net = cluster_of_observations(both, "net")
    assert net.shape == (len(both.cell_comparison),) and net.max() + 1 == 12
