"""The next batch's cells sent to humans by the hybrid's routing, when a project has a judge.

``POST /next-batch`` calls :func:`route_cells` on the batch the recommender chose (one hook):
for each cell of a comparison the project's judge gave verdicts on, the prompt is drawn
again by :func:`adaptive.judge.hybrid_decisions.draw_routed`: a verdict with probability
share[k] * rate[k] (rates proportional to the square root of the humans' residual second
moment given the verdict, 30% of them at random; uniform for a comparison's first 20 human
judgments), then a cell of that verdict the annotator may be served. The rates go into the
lease with the cell (``routing_rates`` per verdict code in the cell's orientation, and the
``judge``), and ``GET /hybrid-decisions`` divides each routed judgment's residual by its rate,
so the estimate stays unbiased. The recommender still decides which comparisons get cells and
how many; the routing only decides which of a comparison's cells.

A project with no verdicts, or with several judges, is served the recommender's batch as is.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from adaptive.stopping.rule import Correction, DecisionRule
from services.store import repository as repo
from services.store.repository.verdicts import cells_judged_by

if TYPE_CHECKING:
    from evalset.cells import NamedCell
    from services.runtime.state import ServiceState
    from services.store.repository.rows import LeasedCellRow

#: a rate vector per verdict code, A and B swapped (the other orientation of a pair)
SWAP = [2, 1, 0, 3]


def _key(dim: str, item: str, a: str, b: str) -> tuple[str, str, frozenset[str]]:
    return dim, item, frozenset((a, b))


def route_cells(
    state: ServiceState,
    project_id: str,
    annotator_id: str,
    seed: int,
    rule: DecisionRule,
    batch: list[NamedCell],
    leased: list[LeasedCellRow],
    judge: str,
) -> list[NamedCell]:
    """``batch`` with the cells of the comparisons ``judge`` judged drawn by its routing."""
    from adaptive.judge.hybrid_decisions import draw_routed
    from evalset.cells import annotatable_cells
    from services.api.routes.hybrid import stored_report

    if not batch:
        return batch
    if rule.correction.closes_by_e_holm:  # the rates do not depend on the correction
        rule = dataclasses.replace(rule, correction=Correction.BONFERRONI)
    got = stored_report(state, project_id, rule, judge)
    if got is None:
        return batch
    report, judge = got
    where = {(d, frozenset((a, b))): (c, (a, b)) for c, (d, a, b) in enumerate(report.family.comparisons)}  # fmt: skip
    design: dict[int, tuple[list[str], np.ndarray]] = {}
    for (c,), part in report.cells.group_by(["comparison"]):
        design[int(c)] = (part["item_id"].to_list(), part["verdict"].to_numpy())
    with state.store.read() as conn:
        judged = cells_judged_by(conn=conn, project_id=project_id, annotator_id=annotator_id)
        prompts = repo.list_prompts(conn=conn, project_id=project_id)
        num = repo.count_judgments(conn=conn, project_id=project_id)
    responses = {
        (p["prompt_id"], system): text
        for p in prompts
        for system, text in (p.get("responses") or {}).items()
    }
    taken = {_key(x["dimension"], x["item_id"], x["system_a"], x["system_b"]) for x in leased}
    taken |= {_key(x["dimension"], x["item_id"], x["system_a"], x["system_b"]) for x in batch}
    rng = np.random.default_rng([seed, num, len(leased)])
    out: list[NamedCell] = []
    for cell in batch:
        dim, a, b = cell["dimension"], cell["system_a"], cell["system_b"]
        hit = where.get((dim, frozenset((a, b))))
        if hit is None or hit[0] not in design:
            out.append(cell)
            continue
        c, oriented = hit
        items, codes = design[c]
        own = _key(dim, cell["item_id"], a, b)
        taken.discard(own)
        ok = annotatable_cells([(dim, a, b)], items, responses)[0]
        eligible = np.array(
            [
                ok[i] and _key(dim, item, a, b) not in taken and _key(dim, item, a, b) not in judged
                for i, item in enumerate(items)
            ],
            bool,
        )
        i = draw_routed(rng, report.decisions.next_rates[c], codes, eligible)
        if i < 0:
            taken.add(own)
            out.append(cell)
            continue
        rates = report.decisions.next_rates[c]
        rates = rates if oriented == (a, b) else rates[SWAP]
        routed: dict[str, Any] = {
            **cell,
            "item_id": items[i],
            "reason": "routed",
            "routing_rates": [float(x) for x in rates],
            "judge": judge,
        }
        taken.add(_key(dim, items[i], a, b))
        out.append(cast("NamedCell", routed))
    return out
