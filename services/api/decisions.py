"""``GET /projects/{project_id}/decisions``: every comparison's anytime-valid decision.

Model-free: each comparison's decision uses its own judgments only, in arrival order
(:mod:`adaptive.decisions`). Comparisons are all pairs of the project's systems in each
dimension with judgments, the same family the next-batch recommender splits alpha over.
The decisions are a running state per project and dimension (:mod:`services.api.tally`),
advanced by the judgments stored since the last read, so a read costs the new judgments
and the comparisons, not the campaign.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from adaptive.decisions import DecisionRule, decide, decision_rows
from services.api.deps import ProjectId, State
from services.api.errors import error_responses
from services.api.tally import concat, take

router = APIRouter()


class DecisionRow(BaseModel):
    dimension: str
    system_a: str
    system_b: str
    decision: str = Field(description="'B better', 'A better', 'equivalent' or 'undecided'")
    net_preference: float | None = Field(
        description="mean over prompts of the mean signed judgment (+1 B, -1 A, 0 tie), in [-1, 1]"
    )
    cs_low: float
    cs_high: float
    n_judgments: int
    n_used: int = Field(description="observations the decision used (one per prompt by default)")
    n_prompts: int
    closed_at: int | None = Field(description="judgments of the comparison when it closed")
    needed: int | None = Field(description="judgments likely still needed (null: not in sight)")
    e_b_better: float
    e_a_better: float
    alpha_each: float


class DecisionsPublic(BaseModel):
    rule: str = Field(description="the decision rule and the error control, in words")
    num_judgments: int
    rows: list[DecisionRow]


def campaign_comparisons(
    systems: list[str], rows_by_dim: Mapping[str, Sequence[Mapping[str, Any]]]
) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray, np.ndarray]:
    """All pairs of systems per dimension, oriented as first judged, and the judgments on them.

    Returns (names, comparison, prompt, signed) with judgments in arrival order.
    """
    names: list[tuple[str, str, str]] = []
    comp, prompt, signed = [], [], []
    prompt_index: dict[str, int] = {}
    for dim, rows in rows_by_dim.items():
        oriented: dict[frozenset[str], tuple[str, str]] = {}
        for r in rows:
            oriented.setdefault(
                frozenset((r["system_a"], r["system_b"])), (r["system_a"], r["system_b"])
            )
        known = list(dict.fromkeys(systems + [s for pair in oriented.values() for s in pair]))
        index: dict[tuple[str, str], tuple[int, float]] = {}
        for i, a in enumerate(known):
            for b in known[i + 1 :]:
                pa, pb = oriented.get(frozenset((a, b)), (a, b))
                c = len(names)
                names.append((dim, pa, pb))
                index[(pa, pb)] = (c, 1.0)
                index[(pb, pa)] = (c, -1.0)
        for r in rows:
            c, sign = index[(r["system_a"], r["system_b"])]
            comp.append(c)
            prompt.append(prompt_index.setdefault(r["item_id"], len(prompt_index)))
            signed.append(sign * {"a": -1.0, "b": 1.0}.get(r["winner"], 0.0))
    return names, np.asarray(comp, np.int64), np.asarray(prompt, np.int64), np.asarray(signed)


@router.get(
    "/projects/{project_id}/decisions",
    operation_id="decisions",
    tags=["analysis"],
    summary="Every comparison's decision: B better, A better, equivalent or undecided",
    responses=error_responses(401, 403, 404, 422),
)
def decisions(
    project_id: ProjectId,
    state: State,
    alpha: Annotated[
        float, Query(ge=1e-12, lt=1.0, description="campaign-wide error bound")
    ] = 0.05,
    margin: Annotated[
        float, Query(ge=0.0, lt=1.0, description="equivalence: |net preference| < margin")
    ] = 0.1,
    unit: Annotated[str, Query(pattern="^(prompt|judgment)$")] = "prompt",
) -> DecisionsPublic:
    """Each comparison's decision from its own judgments, valid at every look: the error
    bound holds however often anyone asks. Alpha is split evenly across all pairs of
    systems in every dimension with judgments (Bonferroni)."""
    rule = DecisionRule(alpha=alpha, margin=margin, unit=unit)
    tally = state.tallies.project(project_id)
    with tally.lock:
        state.tallies.advance(state.store, project_id)
        systems = sorted(tally.systems)
        dims = [d for d, t in sorted(tally.dimensions.items()) if t.num_judgments]
        pairs = [frozenset((a, b)) for i, a in enumerate(systems) for b in systems[i + 1 :]]
        names: list[tuple[str, str, str]] = []
        parts = []
        for d in dims:
            dim = tally.dimensions[d]
            ids = np.array([dim.pairs[p] for p in pairs], np.int64)
            names += [(d, *dim.orient[c]) for c in ids.tolist()]
            parts.append(take(dim.decisions(rule, len(pairs) * len(dims)), ids))
        num_judgments = sum(tally.dimensions[d].num_judgments for d in dims)
    if not parts:  # no judgment yet: no comparison
        parts = [decide(np.zeros(0), np.zeros(0), np.zeros(0), 0, rule)]
    result = concat(parts)
    rows = decision_rows(result, names)
    return DecisionsPublic(
        rule=result.rule,
        num_judgments=num_judgments,
        rows=[DecisionRow(**{k: v for k, v in r.items() if k != "rule"}) for r in rows],
    )
