"""The evidence behind the decisions: anytime-valid e-values and confidence sequences, and Δ at one look.

* :func:`log_sign_evalue`: the beta-mixture e-value of a sign test (each comparison's
  B-or-A judgments against "no preference"), valid at every look (Ville's inequality);
* :func:`share_lower_bound`: the same test inverted, a confidence sequence for B's share of
  the non-tie judgments that excludes 1/2 exactly when the sign test rejects;
* :func:`eb_confidence_sequence`: an empirical-Bernstein confidence sequence of a mean in
  [0, 1] (Waudby-Smith & Ramdas 2024);
* :func:`net_preference`: the net preference Δ with prompts as the units and its t interval,
  at one look (no anytime guarantee: what a report at the end of a campaign shows).

:mod:`adaptive.stopping.decisions` turns them into the decisions users act on.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import special

# ----------------------------------------------------------------- e-processes


def log_sign_evalue(k: np.ndarray, m: np.ndarray, a: float) -> np.ndarray:
    """log of the beta-mixture e-value against H0: q <= 1/2 after k successes in m trials.

    E = integral over q in (1/2, 1] of (2q)^k (2(1-q))^(m-k) * 2 Beta(q; a, a) dq
      = 2^(m+1) B(k+a, m-k+a) / B(a, a) * P(Beta(k+a, m-k+a) > 1/2).

    Each factor (2q)^x (2(1-q))^(1-x) has expectation 2[q0 q + (1-q0)(1-q)] <= 1
    under any q0 <= 1/2 when q > 1/2, so E is a nonnegative supermartingale for
    the whole null (an e-process); E >= 1/level happens with probability <= level.

    Example:
        >>> float(np.exp(log_sign_evalue(np.array(0), np.array(0), 5.0)))
        1.0
    """
    k = np.asarray(k, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    a1, b1 = k + a, m - k + a
    # P(Beta(a1, b1) > 1/2) = I_{1/2}(b1, a1)
    # far on the null side the tail underflows to 0: E = 0, log E = -inf, never a rejection
    with np.errstate(divide="ignore"):
        log_tail = np.log(special.betainc(b1, a1, 0.5))
    return (m + 1.0) * np.log(2.0) + special.betaln(a1, b1) - special.betaln(a, a) + log_tail


def log_share_evalue(k: np.ndarray, m: np.ndarray, a: float, q0: np.ndarray) -> np.ndarray:
    """log of the beta-mixture e-value against H0: q <= q0 (:func:`log_sign_evalue` at any q0).

    E = integral over q in (q0, 1] of (q / q0)^k ((1-q) / (1-q0))^(m-k) pi(q) dq, with pi
    the Beta(a, a) prior restricted to (q0, 1]:
    E = B(k+a, m-k+a) / B(a, a) * P(Beta(k+a, m-k+a) > q0) / P(Beta(a, a) > q0)
        / (q0^k (1-q0)^(m-k)).
    Each factor's expectation under q' <= q0 is q' q/q0 + (1-q')(1-q)/(1-q0) <= 1 for
    q > q0, so E is an e-process for the whole null; at q0 = 1/2 it is
    :func:`log_sign_evalue`.
    """
    k = np.asarray(k, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    q0 = np.asarray(q0, dtype=np.float64)
    a1, b1 = k + a, m - k + a
    with np.errstate(divide="ignore"):
        log_tail = np.log(special.betainc(b1, a1, 1.0 - q0))  # P(Beta(a1, b1) > q0)
        log_prior = np.log(special.betainc(a, a, 1.0 - q0))
        log_null = special.xlogy(k, q0) + special.xlog1py(m - k, -q0)
    return special.betaln(a1, b1) - special.betaln(a, a) + log_tail - log_prior - log_null


def share_lower_bound(
    k: np.ndarray, m: np.ndarray, a: float, level: float, *, iterations: int = 20
) -> np.ndarray:
    """Lower confidence bounds of q (B's share of the non-tie judgments) at one look:
    the largest q0 that :func:`log_share_evalue` rejects at ``level``
    (e >= 1 / level), by bisection; 0 when none is rejected.

    Where e >= 1 the e-value falls as q0 rises, so the rejected q0 form an interval
    [0, bound) (a test checks it on a grid): the
    bisection's first point is 1/2, where it asks :func:`log_sign_evalue` itself, so the
    bound is at least 1/2 exactly when the sign test rejects (whatever ``iterations``,
    which set the precision: 2^-20 by default), and the running
    maximum of the bounds over the looks is a lower confidence sequence (each look's
    miss means the true q was rejected, which happens at some look with probability
    at most ``level``).

    Example:
        >>> float(share_lower_bound(np.array(0), np.array(0), 5.0, 0.05))
        0.0
    """
    k = np.asarray(k, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64)
    threshold = np.log(1.0 / level)
    shape = np.broadcast(k, m).shape
    low, high = np.zeros(shape), np.ones(shape)
    for step in range(iterations):
        mid = (low + high) / 2.0
        if step == 0:  # at 1/2, the sign test itself: the bound agrees with its decision
            rejected = np.broadcast_to(log_sign_evalue(k, m, a) >= threshold, shape)
        else:
            rejected = log_share_evalue(k, m, a, mid) >= threshold
        low = np.where(rejected, mid, low)
        high = np.where(rejected, high, mid)
    return low


def _eb_lower(x: np.ndarray, alpha: float, trunc: float) -> np.ndarray:
    """One-sided predictable plug-in empirical-Bernstein lower bounds of the mean of x in [0, 1]."""
    t = np.arange(1, x.shape[0] + 1, dtype=np.float64)
    log_term = np.log(1.0 / alpha)
    # the bets: a regularised mean and variance (one pseudo-observation at 1/2, 1/4)
    mu_reg = (0.5 + np.cumsum(x)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum((x - mu_reg) ** 2)) / (t + 1.0)
    sigma2_prev = np.concatenate([[0.25], sigma2[:-1]])
    lam = np.minimum(np.sqrt(2.0 * log_term / (t * np.log1p(t) * sigma2_prev)), trunc)
    # the variance increments: squared deviation from the previous plain mean (0 at the start)
    mean_prev = np.concatenate([[0.0], (np.cumsum(x) / t)[:-1]])
    v = (x - mean_prev) ** 2
    psi = -np.log1p(-lam) - lam
    sum_lam = np.cumsum(lam)
    low = np.cumsum(lam * x) / sum_lam - (log_term + np.cumsum(v * psi)) / sum_lam
    return np.maximum.accumulate(np.maximum(low, 0.0))


def eb_confidence_sequence(
    x: np.ndarray, alpha: float, *, trunc: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Predictable plug-in empirical-Bernstein confidence sequence for the mean of x in [0, 1].

    Waudby-Smith & Ramdas (2023), Theorem 2, as confseq's
    ``predmix_empbern_twosided_cs`` computes it (a lower sequence at alpha / 2 on
    x and on 1 - x), with the running intersection: P(the mean ever leaves
    [low_t, high_t]) <= alpha. ``tests/adaptive/stopping/test_decisions.py`` checks it against
    confseq 0.0.11.

    Args:
        x: (n,) observations in [0, 1], in arrival order.
        alpha: miscoverage (two-sided).
        trunc: upper bound of the bets lambda_t (1/2 in the paper's experiments).

    Returns:
        (low, high), each (n,), the CS after 1..n observations.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] == 0:
        return np.zeros(0), np.zeros(0)
    low = _eb_lower(x, alpha / 2.0, trunc)
    high = 1.0 - _eb_lower(1.0 - x, alpha / 2.0, trunc)
    return low, np.minimum(high, 1.0)


# ------------------------------------------------------- the effect, one look


#: a between-prompt sd below this is rounding noise: the prompts' means are equal
SPREAD_TOL = 1e-9


class NetPreference(NamedTuple):
    """Δ of each comparison at one look, prompts as the units ((C,) arrays)."""

    mean: np.ndarray
    se: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    num_prompts: np.ndarray


def net_preference(
    comparison: np.ndarray,
    prompt: np.ndarray,
    signed: np.ndarray,
    num_comparisons: int,
    level: float = 0.95,
    weight: np.ndarray | None = None,
) -> NetPreference:
    """Δ with a fixed-look interval: the mean over prompts of each cell's mean signed judgment.

    Prompts are the units (a cell's judgments share its two responses), so the
    standard error is the between-prompt sd / sqrt(prompts), with a Student t
    quantile. This interval is for *one* look (a report at the end); decisions
    while a campaign runs use :func:`decide`. ``weight`` (per judgment, >= 0) makes each
    cell's mean a weighted one; judgments of weight 0 are left out.

    Example:
        >>> r = net_preference(np.zeros(4, int), np.array([0, 0, 1, 2]), np.array([1, -1, 1, 0]), 1)
        >>> round(float(r.mean[0]), 3), int(r.num_prompts[0])
        (0.333, 3)
    """
    comparison = np.asarray(comparison, dtype=np.int64)
    prompt = np.asarray(prompt, dtype=np.int64)
    signed = np.asarray(signed, dtype=np.float64)
    w = np.ones(signed.shape[0]) if weight is None else np.asarray(weight, dtype=np.float64)
    if w.shape != signed.shape or np.any(~np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weight: one finite, non-negative weight per judgment")
    comparison, prompt, signed, w = (x[w > 0] for x in (comparison, prompt, signed, w))
    C = int(num_comparisons)
    nan = np.full(C, np.nan)
    if comparison.shape[0] == 0:
        return NetPreference(nan, nan.copy(), nan.copy(), nan.copy(), np.zeros(C, np.int64))
    width = int(prompt.max()) + 1
    uniq, inv = np.unique(comparison * width + prompt, return_inverse=True)
    cell_mean = np.bincount(inv, weights=signed * w) / np.bincount(inv, weights=w)
    comp = uniq // width
    n = np.bincount(comp, minlength=C)[:C].astype(np.float64)
    s1 = np.bincount(comp, weights=cell_mean, minlength=C)[:C]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, s1 / n, np.nan)
        # two passes, and rounding noise is no spread: prompts that all have the same mean
        # (1/3, say) must give se 0, not 1e-17 and a t statistic of 1e16
        dev2 = np.bincount(comp, weights=(cell_mean - mean[comp]) ** 2, minlength=C)[:C]
        var = np.where(n > 1, dev2 / (n - 1), np.nan)
        var = np.where(var <= SPREAD_TOL**2, 0.0, var)
        # and a mean within rounding of 0 is 0: weighted judgments that cancel exactly
        # (+1 at 0.1 and 0.2, -1 at 0.3) leave 1e-17, which has no sign
        mean = np.where(np.abs(mean) <= SPREAD_TOL, 0.0, mean)
        se = np.sqrt(var / n)
    low, high = t_interval(mean, se, n, level)
    return NetPreference(mean, se, low, high, n.astype(np.int64))


def t_interval(
    mean: np.ndarray, se: np.ndarray, num_prompts: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The prompts-as-units t interval of Δ (:func:`net_preference`'s), clipped to [-1, 1].

    ``num_prompts - 1`` degrees of freedom; NaN where ``se`` is NaN (fewer than two prompts).
    A comparison whose prompts all have the same mean has se 0 and a zero-width interval:
    the data show no spread, and the sign test (not this interval) decides such a comparison
    (:func:`adaptive.estimation.significance.observed_from_judgments`).

    Example:
        >>> low, high = t_interval(np.array([0.5]), np.array([0.1]), np.array([11]))
        >>> round(float(low[0]), 3), round(float(high[0]), 3)
        (0.277, 0.723)
    """
    mean = np.asarray(mean, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    n = np.asarray(num_prompts, dtype=np.float64)
    # Student's t quantile (scipy.stats.t.ppf without importing scipy.stats: CLI start-up)
    q = special.stdtrit(np.maximum(n - 1, 1), 0.5 + level / 2.0)
    return np.clip(mean - q * se, -1.0, 1.0), np.clip(mean + q * se, -1.0, 1.0)
