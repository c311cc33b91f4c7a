"""``GET /projects/{project_id}/decisions``: every comparison's anytime-valid decision.

Model-free: each comparison's decision uses its own judgments only, in arrival order
(:mod:`adaptive.stopping.decisions`). The comparisons are the family the request's
:class:`adaptive.stopping.rule.DecisionRule` declares (default: the comparisons with judgments,
in every dimension with judgments), found as :func:`evalset.decide.family_judgments`
finds it in a file of the same judgments, so the command line, ``import evalset`` and
this route give the same rows. The next-batch recommender serves the same family and
the dashboard counts it. The decisions are a running state per project and (rule,
family) (:mod:`services.runtime.tally`), advanced by the judgments stored since the last
read, so a read costs the new judgments and the comparisons, not the campaign.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adaptive.stopping.questions import QUESTION_FORMS
from adaptive.stopping.rule import FAMILIES, DecisionRule, Family
from adaptive.stopping.rule_options import RuleOptions
from evalset.rules import rule_options_model, rule_problems
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.api.family_tally import FamilyReport as FamilyReport
from services.api.family_tally import check_pair_systems as check_pair_systems
from services.api.family_tally import check_pairs as check_pairs
from services.api.family_tally import decide_family as decide_family
from services.api.family_tally import read_family
from services.api.question_tally import GivenQuestion, read_question
from services.schemas import PAIR_PATTERN, SchemaPattern

router = APIRouter()


class DecisionRow(BaseModel):
    dimension: str
    system_a: str
    system_b: str
    decision: str = Field(description="'B better', 'A better', 'equivalent' or 'undecided'")
    net_preference: float | None = Field(
        description="mean signed judgment (+1 B, -1 A, 0 tie) of the judgments the decision "
        "used (n_used), in [-1, 1]"
    )
    cs_low: float = Field(description="confidence sequence of the net preference (equivalence)")
    cs_high: float
    b_share: float | None = Field(
        description="B's share of the decisive (non-tie) judgments the decision used"
    )
    b_share_low: float = Field(
        description="the sign test's confidence sequence for b_share: a B-better row has "
        "b_share_low >= 0.5, an A-better row b_share_high <= 0.5, an open row holds 0.5"
    )
    b_share_high: float
    n_judgments: int
    n_used: int = Field(description="observations the decision used (one per prompt by default)")
    n_prompts: int
    closed_at: int | None = Field(description="judgments of the comparison when it closed")
    needed: int | None = Field(description="judgments likely still needed (null: not in sight)")
    unused_prompts: int = Field(
        description="the campaign's prompts not yet judged on it, its gold cells not counted"
    )
    needs_new_prompts: bool = Field(
        description="undecided, and (prompt unit) likely needs more judgments than it has "
        "unused prompts: the campaign's prompts cannot close it"
    )
    e_b_better: float
    e_a_better: float
    alpha_each: float
    family: str = Field(description="which comparisons share alpha: " + ", ".join(FAMILIES))
    family_size: int

    model_config = ConfigDict(extra="forbid")


class QuestionDecisionRow(DecisionRow):
    """A decision row of a question's family (``question=``)."""

    question_role: Literal["claim", "pending", ""] = Field(
        description="'claim' (the answer rests on it), 'pending' (undecided, can still change "
        "the answer: what to annotate next) or ''"
    )


class DecisionsPublic(BaseModel):
    rule: str = Field(description="the decision rule and the error control, in words")
    family: str = Field(description="the comparison family, in words")
    family_size: int
    num_judgments: int
    rows: list[QuestionDecisionRow] | list[DecisionRow] = Field(
        description="with ``question``, each row has its ``question_role``"
    )


#: the rule as query parameters: DecisionRule's fields, ``pairs`` repeated as SYSTEM_A:SYSTEM_B
RuleQuery = rule_options_model(
    "RuleQuery",
    pairs=list[Annotated[str, SchemaPattern(PAIR_PATTERN)]] | None,
    doc="The decision rule of a request's query.",
)


def http_rule(options: RuleOptions) -> DecisionRule:
    """The :class:`DecisionRule` of a request's options, or a 422 naming each bad parameter."""
    try:
        return options.build_rule()
    except ValidationError as exc:
        problems = rule_problems(exc)
        raise ApiError(
            422,
            "validation_error",
            "; ".join(f"{field}: {message}" for field, message in problems),
            [{"field": field, "message": message} for field, message in problems],
        ) from exc


def rule_query(options: Annotated[RuleQuery, Query()]) -> DecisionRule:  # type: ignore[valid-type]
    """The :class:`DecisionRule` of a request's query (a 422 names what is wrong)."""
    return http_rule(options)


Rule = Annotated[DecisionRule, Depends(rule_query)]
#: a campaign's question (``GET .../answer``, ``GET .../decisions``, the dashboard)
QuestionParam = Annotated[
    GivenQuestion,  # "" is no question, as in a next-batch body (and at most 2,000 characters)
    Query(
        description=f"the campaign's question: {QUESTION_FORMS} (docs/decisions.md, 'Questions')",
    ),
]


@router.get(
    "/projects/{project_id}/decisions",
    operation_id="decisions",
    tags=["analysis"],
    summary="Every comparison's decision: B better, A better, equivalent or undecided",
    responses=error_responses(401, 403, 404, 422),
)
def decisions(
    project_id: ProjectId, state: State, rule: Rule, question: QuestionParam = None
) -> DecisionsPublic:
    """Each comparison of the declared family: its decision from its own judgments, valid
    at every look (the error bound holds however often anyone asks). ``family`` says which
    comparisons share ``alpha`` (default: those with judgments, in every dimension with
    judgments; ``registered`` with ``pairs``; ``all-pairs``); ``correction`` how it is
    shared (``bonferroni``, ``e-holm``: each read is a look, ``none``). ``question``: the
    question's family instead, each row with its ``question_role`` (``GET .../answer``).
    The same rows as ``evalset decisions`` and :func:`evalset.decisions` on the same
    judgments."""
    if question is not None:
        asked = read_question(state, project_id, rule, question)
        made = asked.report.decisions
        return decisions_public(asked.family, made.rows, asked.num_judgments, made.decisions.rule)
    report = read_family(state, project_id, rule)
    return decisions_public(report.family, report.rows, report.num_judgments, report.decisions.rule)


def decisions_public(
    family: Family, rows: list[dict[str, Any]], num_judgments: int, rule: str
) -> DecisionsPublic:
    """The answer of ``GET .../decisions`` for a family's decision rows (``rule``: the rule
    in words, stated also when the family has no comparison yet)."""
    return DecisionsPublic(
        rule=rule,
        family=family.describe(),
        family_size=family.size,
        num_judgments=num_judgments,
        rows=[
            (QuestionDecisionRow if "question_role" in r else DecisionRow)(
                **{k: v for k, v in r.items() if k != "rule"}
            )
            for r in rows
        ],
    )
