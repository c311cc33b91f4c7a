"""Run hybrid and human-only decisions on populations of cells: simulated campaigns and logs.

A :class:`Population` is every comparison's cells with the judge's verdict on each and the
distribution of a human judgment there (a simulation's truth, or a log's empirical
frequencies: drawing from them is drawing one of the cell's logged judgments at random).
:func:`run` sends humans to cells as :func:`adaptive.judge.hybrid.plan` says (uniform, or routed by
the judge's verdict), one judgment per open comparison per step, and looks at the decisions
after every ``batch`` of them; a comparison stops when it closes or spends its ``budget``.
:func:`run_human_only` gives the product's human-only decisions (:mod:`adaptive.stopping.decisions`) on
uniform draws of the same cells. Human judgments until every comparison closes is the sum of
what the comparisons spent.

Logs are resampled with replacement, so the estimand of a replay is the full log's own Δ
(the mean over its cells of each cell's mean signed judgment), and a *reversal* is a
decision against that sign.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from adaptive.judge.hybrid import (
    HUMAN_ONLY,
    VERDICTS,
    HybridConfig,
    HybridReport,
    close,
    fold,
    plan,
    report,
    start,
)
from adaptive.stopping.decisions import A_BETTER, B_BETTER, EQUIVALENT, UNDECIDED
from adaptive.stopping.evidence import SPREAD_TOL
from adaptive.stopping.rule import DEFAULT_LEVEL, DEFAULT_MARGIN, DEFAULT_MIXTURE, Correction

#: the policies a hybrid replay compares: ``human_only`` is the product's human-only rule
#: (:func:`run_human_only`), the others :func:`run` with the judge used as configured
HYBRID_POLICIES: dict[str, HybridConfig | None] = {
    "human_only": None,
    "hybrid_uniform": HybridConfig(),
    "hybrid_routed": HybridConfig(routing=True),
}
#: the hybrid's machinery without a judge (Z = Y), for comparisons with the rows before
NO_JUDGE = HUMAN_ONLY


class Population(NamedTuple):
    """Cells of R comparisons (flattened, M cells), sorted by (comparison, verdict)."""

    cell_row: np.ndarray  # (M,)
    cell_verdict: np.ndarray  # (M,) judge verdict code (index into VERDICTS)
    cell_prob: np.ndarray  # (M, 3) P(human says A, tie, B) on the cell
    num_rows: int
    num_verdicts: int
    budget: np.ndarray  # (R,) human judgments each comparison may spend

    @property
    def counts(self) -> np.ndarray:
        """(R, K) cells per verdict."""
        key = self.cell_row * self.num_verdicts + self.cell_verdict
        return np.bincount(key, minlength=self.num_rows * self.num_verdicts).reshape(
            self.num_rows, self.num_verdicts
        )

    @property
    def truth(self) -> np.ndarray:
        """(R,) Δ: the mean over each comparison's cells of P(B) - P(A)."""
        net = self.cell_prob[:, 2] - self.cell_prob[:, 0]
        total = np.bincount(self.cell_row, weights=net, minlength=self.num_rows)
        mean = total / np.bincount(self.cell_row, minlength=self.num_rows)
        # a mean within rounding of 0 is 0 (mirrored cells cancel to 1e-17, which has no sign)
        return np.where(np.abs(mean) <= SPREAD_TOL, 0.0, mean)


def population(
    cell_row, cell_verdict, cell_prob, num_rows: int, budget, num_verdicts: int = 3
) -> Population:
    """A :class:`Population`, cells sorted by (row, verdict)."""
    cell_row = np.asarray(cell_row, np.int64)
    cell_verdict = np.asarray(cell_verdict, np.int64)
    order = np.lexsort((cell_verdict, cell_row))
    budget = np.broadcast_to(np.asarray(budget, np.int64), (num_rows,)).copy()
    prob = np.asarray(cell_prob, np.float64)[order]
    return Population(cell_row[order], cell_verdict[order], prob, num_rows, num_verdicts, budget)


