"""A campaign's question over HTTP, answered from the project's running tally.

``GET .../answer``, ``GET .../decisions?question=``, ``POST .../next-batch`` with a
``question`` and the dashboard's answer card all read it here: the question's family
(:meth:`adaptive.stopping.questions.Question.rule_for`: every pair of the registered systems
for ``top-k`` and ``ranking``, the named pairs for ``versus`` and ``equivalence``) is decided
on the running tally as ``GET .../decisions`` decides any family
(:func:`services.api.family_tally.decide_family`), and the answer is read off those
decisions by :func:`evalset.questions.answer_decisions`, the use case ``evalset answer``
reads a file's decisions with. A bad question is a 422 in the command line's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import AfterValidator, Field

from adaptive.stopping.questions import Question
from services.api.errors import ApiError
from services.api.family_tally import decide_family

if TYPE_CHECKING:
    from adaptive.stopping.rule import DecisionRule, Family
    from evalset.questions import QuestionReport
    from services.runtime.tally import ProjectTally


class AskedQuestion(NamedTuple):
    """A question's answer on a project's tally, with what it was read from."""

    report: QuestionReport  # answers (one row per dimension) and the decision rows
    family: Family
    num_judgments: int


def _bad_question(message: str) -> ApiError:
    """A 422 saying what is wrong with the question (the command line's words)."""
    text = message if message.startswith("question ") else f"question: {message}"
    return ApiError(422, "validation_error", text, [{"field": "question", "message": message}])


#: the longest question a request may name
MAX_QUESTION = 2000


def given_question(text: str | None) -> str | None:
    """The question a request names (the one validator of the body's ``question`` and the
    ``question`` query parameter): an empty one names none, as if left out (``evalset
    decisions --question ''`` asks none; ``GET .../answer`` then answers its default)."""
    return text or None


#: a request's question: ``""`` is no question, the same as leaving it out, at every door
GivenQuestion = Annotated[
    Annotated[str, Field(max_length=MAX_QUESTION)] | None, AfterValidator(given_question)
]


def parse_question(text: str | None) -> Question:
    """The question of a request (``top-k:3``, ``ranking``, ...), or a 422 naming the problem."""
    try:
        return Question.parse(text)
    except ValueError as exc:
        raise _bad_question(str(exc)) from exc


def ask_tally(
    tally: ProjectTally,
    rule: DecisionRule,
    question: Question | str | None,
    dimension: str | None = None,
    *,
    within: Sequence[str] | None = None,
) -> AskedQuestion:
    """The question's answer on ``tally`` (advanced, its lock held); ``dimension``: that
    dimension's part only, its own family (as ``evalset answer --dimension`` filters the file);
    ``within``: one family over exactly those of the dimensions with judgments (as ``evalset
    recommend --dimension D ...`` reads the file's judgments of those dimensions; every one of
    them: the family of ``GET .../decisions``)."""
    from evalset.family import DecisionReport
    from evalset.questions import answer_decisions

    question = parse_question(question) if not isinstance(question, Question) else question
    systems = sorted(tally.systems)
    try:
        asked_rule = question.rule_for(rule, systems)
        question.check(systems)
    except ValueError as exc:
        raise _bad_question(str(exc)) from exc
    family = None
    if dimension is not None:
        judged = tally.judged_dimensions()
        if dimension not in judged:
            raise ApiError(
                404,
                "not_found",
                f"no judgments of dimension {dimension!r}; the project has judgments of {judged}",
            )
        family = _family_over(tally, asked_rule, [dimension])
    elif within is not None:
        family = _family_over(
            tally, asked_rule, [d for d in tally.judged_dimensions() if d in within]
        )
    found = decide_family(tally, asked_rule, family)
    decided = DecisionReport(found.rows, asked_rule, found.family, found.decisions, [])
    report = answer_decisions(decided, question, systems)
    return AskedQuestion(report, found.family, found.num_judgments)


def _family_over(tally: ProjectTally, rule: DecisionRule, dims: list[str]) -> Family:
    """The family ``rule`` declares over ``dims`` alone (:meth:`ProjectTally.family` over
    every dimension with judgments)."""
    from adaptive.stopping.rule import comparison_family

    compared = [(d, a, b) for d in dims for a, b in tally.dimensions[d].compared()]
    return comparison_family(rule, compared, systems=sorted(tally.systems), dimensions=dims)


def read_question(
    state: Any,
    project_id: str,
    rule: DecisionRule,
    question: Question | str | None,
    dimension: str | None = None,
) -> AskedQuestion:
    """:func:`ask_tally` on the project's tally, advanced to every stored judgment."""
    tally = state.tallies.project(project_id)
    with tally.lock:
        state.tallies.advance(state.store, project_id)
        return ask_tally(tally, rule, question, dimension)
