"""Pydantic models of the HTTP API, in families: ``*Create`` (in), ``*Public`` (out).

Everything a client sends is validated here, at the edge; a batch with one bad
row is rejected whole (see :mod:`services.api.errors` for the error body).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from services.schemas_answers import EloPublic as EloPublic
from services.schemas_answers import EloRow as EloRow
from services.schemas_answers import InformationPoint as InformationPoint
from services.schemas_answers import ItemFitPublic as ItemFitPublic
from services.schemas_answers import ItemFitRow as ItemFitRow
from services.schemas_answers import LeaderboardPublic as LeaderboardPublic
from services.schemas_answers import LeaderboardRow as LeaderboardRow
from services.schemas_answers import PromptParameterRow as PromptParameterRow
from services.schemas_answers import PromptParametersPublic as PromptParametersPublic
from services.schemas_answers import PruningPublic as PruningPublic
from services.schemas_answers import PruningRow as PruningRow
from services.schemas_answers import SignificancePublic as SignificancePublic
from services.schemas_answers import SignificanceRow as SignificanceRow
from services.schemas_answers import SignificanceTablePublic as SignificanceTablePublic
from services.schemas_answers import SignificanceTableRow as SignificanceTableRow
from services.schemas_answers import SnapshotPublic as SnapshotPublic
from services.schemas_answers import SnapshotsPublic as SnapshotsPublic
from services.schemas_fields import ID_PATTERN as ID_PATTERN
from services.schemas_fields import PAIR_PATTERN as PAIR_PATTERN
from services.schemas_fields import TEXT_PATTERN as TEXT_PATTERN
from services.schemas_fields import Id as Id
from services.schemas_fields import JsonInt as JsonInt
from services.schemas_fields import Name as Name
from services.schemas_fields import SchemaPattern as SchemaPattern
from services.schemas_fields import Strict as Strict
from services.schemas_fields import Text as Text
from services.schemas_fields import Timestamp as Timestamp
from services.schemas_fields import Winner as Winner
from services.schemas_fields import keys_are_ids, unique
from services.schemas_fields import repeated_ids as repeated_ids

#: judgments per POST (a request with more is rejected whole)
MAX_BATCH = 10_000
#: systems / prompts / dimensions per POST
MAX_BULK = 50_000


# ---------------------------------------------------------------- errors


class ProblemPublic(BaseModel):
    """One reason a request was refused; ``row`` is the 0-based position in the batch."""

    row: int | None = None
    judgment_id: str | None = None
    field: str | None = None
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable error code")
    message: str
    problems: list[ProblemPublic] = Field(default_factory=list)


class ErrorPublic(BaseModel):
    error: ErrorDetail


# ---------------------------------------------------------------- projects


class DimensionCreate(Strict):
    dimension_id: Id
    description: Text = ""


class DimensionPublic(BaseModel):
    dimension_id: str
    description: str


class ProjectCreate(Strict):
    project_id: Id
    name: Name = ""
    description: Text = ""
    dimensions: list[DimensionCreate] = Field(
        default_factory=list,
        max_length=1000,
        description="dimensions judged in this campaign (default: one called 'overall')",
    )

    @field_validator("dimensions")
    @classmethod
    def _unique_dimensions(cls, value: list[DimensionCreate]) -> list[DimensionCreate]:
        return unique(value, "dimension_id")


class ProjectPublic(BaseModel):
    project_id: str
    name: str
    description: str
    created_at: datetime


class ProjectCreated(BaseModel):
    project: ProjectPublic
    token: str = Field(description="bearer token of this project; shown once, stored hashed")


TokenScope = Literal["full", "write"]
_SCOPE = "full: every route of the project; write: posts judgments and results, reads nothing"


class TokenCreate(Strict):
    label: Name = ""
    scope: TokenScope = Field(default="full", description=_SCOPE)


class TokenPublic(BaseModel):
    token: str = Field(description="the bearer token; shown once, stored hashed")
    token_id: str = Field(description="its public name, for listing, rotating and revoking")
    label: str
    scope: TokenScope = Field(default="full", description=_SCOPE)


class TokenInfoPublic(BaseModel):
    token_id: str = Field(description="first 16 hex digits of the token's SHA-256")
    label: str
    created_at: datetime
    scope: TokenScope = Field(default="full", description=_SCOPE)


class TokensPublic(BaseModel):
    tokens: list[TokenInfoPublic]


class TokenRevoked(BaseModel):
    revoked: TokenInfoPublic
    revoked_before: datetime | None = Field(
        default=None, description="when the token had been revoked already (null: now)"
    )
    effective_within_seconds: float = Field(
        description="every replica refuses the token at most this long after this answer"
    )


class ProjectStatus(BaseModel):
    project: ProjectPublic
    num_systems: int
    num_prompts: int
    num_annotators: int
    num_judgments: int
    dimensions: list[DimensionPublic]
    snapshots: list[SnapshotPublic]


# ---------------------------------------------------------------- catalogue


class SystemCreate(Strict):
    system_id: Id
    description: Text = ""


class SystemPublic(BaseModel):
    system_id: str
    description: str


class PromptCreate(Strict):
    prompt_id: Id
    text: Text = ""
    responses: dict[Id, Text] = Field(
        default_factory=dict,
        max_length=1000,
        description="each system's response, by system id",
        json_schema_extra=keys_are_ids,
    )


class PromptPublic(BaseModel):
    prompt_id: str
    text: str
    responses: dict[str, str]


class SystemsCreate(Strict):
    systems: list[SystemCreate] = Field(min_length=1, max_length=MAX_BULK)

    @field_validator("systems")
    @classmethod
    def _unique_systems(cls, value: list[SystemCreate]) -> list[SystemCreate]:
        return unique(value, "system_id")


class PromptsCreate(Strict):
    prompts: list[PromptCreate] = Field(min_length=1, max_length=MAX_BULK)

    @field_validator("prompts")
    @classmethod
    def _unique_prompts(cls, value: list[PromptCreate]) -> list[PromptCreate]:
        return unique(value, "prompt_id")


class DimensionsCreate(Strict):
    dimensions: list[DimensionCreate] = Field(min_length=1, max_length=1000)

    @field_validator("dimensions")
    @classmethod
    def _unique_dimensions(cls, value: list[DimensionCreate]) -> list[DimensionCreate]:
        return unique(value, "dimension_id")


class BulkResult(BaseModel):
    created: int = Field(description="how many were new")
    updated: int = Field(description="how many existed and were updated")


# ---------------------------------------------------------------- judgments


class JudgmentBase(Strict):
    judgment_id: Id = Field(description="client-chosen unique id; a retry with it is a no-op")
    item_id: Id = Field(description="the prompt both systems answered")
    system_a: Id
    system_b: Id
    annotator_id: Name = ""
    winner: Winner = Field(description="exactly a, b or tie (lowercase, no spaces)")
    dimension: Id = "overall"
    shown_first: Literal["a", "b"] | None = Field(default=None, description="exactly a or b")
    timestamp: Timestamp | None = Field(
        default=None, description="when it was judged: ISO 8601 (e.g. 2024-05-03T14:03:00Z)"
    )

    @field_validator("system_b")
    @classmethod
    def _two_systems(cls, value: str, info: ValidationInfo) -> str:
        if value == info.data.get("system_a"):
            raise ValueError("system_b must differ from system_a (a system compared with itself)")
        return value


class JudgmentCreate(JudgmentBase):
    """A human judgment: a judge's verdict has neither a screen nor a lease."""

    screen_id: Id | None = Field(
        default=None,
        description="the ranked screen the pair came from (an annotator ranked several "
        "systems' outputs for one prompt on one screen): its pairs share it, and the "
        "prompt, annotator and dimension, and hold each pair of systems once",
    )
    lease_id: Id | None = Field(
        default=None,
        description="the next batch (its lease_id) that served this cell: a routed cell's "
        "recorded rates go to this judgment (docs/hybrid.md)",
    )


