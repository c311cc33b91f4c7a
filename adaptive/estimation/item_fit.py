"""Item fit per prompt: a posterior predictive check of the graded response model.

Teams coming from R's mirt read ``itemfit`` to find prompts the model fits badly. The
check here asks it of the fit the product already makes (:func:`adaptive.estimation.fitting.fit_cells`,
the default fast path or NUTS). The misfit a graded-response prompt cannot absorb is a
wrong direction: alpha > 0, so a prompt on which the worse system wins (a reversed or
mislabelled prompt) is fitted with alpha near 0 and its judgments then go against the
abilities more than any draw allows. For each item j:

* x_n: the ability of each of its judgments' comparison (posterior mean), centred over the
  item's judgments; s_n the signed judgment (+1 B, -1 A, 0 tie);
* for every posterior draw d, m_dn the model's expected signed judgment given that draw's
  theta, alpha and b, and replicated judgments y_rep from the same draw;
* the discrepancy T_j(y, d) = sum_n w_n x_n (s_n - m_dn): the score of a slope over the
  abilities that the draw's prompt lacks, and T_j(y_rep, d) the same of the replicate;
* p_j = share of draws with T_j(y_rep, d) <= T_j(y, d), the posterior predictive p-value
  (Gelman, Meng & Stern 1996; for IRT items, Sinharay, Johnson & Stern 2006).

A prompt is flagged when p_j < ``level`` (default 0.05), per prompt. Posterior predictive
p-values are conservative (a prompt's own judgments fitted its parameters), so on
well-specified data the share of well-fitting prompts flagged is about the level or below:
0-2% measured on data drawn from the model, up to 5% with dependent judgments and random
annotators. On sparse campaigns with dependent, noisy judgments it passes the level: up to
6.0% of them with 60% of the judgments kept, 7.5% with 30% and 9.0% (a mean of 5.3%) with
10% (research/item_fit/checks.jsonl; docs/selection.md, "Item fit"). No further multiplicity
adjustment: Benjamini-Hochberg on such p-values lowers recall further;
:func:`benjamini_hochberg` is here for those who want it. The check is one-sided: it flags trends weaker than the model's (a
reversed or uninformative prompt), not steeper ones.

The replicated judgments come from the plain graded-response model: a fit with a cell
effect or a lapse is refused (its replicates would be sharper than the fitted model).

Everything here is numbers: arrays in, arrays out; :func:`item_fit_rows` gives names.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from scipy.sparse import csr_matrix
from scipy.special import expit

#: per-prompt level of the misfit flags: a prompt is flagged when its p-value is below it
DEFAULT_LEVEL = 0.05
#: posterior draws the check uses at most
DEFAULT_DRAWS = 1000
#: draws per vectorised block at most (memory: block x judgments x categories floats)
_BLOCK = 250
#: floats of one block's (draws, judgments, categories) arrays at most (80 MB each)
_BLOCK_FLOATS = 10_000_000
#: expected counts below this are floored (a category the model all but excludes)
_TINY = 1e-9


class ItemFitInfo(NamedTuple):
    """Per item (J,) arrays of :func:`item_fit`.

    Attributes:
        p_value: the posterior predictive p-value of the item's trend: the share of
            draws whose replicated trend is as low as the observed one (1: not judged).
        flagged: p-value below the level asked for.
        num_comparisons: the comparisons each item was judged on.
        trend_observed, trend_model: least-squares slope over the comparisons' abilities of
            the observed and of the model's expected signed judgment (+1 B, -1 A) of the
            item's judgments; a reversed prompt has an observed slope below 0.
        tie_observed, tie_model: share of the item's judgments in the middle category
            (a tie; K = 3) observed and expected.
        num_draws: draws used.
    """

    p_value: np.ndarray
    flagged: np.ndarray
    num_comparisons: np.ndarray
    trend_observed: np.ndarray
    trend_model: np.ndarray
    tie_observed: np.ndarray
    tie_model: np.ndarray
    num_draws: int


def benjamini_hochberg(p_values: np.ndarray, level: float) -> np.ndarray:
    """Rejections of the Benjamini-Hochberg step-up procedure at false discovery rate ``level``.

    Example:
        >>> benjamini_hochberg(np.array([0.001, 0.02, 0.04, 0.5]), 0.05).tolist()
        [True, True, False, False]
    """
    p = np.asarray(p_values, dtype=float)
    m = p.shape[0]
    if m == 0:
        return np.zeros(0, dtype=bool)
    order = np.argsort(p)
    below = p[order] <= level * np.arange(1, m + 1) / m
    k = int(np.flatnonzero(below).max()) + 1 if below.any() else 0
    reject = np.zeros(m, dtype=bool)
    reject[order[:k]] = True
    return reject


def _category_probs(theta: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(..., K) graded-response probabilities; theta, alpha (...), b (..., K-1)."""
    cum = expit(alpha[..., None] * (theta[..., None] - b))
    ones = np.ones(cum.shape[:-1] + (1,), cum.dtype)
    return np.concatenate([ones, cum], -1) - np.concatenate([cum, 0.0 * ones], -1)


