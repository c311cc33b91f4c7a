"""An automatic judge beside the humans: ``POST/GET /projects/{id}/judge-verdicts`` and
``GET /projects/{id}/hybrid-decisions``.

Verdicts are stored in their own table (:mod:`services.store.repository.verdicts`), checked by
the judgments' validator, and never counted as human judgments. The hybrid decisions are
:func:`evalset.hybrid.decide_with_judge` on the stored judgments (arrival order) and verdicts,
the function ``evalset decisions --judge-data`` and ``evalset.decisions(judge=...)`` call, so
the three doors give the same rows. A read recomputes from the store unless nothing was
stored since the last read of the same question (the answer is kept per project, rule, judge
and the last sequence numbers of both tables).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import polars as pl
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from adaptive.stopping.rule import DecisionRule
from evalset.hybrid import HybridReport, decide_with_judge
from evalset.stored import judgments_frame
from services import schemas as s
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.api.routes.decisions import Rule, check_pair_systems
from services.store import repository as repo
from services.store.repository.rows import JudgmentRow
from services.store.repository.verdicts import (
    VerdictRow,
    add_verdicts,
    count_routes,
    fetch_routes,
    fetch_verdicts,
    judge_counts,
    last_verdict_seq,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from services.runtime.state import ServiceState

router = APIRouter()

# answers are kept on the service state by (project, rule, judge, last sequence numbers);
# the routing's reports by (project, rule, judge): (judgments seen, last verdict, report)
#: a routing report is reused until the judgments grow by this share (or STALE_MIN judgments)
STALE_SHARE, STALE_MIN = 0.05, 20


class JudgeVerdictCreate(s.JudgmentBase):
    """One verdict of an automatic judge on a cell, in the judgments' schema."""

    annotator_id: s.Id = Field(description="the judge's name (e.g. gpt4_pair)")
    inconsistent: bool = Field(
        default=False,
        description="the judge disagreed with itself when the two answers swapped sides "
        "(a tie it gave that way gets a calibration of its own)",
    )


class JudgeVerdictsCreate(s.Strict):
    verdicts: list[JudgeVerdictCreate] = Field(min_length=1, max_length=s.MAX_BATCH)


class JudgeVerdictPublic(JudgeVerdictCreate):
    seq: int = Field(description="arrival order among the project's verdicts")


class JudgeVerdictBatchResult(BaseModel):
    accepted: int = Field(description="verdicts newly stored")
    duplicates: int = Field(description="verdicts already stored (retries)")
    judges: dict[str, int] = Field(description="verdicts stored per judge after this batch")


class JudgeVerdictsPublic(BaseModel):
    judges: dict[str, int]
    verdicts: list[JudgeVerdictPublic]


class HybridDecisionRow(BaseModel):
    dimension: str
    system_a: str
    system_b: str
    decision: str = Field(description="'B better', 'A better', 'equivalent' or 'undecided'")
    net_preference: float | None = Field(
        description="estimate of Δ, the humans' net preference over the judged cells"
    )
    cs_low: float = Field(
        description="anytime-valid confidence sequence of Δ (the one that decides equivalence)"
    )
    cs_high: float
    n_judgments: int = Field(description="human judgments of the comparison")
    n_used: int = Field(description="human observations the decision used")
    n_prompts: int
    closed_at: int | None = Field(description="human judgments of the comparison when it closed")
    e_b_better: float = Field(
        description="e-value against 'B not better' now (a sign closes when its e-value has "
        "reached 2 / alpha_each at some judgment)"
    )
    e_a_better: float = Field(description="e-value against 'A not better' now")
    judge: str
    judge_cells: int = Field(description="cells of the comparison with the judge's verdict")
    judge_agreement: float | None = Field(
        description="share of the human observations equal to the judge's verdict"
    )
    effective_humans: float | None = Field(
        description="human judgments alone that would give the same precision"
    )
    judge_weight: float | None = Field(description="how far the decision leans on the verdicts")
    alpha_each: float
    family: str
    family_size: int


class HybridDecisionsPublic(BaseModel):
    rule: str = Field(description="the hybrid rule and the error control, in words")
    family: str
    family_size: int
    judge: str
    num_judgments: int = Field(description="human judgments of the project")
    num_verdicts: int = Field(description="the judge's verdicts")
    rows: list[HybridDecisionRow]


