"""Which cells (prompt, system pair, dimension) to send to annotators next.

The recommender is a pure function of a prepared snapshot, the state of the
cells (what may still be asked, which can be annotated at all, which response
was shown first how often) and a request::

    batch, info = recommend(rng_key, snapshot, cells, request)

Everything is integer-indexed: comparison ``c`` (one per dimension and
system pair, across all dimensions), prompt ``p``; names live at the edge.

The recommender spends only where a decision is still open
(:mod:`adaptive.decisions`: B better, A better, equivalent or undecided, from
each comparison's own judgments, valid at every look). With a per-comparison
stopping rule, the judgments needed to close *every* comparison are the sum of
each comparison's own stopping time whatever the order, so the saving comes
from never sampling a closed comparison; the order decides how *early*
decisions arrive. How a batch is chosen (each step a small function):

1. :func:`target_mask`: every comparison not yet closed, or the comparisons
   the caller names (:func:`adjacent_comparisons`, :func:`tier_comparisons`);
   a closed comparison gets nothing unless it is named.
2. :func:`candidate_mask`: cells that may be handed out: judgments still
   available, annotatable (both systems have a response to the prompt and the
   two responses differ), not judged by this annotator, and for a system with
   little data only its pairings with systems of similar estimated strength.
3. :func:`allocate`: LUCB-style order: a burn-in of ``burn_in`` observations
   for every open comparison, then the comparison closest to a decision (the
   fewest judgments likely still needed) first, each up to its need; a fresh
   prompt per judgment, a judged cell only when the prompts run out.
4. :func:`assign_order`: which response is shown first, balanced per cell.

Prompts inside a comparison are chosen at random, not by Fisher information:
the decision's estimand is the average over the comparison's prompts, and an
information-weighted choice would change it unless importance-weighted, for a
gain bounded by the between-prompt share of the variance (0.16 on ChatEval
NCM, 0.24-0.27 on the AI Teacher Test). The snapshot keeps the expected
information of every cell for reports and for :mod:`adaptive.selection`.

References:
    Kalyanakrishnan et al. (2012), LUCB; Sedoc & Ungar (2020), graded
    response model and Fisher information; DESIGN.md "Next batch".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from adaptive.cells import CellData
from adaptive.decisions import DecisionRule, Decisions, decide
from stan_free_models.posterior import Posterior

#: observations every open comparison gets before it is ordered by its need
DEFAULT_BURN_IN = 20
#: share of a comparison's estimated remaining need it gets in one batch
DEFAULT_NEED_SHARE = 0.5
#: shown_first codes
SHOW_A, SHOW_B = 0, 1
#: why a cell was chosen (Batch.reason indexes this)
BURN_IN, CLOSEST, OUT_OF_SIGHT, TARGETED, REPEAT = range(5)
REASONS = (
    "burn-in: every open comparison first gets a few judgments",
    "closest to a decision",
    "open, no decision in sight yet; spent after the closer ones",
    "named as a target",
    "prompts ran out: a judged cell again",
)
REASON_CODES = ("burn_in", "closest_to_decision", "open", "targeted", "repeat")


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
        decisions: the decision of every comparison from its own judgments
            (:func:`adaptive.decisions.decide`, all comparisons of all dimensions
            one family).
        judged: (C, P) judgments each cell already has.
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
    decisions: Decisions | None = None
    judged: np.ndarray | None = None

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
        annotatable: (C, P) False where the cell cannot be annotated (a system
            has no response to the prompt, or both responses are identical);
            None = every cell can be.
    """

    available: np.ndarray
    shown_a: np.ndarray
    shown_b: np.ndarray
    annotatable: np.ndarray | None = None

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
        targets: comparison indices to spend on, closed or not; None = every open one.
        exclude: (C, P) cells not to hand out (e.g. the annotator already judged them).
        dimensions: restrict to these dimension indices (None = all).
        burn_in: observations every open comparison gets before it is ordered by its need.
        allow_repeats: serve a judged cell again when a comparison's fresh
            prompts run out. Off by default: with the prompt as the decision's
            unit a repeat informs the model, not the decision; turn it on with
            the judgment as the unit.
        max_per_cell: how often one cell may appear in one batch.
        new_system_judgments: a system with fewer judgments (in a dimension) is
            only paired with ``new_system_opponents`` systems of similar strength.
        new_system_opponents: how many opponents a new system gets.
    """

    size: int
    targets: tuple[int, ...] | None = None
    exclude: np.ndarray | None = None
    dimensions: tuple[int, ...] | None = None
    burn_in: int = DEFAULT_BURN_IN
    allow_repeats: bool = False
    max_per_cell: int = 1
    new_system_judgments: int = 20
    new_system_opponents: int = 3


class Batch(NamedTuple):
    """The chosen cells, in order of choice."""

    comparison: np.ndarray
    prompt: np.ndarray
    shown_first: np.ndarray  # SHOW_A or SHOW_B
    reason: np.ndarray  # index into REASONS / REASON_CODES
    need: np.ndarray  # judgments the comparison likely still needs, before this batch (inf: unknown)

    def __len__(self) -> int:
        return int(self.comparison.shape[0])


class RecommendInfo(NamedTuple):
    """Diagnostics of one recommendation (the caller decides what to keep)."""

    snapshot_version: int
    targets: np.ndarray  # (C,) bool
    decided: np.ndarray  # (C,) bool
    num_candidates: int
    unannotatable: int  # cells that cannot be annotated (missing or identical responses)


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
    rule: DecisionRule | None = None,
) -> Snapshot:
    """Prepare a :class:`Snapshot` (all dimensions stacked) from posterior draws.

    The expected Fisher information of a cell is averaged over ``num_info_draws``
    joint draws of (theta, alpha, b); a prompt a dimension has never seen gets
    prior-drawn item parameters (log alpha ~ N(0, 1), b ~ sorted N(0, 2)), so it
    looks uncertain. Decisions use every comparison's judgments in the order
    given (arrival order) under ``rule``, all dimensions' comparisons one family.
    """
    rng = np.random.default_rng(seed)
    num_p, num_s = num_prompts, num_systems
    means, covs, infos, sds, pa, pb, dims = [], [], [], [], [], [], []
    judged, dec_comp, dec_prompt, dec_signed = [], [], [], []
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
        dec_comp.append(j_comp + sum(len(m) for m in means[:-1]))
        dec_prompt.append(j_prompt)
        dec_signed.append(np.asarray(dd.judgment_signed, np.float64))
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
    decisions = decide(
        np.concatenate(dec_comp),
        np.concatenate(dec_prompt),
        np.concatenate(dec_signed),
        num_c,
        rule,
    )
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
        decisions=decisions,
        judged=judged_all,
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
    rule: DecisionRule | None = None,
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
        rule=rule,
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


def decided_mask(snapshot: Snapshot) -> np.ndarray:
    """(C,) True where the comparison's decision is closed (:mod:`adaptive.decisions`)."""
    return snapshot.decisions.closed


