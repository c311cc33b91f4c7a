"""Arena-style Elo leaderboard: maximum-likelihood Bradley-Terry ratings on the Elo scale with
bootstrap intervals and rank intervals, the method of Chatbot Arena's published notebook.

Each system's rating r has P(A beats B) = 1 / (1 + 10 ** ((r_B - r_A) / 400)). A tie counts as
half a win for each side (the notebook's table: wins twice, ties once each way). Ratings are
the maximum-likelihood fit on every battle, centred so the average system is at 1000 (the
notebook's logistic regression without intercept or penalty lands on the same centring); the
interval of each is the percentile interval of the ratings refitted on battles resampled with
replacement, and its rank interval runs from 1 + the number of systems whose interval lies
wholly above it to the number of systems minus those wholly below it.

The fit is Newton's method on the weighted log-likelihood of the pair table (a concave problem
with p parameters, so a few steps reach the optimum to machine precision);
``tests/adaptive/leaderboards/test_elo.py`` checks it against the notebook's scikit-learn fit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

SCALE = 400.0
BASE = 10.0
INIT_RATING = 1000.0


class Battles(NamedTuple):
    """Battles as index arrays: ``a``, ``b`` the systems, ``score`` 1 (a won), 0.5, 0."""

    systems: tuple[str, ...]
    a: np.ndarray
    b: np.ndarray
    score: np.ndarray


def battles_of(system_a: list[str], system_b: list[str], winner: list[str]) -> Battles:
    """Judgments (``winner`` a, b or tie) as battles, the systems in sorted order."""
    systems = tuple(sorted(set(system_a) | set(system_b)))
    index = {s: i for i, s in enumerate(systems)}
    score = {"a": 1.0, "tie": 0.5, "b": 0.0}
    return Battles(
        systems,
        np.array([index[s] for s in system_a], dtype=np.int64),
        np.array([index[s] for s in system_b], dtype=np.int64),
        np.array([score[w] for w in winner]),
    )


def win_table(battles: Battles, weights: np.ndarray | None = None) -> np.ndarray:
    """(p, p) table W[i, j]: i's wins over j counted twice, ties once each way."""
    p = len(battles.systems)
    w = np.ones(len(battles.a)) if weights is None else weights
    table = np.zeros((p, p))
    np.add.at(table, (battles.a, battles.b), 2.0 * battles.score * w)
    np.add.at(table, (battles.b, battles.a), 2.0 * (1.0 - battles.score) * w)
    return table


def mle_ratings(table: np.ndarray, *, steps: int = 100, tol: float = 1e-10) -> np.ndarray:
    """Elo ratings maximising sum_ij W[i,j] log sigmoid(ln(10) (beta_i - beta_j)), centred at
    1000; a system with no battle in the table stays at 1000.

    Raises:
        ValueError: the ratings have no finite maximum (a system won or lost every battle
            it took part in, or the battles fall into groups that never met).
    """
    p = table.shape[0]
    played = (table + table.T).sum(axis=1) > 0
    wins, losses = table.sum(axis=1), table.sum(axis=0)
    if np.any(played & ((wins == 0) | (losses == 0))):
        raise ValueError(
            "the Elo ratings have no finite maximum: a system won (or lost) every battle it "
            "took part in"
        )
    n = table + table.T
    if _groups(n[np.ix_(played, played)]) > 1:
        raise ValueError(
            "the Elo ratings have no finite maximum: some systems never met the others "
            "(directly or through others), so they share no scale"
        )
    beta = np.zeros(p)
    c = math.log(BASE)
    for _ in range(steps):
        diff = c * (beta[:, None] - beta[None, :])
        prob = 1.0 / (1.0 + np.exp(-diff))  # P(i beats j)
        grad = c * (table - n * prob).sum(axis=1)
        weight = c * c * n * prob * (1.0 - prob)
        hess = -np.diag(weight.sum(axis=1)) + weight
        # the ratings are defined up to a constant: solve on the played systems, centred
        idx = np.flatnonzero(played)
        h = hess[np.ix_(idx, idx)] - 1.0  # + the constraint's rank-one term: a unique step
        try:
            step = np.linalg.solve(h, -grad[idx])
        except np.linalg.LinAlgError:
            raise ValueError(
                "the Elo ratings have no finite maximum: some systems never met the others"
            ) from None
        beta[idx] += step - step.mean()
        if np.max(np.abs(step)) < tol:
            break
    else:
        diff = c * (beta[:, None] - beta[None, :])
        grad = c * (table - n * (1.0 / (1.0 + np.exp(-diff)))).sum(axis=1)
        if np.all(np.isfinite(beta)) and np.max(np.abs(grad)) <= 1e-9 * max(n.sum(), 1.0):
            return SCALE * (beta - beta[played].mean() * played) + INIT_RATING  # converged
        raise ValueError(
            "the Elo ratings have no finite maximum: a system won (or lost) every battle it "
            "took part in, or some systems never met the others"
        )
    beta[played] -= beta[played].mean()
    return SCALE * beta + INIT_RATING


def _groups(meetings: np.ndarray) -> int:
    """How many groups of systems met only among themselves (connected components)."""
    from scipy.sparse.csgraph import connected_components

    count, _ = connected_components(meetings > 0, directed=False)
    return int(count)


def bootstrap_ratings(
    battles: Battles, rounds: int, seed: int, clusters: np.ndarray | None = None
) -> np.ndarray:
    """(rounds, p) ratings refitted on battles resampled with replacement, or on whole
    ``clusters`` (an index per battle, e.g. its prompt) resampled with replacement; a round
    whose resample has no finite maximum is drawn again."""
    rng = np.random.default_rng(seed)
    n = len(battles.a)
    groups = None if clusters is None else np.unique(clusters, return_inverse=True)[1]
    out = np.empty((rounds, len(battles.systems)))
    done = 0
    tries = 0
    while done < rounds:
        tries += 1
        if tries > 10 * rounds + 100:
            raise ValueError("the resampled battles rarely have finite Elo ratings")
        if groups is None:
            weights = np.bincount(rng.integers(0, n, n), minlength=n).astype(np.float64)
        else:
            g = int(groups.max()) + 1
            weights = np.bincount(rng.integers(0, g, g), minlength=g)[groups].astype(np.float64)
        try:
            out[done] = mle_ratings(win_table(battles, weights))
        except (ValueError, np.linalg.LinAlgError):
            continue
        done += 1
    return out


def rank_intervals(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each system's best and worst rank given the intervals: 1 + those wholly above it, and
    the number of systems minus those wholly below it."""
    above = (low[None, :] > high[:, None]).sum(axis=1)
    below = (high[None, :] < low[:, None]).sum(axis=1)
    return 1 + above, len(low) - below
