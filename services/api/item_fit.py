"""``GET /projects/{p}/item-fit``: each prompt's fit, the rows of ``evalset items --fit``.

The default model fitted on the stored judgments (the fit ``GET .../significance?model=default``
reads: one job per judgments seen, shared by both answers, :func:`services.api.background.default_fits`),
then the posterior predictive check of every prompt and the test information curves
(:func:`evalset.item_fit.item_fit_check`, as the command line computes them), on the service's
background thread: ``409 item_fit_pending`` until ready, then kept until the next batch. The
dashboard's item-fit card (:mod:`services.api.dashboard_item_fit`) reads the same answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from adaptive.item_fit import DEFAULT_LEVEL
from adaptive.streaming import Source
from services import schemas as s
from services.api.analysis import Dimension, _computed, _dimension
from services.api.background import Pending, default_fits
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses

__all__ = ["item_fit_answer", "item_fit_public", "router"]

router = APIRouter()

FitLevel = Annotated[
    float,
    Query(gt=0.0, lt=1.0, description="flag a prompt when its fit_p is below this, per prompt"),
]


def item_fit_public(source: Source, fits: list[Any], level: float) -> s.ItemFitPublic:
    """``evalset items --fit --format json`` of the stored judgments, from the default
    model's fit of them (:func:`services.api.background.significance_fits`)."""
    from evalset.item_fit import item_fit_check
    from evalset.verdicts import DEFAULT_SEED

    (result,) = fits
    rows, curves, info = item_fit_check(result, seed=DEFAULT_SEED, level=level)
    return s.ItemFitPublic(
        dimension=source.dimension,
        num_judgments=source.num_judgments,
        model="default",
        level=level,
        num_draws=info.num_draws,
        num_flagged=int(info.flagged.sum()),
        rows=[s.ItemFitRow.model_validate(r) for r in rows],
        information=[s.InformationPoint.model_validate(r) for r in curves],
    )


def item_fit_answer(state: Any, project_id: str, dimension: str, level: float) -> Any:
    """The item fit of the stored judgments of ``dimension``: an ``ItemFitPublic``, None
    without judgments, or :class:`Pending` (with the newest finished answer, if any) while
    the default model's fit or the check runs. Never waits."""
    source = state.load_source((project_id, dimension))
    if source is None:
        return None
    fits = default_fits(state.jobs, project_id, source)
    key = (project_id, dimension, source.last_seq, "item-fit", level)
    if isinstance(fits, Pending):  # the check is queued once the fit is done
        return state.jobs.pending(key, source.num_judgments)
    return state.jobs.result(key, source.num_judgments, item_fit_public, source, fits, level)


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
    Computed on a background thread: 409 ``item_fit_pending`` until it is done, then kept
    until the next batch."""
    dim = _dimension(state, project_id, dimension)
    try:
        result = item_fit_answer(state, project_id, dim, level)
    except ValueError as exc:
        raise ApiError(422, "cannot_fit", f"no item fit for {dim!r}: {exc}") from None
    answer: s.ItemFitPublic = _computed(result, dim, "item_fit_pending", "the item fit")
    return answer
