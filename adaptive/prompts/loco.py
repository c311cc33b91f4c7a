"""Leave-one-comparison-out (LOCO) evaluation of prompt-selection policies.

Sedoc & Ungar (section 6.2, Figure 2): for each comparison, fit the graded
response model on all the other comparisons, rank the prompts, then estimate
the held-out comparison from its judgments on the top-k prompts only and
record the standard error of its ability. Policies (:mod:`adaptive.prompts.selection`):

* ``random``: k prompts drawn at random (``num_random`` draws per fold);
* ``prompt``: ranked by Fisher information averaged over the training
  comparisons' ability draws (global item parameters);
* ``prompt_model``: systems split into tiers by their training abilities;
  item parameters re-estimated from the training comparisons inside the
  held-out comparison's tier; prompts ranked by information at that tier's
  ability draws. The held-out ability is then estimated with the *global*
  training fit's item parameters (``tier_estimate="global"``, default), so
  that every policy's SE is on the same ability scale and the policies
  differ only in which prompts they pick. ``tier_estimate="tier"`` also
  estimates with the tier's parameters, as the paper's wording suggests;
  a tier fit (2-7 comparisons here) has its own ability scale (its
  thresholds are re-centred on its few comparisons), so those SEs are not
  comparable with the global ones: on ChatEval NCM its estimates differ
  from the all-prompts estimate by 0.4 (RMS) even with all prompts.
  ``tier_estimate="linked"`` estimates with the tier's parameters and maps
  the result to the global scale by mean-sigma linking on the tier's
  training comparisons (scale and shift of their ability estimates).
  ``tier_information="located"`` skips the tier refit: prompts are ranked by
  information with the *global* item parameters, evaluated at the global
  ability draws of the tier's training comparisons (where the tier's
  comparisons sit, without the noise of a 2-7-comparison fit);
* ``discrimination``: ranked by alpha alone (optional; the paper's wording).

Choices (documented in docs/selection.md):

* Training fits use the fast MAP + Laplace approximation
  (:func:`stan_free_models.laplace.fit_laplace`), not NUTS.
* Item parameters are fixed at point estimates: alpha = exp(posterior mean
  of log alpha), b = posterior mean of b (an ordered vector).
* The held-out ability has the model's N(0, 1) prior; with item parameters
  fixed its posterior is one-dimensional and is computed exactly on a grid
  (``grid_points`` over [-grid_limit, grid_limit]); SE = posterior sd.
* Only prompts judged for the held-out comparison can be selected (a replay
  may only use judgments that exist), so k is capped by their number.
* Redundant prompts (groups from the training comparisons only) are dropped
  before ranking, keeping the most informative member of each group.
* A held-out comparison whose systems fall in different tiers, or whose tier
  has fewer than ``min_tier_comparisons`` training comparisons, uses the
  global ranking under ``prompt_model`` (reported as ``tier = -1``). Prompts
  never judged inside the tier rank after those that were, and keep their
  global item parameters.

:func:`run_fold` is pure (numbers in, numbers out) so that
:mod:`adaptive.prompts.parallel` can run folds serially or on Ray with identical
results.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Generator
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from adaptive.prompts.loco_batch import run_rounds
from adaptive.prompts.loco_data import (
    DEFAULT_ABILITY,
    DEFAULT_GRID,
    DEFAULT_POLICIES,
    DEFAULT_RANDOM,
    DEFAULT_TIER_ESTIMATE,
    DEFAULT_TIER_INFORMATION,
    DEFAULT_TIERS,
    LOCO_POLICIES,
)
from adaptive.prompts.loco_data import LocoData as LocoData  # re-exported, as is loco_data
from adaptive.prompts.loco_data import loco_data as loco_data
from adaptive.prompts.redundancy import DEFAULT_FDR, DEFAULT_THRESHOLD
from adaptive.prompts.selection import (
    chain,
    drop_redundant,
    prefix_masks,
    rank_by_discrimination,
    rank_by_information,
    rank_random,
    restrict,
    select_prompts,
)
from adaptive.prompts.tier_plan import (
    ItemFit as ItemFit,  # re-exported: LOCO's item fits live there
)
from adaptive.prompts.tier_plan import (
    fit_items,
    fit_tier,
    information_score,
    redundancy_groups,
    split_by_options,
)
from stan_free_models.graded_response import graded_log_prob
from stan_free_models.information import expected_information


@dataclass(frozen=True)
class LocoConfig:
    """What a LOCO run computes; every fold derives its keys from ``seed``."""

    grid: tuple[int, ...] = DEFAULT_GRID
    policies: tuple[str, ...] = DEFAULT_POLICIES
    num_random: int = DEFAULT_RANDOM
    num_tiers: int = DEFAULT_TIERS
    tier_sizes: tuple[int, ...] | None = None
    ability_method: str = DEFAULT_ABILITY
    min_tier_comparisons: int = 2
    redundancy_threshold: float | None = DEFAULT_THRESHOLD  # None: keep every prompt
    redundancy_fdr: float | None = DEFAULT_FDR
    num_draws: int = 400  # Laplace draws
    num_info_draws: int = 100  # ability draws per comparison for expected information
    grid_points: int = 801
    grid_limit: float = 8.0
    tier_estimate: str = DEFAULT_TIER_ESTIMATE  # or "tier", "linked": see the module doc
    tier_information: str = DEFAULT_TIER_INFORMATION  # or "located": see the module doc
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = set(self.policies) - set(LOCO_POLICIES)
        if unknown:
            raise ValueError(
                f"unknown policies {sorted(unknown)}; expected some of {LOCO_POLICIES}"
            )
        if self.tier_estimate not in ("global", "tier", "linked"):
            raise ValueError(
                f"tier_estimate must be 'global', 'tier' or 'linked', not {self.tier_estimate!r}"
            )
        if self.tier_information not in ("refit", "located"):
            raise ValueError(
                f"tier_information must be 'refit' or 'located', not {self.tier_information!r}"
            )
        if self.tier_information == "located" and self.tier_estimate != "global":
            raise ValueError(
                "tier_information='located' has no tier fit: use tier_estimate='global'"
            )
        if self.num_random < 1 or any(k < 1 for k in self.grid):
            raise ValueError("num_random and every k must be >= 1")


@dataclass(frozen=True)
class FoldResult:
    """Standard errors of the held-out comparison's ability, per policy and k."""

    fold: int
    num_available: int  # prompts judged for the held-out comparison
    se_full: float  # all available prompts, global item parameters
    se: dict[str, np.ndarray]  # policy -> (num_random or 1, len(grid))
    estimate_full: float  # posterior mean with all available prompts
    estimate: dict[str, np.ndarray]  # policy -> posterior means, same shape as ``se``
    order: dict[str, np.ndarray]  # deterministic policy -> prompt order (best first)
    tier: int  # tier of the held-out comparison under prompt_model (-1: global fallback)
    info: dict[str, float] = field(default_factory=dict)


