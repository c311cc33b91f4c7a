"""Simulated campaigns with known truth: from a fit to a log, from given effects, from system strengths.

:func:`semi_synthetic` keeps a log's design with fresh outcomes from :func:`fit_truth`;
:func:`synthetic_campaign` draws a campaign with given true Δ per comparison;
:func:`system_campaign` one over every pair of systems whose Δ is a difference of strengths
(what questions such as top-k need). Every judgment of a cell shares the cell's latent
preference, so judgments of one cell are correlated as on real logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import optimize, special

from adaptive.simulation.replay_log import Log

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(24)
_GH_W = _GH_W / _GH_W.sum()


def _cell_probs(z: np.ndarray, kappa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(B), P(A) of a cell with latent preference z and tie threshold kappa >= 0."""
    return special.expit(z - kappa), special.expit(-z - kappa)


class CampaignTruth(NamedTuple):
    """Per comparison: location theta, tie threshold kappa, prompt-by-comparison sd."""

    theta: np.ndarray
    kappa: np.ndarray
    spread: np.ndarray

    def net(self) -> np.ndarray:
        """(C,) true Δ: expected signed judgment over the prompt population."""
        z = self.theta[:, None] + self.spread[:, None] * _GH_X[None, :]
        pb, pa = _cell_probs(z, self.kappa[:, None])
        return ((pb - pa) * _GH_W).sum(axis=1)

    def tie_share(self) -> np.ndarray:
        z = self.theta[:, None] + self.spread[:, None] * _GH_X[None, :]
        pb, pa = _cell_probs(z, self.kappa[:, None])
        return ((1.0 - pb - pa) * _GH_W).sum(axis=1)


def fit_truth(log: Log) -> CampaignTruth:
    """Per comparison, (theta, kappa, spread) matching the log's Δ, tie share and prompt spread.

    The spread is the between-prompt sd of the cells' expected signed judgment
    beyond what the within-cell binomial noise explains (method of moments); a
    comparison with one judgment per cell gets the mean spread of the others.
    """
    C = log.num_comparisons
    theta, kappa, spread = np.zeros(C), np.ones(C), np.zeros(C)
    between = np.full(C, np.nan)
    for c in range(C):
        m = log.comparison == c
        s, p = log.signed[m], log.prompt[m]
        if len(s) == 0:
            continue
        uniq, inv, counts = np.unique(p, return_inverse=True, return_counts=True)
        cell_mean = np.bincount(inv, weights=s) / counts
        cell_sq = np.bincount(inv, weights=s * s) / counts
        within = np.where(
            counts > 1, (cell_sq - cell_mean**2) * counts / np.maximum(counts - 1, 1), 0
        )
        multi = counts > 1
        if multi.sum() >= 5 and len(uniq) > 5:
            between[c] = max(cell_mean.var(ddof=1) - np.mean(within[multi] / counts[multi]), 0.0)
    fill = np.nanmean(between) if np.isfinite(between).any() else 0.05
    between = np.where(np.isfinite(between), between, fill)
    for c in range(C):
        m = log.comparison == c
        if not m.any():
            continue
        s = log.signed[m]
        target = np.array([s.mean(), (s == 0).mean(), between[c]])

        def resid(x, target=target):
            t = CampaignTruth(np.array([x[0]]), np.array([np.exp(x[1])]), np.array([np.exp(x[2])]))
            z = t.theta[:, None] + t.spread[:, None] * _GH_X[None, :]
            pb, pa = _cell_probs(z, t.kappa[:, None])
            d = pb - pa
            mean = (d * _GH_W).sum()
            var = ((d - mean) ** 2 * _GH_W).sum()
            return [
                mean - target[0],
                t.tie_share()[0] - target[1],
                np.sqrt(var) - np.sqrt(target[2]),
            ]

        tie = min(max(target[1], 0.02), 0.9)
        x0 = [2.0 * target[0], np.log(max(-np.log(1.0 - tie) + 0.1, 0.05)), np.log(0.5)]
        sol = optimize.least_squares(resid, x0, bounds=([-8, -6, -6], [8, 3, 2]))
        theta[c], kappa[c], spread[c] = sol.x[0], np.exp(sol.x[1]), np.exp(sol.x[2])
    return CampaignTruth(theta, kappa, spread)


