"""Read pairwise judgments from CSV, JSONL or Parquet into one validated polars frame.

The common schema (the one of the bundled datasets under ``data/``):

=============== ======== =========================================================
column          required meaning
=============== ======== =========================================================
item_id         yes      the prompt (or dialogue item) both systems answered
system_a        yes      the system behind response "a"
system_b        yes      the system behind response "b"
annotator_id    yes      who judged (may be empty when the source does not say)
winner          yes      ``a``, ``b`` or ``tie``
dimension       no       what was judged (``overall`` when absent)
judgment_id     no       a client-supplied unique id (makes ingestion idempotent)
shown_first     no       which response the annotator saw first: ``a`` or ``b``
timestamp       no       when the judgment was made (kept as text)
screen_id       no       the ranked screen the pair came from (empty: none)
lease_id        no       the service's next batch that served the cell (empty: none)
=============== ======== =========================================================

``screen_id``: the pairs of one ranked screen (an annotator ranks several systems'
outputs for one prompt on one screen) share it; a screen's rows must share
``item_id``, ``annotator_id`` and ``dimension`` and hold each pair of systems at most
once. **Ranking files** (one row per screen: ``item_id, annotator_id, ranking`` with
``ranking`` such as ``"x > y = z"``) are expanded into those pairs
(:mod:`adaptive.core.rankings`); a pair's ``row`` is its screen's row in the file.

A file that breaks the schema fails whole with :class:`DataError`, naming the
file, the (1-based, header excluded) row, the column and what was expected; no
partial frame is ever returned.

**Chatbot Arena battle logs** (the public dumps' columns ``model_a, model_b,
winner`` with ``winner`` in ``model_a | model_b | tie | tie (bothbad)``, and
``question_id, judge, turn, conversation_a, conversation_b, language, anony,
tstamp``) are read as well, from JSON arrays, JSONL or Parquet (or a frame):
``item_id`` = ``question_id`` (else ``id``, else the row), ``system_a/b`` =
``model_a/b``, ``annotator_id`` = ``judge``, ``shown_first`` = ``a`` (Arena
shows model A on the left), ``timestamp`` = ``tstamp`` (ISO, UTC). Both kinds of
tie become ``winner = tie``; ``tie (bothbad)`` is kept apart in the extra column
``both_bad`` (``true`` for it, ``false`` for every other battle), so the models
see a tie and the flag stays available for analysis. ``turn``: where one
``question_id`` was judged at several turns (MT-Bench's human judgments judge turn 1
and turn 2 of each question apart), each turn is an item of its own,
``<question_id>-t<turn>``; where every question has one turn (Chatbot Arena's dumps,
where ``turn`` counts the turns of one battle's conversation) the item is the
``question_id``. The conversations are not kept.

Everywhere a file is accepted, a polars or pandas DataFrame is accepted too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from adaptive.core.rankings import RANKING_READ, expand_rankings, is_ranking

REQUIRED_COLUMNS: tuple[str, ...] = ("item_id", "system_a", "system_b", "annotator_id", "winner")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "dimension",
    "judgment_id",
    "shown_first",
    "timestamp",
    "both_bad",
    "screen_id",
    "lease_id",
)
WINNERS: tuple[str, ...] = ("a", "b", "tie")
#: one judgment as the service stores, exports and imports it (in this order)
JUDGMENT_FIELDS: tuple[str, ...] = (
    "judgment_id",
    "item_id",
    "system_a",
    "system_b",
    "annotator_id",
    "winner",
    "dimension",
    "shown_first",
    "timestamp",
    "screen_id",
    "lease_id",
)
DEFAULT_DIMENSION = "overall"


@dataclass(frozen=True)
class RowProblem:
    """One invalid row: where it is and what was expected."""

    row: int
    column: str
    value: str
    expected: str

    def __str__(self) -> str:
        return (
            f"row {self.row}, column {self.column!r}: got {self.value!r}, expected {self.expected}"
        )


class DataError(ValueError):
    """A judgments file (or batch) that cannot be used; nothing of it was read."""

    def __init__(self, source: str, problems: list[RowProblem] | None = None, message: str = ""):
        self.source = source
        self.problems = problems or []
        if not message:
            shown = "; ".join(str(p) for p in self.problems[:5])
            more = f" (and {len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
            message = f"{len(self.problems)} invalid row(s): {shown}{more}"
        self.message = message
        super().__init__(f"{source}: {message}")


def as_polars(frame: object) -> pl.DataFrame:
    """A polars frame from a polars or pandas frame (pandas without needing pyarrow).

    Example:
        >>> import pandas as pd
        >>> as_polars(pd.DataFrame({"x": ["a", None], "n": [1.5, float("nan")]})).rows()
        [('a', 1.5), (None, None)]
    """
    if isinstance(frame, pl.DataFrame):
        return frame
    if isinstance(frame, pl.LazyFrame):
        return frame.collect()
    if hasattr(frame, "columns") and hasattr(frame, "to_dict"):  # pandas, without pyarrow
        table: Any = frame  # duck-typed: pandas is not a dependency
        columns = {}
        for name in table.columns:
            column = table[name]
            values = column.astype(object).where(column.notna(), None).tolist()
            columns[str(name)] = values
        try:
            return pl.DataFrame(columns, strict=False)
        except (TypeError, pl.exceptions.PolarsError):
            return pl.DataFrame(
                {k: [None if v is None else str(v) for v in vs] for k, vs in columns.items()}
            )
    raise TypeError(f"expected a polars or pandas DataFrame, got {type(frame).__name__}")


#: Chatbot Arena's winner labels and what they become
ARENA_WINNERS: dict[str, str] = {
    "model_a": "a",
    "model_b": "b",
    "tie": "tie",
    "tie (bothbad)": "tie",
}
ARENA_COLUMNS: tuple[str, ...] = ("model_a", "model_b", "winner")
#: columns of an Arena log that are read (the rest, e.g. the conversations, are not)
_ARENA_READ = ARENA_COLUMNS + ("question_id", "id", "judge", "tstamp", "turn")
_KNOWN = REQUIRED_COLUMNS + OPTIONAL_COLUMNS + _ARENA_READ + RANKING_READ


def is_arena(columns: Iterable[str]) -> bool:
    """Whether a frame's columns are those of a Chatbot Arena battle log."""
    columns = set(columns)
    return set(ARENA_COLUMNS) <= columns and "system_a" not in columns


