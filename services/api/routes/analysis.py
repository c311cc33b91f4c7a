"""The HTTP routes that answer from posterior snapshots: significance, leaderboard,
prompt parameters, pruning, and what re-estimation did (its events).

Requests only read the newest stored snapshot (``ServiceState.snapshot``); nothing
here fits a model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.types import DecoratedCallable

from adaptive.estimation.snapshot import Snapshot
from adaptive.stopping.rule import DEFAULT_LEVEL
from evalset.verdicts import DEFAULT_ADJUST, DEFAULT_INTERVAL
from services import schemas as s
from services.answers import item_rows, leaderboard_rows, pair_rows
from services.api.deps import ProjectId, SettingsDep, State
from services.api.errors import ApiError, error_responses
from services.api.routes.projects import snapshot_public
from services.api.snapshot_reads import (
    computed_answer,
    from_snapshot,
    newest_snapshot,
    resolve_dimension,
)
from services.runtime import background
from services.store import repository as repo

router = APIRouter()

Adjust = Annotated[
    Literal["holm", "bonferroni", "none"],
    Query(description="multiplicity adjustment of significant_adjusted"),
]
#: ``adjust``'s former name (a rule is a decision rule, GET .../decisions)
FormerRule = Annotated[
    Literal["holm", "bonferroni", "none"] | None,
    Query(deprecated=True, description="former name of adjust"),
]
Level = Annotated[float, Query(gt=0.5, lt=1.0, description="posterior interval level")]
Alpha = Annotated[float, Query(gt=0.0, lt=0.5, description="family-wise error rate")]
Method = Annotated[
    Literal["latest", "laplace", "nuts"] | None,
    Query(description="latest snapshot (default), or the latest of one method"),
]
Dimension = Annotated[
    str | None,
    Query(max_length=200, description="default: the project's only dimension, or 'overall'"),
]
Rounds = Annotated[int, Query(ge=10, le=10_000, description="bootstrap resamples")]
Seed = Annotated[int, Query(ge=0, le=2**31 - 1)]
Bootstrap = Annotated[
    Literal["judgment", "prompt"],
    Query(description="resample battles (Arena's notebook) or whole prompts"),
]
AnchorSystem = Annotated[
    str | None, Query(max_length=200, description="the system anchor_rating is given to")
]
AnchorRating = Annotated[float, Query(ge=-1e6, le=1e6)]
#: ``GET .../elo``'s options when none is given (``evalset elo``'s defaults): the dashboard
#: asks for these, so it reads the answer that route computes
ELO_DEFAULTS: dict[str, Any] = {"rounds": 1000, "level": 0.95, "seed": 0, "bootstrap": "prompt"}


# ---------------------------------------------------------------- helpers


def _significance(snap: Snapshot, rows: list[dict[str, Any]]) -> s.SignificancePublic:
    return s.SignificancePublic(
        snapshot=from_snapshot(snap), rows=[s.SignificanceRow(**r) for r in rows]
    )


def _answers(path: str, operation_id: str) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """A GET route answering from snapshots: 404 for an unknown name, 409 before any snapshot."""
    return router.get(
        path, operation_id=operation_id, tags=["analysis"], responses=error_responses(404, 409)
    )


# ---------------------------------------------------------------- answers from snapshots


@router.get("/projects/{project_id}/snapshots", operation_id="list_snapshots", tags=["analysis"])
def list_snapshots(project_id: ProjectId, state: State) -> s.SnapshotsPublic:
    """Stored snapshots, newest first per dimension (older fast ones are pruned)."""
    with state.store.read() as conn:
        metas = repo.list_snapshots(conn=conn, project_id=project_id)
    return s.SnapshotsPublic(snapshots=[snapshot_public(m) for m in metas])


@_answers("/projects/{project_id}/significance", "significance")
def significance(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    all_pairs: Annotated[
        bool, Query(description="every pair of systems, not only compared ones")
    ] = False,
    adjust: Adjust = DEFAULT_ADJUST,
    alpha: Alpha = DEFAULT_LEVEL,
    level: Level = DEFAULT_INTERVAL,
    method: Method = None,
    rule: FormerRule = None,
    model: Annotated[
        Literal["snapshot", "default"],
        Query(
            description="snapshot: the worker's newest posterior snapshot (the live model, "
            "answered at once); default: the default model fitted on the stored judgments, "
            "the rows `evalset significance --format json` and `evalset.significance` give "
            "for them (computed on a background thread: 409 `significance_pending` until "
            "it is done, then cached until the next batch)"
        ),
    ] = "snapshot",
) -> s.SignificancePublic | s.SignificanceTablePublic:
    """Every comparison: theta = s_B - s_A (> 0: B better), interval, P(B better), verdicts."""
    if model == "default":
        if all_pairs or method is not None:
            raise ApiError(
                422,
                "validation_error",
                "model=default fits the comparisons the judgments hold with the default "
                "method: all_pairs and method apply to model=snapshot",
            )
        return _significance_table(state, project_id, dimension, rule or adjust, alpha, level)
    snap = newest_snapshot(state, project_id, dimension, method)
    return _significance_rows(
        state, project_id, snap, None, all_pairs, rule or adjust, alpha, level
    )


def _significance_table(
    state: State,
    project_id: str,
    dimension: str | None,
    adjust: str,
    alpha: float,
    level: float,
) -> s.SignificanceTablePublic:
    dim = resolve_dimension(state, project_id, dimension)
    try:
        source = state.load_source((project_id, dim))
        result = background.significance(
            state.jobs, project_id, source, adjust=adjust, alpha=alpha, level=level
        )
    except ValueError as exc:
        raise ApiError(422, "cannot_fit", f"cannot fit {dim!r}: {exc}") from None
    table: s.SignificanceTablePublic = computed_answer(
        result, dim, "significance_pending", "the default model's fit"
    )
    return table


@_answers("/projects/{project_id}/significance/{system_a}/{system_b}", "significance_pair")
def significance_pair(
    project_id: ProjectId,
    system_a: str,
    system_b: str,
    state: State,
    dimension: Dimension = None,
    all_pairs: bool = False,
    adjust: Adjust = DEFAULT_ADJUST,
    alpha: Alpha = DEFAULT_LEVEL,
    level: Level = DEFAULT_INTERVAL,
    method: Method = None,
    rule: FormerRule = None,
) -> s.SignificancePublic:
    """One pair in the orientation asked (A vs B); works for pairs never compared too."""
    if system_a == system_b:
        raise ApiError(422, "validation_error", "system_b must differ from system_a")
    snap = newest_snapshot(state, project_id, dimension, method)
    for name in (system_a, system_b):
        if name not in snap.systems:
            raise ApiError(404, "not_found", f"unknown system {name!r} in snapshot {snap.version}")
    pairs = [(system_a, system_b)]
    return _significance_rows(
        state, project_id, snap, pairs, all_pairs, rule or adjust, alpha, level
    )


def _significance_rows(
    state: State,
    project_id: str,
    snap: Snapshot,
    pairs: list[tuple[str, str]] | None,
    all_pairs: bool,
    adjust: str,
    alpha: float,
    level: float,
) -> s.SignificancePublic:
    """The significance answer of ``snap`` (every pair, or ``pairs``), kept per snapshot
    version: it is read many times between two re-estimations."""
    options = ("significance", tuple(pairs or ()), all_pairs, adjust, alpha, level)
    return state.answer(  # type: ignore[no-any-return]
        project_id,
        snap,
        options,
        lambda: _significance(
            snap, pair_rows(snap, pairs, all_pairs=all_pairs, rule=adjust, alpha=alpha, level=level)
        ),
    )


@_answers("/projects/{project_id}/leaderboard", "leaderboard")
def leaderboard(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    level: Level = 0.95,
    method: Method = None,
    scale: Annotated[
        Literal["skill", "elo"],
        Query(
            description="skill: the newest snapshot's skill (answered at once); elo: Chatbot "
            "Arena's Elo leaderboard of the stored judgments, the answer of GET .../elo with "
            "the same options (rounds, seed, bootstrap, anchor_system, anchor_rating; level "
            "is its intervals' level), the rows of `evalset elo`: 409 `elo_pending` until "
            "its background job is done"
        ),
    ] = "skill",
    rounds: Annotated[int | None, Query(ge=10, le=10_000, description="scale=elo")] = None,
    seed: Annotated[int | None, Query(ge=0, le=2**31 - 1, description="scale=elo")] = None,
    bootstrap: Annotated[
        Literal["judgment", "prompt"] | None, Query(description="scale=elo")
    ] = None,
    anchor_system: AnchorSystem = None,
    anchor_rating: Annotated[float | None, Query(ge=-1e6, le=1e6)] = None,
) -> s.LeaderboardPublic | s.EloPublic:
    """Per-system skill with its interval, mean rank and P(best), best first; with
    ``scale=elo`` the Elo leaderboard of ``GET .../elo``."""
    elo_only = {"rounds": rounds, "seed": seed, "bootstrap": bootstrap}
    anchor = {"anchor_system": anchor_system, "anchor_rating": anchor_rating}
    if scale == "skill":
        given = [k for k, v in {**elo_only, **anchor}.items() if v is not None]
        if given:
            raise ApiError(422, "validation_error", f"{', '.join(given)}: only with scale=elo")
    else:
        if method is not None:
            raise ApiError(
                422,
                "validation_error",
                "scale=elo rates the stored judgments: method applies to scale=skill",
            )
        options = {**ELO_DEFAULTS, "level": level}
        options |= {k: v for k, v in elo_only.items() if v is not None}
        rating = 1000.0 if anchor_rating is None else anchor_rating
        return _elo(state, project_id, dimension, options, anchor_system, rating)
    snap = newest_snapshot(state, project_id, dimension, method)
    return s.LeaderboardPublic(
        snapshot=from_snapshot(snap),
        rows=[s.LeaderboardRow(**r) for r in leaderboard_rows(snap, level=level)],
    )


@_answers("/projects/{project_id}/elo", "elo")
def elo(
    project_id: ProjectId,
    state: State,
    dimension: Dimension = None,
    rounds: Rounds = 1000,
    level: Level = 0.95,
    seed: Seed = 0,
    bootstrap: Bootstrap = "prompt",
    anchor_system: AnchorSystem = None,
    anchor_rating: AnchorRating = 1000.0,
) -> s.EloPublic:
    """Chatbot Arena's Elo leaderboard of the stored judgments (``evalset elo``): ratings,
    bootstrap intervals, rank intervals that hold for every system at once. Computed on a
    background thread: 409 ``elo_pending`` until it is done, then kept until the next batch."""
    options: dict[str, Any] = {"rounds": rounds, "level": level, "seed": seed}
    options["bootstrap"] = bootstrap
    return _elo(state, project_id, dimension, options, anchor_system, anchor_rating)


def _elo(
    state: State,
    project_id: str,
    dimension: str | None,
    options: dict[str, Any],
    anchor_system: str | None,
    anchor_rating: float,
) -> s.EloPublic:
    """The Elo answer of ``GET .../elo`` (and ``.../leaderboard?scale=elo``), or its 409."""
    dim = resolve_dimension(state, project_id, dimension)
    if anchor_system is not None:
        with state.store.read() as conn:
            known = {x["system_id"] for x in repo.list_systems(conn=conn, project_id=project_id)}
        if anchor_system not in known:
            raise ApiError(404, "not_found", f"unknown system {anchor_system!r} (anchor_system)")
        options = {**options, "anchor": (anchor_system, anchor_rating)}
    try:
        result = background.elo(
            state.jobs, project_id, state.load_source((project_id, dim)), options
        )
    except ValueError as exc:
        raise ApiError(422, "cannot_fit", f"no Elo ratings for {dim!r}: {exc}") from None
    board: s.EloPublic = computed_answer(result, dim, "elo_pending", "the Elo ratings")
    return board


@_answers("/projects/{project_id}/prompt-parameters", "prompt_parameters")
def prompt_parameters(
    project_id: ProjectId, state: State, dimension: Dimension = None, method: Method = None
) -> s.PromptParametersPublic:
    """Per prompt: discrimination alpha and thresholds b (mean, sd), most discriminating first."""
    snap = newest_snapshot(state, project_id, dimension, method)
    return s.PromptParametersPublic(
        snapshot=from_snapshot(snap),
        rows=[s.PromptParameterRow(**r) for r in item_rows(snap)],
    )


@_answers("/projects/{project_id}/pruning", "pruning")
def pruning(
    project_id: ProjectId,
    state: State,
    settings: SettingsDep,
    dimension: Dimension = None,
    keep: Annotated[
        int | None, Query(ge=1, le=100_000, description="prompts to keep per tier")
    ] = None,
    target_se_ratio: Annotated[
        float | None,
        Query(
            ge=1.0,
            le=10.0,
            description="keep the fewest prompts whose SE ratio vs the full set on fresh "
            "judgments (predicted with the kept prompts shrunk for their selection) stays "
            "within this ratio (default 1.05 when keep is not given)",
        ),
    ] = None,
    tiers: Annotated[int, Query(ge=1, le=5, description="model tiers")] = 2,
) -> s.PruningPublic:
    """Which prompts to keep or drop for each model tier, with a reason for every prompt.

    Runs ``adaptive.prompts.pruning`` (fast item fits per tier; the rows' ``se_ratio`` is
    predicted for fresh judgments, docs/selection.md) on the stored
    judgments on a background thread: the first request answers 409 ``pruning_pending``,
    later ones the result (cached per judgments seen and options).
    """
    if (keep is None) == (target_se_ratio is None):
        if keep is not None:
            raise ApiError(422, "validation_error", "give keep or target_se_ratio, not both")
        target_se_ratio = 1.05
    dim = resolve_dimension(state, project_id, dimension)
    try:
        result = background.pruning(
            state.jobs,
            project_id,
            state.load_source((project_id, dim)),
            keep=keep,
            target_se_ratio=target_se_ratio,
            num_tiers=tiers,
            seed=settings.seed,
        )
    except (ValueError, KeyError, IndexError) as exc:
        raise ApiError(422, "cannot_prune", f"cannot prune {dim!r}: {exc}") from None
    pruning: s.PruningPublic = computed_answer(result, dim, "pruning_pending", "the pruning")
    return pruning


# ---------------------------------------------------------------- re-estimation events


@router.get("/projects/{project_id}/events", operation_id="list_events", tags=["analysis"])
def list_events(
    project_id: ProjectId,
    state: State,
    after_seq: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    kind: Annotated[
        str | None, Query(max_length=32, description="only events of this kind, e.g. rejected")
    ] = None,
) -> s.EventsPublic:
    """What re-estimation did, oldest first: every fast update and NUTS refit, its
    outcome and, for a rejected or failed one, why (e.g. max R-hat, divergences)."""
    with state.store.read() as conn:
        rows = repo.list_events(conn=conn, project_id=project_id, after_seq=after_seq, limit=limit)
    page_full = len(rows) == limit
    last = rows[-1]["seq"] if rows else None
    if kind is not None:
        rows = [r for r in rows if r["kind"] == kind]
    return s.EventsPublic(
        events=[
            s.EventPublic.model_validate({k: v for k, v in r.items() if k != "project_id"})
            for r in rows
        ],
        next_after_seq=last if page_full else None,
    )
