"""The decision rule: one definition of each default, the comparison family, the multiplicity rule.

Every door (``evalset decisions``, ``recommend`` and ``replay`` on the command line,
:func:`evalset.decisions`, the HTTP routes) builds a :class:`DecisionRule` through the
parameters :mod:`adaptive.stopping.rule_options` makes of its fields, and takes its defaults
and valid ranges from here: the decision level, the equivalence margin, the unit, the
multiplicity rule and the comparison family are each written once, in this module.

**The family** is the set of comparisons whose decisions share the error bound. It is
a design the team declares:

* ``compared`` (default): the comparisons present in the judgments, in every
  dimension: the pairs the campaign actually compares;
* ``registered``: the pairs the team lists (:attr:`DecisionRule.pairs`), in every
  dimension, whether judged yet or not;
* ``all-pairs``: every pair of the systems, in every dimension (a round robin).

**The multiplicity rule** (``correction``, a :class:`Correction` of
:mod:`adaptive.stopping.corrections`, which carries each rule's behaviour) across the family:

* ``bonferroni`` (default): each comparison at ``alpha / family size``;
* ``e-holm``: closed testing with e-values (Vovk & Wang 2021, the arithmetic-mean
  intersection test), applied at every look on top of Bonferroni's closings: it
  decides everything Bonferroni decides and more when other comparisons' evidence
  is strong; family-wise error at most ``alpha`` over all looks
  (:func:`e_holm_rejections`);
* ``none``: ``alpha`` for each comparison (no control across the family).

References:
    Vovk & Wang (2021), "E-values: calibration, combination and applications",
    Ann. Statist. 49(3); Marcus, Peritz & Gabriel (1976), closed testing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Final, Literal, NamedTuple, get_args

import numpy as np
from pydantic import BeforeValidator, Field, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass

from adaptive.stopping.corrections import CORRECTIONS as CORRECTIONS
from adaptive.stopping.corrections import Correction

#: the campaign-wide error bound of the decisions
DEFAULT_LEVEL = 0.05
#: region of practical equivalence, |Δ| < margin (Δ in [-1, 1])
DEFAULT_MARGIN = 0.1
DEFAULT_UNIT: Final = "prompt"
DEFAULT_CORRECTION = Correction.BONFERRONI
DEFAULT_FAMILY: Final = "compared"
#: a of the Beta(a, a) mixing prior of the sign e-processes
DEFAULT_MIXTURE = 5.0
#: e-values are used up to exp(690) ~ 1e300, so that they stay finite
LOG_E_CAP = 690.0
#: the most pairs a registered family lists
MAX_PAIRS = 10_000

FAMILY_WORDS = {
    "compared": "the comparisons with judgments",
    "registered": "the registered pairs",
    "all-pairs": "every pair of the systems",
}


def _as_pairs(value: Any) -> Any:
    """Registered pairs from ``(a, b)`` pairs, ``"A:B"`` texts or one ``"A:B,C:D"`` text."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [p for p in value.split(",") if p.strip()]
    out = []
    for pair in value:
        if isinstance(pair, str):
            a, sep, b = pair.partition(":")
            if not sep or not a.strip() or not b.strip():
                raise ValueError(f"{pair!r} is not SYSTEM_A:SYSTEM_B")
            pair = (a.strip(), b.strip())
        out.append(pair)
    return tuple(out)


# The rule's parameters, each with its valid range and meaning written once: the doors'
# parameters (query, body, flags, keywords) are made from these (adaptive.stopping.rule_options).
Level = Annotated[
    float,
    Field(
        ge=1e-12,
        lt=1.0,
        description="decision level: campaign-wide error bound, shared by the comparison family",
    ),
]
Margin = Annotated[
    float,
    Field(
        ge=0.0,
        lt=1.0,
        description="equivalence region |net preference| < margin, in [-1, 1] units",
    ),
]
Unit = Annotated[
    Literal["prompt", "judgment"],
    Field(
        description="prompt: the first judgment of each (comparison, prompt) cell, a claim "
        "about new prompts; judgment: every judgment, a claim about these prompts"
    ),
]
Multiplicity = Annotated[
    Correction,
    Field(
        description="multiplicity rule across the family: "
        + "; ".join(f"{c.value}: {c.summary}" for c in Correction)
    ),
]
Mixture = Annotated[float, Field(gt=0.0, description="a of the sign e-processes' Beta(a, a) prior")]
FamilyKind = Annotated[
    Literal["compared", "registered", "all-pairs"],
    Field(
        description="comparisons that share alpha: compared (those with judgments), registered "
        "(the pairs given) or all-pairs (every pair of the systems)"
    ),
]
Pairs = Annotated[
    tuple[tuple[str, str], ...],
    BeforeValidator(_as_pairs),
    Field(
        max_length=MAX_PAIRS,
        validate_default=True,
        description="the registered family, SYSTEM_A:SYSTEM_B pairs (implies family registered)",
    ),
]
UNITS: tuple[str, ...] = get_args(get_args(Unit)[0])
FAMILIES: tuple[str, ...] = get_args(get_args(FamilyKind)[0])


