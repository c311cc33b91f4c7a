"""Hybrid decisions of a logged campaign: the human judgments in arrival order, a judge's verdicts.

:mod:`adaptive.judge.hybrid` decides comparisons whose human judgments are drawn by its own routing.
Here the human judgments come from a log (a file, the service's store), so the rates at which
cells were sent to humans are not the hybrid's: each comparison's human observations, in the
order they arrived, are taken as **uniform draws of the cells in its design** (the cells the
judge gave a verdict on), each with rate 1 (or with the rate recorded when a cell was served
by the hybrid's routing, ``rate``). Under that assumption ``Z = H + (Y - h[k]) / rate`` has
conditional mean Δ at every step whatever the judge, and :func:`adaptive.judge.hybrid.fold`'s
confidence sequence covers Δ at every look (each observation is a look). A log that judges
each cell once in random order draws without replacement: sums of such draws are more
concentrated than with replacement at any fixed look (Hoeffding 1963); at every look it is
measured on null campaigns (tests/doors/test_hybrid_doors.py), not proved.

A comparison without any verdict has a design of one category (``tie``): h is then the
humans' running mean, Z = Y, and its decision is the humans' own (the hybrid's sequence
without a judge).

Numbers only (integer-indexed arrays); names live in :mod:`evalset.hybrid`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from adaptive.judge.hybrid import VERDICTS, HybridConfig, close, fold, plan, report, start
from adaptive.stopping.rule import DEFAULT_MIXTURE

#: the verdict code a comparison without verdicts puts all of its design in
NO_VERDICT = VERDICTS.index("tie")
#: how the service's next batch routes cells to humans (adaptive.judge.hybrid's routing: sqrt of the
#: residual second moment, 30% of the cells at random)
ROUTING = HybridConfig(routing=True)


class HybridDecisions(NamedTuple):
    """Decisions of R comparisons from their logged human judgments ((R,) arrays)."""

    outcome: np.ndarray  # codes of adaptive.stopping.decisions (UNDECIDED, B_BETTER, ...)
    closed_at: np.ndarray  # the comparison's human judgments (the cost) when it closed; 0: open
    estimate: np.ndarray  # Δ estimate (mean of the Z), nan without an observation
    low: np.ndarray  # the confidence sequence of Δ (running intersection)
    high: np.ndarray
    num_used: np.ndarray  # human observations the decision used
    agreement: np.ndarray  # share of those observations equal to the judge's verdict
    effective_humans: np.ndarray  # humans alone would need this many for the same precision
    judge_weight: np.ndarray  # slope of the calibration on the verdict's sign (0: ignored)
    next_rates: np.ndarray  # (R, K) the routing's rates for the next cell sent to humans
    log_eb: np.ndarray  # the sign e-processes now (against "B not better", "A not better")
    log_ea: np.ndarray


def design_shares(
    cell_comparison: np.ndarray, cell_verdict: np.ndarray, num_comparisons: int
) -> np.ndarray:
    """(R, K) share of each comparison's judged cells per verdict (no cell: all ``tie``)."""
    K = len(VERDICTS)
    key = np.asarray(cell_comparison, np.int64) * K + np.asarray(cell_verdict, np.int64)
    counts = np.bincount(key, minlength=num_comparisons * K).reshape(num_comparisons, K)
    total = counts.sum(axis=1, keepdims=True)
    share = np.where(total > 0, counts / np.maximum(total, 1), 0.0)
    share[total[:, 0] == 0, NO_VERDICT] = 1.0
    return share


