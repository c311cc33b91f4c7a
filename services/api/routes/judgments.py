"""``POST`` and ``GET /projects/{project_id}/judgments``: batches in, all or nothing, and
the judgments out in arrival order (an ``Idempotency-Key`` replays a batch's first answer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Header, Query, Response

from services import schemas as s
from services.api.deps import ProjectId, State, WriteProjectId
from services.api.errors import error_responses
from services.api.idempotency import Idempotent, idempotent
from services.api.routes.projects import refuse_repeated, snapshot_public
from services.store import repository as repo

if TYPE_CHECKING:
    from sqlalchemy import Connection


router = APIRouter()


@router.post(
    "/projects/{project_id}/judgments",
    operation_id="add_judgments",
    tags=["judgments"],
    responses=error_responses(422),
)
def add_judgments(
    project_id: WriteProjectId,
    body: s.JudgmentsCreate,
    state: State,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> s.JudgmentBatchResult:
    """Append a batch, all or nothing; a ``judgment_id`` already stored is a no-op (retry).

    The whole batch is rejected, with one problem per bad row, if any row names an
    unknown system, prompt or dimension, compares a system with itself, has a bad
    winner, or reuses a ``judgment_id`` for a different judgment. With an
    ``Idempotency-Key`` header, the same key and batch again get the first answer
    (header ``Idempotent-Replayed: true``; nothing is stored twice), and the key with
    another batch is a 422 ``idempotency_key_reused``.
    """
    rows = [j.model_dump() for j in body.judgments]
    refuse_repeated([r["judgment_id"] for r in rows], "judgment_id")
    once = idempotent(
        idempotency_key, _batch_content(body), field="Idempotency-Key", name="Idempotency-Key"
    )
    with state.store.write() as conn:
        stored = _stored_batch(conn, project_id, once)
        if stored is not None:
            return _replayed_batch(once, stored, response)
        result = repo.add_judgments(conn=conn, project_id=project_id, judgments=rows)
        answer = _batch_answer(conn, project_id, result, sorted({r["dimension"] for r in rows}))
        if once.key:
            repo.save_batch_key(
                conn=conn,
                project_id=project_id,
                idempotency_key=once.key,
                request_hash=once.fingerprint,
                response=answer.model_dump(mode="json"),
            )
    # re-estimation happens on the worker thread, never in the request
    state.notify(project_id, result.dimensions, result.last_seq)
    return answer


def _stored_batch(
    conn: Connection, project_id: str, once: Idempotent
) -> tuple[str, dict[str, object]] | None:
    """The stored answer of the batch's key (None: no key, or its first use), read under the
    project's judgments lock: one writer of a key at a time."""
    if not once.key:
        return None
    repo.lock_judgments(conn=conn, project_id=project_id)
    return repo.get_batch_by_key(conn=conn, project_id=project_id, idempotency_key=once.key)


def _batch_content(body: s.JudgmentsCreate) -> dict[str, Any]:
    """The request an Idempotency-Key is bound to."""
    # the fields judgments gained in 0007 count only when given: a batch keyed before them
    # and sent again unchanged is the same request
    later = ("screen_id", "lease_id")
    return {
        "judgments": [
            {k: v for k, v in j.items() if not (k in later and v is None)}
            for j in body.model_dump(mode="json")["judgments"]
        ]
    }


def _batch_answer(
    conn: Connection, project_id: str, result: repo.IngestResult, dims: list[str]
) -> s.JudgmentBatchResult:
    """A stored batch's answer (announced to the re-estimation worker when it added any)."""
    if result.inserted:
        repo.announce_judgments(conn=conn, project_id=project_id)
    # gold judgments counted too: an answer that counted only the ordinary ones would
    # tell, one judgment at a time, which cells are gold
    total = repo.count_judgments(conn=conn, project_id=project_id) + repo.count_gold_judgments(
        conn=conn, project_id=project_id
    )
    metas = [repo.latest_snapshot_meta(conn=conn, project_id=project_id, dimension=d) for d in dims]
    return s.JudgmentBatchResult(
        accepted=result.inserted,
        duplicates=result.duplicates,
        num_judgments=total,
        snapshots=[snapshot_public(m) for m in metas if m is not None],
    )


def _replayed_batch(
    once: Idempotent, stored: tuple[str, dict[str, object]], response: Response
) -> s.JudgmentBatchResult:
    """The first answer of the key, if it was given to this same batch (else a 422)."""
    request_hash, answer = stored
    once.check(
        request_hash,
        f"Idempotency-Key {once.key!r} was used for another batch; use a new key for a new batch",
    )
    response.headers["Idempotent-Replayed"] = "true"
    return s.JudgmentBatchResult.model_validate(answer)


@router.get("/projects/{project_id}/judgments", operation_id="list_judgments", tags=["judgments"])
def list_judgments(
    project_id: ProjectId,
    state: State,
    after_seq: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=50_000)] = 10_000,
) -> s.JudgmentsPublic:
    """All judgments in arrival order, a page at a time (for export)."""
    with state.store.read() as conn:
        rows = repo.fetch_judgments(
            conn=conn, project_id=project_id, after_seq=after_seq, limit=limit
        )
    return s.JudgmentsPublic(
        judgments=[s.JudgmentPublic.model_construct(**r) for r in rows],
        next_after_seq=rows[-1]["seq"] if len(rows) == limit else None,
    )