def _slopes(x: np.ndarray, ys: list[np.ndarray], w: np.ndarray, item: np.ndarray, J: int):
    """Per item, the weighted least-squares slope of each of ``ys`` on ``x``."""
    sw = np.bincount(item, w, J)
    xbar = np.bincount(item, w * x, J) / np.maximum(sw, _TINY)
    dx = x - xbar[item]
    sxx = np.bincount(item, w * dx * dx, J)
    return [np.bincount(item, w * dx * y, J) / np.maximum(sxx, _TINY) for y in ys]


def item_fit(
    rng: np.random.Generator,
    theta: np.ndarray,
    alpha: np.ndarray,
    b: np.ndarray,
    comparison: np.ndarray,
    item: np.ndarray,
    y: np.ndarray,
    weight: np.ndarray | None = None,
    *,
    level: float = DEFAULT_LEVEL,
    num_draws: int = DEFAULT_DRAWS,
) -> ItemFitInfo:
    """Posterior predictive check of every item's trend over the comparisons' abilities.

    Args:
        rng: the replications' random numbers (and the draws kept, when fewer are asked for).
        theta: (D, C) draws of the comparisons' abilities.
        alpha: (D, J) draws of the items' discriminations; b: (D, J, K-1) of their thresholds.
        comparison, item, y: (N,) each observation's comparison, item and category 0..K-1.
        weight: (N,) observation weights (a redundancy group's prompts share a weight).
        level: per-prompt level of the flags.
        num_draws: use at most this many draws (drawn without replacement).

    Returns:
        :class:`ItemFitInfo`.

    References:
        Gelman, Meng & Stern (1996), posterior predictive checks; Sinharay, Johnson &
        Stern (2006), for IRT items.
    """
    theta, alpha, b = np.asarray(theta), np.asarray(alpha), np.asarray(b)
    comparison, item = np.asarray(comparison, np.int64), np.asarray(item, np.int64)
    y = np.asarray(y, np.int64)
    w = np.ones(y.shape[0]) if weight is None else np.asarray(weight, float)
    D, J, K, N = alpha.shape[0], alpha.shape[1], b.shape[-1] + 1, y.shape[0]
    keep = np.sort(rng.choice(D, size=num_draws, replace=False)) if D > num_draws else np.arange(D)
    h = (K - 1) / 2.0
    values = (np.arange(K) - h) / h  # signed judgment: -1 A, 0 tie, +1 B
    # x: each judgment's comparison ability (posterior mean), centred per item; the trend
    # T = sum w x (s - m) is the score of a slope over theta the draw's prompt lacks
    theta_mean = theta[keep].mean(0)
    sw = np.maximum(np.bincount(item, w, J), _TINY)
    x = theta_mean[comparison]
    x = x - (np.bincount(item, w * x, J) / sw)[item]
    to_item = csr_matrix((w * x, (item, np.arange(N))), shape=(J, N))
    signed = values[y]
    t_obs, t_rep = [], []
    block = max(1, min(_BLOCK, _BLOCK_FLOATS // max(N * K, 1)))
    for start in range(0, keep.shape[0], block):
        d = keep[start : start + block]
        probs = _category_probs(theta[d][:, comparison], alpha[d][:, item], b[d][:, item])
        cum = 1.0 - np.cumsum(probs, axis=-1)[..., :-1]  # P(y >= c), c = 1..K-1
        y_rep = (rng.uniform(size=probs.shape[:-1] + (1,)) < cum).sum(-1)  # (d, N)
        expected = probs @ values
        t_obs.append(to_item @ (signed[None, :] - expected).T)
        t_rep.append(to_item @ (values[y_rep] - expected).T)
    obs, rep = np.concatenate(t_obs, axis=1), np.concatenate(t_rep, axis=1)  # (J, D)
    judged = np.abs(rep).max(axis=1) > _TINY
    p = np.where(judged, (1.0 + (rep <= obs).sum(axis=1)) / (1.0 + obs.shape[1]), 1.0)
    mean_probs = _category_probs(theta_mean[comparison], alpha[keep].mean(0)[item],
                                 b[keep].mean(0)[item])  # fmt: skip
    trend_obs, trend_model = _slopes(
        theta_mean[comparison], [signed, mean_probs @ values], w, item, J
    )
    mid = K // 2
    return ItemFitInfo(
        p_value=p,
        flagged=(p < level) & judged,
        num_comparisons=np.bincount(np.unique(comparison * J + item) % J, minlength=J),
        trend_observed=trend_obs,
        trend_model=trend_model,
        tie_observed=np.bincount(item, w * (y == mid), J) / sw,
        tie_model=np.bincount(item, w * mean_probs[:, mid], J) / sw,
        num_draws=int(keep.shape[0]),
    )


def flag_at(info: ItemFitInfo, level: float) -> ItemFitInfo:
    """``info`` with its flags at another ``level``: the p-values (and the random numbers
    behind them) do not depend on it, so one check serves every level.

    A prompt the check cannot judge has p = 1, never below a level of at most 1, so
    ``p < level`` is :func:`item_fit`'s flag.

    Example:
        >>> info = ItemFitInfo(np.array([0.01, 0.2, 1.0]), np.zeros(3, bool), *[np.zeros(3)] * 5, 9)
        >>> flag_at(info, 0.3).flagged.tolist()
        [True, True, False]
    """
    if not 0.0 < level <= 1.0:
        raise ValueError(f"level must be in (0, 1], not {level}")
    return info._replace(flagged=info.p_value < level)


def misfit_reason(info: ItemFitInfo, j: int) -> str:
    """Why item ``j`` was flagged, in words ('' when it was not)."""
    if not info.flagged[j]:
        return ""
    parts = []
    obs, model = info.trend_observed[j], info.trend_model[j]
    if obs < 0 < model:
        parts.append(
            "its judgments go against the comparisons' abilities: the better system loses "
            f"more often on it (slope {obs:+.2f} against the model's {model:+.2f})"
        )
    elif obs < model - 0.5 * abs(model):
        parts.append(
            "its judgments follow the comparisons' abilities less than the model allows "
            f"(slope {obs:+.2f} against {model:+.2f})"
        )
    tie, tie_model = info.tie_observed[j], info.tie_model[j]
    if abs(tie - tie_model) > 0.1:
        parts.append(f"ties {tie:.0%} against the model's {tie_model:.0%}")
    if not parts:
        parts.append("its judgments follow the comparisons' abilities less than the model allows")
    return "; ".join(parts) + f" (p {info.p_value[j]:.2g})"


def analysis_item_fit(
    analysis: Any,
    *,
    seed: int = 0,
    level: float = DEFAULT_LEVEL,
    num_draws: int = DEFAULT_DRAWS,
) -> ItemFitInfo:
    """:func:`item_fit` of a fitted dimension (:class:`adaptive.estimation.pipeline.Analysis`).

    The observations are the ones the fit saw: every judgment (3 categories, the default
    model) or one net rating per cell (the paper preset's 7 categories).
    """
    from adaptive.estimation.fitting import model_data

    post, cells = analysis.posterior, analysis.cells
    extra = sorted({"tau", "lapse"} & set(post.draws))
    if extra:
        raise ValueError(
            f"item fit checks the plain graded-response model, and this fit has {extra} (a "
            "cell effect or a lapse): fit without them to check the prompts"
        )
    b = post.flat("b")
    likelihood = "net" if b.shape[-1] + 1 > 3 else "judgment"
    data = model_data(cells, likelihood=likelihood)
    return item_fit(
        np.random.default_rng(seed),
        post.flat("theta"),
        post.flat("alpha"),
        b,
        data.comparison,
        data.item,
        data.y,
        data.weight,
        level=level,
        num_draws=num_draws,
    )


def item_fit_rows(analysis: Any, info: ItemFitInfo, *, level: float = DEFAULT_LEVEL) -> list[dict]:
    """Per item (prompt or redundancy group): the check's numbers and flag, worst fit first."""
    cells = analysis.cells
    alpha = analysis.posterior.flat("alpha").mean(0)
    rows = []
    for j, members in enumerate(cells.item_members):
        rows.append(
            {
                "dimension": cells.dimension,
                "item_id": members[0],
                "group": "+".join(members) if len(members) > 1 else "",
                "alpha_mean": float(alpha[j]),
                "n_comparisons": int(info.num_comparisons[j]),
                "fit_p": float(info.p_value[j]),
                "misfit": bool(info.flagged[j]),
                "misfit_reason": misfit_reason(info, j),
                "trend_observed": round(float(info.trend_observed[j]), 4),
                "trend_model": round(float(info.trend_model[j]), 4),
                "level": level,
                "num_draws": info.num_draws,
            }
        )
    rows.sort(key=lambda r: (r["fit_p"], r["trend_observed"]))
    return rows
