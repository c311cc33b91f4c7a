"""The net preference Δ users read: each comparison's own judgments, the model's residuals.

Δ of a comparison is its expected signed judgment (+1 B, -1 A, 0 tie) averaged over
the prompts it was judged on. Its estimate here is the comparison's own observed
net preference, the mean over its cells (a cell: one prompt) of each cell's mean
signed judgment; that is unbiased for Δ whatever the model, so the interval cannot
sit away from the comparison's own judgments. The model enters the interval only:

    var(Δ̂) = sum_c var(ȳ_c) / n^2,    var(ȳ_c) estimated by (ȳ_c - m̂_c)^2 / (1 - h_c),

with m̂_c the fitted expected signed judgment of the cell and h_c its leverage, the
share of the cell's own noise the fit absorbed (var(m̂_c) / (v_c / k_c), v_c the
model's variance of one judgment, k_c the cell's judgments; MacKinnon & White
1985's HC2). Each cell is one unit, so the judgments of a cell may be as dependent as
they like (annotators who see the same two responses; a net rating split among a
cell's annotators). Where the model fits a cell badly the residual is larger and
the interval wider: the model can make the interval narrower than the raw
prompt-level one (it removes the differences between prompts it explains), never
wrong in the middle.

The model's own Δ, the mean over the cells of m_c per draw, is reported beside it
(``model_*``), with a check of the two against each other.

Everything here is numbers: (draws, ...) arrays in, arrays out.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import expit

#: leverages are capped here: a cell the fit reproduces almost exactly (a prompt judged in
#: one cell only) has its squared residual scaled up by at most 1 / (1 - cap). At 5% of a
#: campaign a quarter to a third of the cells lie above 0.8; capping there understated the
#: sd on misspecified simulators (rough: coverage 0.925), 0.95 covers 0.935-0.953 at 5%
#: and changes nothing on full campaigns (research/calibration/net_se_variants.jsonl)
MAX_LEVERAGE = 0.95
#: draws whose cell means are computed at once (memory: this many x cells x categories)
DRAW_CHUNK = 25
#: cells whose means a chunk computes at once (memory: chunk x this x categories)
CELL_BLOCK = 16384


class NetEstimate(NamedTuple):
    """(C,) arrays per comparison."""

    delta: np.ndarray  # the observed net preference (mean over cells)
    sd: np.ndarray  # its model-assisted standard error
    model_delta: np.ndarray  # the model's Δ at its point estimate
    model_sd: np.ndarray  # the model's posterior sd of Δ
    model_low: np.ndarray
    model_high: np.ndarray
    check_z: np.ndarray  # (observed - model) / sd of that difference under the model
    num_cells: np.ndarray


def cell_moments(
    theta: np.ndarray, alpha: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of one signed judgment of a graded response, elementwise.

    ``b`` has the K-1 thresholds on its last axis; categories 0..K-1 are signed
    (c - h) / h with h = (K - 1) / 2 (K = 3: -1, 0, +1; the paper's K = 7: a net rating
    of three over 3).

    Example:
        >>> m, v = cell_moments(np.array(0.0), np.array(1.0), np.array([-1.0, 1.0]))
        >>> round(float(m), 6), round(float(v), 4)
        (0.0, 0.5379)
    """
    cum = expit(alpha[..., None] * (theta[..., None] - b))  # P(y >= c)
    k = b.shape[-1] + 1
    h = (k - 1) / 2.0
    ones = np.ones(cum.shape[:-1] + (1,))
    upper = np.concatenate([ones, cum], axis=-1)
    lower = np.concatenate([cum, 0.0 * ones], axis=-1)
    probs = np.clip(upper - lower, 0.0, 1.0)
    values = (np.arange(k) - h) / h
    mean = probs @ values
    return mean, np.maximum(probs @ values**2 - mean**2, 0.0)


