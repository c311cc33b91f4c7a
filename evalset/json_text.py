r"""JSON text a door receives (a Label Studio export, survey results as JSON lines), parsed
with a bounded nesting depth: :mod:`adaptive.core.json_text`, the one parser of every JSON
document that arrives inside a string or a file.

Example:
    >>> parse_json_lines('{"a": 1}\n{"b": 2}')
    [{'a': 1}, {'b': 2}]
"""

from __future__ import annotations

from adaptive.core.json_text import MAX_DEPTH as MAX_DEPTH
from adaptive.core.json_text import JsonTextError as JsonTextError
from adaptive.core.json_text import parse_json_lines as parse_json_lines
from adaptive.core.json_text import parse_json_text as parse_json_text

__all__ = ["MAX_DEPTH", "JsonTextError", "parse_json_lines", "parse_json_text"]
