"""The request and answer of ``POST /projects/{project_id}/next-batch`` (:mod:`.next_batch`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from adaptive.recommend import DEFAULT_BURN_IN
from adaptive.stopping.decisions import DecisionRule
from adaptive.stopping.questions import QUESTION_FORMS
from adaptive.stopping.rule_options import rule_options_model
from services.api.question_tally import GivenQuestion
from services.api.routes.decisions import http_rule
from services.schemas import Id, JsonInt, Name
from services.schemas_answers import AnswerRow

#: the decision rule the batch serves (GET .../decisions takes the same, as a query):
#: DecisionRule's fields, ``pairs`` as [system_a, system_b] pairs
RuleBody = rule_options_model("RuleBody", pairs=list[tuple[Id, Id]] | None)


class NextBatchCreate(RuleBody):  # type: ignore[misc,valid-type]  # fields made from DecisionRule
    """What to recommend."""

    model_config = ConfigDict(extra="forbid")

    size: JsonInt = Field(ge=1, le=1000, description="tasks (judgments) in the batch")
    annotator_id: Name = Field(
        default="", description="never hand this annotator a cell they judged"
    )
    dimensions: list[Id] | None = Field(default=None, description="default: every dimension")
    targets: list[tuple[Id, Id]] | None = Field(
        default=None, description="[system_a, system_b] pairs that matter (default: undecided)"
    )
    adjacent: bool = Field(
        default=False,
        strict=True,
        description="target the pairs adjacent in each dimension's leaderboard",
    )
    tier: list[Id] | None = Field(default=None, description="target the pairs within this tier")
    idempotency_key: Id | None = Field(
        default=None,
        description="repeat the request safely; a key is bound to the request that first "
        "used it (the same key with a different request is a 422)",
    )
    lease_seconds: float = Field(default=3600.0, ge=1.0, le=7 * 24 * 3600.0)
    burn_in: JsonInt = Field(
        default=DEFAULT_BURN_IN,
        ge=0,
        le=1000,
        description="judgments every open comparison gets before the closest-to-a-decision order",
    )
    seed: JsonInt = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="same snapshot, request and seed: same batch",
    )
    route_by: Id | None = Field(
        default=None,
        description="an automatic judge's name: draw the cells of the comparisons it judged by "
        "its routing, the rates kept with the lease, for GET .../hybrid-decisions "
        "(docs/hybrid.md). A routed campaign's human-only decisions (GET .../decisions) "
        "assume uniform draws and no longer hold",
    )

    model: Literal["snapshot", "default"] = Field(
        default="snapshot",
        description="snapshot: the worker's newest posterior snapshot (the live model, at "
        "once); default: the default model fitted on the stored judgments, the batch "
        "`evalset recommend --data` gives for them (fitted on a background thread: 409 "
        "`recommendation_pending` until it is done; the compared family, no routing)",
    )

    gold_share: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="share of the batch given to gold (attention-check) cells nobody has "
        "judged or holds (POST .../gold registers them; docs/gold.md), among ordinary cells of "
        "their own comparisons, the batch shuffled, "
        "not marked in this answer (the lease records them); needs annotator_id",
    )

    question: GivenQuestion = Field(
        default=None,
        description=f"the campaign's question: {QUESTION_FORMS} (docs/decisions.md, "
        "'Questions'): serve only the comparisons that can still change its answer (its "
        "pending ones, decided in the question's family), none once it is answered; the "
        "answer's `question` says how far it is. Default (or an empty string): every open "
        "comparison of the rule's family, as before",
    )

    @model_validator(mode="after")
    def _gold_needs_an_annotator(self) -> NextBatchCreate:
        if self.gold_share > 0 and not self.annotator_id:
            raise ValueError(
                "gold_share needs annotator_id: anonymous judgments of gold cells are not scored"
            )
        if self.question is not None and (self.targets or self.adjacent or self.tier):
            raise ValueError("a question chooses the comparisons: leave out targets/adjacent/tier")
        return self

    def rule(self) -> DecisionRule:
        """The :class:`DecisionRule` of the request (a 422 when it is not one)."""
        return http_rule(self)


class LeasedCell(BaseModel):
    item_id: str
    system_a: str
    system_b: str
    dimension: str
    shown_first: str = Field(description="'a' or 'b': which response to display first")
    reason: str = Field(
        description="why this cell: 'burn_in', 'closest_to_decision', 'open' (no decision in "
        "sight yet), 'targeted', 'repeat' (the comparison's prompts ran out) or 'routed' (drawn "
        "by an automatic judge's routing, its rate kept with the lease: docs/hybrid.md)"
    )
    needed: int | None = Field(
        description="judgments the comparison's decision likely still needs (null: not in sight)"
    )
    snapshot_version: int = Field(
        description="the snapshot the cell was chosen on (model=default: the judgments it "
        "read; 0: its dimension has no snapshot yet, chosen on the running decisions)"
    )


class NotServed(BaseModel):
    dimension: str
    system_a: str
    system_b: str
    needed: int | None = Field(description="judgments likely still needed (null: not in sight)")
    servable_prompts: int = Field(
        description="its unjudged prompts it could be served now (not leased to another "
        "annotator, annotatable)"
    )
    reason: str


class QuestionServed(BaseModel):
    """The question a batch serves and how far it is from an answer (what ``evalset
    recommend --question`` prints)."""

    question: str = Field(description="the question in its written form")
    status: list[str] = Field(
        description="per dimension: the answer so far, the pending comparisons and the "
        "judgments they likely still need, in the command line's words"
    )
    answers: list[AnswerRow] = Field(description="the rows of GET .../answer for the question")
    pending_served: int = Field(
        description="pending comparisons the batch could serve (in the dimensions asked): 0 "
        "once the question is answered, and the batch is then empty"
    )


class NextBatchPublic(BaseModel):
    lease_id: str
    idempotency_key: str
    annotator_id: str
    created_at: datetime
    expires_at: datetime
    replayed: bool = Field(description="true when the idempotency key returned a stored batch")
    cells: list[LeasedCell]
    not_served: list[NotServed] = Field(
        default_factory=list,
        description="open comparisons of the family given no task because their unused "
        "prompts cannot close them (empty on a replayed request)",
    )
    gold_unserved: int = Field(
        default=0,
        description="gold cells gold_share asked for (round-half-up(gold_share x size)) that "
        "were not served: the annotator judged or holds the others, or the batch has too few "
        "ordinary cells of their comparisons to hide them among (docs/gold.md; 0 on a "
        "replayed request)",
    )
    question: QuestionServed | None = Field(
        default=None,
        description="with a question: which it serves and how far it is from an answer "
        "(null without one, and on a replayed request)",
    )
    basis: Literal["snapshot", "decisions", "default"] | None = Field(
        default=None,
        description="what the batch was chosen on: `snapshot`, every dimension's newest "
        "posterior snapshot; `decisions`, a dimension without a snapshot yet (a fresh "
        "service's first fit still running) served on its running decisions and the registered "
        "design, the order theirs anyway (its cells' snapshot_version 0); `default`, "
        "model=default's fit (null on a replayed request)",
    )
    basis_note: str | None = Field(
        default=None,
        description="with basis `decisions`: what the service is doing meanwhile (`first fit "
        "running, N judgments waiting ...`)",
    )
