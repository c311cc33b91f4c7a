"""Cells -> graded-response data -> posterior: the choices a user makes about a fit.

Args shared by the functions here:
    likelihood: ``"net"`` (the paper's: one net rating per cell, rescaled to
        [-3, 3], 7 categories) or ``"judgment"`` (every judgment a 3-category
        graded response; needs no rescaling and suits streaming).
    parameterization: ``"comparison"`` (the paper's: one theta per comparison)
        or ``"system"`` (theta_(A vs B) = s_B - s_A, a leaderboard).
    method: ``"nuts"`` (full posterior) or ``"fast"`` (MAP + Laplace).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import jax
import numpy as np

from adaptive.core.cells import RATING_HALF_RANGE, CellData
from stan_free_models.fit_settings import DOOR_NUTS, LaplaceSettings, NutsSettings
from stan_free_models.inference import GRMData, collapse_observations
from stan_free_models.laplace import fit_laplace
from stan_free_models.model_key import DEFAULT_PRIORS, Priors
from stan_free_models.nuts import fit_nuts
from stan_free_models.posterior import Posterior
from stan_free_models.whitened_nuts import fit_nuts_whitened

LIKELIHOODS = ("net", "judgment")
PARAMETERIZATIONS = ("comparison", "system")
METHODS = ("nuts", "fast")
#: NUTS on Laplace-whitened coordinates (the default: about 4x fewer leapfrog steps per
#: draw at paper size) or with numpyro's diagonal mass matrix from its default start
SAMPLERS = ("whitened", "diagonal")
THRESHOLDS = ("free", "symmetric")


#: the flat names :class:`FitConfig` maps into the priors (``thresholds``: their symmetry)
PRIOR_NAMES = ("alpha_scale", "b_scale", "theta_scale", "tau_scale", "lapse", "thresholds")


@dataclass(frozen=True, init=False)
class FitConfig:
    """How to fit: the model (likelihood, parameterisation, cells, priors) and the run.

    The approximation's settings travel whole: ``priors``
    (:class:`stan_free_models.model_key.Priors`), ``laplace`` (the fast path,
    :class:`stan_free_models.fit_settings.LaplaceSettings`) and ``nuts``
    (:class:`stan_free_models.fit_settings.NutsSettings`), each with its defaults written
    once where it is defined. The field defaults are the default model
    (:func:`preset_config`'s ``"default"``, which the command line, :func:`evalset.fit`
    and the service resolve their settings with): every judgment a 3-category graded
    response, one MAP + Laplace fit with cluster-robust intervals. Sedoc & Ungar's model is
    ``preset_config("paper")``. Build configurations with :func:`preset_config`: it applies
    the rules between fields (per-system abilities get symmetric thresholds, a lapse brings
    the cells, a model-based treatment of dependent judgments turns the robust intervals
    off), which this class only checks; it maps the parts' flat names without the rules.
    """

    method: str = "fast"
    likelihood: str = "judgment"
    parameterization: str = "comparison"
    cell_effect: bool = False  # prompt-by-comparison effect: a cell's judgments are dependent
    # cluster-robust intervals, each cell (a comparison's prompt) one unit
    # (stan_free_models.robust): needs the joint mode's Gaussian without the cell effect
    robust: bool = True
    sampler: str = "whitened"  # NUTS: see SAMPLERS
    seed: int = 0
    priors: Priors = DEFAULT_PRIORS
    laplace: LaplaceSettings = LaplaceSettings()
    nuts: NutsSettings = NutsSettings()

    def __post_init__(self) -> None:
        # equal settings are one compile key (1 and 1.0 hash alike but trace differently)
        object.__setattr__(self, "priors", self.priors.canonical())
        _check_choices(self)
        if self.cell_effect and self.likelihood != "judgment":
            raise ValueError("cell_effect needs likelihood='judgment'")
        if self.priors.lapse and not self.cell_effect:
            raise ValueError("lapse needs cell_effect=True (the judgment likelihood with cells)")
        if self.priors.lapse and self.method == "fast" and not self.laplace.integrate_tau:
            raise ValueError(
                "lapse on the fast path needs integrate_tau=True: at the joint mode the "
                "lapse rate collapses towards 0 (docs/statistics.md)"
            )
        if self.robust and (
            self.cell_effect or self.laplace.exact_items or self.laplace.refine_sweeps
        ):
            raise ValueError(
                "robust intervals replace the cell effect and the exact item draws: "
                "set cell_effect=False, exact_items=False, refine_sweeps=0"
            )
        theta_scale = self.priors.theta_scale
        if not (theta_scale > 0 and math.isfinite(theta_scale)):
            raise ValueError(f"theta_scale must be a positive number, got {theta_scale!r}")
        if self.nuts.min_ess is not None and self.sampler != "whitened":
            raise ValueError(f"min_ess={self.nuts.min_ess!r} needs the whitened sampler")

    def __init__(self, **names: Any) -> None:
        """The fields by name (``priors=``, ``laplace=``, ``nuts=``: each part whole), and the
        parts' fields by their flat names on top (the doors' keywords: ``num_draws=``,
        ``lapse=``, ``num_warmup=``, ``thresholds="symmetric"``, ...; :func:`_parts`).

        Example:
            >>> FitConfig(num_draws=400, theta_scale=2.0).laplace.num_draws
            400
        """
        values = {f.name: names.pop(f.name, f.default) for f in fields(self)}
        values |= _parts(values, names)
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self.__post_init__()


def _parts(values: dict[str, Any], names: dict[str, Any]) -> dict[str, Any]:
    """The priors, Laplace and NUTS settings of ``values`` with the flat ``names`` of their
    fields applied (an unknown name is a TypeError, as for any keyword)."""
    parts: dict[str, dict[str, Any]] = {"priors": {}, "laplace": {}, "nuts": {}}
    owners = {
        "priors": set(PRIOR_NAMES),
        "laplace": {f.name for f in fields(LaplaceSettings)},
        "nuts": {f.name for f in fields(NutsSettings)},
    }
    for name, value in names.items():
        owner = next((part for part, known in owners.items() if name in known), None)
        if owner is None:
            raise TypeError(f"FitConfig() got an unexpected keyword argument {name!r}")
        parts[owner][name] = value
    priors = parts["priors"]
    if "thresholds" in priors:
        thresholds = priors.pop("thresholds")
        if thresholds not in THRESHOLDS:
            raise ValueError(f"unknown thresholds {thresholds!r}; expected one of {THRESHOLDS}")
        priors["symmetric"] = thresholds == "symmetric"
    return {
        "priors": values["priors"]._replace(**priors),
        "laplace": values["laplace"].replace(**parts["laplace"]),
        "nuts": values["nuts"].replace(**parts["nuts"]),
    }


def _check_choices(config: FitConfig) -> None:
    """Each named choice is one of its kind's."""
    for name, choices in (
        ("method", METHODS),
        ("sampler", SAMPLERS),
        ("likelihood", LIKELIHOODS),
        ("parameterization", PARAMETERIZATIONS),
    ):
        value = getattr(config, name)
        if value not in choices:
            raise ValueError(f"unknown {name} {value!r}; expected one of {choices}")


