"""The precision a kept set will have on fresh judgments, by empirical Bayes on all the judgments.

The kept prompts were chosen on every judgment, so their observed cell means are the
luckiest draws of their prompts (a winner's curse). Posterior means under a prior that
fits the prompts' spread are not biased by a selection made on the same data (Dawid 1994,
"Selection paradoxes of Bayesian inference"; Efron 2011, "Tweedie's formula and selection
bias"), so the kept set's fresh precision is predicted from each cell's posterior.

Per tier, with each comparison's judgments signed so that its full-set net preference is
positive (y_pc = sign_c x cell mean), the model is

    y_pc = mu_c + lambda_c v_p + e_pc + noise,   v_p ~ N(0, s_v^2),  e_pc ~ N(0, s_e^2),

noise ~ N(0, s_c^2 / n_pc) with s_c^2 the comparison's within-cell variance of a judgment;
v_p is what makes a prompt informative on every comparison of the tier (loaded by
lambda_c = |mu_c| / rms |mu|: a prompt that separates systems moves a wide gap more than a
close one), e_pc what it does on one. s_v^2 and s_e^2 are moment estimates (the residuals'
covariance across comparisons of a prompt, and their variance less s_v^2 and the noise).

The fresh figure is simulated: draws of every cell's true mean from its posterior, fresh
cell means with ``fresh_count`` judgments each, and per draw the tier's SE ratio exactly as
the held-out check measures it (each comparison's SNR with all prompts over its SNR with
the kept ones, median over the comparisons clearly signed in that draw). The estimate is
the median over draws, with the 5-95% range of the draws as a 90% interval: it covers the
posterior's uncertainty and the fresh judgments' own randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from adaptive.prompts.prune_folds import CLEAR_SNR, CellTable
from adaptive.prompts.prune_precision import INTERVAL, best_gain, variance_split

#: posterior draws of the cells' true means
NUM_DRAWS = 400
#: points of the grid the prompts' shared-effect prior is estimated on
GRID_SIZE = 120
#: the least variance of a fresh judgment
MIN_NOISE = 0.02


@dataclass(frozen=True)
class Shrinkage:
    """A tier's fitted prior and every observed cell's posterior (signed, centred scale)."""

    sign: np.ndarray  # (C_t,) +1 / -1: the full set's direction of each comparison
    centre: np.ndarray  # (C_t,) mu_c on the signed scale
    loading: np.ndarray  # (C_t,) lambda_c
    noise: np.ndarray  # (C_t,) s_c^2, a judgment's within-cell variance
    prompt_var: float  # s_v^2
    cell_var: float  # s_e^2
    v_mean: np.ndarray  # (P,) posterior mean of v_p
    v_sd: np.ndarray  # (P,)
    residual: np.ndarray  # (P, C_t) y - mu, 0 where unobserved
    count: np.ndarray  # (P, C_t) judgments per cell
    second: np.ndarray  # (C_t,) mean square of a judgment
    grid: np.ndarray | None = None  # (G,) support of the estimated prior of v_p (npmle)
    posterior: np.ndarray | None = None  # (P, G) each prompt's posterior over the grid


def npmle_posterior(
    estimate: np.ndarray, se: np.ndarray, *, grid_size: int = GRID_SIZE, iterations: int = 400
) -> tuple[np.ndarray, np.ndarray]:
    """The prior of v_p by nonparametric maximum likelihood, and each prompt's posterior on it.

    ``estimate`` (P,) ~ N(v_p, se^2) with v_p drawn from an unknown prior G, estimated on a
    grid by EM (Kiefer & Wolfowitz 1956; Koenker & Mizera 2014, "Convex optimization,
    shape constraints, compound decisions, and empirical Bayes rules"). A prompt with no
    judgments (se infinite) gets G itself. Returns (grid (G,), posterior (P, G)).
    """
    seen = np.isfinite(se) & (se > 0)
    lo, hi = estimate[seen].min(), estimate[seen].max()
    pad = float(np.median(se[seen]))
    grid = np.linspace(lo - pad, hi + pad, grid_size)
    z = (estimate[:, None] - grid) / np.where(seen, se, 1.0)[:, None]
    lik = np.where(
        seen[:, None], np.exp(-0.5 * z**2 + 0.5 * np.min(z**2, axis=1, keepdims=True)), 1.0
    )
    prior = np.full(grid_size, 1.0 / grid_size)
    for _ in range(iterations):
        joint = lik * prior
        post = joint / joint.sum(axis=1, keepdims=True)
        prior = post[seen].mean(axis=0)
    joint = lik * prior
    return grid, joint / joint.sum(axis=1, keepdims=True)


def fit_shrinkage(
    table: CellTable,
    comparisons: np.ndarray,
    *,
    prompt_effect: str = "loaded",
    prior: str = "npmle",
) -> Shrinkage:
    """The tier's prior and the posterior of every prompt's shared effect.

    ``prompt_effect``: ``loaded`` (lambda_c as in the module doc), ``additive``
    (lambda_c = 1) or ``none`` (s_v^2 = 0: every cell shrunk on its own). ``prior``:
    ``npmle`` (v_p's prior estimated nonparametrically, :func:`npmle_posterior`: a
    selection of the most extreme prompts is shrunk as much as the prompts' actual
    spread warrants, heavy tails included) or ``normal`` (N(0, s_v^2) by moments).
    """
    count = table.count[:, comparisons]
    obs = count > 0
    mean = np.where(obs, table.total[:, comparisons] / np.maximum(count, 1), 0.0)
    _, noise = variance_split(table, comparisons)
    noise = np.where(
        np.isfinite(noise), noise, np.nanmean(noise) if np.isfinite(noise).any() else 1.0
    )
    n_c = np.maximum(obs.sum(axis=0), 1)
    raw = mean.sum(axis=0) / n_c
    sign = np.where(raw < 0, -1.0, 1.0)
    y = mean * sign
    centre = raw * sign
    resid = np.where(obs, y - centre, 0.0)
    rms = np.sqrt(np.mean(centre**2)) if np.any(centre > 0) else 1.0
    loading = centre / rms if rms > 0 and prompt_effect == "loaded" else np.ones_like(centre)
    cell_noise = np.where(obs, noise / np.maximum(count, 1), 0.0)
    weighted = resid * loading
    cross = weighted.sum(axis=1) ** 2 - (weighted**2).sum(axis=1)
    pair_load = (obs * loading).sum(axis=1) ** 2 - (obs * loading**2).sum(axis=1)
    prompt_var = max(float(cross.sum() / pair_load.sum()), 0.0) if pair_load.sum() > 0 else 0.0
    prompt_var = 0.0 if prompt_effect == "none" else prompt_var
    total_var = float((resid**2).sum() / obs.sum())
    load_var = float((obs * loading**2).sum() / obs.sum())
    cell_var = max(total_var - prompt_var * load_var - float(cell_noise.sum() / obs.sum()), 0.0)
    w = cell_var + cell_noise  # variance of a residual given v_p
    inv = np.where(obs, 1.0 / np.maximum(w, 1e-12), 0.0)
    precision = (1.0 / prompt_var if prompt_var > 0 else np.inf) + (inv * loading**2).sum(axis=1)
    v_mean = np.where(np.isfinite(precision), (inv * loading * resid).sum(axis=1) / precision, 0.0)
    v_sd = np.where(np.isfinite(precision), 1.0 / np.sqrt(precision), 0.0)
    second = table.squares[:, comparisons].sum(axis=0) / np.maximum(count.sum(axis=0), 1)
    grid = posterior = None
    own = (inv * loading**2).sum(axis=1)
    if prior == "npmle" and prompt_var > 0 and np.count_nonzero(own) > 1:
        with np.errstate(divide="ignore", invalid="ignore"):
            estimate = np.where(own > 0, (inv * loading * resid).sum(axis=1) / own, 0.0)
            se = np.where(own > 0, 1.0 / np.sqrt(own), np.inf)
        grid, posterior = npmle_posterior(estimate, se)
        v_mean = posterior @ grid
        v_sd = np.sqrt(np.maximum(posterior @ grid**2 - v_mean**2, 0.0))
    return Shrinkage(
        sign,
        centre,
        loading,
        noise,
        prompt_var,
        cell_var,
        v_mean,
        v_sd,
        resid,
        count,
        second,
        grid,
        posterior,
    )


def draw_means(model: Shrinkage, rng: np.random.Generator, num_draws: int) -> np.ndarray:
    """(D, P, C_t) draws of the observed cells' true means from their posterior (signed)."""
    num_p, num_c = model.residual.shape
    if model.posterior is not None and model.grid is not None:
        cdf = np.cumsum(model.posterior, axis=1)
        u = rng.random((num_draws, num_p, 1))
        index = np.minimum((u > cdf[None]).sum(axis=2), len(model.grid) - 1)
        v = model.grid[index]
    else:
        v = model.v_mean + model.v_sd * rng.standard_normal((num_draws, num_p))
    shared = v[:, :, None] * model.loading
    noise = np.where(model.count > 0, model.noise / np.maximum(model.count, 1), np.inf)
    shrink = model.cell_var / (model.cell_var + noise)  # 0 where unobserved
    e_mean = shrink * (model.residual - shared)
    e_sd = np.sqrt(shrink * np.where(np.isfinite(noise), noise, 0.0))
    e = e_mean + e_sd * rng.standard_normal((num_draws, num_p, num_c))
    unobserved = np.sqrt(model.cell_var) * rng.standard_normal((num_draws, num_p, num_c))
    e = np.where(model.count > 0, e, unobserved)
    return model.centre + shared + e


def _snr(means: np.ndarray, observed: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(D, C_t) SNR of every draw's comparisons on the prompts of ``mask``, (P,) or (D, P)."""
    m = (observed & np.atleast_2d(mask)[:, :, None]).astype(np.float64)  # (1 or D, P, C_t)
    n = m.sum(axis=1)
    s1 = np.einsum("dpc,dpc->dc", np.broadcast_to(m, means.shape), means)
    s2 = np.einsum("dpc,dpc->dc", np.broadcast_to(m, means.shape), means**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        centre = s1 / n
        var = (s2 - n * centre**2) / (n - 1)
        out = centre / np.sqrt(var / n)
    return np.where((n >= 2) & (var > 1e-12), out, np.nan)


def _quantiles(values: np.ndarray, probs: tuple[float, ...]) -> list[float]:
    """Order statistics at ``probs`` (no interpolation: infinite ratios stay infinite)."""
    ordered = np.sort(values)
    n = len(ordered)
    return [float(ordered[min(int(np.ceil(q * n)) - 1, n - 1) if q > 0 else 0]) for q in probs]


def _typical_worth(kept: np.ndarray, random: np.ndarray, clear: np.ndarray) -> float:
    """(median kept SNR / median random SNR)^2, median over the comparisons clear in most draws."""
    use = clear.mean(axis=0) >= 0.5
    if not use.any():
        return float("nan")
    ratios = []
    for c in np.flatnonzero(use):
        k, r = kept[:, c][clear[:, c]], random[:, c][clear[:, c]]
        k, r = k[np.isfinite(k)], r[np.isfinite(r)]
        if len(k) and len(r) and np.median(r) > 0:
            ratios.append((max(float(np.median(k)), 0.0) / float(np.median(r))) ** 2)
    return float(np.median(ratios)) if ratios else float("nan")


@dataclass(frozen=True)
class FreshFigure:
    """A kept set's predicted SE ratio on fresh judgments and its 90% interval."""

    se_ratio: float
    low: float
    high: float
    worth_random: float  # (SNR_kept / SNR_random)^2 in the typical draw
    prompt_share: float  # s_v^2 over the prompts' whole true spread on the signed scale


def fresh_se_ratio(
    table: CellTable,
    comparisons: np.ndarray,
    kept: np.ndarray,
    rng: np.random.Generator,
    *,
    fresh_count: np.ndarray | None = None,
    num_draws: int = NUM_DRAWS,
    prompt_effect: str = "loaded",
    prior: str = "npmle",
) -> FreshFigure:
    """The kept prompts' SE ratio against all prompts on fresh judgments (module doc).

    Args:
        table: every judgment the selection saw; ``comparisons`` the tier's.
        kept: the kept prompts (indices).
        fresh_count: (P, C_t) judgments per cell of the fresh round (default: as many as
            ``table`` has; cells it has not judged stay unjudged).
        num_draws: posterior draws.
    """
    nan = FreshFigure(np.nan, np.nan, np.nan, np.nan, np.nan)
    if not len(comparisons) or len(kept) < 2:
        return nan
    model = fit_shrinkage(table, comparisons, prompt_effect=prompt_effect, prior=prior)
    counts = model.count if fresh_count is None else np.asarray(fresh_count, dtype=np.float64)
    observed = (model.count > 0) & (counts > 0)
    truth = draw_means(model, rng, num_draws)
    # a judgment lies in [-1, 1]: its variance is its mean square less its mean squared, so
    # a decisive prompt's fresh judgments are less noisy than a split one's
    per_judgment = np.maximum(model.second - truth**2, MIN_NOISE)
    sd = np.sqrt(np.where(observed, per_judgment / np.maximum(counts, 1), 0.0))
    fresh = truth + sd * rng.standard_normal(truth.shape)
    num_p = counts.shape[0]
    every = np.ones(num_p, dtype=bool)
    mask = np.zeros(num_p, dtype=bool)
    mask[np.asarray(kept, dtype=np.int64)] = True
    picks = np.argsort(rng.random((num_draws, num_p)), axis=1)[:, : int(mask.sum())]
    random = np.zeros((num_draws, num_p), dtype=bool)
    np.put_along_axis(random, picks, True, axis=1)
    full, mine, rand = (_snr(fresh, observed, m) for m in (every, mask, random))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(mine * np.sign(full) > 0, np.abs(full) / (mine * np.sign(full)), np.inf)
    clear = np.nan_to_num(np.abs(full)) >= CLEAR_SNR
    clear = np.where(clear.any(axis=1, keepdims=True), clear, np.isfinite(full))
    per_draw = np.array([np.median(r[c]) if c.any() else np.nan for r, c in zip(ratio, clear)])
    per_draw = per_draw[~np.isnan(per_draw)]
    if not len(per_draw):
        return nan
    low, mid, high = _quantiles(per_draw, (INTERVAL[0] / 100, 0.5, INTERVAL[1] / 100))
    worth = _typical_worth(mine * np.sign(full), rand * np.sign(full), clear)
    spread = model.prompt_var * float(np.mean(model.loading**2)) + model.cell_var
    share = model.prompt_var * float(np.mean(model.loading**2)) / spread if spread > 0 else np.nan
    return FreshFigure(float(mid), float(low), float(high), float(worth), float(share))


def new_system_gain(table: CellTable, comparisons: np.ndarray, share_kept: float) -> float:
    """The best gain (random prompts per kept prompt) any subset could give on new systems.

    What a set chosen on these systems' judgments can know about a new comparison's prompts
    is their shared effect lambda v_p; the rest (e_pc) is news. So the bound is
    :func:`~adaptive.prompts.prune_precision.best_gain` with only lambda_c^2 s_v^2 as the
    prompts' spread and s_e^2 with the judgments' noise; median over the clearly signed
    comparisons (NaN if none).
    """
    if not len(comparisons):
        return float("nan")
    model = fit_shrinkage(table, comparisons)
    count = model.count
    obs = count > 0
    n = np.maximum(obs.sum(axis=0), 1)
    cell_noise = np.where(obs, model.noise / np.maximum(count, 1), 0.0).sum(axis=0) / n
    spread = model.prompt_var * model.loading**2
    rest = model.cell_var + cell_noise
    gain = best_gain(model.centre, spread, rest, share_kept)
    with np.errstate(invalid="ignore", divide="ignore"):
        full = model.centre / np.sqrt((spread + rest) / n)
    use = (np.abs(full) >= CLEAR_SNR) & np.isfinite(gain)
    return float(np.median(gain[use])) if use.any() else float("nan")


__all__ = [
    "new_system_gain",
    "FreshFigure",
    "NUM_DRAWS",
    "Shrinkage",
    "draw_means",
    "fit_shrinkage",
    "fresh_se_ratio",
]
