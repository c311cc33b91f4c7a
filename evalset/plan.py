"""Plan the next batch: one pure step shared by the command line, Python and HTTP.

Every door prepares the recommender's named snapshot its own way (a judgments file fitted
on the spot: :func:`evalset.batch.recommend_state`; the service's newest snapshots and
running tally: ``services/api/routes/next_batch.py``), then asks the same question with the same
:class:`RecommendRequest`: :func:`plan_batch` resolves the request's targets,
builds :class:`adaptive.recommend.Request` (in this one place) and returns the batch with
the open comparisons it had to leave out. No I/O: the door stores or prints the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from adaptive.recommend.state import DEFAULT_BURN_IN
from adaptive.stopping.rule import DecisionRule

if TYPE_CHECKING:
    from adaptive.recommend import CellState, RecommenderState, RecommendInfo
    from evalset.cells import NamedCell
    from evalset.recommend_adapter import CellNames


#: Laplace draws of the recommender's fit
DEFAULT_DRAWS = 1000


@dataclass(frozen=True)
class RecommendRequest:
    """What the next batch is asked for (every default of ``evalset recommend`` is here).

    Attributes:
        size: tasks in the batch.
        seed: same data, request and seed: same batch.
        rule: the decision rule (which comparisons are closed, how close the others are).
        targets: comparisons that matter, as (system_a, system_b) (default: the undecided).
        adjacent: target leaderboard neighbours.
        tier: target the comparisons within these systems.
        burn_in: judgments every open comparison gets before the closest-first order.
        max_per_cell: tasks of one cell per batch (1 when ``annotator`` is given).
        annotator: never give this annotator a cell they already judged.
        parameterization: ``comparison`` or ``system`` (the fit's theta).
        draws: Laplace draws of the fit.
        question: the campaign's question (``top-k:2``, ``ranking``, ``versus:R``, ...; docs/
            decisions.md, "Questions"): the batch serves only the comparisons that can still
            change its answer (``pending``), none once it is answered.
        dimensions: serve only these dimensions (default: every one).
    """

    size: int = 20
    seed: int = 0
    rule: DecisionRule = field(default_factory=DecisionRule)
    targets: tuple[tuple[str, str], ...] = ()
    adjacent: bool = False
    tier: tuple[str, ...] = ()
    burn_in: int = DEFAULT_BURN_IN
    max_per_cell: int = 1
    annotator: str | None = None
    parameterization: str = "comparison"
    draws: int = DEFAULT_DRAWS
    question: str = ""
    dimensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ValueError("size must be positive")
        if self.question and (self.targets or self.adjacent or self.tier):
            raise ValueError("a question chooses the comparisons: leave out targets/adjacent/tier")


class NamedSnapshot(NamedTuple):
    """The recommender's snapshot with its names and what its doors may serve.

    Attributes:
        state: the integer-indexed snapshot (:func:`evalset.recommend_adapter.prepare`).
        names: its comparisons, prompts and dimensions by name.
        in_family: (C,) the comparisons of the rule's declared family (None: every one).
        family_words: the family in words, for the message that refuses a target outside it.
    """

    state: RecommenderState
    names: CellNames
    in_family: np.ndarray | None = None
    family_words: str = ""


class PlannedBatch(NamedTuple):
    """A batch in names, and the open comparisons its unjudged prompts cannot close."""

    cells: list[NamedCell]
    not_served: list[dict[str, Any]]
    info: RecommendInfo


class OutsideFamily(ValueError):
    """Targets that are not in the declared family (the API answers 422)."""


def batch_targets(
    snapshot: NamedSnapshot,
    request: RecommendRequest,
    question: Sequence[int] | None = None,
) -> tuple[int, ...] | None:
    """The comparison indices the request names (its question's pending ones when given),
    or None (every open comparison); only the family's.

    Raises:
        evalset.recommend_adapter.UnknownName: a target the snapshot does not have.
        OutsideFamily: a named pair outside the declared family.
    """
    from evalset.recommend_adapter import targets

    chosen = targets(
        snapshot.state,
        snapshot.names,
        pairs=request.targets,
        adjacent=request.adjacent,
        tier=request.tier,
        dimensions=request.dimensions or None,
    )
    if question is not None:
        chosen = tuple(question)
    if chosen is None or snapshot.in_family is None:
        return chosen
    outside = [f"{a}:{b}" for a, b in request.targets if not _in_family(snapshot, request, a, b)]
    if outside:
        raise OutsideFamily(
            f"targets {outside} are not in the declared family ({snapshot.family_words}): name them "
            "in pairs (family=registered) or ask for family=all-pairs"
        )
    return tuple(c for c in chosen if snapshot.in_family[c])


def _in_family(snapshot: NamedSnapshot, request: RecommendRequest, a: str, b: str) -> bool:
    assert snapshot.in_family is not None
    dims = request.dimensions or snapshot.names.dimensions
    return any(
        snapshot.in_family[g] and {x, y} == {a, b} and d in dims
        for g, (d, x, y) in enumerate(snapshot.names.comparisons)
    )


def plan_batch(
    snapshot: NamedSnapshot,
    cells: CellState,
    request: RecommendRequest,
    *,
    chosen: tuple[int, ...] | None = None,
    exclude: np.ndarray | None = None,
    reserve: int = 0,
) -> PlannedBatch:
    """The next batch of ``request`` on ``snapshot`` given the cells' state (display counts,
    cells out under a lease or not annotatable): same snapshot, cells, request and seed,
    same batch.

    Args:
        snapshot: the named snapshot.
        cells: the cells' state.
        request: what is asked (size, seed, rule's unit, burn-in, dimensions, ...).
        chosen: the comparisons to serve (:func:`batch_targets`; None: every open one).
        exclude: (C, P) cells never to serve (the annotator's own, gold cells).
        reserve: places of the batch kept for other cells (gold): ``size - reserve`` asked.
    """
    from adaptive.recommend import Request
    from evalset.recommend_adapter import not_served, recommend_named

    names = snapshot.names
    dims = request.dimensions
    asked = Request(
        size=request.size - reserve,
        targets=chosen,
        exclude=exclude,
        dimensions=tuple(i for i, d in enumerate(names.dimensions) if d in dims) if dims else None,
        burn_in=request.burn_in,
        allow_repeats=request.rule.unit == "judgment",
        max_per_cell=1 if request.annotator is not None else request.max_per_cell,
    )
    batch, info = recommend_named(request.seed, snapshot.state, names, cells, asked)
    return PlannedBatch(batch, not_served(info, snapshot.state, names), info)
