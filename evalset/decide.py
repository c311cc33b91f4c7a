"""Decide: every comparison of the declared family from a judgments frame, for every door.

The command line (``evalset decisions``) and :func:`evalset.decisions` both call
:func:`decide_judgments`, so one :class:`adaptive.stopping.rule.DecisionRule` (level, margin,
unit, multiplicity rule, comparison family) gives the same rows, with the same columns
and numbers, through either door. Every row states the family (``family``,
``family_size``) and, for an undecided comparison, whether the campaign's unused
prompts can close it (``needs_new_prompts``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from adaptive.stopping.rule import DecisionRule
from evalset._common import read
from evalset.family import DecisionReport as DecisionReport
from evalset.family import FamilyJudgments as FamilyJudgments
from evalset.family import decide_judgments as decide_judgments
from evalset.family import family_judgments as family_judgments
from evalset.family import rule_of as rule_of


def _judgments_and_rule(
    data: Any, dimension: str | None, **rule: Any
) -> tuple[pl.DataFrame, DecisionRule]:
    """The judgments of ``data`` (of ``dimension`` alone, if given) and the rule asked for."""
    judgments = read(data)
    if dimension is not None:
        judgments = judgments.filter(pl.col("dimension") == dimension)
    return judgments, rule_of(**rule)


def decisions(
    data: Any,
    *,
    dimension: str | None = None,
    judge: Any = None,
    judge_name: str | None = None,
    question: str | None = None,
    **rule: Any,
) -> pl.DataFrame:
    """Per comparison: ``B better``, ``A better``, ``equivalent`` or ``undecided``, valid at
    every look (:mod:`adaptive.stopping.decisions`), from its own judgments in row (arrival) order.

    The rows of ``evalset decisions --format json``: ``decision, net_preference`` (Δ, the
    expected signed judgment in [-1, 1]), ``cs_low, cs_high`` (its confidence sequence),
    ``b_share`` (B's share of the decisive judgments the decision used), ``b_share_low,
    b_share_high`` (the sign test's confidence sequence for it: a B better row's low end
    reaches 0.5, an A better row's high end falls to 0.5, an open row's holds 0.5),
    ``n_judgments, n_used, n_prompts, closed_at``, ``needed`` (judgments likely still
    needed, an integer; null when out of sight), ``unused_prompts``, ``needs_new_prompts``
    (its dimension's unused prompts cannot close it), the e-values, ``alpha_each``,
    ``family`` and ``family_size`` (which comparisons share ``alpha``: ``compared``, the
    comparisons with judgments; ``registered``, the ``pairs`` given; ``all-pairs``) and
    ``rule``. ``rule``: the :class:`~adaptive.stopping.rule.DecisionRule`'s options
    (``alpha``, ``margin``, ``unit``, ``correction``: ``bonferroni``, ``e-holm`` or ``none``,
    ``family``, ``pairs``; :mod:`adaptive.stopping.rule`), its defaults when left out.

    ``judge``: an automatic judge's verdicts (a frame or file in the judgments schema whose
    ``annotator_id`` names the judge, optional ``inconsistent``) give hybrid decisions
    (:func:`evalset.hybrid.decide_with_judge`, docs/hybrid.md): Δ stays the humans'; the rows
    keep ``decision, net_preference, cs_low, cs_high, n_judgments, n_used, n_prompts,
    closed_at, e_b_better, e_a_better, alpha_each, family, family_size, rule`` (a sign is
    decided by its e-value, equivalence by the confidence sequence) and add ``judge, judge_cells,
    judge_agreement, effective_humans, judge_weight``. ``judge_name`` picks one judge when
    the verdicts name several.

    ``question`` (``top-k:K``, ``ranking``, ``versus:REF,...``, ``equivalence:A,B``): the
    decisions of the question's family (every pair it may need, :mod:`evalset.questions`),
    each row with ``question_role`` (``claim``: the answer rests on it; ``pending``: it can
    still change the answer); :func:`evalset.answer` gives the answer itself.
    """
    if question and judge is not None:
        raise ValueError("a question reads human decisions only: leave out judge")
    if judge is not None:
        from evalset.hybrid import hybrid_decisions

        report = hybrid_decisions(data, judge, judge=judge_name, dimension=dimension, **rule)
        return pl.DataFrame(report.rows, infer_schema_length=None)
    judgments, asked = _judgments_and_rule(data, dimension, **rule)
    if question:
        from evalset.questions import answer_judgments

        rows = answer_judgments(judgments, asked, question).decisions.rows
        return pl.DataFrame(rows, infer_schema_length=None)
    return pl.DataFrame(decide_judgments(judgments, asked).rows, infer_schema_length=None)


def evidence(data: Any, *, dimension: str | None = None, **options: Any) -> pl.DataFrame:
    """Each comparison's evidence after each of its judgments, as :func:`decisions` sees it.

    One row per (comparison, observation the decision uses): ``judgments`` (the
    comparison's judgments so far, the cost), ``log10_e_b`` / ``log10_e_a`` (the
    e-values against "B not better" / "A not better"), ``threshold`` (log10 of the
    level each must reach with Bonferroni's split over the family), ``cs_low``/``cs_high``
    (the confidence sequence of Δ), ``decision`` (final) and ``closed_at``. ``options``:
    the rule's, as :func:`decisions` takes them.
    """
    from adaptive.stopping.decisions import decide, decision_observations
    from adaptive.stopping.evidence import eb_confidence_sequence, log_sign_evalue

    judgments, rule = _judgments_and_rule(data, dimension, **options)
    fj = family_judgments(judgments, rule)
    size = fj.family.size
    d = decide(fj.comparison, fj.prompt, fj.signed, size, rule, num_tests=size)
    each, names = d.alpha_each, d.names()
    used = decision_observations(fj.comparison, fj.prompt, rule.unit)
    frames = []
    for c, (dim, a, b) in enumerate(fj.family.comparisons):
        rows = np.flatnonzero(fj.comparison == c)
        cost = np.arange(1, len(rows) + 1)[used[rows]]
        x = fj.signed[rows][used[rows]]
        if x.size == 0:
            continue
        k, m = np.cumsum(x > 0), np.cumsum(x != 0)
        low, high = eb_confidence_sequence((x + 1.0) / 2.0, each)
        frames.append(
            pl.DataFrame(
                {
                    "dimension": dim,
                    "system_a": a,
                    "system_b": b,
                    "judgments": cost,
                    "log10_e_b": log_sign_evalue(k, m, rule.mixture) / np.log(10),
                    "log10_e_a": log_sign_evalue(m - k, m, rule.mixture) / np.log(10),
                    "threshold": float(np.log10(2.0 / each)),
                    "cs_low": 2.0 * low - 1.0,
                    "cs_high": 2.0 * high - 1.0,
                    "decision": names[c],
                    "closed_at": int(d.closed_at[c]) if d.outcome[c] else None,
                },
                schema_overrides={"closed_at": pl.Int64},
            )
        )
    return pl.concat(frames)
