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
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, cast

import numpy as np
from fastapi import APIRouter, Header

from adaptive.recommend import CellState, RecommenderState, Request
from adaptive.stopping.decisions import DecisionRule, Decisions
from adaptive.stopping.rule import Family
from services.api.decisions import check_pairs
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.api.gold import plan_gold, secret_rng
from services.api.next_batch_default import default_model_state
from services.api.next_batch_schemas import LeasedCell, NextBatchCreate, NextBatchPublic, NotServed
from services.api.tally import ProjectTally, concat, flip, take
from services.store import repository as repo
from services.store.validation import id_problem

if TYPE_CHECKING:
    from evalset.recommend_adapter import CellNames
    from services.api.state import ServiceState

# evalset.recommend_adapter (and with it JAX, a second to import) loads at the first
# request, not when the service starts: /health answers sooner after a restart

router = APIRouter()


def _now() -> datetime:
    return datetime.now(UTC)


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


def _request_hash(body: NextBatchCreate) -> str:
    """The request an idempotency key is bound to: everything in the body but the key."""
    # leases stored before ``model`` existed were live batches: a default is left out
    skip = {"idempotency_key"} | ({"model"} if body.model == "snapshot" else set())
    skip |= set() if body.gold_share else {"gold_share"}  # the same for leases stored before it
    content = body.model_dump(mode="json", exclude=skip)
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def _replay(lease: repo.LeaseRow, key: str, fingerprint: str) -> NextBatchPublic:
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


def _prepare(
    state: ServiceState,
    project_id: str,
    dims: list[str],
    seed: int,
    annotator: str,
    rule: DecisionRule,
) -> tuple[RecommenderState, dict[str, Any]]:
    """The recommender snapshot of the project's newest posteriors, with names.

    The judgments come from the project's running tally (:mod:`services.api.tally`):
    a request reads those stored since the last one, not the campaign's. The decisions
    are those of the family ``rule`` declares (``GET .../decisions``'s rows); only its
    comparisons are served.
    """
    found = {d: state.snapshot(project_id, d) for d in dims}
    snaps = {d: s for d, s in found.items() if s is not None}
    if not snaps:
        raise ApiError(409, "no_snapshot", "no posterior snapshot yet: post judgments first")
    tally = state.tallies.project(project_id)
    with tally.lock:
        state.tallies.advance(state.store, project_id)
        check_pairs(rule, tally)
        family = tally.family(rule)
        decisions = tally.decide(rule, family)
        key = (
            state.store.url,  # one process may serve several stores (tests do)
            project_id,
            tuple((d, s.version) for d, s in sorted(snaps.items())),
            tally.catalogue_version,
            tuple(tally.dimensions[d].num_judgments for d in sorted(snaps)),
            seed,
            rule,
            family.comparisons,
        )
        hit = state.batch_states.get(key)
        if hit is None:
            # what does not depend on the judgments: the posteriors' state, names, responses
            base_key = (state.store.url, project_id, tally.catalogue_version, key[2], seed)
            base = state.batch_bases.setdefault(
                base_key, lambda: _base(state, project_id, tally, snaps, seed)
            )
            hit = state.batch_states.setdefault(
                key, lambda: _build(tally, snaps, base, family, decisions)
            )
        snapshot, maps = hit
        exclude = _judged_by(tally, maps["names"], annotator) if annotator else None
    return snapshot, {**maps, "exclude": exclude}


def _family_decisions(
    names: CellNames, family: Family, decisions: Decisions
) -> tuple[Decisions, np.ndarray]:
    """The family's decisions on the snapshot's comparisons, and (C,) which are in it.

    A comparison the snapshot orients the other way round reads its decision flipped;
    one outside the family gets an empty (undecided) decision and is never served.
    """
    from adaptive.stopping.decisions import decide

    where = {(d, frozenset((a, b))): (f, (a, b)) for f, (d, a, b) in enumerate(family.comparisons)}
    index = np.full(len(names.comparisons), family.size, np.int64)
    flipped = np.zeros(family.size + 1, bool)
    for g, (d, a, b) in enumerate(names.comparisons):
        hit = where.get((d, frozenset((a, b))))
        if hit is not None:
            index[g] = hit[0]
            flipped[hit[0]] = hit[1] != (a, b)
    empty = decide(np.zeros(0), np.zeros(0), np.zeros(0), 1, DecisionRule())
    return take(flip(concat([decisions, empty]), flipped), index), index < family.size


