"""Model tiers: split systems by estimated ability, and the comparisons inside each tier.

Sedoc & Ungar (section 6.2, "Different prompts for better students") sort the
systems by mean Delta ability, call the top ones "better" and the others the
rest, and re-estimate item parameters within each group from the comparisons
whose two systems both belong to it. Everything here is integer-indexed.

System ability from per-comparison abilities (theta_i > 0 means B is better):

* ``"lstsq"`` (default): the minimum-norm least-squares skills s with
  theta_i ~ s_B - s_A fitted to the posterior mean Delta abilities (the
  paper's "mean Delta ability", Table 3), which accounts for the strength of
  each system's opponents;
* ``"mean"``: the plain mean of +theta_i over the comparisons where the
  system is B and -theta_i where it is A. With an unbalanced design it is
  biased by who a system met: on ChatEval NCM it ranks
  S2SAttn_OpenSubtitlesQuestions (lost to Human2 by 1.3) above Cakechat only
  because its other two opponents were weak.

Systems never compared (no data) get NaN; :func:`assign_tiers` places a system
without an ability in the tier of the first opponent it has in ``pair_a`` /
``pair_b`` (a new system joins the tier it is being compared in).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ABILITY_METHODS = ("mean", "lstsq")


@dataclass(frozen=True)
class Tiers:
    """Tier of every system (0 = best) and of every comparison (-1 = across tiers)."""

    system_tier: np.ndarray  # (S,)
    comparison_tier: np.ndarray  # (C,)
    ability: np.ndarray  # (S,) the ability used to sort, NaN when unknown
    num_tiers: int

    def comparisons_in(self, tier: int, among: np.ndarray | None = None) -> np.ndarray:
        """Indices of the comparisons inside ``tier``; only those listed in ``among`` if given."""
        if among is None:
            return np.flatnonzero(self.comparison_tier == tier)
        among = np.asarray(among)
        return among[self.comparison_tier[among] == tier]


def system_ability(
    theta: np.ndarray,
    pair_a: np.ndarray,
    pair_b: np.ndarray,
    num_systems: int,
    *,
    method: str = "lstsq",
) -> np.ndarray:
    """Per-system ability from per-comparison abilities theta (C,); NaN for unseen systems."""
    theta = np.asarray(theta, dtype=np.float64)
    seen = np.bincount(np.concatenate([pair_a, pair_b]), minlength=num_systems)
    if method == "mean":
        total = np.bincount(pair_b, weights=theta, minlength=num_systems) - np.bincount(
            pair_a, weights=theta, minlength=num_systems
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            out = total / seen
    elif method == "lstsq":
        design = np.zeros((len(theta), num_systems))
        design[np.arange(len(theta)), pair_b] += 1.0
        design[np.arange(len(theta)), pair_a] -= 1.0
        out = np.linalg.lstsq(design, theta, rcond=None)[0]
    else:
        raise ValueError(f"unknown ability method {method!r}; expected one of {ABILITY_METHODS}")
    return np.where(seen > 0, out, np.nan)


def tier_names(num_tiers: int) -> list[str]:
    """``["better", "rest"]`` for two tiers, ``["all"]`` for one, ``tier1..tierN`` otherwise."""
    if num_tiers == 1:
        return ["all"]
    if num_tiers == 2:
        return ["better", "rest"]
    return [f"tier{t + 1}" for t in range(num_tiers)]


def assign_tiers(
    ability: np.ndarray,
    pair_a: np.ndarray,
    pair_b: np.ndarray,
    *,
    num_tiers: int = 2,
    sizes: list[int] | None = None,
) -> Tiers:
    """Split systems into tiers by ability (highest first) and tier the comparisons.

    Args:
        ability: (S,) per-system ability, NaN when unknown.
        pair_a, pair_b: (C,) systems of each comparison.
        num_tiers: number of tiers; systems with known ability are split into
            tiers of (nearly) equal size by rank unless ``sizes`` is given.
        sizes: number of ranked systems in each tier, best tier first (the
            last may be omitted: it takes the remainder).

    Returns:
        The :class:`Tiers`; a comparison whose systems are in different tiers
        gets tier -1.
    """
    ability = np.asarray(ability, dtype=np.float64)
    num_systems = ability.shape[0]
    known = np.flatnonzero(~np.isnan(ability))
    # stable order: by ability descending, ties by index
    ranked = known[np.lexsort((known, -ability[known]))]
    if num_tiers < 1:
        raise ValueError("num_tiers must be >= 1")
    if sizes is None:
        bounds = np.linspace(0, len(ranked), num_tiers + 1)
        cuts = np.round(bounds).astype(int)
    else:
        if sum(sizes) > len(ranked) or len(sizes) not in (num_tiers, num_tiers - 1):
            raise ValueError(f"tier sizes {sizes} do not fit {len(ranked)} systems in {num_tiers}")
        cuts = np.concatenate([[0], np.cumsum(sizes[: num_tiers - 1]), [len(ranked)]]).astype(int)
    system_tier = np.full(num_systems, -1, dtype=np.int64)
    for t in range(num_tiers):
        system_tier[ranked[cuts[t] : cuts[t + 1]]] = t
    for a, b in zip(pair_a, pair_b):  # unseen systems join their opponent's tier
        if system_tier[a] == -1 and system_tier[b] != -1:
            system_tier[a] = system_tier[b]
        elif system_tier[b] == -1 and system_tier[a] != -1:
            system_tier[b] = system_tier[a]
    ta, tb = system_tier[pair_a], system_tier[pair_b]
    comparison_tier = np.where((ta == tb) & (ta >= 0), ta, -1)
    return Tiers(
        system_tier=system_tier,
        comparison_tier=comparison_tier.astype(np.int64),
        ability=ability,
        num_tiers=num_tiers,
    )


def split_tiers(
    theta: np.ndarray,
    pair_a: np.ndarray,
    pair_b: np.ndarray,
    num_systems: int,
    *,
    num_tiers: int = 2,
    method: str = "lstsq",
    sizes: list[int] | None = None,
    theta_comparisons: np.ndarray | None = None,
) -> Tiers:
    """Abilities from ``theta`` (estimated on ``theta_comparisons``), then tiers for all pairs.

    Args:
        theta: abilities of the comparisons listed in ``theta_comparisons``
            (all comparisons when None).
        pair_a, pair_b: (C,) systems of every comparison to be tiered.
        theta_comparisons: indices into ``pair_a``/``pair_b`` of the comparisons
            ``theta`` belongs to (e.g. the training comparisons of a fold).
    """
    idx = np.arange(len(pair_a)) if theta_comparisons is None else np.asarray(theta_comparisons)
    ability = system_ability(theta, pair_a[idx], pair_b[idx], num_systems, method=method)
    return assign_tiers(ability, pair_a, pair_b, num_tiers=num_tiers, sizes=sizes)