class JudgmentPublic(BaseModel):
    """A stored judgment as it was stored: an answer never re-checks the input rules (rows
    stored before a rule existed stay readable)."""

    model_config = ConfigDict(extra="ignore")
    judgment_id: str
    item_id: str
    system_a: str
    system_b: str
    annotator_id: str = ""
    winner: Winner
    dimension: str = "overall"
    shown_first: Literal["a", "b"] | None = None
    timestamp: str | None = None
    screen_id: str | None = None
    lease_id: str | None = None
    seq: int = Field(description="arrival order in the store")


class JudgmentsCreate(Strict):
    judgments: list[JudgmentCreate] = Field(min_length=1, max_length=MAX_BATCH)


class JudgmentsPublic(BaseModel):
    judgments: list[JudgmentPublic]
    next_after_seq: int | None = Field(description="pass as after_seq for the next page")


class JudgmentBatchResult(BaseModel):
    accepted: int = Field(description="judgments newly stored")
    duplicates: int = Field(description="judgments already stored (retries)")
    num_judgments: int = Field(
        description="judgments of the project after this batch, those of gold "
        "(attention-check) cells included"
    )
    snapshots: list[SnapshotPublic] = Field(
        description="the current snapshot of each dimension in the batch (re-estimation "
        "including this batch runs in the background)"
    )


