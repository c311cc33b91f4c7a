"""JSON text parsed with a bounded nesting depth: one parser for every JSON document that
arrives inside a string or a file (a Label Studio export, a task list, an NDJSON line).

The standard library's ``json.loads`` recurses once per level and raises
``RecursionError`` near 1,000 levels, an error a caller cannot tell from a bug (the
service answered it 500 and dropped the connection). pydantic-core's parser (jiter)
stops at :data:`MAX_DEPTH` levels with an ordinary error that says where; here it
becomes :class:`JsonTextError` with the line, the column and, when the document is an
array, which element (0-based) holds the error.

Example:
    >>> parse_json_text('[{"a": 1}, {"b": [2]}]')
    [{'a': 1}, {'b': [2]}]
    >>> try:
    ...     parse_json_text("[{}, " + "[" * 300 + "]" * 300 + "]")
    ... except JsonTextError as exc:
    ...     (exc.row, exc.line, exc.reason)
    (1, 1, 'nested more than 200 levels deep')
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_DEPTH", "JsonTextError", "parse_json_lines", "parse_json_text"]

#: levels of arrays and objects a document may nest (pydantic-core's parser's limit)
MAX_DEPTH = 200
_WHERE = re.compile(r"^(?P<reason>.*) at line (?P<line>\d+) column (?P<column>\d+)$", re.S)
#: a string literal, or a bracket or comma outside one
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]', re.S)


class JsonTextError(ValueError):
    """JSON text that cannot be parsed: why, where, and which element of a top-level array."""

    def __init__(self, reason: str, line: int, column: int, row: int | None) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.row = row
        where = f"line {line} column {column}" + (f" (element {row})" if row is not None else "")
        super().__init__(f"{reason} at {where}")


def parse_json_text(text: str | bytes) -> Any:
    """The value of a JSON document; nesting deeper than :data:`MAX_DEPTH` is refused.

    Raises:
        JsonTextError: the text is not JSON, or nests too deeply.
    """
    from pydantic_core import from_json

    try:
        return from_json(text)
    except ValueError as exc:
        raise _located(str(exc), text) from exc


def parse_json_lines(text: str) -> list[Any]:
    """The values of NDJSON text, one per non-blank line (``line`` numbers the text's lines).

    Raises:
        JsonTextError: a line is not JSON or nests too deeply (``row``: its 0-based line).
    """
    values = []
    for k, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            values.append(parse_json_text(line))
        except JsonTextError as exc:
            raise JsonTextError(exc.reason, k + 1, exc.column, k) from exc
    return values


def _located(message: str, text: str | bytes) -> JsonTextError:
    match = _WHERE.match(message)
    if match is None:
        return JsonTextError(message, 1, 1, None)
    reason = match["reason"]
    if reason == "recursion limit exceeded":
        reason = f"nested more than {MAX_DEPTH} levels deep"
    line, column = int(match["line"]), int(match["column"])
    return JsonTextError(reason, line, column, _element(text, line, column))


def _element(text: str | bytes, line: int, column: int) -> int | None:
    """Which element of the top-level array holds ``line``:``column`` (None: not an array).

    The parser counts columns in bytes. The text before the error parsed, so counting the
    commas one level deep outside string literals is exact there.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    lines = data.split(b"\n")[:line]
    lines[-1] = lines[-1][: max(column - 1, 0)]
    prefix = b"\n".join(lines).decode("utf-8", "replace")
    if not prefix.lstrip().startswith("["):
        return None
    depth, row = 0, 0
    for token in _TOKENS.finditer(prefix):
        char = token.group()
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 1:
            row += 1
    return row
