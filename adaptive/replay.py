"""Judge an annotation policy by effort and outcome, replayed on a fully logged campaign.

Leopard/White (Gonzalez-Brenes & Huang): an adaptive policy is judged by the
effort it spends and the outcome it reaches, measured counterfactually on
logged data. Here:

* the *log* is every judgment of one dimension of a campaign;
* a *policy* asks for cells (comparison, prompt); it may only ask for
  judgments that exist in the log: a request draws, without replacement, one
  logged judgment of that cell (in an order fixed by the seed), and an
  exhausted cell cannot be chosen;
* after every batch the model is re-estimated (MAP + Laplace, one compiled
  function for the whole replay: the fit always sees every logged judgment,
  the unused ones with weight 0; cold-started by default, see
  :class:`ReplayConfig` ``warm_start``);
* *effort* = judgments used; *outcome* = share of comparisons whose verdict
  (sign and significance by the standard 95% interval) matches the verdict
  of the same model and method on the full log.

Policies (all ``policy(rng, snapshot, available, size, step) -> (comparison, prompt)``):

* ``adaptive``: :func:`adaptive.recommend.recommend` (undecided comparisons,
  information-greedy with fantasised updates, 10% calibration);
* ``uniform``: cells at random;
* ``round_robin``: cycles through the comparisons, a random cell of each;
* ``arena``: Chatbot Arena's active sampling (Chiang et al. 2024, eq. 9):
  comparison c with probability proportional to the expected reduction of
  its interval width, sqrt(S_c / n_c) - sqrt(S_c / (n_c + 1)) with
  S_c = n_c var_c, then a random cell of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import jax
import numpy as np

from adaptive.cells import CellData
from adaptive.fitting import model_data
from adaptive.recommend import (
    DECIDE_Z,
    CellState,
    Request,
    Snapshot,
    decided_mask,
    recommend,
    snapshot_from_posteriors,
)
from adaptive.significance import summarize_draws
from stan_free_models.inference import fit_laplace
from stan_free_models.posterior import Posterior

POLICIES = ("adaptive", "uniform", "round_robin", "arena")

PolicyFn = Callable[[np.random.Generator, Snapshot, np.ndarray, int, int], tuple]


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay.

    Attributes:
        batch_size: judgments per batch (the model is re-fitted after each).
        budget: stop after this many judgments (default: the whole log).
        parameterization: ``comparison`` (paper) or ``system``.
        thresholds: ``free`` (paper) or ``symmetric`` (b_c = -b_(K-c), so that
            theta = 0 means "no preference" in every comparison).
        num_draws: Laplace draws per fit (verdicts use their 95% interval).
        fit_seed: key of the Laplace draws (the same for every fit, so that
            the verdict at full data equals the reference verdict).
        explore_share, decide_z: of the adaptive policy.
        max_iter: L-BFGS iterations per fit.
        warm_start: start each fit from the previous mode. Off by default: on
            ai_teacher_test the MAP is not unique, and a fit of the full log
            warm-started from a 30% fit converged (gradient norm < 1e-3) to
            thetas (4.18, 2.90, 0.85) where the cold fit gives (-0.06, 3.26,
            4.80), so warm-started replays could disagree with the reference
            even on the whole log. Cold starts from the default point make each
            verdict a function of the data only, as the reference's is.
    """

    batch_size: int = 200
    budget: int | None = None
    parameterization: str = "comparison"
    thresholds: str = "free"
    num_draws: int = 1000
    fit_seed: int = 0
    explore_share: float = 0.1
    decide_z: float = DECIDE_Z
    max_iter: int = 500
    warm_start: bool = False

    def __post_init__(self) -> None:
        if self.thresholds not in ("free", "symmetric"):
            raise ValueError(f"thresholds must be 'free' or 'symmetric', not {self.thresholds!r}")


class ReplayTrace(NamedTuple):
    """One policy, one seed: the state after every batch."""

    policy: str
    seed: int
    judgments: np.ndarray  # (T,) judgments used so far
    agreement: np.ndarray  # (T,) share of comparisons whose verdict matches the reference
    num_decided: np.ndarray  # (T,) comparisons decided by the recommender's rule


# ------------------------------------------------------------------- fitting


def verdicts(posterior: Posterior) -> np.ndarray:
    """(C,) -1 (A significantly better), 0 (not significant), +1 (B significantly better)."""
    stats = summarize_draws(posterior.flat("theta"))
    return np.where(stats["significant"], np.sign(stats["mean"]), 0).astype(np.int64)