@router.post(
    "/projects/{project_id}/judge-verdicts",
    operation_id="add_judge_verdicts",
    tags=["judgments"],
    responses=error_responses(422),
)
def add_judge_verdicts(
    project_id: ProjectId, body: JudgeVerdictsCreate, state: State
) -> JudgeVerdictBatchResult:
    """Append an automatic judge's verdicts, all or nothing; a ``judgment_id`` already stored
    with the same verdict is a no-op (retry). They are never human judgments: no count,
    snapshot or human-only decision sees them. The batch is rejected whole, one problem per
    bad row, on what refuses a judgment batch, a verdict without its judge's name
    (``annotator_id``), or a second verdict of one judge on one cell."""
    rows = [v.model_dump() for v in body.verdicts]
    seen: dict[str, int] = {}
    problems = []
    for i, r in enumerate(rows):
        first = seen.setdefault(r["judgment_id"], i)
        if first != i:
            problems.append(
                {
                    "row": i,
                    "field": "judgment_id",
                    "message": f"duplicate judgment_id {r['judgment_id']!r} (first in row {first})",
                }
            )
    if problems:
        raise ApiError(
            422,
            "validation_error",
            "duplicate judgment_ids in the request; nothing was stored",
            problems,
        )
    with state.store.write() as conn:
        result = add_verdicts(conn=conn, project_id=project_id, verdicts=rows)
        judges = judge_counts(conn=conn, project_id=project_id)
    return JudgeVerdictBatchResult(
        accepted=result.inserted, duplicates=result.duplicates, judges=judges
    )


@router.get(
    "/projects/{project_id}/judge-verdicts",
    operation_id="list_judge_verdicts",
    tags=["judgments"],
    responses=error_responses(422),
)
def list_judge_verdicts(
    project_id: ProjectId,
    state: State,
    judge: Annotated[s.Id | None, Query(description="one judge's only")] = None,
) -> JudgeVerdictsPublic:
    """The project's judge verdicts in arrival order, and how many each judge gave."""
    with state.store.read() as conn:
        rows = fetch_verdicts(conn=conn, project_id=project_id, judge=judge)
        judges = judge_counts(conn=conn, project_id=project_id)
    return JudgeVerdictsPublic(
        judges=judges, verdicts=[JudgeVerdictPublic.model_construct(**r) for r in rows]
    )


@router.get(
    "/projects/{project_id}/hybrid-decisions",
    operation_id="hybrid_decisions",
    tags=["analysis"],
    summary="Every comparison's decision from its human judgments and a judge's verdicts",
    responses=error_responses(401, 403, 404, 422),
)
def hybrid_decisions(
    project_id: ProjectId,
    state: State,
    rule: Rule,
    judge: Annotated[
        s.Id | None,
        Query(description="which judge (default: the only one)"),
    ] = None,
) -> HybridDecisionsPublic:
    """Each comparison's hybrid decision (docs/hybrid.md): Δ stays the humans' net preference,
    the judge's verdicts sharpen its confidence sequence, valid at every look whatever the
    judge, with the human judgments taken in arrival order as uniform draws of the judged
    cells. The same rows as ``evalset decisions --judge-data`` and
    ``evalset.decisions(judge=...)`` on the same judgments and verdicts; ``correction``
    ``bonferroni`` or ``none``."""
    from evalset.hybrid import JudgeError

    try:
        return _answer(state, project_id, rule, judge)
    except JudgeError as exc:
        _unprocessable(exc.field, str(exc), exc)


def _without_gold(conn: Connection, project_id: str, judge: str) -> list[Any]:
    """``judge``'s verdicts but those on gold cells: the hybrid estimate treats the human
    judgments as uniform draws over the cells with a verdict, and humans never draw a gold
    cell as an ordinary one (their judgments of it are stored apart)."""
    verdicts = fetch_verdicts(conn=conn, project_id=project_id, judge=judge)
    keys = repo.gold_keys(conn=conn, project_id=project_id)
    if not keys:
        return verdicts
    return [
        v
        for v in verdicts
        if not repo.is_gold(keys, v["dimension"], v["item_id"], v["system_a"], v["system_b"])
    ]