def arena_to_judgments(frame: pl.DataFrame, *, source: str = "<arena>") -> pl.DataFrame:
    """An Arena battle log in the common schema (text columns, not yet validated).

    Example:
        >>> arena_to_judgments(pl.DataFrame({"question_id": ["q1", "q2"],
        ...     "model_a": ["x", "x"], "model_b": ["y", "y"], "judge": ["u1", "u2"],
        ...     "winner": ["model_b", "tie (bothbad)"]})).select("winner", "both_bad").rows()
        [('b', 'false'), ('tie', 'true')]
    """
    n = frame.height
    text = {c: frame[c].cast(pl.Utf8) for c in frame.columns if c in _ARENA_READ and c != "tstamp"}
    winner_raw = text["winner"].str.strip_chars().str.to_lowercase()
    problems = [
        RowProblem(
            i + 1,
            "winner",
            str(v) if v is not None else "<empty>",
            "one of 'model_a', 'model_b', 'tie', 'tie (bothbad)'",
        )  # fmt: skip
        for i, v in enumerate(winner_raw.to_list())
        if v not in ARENA_WINNERS
    ]
    if problems:
        raise DataError(source, problems)
    if "question_id" in text:
        item = text["question_id"]
        if "turn" in text and _judged_per_turn(item, text["turn"]):
            item = item + "-t" + text["turn"].fill_null("")
    elif "id" in text:
        item = text["id"]
    else:
        item = pl.Series([f"battle-{i + 1}" for i in range(n)])
    out = pl.DataFrame(
        {
            "item_id": item,
            "system_a": text["model_a"],
            "system_b": text["model_b"],
            "annotator_id": text["judge"] if "judge" in text else pl.Series([""] * n),
            "winner": winner_raw.replace_strict(ARENA_WINNERS),
            "shown_first": pl.Series(["a"] * n),
            "both_bad": (winner_raw == "tie (bothbad)").cast(pl.Utf8).str.to_lowercase(),
        }
    )
    if "tstamp" in frame.columns and frame["tstamp"].dtype.is_numeric():
        stamp = pl.from_epoch(
            (frame["tstamp"].cast(pl.Float64) * 1e6).cast(pl.Int64), time_unit="us"
        ).dt.strftime("%Y-%m-%dT%H:%M:%S%.fZ")
        out = out.with_columns(stamp.alias("timestamp"))
    elif "tstamp" in frame.columns:
        out = out.with_columns(frame["tstamp"].cast(pl.Utf8).alias("timestamp"))
    return out


