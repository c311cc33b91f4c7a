"""One rule for ids and texts, shared by the API schemas, ``evalset import`` and the store.

The same input gets the same answer everywhere, on SQLite and PostgreSQL alike:
the store checks every row it writes with these functions (so a path that skips
the API, such as a bulk import, cannot store what the API refuses), and the API's
pydantic schemas call the same functions, so a request is refused with 422 before
it reaches the store.

The rules themselves live in :mod:`adaptive.core.ids` (files read by every command
follow them too): an **id** is 1..200 characters without control characters, lone
surrogates, bidirectional controls or zero-width characters, in Unicode NFC form; a
**text** has no control characters but tab and newlines; a **timestamp** is empty or
ISO 8601. PostgreSQL refuses NUL in text, and a control character in an id is never
intended (it breaks CSV exports and log lines).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from adaptive.core.ids import ID_BAD as _ID_BAD
from adaptive.core.ids import (
    MAX_ID,
    MAX_TEXT,
    MAX_TIMESTAMP,
    id_problem,
    text_problem,
    timestamp_problem,
)

__all__ = [
    "MAX_ID",
    "MAX_TEXT",
    "MAX_TIMESTAMP",
    "id_problem",
    "row_problems",
    "text_problem",
    "timestamp_problem",
]


def row_problems(
    rows: Sequence[dict[str, Any]],
    *,
    ids: Iterable[str] = (),
    optional_ids: Iterable[str] = (),
    texts: Iterable[str] = (),
    text_maps: Iterable[str] = (),
    key: str | None = None,
) -> list[dict[str, Any]]:
    """One problem per bad field of each row: ``{"row", "field", "message"}`` (+ the row's key).

    Args:
        ids: fields that must be non-empty ids.
        optional_ids: fields that may be missing, None or empty, else ids.
        texts: free-text fields (missing or None means empty).
        text_maps: fields holding ``{id: text}`` (a prompt's responses by system).
        key: a field naming the row (``judgment_id``), repeated in each problem.
    """
    ids, optional_ids, texts, text_maps = (
        tuple(ids),
        tuple(optional_ids),
        tuple(texts),
        tuple(text_maps),
    )
    problems: list[dict[str, Any]] = []
    for i, row in enumerate(rows):

        def add(field: str, message: str, i: int = i, row: dict[str, Any] = row) -> None:
            problem = {"row": i, "field": field, "message": message}
            if key is not None:
                name = row.get(key)
                problem[key] = name if isinstance(name, str) and not _ID_BAD.search(name) else None
            problems.append(problem)

        for field in ids:
            if (msg := id_problem(row.get(field))) is not None:
                add(field, msg)
        for field in optional_ids:
            value = row.get(field)
            if value is None:
                continue
            if field == "timestamp":
                msg = timestamp_problem(value)
            else:
                msg = id_problem(value, allow_empty=True)
            if msg is not None:
                add(field, msg)
        for field in texts:
            value = row.get(field)
            if value is not None and (msg := text_problem(value)) is not None:
                add(field, msg)
        for field in text_maps:
            value = row.get(field)
            if value is None:
                continue
            if not isinstance(value, dict):
                add(field, f"expected an object, got {type(value).__name__}")
                continue
            for name, text in value.items():
                if (msg := id_problem(name)) is not None:
                    add(f"{field}.{name!r}", f"key: {msg}")
                elif (msg := text_problem(text)) is not None:
                    add(f"{field}.{name}", msg)
    return problems