def _base(
    state: ServiceState,
    project_id: str,
    tally: ProjectTally,
    snaps: dict[str, Any],
    seed: int,
) -> tuple[RecommenderState, CellNames, CellState]:
    """The recommender snapshot of the posteriors, its names and the cells' responses."""
    from evalset.recommend_adapter import NamedFit, cell_state, prepare

    prompt_rows = state.tallies.prompts(state.store, project_id)
    # every pair of known systems is a comparison of the snapshot (the leaderboard's
    # adjacent pairs and tiers are found among them); pairs a snapshot compared keep its
    # orientation, the per-system skill gives the others (systems it never saw get prior
    # draws). Only the family's comparisons can be served.
    snapshot, names = prepare(
        [NamedFit(d, s.systems, s.pair_a, s.pair_b, None, s.skill) for d, s in snaps.items()],
        {},
        systems=[*tally.systems, *(x for s in snaps.values() for x in s.systems)],
        prompts=[
            *(r["prompt_id"] for r in prompt_rows),
            *(x for s in snaps.values() for x in s.items),
        ],
        all_pairs=True,
        prior_seed=seed,
    )
    responses = {
        (r["prompt_id"], system): text
        for r in prompt_rows
        for system, text in (r.get("responses") or {}).items()
    }
    cells, _ = cell_state(names, (), responses=responses)
    return snapshot, names, cells


def _build(
    tally: ProjectTally,
    snaps: dict[str, Any],
    base: tuple[RecommenderState, CellNames, CellState],
    family: Family,
    decisions: Decisions,
) -> tuple[RecommenderState, dict[str, Any]]:
    """The recommender snapshot and the cells' state from the posteriors and the tally."""
    snapshot, names, template = base
    cells = template._replace(
        available=template.available.copy(),
        shown_a=template.shown_a.copy(),
        shown_b=template.shown_b.copy(),
    )
    served, in_family = _family_decisions(names, family, decisions)
    cells.available[~in_family] = 0
    num_c, num_p = len(names.comparisons), len(names.prompts)
    judged = np.zeros(num_c * num_p, np.int64)
    prompt_index = {p: i for i, p in enumerate(names.prompts)}
    total = 0
    system_judgments = np.zeros_like(snapshot.system_judgments)
    for d_index, d in enumerate(names.dimensions):
        dim = tally.dimensions[d]
        block = np.flatnonzero(snapshot.dimension == d_index)
        ids = np.array([dim.pair_id(*names.comparisons[g][1:]) for g in block.tolist()], np.int64)
        flipped = np.array(
            [dim.orient[c] != names.comparisons[g][1:] for c, g in zip(ids, block)], bool
        )
        comp_map = np.full(len(dim.orient), -1, np.int64)
        comp_map[ids] = block
        flip_of = np.zeros(len(dim.orient), bool)
        flip_of[ids] = flipped
        prompt_map = np.array([prompt_index.get(p, -1) for p in dim.prompts] or [-1], np.int64)
        c = comp_map[dim.comparison.view()]
        p = prompt_map[dim.prompt.view()]
        ok = (c >= 0) & (p >= 0)
        flat = c[ok] * num_p + p[ok]
        judged += np.bincount(flat, minlength=num_c * num_p)
        shown = dim.shown.view()[ok]
        side_a = (shown == 1) != flip_of[dim.comparison.view()[ok]]
        for counts, side in ((cells.shown_a, side_a), (cells.shown_b, ~side_a)):
            counts += np.bincount(flat[(shown > 0) & side], minlength=num_c * num_p).reshape(
                num_c, num_p
            )
        per_comparison = judged.reshape(num_c, num_p)[block].sum(axis=1)
        system_judgments[d_index] = np.bincount(
            snapshot.pair_a[block], weights=per_comparison, minlength=system_judgments.shape[1]
        ) + np.bincount(
            snapshot.pair_b[block], weights=per_comparison, minlength=system_judgments.shape[1]
        )
        total += int(ok.sum())
    snapshot = snapshot._replace(
        version=total,
        num_judgments=total,
        decisions=served,
        judged=judged.reshape(num_c, num_p),
        system_judgments=system_judgments,
    )
    maps = {
        "names": names,
        "cells": cells,
        "versions": {d: snaps[d].version for d in names.dimensions},
        "in_family": in_family,
        "family": family,
    }
    return snapshot, maps