def model_data(
    cells: CellData,
    *,
    likelihood: str = "net",
    parameterization: str = "comparison",
    cell_effect: bool = False,
) -> GRMData:
    """The graded-response observations of the cells.

    With ``cell_effect`` (per-judgment likelihood only) every judgment also carries
    its cell, the (comparison, prompt) whose two responses it judged.
    """
    if likelihood == "net":
        comparison, item = cells.cell_comparison, cells.cell_item
        y = cells.cell_rating + RATING_HALF_RANGE
        weight = np.ones(len(y))
        num_categories = 2 * RATING_HALF_RANGE + 1
    elif likelihood == "judgment":
        comparison, item = cells.judgment_comparison, cells.judgment_item
        y, weight = cells.judgment_y, cells.judgment_weight
        num_categories = 3
    else:
        raise ValueError(f"unknown likelihood {likelihood!r}; expected one of {LIKELIHOODS}")
    data = GRMData(
        comparison=comparison.astype(np.int32),
        item=item.astype(np.int32),
        y=y.astype(np.int32),
        weight=weight.astype(np.float32),
        num_comparisons=cells.num_comparisons,
        num_items=cells.num_items,
        num_categories=num_categories,
    )

    if cell_effect:
        if likelihood != "judgment":
            raise ValueError("the prompt-by-comparison effect needs the per-judgment likelihood")
        key = (
            cells.judgment_comparison.astype(np.int64) * len(cells.prompts) + cells.judgment_prompt
        )
        _, cell = np.unique(key, return_inverse=True)
        data = replace(
            data, cell=cell.astype(np.int32), num_cells=int(cell.max()) + 1 if len(cell) else 1
        )
    if parameterization == "system":
        data = replace(
            data,
            pair_a=cells.pair_a.astype(np.int32),
            pair_b=cells.pair_b.astype(np.int32),
            num_systems=cells.num_systems,
        )
    elif parameterization != "comparison":
        raise ValueError(f"unknown parameterization {parameterization!r}")
    return data


