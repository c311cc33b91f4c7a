"""A file's own column names (and values) mapped onto the common judgments schema.

Given inline (``evalset ... --map item_id=idx,system_a=model_1,system_b=model_2``) or as a
file (``--map mapping.toml`` or ``.json``)::

    [columns]            # schema column = the file's column
    item_id = "idx"
    system_a = "model_1"
    system_b = "model_2"
    winner = "label"

    [values.winner]      # the file's value = the schema's value
    "1" = "a"
    "2" = "b"
    "0" = "tie"

Inline, a value is mapped with ``COLUMN:VALUE=NEW`` (``--map winner:1=a,winner:2=b``); a
value holding ``,`` or ``=`` needs the file form. Columns are renamed before the file's
format is recognised (Chatbot Arena, PandaLM, Label Studio, MTurk: see
:mod:`adaptive.core.data`); values are mapped after the renaming, before validation. A
mapping that names a column the file does not have is refused with the columns it has.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

#: the columns a mapping may produce (besides ``choice``: a First/Second/left/right answer)
TARGETS: tuple[str, ...] = (
    "item_id",
    "system_a",
    "system_b",
    "annotator_id",
    "winner",
    "dimension",
    "judgment_id",
    "shown_first",
    "timestamp",
    "screen_id",
    "choice",
)


class MapError(ValueError):
    """A mapping that cannot be used (unknown target, bad syntax, a column the file lacks)."""


@dataclass(frozen=True)
class ColumnMap:
    """``columns``: schema column -> the file's column; ``values``: schema column ->
    {the file's value: the schema's value}."""

    columns: Mapping[str, str] = field(default_factory=dict)
    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.columns or self.values)

    @classmethod
    def of(cls, spec: ColumnMap | Mapping[str, Any] | str | Iterable[str] | None) -> ColumnMap:
        """A mapping from what a caller holds: None, a ColumnMap, ``{"item_id": "idx"}`` (or
        ``{"columns": {...}, "values": {...}}``), an inline spec, a file path, or a list of
        those strings (``--map`` given several times).

        Example:
            >>> ColumnMap.of("item_id=idx,winner:1=a").columns, ColumnMap.of("winner:1=a").values
            ({'item_id': 'idx'}, {'winner': {'1': 'a'}})
        """
        if spec is None:
            return cls()
        if isinstance(spec, ColumnMap):
            return spec
        if isinstance(spec, Mapping):
            return _from_mapping(spec, "the mapping")
        if isinstance(spec, str):
            return _from_text(spec)
        out = cls()
        for part in spec:
            out = out.merged(cls.of(part))
        return out

    def merged(self, other: ColumnMap) -> ColumnMap:
        columns = dict(self.columns)
        for target, src in other.columns.items():
            if columns.get(target, src) != src:
                raise MapError(f"--map: {target} is mapped twice ({columns[target]!r}, {src!r})")
            columns[target] = src
        values = {k: dict(v) for k, v in self.values.items()}
        for target, table in other.values.items():
            values.setdefault(target, {}).update(table)
        return ColumnMap(columns, values)

    def apply(self, frame: pl.DataFrame, *, source: str) -> pl.DataFrame:
        """``frame`` (text columns) with the mapped columns renamed and values replaced."""
        missing = sorted({src for src in self.columns.values() if src not in frame.columns})
        if missing:
            raise MapError(
                f"--map names column(s) {missing} the file does not have; "
                f"the file has {[c for c in frame.columns if c != 'row']}"
            )
        sources = set(self.columns.values())
        out = frame.select(
            [pl.col(src).alias(target) for target, src in self.columns.items()]
            + [c for c in frame.columns if c not in sources and c not in self.columns]
        )
        for target, table in self.values.items():
            if target in out.columns:
                out = out.with_columns(
                    pl.col(target).cast(pl.Utf8).replace(dict(table)).alias(target)
                )
        return out


def _check_target(target: str, where: str) -> str:
    if target not in TARGETS:
        raise MapError(f"{where}: {target!r} is not a column of the schema; expected one of {list(TARGETS)}")  # fmt: skip  # noqa: E501
    return target


def _from_mapping(spec: Mapping[str, Any], where: str) -> ColumnMap:
    if set(spec) <= {"columns", "values"} and spec:
        columns, values = spec.get("columns") or {}, spec.get("values") or {}
    else:
        columns, values = spec, {}
    if not isinstance(columns, Mapping) or not isinstance(values, Mapping):
        raise MapError(f"{where}: expected columns = {{schema column: file column}} and "
                       "values = {schema column: {file value: value}}")  # fmt: skip
    cols = {_check_target(str(t), where): str(s) for t, s in columns.items()}
    vals: dict[str, dict[str, str]] = {}
    for target, table in values.items():
        if not isinstance(table, Mapping):
            raise MapError(f"{where}: values.{target} must map the file's values to new ones")
        vals[_check_target(str(target), where)] = {str(k): str(v) for k, v in table.items()}
    return ColumnMap(cols, vals)


def _from_text(spec: str) -> ColumnMap:
    path = Path(spec)
    if path.suffix.lower() in (".toml", ".json") and "=" not in spec:
        if not path.exists():
            raise MapError(f"--map: no mapping file {spec!r}")
        try:
            data = tomllib.loads(path.read_text()) if path.suffix.lower() == ".toml" else (
                json.loads(path.read_text()))  # fmt: skip
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise MapError(f"--map {spec}: {exc}") from exc
        if not isinstance(data, dict):
            raise MapError(f"--map {spec}: expected a table of columns (and values)")
        return _from_mapping(data, spec)
    columns: dict[str, str] = {}
    values: dict[str, dict[str, str]] = {}
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        left, eq, right = entry.partition("=")
        if not eq or not left.strip():
            raise MapError(f"--map: {entry!r} is not COLUMN=FILE_COLUMN or COLUMN:VALUE=NEW_VALUE")
        target, colon, value = left.partition(":")
        target = _check_target(target.strip(), "--map")
        if colon:
            values.setdefault(target, {})[value.strip()] = right.strip()
        elif target in columns and columns[target] != right.strip():
            raise MapError(f"--map: {target} is mapped twice ({columns[target]!r}, {right!r})")
        else:
            columns[target] = right.strip()
    return ColumnMap(columns, values)
