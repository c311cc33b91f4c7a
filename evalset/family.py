"""The comparison family a rule declares over a judgments frame, and its decisions.

Shared by :mod:`evalset.decide` (human-only decisions) and :mod:`evalset.hybrid` (decisions
with an automatic judge), so both doors decide the same comparisons under the same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import polars as pl

from adaptive.stopping.rule import DecisionRule, Family, comparison_family
from adaptive.stopping.rule_options import rule_of as rule_of
from evalset._common import _dims

if TYPE_CHECKING:  # adaptive.stopping.decisions loads scipy: imported where it is used
    from adaptive.stopping.decisions import Decisions


class FamilyJudgments(NamedTuple):
    """A frame's judgments on the family's comparisons (arrival order), as :func:`decide` takes them."""

    family: Family
    comparison: np.ndarray
    prompt: np.ndarray
    signed: np.ndarray
    available_prompts: np.ndarray  # (family size,) prompts of each comparison's dimension
    outside: list[tuple[str, str, str]]  # compared, but not in the family: no decision
    source: np.ndarray  # (N,) each judgment's row in the frame


def family_judgments(
    judgments: pl.DataFrame, rule: DecisionRule, *, systems: Sequence[str] = ()
) -> FamilyJudgments:
    """The family ``rule`` declares over the frame's dimensions, and its judgments.

    A comparison of the family oriented the other way round from the data gets its
    judgments with the sign flipped; judgments of comparisons outside it are left out.
    Judgments come dimension by dimension, in arrival order within each (``source`` is
    each one's row in the frame). ``systems``: the campaign's systems beyond those judged
    (the ``all-pairs`` family's; the service passes its registered ones).
    """
    from adaptive.core.cells import build_cells

    dims = _dims(judgments, None)
    cells = [build_cells(judgments, dimension=d) for d in dims]
    compared = [(cd.dimension, a, b) for cd in cells for a, b in cd.comparison_names()]
    judged = set(judgments["system_a"].to_list()) | set(judgments["system_b"].to_list())
    everyone = sorted(judged | set(systems))
    family = comparison_family(rule, compared, systems=everyone, dimensions=dims)
    where = {(d, frozenset((a, b))): (f, (a, b)) for f, (d, a, b) in enumerate(family.comparisons)}
    available = np.zeros(family.size, np.int64)
    comp, prompt, signed, outside, source = [], [], [], [], []
    dimension = judgments["dimension"].to_numpy()
    for cd in cells:
        index = np.full(cd.num_comparisons, -1, np.int64)
        flip = np.ones(cd.num_comparisons)
        for c, (a, b) in enumerate(cd.comparison_names()):
            hit = where.get((cd.dimension, frozenset((a, b))))
            if hit is None:
                outside.append((cd.dimension, a, b))
                continue
            index[c], flip[c] = hit[0], 1.0 if hit[1] == (a, b) else -1.0
        for f, (d, _, _) in enumerate(family.comparisons):
            if d == cd.dimension:
                available[f] = len(cd.prompts)
        j = cd.judgment_comparison
        keep = index[j] >= 0
        comp.append(index[j][keep])
        prompt.append(cd.judgment_prompt[keep])
        signed.append((cd.judgment_y[keep].astype(np.float64) - 1.0) * flip[j][keep])
        source.append(np.flatnonzero(dimension == cd.dimension)[keep])

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return FamilyJudgments(
        family,
        cat(comp, np.int64),
        cat(prompt, np.int64),
        cat(signed, np.float64),
        available,
        outside,
        cat(source, np.int64),
    )


class DecisionReport(NamedTuple):
    """What :func:`decide_judgments` answers: the rows and how they were made."""

    rows: list[dict[str, Any]]
    rule: DecisionRule
    family: Family
    decisions: Decisions
    outside: list[tuple[str, str, str]]


def decide_judgments(judgments: pl.DataFrame, rule: DecisionRule | None = None) -> DecisionReport:
    """Every family comparison's anytime-valid decision, one family across all dimensions.

    Args:
        judgments: validated judgments in arrival order (:func:`evalset.read`).
        rule: the :class:`DecisionRule` (default: its defaults).

    Returns:
        :class:`DecisionReport`; its rows are :func:`adaptive.stopping.decision_rows.decision_rows`
        with ``unused_prompts``, ``needs_new_prompts``, ``family`` and ``family_size``.
    """
    from adaptive.stopping.decision_rows import decision_rows
    from adaptive.stopping.decisions import decide

    rule = rule or DecisionRule()
    fj = family_judgments(judgments, rule)
    size = fj.family.size
    d = decide(fj.comparison, fj.prompt, fj.signed, size, rule, num_tests=size)
    rows = decision_rows(
        d,
        list(fj.family.comparisons),
        available_prompts=fj.available_prompts,
        unit=rule.unit,
        family=fj.family,
    )
    return DecisionReport(rows, rule, fj.family, d, fj.outside)
