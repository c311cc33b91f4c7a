"""Gold (attention-check) cells as the service reads them: one pydantic model for the HTTP
door (``POST /projects/{p}/gold``) and the store (:func:`services.store.repository.add_gold_cells`).

The rows are those of ``evalset gold --gold FILE`` and ``evalset.gold``: ``item_id``,
``system_a``, ``system_b``, ``answer`` (``a``, ``b`` or ``tie`` for the pair in the row's
order) and optionally ``dimension``. The model's validator runs the files' own check,
:func:`adaptive.annotation.gold.read_gold`, so a cell is refused for the same reason, in the same
words, through every door; ids are stripped and answers lowercased as it does.
"""

from __future__ import annotations

from typing import Annotated, Any

import polars as pl
from pydantic import BaseModel, Field, ValidationError, model_validator

from adaptive.annotation.gold import GoldCellError, read_gold
from services.schemas import Id, SchemaPattern, Strict

#: gold cells per request
MAX_GOLD = 10_000
#: the answers a gold file may hold (read_gold gives the message for any other)
ANSWER_PATTERN = r"^\s*([aAbB]|[tT][iI][eE])\s*$"


class GoldCellCreate(Strict):
    """A cell with a known answer."""

    item_id: Id = Field(description="the prompt")
    system_a: Id
    system_b: Id
    dimension: Id | None = Field(
        default=None, description="the dimension the answer holds for (null: every dimension)"
    )
    answer: Annotated[str, SchemaPattern(ANSWER_PATTERN)] = Field(
        max_length=16,
        description="a, b or tie, for the pair in this row's order (case and surrounding "
        "spaces ignored, as in a gold file)",
    )


class GoldCellsCreate(Strict):
    cells: list[GoldCellCreate] = Field(min_length=1, max_length=MAX_GOLD)

    @model_validator(mode="after")
    def _read_gold(self) -> GoldCellsCreate:
        """The gold files' check (:func:`adaptive.annotation.gold.read_gold`): a refused row is named
        (0-based ``row`` in the problem, 1-based in the message as in a file)."""
        frame = pl.DataFrame(
            [c.model_dump() for c in self.cells],
            schema={k: pl.Utf8 for k in ("item_id", "system_a", "system_b", "dimension", "answer")},
        )
        try:
            checked = read_gold(frame)
        except GoldCellError as exc:
            # pydantic turns a ValidationError raised here into its own errors, at this
            # location: the row and column at fault, as the batch routes name them
            raise ValidationError.from_exception_data(
                "GoldCellsCreate",
                [
                    {
                        "type": "value_error",
                        "loc": ("cells", exc.row - 1, exc.column),
                        "input": self.cells[exc.row - 1].model_dump(),
                        "ctx": {"error": ValueError(str(exc))},
                    }
                ],
            ) from None
        self.cells = [GoldCellCreate.model_construct(**row) for row in checked.to_dicts()]
        return self


def gold_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` checked by :class:`GoldCellsCreate` (ids stripped, answers lowercased).

    Raises:
        pydantic.ValidationError: as the HTTP door refuses them.
    """
    return [c.model_dump() for c in GoldCellsCreate.model_validate({"cells": rows}).cells]


class GoldCellPublic(BaseModel):
    item_id: str
    system_a: str
    system_b: str
    dimension: str | None = Field(description="null: every dimension")
    answer: str = Field(description="a, b or tie, for the pair in this order")


class GoldCellsPublic(BaseModel):
    cells: list[GoldCellPublic] = Field(description="in the order they were registered")


class GoldCellsAdded(BaseModel):
    created: int = Field(description="cells newly registered")
    unchanged: int = Field(
        description="cells registered before with the same answer (either order): no-ops"
    )


class GoldScoreRow(BaseModel):
    """One annotator's gold answers: a row of ``evalset gold --format json``."""

    annotator_id: str
    n_gold: int = Field(description="gold cells judged (an annotator's first judgment of each)")
    n_right: int
    accuracy: float
    accuracy_low: float = Field(description="95% Wilson interval")
    accuracy_high: float
    max_ratio: float = Field(description="the largest the sequential probability ratio reached")
    flagged: bool = Field(description="the sequential test rejected accuracy >= careful")
    flagged_after: int | None = Field(description="gold judgments when it first did")
    reason: str


class GoldScoresPublic(BaseModel):
    num_gold_judgments: int = Field(description="stored judgments of gold cells")
    rule: dict[str, float] = Field(description="careful, careless and level of the test")
    rows: list[GoldScoreRow]