class RunResult(NamedTuple):
    outcome: np.ndarray  # (R,)
    used: np.ndarray  # (R,) human judgments spent
    closed_at: np.ndarray  # (R,) 0 while open
    report: HybridReport | None  # None: the human-only rule (no judge to report on)


def run(
    seed: int,
    pop: Population,
    config: HybridConfig,
    *,
    alpha_each: float,
    margin: float,
    batch: int = 10,
) -> RunResult:
    """Humans judge cells of every open comparison until it closes or spends its budget."""
    rng = np.random.default_rng(seed)
    counts = pop.counts
    R, K = counts.shape
    starts = np.concatenate([[0], np.cumsum(counts.reshape(-1))[:-1]]).reshape(R, K)
    share = counts / counts.sum(axis=1, keepdims=True)
    state = start(share, alpha_each)
    rows = np.arange(R)
    cum_human = np.cumsum(pop.cell_prob, axis=1)
    step = 0
    while True:
        active = (state.outcome == UNDECIDED) & (state.n < pop.budget)
        if not active.any():
            break
        p = plan(state, config)
        u = rng.random((R, 3))
        cum = np.cumsum(p.prob, axis=1)
        verdict = np.minimum((u[:, :1] * cum[:, -1:] > cum).sum(axis=1), K - 1)
        # a verdict the comparison has no cell of has probability 0; guard rounding
        empty = counts[rows, verdict] == 0
        if empty.any():
            verdict = np.where(empty, np.argmax(counts, axis=1), verdict)
        cell = starts[rows, verdict] + (u[:, 1] * counts[rows, verdict]).astype(np.int64)
        y = (u[:, 2:3] > cum_human[cell]).sum(axis=1).clip(0, 2) - 1.0
        state = fold(state, p, verdict, y, active)
        step += 1
        if step % batch == 0:
            state = close(state, margin, config.sign)
    state = close(state, margin, config.sign)
    return RunResult(state.outcome, state.n.copy(), state.closed_at, report(state, config))


