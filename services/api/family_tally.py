"""A declared family's decisions on a project's running tally, as every HTTP door reads them.

``GET .../decisions``, ``GET .../answer`` (:mod:`services.api.question_tally`), the next
batch and the dashboard decide a family here: the family a
:class:`adaptive.stopping.rule.DecisionRule` declares over the judged dimensions (as
:func:`evalset.decide.family_judgments` finds it in a file of the same judgments), its
running decisions (:mod:`services.runtime.tally`) and their rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, NoReturn

from adaptive.stopping.decision_rows import decision_rows
from adaptive.stopping.decisions import Decisions
from adaptive.stopping.rule import DecisionRule, Family
from services.api.errors import ApiError
from services.runtime.tally import ProjectTally


def _bad_rule(field: str, message: str) -> NoReturn:
    raise ApiError(422, "validation_error", message, [{"field": field, "message": message}])


class FamilyReport(NamedTuple):
    """The decisions of a project's declared family, as every HTTP door reads them."""

    rows: list[
        dict[str, Any]
    ]  # adaptive.stopping.decision_rows.decision_rows, with the family's columns
    family: Family
    decisions: Decisions
    num_judgments: int


def check_pairs(rule: DecisionRule, tally: ProjectTally) -> None:
    """A 422 when a registered pair names a system the project has not registered."""
    check_pair_systems(rule, tally.systems)


def check_pair_systems(rule: DecisionRule, systems: Iterable[str]) -> None:
    """A 422 when a registered pair names a system not among ``systems`` (the project's)."""
    unknown = sorted({s for pair in rule.pairs for s in pair} - set(systems))
    if unknown:
        _bad_rule("pairs", f"pairs name systems the project does not have: {unknown}")


def decide_family(
    tally: ProjectTally, rule: DecisionRule, family: Family | None = None
) -> FamilyReport:
    """The family ``rule`` declares (or ``family``, one of its dimensions' part) and its
    decisions (call with the tally advanced, under its ``lock``)."""
    check_pairs(rule, tally)
    family = family or tally.family(rule)
    result = tally.decide(rule, family)
    rows = decision_rows(
        result,
        list(family.comparisons),
        available_prompts=tally.available_prompts(family),
        unit=rule.unit,
        family=family,
    )
    return FamilyReport(rows, family, result, tally.num_judgments)


def read_family(state: Any, project_id: str, rule: DecisionRule) -> FamilyReport:
    """:func:`decide_family` on the project's tally, advanced to every stored judgment."""
    tally = state.tallies.project(project_id)
    with tally.lock:
        state.tallies.advance(state.store, project_id)
        return decide_family(tally, rule)