@dataclass(frozen=True)
class DecisionRule:
    """How decisions are made (every default of the decisions is this type's).

    Built from its fields' types, which carry their valid ranges (a bad value is a
    :class:`pydantic.ValidationError`, a ``ValueError``, naming the field).

    Attributes:
        alpha: the decision level: campaign-wide error bound (family-wise with
            ``bonferroni`` and ``e-holm``).
        margin: region of practical equivalence, |Δ| < margin (Δ in [-1, 1]).
        unit: ``prompt`` (first judgment of each cell) or ``judgment`` (all).
        correction: the multiplicity rule across the family, a :class:`Correction` (or
            its name).
        mixture: a of the Beta(a, a) mixing prior of the sign e-processes.
            Larger a suits small effects (|q - 1/2| around 1 / sqrt(8a)).
        family: which comparisons share ``alpha``, one of :data:`FAMILIES`.
        pairs: the registered (system_a, system_b) pairs (``family="registered"``).
    """

    alpha: Level = DEFAULT_LEVEL
    margin: Margin = DEFAULT_MARGIN
    unit: Unit = DEFAULT_UNIT
    correction: Multiplicity = DEFAULT_CORRECTION
    mixture: Mixture = DEFAULT_MIXTURE
    family: FamilyKind = DEFAULT_FAMILY
    pairs: Pairs = ()

    @field_validator("pairs")
    @classmethod
    def _registered(
        cls, pairs: tuple[tuple[str, str], ...], info: ValidationInfo
    ) -> tuple[tuple[str, str], ...]:
        if (info.data.get("family") == "registered") != bool(pairs):
            raise ValueError("pairs go with family='registered', and it needs at least one")
        if any(a == b for a, b in pairs):
            raise ValueError("a registered pair compares two different systems")
        return pairs

    def alpha_each(self, num_tests: int) -> float:
        """The error bound of one comparison (e-Holm closes at least what this closes)."""
        return self.correction.alpha_each(self.alpha, num_tests)

    def describe(self, num_tests: int) -> str:
        """The rule in one line, for outputs."""
        each = self.alpha_each(num_tests)
        return (
            f"anytime-valid; sign: beta({self.mixture:g}) mixture e-processes at {each / 2:.3g} "
            f"each side; equivalence |delta| < {self.margin:g}: empirical-Bernstein confidence "
            f"sequence at {each / 2:.3g} each side; {self.correction.describe(self.alpha, num_tests)}; "
            f"unit: {self.unit}"
        )


class Family(NamedTuple):
    """The comparisons that share the error bound, each as (dimension, system_a, system_b)."""

    kind: str
    comparisons: tuple[tuple[str, str, str], ...]

    @property
    def size(self) -> int:
        return len(self.comparisons)

    def describe(self) -> str:
        """The family in words, e.g. ``15 comparisons (the comparisons with judgments)``."""
        return f"{self.size} comparisons ({FAMILY_WORDS[self.kind]})"


