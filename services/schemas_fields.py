"""The vocabulary of the HTTP API's models: ids, names, texts and JSON integers, each with
the one validator every door shares (:mod:`services.store.validation`), and the strict base
model; :mod:`services.schemas` re-exports them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetJsonSchemaHandler,
    StringConstraints,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from services.store.validation import (
    MAX_ID,
    MAX_TEXT,
    MAX_TIMESTAMP,
    id_problem,
    text_problem,
    timestamp_problem,
)


def _valid_id(value: str) -> str:
    if (problem := id_problem(value)) is not None:
        raise ValueError(problem)
    return value


def _valid_name(value: str) -> str:
    if (problem := id_problem(value, allow_empty=True)) is not None:
        raise ValueError(problem)
    return value


def _valid_timestamp(value: str) -> str:
    if (problem := timestamp_problem(value)) is not None:
        raise ValueError(problem)
    return value


def _valid_text(value: str) -> str:
    if (problem := text_problem(value)) is not None:
        raise ValueError(problem)
    return value


class SchemaPattern:
    """Declare ``pattern`` in the JSON schema only: the id and text validators give the error
    message (naming the character and its position), the schema tells clients and
    generators what is valid."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def __get_pydantic_json_schema__(
        self, core: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler.resolve_ref_schema(handler(core))
        schema["pattern"] = self.pattern
        return schema


# One rule for the API, `evalset import` and the store (services.store.validation),
# checked by its validators (their messages name the character and its position) and
# declared as a pattern, so a schema-valid request is never refused for a character.
# Lone surrogates are not declared: JSON Schema patterns match code points.
#: no control characters (C0, DEL), bidirectional controls or zero-width characters (an
#: id that is not in Unicode NFC form is refused too: a pattern cannot say it)
ID_PATTERN = r"^[^\u0000-\u001f\u007f\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]*$"
#: no NUL or control characters but tab, newline and carriage return
TEXT_PATTERN = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]*$"
#: SYSTEM_A:SYSTEM_B, each side an id with a character other than a space (SYSTEM_A
#: holds no colon: the first colon splits)
PAIR_PATTERN = (
    r"^[^:\u0000-\u001f\u007f]*[^:\s\u0000-\u001f\u007f][^:\u0000-\u001f\u007f]*"
    r":[^\u0000-\u001f\u007f]*[^\s\u0000-\u001f\u007f][^\u0000-\u001f\u007f]*$"
)
# ids: 1..200 characters, no control characters, lone surrogates, bidirectional controls
# or zero-width characters, in NFC form (adaptive.core.ids)
Id = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_ID),
    AfterValidator(_valid_id),
    SchemaPattern(ID_PATTERN),
]
# optional names (annotator, label, project name): 0..200 characters, the same rule
Name = Annotated[
    str,
    StringConstraints(max_length=MAX_ID),
    AfterValidator(_valid_name),
    SchemaPattern(ID_PATTERN),
]
# free text: up to 100,000 characters, no NUL or control characters but tab and newlines
Text = Annotated[
    str,
    StringConstraints(max_length=MAX_TEXT),
    AfterValidator(_valid_text),
    SchemaPattern(TEXT_PATTERN),
]
Winner = Literal["a", "b", "tie"]
# when a judgment was made: ISO 8601 (e.g. 2024-05-03T14:03:00Z)
Timestamp = Annotated[
    str, StringConstraints(max_length=MAX_TIMESTAMP), AfterValidator(_valid_timestamp)
]


def _json_integer(value: Any) -> Any:
    """A JSON integer: ``5`` or ``5.0`` (JSON Schema's integer), never ``"5"``, ``true``
    or ``5.5``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    return value


#: an integer field of a JSON body (strict about strings and booleans)
JsonInt = Annotated[int, BeforeValidator(_json_integer)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def repeated_ids(ids: Sequence[str]) -> list[tuple[int, int, str]]:
    """Every entry that repeats an earlier id: (its index, the first index, the id).

    The one duplicate check of every entry point: the catalogue lists refuse at the first
    repeat (a pydantic validator), a judgment batch lists every repeated row."""
    seen: dict[str, int] = {}
    out = []
    for i, value in enumerate(ids):
        if value in seen:
            out.append((i, seen[value], value))
        else:
            seen[value] = i
    return out


def unique(items: list[Any], key: str) -> list[Any]:
    """Refuse a list that names one id twice (which entry would win is not the client's
    intent to guess; PostgreSQL also refuses to upsert one row twice in a statement)."""
    repeats = repeated_ids([getattr(item, key) for item in items])
    if repeats:
        i, first, value = repeats[0]
        raise ValueError(f"{key} {value!r} appears twice (entries {first} and {i})")
    return items


def keys_are_ids(schema: dict[str, Any]) -> None:
    """A map keyed by ids: every key an id, every value the map's value schema (pydantic
    would declare the key rule as ``patternProperties``, which admits any other key)."""
    if "patternProperties" in schema:
        (value,) = schema.pop("patternProperties").values()
        schema["additionalProperties"] = value
    schema["propertyNames"] = {"minLength": 1, "maxLength": MAX_ID, "pattern": ID_PATTERN}
