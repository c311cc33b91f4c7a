"""The decisions' ranking beside a leaderboard: where the two tell a different story, and why.

A leaderboard (Elo's rank intervals, Bradley-Terry's P(best)) orders the systems from one
rating model fitted on every pair's judgments, read once. The ``ranking`` question
(:func:`evalset.questions.answer_judgments`) orders them in tied groups from each pair's own
anytime-valid decision. Every leaderboard row gains:

* ``decided_group``: the 1-based index of the system's group in the decided ranking;
* ``decided_ranks``: the ranks that group spans (``"1-3"``, or ``"4"`` alone);
* ``note``: empty, or each system the leaderboard separates this one from while their
  decision does not (or the reverse), with the decision and its reason.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import polars as pl

from evalset.family import rule_of

#: the columns every leaderboard row gains
BESIDE_COLUMNS = ("decided_group", "decided_ranks", "note")
#: why a leaderboard can separate what a decision does not
WHY = (
    "the leaderboard's order draws on every pair through its rating model and holds at this "
    "look; a decision uses the pair's own judgments, one per prompt, valid at every look"
)


class DecidedRanking(NamedTuple):
    """The decided ranking of every dimension and its pair decisions."""

    groups: dict[str, list[list[str]]]  # dimension -> tied groups, best first
    pairs: dict[tuple[str, str, str], dict[str, Any]]  # (dimension, a, b) -> decision row


def decided_ranking(judgments: pl.DataFrame, level: float) -> DecidedRanking:
    """The ``ranking`` answer at ``alpha = 1 - level`` (the leaderboard's level)."""
    from evalset.questions import answer_judgments

    report = answer_judgments(judgments, rule_of(alpha=round(1.0 - level, 12)), "ranking")
    groups = {a["dimension"]: a["groups"] for a in report.answers}
    pairs = {(r["dimension"], r["system_a"], r["system_b"]): r for r in report.decisions.rows}
    return DecidedRanking(groups, pairs)


def group_columns(ranking: DecidedRanking, dimension: str, system: str) -> dict[str, Any]:
    """``decided_group`` and ``decided_ranks`` of one system (null when it has no group)."""
    first = 1
    for k, group in enumerate(ranking.groups.get(dimension, []), start=1):
        last = first + len(group) - 1
        if system in group:
            ranks = str(first) if first == last else f"{first}-{last}"
            return {"decided_group": k, "decided_ranks": ranks}
        first = last + 1
    return {"decided_group": None, "decided_ranks": None}


def verdict(ranking: DecidedRanking, dimension: str, s: str, t: str) -> tuple[str, dict[str, Any]]:
    """The decision of s against t from s's side: ``better``, ``worse``, ``equivalent`` or
    ``undecided``, with its row (empty when the pair has none)."""
    row = ranking.pairs.get((dimension, s, t))
    flip = row is None
    row = row or ranking.pairs.get((dimension, t, s)) or {}
    decision = row.get("decision", "undecided")
    if decision in ("A better", "B better"):
        a_won = decision == "A better"
        return ("better" if a_won != flip else "worse"), row
    return decision, row


def reason(decision: str, row: dict[str, Any], s: str, t: str) -> str:
    """Why the decision of s vs t is not the leaderboard's order, in words."""
    if decision == "equivalent":
        return f"decided equivalent (|net preference| below the margin) on {row['n_used']} prompts"
    if decision in ("better", "worse"):
        winner = s if decision == "better" else t
        return f"their own judgments decide the other way ({winner} better)"
    used = int(row.get("n_used") or 0)
    if used == 0:
        return "never compared directly (the leaderboard orders them through other systems)"
    needed = row.get("needed")
    more = "an unknown number" if needed is None else f"~{needed}"
    return f"undecided on their own {used} prompts (needs {more} more judgments)"


def pair_note(ranking: DecidedRanking, dimension: str, s: str, t: str, above: bool) -> str:
    """The note part for a pair the leaderboard orders (s above t when ``above``) and the
    decision does not; empty when the decision agrees."""
    decision, row = verdict(ranking, dimension, s, t)
    if decision == ("better" if above else "worse"):
        return ""
    side = "above" if above else "below"
    return f"{side} {t}: {reason(decision, row, s, t)}"


def elo_notes(ranking: DecidedRanking, dimension: str, rows: list[dict[str, Any]]) -> list[str]:
    """Per Elo row, the systems its rank interval separates it from that the decisions do not,
    and those the decisions separate it from that the rank intervals do not."""
    notes = []
    for r in rows:
        elo, decided = [], []
        for q in rows:
            s, t = r["system"], q["system"]
            if q is r:
                continue
            if r["rank_worst"] < q["rank_best"] or q["rank_worst"] < r["rank_best"]:
                elo.append(pair_note(ranking, dimension, s, t, r["rank_worst"] < q["rank_best"]))
                continue
            decision = verdict(ranking, dimension, s, t)[0]
            if decision in ("better", "worse"):
                side = "above" if decision == "better" else "below"
                decided.append(f"the decisions rank it {side} {t}, the rank intervals overlap")
        notes.append(_note("Elo ranks it", elo, decided))
    return notes


def best_notes(
    ranking: DecidedRanking, dimension: str, rows: list[dict[str, Any]], level: float
) -> list[str]:
    """Per Bradley-Terry row: when P(best) reaches ``level``, each other system the decisions
    do not put it above."""
    notes = []
    for r in rows:
        parts = []
        if r["p_best"] >= level:
            parts = [pair_note(ranking, dimension, r["system"], q["system"], True) for q in rows
                     if q is not r]  # fmt: skip
        notes.append(_note(f"P(best) {r['p_best']:.2f} ranks it", parts, []))
    return notes


def _note(lead: str, board: list[str], decided: list[str]) -> str:
    """``lead`` and the leaderboard's separations the decisions lack, then the decisions'
    separations the leaderboard lacks, then why they can differ; empty when none."""
    board = [p for p in board if p]
    parts = ([f"{lead} " + "; ".join(board)] if board else []) + decided
    return f"{'; '.join(parts)} ({WHY})" if parts else ""