class Fitter:
    """Re-fits one dimension's log on a subset of its judgments (one compiled shape)."""

    def __init__(self, cells: CellData, config: ReplayConfig):
        self.cells = cells
        self.config = config
        self.data = model_data(
            cells, likelihood="judgment", parameterization=config.parameterization
        )
        self.key = jax.random.PRNGKey(config.fit_seed)

    def fit(self, used: np.ndarray, init: dict | None = None) -> Posterior:
        weight = (self.data.weight * used).astype(np.float32)
        data = replace(self.data, weight=weight)
        kwargs = dict(
            rng_key=self.key,
            num_draws=self.config.num_draws,
            symmetric_thresholds=self.config.thresholds == "symmetric",
        )
        init = init if self.config.warm_start else None
        posterior = fit_laplace(data, init=init, max_iter=self.config.max_iter, **kwargs)
        if init is not None and not _finite(posterior):
            # a warm start can land where an item's Hessian block is not positive
            # definite (non-finite draws); a cold start from the default init recovers
            posterior = fit_laplace(data, init=None, max_iter=self.config.max_iter, **kwargs)
        if not _finite(posterior):
            raise RuntimeError("the Laplace fit gave non-finite draws")
        return posterior


def _finite(posterior: Posterior) -> bool:
    return bool(np.isfinite(posterior.draws["theta"]).all())


def reference_verdicts(cells: CellData, config: ReplayConfig) -> np.ndarray:
    """Verdicts of the same model and method on the full log."""
    return verdicts(Fitter(cells, config).fit(np.ones(cells.num_judgments, bool)))


# ------------------------------------------------------------------- policies


