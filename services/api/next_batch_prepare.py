"""The next batch's named snapshot, prepared from what the service keeps running.

The live batch (``model: "snapshot"``) reads the newest posterior snapshot of each
dimension (it never fits; before a dimension's first one, a stand-in from the running
decisions: :mod:`services.api.next_batch_decisions`) and the project's running tally
(:mod:`services.runtime.tally`), and builds the recommender's integer-indexed state with
names; the prepared states are kept on the service state (bounded). ``model: "default"`` prepares the command line's
state (:mod:`services.api.next_batch_default`). Both end in a
:class:`evalset.plan.NamedSnapshot` that :func:`evalset.plan.plan_batch` plans on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from adaptive.recommend import CellState, RecommenderState
from adaptive.stopping.decisions import DecisionRule, Decisions
from adaptive.stopping.rule import Family
from evalset.plan import NamedSnapshot
from services.api.family_tally import check_pairs
from services.api.next_batch_decisions import (
    DECISIONS,
    DEFAULT,
    SNAPSHOT,
    Basis,
    decisions_fit,
    nothing_to_serve,
    waiting_note,
)
from services.api.next_batch_default import default_model_state
from services.api.question_tally import AskedQuestion, ask_tally
from services.runtime.tally import ProjectTally, concat, flip, take

if TYPE_CHECKING:
    from evalset.plan import RecommendRequest
    from evalset.recommend_adapter import CellNames
    from services.runtime.state import ServiceState

#: reads a request's question on the project's advanced tally, its lock held (None: no question)
Asker = Callable[[ProjectTally], AskedQuestion] | None

# evalset.recommend_adapter (and with it JAX, a second to import) loads at the first
# request, not when the service starts: /health answers sooner after a restart


class Prepared(NamedTuple):
    """A batch's starting point: the named snapshot, the cells' state, the cells the
    annotator judged (None: no annotator), each dimension's snapshot version (0: none yet)
    and what the batch is chosen on (``snapshot``, ``decisions`` or ``default``, with a
    note of what the service is doing while a first fit runs); with a question, its answer
    read at the same look of the tally as the batch's decisions."""

    snapshot: NamedSnapshot
    cells: CellState
    exclude: np.ndarray | None
    versions: dict[str, int]
    basis: Basis = SNAPSHOT
    basis_note: str | None = None
    asked: AskedQuestion | None = None


def prepare_batch(
    state: ServiceState,
    project_id: str,
    request: RecommendRequest,
    *,
    model: str,
    route_by: str | None,
) -> Prepared:
    """The named snapshot of ``request.dimensions`` the batch is planned on: the newest
    posteriors (``model="snapshot"``) or the command line's fit (``"default"``).

    With ``request.question``, its answer in one family over exactly the dimensions asked
    (:func:`services.api.question_tally.ask_tally`), read under the same hold of the tally's
    lock, at the same look, as the batch's decisions: the live batch decides the question's
    family (every pair it may need)."""
    dims = list(request.dimensions)
    annotator = request.annotator or ""
    if model == "default":
        snapshot, maps = default_model_state(
            state,
            project_id,
            dims,
            seed=request.seed,
            annotator=annotator,
            rule=request.rule,
            route_by=route_by,
            ask=_asker(request),
        )
    else:
        snapshot, maps = _prepare(
            state, project_id, dims, request.seed, annotator, request.rule, _asker(request)
        )
    family = maps["family"]
    named = NamedSnapshot(
        snapshot, maps["names"], maps["in_family"], family.describe() if family else ""
    )
    return Prepared(
        named,
        maps["cells"],
        maps["exclude"],
        maps["versions"],
        maps.get("basis", DEFAULT),
        maps.get("basis_note"),
        maps.get("asked"),
    )


def _asker(request: RecommendRequest) -> Asker:
    """What reads ``request.question`` on the advanced tally (its lock held), over the
    dimensions asked; None without a question."""
    if not request.question:
        return None
    question, rule, dims = request.question, request.rule, request.dimensions
    return lambda tally: ask_tally(tally, rule, question, within=dims)


