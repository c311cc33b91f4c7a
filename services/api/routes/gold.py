"""Gold (attention-check) cells in the service: registered per project, mixed blind into the
next batch, their judgments kept apart and scored (docs/gold.md).

* ``POST /projects/{p}/gold``: register cells with a known answer (the rows of a gold file,
  checked as ``evalset gold`` checks them), all or nothing; the same cell with the same
  answer again is a no-op, a changed answer or an already judged cell is refused;
* ``GET /projects/{p}/gold``: the registered cells;
* ``GET /projects/{p}/gold/scores``: each annotator scored on the stored gold judgments, the
  rows ``evalset gold`` gives for the same judgments and cells (:mod:`adaptive.annotation.gold`).

``POST /projects/{p}/next-batch`` asks :func:`plan_gold` which gold cells it may serve
(``gold_share``), keeps every gold cell out of its recommendations and lets
:meth:`GoldPlan.mix` draw them, from a secret source, among the comparisons its ordinary
cells serve, shuffling the whole batch; the lease marks them, the answer does not. A gold
cell goes to one annotator, as an ordinary cell does (:func:`repo.gold_cells_taken`). With an
admin token set, only it opens the routes above (``services.api.deps.gold_project``).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from fastapi import APIRouter, Query

from adaptive.annotation.gold import (
    DEFAULT_CAREFUL,
    DEFAULT_CARELESS,
    DEFAULT_GOLD_LEVEL,
    GoldRule,
)
from evalset.stored import score_gold
from services.api.deps import GoldProjectId, State
from services.api.errors import ApiError, error_responses
from services.schemas_gold import (
    GoldCellPublic,
    GoldCellsAdded,
    GoldCellsCreate,
    GoldCellsPublic,
    GoldScoreRow,
    GoldScoresPublic,
)
from services.store import repository as repo

if TYPE_CHECKING:
    from evalset.recommend_adapter import CellNames
    from services.runtime.state import ServiceState

router = APIRouter()


@router.post(
    "/projects/{project_id}/gold",
    operation_id="add_gold_cells",
    tags=["gold"],
    summary="Register gold (attention-check) cells: cells with a known answer",
    responses=error_responses(404, 422),
)
def add_gold_cells(
    project_id: GoldProjectId, body: GoldCellsCreate, state: State
) -> GoldCellsAdded:
    """The rows of a gold file (``item_id``, ``system_a``, ``system_b``, ``answer`` = ``a``,
    ``b`` or ``tie`` for that order, optional ``dimension``: null holds for every
    dimension), all or nothing. A cell registered before with the same answer, in either
    order, is a no-op; the whole request is refused (``422 invalid_batch``, one problem per
    row) when a row names an unknown system, prompt or dimension, changes a registered
    cell's answer, or names a cell that already has stored judgments (the running decisions
    counted them). From then on every judgment of the cell is stored apart: no decision,
    fit or count reads it."""
    cells = [c.model_dump() for c in body.cells]
    with state.store.write() as conn:
        created, unchanged = repo.add_gold_cells(conn=conn, project_id=project_id, cells=cells)
    return GoldCellsAdded(created=created, unchanged=unchanged)


@router.get(
    "/projects/{project_id}/gold",
    operation_id="list_gold_cells",
    tags=["gold"],
    responses=error_responses(404),
)
def list_gold_cells(project_id: GoldProjectId, state: State) -> GoldCellsPublic:
    """The project's gold cells in the order they were registered."""
    with state.store.read() as conn:
        cells = repo.list_gold_cells(conn=conn, project_id=project_id)
    return GoldCellsPublic(cells=[GoldCellPublic(**c) for c in cells])


def _score_rows(
    state: ServiceState, project_id: str, dimension: str | None, rule: GoldRule
) -> tuple[int, list[dict[str, Any]]]:
    """The stored gold judgments counted (of ``dimension``: a 404 when the project has no
    such dimension) and their score rows under ``rule``."""
    with state.store.read() as conn:
        known = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
        cells = repo.list_gold_cells(conn=conn, project_id=project_id)
        judgments = repo.fetch_gold_judgments(conn=conn, project_id=project_id)
    if dimension is not None:
        if dimension not in known:
            raise ApiError(
                404, "not_found", f"unknown dimension {dimension!r}; the project has {known}"
            )
        judgments = [j for j in judgments if j["dimension"] == dimension]
    return len(judgments), score_gold(judgments, cells, rule)