def _random_cells(
    rng: np.random.Generator, available: np.ndarray, size: int, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``size`` distinct available cells at random (more per cell only when cells run out)."""
    mask = available > 0
    if rows is not None:
        mask &= np.isin(np.arange(available.shape[0]), rows)[:, None]
    flat = np.flatnonzero(mask)
    picks = rng.permutation(flat)[:size]
    left = size - len(picks)
    if left > 0:
        extra = np.repeat(flat, np.maximum(available.ravel()[flat] - 1, 0))
        picks = np.concatenate([picks, rng.permutation(extra)[:left]])
    return np.unravel_index(picks.astype(np.int64), available.shape)


def uniform_policy(rng, snapshot, available, size, step):
    """Cells at random."""
    return _random_cells(rng, available, size)


def round_robin_policy(rng, snapshot, available, size, step):
    """Cycle through the comparisons (continuing where the last batch stopped)."""
    num_c = available.shape[0]
    left = available.copy()
    comps, prompts = [], []
    turn = step * size
    stalls = 0
    while len(comps) < size and stalls < num_c:
        c = turn % num_c
        turn += 1
        options = np.flatnonzero(left[c] > 0)
        if len(options) == 0:
            stalls += 1
            continue
        stalls = 0
        # prefer a prompt of this comparison not taken yet in this batch
        fresh = options[left[c, options] == available[c, options]]
        p = int(rng.choice(fresh if len(fresh) else options))
        left[c, p] -= 1
        comps.append(c)
        prompts.append(p)
    return np.asarray(comps, np.int64), np.asarray(prompts, np.int64)


def arena_policy(rng, snapshot, available, size, step, counts=None):
    """Chatbot Arena's rule: comparisons in proportion to the expected reduction of interval width."""
    var = np.diag(snapshot.theta_cov)
    n = np.maximum(counts if counts is not None else np.zeros_like(var), 1.0)
    width_gain = np.sqrt(var) * (1.0 - np.sqrt(n / (n + 1.0)))
    open_rows = (available > 0).any(axis=1)
    weights = np.where(open_rows, width_gain, 0.0)
    if weights.sum() <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    draws = rng.choice(len(weights), size=size, p=weights / weights.sum())
    left = available.copy()
    comps, prompts = [], []
    for c in draws:
        options = np.flatnonzero(left[c] > 0)
        if len(options) == 0:
            continue
        fresh = options[left[c, options] == available[c, options]]
        p = int(rng.choice(fresh if len(fresh) else options))
        left[c, p] -= 1
        comps.append(int(c))
        prompts.append(p)
    return np.asarray(comps, np.int64), np.asarray(prompts, np.int64)


def adaptive_policy(config: ReplayConfig) -> PolicyFn:
    """The recommender as a replay policy (new-system pairing off: the log fixes the pairs)."""

    def policy(rng, snapshot, available, size, step):
        state = CellState(
            available=available,
            shown_a=np.zeros_like(available),
            shown_b=np.zeros_like(available),
        )
        request = Request(
            size=size,
            explore_share=config.explore_share,
            decide_z=config.decide_z,
            new_system_judgments=0,
        )
        batch, _ = recommend(int(rng.integers(2**31)), snapshot, state, request)
        return batch.comparison, batch.prompt

    return policy


# ------------------------------------------------------------------- replay


def replay(
    seed: int,
    cells: CellData,
    policy: str,
    reference: np.ndarray,
    config: ReplayConfig = ReplayConfig(),
    *,
    fitter: Fitter | None = None,
) -> ReplayTrace:
    """Replay one policy on one dimension's log.

    Args:
        seed: fixes the order in which each cell's logged judgments are drawn
            and the policy's randomness.
        cells: the full log of one dimension (no redundancy grouping).
        policy: one of :data:`POLICIES`.
        reference: (C,) verdicts on the full log (:func:`reference_verdicts`).
        config: the replay settings.
        fitter: reuse a :class:`Fitter` of these cells.

    Returns:
        The :class:`ReplayTrace` (one entry per batch, the first at 0 judgments).
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
    fitter = fitter or Fitter(cells, config)
    rng = np.random.default_rng([seed, POLICIES.index(policy)])
    num_c, num_p = cells.num_comparisons, len(cells.prompts)
    # each cell's logged judgments in a seeded random order (a stack to pop from)
    cell_key = cells.judgment_comparison * num_p + cells.judgment_prompt
    order = rng.permutation(cells.num_judgments)
    order = order[np.argsort(cell_key[order], kind="stable")]
    starts = np.searchsorted(cell_key[order], np.arange(num_c * num_p))
    available = np.bincount(cell_key, minlength=num_c * num_p).reshape(num_c, num_p)
    taken = np.zeros(num_c * num_p, np.int64)
    used = np.zeros(cells.num_judgments, bool)
    budget = min(config.budget or cells.num_judgments, cells.num_judgments)
    fns: dict[str, PolicyFn] = {
        "adaptive": adaptive_policy(config),
        "uniform": uniform_policy,
        "round_robin": round_robin_policy,
    }

    posterior = fitter.fit(used)

    def snap(step: int) -> Snapshot:
        return snapshot_from_posteriors([posterior], [cells], seed=seed + step, observed=[used])[0]

    snapshot = snap(0)
    judgments = [0]
    agreement = [float(np.mean(verdicts(posterior) == reference))]
    decided = [int(decided_mask(snapshot, config.decide_z).sum())]
    step = 0
    while used.sum() < budget:
        size = int(min(config.batch_size, budget - used.sum()))
        if policy == "arena":
            counts = np.bincount(cells.judgment_comparison[used], minlength=num_c)
            comp, prompt = arena_policy(rng, snapshot, available, size, step, counts=counts)
        else:
            comp, prompt = fns[policy](rng, snapshot, available, size, step)
        if len(comp) == 0:
            break  # the policy asks for nothing more: every target is decided or exhausted
        for c, p in zip(np.asarray(comp).tolist(), np.asarray(prompt).tolist()):
            k = c * num_p + p
            if available[c, p] <= 0:
                raise RuntimeError(f"policy {policy!r} asked for an exhausted cell ({c}, {p})")
            used[order[starts[k] + taken[k]]] = True
            taken[k] += 1
            available[c, p] -= 1
        posterior = fitter.fit(used, init=posterior.mode)
        step += 1
        snapshot = snap(step)
        judgments.append(int(used.sum()))
        agreement.append(float(np.mean(verdicts(posterior) == reference)))
        decided.append(int(decided_mask(snapshot, config.decide_z).sum()))
    return ReplayTrace(
        policy, seed, np.asarray(judgments), np.asarray(agreement), np.asarray(decided)
    )


# ------------------------------------------------------------------- summaries


def curve(traces: Sequence[ReplayTrace], batch_size: int, total: int) -> list[dict]:
    """Mean and sd of agreement over seeds on the common grid 0, B, 2B, ..., total.

    A trace that stopped early (its policy asked for nothing more) keeps its
    last agreement for the rest of the grid.
    """
    grid = np.unique(np.concatenate([np.arange(0, total, batch_size), [total]]))
    values = np.stack([_on_grid(t, grid) for t in traces])
    rows = []
    for g, col in zip(grid, values.T):
        rows.append(
            {
                "policy": traces[0].policy,
                "judgments": int(g),
                "agreement_mean": float(col.mean()),
                "agreement_sd": float(col.std(ddof=1)) if len(col) > 1 else 0.0,
                "num_seeds": len(col),
            }
        )
    return rows


def _on_grid(trace: ReplayTrace, grid: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(trace.judgments, grid, side="right") - 1
    return trace.agreement[np.clip(idx, 0, len(trace.agreement) - 1)]


def judgments_to_reach(trace: ReplayTrace, level: float = 0.95) -> int | None:
    """Judgments after which agreement is >= level and stays so (None: never)."""
    below = np.flatnonzero(trace.agreement < level - 1e-12)
    if len(below) == 0:
        return int(trace.judgments[0])
    if below[-1] + 1 >= len(trace.agreement):
        return None
    return int(trace.judgments[below[-1] + 1])


def headline(traces: Sequence[ReplayTrace], level: float = 0.95, total: int = 0) -> dict:
    """Judgments a policy needs to reach ``level`` agreement (and keep it): mean and sd over seeds.

    A seed that never reaches it counts as the whole log (``total``), and is reported.
    """
    reached = [judgments_to_reach(t, level) for t in traces]
    values = np.array([total if r is None else r for r in reached], dtype=float)
    return {
        "policy": traces[0].policy,
        "level": level,
        "judgments_mean": float(values.mean()),
        "judgments_sd": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
        "judgments_min": int(values.min()),
        "judgments_max": int(values.max()),
        "num_seeds": len(values),
        "num_not_reached": int(sum(r is None for r in reached)),
        "share_of_log": float(values.mean() / total) if total else float("nan"),
    }
