"""Which cells (prompt, system pair, dimension) to send to annotators next.

The recommender is a pure function of a prepared posterior snapshot, the state
of the cells (what may still be asked, which response was shown first how
often) and a request::

    batch, info = recommend(rng_key, snapshot, cells, request)

Everything is integer-indexed: comparison ``c`` (one per dimension and
system pair, across all dimensions), prompt ``p``; names live at the edge.

How a batch is chosen (each step a small function, ``recommend`` chains them):

1. :func:`target_mask`: the comparisons that matter. By default every
   comparison not yet *decided*; the caller may name target comparisons
   instead (see :func:`adjacent_comparisons` and :func:`tier_comparisons`).
2. :func:`candidate_mask`: cells that may be handed out: judgments still
   available, not already judged by this annotator, of an undecided or
   targeted comparison (a decided, untargeted comparison gets nothing), and
   for a system with little data only its pairings with systems of similar
   estimated strength (or, with no data at all, a spread of strengths).
3. :func:`greedy_information`: greedy choice with fantasised updates. The
   expected reduction of the summed posterior variance of the targets by one
   judgment of cell (c, p) with Fisher information I is, for a Gaussian
   posterior with covariance K of the abilities,
   ``sum_t K[t, c]^2 I / (1 + I K[c, c])``; after a pick K gets the rank-one
   update ``K - I K[:, c] K[c, :] / (1 + I K[c, c])`` so the next pick
   accounts for what the batch will already add, and a cell is picked at
   most ``max_per_cell`` times in one batch. With the per-comparison
   parameterisation K is diagonal and this is var^2 I / (1 + var I). Each
   target's variance is weighted by :func:`decision_weights` (by default).
4. :func:`explore`: a small share of the batch goes to prompts whose item
   parameters are still the most uncertain (calibration).
5. :func:`assign_order`: which response is shown first, chosen to keep the
   two orders balanced per cell (ties broken at random).

**Decided (for allocation).** Stopping at the first 95% interval that
excludes 0 would freeze chance significances, so allocation uses a margin:
a comparison is decided when its posterior probability that B is better is
beyond 0.995 or below 0.005, i.e. ``|mean| / sd > 2.576`` under the Gaussian
(Laplace) approximation (``decide_z``). The verdict reported to users stays
the standard 95% interval (:mod:`adaptive.significance`).

References:
    Sedoc & Ungar (2020), graded response model and Fisher information;
    Samejima (1969); DESIGN.md "Next batch".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adaptive.cells import CellData
from stan_free_models.posterior import Posterior

#: |mean| / sd beyond which a comparison is decided for allocation: P(B better) > 0.995 or < 0.005
DECIDE_Z = 2.5758293035489004
#: information of a cell's next judgment / (1 + this * judgments it has); see Request
DEFAULT_REVISIT_DISCOUNT = 1.0
#: shown_first codes
SHOW_A, SHOW_B = 0, 1


# --------------------------------------------------------------------------- state


class Snapshot(NamedTuple):
    """What the recommender needs from a posterior, integer-indexed.

    Attributes:
        version: snapshot version (fold it into the rng key for replayable batches).
        theta_mean: (C,) posterior mean ability difference (> 0: B better).
        theta_cov: (C, C) posterior covariance of the ability differences.
        info: (C, P) expected Fisher information of one judgment of cell (c, p).
        item_sd: (C, P) posterior uncertainty of prompt p's parameters in c's dimension.
        pair_a, pair_b: (C,) system indices; dimension: (C,) dimension index.
        strength: (D, S) estimated system strength per dimension (NaN: no data).
        system_judgments: (D, S) judgments per system and dimension.
        num_judgments: judgments the posterior saw.
        evidence_z: (C,) model-free check of each comparison: the mean signed
            judgment over prompts divided by its standard error, prompts as the
            units (:func:`prompt_level_z`); NaN when unknown.
        evidence_prompts: (C,) prompts behind ``evidence_z``.
        info_order: (C, P) prompts of each comparison by decreasing information
            (after the default revisit discount), computed once per snapshot so
            that a request only filters it; ``info_effective`` the discounted values.
        judged: (C, P) judgments each cell already has (for the revisit discount).
    """

    version: int
    theta_mean: np.ndarray
    theta_cov: np.ndarray
    info: np.ndarray
    item_sd: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    dimension: np.ndarray
    strength: np.ndarray
    system_judgments: np.ndarray
    num_judgments: int = 0
    evidence_z: np.ndarray | None = None
    evidence_prompts: np.ndarray | None = None
    judged: np.ndarray | None = None
    info_order: np.ndarray | None = None
    info_effective: np.ndarray | None = None

    @property
    def num_comparisons(self) -> int:
        return int(self.theta_mean.shape[0])

    @property
    def num_prompts(self) -> int:
        return int(self.info.shape[1])

    def z(self) -> np.ndarray:
        """Posterior mean / sd of every comparison."""
        sd = np.sqrt(np.maximum(np.diag(self.theta_cov), 1e-12))
        return self.theta_mean / sd


class CellState(NamedTuple):
    """State of every cell (C, P): what may be asked and how it was shown so far.

    Attributes:
        available: judgments that may still be requested (0: not a candidate;
            in a replay the logged judgments left, in a campaign a large number
            for every cell to be judged).
        shown_a, shown_b: how often response a (resp. b) was shown first,
            counting judgments received and cells under an active lease.
    """

    available: np.ndarray
    shown_a: np.ndarray
    shown_b: np.ndarray

    @classmethod
    def open(cls, num_comparisons: int, num_prompts: int, per_cell: int = 1_000_000) -> CellState:
        shape = (num_comparisons, num_prompts)
        return cls(
            np.full(shape, per_cell, np.int64), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
        )


@dataclass(frozen=True)
class Request:
    """What the caller asks for.

    Attributes:
        size: number of judgments (tasks) in the batch.
        targets: comparison indices that matter; None = every undecided one.
        exclude: (C, P) cells not to hand out (e.g. the annotator already judged them).
        dimensions: restrict to these dimension indices (None = all).
        explore_share: share of the batch spent on prompts with uncertain parameters.
        decide_z: allocation margin, see the module docstring.
        max_per_cell: how often one cell may appear in one batch.
        revisit_discount: the information of a cell's next judgment is divided by
            ``1 + revisit_discount * judgments it already has``: judgments of one
            cell share the two responses and are not independent given the
            abilities (the model has no comparison-by-prompt term), so fresh
            prompts are worth more than another look at the same pair.
        weighting: ``"decision"`` weights each target's variance by how close
            its |mean| / sd is to the significance boundary
            (:func:`decision_weights`); ``"variance"`` weights all targets equally.
        new_system_judgments: a system with fewer judgments (in a dimension) is
            only paired with ``new_system_opponents`` systems of similar strength.
        new_system_opponents: how many opponents a new system gets.
    """

    size: int
    targets: tuple[int, ...] | None = None
    exclude: np.ndarray | None = None
    dimensions: tuple[int, ...] | None = None
    explore_share: float = 0.1
    decide_z: float = DECIDE_Z
    max_per_cell: int = 1
    revisit_discount: float = 1.0  # DEFAULT_REVISIT_DISCOUNT
    weighting: str = "decision"
    new_system_judgments: int = 20
    new_system_opponents: int = 3


class Batch(NamedTuple):
    """The chosen cells, in order of choice."""

    comparison: np.ndarray
    prompt: np.ndarray
    shown_first: np.ndarray  # SHOW_A or SHOW_B
    expected_gain: np.ndarray  # expected reduction of summed target variance at pick time
    explore: np.ndarray  # True when picked for calibration

    def __len__(self) -> int:
        return int(self.comparison.shape[0])


class RecommendInfo(NamedTuple):
    """Diagnostics of one recommendation (the caller decides what to keep)."""

    snapshot_version: int
    targets: np.ndarray  # (C,) bool
    decided: np.ndarray  # (C,) bool
    num_candidates: int
    target_variance_before: float
    target_variance_after: float  # fantasised, after the whole batch


# ------------------------------------------------------------------ information


def grm_information(theta: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fisher information of one graded response at theta (numpy, broadcasting).

    I(theta) = alpha^2 sum_c (W_c - W_(c+1))^2 / P_c with W_c = P*_c (1 - P*_c),
    P*_c = sigmoid(alpha (theta - b_c)) (Samejima 1969). Hand-written in numpy
    because it runs on every request over C x P cells; tested against
    finite differences of :func:`stan_free_models.graded_response.category_probs`.

    Args:
        theta, alpha: broadcastable arrays; b: (..., K-1) ordered thresholds.
    """
    theta = np.asarray(theta, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    x = alpha[..., None] * (theta[..., None] - np.asarray(b, dtype=np.float64))
    cum = 0.5 * (1.0 + np.tanh(0.5 * x))  # stable sigmoid
    w = cum * (1.0 - cum)
    pad = np.zeros(cum.shape[:-1] + (1,))
    upper = np.concatenate([pad + 1.0, cum], axis=-1)
    lower = np.concatenate([cum, pad], axis=-1)
    probs = upper - lower
    dprob = np.concatenate([pad, w], axis=-1) - np.concatenate([w, pad], axis=-1)
    terms = np.where(probs > 1e-30, dprob**2 / np.maximum(probs, 1e-30), 0.0)
    return alpha**2 * terms.sum(axis=-1)


def _numpy_rng(rng_key) -> np.random.Generator:
    """A numpy generator determined by a JAX PRNG key (or an int seed)."""
    if isinstance(rng_key, int | np.integer):
        return np.random.default_rng(int(rng_key))
    import jax

    data = rng_key
    if hasattr(rng_key, "dtype") and jax.dtypes.issubdtype(rng_key.dtype, jax.dtypes.prng_key):
        data = jax.random.key_data(rng_key)
    return np.random.default_rng(np.asarray(data, dtype=np.uint32).ravel().tolist())


def system_strength(
    theta_mean: np.ndarray, pair_a: np.ndarray, pair_b: np.ndarray, num_systems: int
) -> np.ndarray:
    """Leaderboard strengths s (mean 0) from comparison means theta ~ s_b - s_a (least squares).

    Systems that appear in no comparison get NaN.
    """
    strength = np.full(num_systems, np.nan)
    if len(theta_mean) == 0:
        return strength
    design = np.zeros((len(theta_mean), num_systems))
    design[np.arange(len(theta_mean)), pair_b] += 1.0
    design[np.arange(len(theta_mean)), pair_a] -= 1.0
    seen = np.abs(design).sum(axis=0) > 0
    sol, *_ = np.linalg.lstsq(design[:, seen], theta_mean, rcond=None)
    strength[seen] = sol - sol.mean()
    return strength


class DimensionDraws(NamedTuple):
    """One dimension's posterior draws and observed judgments, on global indices.

    Attributes:
        theta: (D, C) draws of the ability differences of the dimension's comparisons.
        pair_a, pair_b: (C,) global system indices of each comparison.
        alpha, b: (D, J), (D, J, K-1) draws of the model's items.
        item_of_prompt: (P,) item of each global prompt, -1 when the dimension
            has never seen it (prior-drawn parameters are used).
        skill: (D, S) per-system draws on global system indices, or None for
            the per-comparison parameterisation (then the covariance of theta is
            taken as diagonal and strengths come from least squares).
        judgment_comparison, judgment_prompt, judgment_signed: (N,) the
            judgments the posterior saw (signed: +1 B better, -1 A, 0 tie).
        cells_per_observation: judgments pooled in one observation (1 for the
            per-judgment likelihood; the mean cell size for net ratings).
    """

    dimension: str
    theta: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    alpha: np.ndarray
    b: np.ndarray
    item_of_prompt: np.ndarray
    skill: np.ndarray | None
    judgment_comparison: np.ndarray
    judgment_prompt: np.ndarray
    judgment_signed: np.ndarray
    cells_per_observation: float = 1.0


def snapshot_from_draws(
    dimensions: Sequence[DimensionDraws],
    *,
    num_prompts: int,
    num_systems: int,
    version: int = 0,
    num_info_draws: int = 8,
    seed: int = 0,
) -> Snapshot:
    """Prepare a :class:`Snapshot` (all dimensions stacked) from posterior draws.

    The expected Fisher information of a cell is averaged over ``num_info_draws``
    joint draws of (theta, alpha, b); a prompt a dimension has never seen gets
    prior-drawn item parameters (log alpha ~ N(0, 1), b ~ sorted N(0, 2)), so it
    looks uncertain, which calibration favours.
    """
    rng = np.random.default_rng(seed)
    num_p, num_s = num_prompts, num_systems
    means, covs, infos, sds, pa, pb, dims = [], [], [], [], [], [], []
    evidence, n_prompts, judged = [], [], []
    strength = np.full((len(dimensions), num_s), np.nan)
    sys_judg = np.zeros((len(dimensions), num_s), np.int64)
    total = 0
    for d, dd in enumerate(dimensions):
        theta = np.asarray(dd.theta, np.float64)
        if not np.isfinite(theta).all():
            raise ValueError(f"the posterior of dimension {dd.dimension!r} has non-finite draws")
        num_c = theta.shape[1]
        means.append(theta.mean(axis=0))
        if dd.skill is not None:
            covs.append(np.atleast_2d(np.cov(theta, rowvar=False)))
            skill = np.asarray(dd.skill, np.float64).mean(axis=0)
            seen_sys = np.zeros(num_s, bool)
            seen_sys[dd.pair_a] = seen_sys[dd.pair_b] = True
            strength[d, seen_sys] = skill[seen_sys] - skill[seen_sys].mean()
        else:
            # per-comparison: comparisons are a priori independent; sample
            # cross-covariances would only add noise
            covs.append(np.diag(theta.var(axis=0, ddof=1)))
            strength[d] = system_strength(means[-1], dd.pair_a, dd.pair_b, num_s)
        pa.append(np.asarray(dd.pair_a, np.int64))
        pb.append(np.asarray(dd.pair_b, np.int64))
        dims.append(np.full(num_c, d, np.int64))
        # item parameters per prompt: the prompt's item, or prior draws when unseen
        alpha, b = np.asarray(dd.alpha), np.asarray(dd.b)
        pick = rng.choice(theta.shape[0], size=min(num_info_draws, theta.shape[0]), replace=False)
        num_k = b.shape[-1]
        alpha_p = np.exp(rng.normal(0.0, 1.0, size=(len(pick), num_p)))
        b_p = np.sort(rng.normal(0.0, 2.0, size=(len(pick), num_p, num_k)), axis=-1)
        sd_p = np.full(num_p, np.inf)
        seen = np.flatnonzero(dd.item_of_prompt >= 0)
        items = dd.item_of_prompt[seen]
        # item draws may be thinned more than the abilities (service snapshots keep
        # fewer): take the item draw at the same relative position
        pick_items = (pick * alpha.shape[0]) // theta.shape[0]
        alpha_p[:, seen] = alpha[pick_items][:, items]
        b_p[:, seen] = b[pick_items][:, items]
        sd_p[seen] = np.sqrt(alpha.var(axis=0)[items] + b.var(axis=0).mean(axis=-1)[items])
        # one draw at a time keeps the temporaries at (C, P, K)
        info = np.zeros((num_c, num_p))
        for k, s_ in enumerate(pick):
            info += grm_information(theta[s_][:, None], alpha_p[k][None, :], b_p[k][None])
        info = np.nan_to_num(info / len(pick), nan=0.0, posinf=0.0)
        infos.append(info / max(dd.cells_per_observation, 1.0))
        sds.append(np.broadcast_to(sd_p, (num_c, num_p)))
        j_comp = np.asarray(dd.judgment_comparison, np.int64)
        j_prompt = np.asarray(dd.judgment_prompt, np.int64)
        sys_judg[d] = np.bincount(pa[-1][j_comp], minlength=num_s)
        sys_judg[d] += np.bincount(pb[-1][j_comp], minlength=num_s)
        total += len(j_comp)
        evidence.append(prompt_level_z(j_comp, j_prompt, dd.judgment_signed, num_c))
        pairs_seen = np.unique(j_comp * num_p + j_prompt) // num_p
        n_prompts.append(np.bincount(pairs_seen, minlength=num_c))
        counts = np.zeros((num_c, num_p), np.int64)
        np.add.at(counts, (j_comp, j_prompt), 1)
        judged.append(counts)
    num_c = sum(len(m) for m in means)
    cov = np.zeros((num_c, num_c))
    start = 0
    for k in covs:
        cov[start : start + len(k), start : start + len(k)] = k
        start += len(k)
    info = np.concatenate(infos, axis=0)
    judged_all = np.concatenate(judged, axis=0)
    discounted = info / (1.0 + DEFAULT_REVISIT_DISCOUNT * judged_all)
    return Snapshot(
        version=int(version),
        theta_mean=np.concatenate(means),
        theta_cov=cov,
        info=info,
        item_sd=np.concatenate(sds, axis=0),
        pair_a=np.concatenate(pa),
        pair_b=np.concatenate(pb),
        dimension=np.concatenate(dims),
        strength=strength,
        system_judgments=sys_judg,
        num_judgments=total,
        evidence_z=np.concatenate(evidence),
        evidence_prompts=np.concatenate(n_prompts),
        judged=judged_all,
        info_order=np.argsort(-discounted, axis=1, kind="stable").astype(np.int32),
        info_effective=discounted,
    )


def snapshot_from_posteriors(
    posteriors: Sequence[Posterior],
    cells: Sequence[CellData],
    *,
    prompts: Sequence[str] | None = None,
    systems: Sequence[str] | None = None,
    version: int = 0,
    num_info_draws: int = 8,
    seed: int = 0,
    observed: Sequence[np.ndarray] | None = None,
) -> tuple[Snapshot, dict]:
    """Prepare a :class:`Snapshot` from one fitted posterior per dimension.

    Comparisons are the ones of each dimension's cells, stacked in dimension
    order; prompts are ``prompts`` (default: every prompt of the cells).

    Args:
        posteriors, cells: a fit of each dimension's cells.
        prompts, systems: the name spaces (default: union over the cells).
        version: the snapshot version.
        num_info_draws: posterior draws over which the Fisher information is averaged.
        seed: for the choice of draws and prior items.
        observed: per dimension, a (N,) mask of the judgments of ``cells``
            the posterior saw (default: all; a replay fits on a subset).

    Returns:
        The snapshot and the name maps ``{"dimensions", "systems", "prompts",
        "comparisons"}`` (comparisons as (dimension, system_a, system_b)).
    """
    prompt_names = list(prompts) if prompts is not None else _union(c.prompts for c in cells)
    system_names = list(systems) if systems is not None else _union(c.systems for c in cells)
    sys_index = {s: i for i, s in enumerate(system_names)}
    prompt_index = {p: i for i, p in enumerate(prompt_names)}
    blocks, names = [], []
    for d, (post, cd) in enumerate(zip(posteriors, cells, strict=True)):
        seen_j = np.ones(cd.num_judgments, bool) if observed is None else np.asarray(observed[d])
        local_sys = np.array([sys_index[s] for s in cd.systems], np.int64)
        local_prompt = np.array([prompt_index[p] for p in cd.prompts], np.int64)
        item_of_prompt = np.full(len(prompt_names), -1, np.int64)
        item_of_prompt[local_prompt] = cd.item_of_prompt
        skill = None
        if "skill" in post.draws:
            local = post.flat("skill")
            skill = np.zeros((local.shape[0], len(system_names)))
            skill[:, local_sys] = local
        b = post.flat("b")
        blocks.append(
            DimensionDraws(
                dimension=cd.dimension,
                theta=post.flat("theta"),
                pair_a=local_sys[cd.pair_a],
                pair_b=local_sys[cd.pair_b],
                alpha=post.flat("alpha"),
                b=b,
                item_of_prompt=item_of_prompt,
                skill=skill,
                judgment_comparison=cd.judgment_comparison[seen_j],
                judgment_prompt=local_prompt[cd.judgment_prompt[seen_j]],
                judgment_signed=cd.judgment_y[seen_j].astype(np.float64) - 1.0,
                # net-rating likelihood: one observation pools a cell's judgments
                cells_per_observation=float(np.mean(cd.cell_count)) if b.shape[-1] > 2 else 1.0,
            )
        )
        names += [
            (cd.dimension, system_names[local_sys[a]], system_names[local_sys[b_]])
            for a, b_ in zip(cd.pair_a, cd.pair_b)
        ]
    snapshot = snapshot_from_draws(
        blocks,
        num_prompts=len(prompt_names),
        num_systems=len(system_names),
        version=version,
        num_info_draws=num_info_draws,
        seed=seed,
    )
    maps = {
        "dimensions": [c.dimension for c in cells],
        "systems": system_names,
        "prompts": prompt_names,
        "comparisons": names,
    }
    return snapshot, maps


def _union(groups) -> list[str]:
    return list(dict.fromkeys(x for g in groups for x in g))


# ------------------------------------------------------------------- the steps


def decided_mask(snapshot: Snapshot, decide_z: float = DECIDE_Z) -> np.ndarray:
    """(C,) True where the comparison is decided for allocation.

    Decided when the posterior |mean| / sd exceeds ``decide_z`` (P(B better)
    beyond 0.995 / 0.005) *and*, when the snapshot carries it, the prompt-level
    evidence |z| does too. The second check guards against the overconfidence
    of MAP + Laplace fits on sparse data (item discriminations fitted on few
    judgments inflate |mean| / sd; measured on chateval_ncm, see docs/replay.md),
    which would otherwise freeze comparisons that more data would not confirm.
    """
    decided = np.abs(snapshot.z()) > decide_z
    if snapshot.evidence_z is not None:
        bound = anytime_boundary(snapshot.evidence_prompts)
        decided &= np.abs(np.nan_to_num(snapshot.evidence_z, nan=0.0)) > bound
    return decided


def anytime_boundary(
    num_prompts: np.ndarray, alpha: float = 0.05, ratio: float = 1.0
) -> np.ndarray:
    """|z| a running mean of ``num_prompts`` units must exceed, valid at every look.

    The normal-mixture boundary (Robbins 1970; Howard et al. 2021): with the
    effect mixed over N(0, ratio * sigma^2), P(ever crossing | no effect) <= alpha
    for z^2 >= (1 + 1 / (n ratio)) (2 log(1 / alpha) + log(1 + n ratio)).
    About 3.2 at 50 prompts, 3.4 at 200 (a fixed 95% test would use 1.96).
    """
    n = np.maximum(np.asarray(num_prompts, dtype=np.float64), 1.0)
    return np.sqrt((1.0 + 1.0 / (n * ratio)) * (2.0 * np.log(1.0 / alpha) + np.log1p(n * ratio)))


def prompt_level_z(
    comparison: np.ndarray, prompt: np.ndarray, signed: np.ndarray, num_comparisons: int
) -> np.ndarray:
    """(C,) mean over prompts of the mean signed judgment (+1 B, -1 A, 0 tie) / its standard error.

    Prompts are the units of replication, so several judgments of one cell
    (which share the two responses) count once. NaN with fewer than 5 prompts.
    """
    out = np.full(num_comparisons, np.nan)
    if len(comparison) == 0:
        return out
    key = comparison.astype(np.int64) * (int(prompt.max()) + 1) + prompt
    uniq, inv = np.unique(key, return_inverse=True)
    cell_mean = np.bincount(inv, weights=signed) / np.bincount(inv)
    comp = uniq // (int(prompt.max()) + 1)
    n = np.bincount(comp, minlength=num_comparisons).astype(float)
    s1 = np.bincount(comp, weights=cell_mean, minlength=num_comparisons)
    s2 = np.bincount(comp, weights=cell_mean**2, minlength=num_comparisons)
    ok = n >= 5
    mean = np.where(ok, s1 / np.maximum(n, 1), 0.0)
    var = np.where(ok, (s2 - n * mean**2) / np.maximum(n - 1, 1), 1.0)
    # a floor on the spread: a perfectly consistent handful of prompts is not certainty
    se = np.sqrt(np.maximum(var, 0.05) / np.maximum(n, 1))
    out[ok] = mean[ok] / se[ok]
    return out


def decision_weights(snapshot: Snapshot, boundary: float = 1.96) -> np.ndarray:
    """(C,) exp(-(|z| - boundary)^2 / 2): a comparison's variance matters most near the boundary.

    The outcome users care about is the verdict. A comparison whose |z| sits
    near 1.96 changes verdict with little more data; one near 0 needs far more
    data to move, and one far beyond the boundary will not change. Measured on
    ai_teacher_test (understanding, 8 seeds): 95% agreement after 313 ± 93
    judgments with these weights, 525 ± 355 with equal weights.
    """
    return np.exp(-0.5 * (np.abs(snapshot.z()) - boundary) ** 2)


def target_mask(snapshot: Snapshot, request: Request) -> np.ndarray:
    """(C,) the comparisons whose uncertainty counts: named targets, else the undecided."""
    if request.targets is not None:
        mask = np.zeros(snapshot.num_comparisons, bool)
        mask[np.asarray(request.targets, np.int64)] = True
    else:
        mask = ~decided_mask(snapshot, request.decide_z)
    if request.dimensions is not None:
        mask &= np.isin(snapshot.dimension, np.asarray(request.dimensions))
    return mask


def adjacent_comparisons(snapshot: Snapshot) -> tuple[int, ...]:
    """Comparisons of systems adjacent in each dimension's leaderboard (by estimated strength)."""
    out = []
    for d in range(snapshot.strength.shape[0]):
        s = snapshot.strength[d]
        ranked = [int(i) for i in np.argsort(-np.nan_to_num(s, nan=-np.inf)) if np.isfinite(s[i])]
        for hi, lo in zip(ranked[:-1], ranked[1:]):
            out += _find_pairs(snapshot, d, [(hi, lo)])
    return tuple(sorted(set(out)))


def tier_comparisons(snapshot: Snapshot, tier: Sequence[int]) -> tuple[int, ...]:
    """Comparisons between two systems of one tier (system indices), in every dimension."""
    tier = list(tier)
    pairs = [(a, b) for i, a in enumerate(tier) for b in tier[i + 1 :]]
    out = []
    for d in range(snapshot.strength.shape[0]):
        out += _find_pairs(snapshot, d, pairs)
    return tuple(sorted(set(out)))


def _find_pairs(snapshot: Snapshot, dim: int, pairs) -> list[int]:
    out = []
    for a, b in pairs:
        hit = np.flatnonzero(
            (snapshot.dimension == dim)
            & (
                ((snapshot.pair_a == a) & (snapshot.pair_b == b))
                | ((snapshot.pair_a == b) & (snapshot.pair_b == a))
            )
        )
        out += [int(h) for h in hit]
    return out


def new_system_mask(snapshot: Snapshot, request: Request) -> np.ndarray:
    """(C,) False for pairings of a new system that are not among its allowed opponents.

    A system with fewer than ``new_system_judgments`` judgments in a dimension
    is paired only with the ``new_system_opponents`` established systems
    closest in estimated strength; with no strength estimate (no data), with
    systems spread evenly over the strength range.
    """
    allowed = np.ones(snapshot.num_comparisons, bool)
    k = request.new_system_opponents
    for d in range(snapshot.strength.shape[0]):
        in_dim = snapshot.dimension == d
        counts = snapshot.system_judgments[d]
        strength = snapshot.strength[d]
        present = np.unique(np.concatenate([snapshot.pair_a[in_dim], snapshot.pair_b[in_dim]]))
        new = [s for s in present if counts[s] < request.new_system_judgments]
        established = np.array([s for s in present if s not in new], np.int64)
        if not new or len(established) <= k:
            continue
        est_strength = np.nan_to_num(strength[established], nan=0.0)
        order = established[np.argsort(est_strength, kind="stable")]
        for s in new:
            if counts[s] == 0 or not np.isfinite(strength[s]):
                pos = np.unique(np.round(np.linspace(0, len(order) - 1, k)).astype(np.int64))
                opponents = set(order[pos].tolist())
            else:
                dist = np.abs(np.nan_to_num(strength[order], nan=0.0) - strength[s])
                opponents = set(order[np.argsort(dist, kind="stable")[:k]].tolist())
            involves = in_dim & ((snapshot.pair_a == s) | (snapshot.pair_b == s))
            other = np.where(snapshot.pair_a == s, snapshot.pair_b, snapshot.pair_a)
            # two new systems may meet each other; an established opponent must be allowed
            ok = np.isin(other, list(opponents)) | np.isin(other, new)
            allowed &= ~involves | ok
    return allowed


def candidate_mask(
    snapshot: Snapshot, cells: CellState, request: Request, targets: np.ndarray
) -> np.ndarray:
    """(C, P) cells that may be handed out for this request."""
    decided = decided_mask(snapshot, request.decide_z)
    comparison_ok = (~decided | targets) & new_system_mask(snapshot, request)
    if request.dimensions is not None:
        comparison_ok &= np.isin(snapshot.dimension, np.asarray(request.dimensions))
    if request.targets is not None:
        # named targets: only cells that inform them (their own, or correlated comparisons)
        linked = np.abs(snapshot.theta_cov[targets]).max(axis=0) > 0 if targets.any() else targets
        comparison_ok &= linked
    mask = (cells.available > 0) & comparison_ok[:, None]
    if request.exclude is not None:
        mask &= ~request.exclude
    return mask


def greedy_information(
    snapshot: Snapshot,
    candidates: np.ndarray,
    targets: np.ndarray,
    size: int,
    *,
    max_per_cell: int = 1,
    available: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    revisit_discount: float = 0.0,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy batch with fantasised rank-one updates of the ability covariance.

    Args:
        snapshot: posterior summary.
        candidates: (C, P) allowed cells.
        targets: (C,) comparisons whose variance counts.
        size: picks to make.
        max_per_cell: picks of one cell per batch (also capped by ``available``).
        rng: breaks ties between equally informative cells (None: by index).
        revisit_discount: see :class:`Request`.
        weights: (C,) weight of each target's variance (default 1; see
            :func:`decision_weights`).

    Returns:
        comparison, prompt, expected gain per pick, and the fantasised variances (C,).
    """
    cov0 = snapshot.theta_cov
    eff = effective_information(snapshot, revisit_discount)
    num_c, num_p = eff.shape
    w = targets.astype(np.float64) if weights is None else np.where(targets, weights, 0.0)
    var = np.diag(cov0).copy()
    reach = w @ cov0**2 if targets.any() else np.zeros(num_c)
    # only comparisons that can inform a target and have a candidate take part
    active = np.flatnonzero((reach > 0) & candidates.any(axis=1))
    empty = np.zeros(0, np.int64)
    if size <= 0 or len(active) == 0:
        return empty, empty, np.zeros(0), var
    # the gain is increasing in I, so each comparison only needs its `size` most
    # informative cells, sorted once; a pointer walks down each row
    width = min(size, num_p)
    top = _top_cells(snapshot, eff, candidates, active, width, revisit_discount)
    raw = np.where(candidates[active[:, None], top], eff[active[:, None], top], 0.0)
    # tiny seeded noise breaks ties between equally informative cells
    noisy = raw * (1.0 + 1e-6 * rng.random(raw.shape)) if rng is not None else raw
    order = np.argsort(-noisy, axis=1, kind="stable")
    top = np.take_along_axis(top, order, axis=1)
    top_info = np.take_along_axis(raw, order, axis=1)

    def cap_of(c: int, p: int) -> int:
        return int(available[c, p]) if available is not None else max_per_cell

    num_a = len(active)
    rows = np.arange(num_a)
    pointer = np.zeros(num_a, np.int64)
    used = np.zeros(num_a, np.int64)  # picks of the current top cell of each row
    # low-rank record of the fantasised updates: K = K0 - U diag(k) U^T
    u_cols = np.zeros((num_c, size))
    k_vals = np.zeros(size)
    picks_c, picks_p, gains = [], [], []
    for n in range(size):
        cur = np.where(pointer < width, top_info[rows, np.minimum(pointer, width - 1)], 0.0)
        var_a = var[active]
        gain = reach[active] * cur / (1.0 + cur * var_a)
        r = int(np.argmax(gain))
        if gain[r] <= 0.0:
            break
        c, p = int(active[r]), int(top[r, pointer[r]])
        value = float(top_info[r, pointer[r]])
        picks_c.append(c)
        picks_p.append(p)
        gains.append(float(reach[c] * value / (1.0 + value * var[c])))
        # fantasised update K <- K - kk u u^T, u = K[:, c], kk = I / (1 + I K[c, c]);
        # var and reach (sum_t w_t K[t, j]^2) follow in O(C^2) without forming K
        u = cov0[:, c] - u_cols[:, :n] @ (k_vals[:n] * u_cols[c, :n])
        kk = value / (1.0 + value * u[c])
        wu = w * u
        g = wu @ cov0 - ((wu @ u_cols[:, :n]) * k_vals[:n]) @ u_cols[:, :n].T
        reach = np.maximum(reach - 2.0 * kk * u * g + kk**2 * u**2 * (wu @ u), 0.0)
        var = var - kk * u**2
        u_cols[:, n] = u
        k_vals[n] = kk
        used[r] += 1
        if used[r] >= min(max_per_cell, cap_of(c, p)):
            pointer[r] += 1
            used[r] = 0
    return (
        np.asarray(picks_c, np.int64),
        np.asarray(picks_p, np.int64),
        np.asarray(gains, np.float64),
        var,
    )


def effective_information(snapshot: Snapshot, revisit_discount: float) -> np.ndarray:
    """(C, P) information of each cell's next judgment after the revisit discount."""
    if revisit_discount == DEFAULT_REVISIT_DISCOUNT and snapshot.info_effective is not None:
        return snapshot.info_effective
    if snapshot.judged is None or revisit_discount <= 0:
        return snapshot.info
    return snapshot.info / (1.0 + revisit_discount * snapshot.judged)


def _top_cells(
    snapshot: Snapshot,
    info: np.ndarray,
    candidates: np.ndarray,
    active: np.ndarray,
    width: int,
    revisit_discount: float,
) -> np.ndarray:
    """(A, width) the most informative candidate prompts of each active comparison.

    Uses the snapshot's precomputed order when the request keeps the default
    discount: the first candidates in that order (rows with too few candidates
    in a short window fall back to a full partial sort).
    """
    num_p = info.shape[1]
    if snapshot.info_order is None or revisit_discount != DEFAULT_REVISIT_DISCOUNT:
        sub = np.where(candidates[active], info[active], -1.0)
        if width >= num_p:
            return np.broadcast_to(np.arange(num_p), sub.shape).copy()
        return np.argpartition(-sub, width - 1, axis=1)[:, :width]
    window = min(num_p, 2 * width + 32)
    hint = snapshot.info_order[active, :window].astype(np.int64)
    ok = candidates[active[:, None], hint]
    first = np.argsort(~ok, axis=1, kind="stable")[:, :width]  # candidates first, in order
    top = np.take_along_axis(hint, first, axis=1)
    short = np.flatnonzero(ok.sum(axis=1) < width)
    if len(short) and window < num_p:
        sub = np.where(candidates[active[short]], info[active[short]], -1.0)
        top[short] = np.argpartition(-sub, width - 1, axis=1)[:, :width]
    return top


def explore(
    rng: np.random.Generator,
    snapshot: Snapshot,
    candidates: np.ndarray,
    num: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Calibration picks: cells of the prompts whose parameters are most uncertain.

    Takes the ``num`` candidate prompts with the largest ``item_sd`` (ties at
    random) and for each a random candidate comparison.
    """
    if num <= 0 or not candidates.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # item_sd is the same for every comparison of a dimension: one row per dimension
    sd = np.full(candidates.shape[1], -np.inf)
    for d in np.unique(snapshot.dimension):
        rows = np.flatnonzero(snapshot.dimension == d)
        in_dim = candidates[rows].any(axis=0)
        sd = np.where(in_dim, np.maximum(sd, snapshot.item_sd[rows[0]]), sd)
    prompts = np.flatnonzero(np.isfinite(sd) | (sd == np.inf))
    noise = rng.random(len(prompts))
    ranked = prompts[np.lexsort((noise, -sd[prompts]))][:num]
    comps = []
    for p in ranked:
        options = np.flatnonzero(candidates[:, p])
        comps.append(int(options[rng.integers(len(options))]))
    return np.asarray(comps, np.int64), ranked.astype(np.int64)


def assign_order(
    rng: np.random.Generator, cells: CellState, comparison: np.ndarray, prompt: np.ndarray
) -> np.ndarray:
    """Which response each pick shows first, keeping the two orders balanced per cell.

    A cell shows first the response it has shown first less often so far
    (counting earlier picks of this batch); cells with equal counts take
    sides from a shuffled, alternating sequence, so the batch as a whole is
    balanced too.
    """
    counts: dict[tuple[int, int], list[int]] = {}
    out = np.zeros(len(comparison), np.int64)
    ties = np.resize(np.array([SHOW_A, SHOW_B]), len(comparison))
    rng.shuffle(ties)
    for k, (c, p) in enumerate(zip(comparison.tolist(), prompt.tolist())):
        ab = counts.setdefault((c, p), [int(cells.shown_a[c, p]), int(cells.shown_b[c, p])])
        side = SHOW_A if ab[0] < ab[1] else SHOW_B if ab[1] < ab[0] else int(ties[k])
        out[k] = side
        ab[side] += 1
    return out


# ------------------------------------------------------------------ the policy


def recommend(
    rng_key, snapshot: Snapshot, cells: CellState, request: Request
) -> tuple[Batch, RecommendInfo]:
    """The next batch: information-greedy picks plus a calibration share.

    Deterministic: the same snapshot, cell state, request and key give the
    same batch. Derive the key as ``jax.random.fold_in(base_key, snapshot.version)``.

    Args:
        rng_key: a JAX PRNG key (or an int seed).
        snapshot: from :func:`snapshot_from_posteriors`.
        cells: the cell state.
        request: the request.

    Returns:
        The batch and a :class:`RecommendInfo`.
    """
    rng = _numpy_rng(rng_key)
    targets = target_mask(snapshot, request)
    candidates = candidate_mask(snapshot, cells, request, targets)
    size = int(request.size)
    num_explore = int(np.floor(request.explore_share * size + 1e-9)) if size > 1 else 0
    comp, prompt, gain, var_after = greedy_information(
        snapshot,
        candidates,
        targets,
        size - num_explore,
        max_per_cell=request.max_per_cell,
        available=cells.available,
        rng=rng,
        revisit_discount=request.revisit_discount,
        weights=decision_weights(snapshot) if request.weighting == "decision" else None,
    )
    # calibration from the cells the greedy part did not take
    left = candidates.copy()
    left[comp, prompt] = False
    e_comp, e_prompt = explore(rng, snapshot, left, size - len(comp))
    all_comp = np.concatenate([comp, e_comp])
    all_prompt = np.concatenate([prompt, e_prompt])
    gains = np.concatenate([gain, np.zeros(len(e_comp))])
    explore_flag = np.concatenate([np.zeros(len(comp), bool), np.ones(len(e_comp), bool)])
    order = assign_order(rng, cells, all_comp, all_prompt)
    batch = Batch(all_comp, all_prompt, order, gains, explore_flag)
    var_before = float(np.diag(snapshot.theta_cov)[targets].sum())
    info = RecommendInfo(
        snapshot_version=snapshot.version,
        targets=targets,
        decided=decided_mask(snapshot, request.decide_z),
        num_candidates=int(candidates.sum()),
        target_variance_before=var_before,
        target_variance_after=float(var_after[targets].sum()),
    )
    return batch, info
