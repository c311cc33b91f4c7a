"""A campaign's question answered from a judgments frame, for every door.

:func:`answer_judgments` decides the question's family (:meth:`Question.rule_for`: every
pair of the systems for ``top-k`` and ``ranking``, the named pairs for ``versus`` and
``equivalence``) with :func:`evalset.decide.decide_judgments`, then reads the answer of
each dimension off those decisions (:func:`adaptive.stopping.questions.answer_question`).
The command line (``evalset answer``, ``evalset decisions --question``) and
:func:`evalset.answer` give the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import polars as pl

from adaptive.stopping.answers import answer_question, describe
from adaptive.stopping.questions import Question, resolve
from adaptive.stopping.rule import DecisionRule
from evalset._common import read
from evalset.family import DecisionReport, decide_judgments, rule_of

if TYPE_CHECKING:
    from adaptive.stopping.decisions import Decisions

#: the columns of an answer row
ANSWER_COLUMNS = (
    "dimension",
    "question",
    "answered",
    "settled",
    "answer",
    "top",
    "among",
    "groups",
    "order",
    "verdicts",
    "pending",
    "needed",
    "family_size",
    "alpha",
)


class QuestionReport(NamedTuple):
    """What :func:`answer_judgments` answers."""

    answers: list[dict[str, Any]]  # one row per dimension (:data:`ANSWER_COLUMNS`)
    decisions: DecisionReport  # the family's decisions; rows carry ``question_role``
    question: Question


def _take(decisions: Decisions, index: np.ndarray) -> Decisions:
    """The decisions of some comparisons (every per-comparison array indexed)."""
    size = len(decisions.outcome)
    return decisions._replace(
        **{
            f: getattr(decisions, f)[index]
            for f in decisions._fields
            if isinstance(getattr(decisions, f), np.ndarray)
            and getattr(decisions, f).shape[:1] == (size,)
        }
    )


def answer_judgments(
    judgments: pl.DataFrame, rule: DecisionRule | None = None, question: Question | str = ""
) -> QuestionReport:
    """The question's answer in every dimension, with the decisions it rests on.

    Args:
        judgments: validated judgments in arrival order (:func:`evalset.read`).
        rule: the decision rule (level, margin, unit, correction); its family is replaced by
            the question's (``all-pairs`` keeps it).
        question: a :class:`Question` or its written form (``top-k:2``, ``ranking``, ...).

    Returns:
        :class:`QuestionReport`: per dimension the answer in words (``answer``) and its
        parts; each decision row gains ``question_role``: ``claim`` (the answer rests on
        it), ``pending`` (undecided, can still change the answer) or ``""``.
    """
    question = Question.parse(question or None)
    rule = rule or DecisionRule()
    systems = sorted(set(judgments["system_a"].to_list()) | set(judgments["system_b"].to_list()))
    report = decide_judgments(judgments, question.rule_for(rule, systems))
    return answer_decisions(report, question, systems)


def answer_decisions(
    report: DecisionReport, question: Question | str, systems: Sequence[str]
) -> QuestionReport:
    """The question's answer read off decisions already made with its family.

    :func:`answer_judgments` decides a frame's judgments; the service passes its running
    decisions of the same family (``GET .../answer``), so both read the answer alike.

    Args:
        report: the decisions of the family ``question.rule_for(rule, systems)`` declares
            (its rows, family and :class:`Decisions`; ``report.rule`` gives the level).
        question: the question (or its written form).
        systems: the campaign's systems (the family's): an answer's system indices.

    Returns:
        :class:`QuestionReport` (see :func:`answer_judgments`).
    """
    question = Question.parse(question or None)
    systems = sorted(systems)
    comparisons = list(report.family.comparisons)
    index = {s: i for i, s in enumerate(systems)}
    role = [""] * len(comparisons)
    answers = []
    resolved = resolve(question, systems)
    alpha = report.rule.alpha
    for dim in dict.fromkeys(d for d, _, _ in comparisons):
        own = np.array([i for i, (d, _, _) in enumerate(comparisons) if d == dim], np.int64)
        pair_a = np.array([index[comparisons[i][1]] for i in own], np.int64)
        pair_b = np.array([index[comparisons[i][2]] for i in own], np.int64)
        part = _take(report.decisions, own)
        got = answer_question(resolved, part, pair_a, pair_b, len(systems))
        for j, i in enumerate(own):
            role[i] = "claim" if got.claims[j] else "pending" if got.relevant[j] else ""
        answers.append(
            {
                "dimension": dim,
                "question": str(question),
                "answered": got.answered,
                "settled": got.settled,
                "answer": describe(got, question, systems, alpha),
                "top": [systems[s] for s in got.top],
                "among": [systems[s] for s in got.among],
                "groups": [[systems[s] for s in g] for g in got.groups],
                "order": [systems[s] for s in got.order],
                "verdicts": [
                    {"system": systems[x], "other": systems[y], "outcome": word}
                    for x, y, word in got.verdicts
                ],
                "pending": int(got.relevant.sum()),
                "needed": None if not np.isfinite(got.needed) else int(round(got.needed)),
                "family_size": report.family.size,
                "alpha": alpha,
            }
        )
    rows = [dict(r, question_role=role[i]) for i, r in enumerate(report.rows)]
    return QuestionReport(answers, report._replace(rows=rows), question)


def status_lines(asked: QuestionReport) -> list[str]:
    """How far the question is from an answer, a line per dimension (what a batch for it
    says: ``evalset recommend --question``, ``POST .../next-batch`` with ``question``)."""
    out = []
    for row in asked.answers:
        need = "out of sight" if row["needed"] is None else f"~{row['needed']} judgments"
        out.append(
            f"question {row['question']} ({row['dimension']}): {row['answer']}; "
            f"{row['pending']} comparisons pending, {need} likely still needed"
        )
    return out


def answer(
    data: Any, question: Question | str, *, dimension: str | None = None, **rule: Any
) -> pl.DataFrame:
    """The campaign's question answered from its judgments, one row per dimension.

    ``question``: ``all-pairs``, ``top-k:K``, ``ranking``, ``versus:REF[,REF...]`` or
    ``equivalence:A,B`` (docs/decisions.md, "Questions"). Each row: ``answer`` (the
    statement with its level, valid at every look), ``answered``, ``settled`` (answered,
    or nothing pending), ``top`` / ``among`` (top-k: the separated sets at most and at
    least k), ``groups`` (the order in tied groups), ``order`` (the systems by decided
    wins minus losses, then mean net preference), ``verdicts`` (versus and equivalence: each
    named pair's ``system``, ``other`` and ``outcome``), ``pending`` (undecided comparisons
    that can still change the answer) and ``needed`` (their judgments likely still
    needed; null when one is out of sight). :func:`evalset.decisions` with the same
    ``question`` gives the decisions it rests on. ``rule``: the decision rule's options
    (``alpha``, ``margin``, ``unit``, ``correction``; the question declares the family).

    Example:
        >>> import evalset
        >>> row = evalset.answer("data/mtbench/judgments.csv", "top-3").row(0, named=True)
        >>> row["answered"], row["top"]
        (True, ['gpt-4', 'claude-v1', 'gpt-3.5-turbo'])
        >>> evalset.answer("data/mtbench/judgments.csv", "top-1")["answer"][0]
        'top 1 not yet separated; the top 1 are among {gpt-4, claude-v1, gpt-3.5-turbo}, at level 0.05, valid at every look'
    """
    judgments = read(data)
    if dimension is not None:
        judgments = judgments.filter(pl.col("dimension") == dimension)
    report = answer_judgments(judgments, rule_of(**rule), question)
    return pl.DataFrame(report.answers, infer_schema_length=None)


__all__ = (
    "ANSWER_COLUMNS",
    "QuestionReport",
    "answer",
    "answer_decisions",
    "answer_judgments",
    "status_lines",
)
