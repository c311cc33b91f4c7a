"""One rule for ids and texts, shared by the API schemas, ``evalset import`` and the store.

The same input gets the same answer everywhere, on SQLite and PostgreSQL alike:
the store checks every row it writes with these functions (so a path that skips
the API, such as a bulk import, cannot store what the API refuses), and the API's
pydantic schemas call the same functions, so a request is refused with 422 before
it reaches the store.

* An **id** (project, system, prompt, dimension, judgment, annotator, idempotency
  key, token label): 1..200 characters, no control characters (C0, DEL) and no
  lone surrogates. PostgreSQL refuses NUL in text, and a control character in an
  id is never intended (it breaks CSV exports and log lines).
* A **text** (prompt, response, description): at most ``MAX_TEXT`` characters, no
  NUL, no control characters other than tab, newline and carriage return, no lone
  surrogates (they cannot be encoded as UTF-8 by either database).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

#: characters of an id
MAX_ID = 200
#: characters of one free text (a prompt, a response, a description)
MAX_TEXT = 100_000
#: characters of a judgment's timestamp
MAX_TIMESTAMP = 64

_ID_BAD = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_TEXT_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")

__all__ = [
    "MAX_ID",
    "MAX_TEXT",
    "MAX_TIMESTAMP",
    "id_problem",
    "row_problems",
    "text_problem",
]


def _describe(char: str) -> str:
    if char == "\x00":
        return "NUL character (U+0000)"
    if "\ud800" <= char <= "\udfff":
        return f"lone surrogate (U+{ord(char):04X})"
    return f"control character (U+{ord(char):04X})"


def _length_or_char_problem(
    value: str, max_length: int, refused: re.Pattern[str], kind: str
) -> str | None:
    """Too long, or the first character ``refused`` matches (``kind``: "an id", "a text")."""
    if len(value) > max_length:
        return f"at most {max_length} characters (got {len(value)})"
    bad = refused.search(value)
    if bad:
        return f"{_describe(bad.group())} at position {bad.start()} is not allowed in {kind}"
    return None


def id_problem(value: Any, *, allow_empty: bool = False, max_length: int = MAX_ID) -> str | None:
    """Why ``value`` is not a valid id, or None.

    Example:
        >>> id_problem("s1") is None, id_problem("a\\x00b")
        (True, 'NUL character (U+0000) at position 1 is not allowed in an id')
    """
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if not value and not allow_empty:
        return "must not be empty"
    return _length_or_char_problem(value, max_length, _ID_BAD, "an id")


def text_problem(value: Any, *, max_length: int = MAX_TEXT) -> str | None:
    """Why ``value`` is not a valid free text, or None (tab and newlines are fine)."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    return _length_or_char_problem(value, max_length, _TEXT_BAD, "a text")


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
            limit = MAX_TIMESTAMP if field == "timestamp" else MAX_ID
            if (msg := id_problem(value, allow_empty=True, max_length=limit)) is not None:
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
