"""Ranked screens: one row per screen (an annotator ranks k systems' outputs for one prompt)
expanded into its k(k-1)/2 pairwise judgments, each carrying the screen's ``screen_id``.

A ranking file has the columns

=============== ======== =========================================================
column          required meaning
=============== ======== =========================================================
item_id         yes      the prompt every ranked output answers
annotator_id    yes      who ranked (may be empty when the source does not say)
ranking         yes      best first: ``"x > y = z > w"`` (``=`` a tie); in JSON,
                         JSONL, Parquet or a frame also a list of ranks, each a
                         string (``["x", "y = z", "w"]``) or a list of tied
                         systems (``[["x"], ["y", "z"], ["w"]]``)
screen_id       no       the screen's id (``screen-<row>`` when absent)
dimension       no       what was judged (``overall`` when absent)
timestamp       no       when the screen was judged (kept as text)
=============== ======== =========================================================

Each pair of the screen becomes one row with ``system_a`` < ``system_b`` by name and
``winner`` ``a``, ``b`` or ``tie``; a pair's row keeps the screen's file row as its
``row``. The rows then pass :func:`adaptive.core.data.validate_judgments`, the one validator
of every door, which also checks every screen: its rows share ``item_id``,
``annotator_id`` and ``dimension`` and hold each pair at most once.

This module knows no errors type of its own (:mod:`adaptive.core.data` imports it): it returns
each bad row as ``(row, column, value, expected)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from typing import Any

import polars as pl

RANKING_COLUMNS: tuple[str, ...] = ("item_id", "annotator_id", "ranking")
#: the columns of a ranking file that are read
RANKING_READ: tuple[str, ...] = RANKING_COLUMNS + ("screen_id", "dimension", "timestamp")
RANKING_SYNTAX = "systems best first, '>' between ranks and '=' within a tie, e.g. 'x > y = z'"

Problem = tuple[int, str, str, str]


def is_ranking(columns: Iterable[str]) -> bool:
    """Whether a frame's columns are those of a ranking file (one row per ranked screen)."""
    columns = set(columns)
    return "ranking" in columns and "system_a" not in columns


def parse_ranking(value: Any) -> list[list[str]]:
    """The ranks of one screen, best first, each a list of tied systems.

    Raises:
        ValueError: what is wrong with the value.

    Example:
        >>> parse_ranking("x > y = z > w")
        [['x'], ['y', 'z'], ['w']]
        >>> parse_ranking(["x", "y = z"]) == parse_ranking([["x"], ["y", "z"]])
        True
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError("an empty ranking")
    if isinstance(value, pl.Series):
        value = value.to_list()
    if isinstance(value, str):
        ranks = [rank.split("=") for rank in value.split(">")]
    elif isinstance(value, list | tuple):
        ranks = [
            list(rank) if isinstance(rank, list | tuple) else str(rank).split("=")
            for rank in (r.to_list() if isinstance(r, pl.Series) else r for r in value)
        ]
    else:
        raise ValueError(f"a ranking of type {type(value).__name__}")
    ranks = [["" if n is None else str(n).strip() for n in rank] for rank in ranks]
    names = [n for rank in ranks for n in rank]
    if any(not n for n in names):
        raise ValueError("an empty system name (a '>' or '=' without a system on one side)")
    odd = sorted({n for n in names if any(ch in n for ch in "[]>")})
    if odd:
        raise ValueError(f"system name(s) {odd} with '[', ']' or '>' (a list within a rank?)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"system(s) {repeated} ranked twice")
    if len(names) < 2:
        raise ValueError("fewer than two systems")
    return ranks


def ranked_pairs(ranks: list[list[str]]) -> list[tuple[str, str, str]]:
    """Every pair of a screen as ``(system_a, system_b, winner)``, ``system_a`` < ``system_b``.

    Example:
        >>> ranked_pairs([["y"], ["x", "z"]])
        [('x', 'y', 'b'), ('x', 'z', 'tie'), ('y', 'z', 'a')]
    """
    tier = {name: t for t, rank in enumerate(ranks) for name in rank}
    out = []
    for a, b in combinations(sorted(tier), 2):
        winner = "tie" if tier[a] == tier[b] else ("a" if tier[a] < tier[b] else "b")
        out.append((a, b, winner))
    return out


def expand_rankings(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[Problem]]:
    """A ranking frame's pairwise rows (text columns, with ``row`` and ``screen_id``).

    Returns the pairs and the problems; when there are problems the pairs are empty.

    Example:
        >>> pairs, problems = expand_rankings(pl.DataFrame({"item_id": ["p1"],
        ...     "annotator_id": ["w1"], "ranking": ["x > y = z"]}))
        >>> pairs.select("system_a", "system_b", "winner", "screen_id").rows()
        [('x', 'y', 'a', 'screen-1'), ('x', 'z', 'a', 'screen-1'), ('y', 'z', 'tie', 'screen-1')]
    """
    missing = [c for c in RANKING_COLUMNS if c not in frame.columns]
    if missing:
        return pl.DataFrame(), [
            (0, c, "<missing column>", "a ranking file's column") for c in missing
        ]
    ranking = frame["ranking"].to_list()
    text = {
        c: frame[c].cast(pl.Utf8).str.strip_chars().to_list()
        for c in RANKING_READ
        if c in frame.columns and c != "ranking"
    }
    screen = text.get("screen_id") or [None] * frame.height
    problems: list[Problem] = []
    rows: list[dict[str, Any]] = []
    seen_screens: dict[str, int] = {}
    for i, value in enumerate(ranking):
        row = i + 1
        try:
            pairs = ranked_pairs(parse_ranking(value))
        except ValueError as exc:
            shown = "<empty>" if value is None else str(value)
            problems.append((row, "ranking", shown, f"{RANKING_SYNTAX}; this one has {exc}"))
            continue
        screen_id = screen[i] or f"screen-{row}"
        if screen_id in seen_screens:
            problems.append(
                (
                    row,
                    "screen_id",
                    screen_id,
                    f"one row per screen (also at row {seen_screens[screen_id]})",
                )
            )
            continue
        seen_screens[screen_id] = row
        extra: dict[str, Any] = {c: text[c][i] for c in ("dimension", "timestamp") if c in text}
        for a, b, winner in pairs:
            rows.append(
                {
                    "item_id": text["item_id"][i],
                    "system_a": a,
                    "system_b": b,
                    "annotator_id": text["annotator_id"][i],
                    "winner": winner,
                    "screen_id": screen_id,
                    **extra,
                    "row": row,
                }
            )
    if problems:
        return pl.DataFrame(), problems
    if not rows:
        pairwise = ("item_id", "system_a", "system_b", "annotator_id", "winner")
        return pl.DataFrame(schema=dict.fromkeys(pairwise, pl.Utf8)), []
    schema = {c: pl.Utf8 for c in rows[0] if c != "row"} | {"row": pl.UInt32}
    return pl.DataFrame(rows, schema=schema), []


__all__ = [
    "RANKING_COLUMNS",
    "RANKING_READ",
    "expand_rankings",
    "is_ranking",
    "parse_ranking",
    "ranked_pairs",
]