def cell_of_observations(cells: CellData, likelihood: str) -> np.ndarray:
    """The cell (a comparison's prompt, 0..M-1) of every observation of ``model_data``."""
    if likelihood == "net":
        return np.arange(len(cells.cell_comparison), dtype=np.int32)
    key = cells.judgment_comparison.astype(np.int64) * len(cells.prompts) + cells.judgment_prompt
    return np.unique(key, return_inverse=True)[1].astype(np.int32).reshape(-1)


def cluster_of_observations(cells: CellData, likelihood: str) -> np.ndarray:
    """The independent unit (0..K-1) of every observation, for cluster-robust intervals.

    Without ranked screens, the cell (:func:`cell_of_observations`). With them, a
    screen's pairs are dependent (one annotator, one sitting, the same k outputs) and a
    cell's judgments are too (the same two responses), so the units are the connected
    components of "same cell or same screen": the finest partition in which every two
    dependent observations share a unit (usually a prompt's cells, when several
    annotators rank the same outputs). docs/statistics.md, "Ranked screens".
    """
    cell = cell_of_observations(cells, likelihood)
    screen = cells.judgment_screen
    if screen is None:
        return cell
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    if likelihood == "net":  # the observations are cells: each judgment's cell
        num_items = len(cells.items)
        keys = cells.cell_comparison * num_items + cells.cell_item
        judgment_cell = np.searchsorted(
            keys, cells.judgment_comparison * num_items + cells.judgment_item
        )
    else:
        judgment_cell = cell
    num_cells = int(cell.max()) + 1
    on_screen = screen >= 0
    # a bipartite graph of cells and screens, one edge per judgment on a screen
    rows = judgment_cell[on_screen]
    cols = num_cells + screen[on_screen]
    size = num_cells + int(screen.max()) + 1
    graph = coo_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(size, size))
    _, label = connected_components(graph, directed=False)
    return np.unique(label[cell], return_inverse=True)[1].astype(np.int32).reshape(-1)


def fit_cells(
    cells: CellData, config: FitConfig = FitConfig(), *, init: dict | None = None
) -> Posterior:
    """Fit the graded response model to the cells of one dimension."""
    data = model_data(
        cells,
        likelihood=config.likelihood,
        parameterization=config.parameterization,
        cell_effect=config.cell_effect,
    )
    rng_key = jax.random.PRNGKey(config.seed)
    if config.method == "fast":
        cluster = None
        if config.robust:
            cluster = cluster_of_observations(cells, config.likelihood)
            # a cell's judgments enter only through their category counts: one observation
            # per (unit, comparison, item, category), so the fit grows with the cells
            data, cluster = collapse_observations(data, cluster)
        return fit_laplace(
            data,
            rng_key=rng_key,
            settings=config.laplace,
            priors=config.priors,
            init=init,
            robust_cluster=cluster,
        )
    # the whitened sampler can also sample until an ESS target (NutsSettings.min_ess)
    nuts = fit_nuts_whitened if config.sampler == "whitened" else fit_nuts
    posterior = nuts(data, rng_key=rng_key, settings=config.nuts, priors=config.priors)
    if not config.robust:
        return posterior
    # the same widening as the fast path's, from a fast fit's cluster-robust sds: the
    # posterior is the model's, and the model takes a cell's judgments as independent
    fast = replace(config, method="fast", laplace=config.laplace.replace(num_draws=8))
    return widen_abilities(posterior, fit_cells(cells, fast, init=init).info["robust_widen"], data)


def widen_abilities(posterior: Posterior, widen: np.ndarray, data: Any) -> Posterior:
    """The posterior with every ability's (or skill's) draws spread about their mean by
    ``widen`` (one factor >= 1 each); per system, theta is recomputed from the skills."""
    draws = dict(posterior.draws)
    name = "skill" if "skill" in draws else "theta"
    x = draws[name]
    centre = x.mean(axis=(0, 1), keepdims=True)
    draws[name] = centre + (x - centre) * widen
    if name == "skill":
        skill = draws["skill"]
        draws["theta"] = skill[..., data.pair_b] - skill[..., data.pair_a]
    info = posterior.info | {"robust_widen": widen}
    return replace(posterior, draws=draws, info=info)


