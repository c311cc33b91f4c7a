"""Decisions as rows: one flat dict per comparison, the columns every door shows
(:mod:`evalset.decide`, ``GET /decisions``, the dashboard)."""

from __future__ import annotations

import numpy as np

from adaptive.stopping.decisions import OUTCOME_NAMES, UNDECIDED, Decisions
from adaptive.stopping.rule import Family


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


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
    for c, (dim, a, b) in enumerate(names):
        needed = float(decisions.needed[c])
        row = {
            "dimension": dim,
            "system_a": a,
            "system_b": b,
            "decision": OUTCOME_NAMES[int(decisions.outcome[c])],
            "net_preference": _finite(net_used[c]),
            "cs_low": float(decisions.cs_low[c]),
            "cs_high": float(decisions.cs_high[c]),
            "b_share": _finite(b_share[c]),
            "b_share_low": float(share_low[c]),
            "b_share_high": float(share_high[c]),
            "n_judgments": int(decisions.num_judgments[c]),
            "n_used": int(decisions.num_obs[c]),
            "n_prompts": int(decisions.num_prompts[c]),
            "closed_at": int(decisions.closed_at[c]) or None,
            "needed": None if not np.isfinite(needed) else int(round(needed)),
        }
        if available_prompts is not None:
            unused = max(int(available_prompts[c]) - int(decisions.num_prompts[c]), 0)
            row["unused_prompts"] = unused
            row["needs_new_prompts"] = bool(
                decisions.outcome[c] == UNDECIDED and unit == "prompt" and needed > unused
            )
        row |= {
            "e_b_better": float(decisions.e_b[c]),
            "e_a_better": float(decisions.e_a[c]),
            "alpha_each": float(decisions.alpha_each),
        }
        if family is not None:
            row |= {"family": family.kind, "family_size": family.size}
        row["rule"] = decisions.rule
        rows.append(row)
    return rows
