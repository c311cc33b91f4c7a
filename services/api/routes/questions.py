"""``GET /projects/{project_id}/answer``: the campaign's question, answered as it stands.

A campaign asks a question (``top-k:3``, ``ranking``, ``versus:REF``, ``equivalence:A,B`` or
``all-pairs``: docs/decisions.md, "Questions"); its answer is a conjunction of the per-pair
anytime-valid decisions of the question's family, valid at every look. The decisions are the
project's running ones (:mod:`services.runtime.tally`, as ``GET .../decisions``), the answer
is read by the use case of ``evalset answer`` (:mod:`services.api.question_tally`), so the
command line, :func:`evalset.answer` and this route give the same rows.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from services.api.deps import ProjectId, State
from services.api.errors import error_responses
from services.api.question_tally import read_question
from services.api.routes.decisions import QuestionDecisionRow, QuestionParam, Rule
from services.schemas_answers import AnswerRow

router = APIRouter()


class AnswerPublic(BaseModel):
    question: str
    rule: str = Field(description="the decision rule and the error control, in words")
    family: str = Field(description="the question's family, in words")
    num_judgments: int
    rows: list[AnswerRow] = Field(description="one per dimension with judgments")
    pending: list[QuestionDecisionRow] = Field(
        description="the pending comparisons' decision rows: what to annotate next"
    )


@router.get(
    "/projects/{project_id}/answer",
    operation_id="answer",
    tags=["analysis"],
    summary="The campaign's question (top-k, ranking, versus, equivalence), valid at every look",
    responses=error_responses(401, 403, 404, 422),
)
def answer(
    project_id: ProjectId,
    state: State,
    rule: Rule,
    question: QuestionParam = None,
    dimension: Annotated[str | None, Query(max_length=200)] = None,
) -> AnswerPublic:
    """The question's answer in each dimension (``dimension``: that one, its own family), from
    the decisions of every pair the question may need (the family the question declares,
    ``alpha`` shared by it), with the pending comparisons. The rule's query parameters are
    those of ``GET .../decisions`` (the question sets the family). The rows of ``evalset
    answer`` and :func:`evalset.answer` on the same judgments; ``GET .../decisions`` with the
    same ``question`` gives the decisions it rests on."""
    asked = read_question(state, project_id, rule, question, dimension)
    rows = asked.report.decisions.rows
    return AnswerPublic(
        question=str(asked.report.question),
        rule=asked.report.decisions.decisions.rule,
        family=asked.family.describe(),
        num_judgments=asked.num_judgments,
        rows=[AnswerRow.model_validate(r) for r in asked.report.answers],
        pending=[
            QuestionDecisionRow(**{k: v for k, v in r.items() if k != "rule"})
            for r in rows
            if r["question_role"] == "pending"
        ],
    )
