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
timestamp       no       when the judgment was made: ISO 8601 (kept as given)
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
file, the line (a text file's header is line 1, its first record line 2; a Parquet
file or a frame names the 1-based row), the column, the value as given and what was
expected; no partial frame is ever returned. A file without the schema's columns is
refused naming the columns it has. Ids follow :mod:`adaptive.core.ids` (no control,
bidirectional or zero-width characters, NFC; an object or a list is refused), and a
``timestamp`` must be ISO 8601, as everywhere else in the product.

**Other column names**: ``column_map`` (``--map item_id=idx,system_a=model_1`` on the
command line) renames a file's columns, and maps its values, onto this schema
(:mod:`adaptive.core.column_map`). PandaLM-style records, Label Studio exports, MTurk
batch results and a ``choice`` column are recognised without one
(:mod:`adaptive.core.formats`).

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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from adaptive.core import formats, raw_files
from adaptive.core.arena import ARENA_COLUMNS as ARENA_COLUMNS
from adaptive.core.arena import ARENA_READ, arena_to_judgments, is_arena
from adaptive.core.arena import ARENA_WINNERS as ARENA_WINNERS
from adaptive.core.column_map import ColumnMap, MapError
from adaptive.core.csv_safe import unescape_frame
from adaptive.core.ids import id_problem, timestamp_problem
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
    #: what ``row`` counts: ``row`` (1-based, of a frame or a Parquet file) or ``line`` (of
    #: a text file, the header being line 1)
    unit: str = "row"

    def __str__(self) -> str:
        return (
            f"{self.unit} {self.row}, column {self.column!r}: got {self.value!r}, "
            f"expected {self.expected}"
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


_KNOWN = REQUIRED_COLUMNS + OPTIONAL_COLUMNS + ARENA_READ + RANKING_READ


#: columns of the raw formats (adaptive.core.formats) that are read
_FORMAT_READ = ("cmp_key", "idx", "instruction", "input", "choice") + formats.MTURK_COLUMNS


def _reads(column_map: ColumnMap) -> Callable[[str], bool]:
    """Whether a file's column is read (a nested value there is refused, elsewhere dropped)."""
    mapped = set(column_map.columns.values())

    def wanted(name: str) -> bool:
        return (
            name in _KNOWN
            or name in mapped
            or name in _FORMAT_READ
            or name.startswith(("Input.", "Answer."))
            or bool(formats.ANNOTATOR_COLUMN.fullmatch(name))
        )

    return wanted


def _problems(source: str, problems: list[tuple[int, str, str, str]]) -> None:
    if problems:
        raise DataError(source, sorted((RowProblem(*p) for p in problems),
                                       key=lambda p: (p.row, p.column)))  # fmt: skip


def _as_text(
    frame: pl.DataFrame, *, source: str, column_map: ColumnMap | None = None
) -> pl.DataFrame:  # noqa: E501
    """The frame in the schema's names, every column as text, with ``row`` (Arena logs,
    ranking files, PandaLM records, MTurk results and choices converted)."""
    if "row" not in frame.columns:  # else the records' rows (a Label Studio export's tasks)
        frame = frame.with_row_index("row", offset=1)
    file_columns = [c for c in frame.columns if c != "row"]
    try:
        frame = (column_map or ColumnMap()).apply(frame, source=source)
    except MapError as exc:
        raise DataError(source, message=str(exc)) from None
    if formats.is_mturk(frame.columns):
        frame = formats.mturk_to_records(frame)
    if is_arena(frame.columns):
        judgments, problems = arena_to_judgments(frame)
        _problems(source, problems)
        return judgments
    if is_ranking(frame.columns):
        pairs, problems = expand_rankings(frame.drop("row"))
        _problems(source, problems)
        return pairs
    if formats.is_pandalm(frame.columns):
        frame, problems = formats.pandalm_to_judgments(frame)
        _problems(source, problems)
    elif "choice" in frame.columns and "winner" not in frame.columns:
        frame, problems = formats.choice_to_winner(frame)
        _problems(source, problems)
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(
            source,
            message=f"missing column(s) {missing}; the file has {file_columns}, expected at "
            f"least {list(REQUIRED_COLUMNS)} (name the file's own columns with --map, e.g. "
            "--map item_id=question,system_a=model_1)",
        )
    keep = [c for c in frame.columns if c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
    return frame.select([pl.col(c).cast(pl.Utf8) for c in keep] + ["row"])


def _text_frame(frame: pl.DataFrame, wanted: Callable[[str], bool], source: str) -> pl.DataFrame:
    """Every column as text; a nested column (structs, lists) is refused where it is read
    (an id given as an object is never stored as its text) and emptied elsewhere."""
    problems = []
    out: list[pl.Expr] = []
    for name, dtype in frame.schema.items():
        if not dtype.is_nested():
            out.append(pl.col(name).cast(pl.Utf8))
            continue
        if name == "ranking":  # a ranking file's list form
            values = [raw_files.ranking_text(v) for v in frame[name].to_list()]
            out.append(pl.lit(pl.Series(name, values, dtype=pl.Utf8)))
            continue
        if wanted(name) and name != "row":
            for k, value in enumerate(frame[name].to_list(), start=1):
                if value is not None:
                    problems.append((k, name, str(value)[:80], "a string or a number, not "
                                     f"{'a list' if isinstance(value, list) else 'an object'}"))  # fmt: skip
        out.append(pl.lit(None, pl.Utf8).alias(name))
    _problems(source, problems)
    return frame.select(out)


Lines = Callable[[], list[int] | None]


def _read_records(path: Path, wanted: Callable[[str], bool]) -> tuple[pl.DataFrame, Lines]:
    if path.suffix.lower() == ".json":
        records = raw_files.json_records(path)
        lines: Lines = lambda: raw_files.json_lines(path)  # noqa: E731
    else:
        records, known = raw_files.jsonl_records(path)
        lines = lambda: known  # noqa: E731
    rows = None
    try:
        if formats.is_label_studio(records):
            records, rows, problems = formats.label_studio_rows(records)
            _problems(str(path), problems)
            if not records:
                raise DataError(str(path), message="no annotations in the Label Studio export")
        frame, problems = raw_files.records_frame(records, wanted=wanted, rows=rows)
        _problems(str(path), problems)
    except DataError as exc:
        raise _at_lines(exc, lines) from None
    return frame, lines


def _read_raw(path: Path) -> pl.DataFrame:
    """The file's records, every column as text (``evalset.hybrid`` reads its extra column)."""
    return _read_file(path, _reads(ColumnMap()))[0]


def _read_file(path: Path, wanted: Callable[[str], bool]) -> tuple[pl.DataFrame, Lines]:
    """The file's records as text (every column) and, lazily, the line each starts on."""
    suffix = path.suffix.lower()
    if suffix in {".csv", ".tsv"}:
        separator = "\t" if suffix == ".tsv" else ","
        try:
            frame = pl.read_csv(path, separator=separator, infer_schema=False).drop(
                "row", strict=False
            )
        except pl.exceptions.PolarsError as exc:
            junk = raw_files.csv_junk(path, separator)
            message = str(junk or f"could not parse the file: {exc}")
            raise DataError(str(path), message=message) from None
        # a CSV the product wrote escaped formula-leading cells (adaptive.core.csv_safe):
        # reading it back restores them, so an export re-imports as it was stored
        return unescape_frame(frame), lambda: raw_files.csv_lines(path, separator)
    if suffix in {".json", ".jsonl", ".ndjson"}:
        return _read_records(path, wanted)
    if suffix in {".parquet", ".pq"}:
        names = list(pl.read_parquet_schema(path))
        frame = pl.read_parquet(path, columns=[c for c in names if wanted(c)])
        unread = [pl.lit(None, pl.Utf8).alias(c) for c in names if c not in frame.columns + ["row"]]
        frame = _text_frame(frame.drop("row", strict=False), wanted, str(path))
        return frame.with_columns(unread), lambda: None
    raise DataError(
        str(path),
        message=f"unknown file type {suffix!r}; expected .csv, .tsv, .json, .jsonl or .parquet",
    )


def record_lines(path: str | Path) -> list[int] | None:
    """The line each record of a judgments file starts on (None: a Parquet file, no lines)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in {".csv", ".tsv"}:
        return raw_files.csv_lines(path, "\t" if suffix == ".tsv" else ",")
    if suffix == ".json":
        return raw_files.json_lines(path)
    if suffix in {".jsonl", ".ndjson"}:
        return raw_files.jsonl_records(path)[1]
    return None


def _at_lines(exc: DataError, lines: Lines) -> DataError:
    """``exc`` with its rows (1-based records) given as the file's lines."""
    if not exc.problems or (starts := lines()) is None:
        return exc
    moved = [
        replace(p, row=starts[p.row - 1], unit="line") if 1 <= p.row <= len(starts) else p
        for p in exc.problems
    ]
    return DataError(exc.source, moved)


def read_judgments(source: str | Path | object, *, column_map: Any = None) -> pl.DataFrame:
    """Read and validate judgments from a file or a DataFrame.

    Args:
        source: a ``.csv``, ``.tsv``, ``.json`` (array), ``.jsonl``/``.ndjson`` or
            ``.parquet`` file, or a polars / pandas DataFrame, in the common schema,
            as a Chatbot Arena battle log, a ranking file (one row per screen), or one
            of the raw formats of :mod:`adaptive.core.formats`.
        column_map: the file's own column names (and values) mapped onto the schema: a
            :class:`~adaptive.core.column_map.ColumnMap`, ``{"item_id": "idx", ...}``,
            ``"item_id=idx,system_a=model_1"`` or a mapping file's path (default: the
            ``column_map`` the source carries, e.g. the command line's ``--data``).

    Returns:
        A frame with the required columns, ``dimension`` (filled with ``overall`` when
        absent), the optional columns that were present, and ``row`` (1-based
        record of the file).

    Raises:
        DataError: the file is missing, unreadable, or any row is invalid.

    Example:
        >>> import pandas as pd
        >>> read_judgments(pd.DataFrame({"model_a": ["x"], "model_b": ["y"],
        ...     "winner": ["tie (bothbad)"], "judge": ["u1"]})).row(0)
        ('battle-1', 'x', 'y', 'u1', 'tie', 'overall', 'a', 'true', 1)
        >>> read_judgments(pd.DataFrame({"q": ["p1"], "m1": ["x"], "m2": ["y"], "w": [2]}),
        ...     column_map="item_id=q,system_a=m1,system_b=m2,winner=w,winner:2=b,annotator_id=q"
        ...     ).row(0)
        ('p1', 'x', 'y', 'p1', 'b', 'overall', 1)
    """
    mapping = ColumnMap.of(
        column_map if column_map is not None else getattr(source, "column_map", None)
    )  # noqa: E501
    wanted = _reads(mapping)
    if not isinstance(source, str | Path):
        name = f"<{type(source).__name__}>"
        try:
            frame = as_polars(source)
        except TypeError as exc:
            raise DataError(name, message=str(exc)) from exc
        frame = frame.drop("row", strict=False)  # a validated frame's rows (of another file)
        text = _as_text(_text_frame(frame, wanted, name), source=name, column_map=mapping)
        return validate_judgments(text, source=name)
    path = Path(source)
    if not path.exists():
        raise DataError(str(path), message="file not found")
    lines: Lines = lambda: None  # noqa: E731
    try:
        raw, lines = _read_file(path, wanted)
        return validate_judgments(
            _as_text(raw, source=str(path), column_map=mapping), source=str(path)
        )
    except DataError as exc:
        raise _at_lines(exc, lines) from None
    except raw_files.RawFileError as exc:
        raise DataError(str(path), message=str(exc)) from None
    except (OSError, UnicodeDecodeError, pl.exceptions.PolarsError) as exc:
        raise DataError(str(path), message=f"could not parse the file: {exc}") from exc


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
    given = frame.select([pl.col(c).cast(pl.Utf8) for c in keep])  # echoed in problems
    df = given.select([pl.col(c).str.strip_chars() for c in keep])
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
    for column in ("screen_id", "timestamp"):
        if column in df.columns:
            df = df.with_columns(
                pl.when(pl.col(column) == "").then(None).otherwise(pl.col(column)).alias(column)
            )

    problems: list[RowProblem] = []

    def collect(mask: pl.Expr, column: str, expected: str) -> None:
        bad = df.with_row_index("_i").filter(mask).select("_i", "row")
        for i, row in bad.iter_rows():
            value = given[column][i] if column in given.columns else None
            problems.append(RowProblem(int(row), column, "<empty>" if value is None else value,
                                       expected))  # fmt: skip

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
    for column in ("item_id", "system_a", "system_b", "annotator_id", "dimension",
                   "judgment_id", "screen_id", "lease_id", "timestamp"):  # fmt: skip
        if column not in df.columns:
            continue
        check = timestamp_problem if column == "timestamp" else _nonempty_id_problem
        reasons = {v: r for v in df[column].drop_nulls().unique() if (r := check(v)) is not None}
        bad = df.with_row_index("_i").filter(pl.col(column).is_in(list(reasons)))
        for i, row, value in bad.select("_i", "row", column).iter_rows():
            problems.append(RowProblem(int(row), column, given[column][i], reasons[value]))
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


def _nonempty_id_problem(value: str) -> str | None:
    """An id's problem as a row's expectation (an empty id is checked apart)."""
    problem = id_problem(value, allow_empty=True)
    return None if problem is None else f"a valid id ({problem})"


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