@router.get(
    "/projects/{project_id}/gold/scores",
    operation_id="gold_scores",
    tags=["gold"],
    responses=error_responses(404),
)
def gold_scores(
    project_id: GoldProjectId,
    state: State,
    dimension: Annotated[
        str | None, Query(max_length=200, description="default: every dimension")
    ] = None,
    careful: Annotated[
        float,
        Query(gt=0.0, lt=1.0, description="accuracy a careful annotator reaches at least"),
    ] = DEFAULT_CAREFUL,
    careless: Annotated[
        float,
        Query(
            gt=0.0,
            lt=1.0,
            description="accuracy of a careless annotator (the test's alternative), below careful",
        ),
    ] = DEFAULT_CARELESS,
    level: Annotated[
        float,
        Query(gt=0.0, lt=1.0, description="chance, at most, that a careful annotator is flagged"),
    ] = DEFAULT_GOLD_LEVEL,
) -> GoldScoresPublic:
    """Each annotator with judgments of gold cells: accuracy, its Wilson interval and an
    anytime-valid flag (Wald's sequential test), the rows of ``evalset gold --format json``
    for the same judgments and gold cells. No rows while no named annotator has judged a
    gold cell."""
    try:
        rule = GoldRule(careful=careful, careless=careless, level=level)
    except ValueError as exc:
        raise ApiError(
            422, "validation_error", str(exc), [{"field": "careless", "message": str(exc)}]
        ) from None
    num_judgments, rows = _score_rows(state, project_id, dimension, rule)
    return GoldScoresPublic(
        num_gold_judgments=num_judgments,
        rule={"careful": careful, "careless": careless, "level": level},
        rows=[GoldScoreRow(**r) for r in rows],
    )


# ---------------------------------------------------------------- the next batch's gold cells


def round_half_up(x: float) -> int:
    """``x`` rounded to the nearest integer, halves up (Python's ``round`` rounds them to even)."""
    return math.floor(x + 0.5)


def secret_rng() -> np.random.Generator:
    """A generator seeded from the OS's secret source: the gold cells, their positions and
    ``shown_first`` must not follow from anything in the request or the answer (the seed
    and the idempotency key are both there); a replay reads the stored lease instead."""
    return np.random.default_rng(secrets.randbits(128))


#: (dimension, item, a, b): one gold cell a batch can serve, in the order registered
Candidate = tuple[str, str, str, str]