def target_mask(snapshot: Snapshot, request: Request) -> np.ndarray:
    """(C,) the comparisons to spend on: named targets, else every open one."""
    if request.targets is not None:
        mask = np.zeros(snapshot.num_comparisons, bool)
        mask[np.asarray(request.targets, np.int64)] = True
    else:
        mask = ~decided_mask(snapshot)
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
    """(C, P) cells that may be handed out: available, annotatable, of a target comparison."""
    comparison_ok = targets & new_system_mask(snapshot, request)
    mask = (cells.available > 0) & comparison_ok[:, None]
    if cells.annotatable is not None:
        mask &= cells.annotatable
    if request.exclude is not None:
        mask &= ~request.exclude
    return mask


def allocate(
    rng: np.random.Generator,
    decisions: Decisions,
    candidates: np.ndarray,
    judged: np.ndarray,
    size: int,
    *,
    targeted: np.ndarray | None = None,
    burn_in: int = DEFAULT_BURN_IN,
    allow_repeats: bool = True,
    max_per_cell: int = 1,
    available: np.ndarray | None = None,
    need_share: float = DEFAULT_NEED_SHARE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split a batch over the open comparisons, closest to a decision first (LUCB-style).

    Each comparison has a remaining need for this batch: ``burn_in`` minus its
    observations while it has fewer (so every open comparison gets an
    estimate), else the judgments its decision likely still needs
    (``decisions.needed``). One judgment at a time goes to the comparison with
    the smallest remaining need (burn-in first); a comparison whose need is met
    for this batch gets more only when every other need is met, and those with
    no closure in sight (``needed`` infinite) come last, least observed first.
    Within a comparison, a fresh prompt (a cell nobody judged yet, in random
    order) per judgment; judged cells only when fresh ones run out and
    ``allow_repeats``.

    Returns:
        (comparison, prompt, reason, need) of the picks, in order of choice;
        ``reason`` codes index :data:`REASONS`, ``need`` is the comparison's
        estimated remaining judgments before this batch (inf: not in sight).
    """
    num_c, num_p = candidates.shape
    # without repeats a cell appears at most once, however many judgments it may take
    cap = np.full((num_c, num_p), max_per_cell if allow_repeats else 1, np.int64)
    if available is not None:
        cap = np.minimum(cap, available)
    left = np.where(candidates, cap, 0)
    fresh = candidates & (judged == 0)
    # per comparison, its candidate prompts in the order they will be used
    order = []
    for c in range(num_c):
        f = np.flatnonzero(fresh[c])
        r = np.flatnonzero(candidates[c] & ~fresh[c]) if allow_repeats else np.zeros(0, np.int64)
        # repeats: least judged first
        r = r[np.lexsort((rng.random(len(r)), judged[c, r]))]
        order.append(np.concatenate([rng.permutation(f), r]).astype(np.int64))
    pos = np.zeros(num_c, np.int64)
    obs = decisions.num_obs.astype(np.float64)
    needed = decisions.needed.astype(np.float64)
    in_burn = obs < burn_in
    # the need is an estimate: give a comparison part of it per batch, so that a batch
    # does not overshoot a decision that closes sooner than estimated
    need = np.where(in_burn, burn_in - obs, np.ceil(needed * need_share))
    stage = np.where(in_burn, 0, np.where(np.isfinite(needed), 1, 2)).astype(np.int64)
    given = np.zeros(num_c, np.float64)
    targeted = np.zeros(num_c, bool) if targeted is None else targeted
    comps, prompts, reasons, needs = [], [], [], []
    tie_break = rng.random(num_c)
    picked: set[tuple[int, int]] = set()
    while len(comps) < size:
        # drop comparisons with nothing left to serve
        has = np.array([pos[c] < len(order[c]) for c in range(num_c)])
        if not has.any():
            break
        remaining = need - given
        met = (stage < 2) & (remaining <= 0)
        # key: burn-in, then finite needs, then more of the closest (needs met for this
        # batch), then those with no decision in sight
        tier = np.where(met, 2, np.where(stage == 2, 3, stage))
        within = np.where(stage == 2, obs + given, np.where(met, given, remaining))
        key = np.lexsort((tie_break, within, tier, ~has))
        c = int(key[0])
        p = int(order[c][pos[c]])
        left[c, p] -= 1
        if left[c, p] <= 0:
            pos[c] += 1
        repeat = judged[c, p] > 0 or (c, p) in picked
        picked.add((c, p))
        if targeted[c]:
            reason = TARGETED
        elif repeat:
            reason = REPEAT
        else:
            reason = (BURN_IN, CLOSEST, CLOSEST, OUT_OF_SIGHT)[int(tier[c])]
        comps.append(c)
        prompts.append(p)
        reasons.append(reason)
        needs.append(float(needed[c]))
        given[c] += 1.0
        if stage[c] == 0 and given[c] >= need[c]:
            # burn-in filled for this batch: its need is unknown until the data arrive
            stage[c] = 3
    return (
        np.asarray(comps, np.int64),
        np.asarray(prompts, np.int64),
        np.asarray(reasons, np.int64),
        np.asarray(needs, np.float64),
    )


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
    """The next batch: open comparisons only, closest to a decision first, fresh prompts.

    Deterministic: the same snapshot, cell state, request and key give the
    same batch. Derive the key as ``jax.random.fold_in(base_key, snapshot.version)``.

    Args:
        rng_key: a JAX PRNG key (or an int seed).
        snapshot: from :func:`snapshot_from_posteriors` or :func:`snapshot_from_draws`.
        cells: the cell state.
        request: the request.

    Returns:
        The batch and a :class:`RecommendInfo`.
    """
    rng = _numpy_rng(rng_key)
    targets = target_mask(snapshot, request)
    candidates = candidate_mask(snapshot, cells, request, targets)
    judged = snapshot.judged if snapshot.judged is not None else np.zeros_like(cells.available)
    targeted = np.zeros(snapshot.num_comparisons, bool)
    if request.targets is not None:
        targeted[np.asarray(request.targets, np.int64)] = True
    comp, prompt, reason, need = allocate(
        rng,
        snapshot.decisions,
        candidates,
        judged,
        int(request.size),
        targeted=targeted,
        burn_in=request.burn_in,
        allow_repeats=request.allow_repeats,
        max_per_cell=request.max_per_cell,
        available=cells.available,
    )
    order = assign_order(rng, cells, comp, prompt)
    batch = Batch(comp, prompt, order, reason, need)
    info = RecommendInfo(
        snapshot_version=snapshot.version,
        targets=targets,
        decided=decided_mask(snapshot),
        num_candidates=int((candidates & ((judged == 0) | request.allow_repeats)).sum()),
        unannotatable=int((~cells.annotatable).sum()) if cells.annotatable is not None else 0,
    )
    return batch, info
