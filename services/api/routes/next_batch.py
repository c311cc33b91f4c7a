"""``POST /projects/{project_id}/next-batch``: the next annotation batch, under a lease.

The route parses the request into the one request type of every door
(:class:`evalset.batch.RecommendRequest`), prepares the named snapshot
(:mod:`services.api.next_batch_prepare`), plans the batch with
:func:`evalset.plan.plan_batch` and stores it as a lease. Cells under an active lease are
not handed out again until the lease expires; a repeated request with the same
idempotency key returns the stored batch (:func:`services.api.idempotency.idempotent`).
Before a dimension's first snapshot the batch is chosen on its running decisions alone
(:mod:`services.api.next_batch_decisions`; the answer's ``basis`` says so).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, cast

import numpy as np
from fastapi import APIRouter, Header

from evalset.batch import pending_targets, uncompared_note
from evalset.plan import OutsideFamily, RecommendRequest, batch_targets, plan_batch
from evalset.questions import status_lines
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.api.idempotency import Idempotent, idempotent
from services.api.next_batch_prepare import Prepared, prepare_batch
from services.api.next_batch_schemas import (
    LeasedCell,
    NextBatchCreate,
    NextBatchPublic,
    NotServed,
    QuestionServed,
)
from services.api.question_tally import AskedQuestion, parse_question
from services.api.routes.gold import GoldPlan, plan_gold, secret_rng
from services.schemas_answers import AnswerRow
from services.store import repository as repo

if TYPE_CHECKING:
    from services.runtime.state import ServiceState

router = APIRouter()


def _now() -> datetime:
    return datetime.now(UTC)


@router.post(
    "/projects/{project_id}/next-batch",
    operation_id="next_batch",
    tags=["recommendation"],
    summary="The next annotation batch, leased to an annotator",
    responses=error_responses(404, 409),
)
def next_batch(
    project_id: ProjectId,
    body: NextBatchCreate,
    state: State,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> NextBatchPublic:
    """Cells (prompt, system pair, dimension) of the comparisons whose decision is still
    open (or the named targets) in the family the request's rule declares (``alpha``,
    ``margin``, ``unit``, ``correction``, ``family``, ``pairs``: the decisions of
    ``GET .../decisions`` with the same rule), closest to a decision first, a fresh prompt per
    judgment, with the response to show first; each cell says why it was chosen.
    Cells that cannot be annotated (a system without a response to the prompt, or
    two identical responses) are never served. The cells are leased until
    ``expires_at`` and handed to nobody else meanwhile."""
    once = idempotent(
        body.idempotency_key or idempotency_key,
        _request_content(body),
        field="idempotency_key",
        name="idempotency key",
    )
    if once.key:
        with state.store.read() as conn:
            lease = repo.get_lease_by_key(
                conn=conn, project_id=project_id, idempotency_key=once.key
            )
        if lease is not None:
            return _replay(lease, once)
    return _serve(state, project_id, body, once)


def _request_content(body: NextBatchCreate) -> dict[str, Any]:
    """The request an idempotency key is bound to: everything in the body but the key."""
    # leases stored before ``model`` existed were live batches: a default is left out
    skip = {"idempotency_key"} | ({"model"} if body.model == "snapshot" else set())
    skip |= set() if body.gold_share else {"gold_share"}  # the same for leases stored before it
    skip |= set() if body.question is not None else {"question"}  # and before a question
    content: dict[str, Any] = body.model_dump(mode="json", exclude=skip)
    return content


def _request_hash(body: NextBatchCreate) -> str:
    """The fingerprint of the request an idempotency key is bound to."""
    return idempotent(None, _request_content(body), field="", name="").fingerprint


def _public(lease: repo.LeaseRow, replayed: bool) -> NextBatchPublic:
    return NextBatchPublic(
        lease_id=lease["lease_id"],
        idempotency_key=lease["idempotency_key"],
        annotator_id=lease["annotator_id"],
        created_at=lease["created_at"],
        expires_at=lease["expires_at"],
        replayed=replayed,
        cells=[LeasedCell.model_validate(c) for c in lease["cells"]],  # blind: no gold mark
    )


def _replay(lease: repo.LeaseRow, once: Idempotent) -> NextBatchPublic:
    """The stored batch of the key, if it was stored for this same request (else a 422)."""
    once.check(
        lease.get("request_hash"),
        f"idempotency key {once.key!r} was used for a different request (lease "
        f"{lease['lease_id']}); use a new key for a new request",
    )
    return _public(lease, replayed=True)


def recommend_request(body: NextBatchCreate, dimensions: list[str]) -> RecommendRequest:
    """The request of every door (:class:`evalset.batch.RecommendRequest`) of an HTTP body."""
    return RecommendRequest(
        size=body.size,
        seed=body.seed,
        rule=body.rule(),
        targets=tuple(body.targets or ()),
        adjacent=body.adjacent,
        tier=tuple(body.tier or ()),
        burn_in=body.burn_in,
        max_per_cell=1,
        annotator=body.annotator_id or None,
        dimensions=tuple(dimensions),
        question=body.question or "",
    )


def _dimensions(state: ServiceState, project_id: str, body: NextBatchCreate) -> list[str]:
    with state.store.read() as conn:
        known = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
    dims = body.dimensions or known
    unknown = sorted(set(dims) - set(known))
    if unknown:
        raise ApiError(404, "not_found", f"unknown dimension(s) {unknown}; the project has {known}")
    return list(dims)


class _Plan(NamedTuple):
    """What a batch is chosen from, fixed before the leases are read."""

    request: RecommendRequest
    prepared: Prepared
    gold: GoldPlan
    chosen: tuple[int, ...] | None
    exclude: np.ndarray | None
    rng: np.random.Generator
    question: QuestionServed | None


def _plan(state: ServiceState, project_id: str, body: NextBatchCreate, now: datetime) -> _Plan:
    """The request, its prepared snapshot, gold plan and targets (404/409/422 here)."""
    from evalset.recommend_adapter import UnknownName

    request = recommend_request(body, _dimensions(state, project_id, body))
    if request.question:
        parse_question(request.question)  # a question that cannot parse: a 422 before anything
    # the question is read over the dimensions asked (one family over exactly them, as
    # ``evalset recommend --dimension D --question Q`` reads the file's judgments of them),
    # at the same look as the batch: the live batch decides its family (every pair it may
    # need); model=default serves the command line's batch: its compared family
    prepared = prepare_batch(state, project_id, request, model=body.model, route_by=body.route_by)
    asked = prepared.asked
    pending, missing = _pending(asked, request, prepared, body.model) if asked else (None, [])
    dims = list(request.dimensions)
    gold = plan_gold(
        state, project_id, share=body.gold_share, size=body.size, dimensions=dims, now=now
    )
    exclude = gold.exclude(prepared.snapshot.names, prepared.exclude)  # gold never recommended
    try:
        chosen = batch_targets(prepared.snapshot, request, pending)
    except UnknownName as exc:
        raise ApiError(404, "not_found", exc.args[0]) from exc
    except OutsideFamily as exc:
        message = str(exc)
        raise ApiError(
            422, "validation_error", message, [{"field": "targets", "message": message}]
        ) from exc
    # gold cells and the batch's order: nothing in the request tells them
    served = _question_served(asked, chosen, missing) if asked else None
    return _Plan(request, prepared, gold, chosen, exclude, secret_rng(), served)


def _pending(
    asked: AskedQuestion, request: RecommendRequest, prepared: Prepared, model: str
) -> tuple[tuple[int, ...], list[str]]:
    """The snapshot's comparisons the question pends on in the dimensions asked, and (the
    command line's batch, model=default: compared pairs only) the pending pairs it lacks."""
    rows = [r for r in asked.report.decisions.rows if r["dimension"] in request.dimensions]
    pending, missing = pending_targets(rows, prepared.snapshot.names.comparisons)
    # the live snapshot has every pair of the systems (so has a dimension's stand-in from
    # its decisions before its first snapshot; a dimension without judgments has no pairs)
    return pending, missing if model == "default" else []


