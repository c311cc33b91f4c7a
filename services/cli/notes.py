"""The notes ``evalset significance`` adds on stderr about its rows."""

from __future__ import annotations

from typing import Any

#: |net preference| from which a comparison counts as strong for :func:`strong_note`
STRONG_NET = 0.6


def strong_note(
    rows: list[dict[str, Any]], theta_scale: float, lapse: bool = False, robust: bool = False
) -> str | None:
    """A warning when strong comparisons were fitted under theta's default N(0, 1) prior, or
    under the lapse rate and their own judgments disagree with the fit.

    Nearly unanimous judgments say little about how far out theta is, so the prior holds a
    strong comparison's theta (and its Δ) towards 0 with an interval too narrow to reach the
    truth: on a simulator with strong effects, 95% intervals of comparisons with |Δ| >= 0.6
    covered 0.56 under N(0, 1), 0.81 under N(0, 3) and 0.93 under N(0, 3) with the fast path's
    refinement at every size (docs/statistics.md, "The prior of theta").

    With the lapse rate on, Δ is at most 1 - the rate: where annotators disagree a lot the rate
    is high (0.36 on the bundled NCM logs) and a strong comparison is held below its own
    judgments, which its posterior predictive check then flags (NCM: 0.54 against 0.74
    observed; 0.71 without the lapse, unflagged). A wider prior does not lift that cap.

    The default (``robust``) reads Δ from each comparison's own judgments, which no prior
    pulls: then only theta (the IRT scale) is shrunk, and no note is given for the prior.

    None when no comparison's observed net preference reaches ``STRONG_NET``, or when neither
    applies (a wider prior or the default's Δ, and no flagged strong comparison under the
    lapse).
    """
    strong = [
        r for r in rows if abs(r.get("observed_net", r.get("net_preference", 0.0))) >= STRONG_NET
    ]
    notes = []
    if strong and theta_scale <= 1.0 and not robust:
        notes.append(
            f"note: {len(strong)} comparison(s) have an observed net preference of at least "
            f"{STRONG_NET} in size; under theta's prior N(0, {theta_scale:g}) their net preference "
            "is pulled towards 0 and its interval is too narrow (the sign holds): for their size, "
            "refit with --theta-scale 3 (and, on the fast path, --refine-always) "
            "(docs/statistics.md, 'The prior of theta')"
        )
    capped = [r for r in strong if r.get("ppc_flag")]
    if lapse and capped:
        notes.append(
            f"note: {len(capped)} strong comparison(s) disagree with their own judgments "
            "(ppc_flag); with the lapse rate on, a net preference is at most 1 - the rate, so "
            "these are held below what their judgments show: refit with --no-lapse to compare "
            "(research/how_the_defaults_were_chosen.md, 'A lapse rate')"
        )
    return "\n".join(notes) or None
