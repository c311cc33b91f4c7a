"""``POST /projects/{project_id}/next-batch``: the next annotation batch, under a lease.

The route reads the newest posterior snapshot of each dimension (it never fits),
the judgments and the active leases, prepares the recommender's integer-indexed
state, calls :func:`adaptive.recommend.recommend` and stores the batch as a
lease. Cells under an active lease are not handed out again until the lease
expires; a repeated request with the same idempotency key returns the stored
batch.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Annotated

import jax
import numpy as np
from fastapi import APIRouter, Header
from pydantic import BaseModel, ConfigDict, Field

from adaptive.recommend import (
    DEFAULT_BURN_IN,
    REASON_CODES,
    SHOW_A,
    CellState,
    DimensionDraws,
    Request,
    Snapshot,
    adjacent_comparisons,
    recommend,
    snapshot_from_draws,
    tier_comparisons,
)
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.cells import annotatable_cells
from services.schemas import Id, Name
from services.store import repository as repo
from services.store.validation import id_problem

router = APIRouter()


class NextBatchCreate(BaseModel):
    """What to recommend."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(ge=1, le=1000, description="tasks (judgments) in the batch")
    annotator_id: Name = Field(
        default="", description="never hand this annotator a cell they judged"
    )
    dimensions: list[Id] | None = Field(default=None, description="default: every dimension")
    targets: list[tuple[Id, Id]] | None = Field(
        default=None, description="[system_a, system_b] pairs that matter (default: undecided)"
    )
    adjacent: bool = Field(
        default=False, description="target the pairs adjacent in each dimension's leaderboard"
    )
    tier: list[Id] | None = Field(default=None, description="target the pairs within this tier")
    idempotency_key: Id | None = Field(
        default=None,
        description="repeat the request safely; a key is bound to the request that first "
        "used it (the same key with a different request is a 422)",
    )
    lease_seconds: float = Field(default=3600.0, ge=1.0, le=7 * 24 * 3600.0)
    burn_in: int = Field(
        default=DEFAULT_BURN_IN,
        ge=0,
        le=1000,
        description="judgments every open comparison gets before the closest-to-a-decision order",
    )
    seed: int = Field(
        default=0, ge=0, le=2**31 - 1, description="same snapshot, request and seed: same batch"
    )


class LeasedCell(BaseModel):
    item_id: str
    system_a: str
    system_b: str
    dimension: str
    shown_first: str = Field(description="'a' or 'b': which response to display first")
    reason: str = Field(
        description="why this cell: 'burn_in', 'closest_to_decision', 'open' (no decision in "
        "sight yet), 'targeted' or 'repeat' (the comparison's prompts ran out)"
    )
    needed: int | None = Field(
        description="judgments the comparison's decision likely still needs (null: not in sight)"
    )
    snapshot_version: int


class NextBatchPublic(BaseModel):
    lease_id: str
    idempotency_key: str
    annotator_id: str
    created_at: datetime
    expires_at: datetime
    replayed: bool = Field(description="true when the idempotency key returned a stored batch")
    cells: list[LeasedCell]


def _now() -> datetime:
    return datetime.now(UTC)