def _judged_by(tally: ProjectTally, names: CellNames, annotator: str) -> np.ndarray:
    """(C, P) the cells ``annotator`` judged (call with the tally's lock held)."""
    exclude = np.zeros((len(names.comparisons), len(names.prompts)), bool)
    prompt_index = {p: i for i, p in enumerate(names.prompts)}
    comparison_index = {name: g for g, name in enumerate(names.comparisons)}
    for d in names.dimensions:
        dim = tally.dimensions[d]
        who = dim.annotators.get(annotator)
        if who is None:
            continue
        mine = dim.annotator.view() == who
        prompts = list(dim.prompts)  # in id order
        cells = set(zip(dim.comparison.view()[mine].tolist(), dim.prompt.view()[mine].tolist()))
        for c, p in cells:
            a, b = dim.orient[c]
            g = comparison_index.get((d, a, b), comparison_index.get((d, b, a)))
            q = prompt_index.get(prompts[p])
            if g is not None and q is not None:
                exclude[g, q] = True
    return exclude


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
    from evalset.recommend_adapter import (
        UnknownName,
        hold_leased,
        not_served,
        recommend_named,
        targets,
    )
    from services.api.hybrid_routing import route_cells

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
    rule = body.rule()
    if body.model == "default":
        snapshot, maps = default_model_state(
            state,
            project_id,
            list(dims),
            seed=body.seed,
            annotator=body.annotator_id,
            rule=rule,
            route_by=body.route_by,
        )
    else:
        snapshot, maps = _prepare(state, project_id, list(dims), body.seed, body.annotator_id, rule)
    names: CellNames = maps["names"]
    now = _now()
    cells: CellState = maps["cells"]
    gold = plan_gold(
        state,
        project_id,
        share=body.gold_share,
        size=body.size,
        dimensions=list(dims),
        now=now,
    )
    exclude = gold.exclude(names, maps["exclude"])  # gold cells are never recommended
    try:
        chosen = targets(
            snapshot,
            names,
            pairs=body.targets or (),
            adjacent=body.adjacent,
            tier=body.tier or (),
            dimensions=dims,
        )
    except UnknownName as exc:
        raise ApiError(404, "not_found", exc.args[0]) from exc
    if chosen is not None:
        outside = [
            f"{a}:{b}"
            for a, b in body.targets or ()
            if not any(
                maps["in_family"][g] and {x, y} == {a, b} and d in dims
                for g, (d, x, y) in enumerate(names.comparisons)
            )
        ]
        if outside:
            message = (
                f"targets {outside} are not in the declared family ({maps['family'].describe()}): "
                "name them in pairs (family=registered) or ask for family=all-pairs"
            )
            raise ApiError(
                422, "validation_error", message, [{"field": "targets", "message": message}]
            )
        chosen = tuple(c for c in chosen if maps["in_family"][c])
    request = Request(
        size=body.size - gold.reserve,
        targets=chosen,
        exclude=exclude,
        dimensions=tuple(i for i, d in enumerate(names.dimensions) if d in dims),
        burn_in=body.burn_in,
        allow_repeats=body.unit == "judgment",
        max_per_cell=1,
    )
    left_out: list[dict[str, Any]] = []
    gold_unserved = [gold.wanted]
    rng = secret_rng()  # gold cells and the batch's order: nothing in the request tells them

    def choose(leased: list[repo.LeasedCellRow]) -> list[repo.LeasedCellRow]:
        """The batch given the cells other annotators hold now."""
        held = hold_leased(cells, names, gold.ordinary(leased))
        batch, info = recommend_named(body.seed, snapshot, names, held, request)
        left_out[:] = not_served(info, snapshot, names)
        if body.route_by:
            # the cells of the comparisons the judge saw are drawn by the hybrid's routing,
            # their rates kept in the lease (services/api/hybrid_routing.py)
            batch = route_cells(
                state,
                project_id,
                body.annotator_id,
                body.seed,
                rule,
                batch,
                gold.held(leased, list(dims)),
                body.route_by,
            )
        version = maps["versions"]
        mixed, gold_unserved[0] = gold.mix(
            [
                cast(
                    "repo.LeasedCellRow",
                    {**cell, "snapshot_version": int(version[cell["dimension"]])},
                )
                for cell in batch
            ],
            rng,
            leased,
        )
        return mixed

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
        # a cell registered as gold since the plan (registration takes this lock too) is
        # not served as an ordinary one: its judgment would be stored apart
        keys = repo.gold_keys(conn=conn, project_id=project_id)
        if keys != set(gold.keys):
            out = [c for c in out if c.get("gold") or not repo.is_gold(keys, *_cell_key(c))]
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
    replayed = lease["cells"] != out
    public = _public(lease, replayed=replayed)
    if not replayed:
        public.not_served = [NotServed(**row) for row in left_out]
        public.gold_unserved = gold_unserved[0]
    return public


def _cell_key(cell: Any) -> tuple[str, str, str, str]:
    """A leased cell's (dimension, item, system a, system b), as :func:`repo.is_gold` reads it."""
    return cell["dimension"], cell["item_id"], cell["system_a"], cell["system_b"]