def heldout_posterior(
    y: np.ndarray,
    alpha: np.ndarray,
    b: np.ndarray,
    masks: np.ndarray,
    *,
    grid_points: int = 801,
    grid_limit: float = 8.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mean and sd of one comparison's ability given fixed item parameters.

    Args:
        y: (P,) the comparison's categories (anything where a mask is False).
        alpha, b: (P,), (P, K-1) fixed item parameters.
        masks: (S, P) which prompts each selection uses.

    Returns:
        (mean, sd), each (S,), with theta ~ N(0, 1) a priori, computed on a
        grid (exact up to the grid spacing; the posterior is one-dimensional).
    """
    grid = np.linspace(-grid_limit, grid_limit, grid_points)
    return posterior_on_grid(heldout_loglik(y, alpha, b, grid), grid, masks)


def heldout_loglik(y: np.ndarray, alpha: np.ndarray, b: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(G, P) log likelihood of each prompt's category at every grid value of theta."""
    y_safe = np.clip(np.asarray(y), 0, b.shape[-1])
    loglik = np.asarray(_grid_loglik(y_safe, alpha, b, grid), dtype=np.float64)  # (G, P)
    return np.where(np.isfinite(loglik), loglik, -1e30)


@jax.jit
def _grid_loglik(y: jax.Array, alpha: jax.Array, b: jax.Array, grid: jax.Array) -> jax.Array:
    # one compiled program; op by op, its operations compiled one at a time on first use
    cum_logits = jnp.asarray(alpha)[None, :, None] * (
        jnp.asarray(grid, dtype=jnp.float32)[:, None, None] - jnp.asarray(b)[None]
    )
    return graded_log_prob(jnp.broadcast_to(y, cum_logits.shape[:2]), cum_logits)


def posterior_on_grid(
    loglik: np.ndarray, grid: np.ndarray, masks: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`heldout_posterior` from :func:`heldout_loglik`'s values."""
    observed = np.asarray(masks.any(axis=0))
    log_post = masks.astype(np.float64) @ np.where(observed[None, :], loglik, 0.0).T
    log_post = log_post - 0.5 * grid[None, :] ** 2
    log_post -= log_post.max(axis=1, keepdims=True)
    w = np.exp(log_post)
    w /= w.sum(axis=1, keepdims=True)
    mean = w @ grid
    var = w @ grid**2 - mean**2
    return mean, np.sqrt(np.maximum(var, 0.0))


def heldout_se(
    y: np.ndarray,
    alpha: np.ndarray,
    b: np.ndarray,
    masks: np.ndarray,
    *,
    grid_points: int = 801,
    grid_limit: float = 8.0,
) -> np.ndarray:
    """(S,) posterior sd of :func:`heldout_posterior`: the held-out SE of each selection."""
    return heldout_posterior(y, alpha, b, masks, grid_points=grid_points, grid_limit=grid_limit)[1]


#: what a fold asks its driver for: the fast fit on these comparisons with this key
FitRequest = tuple[np.ndarray, jax.Array]


def run_fold(data: LocoData, config: LocoConfig, fold: int) -> FoldResult:
    """Hold out comparison ``fold``, fit on the rest, and score every policy over the grid.

    Each fit is :func:`adaptive.prompts.tier_plan.fit_items` at the fit's own padded shape (a
    shape bucket compiles its own program); :func:`run_folds` makes the
    same fits at one shape.
    """
    start = time.perf_counter()
    steps = fold_steps(data, config, fold)
    request = next(steps)
    while True:
        try:
            request = steps.send(fit_items(data, *request, config.num_draws))
        except StopIteration as stop:
            result: FoldResult = stop.value
            result.info["seconds"] = time.perf_counter() - start
            return result


def fold_steps(
    data: LocoData, config: LocoConfig, fold: int, *, reuse_likelihood: bool = False
) -> Generator[FitRequest, ItemFit, FoldResult]:
    """One fold as a generator: it yields each fit it needs and is sent the :class:`ItemFit`.

    The first request is the training fit, the second (``prompt_model`` with a usable
    tier refit only) the tier's; everything else is computed here, so that the serial
    driver (:func:`run_fold`) and the batched one (:func:`run_folds`)
    share every line. ``reuse_likelihood`` computes the held-out comparison's likelihood
    grid once per set of item parameters instead of once per selection (the same
    numbers; a third of a compiled fold's time on ChatEval NCM).
    """
    theta_grid = np.linspace(-config.grid_limit, config.grid_limit, config.grid_points)
    logliks: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def posterior(alpha: np.ndarray, b: np.ndarray, masks: np.ndarray):
        if not reuse_likelihood:
            return heldout_posterior(
                y, alpha, b, masks, grid_points=config.grid_points, grid_limit=config.grid_limit
            )
        key = (id(alpha), id(b))  # kept alive with their grid, so an id is never reused
        if key not in logliks:
            logliks[key] = (alpha, b, heldout_loglik(y, alpha, b, theta_grid))
        return posterior_on_grid(logliks[key][2], theta_grid, masks)

    base_key = jax.random.fold_in(jax.random.PRNGKey(config.seed), fold)
    num_c, num_p = data.num_comparisons, data.num_prompts
    train = np.array([c for c in range(num_c) if c != fold], dtype=np.int64)

    held = data.cell_comparison == fold
    y = np.zeros(num_p, dtype=np.int64)
    y[data.cell_prompt[held]] = data.cell_y[held]
    available = np.zeros(num_p, dtype=bool)
    available[data.cell_prompt[held]] = True
    num_available = int(available.sum())
    ks = np.minimum(np.asarray(config.grid), num_available)

    fit = yield train, jax.random.fold_in(base_key, 0)
    score = information_score(fit, config.num_info_draws)
    groups = redundancy_groups(
        data, train, threshold=config.redundancy_threshold, fdr=config.redundancy_fdr
    )

    estimate: dict[str, list[np.ndarray]] = {}

    def se_of(order: np.ndarray, alpha: np.ndarray, b: np.ndarray, policy: str) -> np.ndarray:
        masks = prefix_masks(order, ks, num_p)
        mean, sd = posterior(alpha, b, masks)
        estimate.setdefault(policy, []).append(mean)
        return sd

    full_mean, full_sd = posterior(fit.alpha, fit.b, available[None])
    se_full = float(full_sd[0])
    se: dict[str, np.ndarray] = {}
    order: dict[str, np.ndarray] = {}
    steps_common = [restrict(available), drop_redundant(groups, score)]
    policy_key = jax.random.fold_in(base_key, 1)

    if "prompt" in config.policies:
        ranking = select_prompts(
            chain(*steps_common, rank_by_information(score)), policy_key, num_p
        )
        order["prompt"] = ranking.order
        se["prompt"] = se_of(ranking.order, fit.alpha, fit.b, "prompt")[None]
    if "discrimination" in config.policies:
        ranking = select_prompts(
            chain(*steps_common, rank_by_discrimination(fit.alpha)), policy_key, num_p
        )
        order["discrimination"] = ranking.order
        se["discrimination"] = se_of(ranking.order, fit.alpha, fit.b, "discrimination")[None]
    if "random" in config.policies:
        rows = []
        for draw in range(config.num_random):
            ranking = select_prompts(
                chain(restrict(available), rank_random()),
                jax.random.fold_in(jax.random.fold_in(base_key, 2), draw),
                num_p,
            )
            rows.append(se_of(ranking.order, fit.alpha, fit.b, "random"))
        se["random"] = np.stack(rows)

    tier = -1
    info: dict[str, float] = {"converged": float(fit.converged)}
    if "prompt_model" in config.policies:
        tiers = split_by_options(data, fit, config)
        held_tier = int(tiers.comparison_tier[fold])
        tier_key = jax.random.fold_in(base_key, 3)
        tier_of = functools.partial(
            fit_tier,
            data,
            fit,
            tiers,
            held_tier,
            tier_key,
            min_tier_comparisons=config.min_tier_comparisons,
            num_draws=config.num_draws,
        )
        tier_fit = tier_of(refit=False)
        if tier_fit.usable and config.tier_information == "refit":
            refitted = yield tier_fit.comparisons, tier_key
            tier_fit = tier_of(refitted=refitted)
        tier_train = tier_fit.comparisons
        if tier_fit.usable:
            tier = held_tier
            tfit = tier_fit.refit
            if tfit is None:
                # located: global item parameters, information where the tier's comparisons sit
                cols = np.searchsorted(train, tier_train)
                draws = fit.theta_draws[: config.num_info_draws][:, cols]
                tscore = np.asarray(expected_information(draws, fit.alpha, fit.b), dtype=np.float64)
            else:
                tscore = information_score(tfit, config.num_info_draws)
                # prompts unseen in the tier rank after the seen ones, by their global score
                tscore = np.where(tfit.has_data, tscore, score - score.max() - 1.0)
            if tfit is not None and config.tier_estimate in ("tier", "linked"):
                alpha_t, b_t = tier_fit.alpha, tier_fit.b
            else:
                alpha_t, b_t = fit.alpha, fit.b
            ranking = select_prompts(
                chain(
                    restrict(available), drop_redundant(groups, tscore), rank_by_information(tscore)
                ),
                policy_key,
                num_p,
            )
            order["prompt_model"] = ranking.order
            se["prompt_model"] = se_of(ranking.order, alpha_t, b_t, "prompt_model")[None]
            if tfit is not None and config.tier_estimate == "linked":
                # mean-sigma linking of the tier's ability scale to the global one, fitted
                # on the tier's training comparisons (Kolen & Brennan 2014, sec. 6.2)
                t_tier = tfit.theta_draws.mean(axis=0)
                t_glob = fit.theta_draws.mean(axis=0)[np.searchsorted(train, tier_train)]
                scale = float(t_glob.std() / max(t_tier.std(), 1e-6))
                shift = float(t_glob.mean() - scale * t_tier.mean())
                se["prompt_model"] = se["prompt_model"] * scale
                estimate["prompt_model"][-1] = scale * estimate["prompt_model"][-1] + shift
                info["link_scale"] = scale
            info["tier_comparisons"] = float(len(tier_train))
            info["tier_converged"] = float(tfit.converged if tfit is not None else fit.converged)
        else:
            base = order.get("prompt")
            if base is None:
                base = select_prompts(
                    chain(*steps_common, rank_by_information(score)), policy_key, num_p
                ).order
            order["prompt_model"] = base
            se["prompt_model"] = se_of(base, fit.alpha, fit.b, "prompt_model")[None]
            info["tier_comparisons"] = 0.0
        info["held_tier_raw"] = float(held_tier)
    return FoldResult(
        fold=fold,
        num_available=num_available,
        se_full=se_full,
        se=se,
        estimate_full=float(full_mean[0]),
        estimate={k: np.stack(v) for k, v in estimate.items()},
        order=order,
        tier=tier,
        info=info,
    )


def summarize_folds(results: list[FoldResult], config: LocoConfig) -> list[dict]:
    """One row per (policy, k): the paper's Figure 2 as numbers.

    Columns: ``policy, k, se_mean`` (mean over folds of the held-out SE; for
    ``random`` also over draws), ``se_sd`` (sd over folds), ``n_folds``,
    ``draw_sd`` (``random`` only: sd over draws of the fold-mean SE, the
    spread a single random subset shows), ``se_ratio`` (se_mean / the
    full-set se_mean), ``paired_ratio`` (mean over folds of the per-fold
    SE / full-set SE) and ``rmse_vs_full`` (root mean square difference
    between the held-out estimate from the k prompts and the one from all
    prompts with global item parameters: a check that a small SE is not
    bought with a biased or over-confident estimate). A ``full`` row gives
    the all-prompts reference.
    """
    results = sorted(results, key=lambda r: r.fold)
    full = np.array([r.se_full for r in results])
    full_mean = float(full.mean())
    rows = [
        {
            "policy": "full",
            "k": int(max(r.num_available for r in results)),
            "se_mean": full_mean,
            "se_sd": float(full.std(ddof=1)) if len(full) > 1 else 0.0,
            "n_folds": len(results),
            "draw_sd": 0.0,
            "se_ratio": 1.0,
            "paired_ratio": 1.0,
            "rmse_vs_full": 0.0,
        }
    ]
    est_full = np.array([r.estimate_full for r in results])
    for policy in config.policies:
        stack = np.stack([r.se[policy] for r in results])  # (F, draws, K)
        per_fold = stack.mean(axis=1)  # (F, K)
        est = np.stack([r.estimate[policy] for r in results])  # (F, draws, K)
        sq_err = ((est - est_full[:, None, None]) ** 2).mean(axis=(0, 1))  # (K,)
        for j, k in enumerate(config.grid):
            se_mean = float(per_fold[:, j].mean())
            rows.append(
                {
                    "policy": policy,
                    "k": int(k),
                    "se_mean": se_mean,
                    "se_sd": float(per_fold[:, j].std(ddof=1)) if len(results) > 1 else 0.0,
                    "n_folds": len(results),
                    "draw_sd": float(stack[:, :, j].mean(axis=0).std(ddof=1))
                    if stack.shape[1] > 1
                    else 0.0,
                    "se_ratio": se_mean / full_mean,
                    "paired_ratio": float((per_fold[:, j] / full).mean()),
                    "rmse_vs_full": float(np.sqrt(sq_err[j])),
                }
            )
    return rows


def fold_task(shared: tuple[LocoData, LocoConfig], fold: int) -> FoldResult:
    """:func:`run_fold` in the ``fn(shared, item)`` form that :mod:`adaptive.prompts.parallel` maps."""
    data, config = shared
    return run_fold(data, config, fold)


def run_folds(
    data: LocoData, config: LocoConfig, folds: list[int], *, vmap: bool = False, progress=None
) -> list[FoldResult]:
    """Several folds with every fast fit at one padded shape, one compiled program.

    :mod:`adaptive.prompts.loco_batch` says how, and how its numbers relate to :func:`run_fold`'s.
    ``info["seconds"]`` is a fold's own time plus its share of the batched fits.
    """
    steps = {f: fold_steps(data, config, f, reuse_likelihood=True) for f in folds}
    results, spent = run_rounds(data, steps, config.num_draws, vmap=vmap, progress=progress)
    for fold in folds:
        results[fold].info["seconds"] = spent[fold]
    return [results[f] for f in folds]


def fold_group_task(shared: tuple[LocoData, LocoConfig], group: list[int]) -> list[FoldResult]:
    """:func:`run_folds` on a group of folds, the form :mod:`adaptive.prompts.parallel` maps."""
    data, config = shared
    return run_folds(data, config, group)


def run_loco(
    data: LocoData,
    config: LocoConfig,
    *,
    workers: int = 1,
    folds: list[int] | None = None,
    progress=None,
    batched: bool = True,
):
    """Every fold (or the given ones), serially or on Ray; results are identical either way.

    ``batched`` (default) runs the folds through :func:`run_folds`:
    serially all in one
    group, on Ray one group of folds per worker (each group batched on its worker); the
    numbers are the same either way. ``batched=False`` runs :func:`run_fold` per fold (per
    Ray task), the one-fold-at-a-time path.

    Returns:
        (fold results in fold order, :class:`adaptive.prompts.parallel.MapInfo`, one entry per fold).
    """
    # the one Ray module, loaded only to run folds
    from adaptive.prompts.parallel import map_groups, map_items, serial_info

    if data.num_comparisons < 2:
        raise ValueError(
            f"leave-one-comparison-out needs at least 2 comparisons; the data has {data.num_comparisons}"
        )
    items = list(range(data.num_comparisons)) if folds is None else list(folds)
    if not batched:
        return map_items(fold_task, (data, config), items, workers=workers, progress=progress)
    if workers <= 1:
        start = time.perf_counter()
        results = run_folds(data, config, items, progress=progress)
        seconds = [r.info["seconds"] for r in results]
        return results, serial_info(time.perf_counter() - start, seconds)
    return map_groups(fold_group_task, (data, config), items, workers=workers, progress=progress)