def _question_served(
    asked: AskedQuestion, chosen: tuple[int, ...] | None, missing: list[str]
) -> QuestionServed:
    """What the answer says of the question a batch serves (``evalset recommend
    --question``'s lines; ``missing``: pending pairs the batch's snapshot lacks)."""
    report = asked.report
    note = [uncompared_note(missing, "model=default")] if missing else []
    return QuestionServed(
        question=str(report.question),
        status=status_lines(report) + note,
        answers=[AnswerRow.model_validate(r) for r in report.answers],
        pending_served=len(chosen or ()),
    )


class _Choice(NamedTuple):
    cells: list[repo.LeasedCellRow]
    not_served: list[dict[str, Any]]
    gold_unserved: int
    question: QuestionServed | None = None


def _choose(
    state: ServiceState,
    project_id: str,
    body: NextBatchCreate,
    plan: _Plan,
    leased: list[repo.LeasedCellRow],
) -> _Choice:
    """The batch given the cells other annotators hold now."""
    from evalset.recommend_adapter import hold_leased
    from services.api.hybrid_routing import route_cells

    names = plan.prepared.snapshot.names
    held = hold_leased(plan.prepared.cells, names, plan.gold.ordinary(leased))
    batch, left_out, _ = plan_batch(
        plan.prepared.snapshot,
        held,
        plan.request,
        chosen=plan.chosen,
        exclude=plan.exclude,
        reserve=plan.gold.reserve,
    )
    if body.route_by:
        # the cells of the comparisons the judge saw are drawn by the hybrid's routing,
        # their rates kept in the lease (services/api/hybrid_routing.py)
        dims = list(plan.request.dimensions)
        batch = route_cells(
            state,
            project_id,
            body.annotator_id,
            body.seed,
            plan.request.rule,
            batch,
            plan.gold.held(leased, dims),
            body.route_by,
        )
    version = plan.prepared.versions
    versioned = [
        cast("repo.LeasedCellRow", {**cell, "snapshot_version": int(version[cell["dimension"]])})
        for cell in batch
    ]
    mixed, gold_unserved = plan.gold.mix(versioned, plan.rng, leased)
    return _Choice(mixed, left_out, gold_unserved, plan.question)


