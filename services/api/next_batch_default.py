"""``POST .../next-batch`` with ``"model": "default"``: the command line's batch.

The live batch (``model: "snapshot"``) reads the worker's newest snapshot and the
catalogue. This one fits the stored judgments as ``evalset recommend --data`` fits a
judgments file (:func:`evalset.batch.recommend_fits`, on the service's background thread,
once per judgments seen and seed: ``409 recommendation_pending`` until it is done) and
builds the recommender's state from them as the command line does
(:func:`evalset.batch.recommend_state`), with the responses registered in the catalogue.
The route then holds the leased cells out and stores the lease as for a live batch, so
with no cell under lease the batch is the command line's, cell for cell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from adaptive.stopping.rule import DEFAULT_FAMILY
from services.api.errors import ApiError
from services.runtime.background import Pending

if TYPE_CHECKING:
    from adaptive.recommend import RecommenderState
    from adaptive.stopping.decisions import DecisionRule
    from services.runtime.state import ServiceState
    from services.runtime.tally import ProjectTally


def _fits(frame: pl.DataFrame, seed: int) -> Any:
    from evalset.batch import recommend_fits
    from evalset.plan import RecommendRequest

    return recommend_fits(frame, RecommendRequest(seed=seed))


def default_model_state(
    state: ServiceState,
    project_id: str,
    dims: list[str],
    *,
    seed: int,
    annotator: str,
    rule: DecisionRule,
    route_by: str | None,
    ask: Callable[[ProjectTally], Any] | None = None,
) -> tuple[RecommenderState, dict[str, Any]]:
    """The command line's recommender state of the stored judgments of ``dims`` and the
    maps the route reads (as :func:`services.api.next_batch_prepare._prepare` returns them);
    ``ask``: the question, read on the tally with the prompts, under one hold of its lock."""
    from evalset.batch import recommend_state
    from evalset.plan import RecommendRequest

    if rule.family != DEFAULT_FAMILY or route_by is not None:
        message = (
            f"model=default serves the command line's batch: the {DEFAULT_FAMILY!r} family, "
            "no routing (family, pairs and route_by apply to model=snapshot)"
        )
        raise ApiError(422, "validation_error", message, [{"field": "model", "message": message}])
    tally = state.tallies.project(project_id)
    with tally.lock:  # one look: the question (a bad one is a 422 before any fit) and prompts
        state.tallies.advance(state.store, project_id)
        asked = ask(tally) if ask else None
        prompt_rows = state.tallies.prompts(state.store, project_id)
    sources = [
        s for d in dict.fromkeys(dims) if (s := state.load_source((project_id, d))) is not None
    ]
    if not sources:
        raise ApiError(409, "no_snapshot", "no judgments yet: post judgments first")
    frame = pl.concat([s.judgments.drop("seq") for s in sources], how="vertical_relaxed")
    seen = (tuple(s.last_seq for s in sources), frame.height)
    key = (project_id, tuple(s.dimension for s in sources), seen, "recommend", seed)
    try:
        fits = state.jobs.result(key, frame.height, _fits, frame, seed)
    except ValueError as exc:
        raise ApiError(422, "cannot_fit", f"cannot fit the stored judgments: {exc}") from None
    if isinstance(fits, Pending):
        raise ApiError(
            409,
            "recommendation_pending",
            f"the default model's fit of {fits.num_judgments} judgments is being computed; "
            "try again shortly",
        )
    responses: dict[tuple[str, ...], str] = {
        (r["prompt_id"], system): text
        for r in prompt_rows
        for system, text in (r.get("responses") or {}).items()
    }
    request = RecommendRequest(seed=seed, rule=rule, annotator=annotator or None)
    snapshot, names, cells, exclude = recommend_state(fits, frame, request, responses=responses)
    maps = {
        "names": names,
        "cells": cells,
        "exclude": exclude,
        "versions": dict.fromkeys(names.dimensions, snapshot.version),
        "in_family": np.ones(len(names.comparisons), bool),
        "family": None,
        "asked": asked,
    }
    return snapshot, maps