def _judged_per_turn(question: pl.Series, turn: pl.Series) -> bool:
    """Whether some question was judged at more than one turn.

    Example:
        >>> _judged_per_turn(pl.Series(["q1", "q1"]), pl.Series(["1", "2"]))
        True
    """
    frame = pl.DataFrame({"q": question, "t": turn})
    return int(frame.group_by("q").agg(pl.col("t").n_unique())["t"].max() or 0) > 1  # type: ignore[arg-type]


def _as_text(frame: pl.DataFrame, *, source: str) -> pl.DataFrame:
    """Keep the columns the schema knows (Arena logs converted), every one as text."""
    if is_arena(frame.columns):
        return arena_to_judgments(frame, source=source)
    if is_ranking(frame.columns):
        pairs, problems = expand_rankings(frame)
        if problems:
            raise DataError(source, [RowProblem(*p) for p in problems])
        return pairs
    keep = [c for c in frame.columns if c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    if not keep:
        keep = frame.columns  # the error names what is missing
    return frame.select([pl.col(c).cast(pl.Utf8) for c in keep])


def _read_json_array(path: Path) -> pl.DataFrame:
    import json

    records = json.loads(path.read_text())
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DataError(str(path), message="a .json file must hold an array of objects")
    columns = [c for c in dict.fromkeys(k for r in records for k in r) if c in _KNOWN]
    return pl.DataFrame({c: [r.get(c) for r in records] for c in columns}, strict=False)


def _read_raw(path: Path) -> pl.DataFrame:
    suffix = path.suffix.lower()
    if suffix in {".csv", ".tsv"}:
        return pl.read_csv(
            path,
            separator="\t" if suffix == ".tsv" else ",",
            infer_schema=False,  # every column as text: validation decides, not inference
        )
    if suffix in {".jsonl", ".ndjson"}:
        return pl.read_ndjson(path, infer_schema_length=None)
    if suffix == ".json":
        return _read_json_array(path)
    if suffix in {".parquet", ".pq"}:
        names = pl.read_parquet_schema(path)
        wanted = [c for c in names if c in _KNOWN] or list(names)
        return pl.read_parquet(path, columns=wanted)  # not the conversations
    raise DataError(
        str(path),
        message=f"unknown file type {suffix!r}; expected .csv, .tsv, .json, .jsonl or .parquet",
    )


def read_judgments(source: str | Path | object) -> pl.DataFrame:
    """Read and validate judgments from a file or a DataFrame.

    Args:
        source: a ``.csv``, ``.tsv``, ``.json`` (array), ``.jsonl``/``.ndjson`` or
            ``.parquet`` file, or a polars / pandas DataFrame, in the common schema
            as a Chatbot Arena battle log, or as a ranking file (one row per screen).

    Returns:
        A frame with the required columns, ``dimension`` (filled with ``overall`` when
        absent), the optional columns that were present, and ``row`` (1-based
        position in the file).

    Raises:
        DataError: the file is missing, unreadable, or any row is invalid.

    Example:
        >>> import pandas as pd
        >>> read_judgments(pd.DataFrame({"model_a": ["x"], "model_b": ["y"],
        ...     "winner": ["tie (bothbad)"], "judge": ["u1"]})).row(0)
        ('battle-1', 'x', 'y', 'u1', 'tie', 'overall', 'a', 'true', 1)
    """
    if not isinstance(source, str | Path):
        name = f"<{type(source).__name__}>"
        try:
            frame = as_polars(source)
        except TypeError as exc:
            raise DataError(name, message=str(exc)) from exc
        return validate_judgments(_as_text(frame, source=name), source=name)
    path = Path(source)
    if not path.exists():
        raise DataError(str(path), message="file not found")
    try:
        raw = _as_text(_read_raw(path), source=str(path))
    except DataError:
        raise
    except Exception as exc:  # polars raises several error types for malformed files
        raise DataError(str(path), message=f"could not parse the file: {exc}") from exc
    return validate_judgments(raw, source=str(path))


def validate_judgments(frame: pl.DataFrame, *, source: str = "<judgments>") -> pl.DataFrame:
    """Validate a frame in the common schema; see :func:`read_judgments`.

    Example:
        >>> validate_judgments(pl.DataFrame({"item_id": ["p1"], "system_a": ["x"],
        ...     "system_b": ["y"], "annotator_id": ["w"], "winner": ["B"]})).row(0)
        ('p1', 'x', 'y', 'w', 'b', 'overall', 1)
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(
            source,
            message=f"missing column(s) {missing}; the file has {frame.columns}, "
            f"expected at least {list(REQUIRED_COLUMNS)}",
        )
    if frame.height == 0:
        raise DataError(source, message="no judgments in the file")
    keep = list(REQUIRED_COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in frame.columns]
    df = frame.select([pl.col(c).cast(pl.Utf8).str.strip_chars().alias(c) for c in keep])
    # a ranking file's pairs keep their screen's row in the file
    if "row" in frame.columns:
        df = df.with_columns(frame["row"].cast(pl.UInt32).alias("row"))
    else:
        df = df.with_row_index("row", offset=1)
    df = df.with_columns(pl.col("winner").str.to_lowercase())
    if "dimension" not in df.columns:
        df = df.with_columns(pl.lit(DEFAULT_DIMENSION).alias("dimension"))
    else:
        df = df.with_columns(
            pl.when(pl.col("dimension").is_null() | (pl.col("dimension") == ""))
            .then(pl.lit(DEFAULT_DIMENSION))
            .otherwise(pl.col("dimension"))
            .alias("dimension")
        )
    if "shown_first" in df.columns:
        df = df.with_columns(
            pl.when(pl.col("shown_first") == "")
            .then(None)
            .otherwise(pl.col("shown_first").str.to_lowercase())
            .alias("shown_first")
        )
    df = df.with_columns(pl.col("annotator_id").fill_null(""))
    if "screen_id" in df.columns:
        df = df.with_columns(
            pl.when(pl.col("screen_id") == "")
            .then(None)
            .otherwise(pl.col("screen_id"))
            .alias("screen_id")
        )

    problems: list[RowProblem] = []

    def collect(mask: pl.Expr, column: str, expected: str) -> None:
        bad = df.filter(mask).select("row", pl.col(column).fill_null("<empty>"))
        for row, value in bad.iter_rows():
            problems.append(RowProblem(int(row), column, str(value), expected))

    for column in ("item_id", "system_a", "system_b"):
        collect(pl.col(column).is_null() | (pl.col(column) == ""), column, "a non-empty id")
    collect(
        pl.col("winner").is_null() | ~pl.col("winner").is_in(WINNERS),
        "winner",
        "one of 'a', 'b', 'tie'",
    )
    collect(
        (pl.col("system_a") == pl.col("system_b")) & (pl.col("system_a") != ""),
        "system_b",
        "a system different from system_a (a system compared with itself)",
    )
    if "shown_first" in df.columns:
        collect(
            pl.col("shown_first").is_not_null() & ~pl.col("shown_first").is_in(["a", "b"]),
            "shown_first",
            "'a', 'b' or empty",
        )
    if "both_bad" in df.columns:
        df = df.with_columns(pl.col("both_bad").str.to_lowercase())
        collect(
            pl.col("both_bad").is_not_null() & ~pl.col("both_bad").is_in(["true", "false", ""])
            | ((pl.col("both_bad") == "true") & (pl.col("winner") != "tie")),
            "both_bad",
            "'true' (a tie where both responses were bad), 'false' or empty",
        )
    if "judgment_id" in df.columns:
        collect(
            pl.col("judgment_id").is_null() | (pl.col("judgment_id") == ""),
            "judgment_id",
            "a non-empty id when the column is present",
        )
        dup = df.filter(pl.col("judgment_id").is_duplicated() & (pl.col("judgment_id") != ""))
        for row, value in dup.select("row", "judgment_id").iter_rows():
            problems.append(RowProblem(int(row), "judgment_id", str(value), "a unique id"))
    if "screen_id" in df.columns:
        problems += screen_problems(df)
    if problems:
        problems.sort(key=lambda p: (p.row, p.column))
        raise DataError(source, problems)
    ordered = list(REQUIRED_COLUMNS) + ["dimension"]
    ordered += [c for c in OPTIONAL_COLUMNS if c in df.columns and c != "dimension"] + ["row"]
    return df.select(ordered)


def screen_problems(df: pl.DataFrame) -> list[RowProblem]:
    """The rows of a screen that do not share its prompt, annotator and dimension, or that
    repeat one of its pairs (a screen shows each pair of systems once). ``df``: the columns
    ``row, screen_id, item_id, system_a, system_b, annotator_id, dimension``, empty screens
    as nulls; the service's batches are checked with it too."""
    screens = df.filter(pl.col("screen_id").is_not_null()).with_columns(
        pl.min_horizontal("system_a", "system_b").alias("_lo"),
        pl.max_horizontal("system_a", "system_b").alias("_hi"),
    )
    problems = []
    first = screens.group_by("screen_id", maintain_order=True).first()
    joined = screens.join(
        first.select("screen_id", "item_id", "annotator_id", "dimension", "row"),
        on="screen_id",
        suffix="_first",
    )
    for column in ("item_id", "annotator_id", "dimension"):
        bad = joined.filter(pl.col(column) != pl.col(f"{column}_first"))
        for row, value, at in bad.select("row", column, "row_first").iter_rows():
            problems.append(
                RowProblem(
                    int(row),
                    column,
                    str(value),
                    f"the {column} of its screen (screen_id's first row, {at})",
                )
            )
    dup = screens.filter(pl.struct("screen_id", "_lo", "_hi").is_duplicated())
    dup = dup.filter(pl.struct("screen_id", "_lo", "_hi").is_first_distinct().not_())
    for row, value, lo, hi in dup.select("row", "screen_id", "_lo", "_hi").iter_rows():
        problems.append(
            RowProblem(
                int(row), "screen_id", str(value), f"each pair once per screen ({lo} vs {hi} again)"
            )
        )
    return problems


def filter_judgments(
    judgments: pl.DataFrame,
    *,
    dimensions: Iterable[str] | None = None,
    exclude_annotators: Iterable[str] | None = None,
) -> pl.DataFrame:
    """Keep the given dimensions and drop the given annotators (the data is not changed)."""
    out = judgments
    if dimensions is not None:
        dims = list(dimensions)
        unknown = sorted(set(dims) - set(judgments["dimension"].unique().to_list()))
        if unknown:
            known = sorted(judgments["dimension"].unique().to_list())
            raise DataError(
                "<filter>", message=f"unknown dimension(s) {unknown}; the data has {known}"
            )
        out = out.filter(pl.col("dimension").is_in(dims))
    if exclude_annotators is not None:
        out = out.filter(~pl.col("annotator_id").is_in(list(exclude_annotators)))
    return out