def decide_hybrid(
    comparison: np.ndarray,
    verdict: np.ndarray,
    signed: np.ndarray,
    cost: np.ndarray,
    share: np.ndarray,
    *,
    alpha_each: float,
    margin: float,
    config: HybridConfig | None = None,
    rates: np.ndarray | None = None,
    routing: HybridConfig = ROUTING,
    mixture: float = DEFAULT_MIXTURE,
) -> HybridDecisions:
    """Each comparison's hybrid decision, its human observations folded in arrival order.

    Args:
        comparison: (N,) comparison index of each human observation (arrival order).
        verdict: (N,) the judge's verdict code on the observation's cell, oriented as the
            comparison (:data:`adaptive.judge.hybrid.VERDICTS`).
        signed: (N,) the human judgment: +1 B, -1 A, 0 tie.
        cost: (N,) the comparison's human judgments so far at this observation (all of them,
            used or not: what ``closed_at`` reports).
        share: (R, K) the design (:func:`design_shares`).
        alpha_each: each comparison's error bound (two-sided).
        margin: equivalence when the sequence fits in (-margin, margin).
        config: how the judge is used (default: uniform rates, :class:`HybridConfig`).
        rates: (N, K) the rates over uniform each observation's cell was drawn with, per
            verdict, as recorded when it was served by the routing (a row of ones: not
            routed, a uniform draw); default: all ones.
        routing: the routing whose rates ``next_rates`` gives.
        mixture: a of the sign e-processes' Beta(a, a) prior (the rule's).

    Returns:
        :class:`HybridDecisions`.
    """
    config = config or HybridConfig()
    if config.routing:
        raise ValueError("a log's rates are recorded (rates), not the config's routing")
    comparison = np.asarray(comparison, np.int64)
    R = share.shape[0]
    order = np.argsort(comparison, kind="stable")
    counts = np.bincount(comparison, minlength=R)
    T = int(counts.max()) if counts.size else 0
    pos = np.arange(comparison.shape[0]) - np.repeat(np.cumsum(counts) - counts, counts)
    grid_v = np.zeros((R, T), np.int64)
    grid_y = np.zeros((R, T))
    # one column at least: closed_at reads column 0 of a comparison that never closed, also
    # when no comparison of the family has an observation (T = 0)
    grid_cost = np.zeros((R, max(T, 1)), np.int64)
    rows = comparison[order]
    grid_v[rows, pos] = np.asarray(verdict, np.int64)[order]
    grid_y[rows, pos] = np.asarray(signed, np.float64)[order]
    grid_cost[rows, pos] = np.asarray(cost, np.int64)[order]
    K = share.shape[1]
    grid_rate = np.ones((R, T, K))
    if rates is not None:
        grid_rate[rows, pos] = np.asarray(rates, np.float64)[order]
    active = np.arange(T)[None, :] < counts[:, None]
    state = start(share, alpha_each, mixture)
    for t in range(T):
        p = plan(state, config, grid_rate[:, t] if rates is not None else None)
        state = fold(state, p, grid_v[:, t], grid_y[:, t], active[:, t])
        state = close(state, margin, config.sign)
    rep = report(state, config)
    obs = state.closed_at  # the observation that closed it (1-based; 0 open)
    closed_at = np.where(obs > 0, grid_cost[np.arange(R), np.maximum(obs - 1, 0)], 0)
    return HybridDecisions(
        state.outcome,
        closed_at,
        rep.estimate,
        state.low.copy(),
        state.high.copy(),
        state.n.copy(),
        rep.agreement,
        rep.effective_humans,
        rep.judge_weight,
        plan(state, routing).rel,
        rep.log_eb,
        rep.log_ea,
    )


def draw_routed(
    rng: np.random.Generator, rates: np.ndarray, verdicts: np.ndarray, eligible: np.ndarray
) -> int:
    """One cell of a comparison for a human, drawn by the hybrid's routing; -1 if none can be.

    The verdict k is drawn with probability share[k] * rates[k] (share: the design's, so the
    cell's rate over a uniform draw is rates[k], the number recorded with it), then a cell
    uniformly among the ``eligible`` cells of verdict k (those this annotator may be served).
    When no eligible cell has the drawn verdict the draw gives up (-1) rather than change the
    rates: the caller serves its own choice, which decisions then take as a uniform draw.

    Args:
        rng: numpy generator.
        rates: (K,) :attr:`HybridDecisions.next_rates` of the comparison.
        verdicts: (M,) verdict code of each cell of the comparison's design.
        eligible: (M,) the cells that may be served.
    """
    K = rates.shape[0]
    share = np.bincount(verdicts, minlength=K) / max(verdicts.shape[0], 1)
    prob = share * rates
    k = int(rng.choice(K, p=prob / prob.sum()))
    candidates = np.flatnonzero((verdicts == k) & eligible)
    return int(rng.choice(candidates)) if candidates.size else -1
