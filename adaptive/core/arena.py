"""Chatbot Arena battle logs (and MT-Bench's human judgments, in the same shape) in the
common schema; see :mod:`adaptive.core.data` for what is read and how."""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl

from adaptive.core.raw_files import Problem

#: Chatbot Arena's winner labels and what they become
ARENA_WINNERS: dict[str, str] = {
    "model_a": "a",
    "model_b": "b",
    "tie": "tie",
    "tie (bothbad)": "tie",
}
ARENA_COLUMNS: tuple[str, ...] = ("model_a", "model_b", "winner")
#: columns of an Arena log that are read (the rest, e.g. the conversations, are not)
ARENA_READ = ARENA_COLUMNS + ("question_id", "id", "judge", "tstamp", "turn")


def is_arena(columns: Iterable[str]) -> bool:
    """Whether a frame's columns are those of a Chatbot Arena battle log."""
    columns = set(columns)
    return set(ARENA_COLUMNS) <= columns and "system_a" not in columns


def arena_to_judgments(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Problem]]:
    """An Arena battle log in the common schema (text columns, not yet validated), or the
    problems of its winners (the value as given).

    Example:
        >>> arena_to_judgments(pl.DataFrame({"question_id": ["q1", "q2"],
        ...     "model_a": ["x", "x"], "model_b": ["y", "y"], "judge": ["u1", "u2"],
        ...     "winner": ["model_b", "tie (bothbad)"]}))[0].select("winner", "both_bad").rows()
        [('b', 'false'), ('tie', 'true')]
    """
    n = frame.height
    text = {c: frame[c].cast(pl.Utf8) for c in frame.columns if c in ARENA_READ and c != "tstamp"}
    winner_raw = text["winner"].str.strip_chars().str.to_lowercase()
    rows = frame["row"].to_list() if "row" in frame.columns else list(range(1, n + 1))
    problems = [
        (
            row,
            "winner",
            "<empty>" if given is None else given,
            "one of 'model_a', 'model_b', 'tie', 'tie (bothbad)'",
        )  # fmt: skip
        for row, given, v in zip(rows, text["winner"].to_list(), winner_raw.to_list())
        if v not in ARENA_WINNERS
    ]
    if problems:
        return pl.DataFrame(), problems
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
            "row": pl.Series(rows, dtype=pl.UInt32),
        }
    )
    if "tstamp" in frame.columns:
        out = out.with_columns(_iso_time(frame["tstamp"]).alias("timestamp"))
    return out, []


def _iso_time(tstamp: pl.Series) -> pl.Series:
    """Arena's ``tstamp`` (seconds since the epoch) as ISO 8601 in UTC; other text as given.

    Example:
        >>> _iso_time(pl.Series(["1688000000.5", "2023-07-01T00:00:00Z"])).to_list()
        ['2023-06-29T00:53:20.500Z', '2023-07-01T00:00:00Z']
    """
    seconds = tstamp.cast(pl.Float64, strict=False) if tstamp.dtype == pl.Utf8 else (
        tstamp.cast(pl.Float64))  # fmt: skip
    stamp = pl.from_epoch((seconds * 1e6).cast(pl.Int64), time_unit="us").dt.strftime(
        "%Y-%m-%dT%H:%M:%S%.fZ")  # fmt: skip
    return stamp.fill_null(tstamp.cast(pl.Utf8)).alias("tstamp")


def _judged_per_turn(question: pl.Series, turn: pl.Series) -> bool:
    """Whether some question was judged at more than one turn.

    Example:
        >>> _judged_per_turn(pl.Series(["q1", "q1"]), pl.Series(["1", "2"]))
        True
    """
    frame = pl.DataFrame({"q": question, "t": turn})
    return int(frame.group_by("q").agg(pl.col("t").n_unique())["t"].max() or 0) > 1  # type: ignore[arg-type]
