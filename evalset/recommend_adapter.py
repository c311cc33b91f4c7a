"""The one name <-> index adapter between the recommender and its callers (CLI and API).

:func:`adaptive.recommend.recommend` works on integer indices; its callers hold
names (dimensions, systems, prompts) and judgment rows. Everything that
translates between the two lives here, so that the same judgments and seed
give the same batch whether the posterior came from a file (``evalset
recommend --data``) or from the service (``POST /projects/P/next-batch``):

- the name spaces are canonical: dimensions, systems and prompts sorted by
  name, a dimension's comparisons in the order of their two systems in that
  list, each oriented as its posterior has it;
- the recommender snapshot's version is the number of judgments it reads (a
  data version: the posterior snapshots' own versions depend on when the
  service refitted), and the key is ``fold_in(PRNGKey(seed), version)``.

Typical use::

    snapshot, names = prepare(fits, rows, systems=..., prompts=..., rule=rule)
    cells, exclude = cell_state(names, rows, responses=responses, annotator=annotator)
    batch, info = recommend_named(seed, snapshot, names, cells, request)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from adaptive.recommend import (
    REASON_CODES,
    SHOW_A,
    CellState,
    DimensionDraws,
    RecommenderState,
    RecommendInfo,
    Request,
    adjacent_comparisons,
    recommend,
    recommend_key,
    snapshot_from_draws,
    tier_comparisons,
)
from adaptive.stopping.decisions import DecisionRule
from evalset.cells import NamedCell, annotatable_cells

#: a judgment or leased cell as the CLI's files and the store give it (keys by column name)
Row = Mapping[str, Any]


class UnknownName(LookupError):
    """A name in a request that the data do not have (the CLI and the API word it their way)."""


class NamedFit(NamedTuple):
    """One dimension's posterior draws with the names of its systems.

    Attributes:
        dimension: the dimension.
        systems: the fit's system names, in its own index order.
        pair_a, pair_b: (C,) the fit's comparisons, on its own system indices.
        theta: (D, C) draws of the comparisons' ability differences, or None
            to take them from ``skill``.
        skill: (D, S) per-system draws on the fit's system indices, or None
            (the per-comparison parameterisation).
    """

    dimension: str
    systems: Sequence[str]
    pair_a: np.ndarray
    pair_b: np.ndarray
    theta: np.ndarray | None
    skill: np.ndarray | None


@dataclass(frozen=True)
class CellNames:
    """The names the recommender's indices stand for.

    Attributes:
        dimensions: dimension ``d`` of ``RecommenderState.dimension``.
        systems: system ``s`` of ``RecommenderState.pair_a`` / ``pair_b``.
        prompts: prompt ``p`` of the (C, P) cell arrays.
        comparisons: comparison ``c`` as (dimension, system_a, system_b).
    """

    dimensions: tuple[str, ...]
    systems: tuple[str, ...]
    prompts: tuple[str, ...]
    comparisons: tuple[tuple[str, str, str], ...]
    _comparison_index: dict[tuple[str, str, str], int] = field(
        init=False, repr=False, compare=False
    )
    _prompt_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # frozen: the lookups are derived once, here
        object.__setattr__(
            self, "_comparison_index", {name: c for c, name in enumerate(self.comparisons)}
        )
        object.__setattr__(self, "_prompt_index", {p: i for i, p in enumerate(self.prompts)})

    def locate(
        self, dimension: str, item_id: str, system_a: str, system_b: str
    ) -> tuple[int, int, bool] | None:
        """(comparison, prompt, flipped) of a cell named in either orientation, or None."""
        p = self._prompt_index.get(item_id)
        if p is None:
            return None
        c = self._comparison_index.get((dimension, system_a, system_b))
        if c is not None:
            return c, p, False
        c = self._comparison_index.get((dimension, system_b, system_a))
        if c is not None:
            return c, p, True
        return None


def canonical(names: Iterable[str]) -> list[str]:
    """A name space in its canonical order: each name once, sorted.

    Example:
        >>> canonical(["s2", "s0", "s2", "s1"])
        ['s0', 's1', 's2']
    """
    return sorted(set(names))


def prepare(
    fits: Sequence[NamedFit],
    rows: Mapping[str, Sequence[Row]],
    *,
    systems: Iterable[str],
    prompts: Iterable[str],
    all_pairs: bool = False,
    prior_seed: int = 0,
    rule: DecisionRule | None = None,
) -> tuple[RecommenderState, CellNames]:
    """The recommender snapshot of named posteriors and judgments, with its name maps.

    Args:
        fits: one posterior per dimension.
        rows: each dimension's judgments in arrival order (``item_id``,
            ``system_a``, ``system_b``, ``winner``); judgments of a prompt or a
            pair outside the name spaces are left out.
        systems, prompts: the names to index (with every system of the fits).
        all_pairs: every pair of systems is a comparison (the fits need
            ``skill``; a system a fit never saw gets standard normal prior
            draws from ``prior_seed``); else only the fits' own comparisons.
        prior_seed: seeds those prior draws.
        rule: the decision rule (default: :class:`DecisionRule`'s).

    Returns:
        The snapshot (its version: the number of judgments it reads) and the names.
    """
    ordered = sorted(fits, key=lambda f: f.dimension)
    system_names = canonical([*systems, *(s for f in ordered for s in f.systems)])
    prompt_names = canonical(prompts)
    sys_index = {s: i for i, s in enumerate(system_names)}
    prompt_index = {p: i for i, p in enumerate(prompt_names)}
    prior = np.random.default_rng(prior_seed)
    blocks, names = [], []
    for fit in ordered:
        local = np.array([sys_index[s] for s in fit.systems], np.int64)
        skill = _skill(fit, local, len(system_names), all_pairs, prior)
        pa, pb, theta = _comparisons(fit, local, skill, len(system_names), all_pairs)
        j_comp, j_prompt, j_signed = _signed_judgments(
            rows.get(fit.dimension, ()), pa, pb, system_names, prompt_index
        )
        blocks.append(
            DimensionDraws(
                dimension=fit.dimension,
                theta=theta,
                pair_a=pa,
                pair_b=pb,
                skill=skill,
                judgment_comparison=j_comp,
                judgment_prompt=j_prompt,
                judgment_signed=j_signed,
            )
        )
        names += [(fit.dimension, system_names[a], system_names[b]) for a, b in zip(pa, pb)]
    snapshot = snapshot_from_draws(
        blocks,
        num_prompts=len(prompt_names),
        num_systems=len(system_names),
        version=sum(len(b.judgment_comparison) for b in blocks),
        rule=rule,
    )
    cell_names = CellNames(
        dimensions=tuple(f.dimension for f in ordered),
        systems=tuple(system_names),
        prompts=tuple(prompt_names),
        comparisons=tuple(names),
    )
    return snapshot, cell_names


def _skill(
    fit: NamedFit, local: np.ndarray, num_systems: int, all_pairs: bool,
    prior: np.random.Generator,
) -> np.ndarray | None:  # fmt: skip
    """The fit's per-system draws on every system's index (None without them)."""
    if fit.skill is None:
        return None
    draws = np.asarray(fit.skill, np.float64)
    # systems this fit never saw: prior draws when they get comparisons, else unused
    skill = (
        prior.normal(0.0, 1.0, size=(draws.shape[0], num_systems))
        if all_pairs
        else np.zeros((draws.shape[0], num_systems))
    )
    skill[:, local] = draws
    return skill


def _comparisons(
    fit: NamedFit, local: np.ndarray, skill: np.ndarray | None, num_systems: int,
    all_pairs: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The comparisons' systems (a, b) and their theta draws: every pair of systems, or the
    fit's own comparisons in (lower, higher) order."""
    fit_a, fit_b = local[np.asarray(fit.pair_a)], local[np.asarray(fit.pair_b)]
    if all_pairs:
        if skill is None:
            raise ValueError(f"all_pairs needs per-system draws ({fit.dimension!r} has none)")
        oriented = {frozenset((a, b)): (a, b) for a, b in zip(fit_a.tolist(), fit_b.tolist())}
        pairs = [
            oriented.get(frozenset((i, j)), (i, j))
            for i in range(num_systems)
            for j in range(i + 1, num_systems)
        ]
        pa = np.array([a for a, _ in pairs], np.int64)
        pb = np.array([b for _, b in pairs], np.int64)
        return pa, pb, skill[:, pb] - skill[:, pa]
    if fit.theta is None:
        raise ValueError(f"the fit of {fit.dimension!r} has no comparison draws")
    order = np.lexsort((np.maximum(fit_a, fit_b), np.minimum(fit_a, fit_b)))
    return fit_a[order], fit_b[order], np.asarray(fit.theta, np.float64)[:, order]


def _signed_judgments(
    rows: Iterable[Row], pa: np.ndarray, pb: np.ndarray, system_names: Sequence[str],
    prompt_index: Mapping[str, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Each judgment's comparison, prompt and signed outcome (+1 for the comparison's b);
    judgments of a prompt or pair outside the name spaces left out."""
    comp_of: dict[tuple[str, str], tuple[int, float]] = {}
    for c, (a, b) in enumerate(zip(pa.tolist(), pb.tolist())):
        comp_of[(system_names[a], system_names[b])] = (c, 1.0)
        comp_of[(system_names[b], system_names[a])] = (c, -1.0)
    j_comp, j_prompt, j_signed = [], [], []
    for r in rows:
        hit = comp_of.get((r["system_a"], r["system_b"]))
        if hit is None or r["item_id"] not in prompt_index:
            continue
        raw = {"a": -1.0, "b": 1.0}.get(r["winner"], 0.0)
        j_comp.append(hit[0])
        j_prompt.append(prompt_index[r["item_id"]])
        j_signed.append(raw * hit[1])
    return (
        np.asarray(j_comp, np.int64),
        np.asarray(j_prompt, np.int64),
        np.asarray(j_signed, np.float64),
    )


def cell_state(
    names: CellNames,
    rows: Iterable[Row],
    *,
    responses: Mapping[tuple[str, str], str] | None = None,
    annotator: str | None = None,
) -> tuple[CellState, np.ndarray | None]:
    """The cells' state from the judgments, and the cells ``annotator`` judged.

    Args:
        names: from :func:`prepare`.
        rows: judgments (``dimension``, ``item_id``, ``system_a``, ``system_b``,
            optional ``shown_first`` and ``annotator_id``).
        responses: (prompt, system) -> response text, for which cells can be
            annotated (:func:`evalset.cells.annotatable_cells`).
        annotator: exclude the cells this annotator judged.

    Returns:
        The :class:`CellState` (shown-first counts from the judgments) and the
        (C, P) cells to exclude, or None without an annotator.
    """
    num_c, num_p = len(names.comparisons), len(names.prompts)
    state = CellState.open(num_c, num_p)._replace(
        annotatable=annotatable_cells(names.comparisons, names.prompts, responses or {})
    )
    exclude = np.zeros((num_c, num_p), bool) if annotator else None
    for r in rows:
        hit = names.locate(r["dimension"], r["item_id"], r["system_a"], r["system_b"])
        if hit is None:
            continue
        c, p, flipped = hit
        shown = r.get("shown_first")
        if shown in ("a", "b"):
            side_a = (shown == "a") != flipped
            (state.shown_a if side_a else state.shown_b)[c, p] += 1
        if exclude is not None and r.get("annotator_id") == annotator:
            exclude[c, p] = True
    return state, exclude


def hold_leased(cells: CellState, names: CellNames, leased: Iterable[Row]) -> CellState:
    """A copy of ``cells`` with the cells under an active lease out, counted as shown."""
    held = cells._replace(
        available=cells.available.copy(),
        shown_a=cells.shown_a.copy(),
        shown_b=cells.shown_b.copy(),
    )
    for cell in leased:
        hit = names.locate(cell["dimension"], cell["item_id"], cell["system_a"], cell["system_b"])
        if hit is None:
            continue
        c, p, flipped = hit
        held.available[c, p] = 0  # out with an annotator until the lease expires
        side_a = (cell["shown_first"] == "a") != flipped
        (held.shown_a if side_a else held.shown_b)[c, p] += 1
    return held


def targets(
    snapshot: RecommenderState,
    names: CellNames,
    *,
    pairs: Sequence[tuple[str, str]] = (),
    adjacent: bool = False,
    tier: Sequence[str] = (),
    dimensions: Sequence[str] | None = None,
) -> tuple[int, ...] | None:
    """The comparison indices a request names, or None (every open comparison).

    Args:
        snapshot, names: from :func:`prepare`.
        pairs: (system, system) pairs in either orientation, in every dimension.
        adjacent: add the pairs adjacent in each dimension's leaderboard.
        tier: add the pairs within this tier of systems.
        dimensions: only the named pairs of these dimensions (default: all).

    Raises:
        UnknownName: a pair without a comparison, or a tier member the data lack.
    """
    if not pairs and not adjacent and not tier:
        return None
    out: list[int] = []
    for a, b in pairs:
        hits = [
            c
            for c, (d, x, y) in enumerate(names.comparisons)
            if {x, y} == {a, b} and (dimensions is None or d in dimensions)
        ]
        if not hits:
            raise UnknownName(f"no comparison of {a!r} and {b!r}")
        out += hits
    if adjacent:
        out += adjacent_comparisons(snapshot)
    if tier:
        unknown = sorted(set(tier) - set(names.systems))
        if unknown:
            raise UnknownName(f"unknown system(s) {unknown} in the tier")
        out += tier_comparisons(snapshot, [names.systems.index(s) for s in tier])
    return tuple(sorted(set(out)))


def rng_key(seed: int, snapshot: RecommenderState) -> Any:
    """The recommender's key: ``fold_in(PRNGKey(seed), snapshot.version)``, as STYLE.md asks."""
    return recommend_key(seed, snapshot.version)


def recommend_named(
    seed: int, snapshot: RecommenderState, names: CellNames, cells: CellState, request: Request
) -> tuple[list[NamedCell], RecommendInfo]:
    """:func:`adaptive.recommend.recommend` under :func:`rng_key`, its batch in names."""
    batch, info = recommend(rng_key(seed, snapshot), snapshot, cells, request)
    out: list[NamedCell] = []
    for k in range(len(batch)):
        dim, a, b = names.comparisons[int(batch.comparison[k])]
        need = batch.need[k]
        out.append(
            NamedCell(
                item_id=names.prompts[int(batch.prompt[k])],
                system_a=a,
                system_b=b,
                dimension=dim,
                shown_first="a" if batch.shown_first[k] == SHOW_A else "b",
                reason=REASON_CODES[int(batch.reason[k])],
                needed=int(need) if np.isfinite(need) else None,
            )
        )
    return out, info


#: why a comparison in :func:`not_served` got no task
NOT_SERVED_REASON = (
    "its likely need exceeds its unused prompts: the campaign's prompts cannot close it "
    "(add prompts, or decide with unit=judgment)"
)


def not_served(
    info: RecommendInfo, snapshot: RecommenderState, names: CellNames
) -> list[dict[str, Any]]:
    """The open comparisons the batch left out because their unjudged prompts cannot close
    them: dimension, systems, ``needed`` (judgments likely still needed; null: not in
    sight) and ``servable_prompts`` (its unjudged prompts it could be served now: not
    leased to another annotator, annotatable; a lease that expires frees more)."""
    if info.unclosable is None or snapshot.decisions is None:
        return []
    out = []
    for c in np.flatnonzero(info.unclosable >= 0).tolist():
        dim, a, b = names.comparisons[c]
        need = float(snapshot.decisions.needed[c])
        out.append(
            {
                "dimension": dim,
                "system_a": a,
                "system_b": b,
                "needed": int(round(need)) if np.isfinite(need) else None,
                "servable_prompts": int(info.unclosable[c]),
                "reason": NOT_SERVED_REASON,
            }
        )
    return out
