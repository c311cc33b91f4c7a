"""Which comparisons are significant, from the joint posterior of all comparisons.

A comparison "A vs B" is *significant* when the 95% equal-tailed posterior
interval of theta (> 0: B better) excludes 0. All comparisons come from one
joint fit, the paper's answer to multiple testing (Sedoc & Ungar, section
6.1). We also report a multiplicity-adjusted verdict: Holm's step-down
procedure (family-wise error ``alpha``) applied to the posterior two-sided tail
probabilities p = 2 min(P(theta > 0), P(theta < 0)), named in every row as
``adjust_rule``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from adaptive.cells import CellData
from stan_free_models.posterior import Posterior

ADJUST_RULES = ("holm", "bonferroni", "none")


def holm(p_values: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Holm's step-down rejections (True = rejected) for p-values.

    Example:
        >>> holm(np.array([0.01, 0.04, 0.03, 0.2])).tolist()
        [True, False, False, False]
    """
    p = np.asarray(p_values, dtype=float)
    m = p.shape[0]
    order = np.argsort(p, kind="stable")
    reject = np.zeros(m, dtype=bool)
    for rank, idx in enumerate(order):
        if p[idx] <= alpha / (m - rank):
            reject[idx] = True
        else:
            break
    return reject


def adjusted_verdicts(p_values: np.ndarray, rule: str = "holm", alpha: float = 0.05) -> np.ndarray:
    if rule == "holm":
        return holm(p_values, alpha)
    if rule == "bonferroni":
        return np.asarray(p_values) <= alpha / max(len(p_values), 1)
    if rule == "none":
        return np.asarray(p_values) <= alpha
    raise ValueError(f"unknown adjustment rule {rule!r}; expected one of {ADJUST_RULES}")


def summarize_draws(theta_draws: np.ndarray, level: float = 0.95) -> dict[str, np.ndarray]:
    """Posterior summaries of (num_draws, C) ability differences."""
    tail = (1.0 - level) / 2.0
    num = theta_draws.shape[0]
    # a draw exactly at 0 counts half to each side
    p_pos = ((theta_draws > 0).sum(axis=0) + 0.5 * (theta_draws == 0).sum(axis=0)) / num
    p_two = 2.0 * np.minimum(p_pos, 1.0 - p_pos)
    # with finite draws a tail probability is never below 1 / (num + 1)
    p_two = np.maximum(p_two, 1.0 / (num + 1))
    low, high = np.quantile(theta_draws, [tail, 1.0 - tail], axis=0)
    return {
        "mean": theta_draws.mean(axis=0),
        "sd": theta_draws.std(axis=0, ddof=1),
        "ci_low": low,
        "ci_high": high,
        "p_b_better": p_pos,
        "p_two_sided": p_two,
        "significant": (low > 0) | (high < 0),
    }


def compare(
    posterior: Posterior,
    cells: CellData,
    *,
    orientation: Iterable[tuple[str, str]] | None = None,
    rule: str = "holm",
    alpha: float = 0.05,
    level: float = 0.95,
) -> list[dict]:
    """One row per comparison with mean, sd, interval, P(B better) and both verdicts.

    Args:
        posterior: a fit of ``cells``.
        cells: the cells that were fitted.
        orientation: (A, B) pairs to report in that orientation (others as stored).
        rule: multiplicity adjustment (``holm``, ``bonferroni`` or ``none``).
        alpha: family-wise error rate for the adjusted verdict.
        level: posterior interval level.
    """
    theta = posterior.flat("theta")
    wanted = {frozenset(p): tuple(p) for p in orientation or ()}
    names = cells.comparison_names()
    signs = np.array(
        [-1.0 if wanted.get(frozenset(n), n) != n else 1.0 for n in names], dtype=float
    )
    theta = theta * signs
    stats = summarize_draws(theta, level)
    adjusted = adjusted_verdicts(stats["p_two_sided"], rule, alpha)
    n_judg = cells.judgments_per_comparison()
    n_prompts = cells.prompts_per_comparison()
    rows = []
    for i, (a, b) in enumerate(names):
        if signs[i] < 0:
            a, b = b, a
        rows.append(
            {
                "dimension": cells.dimension,
                "system_a": a,
                "system_b": b,
                "mean": float(stats["mean"][i]),
                "sd": float(stats["sd"][i]),
                "ci_low": float(stats["ci_low"][i]),
                "ci_high": float(stats["ci_high"][i]),
                "p_b_better": float(stats["p_b_better"][i]),
                "significant": bool(stats["significant"][i]),
                "p_two_sided": float(stats["p_two_sided"][i]),
                "significant_adjusted": bool(adjusted[i]),
                "adjust_rule": rule,
                "n_judgments": int(n_judg[i]),
                "n_prompts": int(n_prompts[i]),
                "method": posterior.method,
            }
        )
    return rows