def _serve(
    state: ServiceState, project_id: str, body: NextBatchCreate, once: Idempotent
) -> NextBatchPublic:
    """Plan, choose and store the batch as a lease.

    Choose outside any write transaction (a first call compiles), then store the lease
    under the project's lease lock if the active leases are still those it was chosen on
    (else choose again there): concurrent requests (or replicas) never hand out one cell
    twice.
    """
    now = _now()
    key = once.key or uuid.uuid4().hex
    plan = _plan(state, project_id, body, now)
    with state.store.read() as conn:
        leased = repo.active_leased_cells(conn=conn, project_id=project_id, now=now)
    choice = _choose(state, project_id, body, plan, leased)
    with state.store.write() as conn:
        repo.lock_leases(conn=conn, project_id=project_id)
        stored = repo.get_lease_by_key(conn=conn, project_id=project_id, idempotency_key=key)
        if stored is not None:  # a concurrent request with the same key was first
            return _replay(stored, once)
        current = repo.active_leased_cells(conn=conn, project_id=project_id, now=now)
        if current != leased:  # leases changed since: choose again (compiled by now)
            choice = _choose(state, project_id, body, plan, current)
        choice = choice._replace(cells=_not_gold_since(conn, project_id, plan.gold, choice.cells))
        lease = repo.create_lease(
            conn=conn,
            project_id=project_id,
            idempotency_key=key,
            annotator_id=body.annotator_id,
            cells=choice.cells,
            expires_at=now + timedelta(seconds=body.lease_seconds),
            now=now,
            request_hash=once.fingerprint,
        )
    return _answer(lease, choice, plan.prepared)


def _not_gold_since(
    conn: Any, project_id: str, gold: GoldPlan, cells: list[repo.LeasedCellRow]
) -> list[repo.LeasedCellRow]:
    """``cells`` without a cell registered as gold since the plan (registration takes the
    lease lock too): its judgment would be stored apart."""
    keys = repo.gold_keys(conn=conn, project_id=project_id)
    if keys == set(gold.keys):
        return cells
    return [c for c in cells if c.get("gold") or not repo.is_gold(keys, *_cell_key(c))]


def _answer(lease: repo.LeaseRow, choice: _Choice, prepared: Prepared) -> NextBatchPublic:
    # a concurrent request with the same key may have stored its batch first
    replayed = lease["cells"] != choice.cells
    public = _public(lease, replayed=replayed)
    if not replayed:
        public.not_served = [NotServed(**row) for row in choice.not_served]
        public.gold_unserved = choice.gold_unserved
        public.question = choice.question
        public.basis, public.basis_note = prepared.basis, prepared.basis_note
    return public


def _cell_key(cell: Any) -> tuple[str, str, str, str]:
    """A leased cell's (dimension, item, system a, system b), as :func:`repo.is_gold` reads it."""
    return cell["dimension"], cell["item_id"], cell["system_a"], cell["system_b"]
