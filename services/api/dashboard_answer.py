"""The dashboard's answer card: the campaign's question, answered as it stands.

``?question=`` on the dashboard's address names the question (``top-k:3``, ``versus:REF``,
...: docs/decisions.md, "Questions"); without it the card answers ``ranking``, the question
every campaign can ask (the systems in order, in the groups its decisions cannot yet
separate). The card reads :func:`services.api.question_tally.read_question`, the answer of
``GET .../answer`` with the page's rule: the statement, the groups (or the top set), the
named pairs' verdicts and the comparisons still pending, with the judgments they likely
still need. A question the campaign cannot ask is said in the card; the page still shows.
"""

from __future__ import annotations

from typing import Any

from services.api.dashboard_charts import _e
from services.api.dashboard_page import DECISION_HEAD, _links, decision_row
from services.api.errors import ApiError
from services.api.question_tally import read_question

#: the question the card answers when the address names none
DEFAULT_QUESTION = "ranking"
#: the rows of pending comparisons the card lists (closest to a decision first)
MAX_PENDING = 25


def collect_answer(
    state: Any, project_id: str, rule: Any, question: str | None, dimension: str
) -> dict[str, Any]:
    """The card's data: the question, the page dimension's answer row and its pending
    decision rows, the family in words; or ``error`` for a question the campaign cannot ask."""
    asked_for = question or DEFAULT_QUESTION
    try:
        asked = read_question(state, project_id, rule, asked_for)
    except ApiError as exc:
        if exc.status != 422:
            raise
        return {"question": asked_for, "error": exc.message}
    report = asked.report
    rows = [r for r in report.answers if r["dimension"] == dimension]
    pending = [
        r
        for r in report.decisions.rows
        if r["dimension"] == dimension and r["question_role"] == "pending"
    ]
    pending.sort(key=lambda r: (r["needed"] is None, r["needed"] or 0))
    return {
        "question": str(report.question),
        "row": rows[0] if rows else None,
        "pending": pending,
        "family": asked.family.describe(),
    }


def _choices(num_systems: int) -> list[str]:
    """The questions the card links to (top-k where the systems allow it)."""
    tops = [f"top-k:{k}" for k in (1, 3) if k < num_systems]
    return ["ranking", "all-pairs", *tops]


def _body(row: dict[str, Any]) -> str:
    """The answer's parts: groups (or the top set) and the named pairs' verdicts."""
    out = []
    if row["question"].startswith("top-k"):
        among = ", ".join(row["among"]) or "no separated set yet"
        out.append(
            f'<p id="answer-top" data-top="{_e(",".join(row["top"]))}" '
            f'data-among="{_e(",".join(row["among"]))}">separated at the top: <b>'
            f"{_e(', '.join(row['top']) or 'none yet')}</b>; the top are among: {_e(among)}</p>"
        )
    if row["verdicts"]:
        cells = "".join(
            f'<tr><td class="t">{_e(v["system"])}</td><td class="t">{_e(v["outcome"])}</td>'
            f'<td class="t">{_e(v["other"])}</td></tr>'
            for v in row["verdicts"]
        )
        out.append(f'<table id="answer-verdicts"><tbody>{cells}</tbody></table>')
    elif row["question"] != "all-pairs":
        items = "".join(
            f'<li data-group="{_e(",".join(g))}">'
            + (_e(g[0]) if len(g) == 1 else "{" + _e(", ".join(g)) + "}")
            + "</li>"
            for g in row["groups"]
        )
        out.append(f'<ol id="answer-groups">{items}</ol>')
    return "".join(out)


def _pending(pending: list[dict[str, Any]], row: dict[str, Any]) -> str:
    """The comparisons that can still change the answer: what to annotate next."""
    if not pending:
        return '<p class="note" id="answer-pending" data-pending="0">Nothing pending.</p>'
    need = (
        "the judgments they still need are out of sight (one has no closure in sight yet)"
        if row["needed"] is None
        else f"~{row['needed']} judgments likely still needed"
    )
    shown = pending[:MAX_PENDING]
    more = f" (the first {len(shown)})" if len(pending) > len(shown) else ""
    return (
        f'<p class="meta" id="answer-pending" data-pending="{len(pending)}">{len(pending)} '
        f"comparisons pending{more}; {need}; "
        "<code>POST .../next-batch</code> with this question serves only them:</p>"
        f'<table class="pending">{DECISION_HEAD}<tbody>'
        + "".join(decision_row(d) for d in shown)
        + "</tbody></table>"
    )


def answer_section(
    answer: dict[str, Any], *, path: str, params: dict[str, Any], num_systems: int
) -> str:
    """The answer card's HTML for :func:`collect_answer`'s data."""
    links = _links(path, params, "question", _choices(num_systems), str)
    head = (
        f'<section id="answer" data-question="{_e(answer["question"])}"><h2>Question: '
        f"{_e(answer['question'])}</h2>"
        f'<div class="nav meta">ask: {links} (or <code>?question=</code> in the address: '
        "top-k:K, ranking, versus:REF, equivalence:A,B)</div>"
    )
    if "error" in answer:
        return f'{head}<p class="bad" id="answer-error">{_e(answer["error"])}</p></section>'
    row = answer["row"]
    if row is None:
        return f'{head}<p class="note">No judgments of this dimension yet.</p></section>'
    state = "answered" if row["answered"] else "settled" if row["settled"] else "open"
    return (
        f'{head}<p id="answer-statement" data-answered="{str(row["answered"]).lower()}" '
        f'data-state="{state}"><b>{_e(row["answer"])}</b></p>'
        + _body(row)
        + _pending(answer["pending"], row)
        + f'<p class="note">{row["family_size"]} comparisons share alpha: '
        f"{_e(answer['family'])}. <code>GET .../answer?question={_e(answer['question'])}</code>"
        " and <code>evalset answer</code> give these rows.</p></section>"
    )