@dataclass(frozen=True)
class GoldPlan:
    """The gold cells of one next batch: which may be served, and which to keep out of the
    recommendations (every gold cell: it must not eat the recommender's budget).

    ``wanted`` = round-half-up(``share`` x size) gold cells were asked for; ``reserve`` of
    them are kept free of the recommender's batch (at most the candidates, and at least one
    cell is left for an ordinary one)."""

    keys: frozenset[repo.GoldKey]
    candidates: tuple[Candidate, ...]
    share: float
    wanted: int
    reserve: int
    size: int

    def exclude(self, names: CellNames, exclude: np.ndarray | None) -> np.ndarray | None:
        """``exclude`` (C, P) with every gold cell of the recommender's names set."""
        if not self.keys:
            return exclude
        out = (
            np.zeros((len(names.comparisons), len(names.prompts)), bool)
            if exclude is None
            else exclude.copy()
        )
        for dim, item, pair in self.keys:
            a, b = sorted(pair)
            for d in [dim] if dim else names.dimensions:
                hit = names.locate(d, item, a, b)
                if hit is not None:
                    out[hit[0], hit[1]] = True
        return out

    def ordinary(self, leased: list[repo.LeasedCellRow]) -> list[repo.LeasedCellRow]:
        """The leased cells but the gold ones (held out of the recommendations anyway)."""
        return [c for c in leased if not c.get("gold")] if self.keys else leased

    def held(self, leased: list[repo.LeasedCellRow], dimensions: list[str]) -> list[Any]:
        """``leased`` and every gold cell in ``dimensions``: the cells a judge's routing must
        not draw (services/api/hybrid_routing.py reads their names only)."""
        names = ("dimension", "item_id", "system_a", "system_b")
        return [*leased] + [
            dict(zip(names, (d, item, *sorted(pair)), strict=True))
            for dim, item, pair in self.keys
            for d in ([dim] if dim else dimensions)
        ]

    def mix(
        self,
        batch: list[repo.LeasedCellRow],
        rng: np.random.Generator,
        leased: Sequence[repo.LeasedCellRow] = (),
    ) -> tuple[list[repo.LeasedCellRow], int]:
        """``batch`` with gold cells mixed in, and how many of ``wanted`` are unserved.

        A gold cell held under any of the active leases ``leased`` is not drawn (one
        annotator at a time, as an ordinary cell). It is drawn only from the comparisons
        (dimension, pair in either order) ``batch`` serves, and reads as one of its comparison's cells: the orientation,
        ``reason`` and ``needed`` of one of them drawn at random. With ``n`` of the
        ``size - reserve`` ordinary cells served, at most round-half-up(``reserve`` x n /
        (size - reserve)) gold cells are served, so a short batch keeps the share asked.
        Whenever ``share`` > 0 the whole batch is shuffled (ordinary cells too): its order
        tells nothing. ``rng`` must be secret (:func:`secret_rng`)."""
        if self.share <= 0:
            return batch, 0
        by_comparison: dict[tuple[str, frozenset[str]], list[repo.LeasedCellRow]] = {}
        for cell in batch:
            pair = frozenset((cell["system_a"], cell["system_b"]))
            by_comparison.setdefault((cell["dimension"], pair), []).append(cell)
        held = {
            (c["dimension"], c["item_id"], frozenset((c["system_a"], c["system_b"])))
            for c in leased
            if c.get("gold")
        }
        open_ = [
            c
            for c in self.candidates
            if (c[0], frozenset(c[2:])) in by_comparison
            and (c[0], c[1], frozenset(c[2:])) not in held
        ]
        ordinary = self.size - self.reserve
        cap = round_half_up(self.reserve * len(batch) / ordinary) if ordinary > 0 else 0
        count = min(self.reserve, cap, len(open_))
        picked = rng.choice(len(open_), size=count, replace=False).tolist() if count else []
        gold: list[repo.LeasedCellRow] = []
        for i in picked:
            d, item, a, b = open_[i]
            like = by_comparison[(d, frozenset((a, b)))]
            seen = like[int(rng.integers(len(like)))]
            gold.append(
                repo.LeasedCellRow(
                    item_id=item,
                    system_a=seen["system_a"],
                    system_b=seen["system_b"],
                    dimension=d,
                    # a coin flip, not balanced per cell: one gold judgment per annotator
                    shown_first=str(rng.choice(["a", "b"])),
                    reason=seen["reason"],
                    needed=seen["needed"],
                    snapshot_version=seen["snapshot_version"],
                    gold=True,
                )
            )
        out = [*batch, *gold]
        order = rng.permutation(len(out))
        return [out[int(k)] for k in order], self.wanted - len(gold)


def _servable(responses: dict[str, str] | None, a: str, b: str) -> bool:
    """A gold cell can be shown: its prompt has responses of both systems (or none at all
    is registered, as annotatable_cells reads it); identical ones are fine (a tie's gold)."""
    if not responses:
        return True
    return bool((responses.get(a) or "").strip() and (responses.get(b) or "").strip())


def plan_gold(
    state: ServiceState,
    project_id: str,
    *,
    share: float,
    size: int,
    dimensions: list[str],
    now: datetime,
) -> GoldPlan:
    """The gold cells a batch of ``size`` may serve: those in ``dimensions`` nobody judged
    or holds under an active lease (each goes to one annotator, as an ordinary cell does);
    :meth:`GoldPlan.mix` draws from them once the ordinary cells are chosen."""
    wanted = round_half_up(share * size)
    with state.store.read() as conn:
        cells = repo.list_gold_cells(conn=conn, project_id=project_id)
        if not cells:
            return GoldPlan(frozenset(), (), share, wanted, 0, size)
        keys = frozenset(
            (c["dimension"] or "", c["item_id"], frozenset((c["system_a"], c["system_b"])))
            for c in cells
        )
        if not wanted:
            return GoldPlan(keys, (), share, wanted, 0, size)
        done = repo.gold_cells_taken(conn=conn, project_id=project_id, now=now)
        responses = repo.prompt_responses(
            conn=conn, project_id=project_id, items={c["item_id"] for c in cells}
        )
    candidates: list[Candidate] = []
    for c in cells:
        a, b = c["system_a"], c["system_b"]
        if not _servable(responses.get(c["item_id"]), a, b):
            continue
        for d in [c["dimension"]] if c["dimension"] else dimensions:
            if d in dimensions and (d, c["item_id"], frozenset((a, b))) not in done:
                candidates.append((d, c["item_id"], a, b))
    reserve = max(0, min(wanted, len(candidates), size - 1))
    return GoldPlan(keys, tuple(candidates), share, wanted, reserve, size)