def simulate_log(
    rng: np.random.Generator,
    truth: CampaignTruth,
    comparison: np.ndarray,
    prompt: np.ndarray,
    num_prompts: int,
    *,
    random_share: float = 0.0,
) -> Log:
    """Fresh outcomes for a design (one row per judgment) from a :class:`CampaignTruth`.

    Each (comparison, prompt) cell draws its own latent preference
    theta_c + spread_c * N(0, 1) once, so judgments of one cell are correlated
    as on real logs; a share ``random_share`` of judgments comes from
    annotators who answer at random (A, tie, B with equal probability), which
    the true Δ includes.
    """
    C = truth.theta.shape[0]
    u = rng.normal(size=(C, num_prompts))
    z = truth.theta[comparison] + truth.spread[comparison] * u[comparison, prompt]
    pb, pa = _cell_probs(z, truth.kappa[comparison])
    r = rng.random(comparison.shape[0])
    signed = np.where(r < pb, 1.0, np.where(r < pb + pa, -1.0, 0.0))
    if random_share > 0:
        noisy = rng.random(comparison.shape[0]) < random_share
        signed = np.where(noisy, rng.integers(-1, 2, size=comparison.shape[0]), signed)
    true_net = truth.net() * (1.0 - random_share)
    true_ties = truth.tie_share() * (1.0 - random_share) + random_share / 3.0
    return Log(
        comparison.astype(np.int64),
        prompt.astype(np.int64),
        signed.astype(np.float64),
        C,
        num_prompts,
        true_net,
        true_ties=true_ties,
    )


def semi_synthetic(
    rng: np.random.Generator, log: Log, truth: CampaignTruth | None = None, prompts_factor: int = 1
) -> Log:
    """A campaign with the log's design and fresh outcomes from a fit to it (known truth).

    ``prompts_factor`` k > 1 adds (k - 1) times as many new prompts, each judged
    as often as the log's cells, so a comparison can go on past the log's size.
    """
    truth = truth or fit_truth(log)
    comp, prompt = log.comparison, log.prompt
    if prompts_factor > 1:
        comp = np.concatenate([log.comparison] * prompts_factor)
        prompt = np.concatenate([log.prompt + k * log.num_prompts for k in range(prompts_factor)])
    return simulate_log(rng, truth, comp, prompt, log.num_prompts * prompts_factor)


def synthetic_campaign(
    rng: np.random.Generator,
    net: Sequence[float] | np.ndarray,
    *,
    num_prompts: int = 500,
    per_cell: int = 1,
    tie_share: float = 0.25,
    spread: float = 0.5,
    random_share: float = 0.0,
) -> Log:
    """A campaign with given true Δ per comparison (a regime study).

    theta of each comparison is solved so that the true Δ (with the given tie
    share and prompt spread) equals ``net``.
    """
    net = np.asarray(net, np.float64)
    C = net.shape[0]
    kappa0 = np.log((1.0 + tie_share) / (1.0 - tie_share))  # tie share at theta = 0, no spread
    theta = np.zeros(C)

    def gap(t: float, target: float) -> float:
        one = CampaignTruth(np.array([t]), np.array([kappa0]), np.array([spread]))
        return float(one.net()[0]) - target

    for c in range(C):
        if net[c] != 0:
            theta[c] = optimize.brentq(gap, -20, 20, args=(net[c] / (1.0 - random_share),))
    truth = CampaignTruth(theta, np.full(C, kappa0), np.full(C, spread))
    comp = np.repeat(np.arange(C), num_prompts * per_cell)
    prompt = np.tile(np.repeat(np.arange(num_prompts), per_cell), C)
    perm = rng.permutation(comp.shape[0])
    return simulate_log(
        rng, truth, comp[perm], prompt[perm], num_prompts, random_share=random_share
    )


def system_campaign(
    rng: np.random.Generator,
    strengths: Sequence[float],
    *,
    num_prompts: int = 500,
    tie_share: float = 0.25,
    spread: float = 0.5,
    names: Sequence[str] = (),
) -> Log:
    """A simulated campaign over every pair of systems whose true Δ is a difference of strengths.

    Comparison (a, b) of systems a < b has true Δ = strength[b] - strength[a] (so |Δ| <= 1
    needs strengths within 1 of each other), ``num_prompts`` prompts, one judgment per cell
    (:func:`adaptive.simulation.replay.synthetic_campaign`). Every answer has a known truth.

    Example:
        >>> log = system_campaign(np.random.default_rng(0), [0.2, 0.0, -0.2], num_prompts=10)
        >>> log.num_comparisons, log.num_judgments, log.true_net.round(2).tolist()
        (3, 30, [-0.2, -0.4, -0.2])
    """
    s = np.asarray(strengths, np.float64)
    pair_a, pair_b = np.triu_indices(len(s), 1)
    log = synthetic_campaign(
        rng, s[pair_b] - s[pair_a], num_prompts=num_prompts, tie_share=tie_share, spread=spread
    )
    return log._replace(
        pair_a=pair_a.astype(np.int64),
        pair_b=pair_b.astype(np.int64),
        systems=tuple(names) or tuple(f"s{i}" for i in range(len(s))),
    )
