"""``GET /projects/{project_id}/agreement``: inter-annotator agreement of the stored judgments.

The rows ``evalset agreement --format json`` and ``evalset.agreement`` give for the same
judgments (:mod:`adaptive.annotation.agreement`). They are counts over the repeated cells, no fit, so
the request computes them from the judgments the worker's incremental cache holds
(``ServiceState.load_source``), in the order they were stored.
"""

from __future__ import annotations

from typing import Annotated, Literal

import polars as pl
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from evalset.stored import NoRepeatedCells, agreement_rows
from services.api.deps import ProjectId, State
from services.api.errors import ApiError, error_responses
from services.store import repository as repo

router = APIRouter()


class AgreementDimensionRow(BaseModel):
    dimension: str
    n_cells: int = Field(description="cells (prompt, pair in either order) judged at least twice")
    n_judgments: int = Field(description="judgments of those cells")
    per_cell_min: int | None = Field(description="fewest judgments of a repeated cell")
    per_cell_max: int | None
    n_self_repeats: int = Field(
        description="judgments whose annotator had already judged the cell (values only with "
        "self_repeats=keep)"
    )
    n_single_cells: int = Field(description="cells judged once (left out)")
    observed_agreement: float | None = Field(description="1 - D_o of nominal alpha")
    expected_agreement: float | None = Field(description="1 - D_e of nominal alpha")
    alpha: float | None = Field(
        description="Krippendorff's alpha, nominal over first wins / second wins / tie in the "
        "pair's sorted order"
    )
    fleiss_kappa: float | None = Field(
        description="Fleiss' kappa, when every repeated cell has the same number of judgments"
    )
    note: str = Field(description="why a figure is missing (empty when none is)")


class AgreementAnnotatorRow(BaseModel):
    dimension: str
    annotator_id: str
    n_judgments: int
    n_shared: int = Field(description="cells the annotator judged that others judged too")
    n_compared: int = Field(description="its judgments of cells where the others have a majority")
    agree_majority: float | None = Field(description="share of those matching the majority")
    chance_agreement: float | None = Field(
        description="the share matching by chance with the annotator's own label shares"
    )
    kappa_majority: float | None = Field(description="(agree - chance) / (1 - chance)")
    p_value: float | None = Field(description="one-sided: P(at least this many matches by chance)")
    flagged: bool = Field(description="not significantly above chance at test_level")
    note: str


class AgreementPublic(BaseModel):
    report: Literal["dimensions", "annotators"]
    num_judgments: int = Field(description="the stored judgments the rows were computed from")
    rows: list[AgreementDimensionRow] | list[AgreementAnnotatorRow]


def _stored(state: State, project_id: str, dimension: str | None) -> pl.DataFrame:
    """The project's judgments (of ``dimension``, or every one) in the order they were stored."""
    with state.store.read() as conn:
        known = [d["dimension_id"] for d in repo.list_dimensions(conn=conn, project_id=project_id)]
    if dimension is not None and dimension not in known:
        raise ApiError(
            404, "not_found", f"unknown dimension {dimension!r}; the project has {known}"
        )
    frames = []
    for dim in [dimension] if dimension is not None else known:
        source = state.load_source((project_id, dim))
        if source is not None:
            frames.append(source.judgments)
    if not frames:
        raise ApiError(409, "no_repeated_cells", "no judgments stored yet: no agreement to measure")
    return pl.concat(frames).sort("seq")


@router.get(
    "/projects/{project_id}/agreement",
    operation_id="agreement",
    tags=["analysis"],
    responses=error_responses(404, 409),
)
def agreement(
    project_id: ProjectId,
    state: State,
    dimension: Annotated[
        str | None, Query(max_length=200, description="default: every dimension")
    ] = None,
    report: Annotated[
        Literal["dimensions", "annotators"],
        Query(description="one row per dimension, or per annotator and dimension"),
    ] = "dimensions",
    test_level: Annotated[
        float, Query(gt=0.0, lt=1.0, description="level of each annotator's test against chance")
    ] = 0.05,
    self_repeats: Annotated[
        Literal["drop", "keep"],
        Query(
            description="an annotator's later judgments of a cell it already judged: left out "
            "(its first is its value) or counted as values of the cell"
        ),
    ] = "drop",
) -> AgreementPublic:
    """Agreement on the cells judged more than once: Krippendorff's alpha and Fleiss' kappa
    per dimension, or each annotator against the others' majority (409 `no_repeated_cells`
    while no cell has been judged twice)."""
    judgments = _stored(state, project_id, dimension)
    try:
        rows = agreement_rows(
            judgments, report=report, test_level=test_level, self_repeats=self_repeats
        )
    except NoRepeatedCells as exc:
        raise ApiError(409, "no_repeated_cells", str(exc)) from None
    public: list[AgreementDimensionRow] | list[AgreementAnnotatorRow]
    if report == "dimensions":
        public = [AgreementDimensionRow(**r) for r in rows]
    else:
        public = [AgreementAnnotatorRow(**r) for r in rows]
    return AgreementPublic(report=report, num_judgments=judgments.height, rows=public)