def _answer(
    state: ServiceState, project_id: str, rule: DecisionRule, judge: str | None
) -> HybridDecisionsPublic:
    """The hybrid decisions of the stored judgments, verdicts and recorded routes (cached)."""
    from evalset.hybrid import choose_judge

    with state.store.read() as conn:
        systems = [r["system_id"] for r in repo.list_systems(conn=conn, project_id=project_id)]
        check_pair_systems(rule, systems)  # the registered family's pairs, as /decisions does
        name = choose_judge(judge_counts(conn=conn, project_id=project_id), judge)
        last = repo.judgment_counts_by_dimension(conn=conn, project_id=project_id)
        seen = (tuple(sorted(last.items())), last_verdict_seq(conn=conn, project_id=project_id))
        routed = count_routes(conn=conn, project_id=project_id)
        catalogue = repo.catalogue_version(conn=conn, project_id=project_id)
        num_gold = len(repo.gold_keys(conn=conn, project_id=project_id))
        key = (project_id, rule, name, seen, routed, catalogue, num_gold)
        kept_answer: HybridDecisionsPublic | None = state.hybrid_answers.get(key)
        if kept_answer is not None:
            return kept_answer
        judgments = repo.fetch_judgments(conn=conn, project_id=project_id)
        verdicts = _without_gold(conn, project_id, name)
        routes = fetch_routes(conn=conn, project_id=project_id)
    frame = pl.DataFrame(routes) if routes else None
    answer = _decide(judgments, verdicts, rule, name, frame, systems)
    state.hybrid_answers[key] = answer
    return answer


def stored_report(
    state: ServiceState, project_id: str, rule: DecisionRule, judge: str | None = None
) -> tuple[HybridReport, str] | None:
    """The hybrid report of ``judge`` (None: the project's only judge), without recorded
    routes (what the next batch's routing needs), or None without human judgments (a 404
    when the judge gave no verdict here).

    The routing's rates are recorded with each cell, so they need not be the newest: a report
    is reused until the project's judgments grow by :data:`STALE_SHARE` (at least
    :data:`STALE_MIN`) or a verdict arrives, and a batch never waits for a whole-campaign read
    after every judgment.
    """
    with state.store.read() as conn:
        judges = judge_counts(conn=conn, project_id=project_id)
        if judge is None and len(judges) != 1:
            return None
        if judge is not None and judge not in judges:
            message = f"no verdicts from judge {judge!r} here; the project has {sorted(judges)}"
            raise ApiError(404, "not_found", message)
        total = repo.count_judgments(conn=conn, project_id=project_id)
        if not total:
            return None
        name = judge if judge is not None else next(iter(judges))
        verdict_seq = last_verdict_seq(conn=conn, project_id=project_id)
        key = (project_id, rule, name, len(repo.gold_keys(conn=conn, project_id=project_id)))
        kept = state.hybrid_reports.get(key)
        if kept is not None:
            seen, seq, report = kept
            if seq == verdict_seq and total - seen <= max(STALE_MIN, STALE_SHARE * seen):
                return report, name
        judgments = repo.fetch_judgments(conn=conn, project_id=project_id)
        verdicts = _without_gold(conn, project_id, name)
    report = decide_with_judge(
        judgments_frame(judgments), _verdict_frame(verdicts), rule, judge=name
    )
    state.hybrid_reports[key] = (len(judgments), verdict_seq, report)
    return report, name


def _unprocessable(field: str, message: str, exc: Exception) -> NoReturn:
    raise ApiError(
        422, "validation_error", message, [{"field": field, "message": message}]
    ) from exc


def _verdict_frame(verdicts: Sequence[VerdictRow]) -> pl.DataFrame:
    from evalset.hybrid import read_verdicts

    return read_verdicts(pl.DataFrame(list(verdicts)).drop("seq", "judgment_id"))


def _decide(
    judgments: Sequence[JudgmentRow],
    verdicts: Sequence[VerdictRow],
    rule: DecisionRule,
    name: str,
    routes: pl.DataFrame | None,
    systems: Sequence[str],
) -> HybridDecisionsPublic:
    """The stored judgments and verdicts as frames, decided as a file of them would be."""
    rows: list[dict[str, Any]] = []
    words, family, size = "", "no comparisons (no human judgments)", 0
    if judgments:
        report = decide_with_judge(
            judgments_frame(judgments),
            _verdict_frame(verdicts),
            rule,
            judge=name,
            routes=routes,
            systems=systems,
        )
        rows, family, size = report.rows, report.family.describe(), report.family.size
        words = str(rows[0]["rule"]) if rows else ""
    return HybridDecisionsPublic(
        rule=words,
        family=family,
        family_size=size,
        judge=name,
        num_judgments=len(judgments),
        num_verdicts=len(verdicts),
        rows=[HybridDecisionRow(**{k: v for k, v in r.items() if k != "rule"}) for r in rows],
    )
