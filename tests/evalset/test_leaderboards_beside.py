"""The leaderboards tell the decisions' story: Elo resamples whole prompts by default (the
decisions' unit), the Bradley-Terry leaderboard counts a cell once, and both show the decided
ranking beside each row with a note where they separate what the decisions do not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import evalset
from evalset.ranking_beside import DecidedRanking, elo_notes

MTBENCH = Path(__file__).resolve().parents[2] / "data" / "mtbench" / "judgments.csv"


def _expected_columns(groups: list[list[str]]) -> dict[str, tuple[int, str]]:
    """decided_group and decided_ranks of every system, from the ranking answer's groups."""
    want, first = {}, 1
    for k, group in enumerate(groups, start=1):
        last = first + len(group) - 1
        for s in group:
            want[s] = (k, f"{first}-{last}" if last > first else str(first))
        first = last + 1
    return want


def _verdicts() -> dict[tuple[str, str], str]:
    """(s, t) -> s's decision against t: better, worse or the decision's own word."""
    rows = evalset.decisions(MTBENCH, question="ranking").iter_rows(named=True)
    out = {}
    for r in rows:
        a, b, d = r["system_a"], r["system_b"], r["decision"]
        out[(a, b)] = {"A better": "better", "B better": "worse"}.get(d, d)
        out[(b, a)] = {"A better": "worse", "B better": "better"}.get(d, d)
    return out


def test_elo_resamples_whole_prompts_by_default(capsys) -> None:  # noqa: ANN001
    from services.cli import main

    default = evalset.elo(MTBENCH, rounds=100, seed=5)
    assert default.equals(evalset.elo(MTBENCH, rounds=100, seed=5, bootstrap="prompt"))
    battles = evalset.elo(MTBENCH, rounds=100, seed=5, bootstrap="judgment")
    assert default["elo"].to_list() == battles["elo"].to_list()  # the same fit
    # a prompt's judgments agree more than independent battles: its resamples vary more
    width = (default["ci_high"] - default["ci_low"]).to_numpy()
    assert np.all(width > (battles["ci_high"] - battles["ci_low"]).to_numpy())
    argv = ["elo", "--data", str(MTBENCH), "--rounds", "100", "--seed", "5", "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == default.to_dicts()
    with pytest.raises(ValueError, match="no judgments for dimension 'style'"):
        evalset.elo(MTBENCH, rounds=10, dimension="style")


def test_the_decided_ranking_stands_beside_each_elo_row() -> None:
    board = evalset.elo(MTBENCH, rounds=100, seed=5)
    want = _expected_columns(evalset.answer(MTBENCH, "ranking")["groups"][0])
    got = {
        r["system"]: (r["decided_group"], r["decided_ranks"]) for r in board.iter_rows(named=True)
    }
    assert got == want
    assert want["gpt-4"] == (1, "1-3")  # gpt-4 vs claude-v1 and vs gpt-3.5-turbo are undecided


@pytest.mark.parametrize("bootstrap", ["judgment", "prompt"])
def test_a_row_says_where_elo_separates_what_the_decisions_do_not(bootstrap: str) -> None:
    """Each note names exactly the systems the row's rank interval separates it from while
    their decision does not order them so; the resampled battles separate gpt-4 from
    claude-v1 and gpt-3.5-turbo, whose decisions against it are undecided."""
    board = evalset.elo(MTBENCH, rounds=200, seed=0, bootstrap=bootstrap)
    verdict = _verdicts()
    rows = list(board.iter_rows(named=True))
    for r in rows:
        want = set()
        for q in rows:
            above, below = r["rank_worst"] < q["rank_best"], q["rank_worst"] < r["rank_best"]
            decided = verdict[(r["system"], q["system"])] if q is not r else ""
            if (above and decided != "better") or (below and decided != "worse"):
                want.add(q["system"])
        named = {q["system"] for q in rows if f" {q['system']}:" in r["note"]}
        assert named == want, (r["system"], r["note"])
    top = rows[0]
    if bootstrap == "judgment":
        assert top["system"] == "gpt-4" and top["rank_worst"] == 1
        needed = evalset.decisions(MTBENCH).filter(
            (pl.col("system_a") == "claude-v1") & (pl.col("system_b") == "gpt-4")
        )["needed"][0]
        assert "above claude-v1: undecided on their own" in top["note"]
        assert f"~{needed} more judgments" in top["note"] and "every look" in top["note"]


def test_a_note_when_the_decisions_separate_what_the_rank_intervals_do_not() -> None:
    decided = DecidedRanking(
        {"d": [["x"], ["y", "z"]]},
        {
            ("d", "x", "y"): {"decision": "A better", "n_used": 40, "needed": 0},
            ("d", "z", "x"): {"decision": "B better", "n_used": 40, "needed": 0},
            ("d", "y", "z"): {"decision": "undecided", "n_used": 0, "needed": None},
        },
    )
    rows = [
        {"system": "x", "rank_best": 1, "rank_worst": 2},
        {"system": "y", "rank_best": 1, "rank_worst": 2},
        {"system": "z", "rank_best": 3, "rank_worst": 3},
    ]
    x, y, z = elo_notes(decided, "d", rows)
    assert x.startswith("the decisions rank it above y, the rank intervals overlap")
    assert "above z" not in x  # both separate x from z, the same way
    assert "the decisions rank it below x" in y
    assert "above z: never compared directly" in y
    assert "below y: never compared directly" in z and "x" not in z.split("(")[0]


def test_the_bradley_terry_leaderboard_counts_a_cell_once() -> None:
    """Two annotators per cell (the example): each judgment weighs 1/2 by default, so the
    likelihood is that of one judgment per cell (intervals wider); a log with one judgment per cell is
    unchanged."""
    data = evalset.example(num_systems=3, num_prompts=20, seed=1)
    cells = evalset.leaderboard(data)
    battles = evalset.leaderboard(data, unit="judgment")
    assert np.all(cells["sd"].to_numpy() > battles["sd"].to_numpy() * 1.1)  # the prior holds some
    once = data.unique(["dimension", "system_a", "system_b", "item_id"], keep="first",
                       maintain_order=True)  # fmt: skip
    assert (
        evalset.leaderboard(once)
        .drop("note")
        .equals(evalset.leaderboard(once, unit="judgment").drop("note"))
    )
    with pytest.raises(ValueError, match="unit must be"):
        evalset.leaderboard(data, unit="cell")


def test_the_bradley_terry_leaderboard_notes_a_p_best_the_decisions_do_not_share() -> None:
    board = evalset.leaderboard(MTBENCH)
    want = _expected_columns(evalset.answer(MTBENCH, "ranking")["groups"][0])
    rows = {r["system"]: r for r in board.iter_rows(named=True)}
    assert {s: (r["decided_group"], r["decided_ranks"]) for s, r in rows.items()} == want
    top = rows["gpt-4"]
    assert top["p_best"] >= 0.95
    assert top["note"].startswith(f"P(best) {top['p_best']:.2f} ranks it above")
    assert "claude-v1: undecided" in top["note"] and "gpt-3.5-turbo: undecided" in top["note"]
    assert all(r["note"] == "" for s, r in rows.items() if r["p_best"] < 0.95)
