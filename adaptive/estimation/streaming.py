"""Streaming re-estimation: the fits that turn the judgments so far into a snapshot.

Judgments arrive in batches. Each accepted batch triggers a *fast update*: the
per-judgment graded-response likelihood with the per-system parameterisation
(theta_(A vs B) = s_B - s_A), fitted by MAP + Laplace warm-started from the
previous mode (:func:`fit_snapshot`, :func:`remap_init`), so that the leaderboard
and every pair (even a pair never compared) come from one snapshot. A *full
refit* by NUTS (same function, ``stream_config("nuts")``) runs on a schedule.

The pieces live in three modules: the snapshot and its bytes
(:mod:`adaptive.estimation.snapshot`), these fits, and the skill-only updates between full
fits (:mod:`adaptive.estimation.skill_update`). The worker that schedules them on threads
is a service concern (:mod:`services.api.refresher`); the rows answers are made
of are in :mod:`services.answers`. The names of the first and last are
re-exported here, with :class:`adaptive.estimation.source.Source` (what a fit reads), so that
``from adaptive.estimation.streaming import Snapshot`` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from adaptive.estimation.skill_update import SkillBase, encode_judgments, skill_base, skill_snapshot
from adaptive.estimation.snapshot import (
    FAST,
    FULL,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    snapshot_from_posterior,
)
from adaptive.estimation.source import Source

if TYPE_CHECKING:  # JAX is imported on first fit, so a process that only reads starts fast
    from adaptive.core.cells import CellData
    from adaptive.estimation.fitting import FitConfig
    from stan_free_models.model_key import Priors


def stream_config(method: str = "fast", **kwargs: Any) -> FitConfig:
    """The fit configuration of streaming: per-judgment likelihood, per-system abilities.

    Thresholds are symmetric by default: with free thresholds a common shift of every
    ability difference is unidentified, and the additivity of per-system abilities
    then turns that arbitrary offset into wrong orderings (on the AI Teacher Test
    free thresholds rank GPT-3 above Blender, against the raw win shares and Tack &
    Piech; symmetric thresholds give Teacher > Blender > GPT-3).

    The default model (``adaptive.estimation.fitting.preset_config``, which resolves ``kwargs``): one
    MAP + Laplace fit with the abilities' intervals widened to their cluster-robust sd, so
    a cell judged three times does not count as three independent prompts, at the cost of
    one fit: every update refits the items with the skills. ``cell_effect=True`` (or a
    lapse) asks for the model-based treatment instead (a grid of fits over the cell
    effect's sd; skill-only updates then cannot be used, as they take judgments as
    independent).
    """
    from adaptive.estimation.fitting import preset_config

    return preset_config(
        "default", method=method, likelihood="judgment", parameterization="system", **kwargs
    )


def remap_init(
    previous: Snapshot | None, cells: CellData, *, priors: Priors | None = None
) -> dict[str, np.ndarray] | None:
    """The previous mode re-indexed by name onto ``cells`` (new systems/items start at default).

    ``priors``: the fit's (its thresholds set the items' shape); default: symmetric thresholds.
    """
    if previous is None or previous.mode is None:
        return None
    from adaptive.estimation.fitting import model_data
    from stan_free_models.inference import Priors, default_init

    data = model_data(cells, likelihood="judgment", parameterization="system")
    init = default_init(data, Priors(symmetric=True) if priors is None else priors)
    for name in ("log_tau", "logit_lapse"):
        if name in previous.mode:
            init[name] = np.asarray(previous.mode[name], np.float32).reshape(1)
    old_g, old_i = previous.mode["global"], previous.mode["items"]
    sys_at = {s: i for i, s in enumerate(previous.systems)}
    for i, s in enumerate(cells.systems):
        j = sys_at.get(s)
        if j is not None and j < len(old_g):
            init["global"][i] = old_g[j]
    if old_i.shape[1:] == init["items"].shape[1:]:
        item_at = {s: i for i, s in enumerate(previous.items)}
        for i, s in enumerate(cells.items):
            j = item_at.get(s)
            if j is not None and j < len(old_i):
                init["items"][i] = old_i[j]
    return init


def fit_snapshot(
    judgments: pl.DataFrame,
    *,
    dimension: str,
    systems: Sequence[str],
    config: FitConfig,
    last_seq: int,
    previous: Snapshot | None = None,
    max_draws: int = 1000,
    with_base: bool = False,
) -> Snapshot | tuple[Snapshot, SkillBase | None]:
    """Fit validated judgments of one dimension and pack the posterior as a snapshot.

    Args:
        judgments: frame in the common schema (``adaptive.core.data``), one dimension or several.
        dimension: the dimension to fit.
        systems: every system of the campaign (fixes the skill axis; unjudged ones keep
            their prior).
        config: :func:`stream_config` (fast or nuts).
        last_seq: the store's sequence number of the newest judgment in ``judgments``.
        previous: the last fast snapshot, whose mode warm-starts a fast fit.
        max_draws: draws kept in the snapshot.
        with_base: also return the :class:`SkillBase` of a converged fast fit (or None),
            for skill-only updates on top of it.
    """
    from adaptive.core.cells import build_cells
    from adaptive.estimation.fitting import fit_cells

    cells = build_cells(judgments, dimension=dimension, systems=list(systems))
    init = remap_init(previous, cells, priors=config.priors) if config.method == "fast" else None
    posterior = fit_cells(cells, config, init=init)
    snapshot = snapshot_from_posterior(
        posterior,
        cells,
        num_judgments=cells.num_judgments,
        last_seq=last_seq,
        max_draws=max_draws,
    )
    if with_base:
        return snapshot, skill_base(snapshot, cells, posterior, config)
    return snapshot


def with_diagnostics(
    result: Snapshot | tuple[Snapshot, SkillBase | None], **extra: Any
) -> Snapshot | tuple[Snapshot, SkillBase | None]:
    """:func:`fit_snapshot`'s result with ``extra`` added to its snapshot's diagnostics
    (and to its skill base's snapshot, which is the same fit): new objects, not edits.

    Example:
        >>> import numpy as np
        >>> z = np.zeros(0)
        >>> s = Snapshot("d", 0, 1, 1, FAST, 0.0, 0.0, {"converged": True}, (), (), z, z, z, z,
        ...              z, z, z)
        >>> with_diagnostics(s, compile_s=0.5).diagnostics, s.diagnostics
        ({'converged': True, 'compile_s': 0.5}, {'converged': True})
    """
    from dataclasses import replace

    if isinstance(result, Snapshot):
        return replace(result, diagnostics={**result.diagnostics, **extra})
    snapshot, base = result
    snapshot = replace(snapshot, diagnostics={**snapshot.diagnostics, **extra})
    return snapshot, None if base is None else replace(base, snapshot=snapshot)


__all__ = [
    "with_diagnostics",
    "FAST",
    "FULL",
    "SkillBase",
    "Snapshot",
    "Source",
    "decode_snapshot",
    "encode_judgments",
    "encode_snapshot",
    "fit_snapshot",
    "remap_init",
    "skill_snapshot",
    "snapshot_from_posterior",
    "stream_config",
]
