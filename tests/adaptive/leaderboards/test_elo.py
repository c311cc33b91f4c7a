"""Issue 42: the Arena-style Elo leaderboard agrees with Chatbot Arena's method: the
maximum-likelihood Elo of its notebook (scikit-learn's logistic regression on the pair table,
re-implemented here from its published code) to 1e-6, and its bootstrap intervals within Monte
Carlo error, on MT-Bench's human battles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.leaderboards.elo import (
    Battles,
    battles_of,
    bootstrap_ratings,
    mle_ratings,
    rank_intervals,
    win_table,
)

MTBENCH = Path(__file__).resolve().parents[3] / "data" / "mtbench" / "judgments.csv"


def notebook_mle_elo(df, scale=400, base=10, init_rating=1000):  # noqa: ANN001, ANN201
    """The notebook's ``compute_mle_elo``: win counts twice, ties once each way, a weighted
    logistic regression with log(base) features, no intercept, no penalty."""
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    a_win = pd.pivot_table(
        df[df["winner"] == "model_a"], index="model_a", columns="model_b",
        aggfunc="size", fill_value=0,
    )  # fmt: skip
    ties = df[df["winner"].isin(["tie", "tie (bothbad)"])]
    tie = pd.pivot_table(ties, index="model_a", columns="model_b", aggfunc="size", fill_value=0)
    b_win = pd.pivot_table(
        df[df["winner"] == "model_b"], index="model_a", columns="model_b",
        aggfunc="size", fill_value=0,
    )  # fmt: skip
    models = sorted(set(df["model_a"]) | set(df["model_b"]))
    full = {"index": models, "columns": models, "fill_value": 0}
    a_win, tie, b_win = (t.reindex(**full) for t in (a_win, tie, b_win))
    win = a_win * 2 + b_win.T * 2 + tie + tie.T
    p = len(models)
    X, Y, weights = [], [], []
    for i, m_a in enumerate(models):
        for j, m_b in enumerate(models):
            if i == j:
                continue
            row = np.zeros(p)
            row[i], row[j] = math.log(base), -math.log(base)
            X += [row, row]
            Y += [1.0, 0.0]
            weights += [win.loc[m_a, m_b], win.loc[m_b, m_a]]
    lr = LogisticRegression(fit_intercept=False, penalty=None, tol=1e-8, max_iter=10_000)
    lr.fit(np.array(X), np.array(Y), sample_weight=np.array(weights, dtype=float))
    return pd.Series(scale * lr.coef_[0] + init_rating, index=models)


def _arena(frame: pl.DataFrame):  # noqa: ANN202
    import pandas as pd

    winner = {"a": "model_a", "b": "model_b", "tie": "tie"}
    return pd.DataFrame(
        {
            "model_a": frame["system_a"].to_list(),
            "model_b": frame["system_b"].to_list(),
            "winner": [winner[w] for w in frame["winner"]],
        }
    )


@pytest.fixture(scope="module")
def battles() -> tuple[pl.DataFrame, Battles]:
    frame = evalset.read(MTBENCH)
    cols = ("system_a", "system_b", "winner")
    return frame, battles_of(*(frame[c].to_list() for c in cols))


def test_the_maximum_likelihood_elo_is_the_notebooks(battles) -> None:  # noqa: ANN001
    frame, bt = battles
    want = notebook_mle_elo(_arena(frame))
    got = mle_ratings(win_table(bt))
    assert list(want.index) == list(bt.systems)
    np.testing.assert_allclose(got, want.to_numpy(), atol=1e-6)
    # and the leaderboard's ratings are those, best first
    board = evalset.elo(MTBENCH, rounds=20, bootstrap="judgment")
    assert board["elo"].to_list() == sorted(got, reverse=True)
    assert board["system"][0] == bt.systems[int(np.argmax(got))]


def test_bootstrap_intervals_agree_with_the_notebooks_within_monte_carlo_error(battles) -> None:  # noqa: ANN001
    """The notebook resamples the battles with replacement and refits (get_bootstrap_result);
    its 2.5% and 97.5% quantiles and ours differ by Monte Carlo error only."""
    frame, bt = battles
    arena = _arena(frame)
    rounds = 200
    theirs = np.array(
        [
            notebook_mle_elo(arena.sample(frac=1.0, replace=True, random_state=k)).to_numpy()
            for k in range(rounds)
        ]
    )
    ours = bootstrap_ratings(bt, rounds, seed=1)
    for q in (0.025, 0.5, 0.975):
        a, b = np.quantile(ours, q, axis=0), np.quantile(theirs, q, axis=0)
        # Monte Carlo error of a quantile of `rounds` draws: sqrt(q(1-q)/n) / density, the
        # density from the pooled draws' spread around it
        pooled = np.concatenate([ours, theirs])
        lo, hi = np.quantile(pooled, [max(q - 0.02, 0.0), min(q + 0.02, 1.0)], axis=0)
        density_inv = (hi - lo) / (min(q + 0.02, 1.0) - max(q - 0.02, 0.0))
        se = np.sqrt(q * (1 - q) / rounds) * density_inv
        assert np.all(np.abs(a - b) <= 4 * np.sqrt(2) * se + 1e-9), (q, a - b, se)
    # the bootstrap's centre is the full-data fit's (no bias beyond Monte Carlo error)
    full = mle_ratings(win_table(bt))
    assert np.all(np.abs(np.median(ours, axis=0) - full) < 3 * ours.std(axis=0) / 2)


def test_rank_intervals_and_the_leaderboard_rows() -> None:
    low = np.array([1100.0, 1050.0, 900.0])
    high = np.array([1200.0, 1150.0, 1000.0])
    best, worst = rank_intervals(low, high)
    assert best.tolist() == [1, 1, 3] and worst.tolist() == [2, 2, 3]
    board = evalset.elo(MTBENCH, rounds=50, seed=3)
    assert board.columns == ["dimension", "rank", "system", "elo", "ci_low", "ci_high",
                             "rank_best", "rank_worst", "n_judgments",
                             "decided_group", "decided_ranks", "note"]  # fmt: skip
    assert (board["ci_low"] <= board["elo"]).all() and (board["elo"] <= board["ci_high"]).all()
    assert (board["rank_best"] <= board["rank"]).all() and (
        board["rank"] <= board["rank_worst"]
    ).all()
    assert abs(board["elo"].mean() - 1000.0) < 1e-9
    assert board.equals(evalset.elo(MTBENCH, rounds=50, seed=3))  # seeded


def test_a_system_that_won_everything_has_no_finite_rating() -> None:
    bt = Battles(("x", "y"), np.array([0, 0]), np.array([1, 1]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="no finite maximum"):
        mle_ratings(win_table(bt))
    # two groups of systems that never met: no common scale
    apart = Battles(
        ("w", "x", "y", "z"),
        np.array([0, 1, 2, 3]),
        np.array([1, 0, 3, 2]),
        np.array([1.0, 1.0, 1.0, 1.0]),
    )
    with pytest.raises(ValueError, match="no finite maximum"):
        mle_ratings(win_table(apart))


def test_the_command_line_prints_the_same_rows(capsys) -> None:  # noqa: ANN001
    import json

    from services.cli import main

    argv = ["elo", "--data", str(MTBENCH), "--rounds", "50", "--seed", "3", "--format", "json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == evalset.elo(MTBENCH, rounds=50, seed=3).to_dicts()


def test_an_anchor_shifts_ratings_not_ranks_and_a_prompt_bootstrap_resamples_prompts() -> None:
    plain = evalset.elo(MTBENCH, rounds=100, seed=5, bootstrap="judgment")
    anchored = evalset.elo(
        MTBENCH, rounds=100, seed=5, anchor=("gpt-3.5-turbo", 1100.0), bootstrap="judgment"
    )
    row = anchored.filter(pl.col("system") == "gpt-3.5-turbo").row(0, named=True)
    assert row["elo"] == pytest.approx(1100.0) and row["ci_low"] == row["ci_high"] == row["elo"]
    np.testing.assert_allclose(
        np.diff(anchored["elo"].to_numpy()), np.diff(plain["elo"].to_numpy()), atol=1e-9
    )
    assert anchored.select("system", "rank_best", "rank_worst").equals(
        plain.select("system", "rank_best", "rank_worst")
    )
    by_prompt = evalset.elo(MTBENCH, rounds=100, seed=5, bootstrap="prompt")
    assert by_prompt["elo"].to_list() == plain["elo"].to_list()  # the same fit
    width = (by_prompt["ci_high"] - by_prompt["ci_low"]).to_numpy()
    assert not np.allclose(width, (plain["ci_high"] - plain["ci_low"]).to_numpy())
    with pytest.raises(ValueError, match="anchor system"):
        evalset.elo(MTBENCH, rounds=10, anchor=("nobody", 1000.0))


def _arena_sim(rng, truth: np.ndarray, n: int, tie: float) -> pl.DataFrame:  # noqa: ANN001
    """Battles from Elo ratings: a tie with probability ``tie``, else A wins with the
    Bradley-Terry probability."""
    a = rng.integers(0, len(truth), n)
    b = (a + rng.integers(1, len(truth), n)) % len(truth)
    p_a = 1 / (1 + 10 ** ((truth[b] - truth[a]) / 400))
    u = rng.random(n)
    score = np.where(u < tie, 0.5, np.where(rng.random(n) < p_a, 1.0, 0.0))
    return pl.DataFrame(
        {
            "item_id": [f"q{i}" for i in range(n)],
            "system_a": [f"s{i}" for i in a],
            "system_b": [f"s{i}" for i in b],
            "annotator_id": ["sim"] * n,
            "winner": [{1.0: "a", 0.5: "tie", 0.0: "b"}[x] for x in score],
        }
    )


@pytest.mark.parametrize("tie", [0.0, 0.3])
def test_simulated_arenas_recover_their_ratings_and_ranks(tie: float) -> None:
    """Battles drawn from known ratings: without ties (the model exactly) the 95% intervals
    cover the centred truth near their level; with 30% ties (misspecified: a tie is half a
    win to the model, which shrinks the scale) the ratings are biased towards 1000 by design,
    but the simultaneous rank intervals still hold every true rank in nearly every arena."""
    rng = np.random.default_rng(0)
    truth = np.array([1150.0, 1080.0, 1000.0, 960.0, 810.0])
    truth += 1000.0 - truth.mean()
    covered, ranks_held, arenas = 0, 0, 40
    for k in range(arenas):
        board = evalset.elo(_arena_sim(rng, truth, 600, tie), rounds=200, seed=k)
        got = {r["system"]: r for r in board.iter_rows(named=True)}
        for i in range(len(truth)):
            row = got[f"s{i}"]
            covered += row["ci_low"] <= truth[i] <= row["ci_high"]
            true_rank = 1 + int((truth > truth[i]).sum())
            ranks_held += row["rank_best"] <= true_rank <= row["rank_worst"]
    coverage, held = covered / (5 * arenas), ranks_held / (5 * arenas)
    print(f"ties {tie}: coverage {coverage:.3f}, rank intervals hold {held:.3f}")
    if tie == 0.0:
        assert 0.88 <= coverage <= 0.99, coverage
    assert held >= 0.97, held