PRESETS = ("default", "paper")


def preset_config(preset: str = "default", **overrides: Any) -> FitConfig:
    """The fit configuration of a named model with the user's ``overrides`` (single fields).

    The one resolver of the user's settings: the command line
    (:func:`services.cli.analysis.fit_config`), :func:`evalset.fit` and the service
    (:func:`adaptive.estimation.streaming.stream_config`) pass it only what the user chose, and it
    applies the rules between fields: per-system abilities get symmetric thresholds unless
    thresholds are given; a lapse brings the cells it lives in (the net likelihood has
    none); in the default model, a model-based treatment of dependent judgments turns
    the robust intervals off.

    * ``paper``: Sedoc & Ungar's model as published: the net rating per cell
      rescaled to [-3, 3] (7 categories), free ordered thresholds, one theta per
      comparison. It reproduces their Table 3 (docs/paper_table.md).
    * ``default``: every judgment a 3-category response (no rescaling), fitted once
      (MAP + Laplace, seconds at every size), with intervals that hold when the judgments
      of a cell are dependent: each ability's interval is the larger of the model's and
      the cluster-robust (sandwich) one, each cell one unit (:mod:`stan_free_models.robust`),
      and the net preference Δ users read is each comparison's own observed net preference
      with an interval from the model's residuals (:mod:`stan_free_models.net_estimate`).
      Asking for the model-based answers instead (``cell_effect``: a prompt-by-comparison
      effect integrated over a grid of its sd; ``lapse``: random answers at a learned
      rate, which brings the cell effect; ``exact_items``; ``refine_sweeps``) turns the
      robust intervals off; they cost many times the time (docs/statistics.md).
      Per comparison, each prompt's two thresholds are free (a prompt may lean
      towards A or B) with a prior centred at 0, so theta = 0 means no preference at
      the average prompt and the uncertainty of where that average lies is part of
      theta's interval; per system, thresholds are symmetric (theta = 0 means no
      preference at every prompt), because a common lean cannot move additive skills.
    """
    if preset == "paper":
        # the published model as published: NUTS (its Table 3), and a fast path that is the
        # joint mode's Gaussian (the Gibbs sweeps were measured on the default model; on the
        # paper's 7-category net ratings they cost minutes on ChatEval NCM)
        base: dict[str, Any] = dict(
            method="nuts",
            likelihood="net",
            thresholds="free",
            cell_effect=False,
            refine_sweeps=0,
            exact_items=False,
            robust=False,
        )
    elif preset == "default":
        base = {}  # FitConfig's field defaults are the default model
    else:
        raise ValueError(f"unknown preset {preset!r}; expected one of {PRESETS}")
    chosen = base | overrides
    if "thresholds" not in overrides and chosen.get("parameterization") == "system":
        # a common lean of every prompt cannot move additive skills: free thresholds leave
        # them adrift (the AI Teacher Test's order flips), symmetric ones pin theta = 0
        base["thresholds"] = "symmetric"
    if "cell_effect" not in overrides:
        # the lapse lives in the cells' likelihood: asking for it brings the cells (the net
        # rating has one observation per cell: no cells there)
        judgment = chosen.get("likelihood", FitConfig.likelihood) == "judgment"
        base["cell_effect"] = judgment and bool(chosen.get("lapse"))
    if preset == "default" and "robust" not in overrides:
        # the cell effect, the lapse and the exact item draws are the model-based answer to
        # dependent judgments; the default answers with cluster-robust intervals instead
        # (one fit, no grid), so asking for any of them turns the robust intervals off
        chosen = base | overrides
        base["robust"] = not any(
            chosen.get(name) for name in ("cell_effect", "lapse", "exact_items", "refine_sweeps")
        )
    chosen = base | overrides
    if chosen.get("method", FitConfig.method) == "nuts":
        # NUTS's run sizes in every door, where the user chose none
        # (stan_free_models.fit_settings.DOOR_NUTS); blocks until an ESS target are the
        # whitened sampler's
        base |= {"num_warmup": DOOR_NUTS.num_warmup, "num_samples": DOOR_NUTS.num_samples}
        if chosen.get("sampler", FitConfig.sampler) == "whitened":
            base["min_ess"] = DOOR_NUTS.min_ess
    return FitConfig(**(base | overrides))