def comparison_family(
    rule: DecisionRule,
    compared: Iterable[tuple[str, str, str]],
    *,
    systems: Sequence[str] = (),
    dimensions: Sequence[str] = (),
) -> Family:
    """The family ``rule`` declares, from the comparisons present in the judgments.

    Args:
        rule: the decision rule (its ``family`` and ``pairs``).
        compared: the (dimension, system_a, system_b) comparisons with judgments, oriented
            as the data have them.
        systems, dimensions: the campaign's systems and dimensions beyond those compared.

    Returns:
        The :class:`Family`: dimensions in order, a pair oriented as first judged (else
        as registered, else in the order of ``systems``).

    Example:
        >>> rule = DecisionRule(family="registered", pairs=(("x", "z"),))
        >>> comparison_family(rule, [("d", "x", "y"), ("d", "z", "x")]).comparisons
        (('d', 'z', 'x'),)
    """
    compared = list(dict.fromkeys(compared))
    dims = list(dict.fromkeys([*dimensions, *(d for d, _, _ in compared)]))
    oriented = {(d, frozenset((a, b))): (d, a, b) for d, a, b in reversed(compared)}
    if rule.family == "compared":
        return Family("compared", tuple(compared))
    if rule.family == "registered":
        wanted = list(dict.fromkeys(rule.pairs))
    else:
        names = list(dict.fromkeys([*systems, *(s for _, a, b in compared for s in (a, b))]))
        wanted = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    out, seen = [], set()
    for d in dims:
        for a, b in wanted:
            key = (d, frozenset((a, b)))
            if key not in seen:
                seen.add(key)
                out.append(oriented.get(key, (d, a, b)))
    return Family(rule.family, tuple(out))


# ----------------------------------------------------------------- e-Holm


#: the sets of a comparison's nulls ("B not better", "A not better", "Δ <= -margin",
#: "Δ >= margin") that can hold together when margin > 0
CONSISTENT = ((), (0,), (1,), (2,), (3,), (0, 1), (0, 2), (1, 3))
#: with margin 0 no equivalence can be decided: only the sign nulls are tested
CONSISTENT_SIGNS = ((), (0,), (1,), (0, 1))


def e_holm_rejections(
    log_e: np.ndarray, num_tests: int, alpha: float, *, margin: float = DEFAULT_MARGIN
) -> np.ndarray:
    """Closed testing with e-values over a family's comparisons: which nulls it rejects.

    Each comparison carries four one-sided nulls with anytime-valid e-values (columns:
    "B not better", "A not better", "Δ <= -margin", "Δ >= margin"), of which only
    :data:`CONSISTENT` sets can hold together. A set I of nulls that can all hold is
    tested by the mean of its e-values (an e-value then: Vovk & Wang 2021), at level
    ``alpha``; a null is rejected when every such set containing it is, i.e. when
    sum over I of (e_i - 1 / alpha) >= 0 for all of them. The sum splits by comparison,
    so the worst set is found comparison by comparison. The ``num_tests - C`` comparisons
    of the family not in ``log_e`` count with e-values 1. Rejects every null whose
    e-value reaches ``2 num_tests / alpha`` (at most two nulls of a comparison hold at
    once, so Bonferroni's threshold), and more when other comparisons' remaining nulls
    have some evidence against them.

    Why valid at every look: the mean over the true nulls of e-processes on a common
    filtration is a test supermartingale, and any false rejection at any look means it
    reached ``1 / alpha`` then (Ville's inequality).

    Args:
        log_e: (C, 4) current log e-values (not running maxima).
        num_tests: the family's size (>= C).
        alpha: the family-wise level.
        margin: the equivalence margin (with 0, only the two sign nulls are tested).

    Returns:
        (C, 4) bool.

    Example:
        >>> log_e = np.log([[60.0, 0.1, 30.0, 0.2], [1e6, 0.01, 50.0, 30.0]])
        >>> e_holm_rejections(log_e, 2, 0.05)[:, 0].tolist()  # Bonferroni needs 80
        [True, True]
    """
    log_e = np.asarray(log_e, np.float64)
    C = log_e.shape[0]
    if C == 0:
        return np.zeros((0, 4), bool)
    level = 1.0 / alpha
    excess = np.exp(np.minimum(log_e, LOG_E_CAP)) - level
    options = CONSISTENT if margin > 0 else CONSISTENT_SIGNS
    member = np.array([[i in o for i in range(4)] for o in options], np.float64)  # (O, 4)
    sums = excess @ member.T  # (C, O): each comparison's sum over each set
    worst = sums.min(axis=1)  # includes the empty set: <= 0
    rest = worst.sum() + 2.0 * max(int(num_tests) - C, 0) * (1.0 - level) - worst
    out = np.zeros((C, 4), bool)
    for h in range(4 if margin > 0 else 2):
        with_h = member[:, h] > 0
        out[:, h] = rest + sums[:, with_h].min(axis=1) >= 0.0
    return out
