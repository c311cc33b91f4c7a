"""Replay a logged campaign under every policy, for the command line and Python alike.

``evalset replay`` and :func:`evalset.replay` both call :func:`replay_rows`, so the same
log, policies, seeds, rule and question give the same rows through either door.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

from adaptive.stopping.questions import Question
from adaptive.stopping.rule import DecisionRule

#: what a reference that knows the truth is called (simulated logs only)
ORACLE = "oracle"


def family_size(rule: DecisionRule, num_systems: int, num_comparisons: int) -> int:
    """How many comparisons share ``alpha`` in one dimension's replay."""
    if rule.family == "all-pairs":
        return num_systems * (num_systems - 1) // 2
    if rule.family == "registered":
        return len(rule.pairs)
    return num_comparisons


def replay_rows(
    judgments: pl.DataFrame,
    *,
    policies: Sequence[str] = ("adaptive", "uniform"),
    seeds: int = 3,
    seed: int = 0,
    batch_size: int = 100,
    budget: int | None = None,
    rule: DecisionRule | None = None,
    question: Question | str | None = None,
    semi_synthetic: bool = False,
    prompts_factor: int = 1,
    dimensions: Sequence[str] | None = None,
    progress: Callable[[str, int], Callable[[], None]] | None = None,
    say: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (dimension, policy): effort and outcome over ``seeds`` replays.

    Args:
        judgments: validated judgments in arrival order.
        policies: of :data:`adaptive.simulation.replay.POLICIES`, and ``oracle`` with
            ``semi_synthetic`` (it knows the truth).
        rule: the decision rule every policy shares (its family sets the level's split).
        question: the campaign's question (``top-k:2``, ``ranking``, ``versus:R``, ...):
            each replay stops when it is settled, question-aware policies serve only what can
            change it, and the rows add ``answered_share``, ``answer``, ``wrong_answers``.
        semi_synthetic: replay fresh campaigns simulated from a fit to the log (known truth),
            one per seed and the same for every policy.
        progress: ``progress(label, total)`` returns a step function (a bar on the CLI).

    Returns:
        Rows with ``ratio_to_uniform`` (and ``ratio_to_oracle``) beside each policy.
    """
    from adaptive.core.cells import build_cells
    from adaptive.simulation.replay import POLICIES

    allowed = (*POLICIES, ORACLE) if semi_synthetic else POLICIES
    unknown = sorted(set(policies) - set(allowed))
    if unknown:
        hint = " (oracle needs semi_synthetic)" if ORACLE in unknown else ""
        raise ValueError(f"unknown policies {unknown}; expected some of {list(allowed)}{hint}")
    if seeds < 1:
        raise ValueError("seeds must be at least 1")
    base_rule = rule or DecisionRule()
    asked = Question.parse(question) if question else None
    dims = list(dimensions or judgments["dimension"].unique(maintain_order=True).to_list())
    rows: list[dict[str, Any]] = []
    for dim in dims:
        rows += _replay_dimension(
            build_cells(judgments, dimension=dim),
            policies,
            range(seed, seed + seeds),
            base_rule,
            asked,
            batch_size=batch_size,
            budget=budget,
            semi_synthetic=semi_synthetic,
            prompts_factor=prompts_factor,
            progress=progress,
            say=say,
        )
    return rows


def _replay_dimension(
    cells: Any,
    policies: Sequence[str],
    seeds: range,
    base_rule: DecisionRule,
    asked: Question | None,
    *,
    batch_size: int,
    budget: int | None,
    semi_synthetic: bool,
    prompts_factor: int,
    progress: Callable[[str, int], Callable[[], None]] | None,
    say: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """:func:`replay_rows` of one dimension's cells."""
    from adaptive.simulation.replay import (
        ReplayConfig,
        fit_truth,
        log_from_cells,
        summarize_replays,
    )
    from adaptive.simulation.replay import replay as replay_log
    from adaptive.simulation.replay import semi_synthetic as simulate

    dim, log = cells.dimension, log_from_cells(cells)
    dim_rule = asked.rule_for(base_rule, cells.systems) if asked else base_rule
    size = family_size(dim_rule, len(cells.systems), log.num_comparisons)
    config = ReplayConfig(
        batch_size=batch_size, budget=budget, rule=dim_rule, num_tests=size, question=asked
    )
    truth = fit_truth(log) if semi_synthetic else None
    kind = "semi-synthetic" if truth is not None else "log"
    if say:
        say(
            f"{dim} ({kind}): {log.num_comparisons} comparisons, {log.num_judgments} "
            f"judgments, {log.num_prompts} prompts"
        )
    by_policy = {}
    for policy in policies:
        traces, replayed = [], []
        step = progress(f"{dim} {policy}", len(seeds)) if progress else (lambda: None)
        for s in seeds:
            last = log
            if truth is not None:  # one fresh campaign per seed, the same for every policy
                rng = np.random.default_rng([s, 1])
                last = simulate(rng, log, truth, prompts_factor=prompts_factor)._replace(
                    pair_a=log.pair_a, pair_b=log.pair_b, systems=log.systems
                )
            replayed.append(last)
            traces.append(replay_log(s, last, policy, config))
            step()
        by_policy[policy] = summarize_replays(traces, replayed, dim_rule)
    uniform = by_policy.get("uniform", {}).get("judgments_mean")
    oracle = by_policy.get(ORACLE, {}).get("judgments_mean")
    rows = []
    for summary in by_policy.values():
        row = {"dimension": dim, "data": kind, "unit": dim_rule.unit, **summary}
        row |= {"family": dim_rule.family, "family_size": size, "rule": dim_rule.describe(size)}
        if asked:
            row["question"] = str(asked)
        row["ratio_to_uniform"] = row["judgments_mean"] / uniform if uniform else None
        if oracle:
            row["ratio_to_oracle"] = row["judgments_mean"] / oracle
        rows.append(row)
    return rows
