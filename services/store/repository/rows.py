"""The row shapes the repository returns, one :class:`~typing.TypedDict` per shape.

Plain dicts at run time (callers index them, unpack them into pydantic models
and serialise them as before); the types let mypy check the keys. Datetimes
are timezone-aware UTC (:func:`._common.as_utc`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

from evalset.cells import NamedCell


class ProjectRow(TypedDict):
    project_id: str
    name: str
    description: str
    created_at: datetime


class TokenRow(TypedDict):
    """A project's API token as listed: its id (hash prefix), never the token."""

    token_id: str
    label: str
    created_at: datetime
    #: ``full`` (the whole project) or ``write`` (post judgments and results only)
    scope: Literal["full", "write"]


class SystemRow(TypedDict):
    system_id: str
    description: str


class DimensionRow(TypedDict):
    dimension_id: str
    description: str


class PromptRow(TypedDict):
    prompt_id: str
    text: str
    responses: dict[str, str]  # system id -> response text


class JudgmentRow(TypedDict):
    """A stored judgment (:data:`adaptive.core.data.JUDGMENT_FIELDS`) with its arrival number."""

    seq: int
    judgment_id: str
    item_id: str
    system_a: str
    system_b: str
    annotator_id: str
    winner: str
    dimension: str
    shown_first: str | None
    timestamp: str | None
    screen_id: str | None
    lease_id: str | None


class EventRow(TypedDict):
    """A re-estimation event (published, rejected, failed, superseded, ...)."""

    seq: int
    project_id: str
    dimension: str
    created_at: datetime
    kind: str
    method: str
    version: int
    num_judgments: int
    seconds: float
    detail: str
    replica: str


class SnapshotMeta(TypedDict):
    """A stored posterior snapshot without its payload."""

    project_id: str
    dimension: str
    version: int
    num_judgments: int
    last_seq: int
    method: str
    created_at: datetime
    fit_seconds: float
    diagnostics: dict[str, Any]


class LeasedCellRow(NamedCell):
    """One cell of a lease, as the next-batch route stores it: the batch's cell and the
    snapshot version it was chosen from; ``gold`` marks a gold (attention-check) cell, which
    only the lease tells (the batch's answer does not: the checks are blind)."""

    snapshot_version: int
    gold: NotRequired[bool]


class LeaseRow(TypedDict):
    lease_id: str
    project_id: str
    idempotency_key: str
    annotator_id: str
    cells: list[LeasedCellRow]
    created_at: datetime
    expires_at: datetime
    request_hash: str | None  # None for leases stored before migration 0002
