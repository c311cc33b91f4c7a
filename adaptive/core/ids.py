"""The one rule for ids, texts and timestamps: files, ``evalset import``, the API and the store.

* An **id** (project, system, prompt, dimension, judgment, annotator, idempotency key,
  token label): a string of 1..200 characters (a number in a file is read as its text;
  an object or a list is refused), no control characters (C0, DEL), no lone surrogates,
  no bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), no
  zero-width characters (U+200B-U+200D, U+2060, U+FEFF), and in Unicode NFC form. A
  bidirectional control or a zero-width character makes one name look like another on
  the dashboard and in exports; an id that is not NFC (``"e"`` + combining accent) is
  the same name to a reader and a different one to the store. Such ids are refused,
  never rewritten: the message names the character and its position (or the NFC form),
  so the source can be fixed and the ids stay those of the source.
* A **text** (prompt, response, description): at most ``MAX_TEXT`` characters, no NUL,
  no control characters other than tab, newline and carriage return, no lone surrogates.
* A **timestamp**: empty, or ISO 8601 as :meth:`datetime.datetime.fromisoformat` reads
  it (``2024-05-03``, ``2024-05-03T14:03:00``, ``2024-05-03T14:03:00.5+02:00``,
  ``...Z``), at most ``MAX_TIMESTAMP`` characters; stored as given.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import datetime
from typing import Any

#: characters of an id
MAX_ID = 200
#: characters of one free text (a prompt, a response, a description)
MAX_TEXT = 100_000
#: characters of a judgment's timestamp
MAX_TIMESTAMP = 64

#: bidirectional controls and zero-width characters (refused in ids)
INVISIBLE = "\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff"
ID_BAD = re.compile(f"[\\x00-\\x1f\\x7f\\ud800-\\udfff{INVISIBLE}]")
TEXT_BAD = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")

__all__ = [
    "MAX_ID",
    "MAX_TEXT",
    "MAX_TIMESTAMP",
    "id_problem",
    "text_problem",
    "timestamp_problem",
]


def _describe(char: str) -> str:
    code = f"U+{ord(char):04X}"
    if char == "\x00":
        return "NUL character (U+0000)"
    if "\ud800" <= char <= "\udfff":
        return f"lone surrogate ({code})"
    if char in "\u200b\u200c\u200d\u2060\ufeff":
        return f"zero-width character ({code})"
    if ord(char) > 0x7F:
        return f"bidirectional control ({code})"
    return f"control character ({code})"


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


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def id_problem(value: Any, *, allow_empty: bool = False, max_length: int = MAX_ID) -> str | None:
    """Why ``value`` is not a valid id, or None.

    Example:
        >>> id_problem("s1") is None, id_problem("a\\x00b")
        (True, 'NUL character (U+0000) at position 1 is not allowed in an id')
        >>> id_problem("ev\\u202eil"), id_problem({"id": 1})
        ('bidirectional control (U+202E) at position 2 is not allowed in an id', 'expected a string, got an object')
        >>> id_problem("Jose\\u0301")
        "not in Unicode NFC form (as NFC: 'José')"
    """  # noqa: E501
    if not isinstance(value, str):
        return f"expected a string, got {_kind(value)}"
    if not value and not allow_empty:
        return "must not be empty"
    problem = _length_or_char_problem(value, max_length, ID_BAD, "an id")
    if problem is None and not value.isascii() and not unicodedata.is_normalized("NFC", value):
        return f"not in Unicode NFC form (as NFC: {unicodedata.normalize('NFC', value)!r})"
    return problem


def text_problem(value: Any, *, max_length: int = MAX_TEXT) -> str | None:
    """Why ``value`` is not a valid free text, or None (tab and newlines are fine)."""
    if not isinstance(value, str):
        return f"expected a string, got {_kind(value)}"
    return _length_or_char_problem(value, max_length, TEXT_BAD, "a text")


def timestamp_problem(value: Any) -> str | None:
    """Why ``value`` is not an ISO 8601 timestamp (or empty), or None.

    Example:
        >>> timestamp_problem("2024-05-03T14:03:00Z") is None, timestamp_problem("")
        (True, None)
        >>> timestamp_problem("not a time")
        "expected an ISO 8601 time such as '2024-05-03T14:03:00Z', got 'not a time'"
    """
    if not isinstance(value, str):
        return f"expected a string, got {_kind(value)}"
    if not value:
        return None
    if len(value) > MAX_TIMESTAMP:
        return f"at most {MAX_TIMESTAMP} characters (got {len(value)})"
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return f"expected an ISO 8601 time such as '2024-05-03T14:03:00Z', got {value!r}"
    return None