def cell_means(theta: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`cell_moments`' mean alone, the same numbers (draw by draw, the costly part).

    With 3 categories the signed values are -1, 0, +1, so the mean is P(+1) - P(-1), which
    is what the dot product of :func:`cell_moments` sums to in floating point too (its
    middle term is an exact 0 and the sum of two terms does not depend on their order).
    """
    if b.shape[-1] != 2:
        return cell_moments(theta, alpha, b)[0]
    cum = expit(alpha[..., None] * (theta[..., None] - b))  # P(y >= 1), P(y >= 2)
    low = np.clip(1.0 - cum[..., 0], 0.0, 1.0)  # P(y = 0)
    # C order, as the dot product's result: sums over its draws then add in the same order
    return np.ascontiguousarray(np.clip(cum[..., 1], 0.0, 1.0) - low)


class CellFit(NamedTuple):
    """(M,) per cell: the fit's mean and one judgment's variance there, and its leverage;
    (D, C) the model's Δ per draw (before centring)."""

    fitted: np.ndarray  # m̂_c
    variance: np.ndarray  # v̂_c, of one judgment
    leverage: np.ndarray  # var(m̂_c) k_c / v̂_c, uncapped
    model_draws: np.ndarray  # (D, C) sums over each comparison's cells of m_c per draw


def cell_fit(
    comp: np.ndarray,
    item: np.ndarray,
    k: np.ndarray,
    num_comparisons: int,
    theta_draws: np.ndarray,
    alpha_draws: np.ndarray,
    b_draws: np.ndarray,
    point: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
) -> CellFit:
    """The model's side of :func:`estimate_net` (arguments as there, ``k`` the counts)."""

    def per_comparison(x: np.ndarray) -> np.ndarray:
        return np.bincount(comp, weights=x, minlength=num_comparisons)[:num_comparisons]

    # the cells' fitted means draw by draw, a chunk at a time (memory: chunk x cells), the
    # chunks summed in their order (the core starts no threads: tests/test_architecture.py)
    num_draws = theta_draws.shape[0]
    sum_m = np.zeros(len(comp))
    sum_m2 = np.zeros(len(comp))
    model_draws = np.empty((num_draws, num_comparisons))

    def chunk(lo: int) -> tuple[np.ndarray, np.ndarray]:
        hi = min(lo + DRAW_CHUNK, num_draws)
        # the means elementwise, a block of cells at a time (memory: the gathered draws of a
        # block, not of every cell), into the chunk's C-ordered array: the same numbers
        m = np.empty((hi - lo, len(comp)))
        for c0 in range(0, len(comp), CELL_BLOCK):
            c, j = comp[c0 : c0 + CELL_BLOCK], item[c0 : c0 + CELL_BLOCK]
            m[:, c0 : c0 + CELL_BLOCK] = cell_means(
                theta_draws[lo:hi, c], alpha_draws[lo:hi, j], b_draws[lo:hi, j]
            )
        model_draws[lo:hi] = [per_comparison(row) for row in m]  # its own rows
        return m.sum(axis=0), (m**2).sum(axis=0)

    for lo in range(0, num_draws, DRAW_CHUNK):
        part, part2 = chunk(lo)
        sum_m += part
        sum_m2 += part2
    mean_m = sum_m / num_draws
    if point is None:
        m_hat = mean_m
        _, v_hat = cell_moments(
            theta_draws.mean(0)[comp], alpha_draws.mean(0)[item], b_draws.mean(0)[item]
        )
    else:
        m_hat, v_hat = cell_moments(point[0][comp], point[1][item], point[2][item])
    if num_draws > 1:
        var_m = np.maximum(sum_m2 - num_draws * mean_m**2, 0.0) / (num_draws - 1)
    else:
        var_m = np.zeros_like(m_hat)
    with np.errstate(divide="ignore", invalid="ignore"):
        leverage = np.nan_to_num(np.where(v_hat > 0, var_m * k / v_hat, 0.0))
    return CellFit(m_hat, v_hat, leverage, model_draws)


def estimate_net(
    cell_comparison: np.ndarray,
    cell_item: np.ndarray,
    cell_mean: np.ndarray,
    cell_count: np.ndarray,
    num_comparisons: int,
    theta_draws: np.ndarray,
    alpha_draws: np.ndarray,
    b_draws: np.ndarray,
    point: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    level: float = 0.95,
) -> NetEstimate:
    """Δ per comparison from its cells' observed means, with the model's residuals.

    Args:
        cell_comparison, cell_item: (M,) each cell's comparison and item (prompt or group).
        cell_mean: (M,) each cell's mean signed judgment; cell_count: (M,) its judgments.
        num_comparisons: C.
        theta_draws: (D, C); alpha_draws: (D, P); b_draws: (D, P, K-1) posterior draws.
        point: (theta (C,), alpha (P,), b (P, K-1)) where the fitted cell means are
            taken (the Laplace mode); None: the draws' mean of each cell's mean (NUTS).
        level: of the model's interval.
    """
    comp = np.asarray(cell_comparison, np.int64)
    item = np.asarray(cell_item, np.int64)
    y = np.asarray(cell_mean, np.float64)
    k = np.maximum(np.asarray(cell_count, np.float64), 1.0)

    def per_comparison(x: np.ndarray) -> np.ndarray:
        return np.bincount(comp, weights=x, minlength=num_comparisons)[:num_comparisons]

    fit = cell_fit(comp, item, k, num_comparisons, theta_draws, alpha_draws, b_draws, point)
    m_hat, v_hat, model_draws = fit.fitted, fit.variance, fit.model_draws
    num_draws = theta_draws.shape[0]
    leverage = np.clip(fit.leverage, 0.0, MAX_LEVERAGE)

    n = per_comparison(np.ones_like(y))
    safe_n = np.maximum(n, 1.0)
    delta = np.where(n > 0, per_comparison(y) / safe_n, np.nan)
    resid_sq = (y - m_hat) ** 2 / (1.0 - leverage)
    sd = np.where(n > 0, np.sqrt(per_comparison(resid_sq)) / safe_n, np.nan)
    model_draws /= safe_n
    model_delta = per_comparison(m_hat) / safe_n
    if point is not None:
        # Laplace draws are Gaussian in the unconstrained space, and the cells' means bend
        # under the transforms (exp, the ordering): their spread is the approximation's,
        # their centre is the mode's plug-in
        model_draws = model_draws - model_draws.mean(axis=0) + model_delta
    model_sd = model_draws.std(axis=0, ddof=1) if num_draws > 1 else np.zeros(n.shape)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(model_draws, [tail, 1.0 - tail], axis=0)
    # under the model, the observed mean scatters about the model's Δ by the judgments'
    # own noise, and the model's Δ is uncertain by its posterior sd
    noise_var = per_comparison(v_hat / k) / safe_n**2
    with np.errstate(divide="ignore", invalid="ignore"):
        check_z = np.nan_to_num((delta - model_delta) / np.sqrt(noise_var + model_sd**2))
    return NetEstimate(
        delta=delta,
        sd=sd,
        model_delta=model_delta,
        model_sd=model_sd,
        model_low=low,
        model_high=high,
        check_z=check_z,
        num_cells=n.astype(np.int64),
    )


__all__ = [
    "DRAW_CHUNK",
    "MAX_LEVERAGE",
    "CellFit",
    "NetEstimate",
    "cell_fit",
    "cell_means",
    "cell_moments",
    "estimate_net",
]