def _prepare(
    state: ServiceState,
    project_id: str,
    dims: list[str],
    seed: int,
    annotator: str,
    rule: DecisionRule,
    ask: Asker = None,
) -> tuple[RecommenderState, dict[str, Any]]:
    """The recommender snapshot of the project's newest posteriors, with names.

    The judgments come from the project's running tally (:mod:`services.runtime.tally`):
    a request reads those stored since the last one, not the campaign's. The decisions
    are those of the family ``rule`` declares (``GET .../decisions``'s rows); only its
    comparisons are served. A dimension with judgments but no snapshot yet (a fresh
    service's first fit still running) is served on the decisions alone
    (:mod:`services.api.next_batch_decisions`): ``basis`` says which. ``ask``: the question
    read at the same look, its family's decisions the batch's.
    """
    found = {d: state.snapshot(project_id, d) for d in dims}
    tally = state.tallies.project(project_id)
    with tally.lock:
        state.tallies.advance(state.store, project_id)  # the one look of the request
        asked = ask(tally) if ask else None
        snaps, waiting = _fits(tally, found)
        if not snaps:
            raise nothing_to_serve(state, dims)
        if asked:
            made = asked.report.decisions
            rule, family, decisions = made.rule, made.family, made.decisions
        else:
            check_pairs(rule, tally)
            family = tally.family(rule)
            decisions = tally.decide(rule, family)
        key = (
            state.store.url,  # one process may serve several stores (tests do)
            project_id,
            # a stand-in's strengths change with every judgment, a snapshot's never
            tuple((d, s.version, s.num_judgments) for d, s in sorted(snaps.items())),
            tally.catalogue_version,
            tuple(tally.dimensions[d].num_judgments for d in sorted(snaps)),
            seed,
            rule,
            family.comparisons,
        )
        hit = state.batch_states.get(key)
        if hit is None:
            # what does not depend on the judgments: the posteriors' state, names, responses
            base_key = (state.store.url, project_id, tally.catalogue_version, key[2], seed)
            base = state.batch_bases.setdefault(
                base_key, lambda: _base(state, project_id, tally, snaps, seed)
            )
            hit = state.batch_states.setdefault(
                key, lambda: _build(tally, snaps, base, family, decisions)
            )
        snapshot, maps = hit
        exclude = _judged_by(tally, maps["names"], annotator) if annotator else None
        note = waiting_note(state, tally, waiting) if waiting else None
    basis = {"basis": DECISIONS if waiting else SNAPSHOT, "basis_note": note}
    return snapshot, {**maps, "exclude": exclude, "asked": asked, **basis}


