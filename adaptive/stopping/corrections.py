"""The multiplicity rules across a comparison family, each one value that carries its behaviour.

A :class:`Correction` is what :attr:`adaptive.stopping.rule.DecisionRule.correction` holds:
its value is the name every door takes (``--correction``, ``?correction=``, a next batch's
body, ``evalset.decisions(correction=...)``), and it carries what the decisions need of the
rule: each comparison's level (:meth:`Correction.alpha_each`), the rule in words
(:meth:`Correction.describe`) and whether closed testing with e-values closes more at each
look (:attr:`Correction.closes_by_e_holm`, :func:`adaptive.stopping.rule.e_holm_rejections`).
Adding a rule is one member here (and its paragraph in docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


def _split(alpha: float, num_tests: int) -> float:
    """Bonferroni's split: ``alpha / num_tests`` each."""
    return alpha / max(int(num_tests), 1)


def _whole(alpha: float, num_tests: int) -> float:
    """No split: ``alpha`` each."""
    return alpha


class Correction(StrEnum):
    """A multiplicity rule: its name, each comparison's level, its words, how it closes.

    Attributes:
        level_each: (alpha, family size) -> the error bound of one comparison (a closed
            testing rule closes at least what this closes).
        closes_by_e_holm: e-Holm closes more at every look, on top of ``level_each``'s
            closings (the service keeps its closings between looks; hybrid decisions do
            not take it).
        words: the rule in words, with ``{alpha}``, ``{num_tests}`` and ``{each}``.
        summary: what it does, for the doors' help.
    """

    level_each: Callable[[float, int], float]
    closes_by_e_holm: bool
    words: str
    summary: str

    BONFERRONI = (
        "bonferroni",
        _split,
        False,
        "bonferroni: alpha {alpha:g} / {num_tests} comparisons = {each:.3g} each",
        "each comparison at alpha / family size",
    )
    E_HOLM = (
        "e-holm",
        _split,
        True,
        "e-holm: closed testing with e-values over {num_tests} comparisons at alpha {alpha:g} "
        "(at least bonferroni's {each:.3g} each)",
        "closed testing with e-values: decides at least what bonferroni does",
    )
    NONE = (
        "none",
        _whole,
        False,
        "no correction: alpha {alpha:g} each",
        "alpha for each comparison, no control across the family",
    )

    def __new__(
        cls,
        name: str,
        level_each: Callable[[float, int], float],
        closes_by_e_holm: bool,
        words: str,
        summary: str,
    ) -> Correction:
        member = str.__new__(cls, name)
        member._value_ = name
        member.level_each = level_each
        member.closes_by_e_holm = closes_by_e_holm
        member.words = words
        member.summary = summary
        return member

    def alpha_each(self, alpha: float, num_tests: int) -> float:
        """The error bound of one comparison of a family of ``num_tests``."""
        return self.level_each(alpha, num_tests)

    def describe(self, alpha: float, num_tests: int) -> str:
        """The rule in words, e.g. ``bonferroni: alpha 0.05 / 6 comparisons = 0.00833 each``."""
        each = self.alpha_each(alpha, num_tests)
        return self.words.format(alpha=alpha, num_tests=num_tests, each=each)


#: the rules' names, as the doors take them
CORRECTIONS = tuple(c.value for c in Correction)
