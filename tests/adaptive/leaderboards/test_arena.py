"""Chatbot Arena battle logs: JSON array, JSONL, Parquet and frames; the leaderboard they give.

The leaderboard's order is compared with a plain Bradley-Terry maximum-likelihood fit
on the same battles computed here with scipy alone (logistic log-likelihood, a tie
counted as half a win for each side, as the public Arena notebooks do).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy import optimize, stats

from adaptive.core.data import DataError, read_judgments
from adaptive.leaderboards.bt import BTConfig, ability_rows, fit_bt

_GEN = Path(__file__).parents[2] / "fixtures" / "arena" / "generate.py"
_spec = importlib.util.spec_from_file_location("arena_generate", _GEN)
arena_generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(arena_generate)

NUM_BATTLES, NUM_MODELS = 12_000, 20


@pytest.fixture(scope="module")
def battles() -> tuple[list[dict], dict[str, float]]:
    return arena_generate.make_battles(NUM_BATTLES, NUM_MODELS, seed=0)


@pytest.fixture(scope="module")
def files(battles, tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("arena")
    rows, _ = battles
    paths = {
        "json": folder / "battles.json",
        "jsonl": folder / "battles.jsonl",
        "parquet": folder / "battles.parquet",
    }
    paths["json"].write_text(json.dumps(rows))
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    # nested conversations and typed columns, as the public Parquet dumps have them
    pl.DataFrame(rows).write_parquet(paths["parquet"])
    return paths


def test_every_arena_format_reads_the_same(battles, files):
    rows, _ = battles
    frames = {k: read_judgments(p) for k, p in files.items()}
    frames["polars"] = read_judgments(pl.DataFrame(rows).drop("conversation_a", "conversation_b"))
    frames["pandas"] = read_judgments(pd.DataFrame(rows))
    first = frames["json"]
    assert first.height == NUM_BATTLES
    assert first.columns == [
        "item_id", "system_a", "system_b", "annotator_id", "winner", "dimension",
        "shown_first", "timestamp", "both_bad", "row",
    ]  # fmt: skip
    for name, frame in frames.items():
        assert frame.drop("timestamp").equals(first.drop("timestamp")), name
    # tie (bothbad) is a tie for the models, kept apart in both_bad
    raw = pd.Series([r["winner"] for r in rows])
    assert (first["both_bad"] == "true").sum() == (raw == "tie (bothbad)").sum() > 0
    assert (first["winner"] == "tie").sum() == raw.isin(["tie", "tie (bothbad)"]).sum()
    assert set(first.filter(pl.col("both_bad") == "true")["winner"]) == {"tie"}
    assert first.row(0, named=True)["item_id"] == rows[0]["question_id"]
    assert first["annotator_id"][0] == rows[0]["judge"]
    assert first["timestamp"][0].startswith("2023-07-")


def test_a_bad_winner_is_named_with_the_arena_labels():
    frame = pl.DataFrame(
        {"model_a": ["x", "x"], "model_b": ["y", "y"], "winner": ["model_a", "model_c"]}
    )
    with pytest.raises(DataError, match=r"row 2, column 'winner': got 'model_c'.*tie \(bothbad\)"):
        read_judgments(frame)


def reference_mle(judgments: pl.DataFrame) -> dict[str, float]:
    """Plain Bradley-Terry MLE (no position, a tie = half a win each), scipy only."""
    names = sorted(set(judgments["system_a"]) | set(judgments["system_b"]))
    index = {n: i for i, n in enumerate(names)}
    a = judgments["system_a"].replace_strict(index).to_numpy()
    b = judgments["system_b"].replace_strict(index).to_numpy()
    y = judgments["winner"].replace_strict({"a": 1.0, "b": 0.0, "tie": 0.5}).to_numpy()

    def nll(free):
        s = np.concatenate([[0.0], free])
        z = s[a] - s[b]
        value = -(y * -np.logaddexp(0, -z) + (1 - y) * -np.logaddexp(0, z)).sum()
        p = 1 / (1 + np.exp(-z))
        g = np.bincount(a, p - y, len(names)) - np.bincount(b, p - y, len(names))
        return value, g[1:]

    fit = optimize.minimize(nll, np.zeros(len(names) - 1), jac=True, method="L-BFGS-B")
    assert fit.success, fit.message
    return dict(zip(names, np.concatenate([[0.0], fit.x])))


def leaderboard_order(judgments: pl.DataFrame) -> dict[str, float]:
    (fit,) = fit_bt(judgments, BTConfig(by="pooled", method="laplace", num_draws=1000))
    return {r["system"]: r["mean"] for r in ability_rows(fit)}


def rank_agreement(x: dict[str, float], y: dict[str, float]) -> tuple[float, float]:
    names = sorted(x)
    u, v = [x[n] for n in names], [y[n] for n in names]
    return stats.spearmanr(u, v).statistic, stats.kendalltau(u, v).statistic


def test_arena_leaderboard_matches_a_plain_bradley_terry_mle(battles, files, capsys):
    _, truth = battles
    judgments = read_judgments(files["json"])
    board = leaderboard_order(judgments)
    mle = reference_mle(judgments)
    assert len(board) == NUM_MODELS
    rho, tau = rank_agreement(board, mle)
    rho_truth, tau_truth = rank_agreement(board, truth)
    rho_mle_truth, tau_mle_truth = rank_agreement(mle, truth)
    with capsys.disabled():
        print(
            f"\narena {NUM_BATTLES} battles, {NUM_MODELS} models: leaderboard vs plain BT MLE "
            f"Spearman {rho:.4f}, Kendall {tau:.4f}; vs truth {rho_truth:.4f} / {tau_truth:.4f}"
            f" (MLE vs truth {rho_mle_truth:.4f} / {tau_mle_truth:.4f})"
        )
    assert rho > 0.99 and tau > 0.95
    # the leaderboard recovers the generating order at least as well as the plain MLE
    assert tau_truth >= tau_mle_truth - 0.03


def test_mtbench_turns_stay_separate_items_and_arena_battles_keep_their_question_id() -> None:
    raw = Path(__file__).parents[3] / "data" / "mtbench" / "raw" / "human.jsonl"
    frame = read_judgments(raw)
    bundled = pl.read_csv(Path(__file__).parents[3] / "data" / "mtbench" / "judgments.csv")
    # the same 160 items (80 questions x 2 turns) as the bundled, converted file
    assert frame["item_id"].n_unique() == bundled["item_id"].n_unique() == 160
    assert set(frame["item_id"].str.replace("^", "q")) == set(bundled["item_id"])
    # Arena dumps: `turn` counts a battle's turns, one battle per question_id
    battles = pl.DataFrame(
        {
            "question_id": ["a1", "a2"],
            "model_a": ["x", "x"],
            "model_b": ["y", "y"],
            "winner": ["model_a", "tie"],
            "turn": [1, 3],
        }
    )
    assert read_judgments(battles)["item_id"].to_list() == ["a1", "a2"]
