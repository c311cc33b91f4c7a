"""Decisions as rows: one flat dict per comparison, the columns every door shows
(:mod:`evalset.decide`, ``GET /decisions``, the dashboard); the hybrid rows
(:mod:`evalset.hybrid`) share their columns through the same pieces."""

from __future__ import annotations

from typing import Any

import numpy as np

from adaptive.stopping.decisions import OUTCOME_NAMES, UNDECIDED, Decisions
from adaptive.stopping.rule import Family


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def comparison_columns(
    names: tuple[str, str, str], outcome: int, net: float, cs_low: float, cs_high: float
) -> dict[str, Any]:
    """A row's first columns: the comparison, its decision, Δ and its confidence sequence."""
    dim, a, b = names
    return {
        "dimension": dim,
        "system_a": a,
        "system_b": b,
        "decision": OUTCOME_NAMES[int(outcome)],
        "net_preference": _finite(net),
        "cs_low": float(cs_low),
        "cs_high": float(cs_high),
    }


def count_columns(
    num_judgments: int, num_used: int, num_prompts: int, closed_at: int
) -> dict[str, Any]:
    """A row's counts: judgments, those the decision used, prompts, and when it closed."""
    return {
        "n_judgments": int(num_judgments),
        "n_used": int(num_used),
        "n_prompts": int(num_prompts),
        "closed_at": int(closed_at) or None,
    }


def rule_columns(alpha_each: float, family: Family | None, words: str) -> dict[str, Any]:
    """A row's last columns: each comparison's level, the family (if given), the rule in words."""
    out: dict[str, Any] = {"alpha_each": float(alpha_each)}
    if family is not None:
        out |= {"family": family.kind, "family_size": family.size}
    out["rule"] = words
    return out


def decision_rows(
    decisions: Decisions,
    names: list[tuple[str, str, str]],
    *,
    available_prompts: np.ndarray | None = None,
    unit: str | None = None,
    family: Family | None = None,
) -> list[dict]:
    """One flat dict per comparison (``names``: (dimension, system_a, system_b)), for outputs.

    One story per row: the ``decision``; ``net_preference`` (Δ from the judgments the
    decision used, ``n_used``) with ``cs_low``/``cs_high``, the interval an
    ``equivalent`` decision rests on; ``b_share`` (B's share of those judgments that
    are not ties) with ``b_share_low``/``b_share_high``, the interval a sign decision
    rests on (a ``B better`` row has ``b_share_low`` >= 0.5, an open row's interval holds 0.5).

    With ``available_prompts`` ((C,) the prompts of each comparison's dimension in the
    campaign) and the rule's ``unit``: ``unused_prompts`` (not yet judged on it) and
    ``needs_new_prompts`` (undecided, and with the prompt unit it likely needs more
    judgments than it has unused prompts: the campaign's prompts cannot close it). With
    ``family``: ``family`` (its kind) and ``family_size``.
    """
    C = len(names)
    nan = np.full(C, np.nan)
    net_used = decisions.net_used if decisions.net_used is not None else nan
    b_share = decisions.b_share if decisions.b_share is not None else nan
    share_low = decisions.share_low if decisions.share_low is not None else np.zeros(C)
    share_high = decisions.share_high if decisions.share_high is not None else np.ones(C)
    rows = []
    for c, name in enumerate(names):
        needed = float(decisions.needed[c])
        row = comparison_columns(
            name, decisions.outcome[c], net_used[c], decisions.cs_low[c], decisions.cs_high[c]
        )
        row |= {
            "b_share": _finite(b_share[c]),
            "b_share_low": float(share_low[c]),
            "b_share_high": float(share_high[c]),
        }
        row |= count_columns(
            decisions.num_judgments[c],
            decisions.num_obs[c],
            decisions.num_prompts[c],
            decisions.closed_at[c],
        )
        row["needed"] = None if not np.isfinite(needed) else int(round(needed))
        if available_prompts is not None:
            unused = max(int(available_prompts[c]) - int(decisions.num_prompts[c]), 0)
            row["unused_prompts"] = unused
            row["needs_new_prompts"] = bool(
                decisions.outcome[c] == UNDECIDED and unit == "prompt" and needed > unused
            )
        row |= {"e_b_better": float(decisions.e_b[c]), "e_a_better": float(decisions.e_a[c])}
        rows.append(row | rule_columns(decisions.alpha_each, family, decisions.rule))
    return rows
