"""``GET /projects/{p}/item-fit``: each prompt's fit, the rows of ``evalset items --fit``.

One background job per judgments seen checks the default model's fit of the stored judgments
(the fit ``GET .../significance?model=default`` reads, :func:`services.runtime.background.default_fits`:
the job reuses it when it is done, else fits it and keeps it for that answer), then every
prompt's posterior predictive check and the information curve of every prompt
(:func:`evalset.item_fit.check_items`). Its p-values do not depend on the level, so the level
asked for (the flags, their reasons in words and the curve of the prompts not flagged,
:func:`evalset.item_fit.flag_items`, as the command line computes them) is applied when
answering. ``409 item_fit_pending`` until the job is done; the dashboard's item-fit card
(:mod:`services.api.dashboard_item_fit`) reads the same answer, or the newest finished one
meanwhile.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Query

from adaptive.estimation.item_fit import DEFAULT_LEVEL
from adaptive.estimation.streaming import Source
from services import schemas as s
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.api.routes.analysis import Dimension
from services.api.snapshot_reads import computed_answer, resolve_dimension
from services.runtime.background import BackgroundJobs, Pending, default_fits_now, seen

__all__ = ["check_stored_items", "item_fit_answer", "item_fit_public", "router"]

router = APIRouter()

FitLevel = Annotated[
    float,
    Query(gt=0.0, lt=1.0, description="flag a prompt when its fit_p is below this, per prompt"),
]


def check_stored_items(jobs: BackgroundJobs, project_id: str, source: Source) -> Any:
    """The item-fit job: :func:`evalset.item_fit.check_items` of the default model's fit of
    ``source`` (the shared fit when it is done, else fitted here; the worker runs one job at
    a time, in order, so a fit queued before this job is done when it starts)."""
    from evalset.item_fit import check_items
    from evalset.verdicts import DEFAULT_SEED

    (result,) = default_fits_now(jobs, project_id, source)
    return check_items(result, seed=DEFAULT_SEED)


def item_fit_public(
    dimension: str, num_judgments: int, check: Any, level: float
) -> s.ItemFitPublic:
    """``evalset items --fit --format json`` of ``num_judgments`` stored judgments at
    ``level``, from their check (:func:`check_stored_items`)."""
    from evalset.item_fit import flag_items

    rows, curves, info = flag_items(check, level)
    return s.ItemFitPublic(
        dimension=dimension,
        num_judgments=num_judgments,
        model="default",
        level=level,
        num_draws=info.num_draws,
        num_flagged=int(info.flagged.sum()),
        rows=[s.ItemFitRow.model_validate(r) for r in rows],
        information=[s.InformationPoint.model_validate(r) for r in curves],
    )


def item_fit_answer(state: Any, project_id: str, dimension: str, level: float) -> Any:
    """The item fit of the stored judgments of ``dimension``: an ``ItemFitPublic``, None
    without judgments, or :class:`Pending` (with the newest finished answer, if any, at
    ``level``) while the check runs. Never waits."""
    source = state.load_source((project_id, dimension))
    if source is None:
        return None
    key = (project_id, dimension, seen(source), "item-fit")
    check = state.jobs.result(
        key, source.num_judgments, check_stored_items, state.jobs, project_id, source
    )
    if not isinstance(check, Pending):
        return item_fit_public(dimension, source.num_judgments, check, level)
    if check.previous is None or check.previous_judgments is None:
        return check
    older = item_fit_public(dimension, check.previous_judgments, check.previous, level)
    return replace(check, previous=older)


@router.get(
    "/projects/{project_id}/item-fit",
    operation_id="item_fit",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def item_fit(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    level: FitLevel = DEFAULT_LEVEL,
) -> s.ItemFitPublic:
    """Each prompt's fit (``evalset items --fit``): ``fit_p``, the posterior predictive
    p-value of its judgments' trend over the comparisons' abilities, ``misfit`` where it is
    below ``level`` and ``misfit_reason`` in words, with the test information curves.
    Computed on a background thread once per judgments seen, whatever the level: 409
    ``item_fit_pending`` until it is done, then kept until the next batch."""
    dim = resolve_dimension(state, project_id, dimension)
    try:
        result = item_fit_answer(state, project_id, dim, level)
    except ValueError as exc:
        raise ApiError(422, "cannot_fit", f"no item fit for {dim!r}: {exc}") from None
    answer: s.ItemFitPublic = computed_answer(result, dim, "item_fit_pending", "the item fit")
    return answer