class WorkerPublic(BaseModel):
    mode: Literal["thread", "process", "off"]
    alive: bool = Field(description="the re-estimation worker is running now")
    restarts: int = Field(description="times it was found dead and restarted")
    last_restart_at: datetime | None = None


class ProjectFreshness(BaseModel):
    project_id: str
    num_judgments: int
    last_snapshot_at: datetime | None = Field(description="newest snapshot of any dimension")
    last_snapshot_age_seconds: float | None
    judgments_behind: int = Field(
        description="judgments stored after the newest snapshot (0: snapshots are current)"
    )


class HealthPublic(BaseModel):
    """Anyone may ask (probes, load balancers): aggregates only. Which projects exist, and
    how fresh each one's snapshots are, only with a token: a project's token shows that
    project, the admin token every project."""

    status: Literal["ok", "degraded"] = Field(
        description="degraded: streaming is on and the worker is not alive, or the store "
        "does not answer"
    )
    version: str = Field(description="the service's version")
    database: str
    store_reachable: bool = Field(description="the store answered this request's read")
    streaming: bool = Field(description="re-estimation is configured in this replica")
    worker: WorkerPublic
    projects: list[ProjectFreshness] | None = Field(
        default=None,
        description="per project: with a project's token that project, with the admin "
        "token every project; null without a token (or with an unknown one)",
    )


class EventPublic(BaseModel):
    """One thing the re-estimation worker did (a refit and its outcome)."""

    seq: int
    dimension: str
    created_at: datetime
    kind: str = Field(
        description="published, rejected (failed its diagnostics; see detail), failed "
        "(an error; see detail), superseded (a newer snapshot was stored), skipped, items, "
        "prepared (a padded size compiled ahead), compared (a full refit against the live "
        "snapshot; detail: the comparison as JSON), compiled (a fit compiled a program for "
        "longer than 5 s; seconds: that compile, detail: the program)"
    )
    method: str = Field(description="laplace (fast update), nuts (full refit) or items")
    version: int = Field(description="the snapshot version stored (0: none)")
    num_judgments: int
    seconds: float
    detail: str = Field(description="the reason for a rejection or failure")
    replica: str = Field(description="host:pid of the worker that did it")


class EventsPublic(BaseModel):
    events: list[EventPublic]
    next_after_seq: int | None = Field(description="pass as after_seq for the next page")


ProjectStatus.model_rebuild()