# prepared recommender snapshots, keyed by project, snapshot versions and judgments seen
_CACHE: OrderedDict[tuple, tuple[Snapshot, dict]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 16


def _public(lease: dict, replayed: bool) -> NextBatchPublic:
    return NextBatchPublic(
        lease_id=lease["lease_id"],
        idempotency_key=lease["idempotency_key"],
        annotator_id=lease["annotator_id"],
        created_at=lease["created_at"],
        expires_at=lease["expires_at"],
        replayed=replayed,
        cells=[LeasedCell(**c) for c in lease["cells"]],
    )


def _request_hash(body: NextBatchCreate) -> str:
    """The request an idempotency key is bound to: everything in the body but the key."""
    content = body.model_dump(mode="json", exclude={"idempotency_key"})
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _replay(lease: dict, key: str, fingerprint: str) -> NextBatchPublic:
    """The stored batch of ``key``, if it was stored for this same request (else a 422)."""
    stored = lease.get("request_hash")
    if stored is not None and stored != fingerprint:
        message = (
            f"idempotency key {key!r} was used for a different request (lease "
            f"{lease['lease_id']}); use a new key for a new request"
        )
        raise ApiError(
            422,
            "idempotency_key_reused",
            message,
            [{"field": "idempotency_key", "message": message}],
        )
    return _public(lease, replayed=True)


def _prepare(state, project_id: str, dims: list[str], seed: int) -> tuple[Snapshot, dict]:
    """The recommender snapshot of the project's newest posteriors, with names."""
    snaps = {d: state.snapshot(project_id, d) for d in dims}
    snaps = {d: s for d, s in snaps.items() if s is not None}
    if not snaps:
        raise ApiError(409, "no_snapshot", "no posterior snapshot yet: post judgments first")
    with state.store.read() as conn:
        systems = [r["system_id"] for r in repo.list_systems(conn=conn, project_id=project_id)]
        prompt_rows = repo.list_prompts(conn=conn, project_id=project_id)
        prompts = [r["prompt_id"] for r in prompt_rows]
        rows = {
            d: repo.fetch_judgments(conn=conn, project_id=project_id, dimension=d) for d in snaps
        }
    key = (
        project_id,
        tuple((d, s.version) for d, s in snaps.items()),
        tuple(len(r) for r in rows.values()),
        seed,
    )
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    for s in snaps.values():
        systems += [x for x in s.systems if x not in systems]
        prompts += [x for x in s.items if x not in prompts]
    sys_index = {s: i for i, s in enumerate(systems)}
    prompt_index = {p: i for i, p in enumerate(prompts)}
    rng = np.random.default_rng(seed)
    blocks, names, versions = [], [], []
    for d, snap in snaps.items():
        # every pair of known systems is a candidate comparison; pairs the
        # snapshot compared keep its orientation, the per-system skill gives
        # the others (systems it never saw get prior draws)
        oriented = {
            frozenset((snap.systems[a], snap.systems[b])): (snap.systems[a], snap.systems[b])
            for a, b in zip(snap.pair_a, snap.pair_b)
        }
        pairs = [
            oriented.get(frozenset((a, b)), (a, b))
            for i, a in enumerate(systems)
            for b in systems[i + 1 :]
        ]
        skill = rng.normal(0.0, 1.0, size=(snap.num_draws, len(systems)))
        skill[:, [sys_index[s] for s in snap.systems]] = snap.skill
        pa = np.array([sys_index[a] for a, _ in pairs], np.int64)
        pb = np.array([sys_index[b] for _, b in pairs], np.int64)
        comp_of = {}
        for c, (a, b) in enumerate(pairs):
            comp_of[(a, b)] = (c, 1.0)
            comp_of[(b, a)] = (c, -1.0)
        j_comp, j_prompt, j_signed = [], [], []
        for r in rows[d]:
            hit = comp_of.get((r["system_a"], r["system_b"]))
            if hit is None or r["item_id"] not in prompt_index:
                continue
            raw = {"a": -1.0, "b": 1.0}.get(r["winner"], 0.0)
            j_comp.append(hit[0])
            j_prompt.append(prompt_index[r["item_id"]])
            j_signed.append(raw * hit[1])
        blocks.append(
            DimensionDraws(
                dimension=d,
                theta=skill[:, pb] - skill[:, pa],
                pair_a=pa,
                pair_b=pb,
                skill=skill,
                judgment_comparison=np.asarray(j_comp, np.int64),
                judgment_prompt=np.asarray(j_prompt, np.int64),
                judgment_signed=np.asarray(j_signed, np.float64),
            )
        )
        names += [(d, a, b) for a, b in pairs]
        versions.append(snap.version)
    snapshot = snapshot_from_draws(
        blocks,
        num_prompts=len(prompts),
        num_systems=len(systems),
        version=int(sum(versions)),
    )
    responses = {
        (r["prompt_id"], system): text
        for r in prompt_rows
        for system, text in (r.get("responses") or {}).items()
    }
    maps = {
        "systems": systems,
        "prompts": prompts,
        "comparisons": names,
        "annotatable": annotatable_cells(names, prompts, responses),
        "versions": dict(zip(snaps, versions)),
        "rows": rows,
    }
    with _CACHE_LOCK:
        _CACHE[key] = (snapshot, maps)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return snapshot, maps


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
    open (or the named targets), closest to a decision first, a fresh prompt per
    judgment, with the response to show first; each cell says why it was chosen.
    Cells that cannot be annotated (a system without a response to the prompt, or
    two identical responses) are never served. The cells are leased until
    ``expires_at`` and handed to nobody else meanwhile."""
    key = body.idempotency_key or idempotency_key
    if key is not None and (problem := id_problem(key)) is not None:
        raise ApiError(
            422,
            "validation_error",
            f"invalid idempotency key: {problem}",
            [{"field": "idempotency_key", "message": problem}],
        )
    fingerprint = _request_hash(body)
    if key:
        with state.store.read() as conn:
            lease = repo.get_lease_by_key(conn=conn, project_id=project_id, idempotency_key=key)
        if lease is not None:
            return _replay(lease, key, fingerprint)
    key = key or uuid.uuid4().hex
    with state.store.read() as conn:
        known = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
    dims = body.dimensions or known
    unknown = sorted(set(dims) - set(known))
    if unknown:
        raise ApiError(404, "not_found", f"unknown dimension(s) {unknown}; the project has {known}")
    snapshot, maps = _prepare(state, project_id, list(dims), body.seed)
    comps = maps["comparisons"]
    comp_index = {name: i for i, name in enumerate(comps)}
    prompt_index = {p: i for i, p in enumerate(maps["prompts"])}
    num_c, num_p = snapshot.num_comparisons, snapshot.num_prompts

    def locate(dim: str, item: str, a: str, b: str) -> tuple[int, int, bool] | None:
        if item not in prompt_index:
            return None
        if (dim, a, b) in comp_index:
            return comp_index[(dim, a, b)], prompt_index[item], False
        if (dim, b, a) in comp_index:
            return comp_index[(dim, b, a)], prompt_index[item], True
        return None

    now = _now()
    cells = CellState.open(num_c, num_p)._replace(annotatable=maps["annotatable"])
    exclude = np.zeros((num_c, num_p), bool) if body.annotator_id else None
    for dim, rows in maps["rows"].items():
        for r in rows:
            hit = locate(dim, r["item_id"], r["system_a"], r["system_b"])
            if hit is None:
                continue
            c, p, flipped = hit
            if r.get("shown_first") in ("a", "b"):
                side_a = (r["shown_first"] == "a") != flipped
                (cells.shown_a if side_a else cells.shown_b)[c, p] += 1
            if exclude is not None and r["annotator_id"] == body.annotator_id:
                exclude[c, p] = True
    targets = None
    if body.targets:
        targets = []
        for a, b in body.targets:
            hits = [i for i, (d, x, y) in enumerate(comps) if {x, y} == {a, b} and d in dims]
            if not hits:
                raise ApiError(404, "not_found", f"no comparison of {a!r} and {b!r}")
            targets += hits
    if body.adjacent:
        targets = list(targets or []) + list(adjacent_comparisons(snapshot))
    if body.tier:
        unknown_sys = sorted(set(body.tier) - set(maps["systems"]))
        if unknown_sys:
            raise ApiError(404, "not_found", f"unknown system(s) {unknown_sys} in the tier")
        members = [maps["systems"].index(x) for x in body.tier]
        targets = list(targets or []) + list(tier_comparisons(snapshot, members))
    dim_ids = [i for i, d in enumerate(maps["versions"]) if d in dims]
    request = Request(
        size=body.size,
        targets=tuple(sorted(set(targets))) if targets is not None else None,
        exclude=exclude,
        dimensions=tuple(dim_ids),
        burn_in=body.burn_in,
        max_per_cell=1,
    )
    rng_key = jax.random.fold_in(jax.random.PRNGKey(body.seed), snapshot.version)

    def choose(leased: list[dict]) -> list[dict]:
        """The batch given the cells other annotators hold now."""
        held = cells._replace(
            available=cells.available.copy(),
            shown_a=cells.shown_a.copy(),
            shown_b=cells.shown_b.copy(),
        )
        for cell in leased:
            hit = locate(cell["dimension"], cell["item_id"], cell["system_a"], cell["system_b"])
            if hit is None:
                continue
            c, p, flipped = hit
            held.available[c, p] = 0  # out with an annotator until the lease expires
            side_a = (cell["shown_first"] == "a") != flipped
            (held.shown_a if side_a else held.shown_b)[c, p] += 1
        batch, _ = recommend(rng_key, snapshot, held, request)
        out = []
        for k in range(len(batch)):
            dim, a, b = comps[int(batch.comparison[k])]
            out.append(
                {
                    "item_id": maps["prompts"][int(batch.prompt[k])],
                    "system_a": a,
                    "system_b": b,
                    "dimension": dim,
                    "shown_first": "a" if batch.shown_first[k] == SHOW_A else "b",
                    "reason": REASON_CODES[int(batch.reason[k])],
                    "needed": int(batch.need[k]) if np.isfinite(batch.need[k]) else None,
                    "snapshot_version": int(maps["versions"][dim]),
                }
            )
        return out

    # Choose outside any write transaction (a first call compiles), then store the lease
    # under the project's lease lock if the active leases are still those it was chosen
    # on (else choose again there): concurrent requests (or replicas) never hand out one
    # cell twice.
    with state.store.read() as conn:
        leased = repo.active_leased_cells(conn=conn, project_id=project_id, now=now)
    out = choose(leased)
    with state.store.write() as conn:
        repo.lock_leases(conn=conn, project_id=project_id)
        stored = repo.get_lease_by_key(conn=conn, project_id=project_id, idempotency_key=key)
        if stored is not None:  # a concurrent request with the same key was first
            return _replay(stored, key, fingerprint)
        current = repo.active_leased_cells(conn=conn, project_id=project_id, now=now)
        if current != leased:  # leases changed since: choose again (compiled by now)
            out = choose(current)
        lease = repo.create_lease(
            conn=conn,
            project_id=project_id,
            idempotency_key=key,
            annotator_id=body.annotator_id,
            cells=out,
            expires_at=now + timedelta(seconds=body.lease_seconds),
            now=now,
            request_hash=fingerprint,
        )
    # a concurrent request with the same key may have stored its batch first
    return _public(lease, replayed=lease["cells"] != out)