def run_human_only(
    seed: int,
    pop: Population,
    *,
    alpha_each: float,
    margin: float,
    batch: int = 10,
    mixture: float = DEFAULT_MIXTURE,
) -> RunResult:
    """The product's human-only decisions (:mod:`adaptive.stopping.decisions`) on uniform draws of cells.

    Each comparison's human judgments are uniform draws of its cells with replacement, so the
    rule's unit is ``judgment`` (each judgment an independent draw of a random cell: Δ over
    these cells, the hybrid's estimand); its level ``alpha_each`` (``correction="none"`` at
    the Bonferroni share is the same rule). :func:`adaptive.stopping.decisions.update` closes at the
    first judgment where a test passes; a comparison spends the whole batch of ``batch`` it
    closed in (as :func:`run`, which looks after every batch and whose sign e-processes close
    on their running maximum), or its budget.
    """
    from adaptive.stopping.decisions import start as start_decisions
    from adaptive.stopping.decisions import update
    from adaptive.stopping.rule import DecisionRule

    rng = np.random.default_rng(seed)
    R = pop.num_rows
    counts = np.bincount(pop.cell_row, minlength=R)
    first = np.cumsum(counts) - counts
    cum_human = np.cumsum(pop.cell_prob, axis=1)
    rule = DecisionRule(
        alpha=alpha_each,
        margin=margin,
        unit="judgment",
        correction=Correction.NONE,
        mixture=mixture,
    )
    state = start_decisions(R, int(counts.max()), rule)
    fed = np.zeros(R, np.int64)
    chunk = 8 * batch
    while True:
        idx = np.flatnonzero((state.outcome == UNDECIDED) & (fed < pop.budget))
        if idx.size == 0:
            break
        size = np.minimum(chunk, pop.budget[idx] - fed[idx])
        comp = np.repeat(idx, size)
        local = (rng.random(comp.shape[0]) * counts[comp]).astype(np.int64)
        u = rng.random(comp.shape[0])
        y = (u[:, None] > cum_human[first[comp] + local]).sum(axis=1).clip(0, 2) - 1.0
        state = update(state, comp, local, y)
        fed[idx] += size
        chunk *= 2  # few updates: a comparison's statistics run on after it closes
    closed = state.outcome != UNDECIDED
    spent = np.minimum(-(-state.closed_at // batch) * batch, pop.budget)
    used = np.where(closed, spent, pop.budget)
    return RunResult(state.outcome.copy(), used, np.where(closed, spent, 0), None)


def wrong(outcome: np.ndarray, truth: np.ndarray, margin: float) -> np.ndarray:
    """(R,) True where a decision contradicts the truth (a sign against Δ's, or equivalence
    while |Δ| >= margin)."""
    sign = np.sign(truth)
    return (
        ((outcome == B_BETTER) & (sign <= 0))
        | ((outcome == A_BETTER) & (sign >= 0))
        | ((outcome == EQUIVALENT) & (np.abs(truth) >= margin))
    )


# --------------------------------------------------------------------- logs


def verdict_codes(
    winner: Sequence[str], inconsistent: Sequence[object] | None = None
) -> np.ndarray:
    """Verdict codes (VERDICTS) from a judgments file's ``winner`` (a / b / tie), oriented as given;
    ties the judge gave inconsistently (``inconsistent`` true) get a code of their own."""
    code = np.array([{"a": 0, "tie": 1, "b": 2}[w] for w in winner], np.int64)
    if inconsistent is not None:
        flag = np.array([str(x).lower() in ("true", "1") for x in inconsistent])
        code = np.where(flag & (code == 1), VERDICTS.index("tie (inconsistent)"), code)
    return code


class LogPopulation(NamedTuple):
    population: Population
    names: list[tuple[str, str, str]]  # (dimension, system_a, system_b) per row
    human_judgments: np.ndarray  # (R,) judgments in the log


def log_population(humans: pl.DataFrame, judge: pl.DataFrame) -> LogPopulation:
    """Cells with human judgments, each with the judge's verdict (cells it did not judge are left
    out), the human judgments' frequencies on it, and the log's size as each budget."""
    key = ["dimension", "item_id", "system_a", "system_b"]

    def oriented(frame: pl.DataFrame, value: str) -> pl.DataFrame:
        swap = pl.col("system_a") > pl.col("system_b")
        flip = {"a": "b", "b": "a", "tie": "tie"}
        return (
            frame.with_columns(
                pl.when(swap).then(pl.col("system_b")).otherwise(pl.col("system_a")).alias("sa"),
                pl.when(swap).then(pl.col("system_a")).otherwise(pl.col("system_b")).alias("sb"),
                pl.when(swap)
                .then(pl.col("winner").replace_strict(flip))
                .otherwise(pl.col("winner"))
                .alias(value),
            )
            .drop("system_a", "system_b", "winner")
            .rename({"sa": "system_a", "sb": "system_b"})
        )

    h = oriented(humans.select([*key, "winner"]), "human")
    cols = [*key, "winner"] + (["inconsistent"] if "inconsistent" in judge.columns else [])
    j = oriented(judge.select(cols), "verdict").unique(subset=key, keep="first")
    counts = h.group_by([*key, "human"]).len().pivot(on="human", index=key, values="len")
    for side in ("a", "tie", "b"):
        if side not in counts.columns:
            counts = counts.with_columns(pl.lit(0).alias(side))
    cells = counts.fill_null(0).join(j, on=key, how="inner").sort(key)
    comp = cells.select(["dimension", "system_a", "system_b"])
    names = sorted(set(comp.iter_rows()))
    index = {n: i for i, n in enumerate(names)}
    row = np.array([index[r] for r in comp.iter_rows()], np.int64)
    freq = cells.select(["a", "tie", "b"]).to_numpy().astype(np.float64)
    total = freq.sum(axis=1)
    incons = cells["inconsistent"].to_list() if "inconsistent" in cells.columns else None
    verdict = verdict_codes(cells["verdict"].to_list(), incons)
    budget = np.bincount(row, weights=total, minlength=len(names)).astype(np.int64)
    pop = population(row, verdict, freq / total[:, None], len(names), budget, len(VERDICTS))
    return LogPopulation(pop, names, budget)


def replay_log(
    seeds: Sequence[int],
    logs: LogPopulation,
    policies: Sequence[str],
    *,
    alpha: float = DEFAULT_LEVEL,
    margin: float = DEFAULT_MARGIN,
    batch: int = 10,
) -> list[dict]:
    """Each policy over seeds on a log: human judgments, comparisons closed, reversals (one row
    per policy, the names ``evalset replay --judge-data`` prints).

    All seeds run at once (the rows of one population repeated), each seed a campaign.
    """
    pop = logs.population
    R, S = pop.num_rows, len(seeds)
    counts = np.bincount(pop.cell_row, minlength=R)
    # S copies of the population, copy s's rows at s * R + r
    copy = np.repeat(np.arange(S), pop.cell_row.shape[0])
    tiled = population(
        np.tile(pop.cell_row, S) + copy * R,
        np.tile(pop.cell_verdict, S),
        np.tile(pop.cell_prob, (S, 1)),
        R * S,
        np.tile(pop.budget, S),
        pop.num_verdicts,
    )
    truth = pop.truth
    alpha_each = alpha / R
    rows = []
    for name in policies:
        config = HYBRID_POLICIES[name]
        if config is None:
            res = run_human_only(
                int(seeds[0]), tiled, alpha_each=alpha_each, margin=margin, batch=batch
            )
        else:
            res = run(
                int(seeds[0]), tiled, config, alpha_each=alpha_each, margin=margin, batch=batch
            )
        used = res.used.reshape(S, R)
        outcome = res.outcome.reshape(S, R)
        sign = np.where(outcome == B_BETTER, 1, np.where(outcome == A_BETTER, -1, 0))
        reversals = ((sign != 0) & (sign != np.sign(truth)[None, :])).sum(axis=1)
        rep = res.report
        agreement = float(np.nanmean(rep.agreement)) if rep is not None else None
        effective = (
            float(np.nansum(rep.effective_humans) / max(rep.num_human.sum(), 1))
            if rep is not None
            else None
        )
        rows.append(
            {
                "policy": name,
                "seeds": S,
                "comparisons": R,
                "human_judgments_mean": float(used.sum(axis=1).mean()),
                "log_judgments": int(logs.human_judgments.sum()),
                "closed_mean": float((outcome != UNDECIDED).sum(axis=1).mean()),
                "reversals_max": int(reversals.max()),
                "agreement_mean": agreement,
                "effective_per_human": effective,
                "alpha": alpha,
                "margin": margin,
                "counts_cells": int(counts.sum()),
            }
        )
    return rows


def replay_files(
    data: str,
    judge: pl.DataFrame,
    *,
    seed: int = 0,
    seeds: int = 20,
    alpha: float = DEFAULT_LEVEL,
    margin: float = DEFAULT_MARGIN,
    batch: int = 10,
    policies: Sequence[str] | None = None,
) -> list[dict]:
    """``evalset replay --judge-data``: human-only and the hybrids on a human log and one
    judge's verdicts (:func:`evalset.hybrid.read_verdicts`'s frame, the judge chosen), one row
    per policy and dimension."""
    from adaptive.core.data import read_judgments

    humans = read_judgments(data)
    rows = []
    for dim in sorted(set(humans["dimension"].to_list())):
        logs = log_population(
            humans.filter(pl.col("dimension") == dim), judge.filter(pl.col("dimension") == dim)
        )
        if logs.population.num_rows == 0:
            continue
        names = list(policies or HYBRID_POLICIES)
        for row in replay_log(
            range(seed, seed + seeds), logs, names, alpha=alpha, margin=margin, batch=batch
        ):
            rows.append({"dimension": dim, **row})
    return rows