def _fits(tally: ProjectTally, found: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Each dimension's newest snapshot, or its stand-in from the running decisions when it
    has judgments but no snapshot yet (:mod:`services.api.next_batch_decisions`; their
    dimensions: the second value); a dimension with neither is left out (nothing to serve)."""
    waiting = [
        d
        for d, s in found.items()
        if s is None and d in tally.dimensions and tally.dimensions[d].num_judgments
    ]
    snaps = {d: s for d, s in found.items() if s is not None}
    return snaps | {d: decisions_fit(tally, d) for d in waiting}, waiting


def _family_decisions(
    names: CellNames, family: Family, decisions: Decisions
) -> tuple[Decisions, np.ndarray]:
    """The family's decisions on the snapshot's comparisons, and (C,) which are in it.

    A comparison the snapshot orients the other way round reads its decision flipped;
    one outside the family gets an empty (undecided) decision and is never served.
    """
    from adaptive.stopping.decisions import decide

    where = {(d, frozenset((a, b))): (f, (a, b)) for f, (d, a, b) in enumerate(family.comparisons)}
    index = np.full(len(names.comparisons), family.size, np.int64)
    flipped = np.zeros(family.size + 1, bool)
    for g, (d, a, b) in enumerate(names.comparisons):
        hit = where.get((d, frozenset((a, b))))
        if hit is not None:
            index[g] = hit[0]
            flipped[hit[0]] = hit[1] != (a, b)
    empty = decide(np.zeros(0), np.zeros(0), np.zeros(0), 1, DecisionRule())
    return take(flip(concat([decisions, empty]), flipped), index), index < family.size


def _base(
    state: ServiceState,
    project_id: str,
    tally: ProjectTally,
    snaps: dict[str, Any],
    seed: int,
) -> tuple[RecommenderState, CellNames, CellState]:
    """The recommender snapshot of the posteriors, its names and the cells' responses."""
    from evalset.recommend_adapter import NamedFit, cell_state, prepare

    prompt_rows = state.tallies.prompts(state.store, project_id)
    # every pair of known systems is a comparison of the snapshot (the leaderboard's
    # adjacent pairs and tiers are found among them); pairs a snapshot compared keep its
    # orientation, the per-system skill gives the others (systems it never saw get prior
    # draws). Only the family's comparisons can be served.
    snapshot, names = prepare(
        [NamedFit(d, s.systems, s.pair_a, s.pair_b, None, s.skill) for d, s in snaps.items()],
        {},
        systems=[*tally.systems, *(x for s in snaps.values() for x in s.systems)],
        prompts=[
            *(r["prompt_id"] for r in prompt_rows),
            *(x for s in snaps.values() for x in s.items),
        ],
        all_pairs=True,
        prior_seed=seed,
    )

    def annotatable() -> CellState:
        responses = {
            (r["prompt_id"], system): text
            for r in prompt_rows
            for system, text in (r.get("responses") or {}).items()
        }
        return cell_state(names, (), responses=responses)[0]

    # the (C, P) cells depend on the names and the catalogue alone: a dimension served on
    # its decisions gets new strengths at every judgment, not a new table (nor does a
    # first snapshot with the same names)
    key = ("cells", state.store.url, project_id, tally.catalogue_version, names)
    return snapshot, names, state.batch_bases.setdefault(key, annotatable)


def _build(
    tally: ProjectTally,
    snaps: dict[str, Any],
    base: tuple[RecommenderState, CellNames, CellState],
    family: Family,
    decisions: Decisions,
) -> tuple[RecommenderState, dict[str, Any]]:
    """The recommender snapshot and the cells' state from the posteriors and the tally."""
    snapshot, names, template = base
    cells = template._replace(
        available=template.available.copy(),
        shown_a=template.shown_a.copy(),
        shown_b=template.shown_b.copy(),
    )
    served, in_family = _family_decisions(names, family, decisions)
    cells.available[~in_family] = 0
    num_c, num_p = len(names.comparisons), len(names.prompts)
    judged = np.zeros(num_c * num_p, np.int64)
    prompt_index = {p: i for i, p in enumerate(names.prompts)}
    total = 0
    system_judgments = np.zeros_like(snapshot.system_judgments)
    for d_index, d in enumerate(names.dimensions):
        dim = tally.dimensions[d]
        block = np.flatnonzero(snapshot.dimension == d_index)
        ids = np.array([dim.pair_id(*names.comparisons[g][1:]) for g in block.tolist()], np.int64)
        flipped = np.array(
            [dim.orient[c] != names.comparisons[g][1:] for c, g in zip(ids, block)], bool
        )
        comp_map = np.full(len(dim.orient), -1, np.int64)
        comp_map[ids] = block
        flip_of = np.zeros(len(dim.orient), bool)
        flip_of[ids] = flipped
        prompt_map = np.array([prompt_index.get(p, -1) for p in dim.prompts] or [-1], np.int64)
        c = comp_map[dim.comparison.view()]
        p = prompt_map[dim.prompt.view()]
        ok = (c >= 0) & (p >= 0)
        flat = c[ok] * num_p + p[ok]
        judged += np.bincount(flat, minlength=num_c * num_p)
        shown = dim.shown.view()[ok]
        side_a = (shown == 1) != flip_of[dim.comparison.view()[ok]]
        for counts, side in ((cells.shown_a, side_a), (cells.shown_b, ~side_a)):
            counts += np.bincount(flat[(shown > 0) & side], minlength=num_c * num_p).reshape(
                num_c, num_p
            )
        per_comparison = judged.reshape(num_c, num_p)[block].sum(axis=1)
        system_judgments[d_index] = np.bincount(
            snapshot.pair_a[block], weights=per_comparison, minlength=system_judgments.shape[1]
        ) + np.bincount(
            snapshot.pair_b[block], weights=per_comparison, minlength=system_judgments.shape[1]
        )
        total += int(ok.sum())
    snapshot = snapshot._replace(
        version=total,
        num_judgments=total,
        decisions=served,
        judged=judged.reshape(num_c, num_p),
        system_judgments=system_judgments,
    )
    maps = {
        "names": names,
        "cells": cells,
        "versions": {d: snaps[d].version for d in names.dimensions},
        "in_family": in_family,
        "family": family,
    }
    return snapshot, maps


def _judged_by(tally: ProjectTally, names: CellNames, annotator: str) -> np.ndarray:
    """(C, P) the cells ``annotator`` judged (call with the tally's lock held)."""
    exclude = np.zeros((len(names.comparisons), len(names.prompts)), bool)
    prompt_index = {p: i for i, p in enumerate(names.prompts)}
    comparison_index = {name: g for g, name in enumerate(names.comparisons)}
    for d in names.dimensions:
        dim = tally.dimensions[d]
        who = dim.annotators.get(annotator)
        if who is None:
            continue
        mine = dim.annotator.view() == who
        prompts = list(dim.prompts)  # in id order
        cells = set(zip(dim.comparison.view()[mine].tolist(), dim.prompt.view()[mine].tolist()))
        for c, p in cells:
            a, b = dim.orient[c]
            g = comparison_index.get((d, a, b), comparison_index.get((d, b, a)))
            q = prompt_index.get(prompts[p])
            if g is not None and q is not None:
                exclude[g, q] = True
    return exclude
