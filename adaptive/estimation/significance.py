"""Which comparisons are significant, from the joint posterior of all comparisons.

A comparison "A vs B" is *significant* when the 95% equal-tailed posterior
interval of theta (> 0: B better) excludes 0. All comparisons come from one
joint fit, the paper's answer to multiple testing (Sedoc & Ungar, section
6.1). We also report a multiplicity-adjusted verdict: Holm's step-down
procedure (family-wise error ``alpha``) applied to the posterior two-sided tail
probabilities p = 2 min(P(theta > 0), P(theta < 0)) (``model_adjusted``), and
the same procedure on the comparisons' own data: the t-test of the observed net
preference with prompts as the units (``data_adjusted``). ``significant_adjusted``
needs both, in the same direction, and ``adjust_rule`` says so. Why both: the
data's test holds its level on null campaigns at any sparsity (prompts are the
units, so a prompt's lean towards A or B counts as noise, not effect), while the
model's posterior on the fast path is too narrow when the data are sparse (45% of
null campaigns flagged at 15% of the data, docs/statistics.md); a flag that both
give can be no more frequent than the data's alone, and it never contradicts the
comparison's own judgments.

Every row also carries the effect users read, the net preference Δ (the expected
signed judgment, +1 B / -1 A / 0 tie, averaged over the comparison's judged
prompts): the model's estimate with its 95% posterior interval
(``net_preference, net_sd, net_ci_low, net_ci_high``), the data's own value
(``observed_net`` with a prompts-as-units t interval, from
:func:`adaptive.stopping.evidence.net_preference`), and two checks:

* ``ppc_z`` / ``ppc_flag``: a posterior predictive check; the observed Δ against
  what the fitted model predicts for data of the same design (new judgments and
  new prompt-by-comparison effects), flagged when |z| > ``PPC_Z``. With the
  per-system parameterisation this is the direct-vs-indirect check: the
  comparison's own judgments against the difference the leaderboard implies
  (``indirect_conflict``).
* ``sign_agrees``: False when the model's Δ and the observed Δ have opposite
  signs; ``note`` then says so in words.
* ``model_agrees`` / ``disagreement``: the model's estimates (theta and its Δ) against
  the judgments' Δ, the one a decision rests on, with the reason in words when they
  disagree (:func:`disagreement`).

Draws are finite, so an interval end has a Monte Carlo error (``ci_mcse``: ArviZ's
quantile MCSE of the end nearest 0). When that end lies within ``MCSE_Z`` of its
Monte Carlo errors of 0, another run with other seeds can give the other verdict:
``verdict_settled`` is False and ``note`` asks for more draws.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

from adaptive.core.cells import CellData
from stan_free_models.posterior import Posterior

ADJUST_RULES = ("holm", "bonferroni", "none")
#: |z| above which the posterior predictive check flags a comparison (two-sided p ~ 0.0027)
PPC_Z = 3.0
#: an interval end within this many Monte Carlo errors of 0 leaves the verdict unsettled
MCSE_Z = 2.0


def holm(p_values: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Holm's step-down rejections (True = rejected) for p-values.

    Example:
        >>> holm(np.array([0.01, 0.04, 0.03, 0.2])).tolist()
        [True, False, False, False]
    """
    p = np.asarray(p_values, dtype=float)
    m = p.shape[0]
    order = np.argsort(p, kind="stable")
    reject = np.zeros(m, dtype=bool)
    for rank, idx in enumerate(order):
        if p[idx] <= alpha / (m - rank):
            reject[idx] = True
        else:
            break
    return reject


def adjusted_verdicts(p_values: np.ndarray, rule: str = "holm", alpha: float = 0.05) -> np.ndarray:
    if rule == "holm":
        return holm(p_values, alpha)
    if rule == "bonferroni":
        return np.asarray(p_values) <= alpha / max(len(p_values), 1)
    if rule == "none":
        return np.asarray(p_values) <= alpha
    raise ValueError(f"unknown adjustment rule {rule!r}; expected one of {ADJUST_RULES}")


def summarize_draws(theta_draws: np.ndarray, level: float = 0.95) -> dict[str, np.ndarray]:
    """Posterior summaries of (num_draws, C) ability differences."""
    tail = (1.0 - level) / 2.0
    num = theta_draws.shape[0]
    # a draw exactly at 0 counts half to each side
    p_pos = ((theta_draws > 0).sum(axis=0) + 0.5 * (theta_draws == 0).sum(axis=0)) / num
    p_two = 2.0 * np.minimum(p_pos, 1.0 - p_pos)
    # with finite draws a tail probability is never below 1 / (num + 1)
    p_two = np.maximum(p_two, 1.0 / (num + 1))
    low, high = np.quantile(theta_draws, [tail, 1.0 - tail], axis=0)
    return {
        "mean": theta_draws.mean(axis=0),
        "sd": theta_draws.std(axis=0, ddof=1),
        "ci_low": low,
        "ci_high": high,
        "p_b_better": p_pos,
        "p_two_sided": p_two,
        "significant": (low > 0) | (high < 0),
    }


def interval_end_mcse(theta_draws: np.ndarray, level: float = 0.95) -> np.ndarray:
    """(C,) Monte Carlo error of the interval end nearest 0, from (chain, draw, C) draws.

    ArviZ's quantile MCSE (it accounts for autocorrelation within chains; computed for
    all columns at once by :func:`stan_free_models.mcse.quantile_mcse`), evaluated at
    the lower end for comparisons whose posterior mean is positive and at the upper end
    otherwise: the end whose side of 0 decides :func:`summarize_draws`' ``significant``.
    ArviZ's estimate of a low quantile and of the mirrored high quantile of the negated
    draws take different order statistics (floor and ceiling), which at a few hundred
    draws differ by up to 2x; their mean is the same number in either orientation of the
    comparison.
    """
    from stan_free_models.mcse import quantile_mcse

    tail = (1.0 - level) / 2.0
    draws = np.asarray(theta_draws, dtype=float)
    positive = draws.reshape((-1,) + draws.shape[2:]).mean(axis=0) > 0
    prob = np.where(positive, tail, 1.0 - tail)
    return 0.5 * (quantile_mcse(draws, prob) + quantile_mcse(-draws, 1.0 - prob))


def settled_verdicts(stats: dict[str, np.ndarray], end_mcse: np.ndarray) -> np.ndarray:
    """(C,) False where the interval end nearest 0 (of :func:`summarize_draws`' ``stats``)
    lies within :data:`MCSE_Z` of its Monte Carlo errors ``end_mcse``
    (:func:`interval_end_mcse`) of 0: another run with other seeds can then give the other
    ``significant``. An error ArviZ cannot estimate (too few draws: NaN) or none
    (constant draws) does not unsettle.

    Example:
        >>> stats = {"mean": np.array([0.5, 0.5, -0.5]), "ci_low": np.array([0.01, 0.3, -0.9]),
        ...          "ci_high": np.array([0.9, 0.9, -0.02])}
        >>> settled_verdicts(stats, np.array([0.02, 0.02, 0.02])).tolist()
        [False, True, False]
    """
    end = np.where(stats["mean"] > 0, stats["ci_low"], stats["ci_high"])
    return ~((np.abs(end) <= MCSE_Z * end_mcse) & (end_mcse > 0))


def compare(
    posterior: Posterior,
    cells: CellData,
    *,
    orientation: Iterable[tuple[str, str]] | None = None,
    rule: str = "holm",
    alpha: float = 0.05,
    level: float = 0.95,
    effect: bool = True,
) -> list[dict]:
    """One row per comparison with mean, sd, interval, P(B better) and both verdicts.

    Args:
        posterior: a fit of ``cells``.
        cells: the cells that were fitted.
        orientation: (A, B) pairs to report in that orientation (others as stored).
        rule: multiplicity adjustment (``holm``, ``bonferroni`` or ``none``).
        alpha: family-wise error rate for the adjusted verdict.
        level: posterior interval level.
        effect: also report the net preference Δ and the checks (:func:`net_effect`).
    """
    theta = posterior.flat("theta")
    wanted = {frozenset(p): tuple(p) for p in orientation or ()}
    names = cells.comparison_names()
    signs = np.array(
        [-1.0 if wanted.get(frozenset(n), n) != n else 1.0 for n in names], dtype=float
    )
    theta = theta * signs
    stats = summarize_draws(theta, level)
    end_mcse = interval_end_mcse(posterior.draws["theta"] * signs, level)
    settled = settled_verdicts(stats, end_mcse)
    effects = net_effect(posterior, cells, level=level) if effect else {}
    model_adjusted = adjusted_verdicts(stats["p_two_sided"], rule, alpha)
    obs_mean, data_adjusted = data_verdicts(cells, rule, alpha)
    # the verdict needs both views, in the same direction: see the module docstring
    adjusted = (
        model_adjusted & data_adjusted & (np.sign(stats["mean"]) == np.sign(obs_mean * signs))
    )
    n_judg = cells.judgments_per_comparison()
    n_prompts = cells.prompts_per_comparison()
    rows = []
    for i, (a, b) in enumerate(names):
        if signs[i] < 0:
            a, b = b, a
        rows.append(
            {
                "dimension": cells.dimension,
                "system_a": a,
                "system_b": b,
                "mean": float(stats["mean"][i]),
                "sd": float(stats["sd"][i]),
                "ci_low": float(stats["ci_low"][i]),
                "ci_high": float(stats["ci_high"][i]),
                "p_b_better": float(stats["p_b_better"][i]),
                "significant": bool(stats["significant"][i]),
                "ci_mcse": float(end_mcse[i]),
                "verdict_settled": bool(settled[i]),
                "p_two_sided": float(stats["p_two_sided"][i]),
                "significant_adjusted": bool(adjusted[i]),
                "model_adjusted": bool(model_adjusted[i]),
                "data_adjusted": bool(data_adjusted[i]),
                "adjust_rule": f"{rule} on the model and on the data",
                "n_judgments": int(n_judg[i]),
                "n_prompts": int(n_prompts[i]),
                "method": posterior.method,
                **_oriented(effects, i, signs[i]),
            }
        )
        if not effect:
            continue
        if "skill" in posterior.draws:
            rows[-1]["indirect_conflict"] = rows[-1]["ppc_flag"]
        rows[-1]["note"] = _note(rows[-1], per_system="skill" in posterior.draws)
        why = disagreement(rows[-1], per_system="skill" in posterior.draws)
        rows[-1] |= {"model_agrees": why is None, "disagreement": why}
    return rows


def _side(value: float) -> str:
    return "B" if value > 0 else "A"


def disagreement(row: dict, *, per_system: bool) -> str | None:
    """Why the model's estimate of a comparison disagrees with its own judgments, or None.

    The model's estimates are its theta (``mean``, the ability scale) and its Δ
    (``model_net``; ``net_preference`` when the model gives Δ itself: cell effect or
    lapse); the judgments' is ``observed_net``, the Δ a decision rests on. They disagree
    when the model leans to the other side of 0 than the judgments or the judgments lie
    outside what the model predicts (``ppc_flag``).

    Example:
        >>> disagreement({"mean": 0.13, "model_net": 0.01, "observed_net": -0.02,
        ...               "ppc_flag": False}, per_system=True)  # doctest: +ELLIPSIS
        "the model's theta (+0.130) leans to B, the judgments' net preference (-0.020) to A; ..."
    """
    observed = row["observed_net"]
    model_net = row["model_net"] if "model_net" in row else row["net_preference"]
    reasons = []
    for name, value in (("theta", row["mean"]), ("net preference", model_net)):
        if value * observed < 0:
            reasons.append(
                f"the model's {name} ({value:+.3f}) leans to {_side(value)}, the judgments' "
                f"net preference ({observed:+.3f}) to {_side(observed)}"
            )
            break
    if row["ppc_flag"]:
        reasons.append(
            f"the judgments' net preference is outside what the model predicts (z = "
            f"{row['ppc_z']:+.1f})"
        )
    if not reasons:
        return None
    why = (
        "the model reads this pair from every comparison of the two systems (their skills)"
        if per_system
        else "the model reads theta at the average prompt's thresholds, where prompts lean"
    )
    return "; ".join(reasons) + f"; {why}, the decision from this pair's judgments alone"


_FLIP = {
    "net_ci_low": "net_ci_high",
    "net_ci_high": "net_ci_low",
    "observed_ci_low": "observed_ci_high",
    "observed_ci_high": "observed_ci_low",
    "model_net_ci_low": "model_net_ci_high",
    "model_net_ci_high": "model_net_ci_low",
}


def _oriented(effect: dict[str, np.ndarray], i: int, sign: float) -> dict:
    """Row ``i`` of :func:`net_effect` in the reported orientation (sign -1: A and B swapped)."""
    out: dict[str, bool | float] = {}
    for key, values in effect.items():
        value = values[i]
        if isinstance(value, (bool, np.bool_)):
            out[key] = bool(value)
        elif key in ("net_sd", "observed_se", "model_net_sd"):
            out[key] = float(value)
        else:
            out[_FLIP.get(key, key) if sign < 0 else key] = float(sign * value)
    return out


def observed_p_values(cells: CellData) -> tuple[np.ndarray, np.ndarray]:
    """(C,) observed net preference (stored orientation) and its two-sided t-test p-value.

    Prompts are the units (:func:`adaptive.stopping.evidence.net_preference`); a comparison with
    fewer than two prompts gets p = 1. Where every prompt has the same non-zero mean (no
    spread: the t statistic is undefined) the p-value is the sign test's, 2^(1 - prompts):
    under the null a prompt leans either way with equal chance, so n prompts all on one side
    have probability 2^(1 - n) at most.
    """
    obs = observed_of_cells(cells)
    return obs.mean, obs.p


def observed_of_cells(cells: CellData) -> ObservedNet:
    """:func:`observed_p_values` with the standard error (:func:`observed_net` of the cells'
    judgments)."""
    return observed_net(
        cells.judgment_comparison,
        cells.judgment_prompt,
        cells.judgment_y - 1,
        cells.num_comparisons,
    )


def data_verdicts(
    cells: CellData, rule: str = "holm", alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """(C,) observed net preference and the data half's adjusted verdicts: each
    comparison's own prompts-as-units test (:func:`observed_p_values`), adjusted over the
    dimension's comparisons. No model enters it, so a campaign whose data half flags
    nothing is flagged by no model (:func:`compare` needs both halves)."""
    mean, p = observed_p_values(cells)
    return mean, adjusted_verdicts(p, rule, alpha)


class ObservedNet(NamedTuple):
    """The data's own Δ of each comparison ((C,) arrays, stored orientation)."""

    mean: np.ndarray  # mean over prompts of each cell's mean signed judgment; 0 if never judged
    se: np.ndarray  # between-prompt sd / sqrt(prompts); NaN with fewer than two prompts
    p: np.ndarray  # two-sided p-value (t-test, or the sign test without spread); 1 if < 2 prompts


def observed_from_judgments(
    comparison: np.ndarray,
    prompt: np.ndarray,
    signed: np.ndarray,
    num_comparisons: int,
    weight: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`observed_p_values` from per-judgment arrays: comparison and prompt indices and
    the signed judgment (+1 the comparison's second system, -1 its first, 0 a tie), with
    optional per-judgment weights (:func:`adaptive.stopping.evidence.net_preference`)."""
    obs = observed_net(comparison, prompt, signed, num_comparisons, weight=weight)
    return obs.mean, obs.p


def observed_net(
    comparison: np.ndarray,
    prompt: np.ndarray,
    signed: np.ndarray,
    num_comparisons: int,
    weight: np.ndarray | None = None,
) -> ObservedNet:
    """:func:`observed_from_judgments` with the standard error the p-value came from."""
    from scipy import special

    from adaptive.stopping.evidence import net_preference

    obs = net_preference(comparison, prompt, signed, num_comparisons, weight=weight)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(obs.se > 0, obs.mean / obs.se, 0.0)
    # Student's t tail (scipy.stats.t.sf, without scipy.stats' import time)
    p = 2.0 * special.stdtr(np.maximum(obs.num_prompts - 1, 1), -np.abs(np.nan_to_num(t)))
    one_sided = (np.nan_to_num(obs.se) == 0) & (np.nan_to_num(obs.mean) != 0)
    p = np.where(one_sided, np.minimum(1.0, 2.0 ** (1.0 - obs.num_prompts)), p)
    p = np.where(obs.num_prompts >= 2, p, 1.0)
    return ObservedNet(np.nan_to_num(obs.mean), obs.se, p)


def _note(row: dict, *, per_system: bool) -> str:
    notes = []
    if not row["verdict_settled"]:
        notes.append(
            f"the interval's end nearest 0 is within {MCSE_Z:g} Monte Carlo errors "
            f"({row['ci_mcse']:.3f}) of 0: more draws (--draws) would settle the verdict"
        )
    if not row["sign_agrees"]:
        notes.append("model and data disagree on the sign of the net preference")
    if row["ppc_flag"]:
        notes.append(
            "the comparison's own judgments disagree with the leaderboard's implied difference"
            if per_system
            else "the observed net preference is outside what the model predicts"
        )
    return "; ".join(notes)


#: draws of the cells' fitted means used for their leverages and the model's Δ interval
ASSISTED_DRAWS = 400


def assisted_effect(
    posterior: Posterior, cells: CellData, *, level: float = 0.95, net_rating: bool = False
) -> dict[str, np.ndarray]:
    """:func:`net_effect`'s columns for a fit without cell effects or lapses.

    Δ is the comparison's observed net preference over its cells, with the model-assisted
    interval of :func:`stan_free_models.net_estimate.estimate_net` (a Student t with one
    degree of freedom fewer than the cells); the model's own Δ is in ``model_net*``.
    """
    from scipy import special

    from adaptive.estimation.fitting import cell_of_observations
    from adaptive.stopping.evidence import net_preference
    from stan_free_models.net_estimate import estimate_net

    cell = cell_of_observations(cells, "judgment")
    num_cells = int(cell.max()) + 1 if len(cell) else 0
    count = np.bincount(cell, minlength=num_cells).astype(np.float64)
    signed = cells.judgment_y.astype(np.float64) - 1.0
    cell_comp = np.zeros(num_cells, np.int64)
    cell_item = np.zeros(num_cells, np.int64)
    cell_comp[cell] = cells.judgment_comparison
    cell_item[cell] = cells.judgment_item
    num = posterior.num_draws
    kept = np.linspace(0, num - 1, min(num, ASSISTED_DRAWS)).round().astype(np.int64)
    mode = posterior.info.get("mode_values")
    est = estimate_net(
        cell_comp,
        cell_item,
        np.bincount(cell, weights=signed, minlength=num_cells) / np.maximum(count, 1.0),
        # the paper's net rating is one response per cell, whatever its judgments
        np.ones(num_cells) if net_rating else count,
        cells.num_comparisons,
        posterior.flat("theta")[kept],
        posterior.flat("alpha")[kept],
        posterior.flat("b")[kept],
        point=None if mode is None else (mode["theta"], mode["alpha"], mode["b"]),
        level=level,
    )
    observed = net_preference(
        cells.judgment_comparison, cells.judgment_prompt, signed, cells.num_comparisons, level=level
    )
    with np.errstate(invalid="ignore"):
        # Student's t quantile (scipy.stats.t.ppf without scipy.stats' import time)
        q = special.stdtrit(np.maximum(est.num_cells - 1, 1), 0.5 + level / 2.0)
    return {
        "net_preference": est.delta,
        "net_sd": est.sd,
        "net_ci_low": np.maximum(est.delta - q * est.sd, -1.0),
        "net_ci_high": np.minimum(est.delta + q * est.sd, 1.0),
        "model_net": est.model_delta,
        "model_net_sd": est.model_sd,
        "model_net_ci_low": est.model_low,
        "model_net_ci_high": est.model_high,
        "observed_net": observed.mean,
        "observed_se": observed.se,
        "observed_ci_low": observed.ci_low,
        "observed_ci_high": observed.ci_high,
        "ppc_z": est.check_z,
        "ppc_flag": np.abs(est.check_z) > PPC_Z,
        "sign_agrees": ~((np.sign(est.model_delta) * np.sign(observed.mean)) < 0),
    }


def net_effect(
    posterior: Posterior, cells: CellData, *, level: float = 0.95, max_draws: int = 1000
) -> dict[str, np.ndarray]:
    """The net preference Δ of every comparison, as the fit implies it and as observed.

    Returns (C,) arrays in the stored orientation: ``net_preference, net_sd,
    net_ci_low, net_ci_high`` (model), ``observed_net, observed_se,
    observed_ci_low, observed_ci_high`` (the data), ``ppc_z, ppc_flag,
    sign_agrees``.
    """
    import jax

    from adaptive.estimation.fitting import model_data
    from adaptive.stopping.evidence import net_preference
    from stan_free_models.predictive import implied_net_preference

    b = posterior.flat("b")
    likelihood = "judgment" if b.shape[-1] == 2 else "net"
    per_system = "skill" in posterior.draws
    cell_effect = "tau" in posterior.draws
    data = model_data(
        cells,
        likelihood=likelihood,
        parameterization="system" if per_system else "comparison",
        cell_effect=cell_effect,
    )
    if not cell_effect and "lapse" not in posterior.draws:
        return assisted_effect(posterior, cells, level=level, net_rating=likelihood == "net")
    implied = implied_net_preference(
        data,
        posterior.flat("theta"),
        posterior.flat("alpha"),
        b,
        posterior.flat("tau") if cell_effect else None,
        lapse=posterior.flat("lapse") if "lapse" in posterior.draws else None,
        rng_key=jax.random.PRNGKey(1),
        max_draws=max_draws,
    )
    delta = implied.delta
    components = posterior.info.get("components")
    if posterior.info.get("items_exact"):
        components = None  # the draws are the posterior's: their mean is the estimate
    elif components is None and posterior.info.get("mode_values") is not None:
        components = [
            {"start": 0, "stop": posterior.num_draws, "mode_values": posterior.info["mode_values"]}
        ]
    if components is not None:
        # Laplace: the draws are Gaussian in the unconstrained space, and Δ bends under
        # the transforms (a log-normal threshold gap, the ordering), so their mean drifts
        # off the mode (by 2 sd on simulated campaigns). Centre them on the plug-in at the
        # mode, as the Laplace approximation (a normal around the mode) says; with tau
        # integrated over a grid, each grid point's draws on its own mode.
        num = posterior.num_draws
        kept = np.linspace(0, num - 1, min(num, max_draws)).round().astype(np.int64)
        delta = delta.copy()
        for comp in components:
            rows = (kept >= comp["start"]) & (kept < comp["stop"])
            if not rows.any():
                continue
            mode = comp["mode_values"]
            at_mode = implied_net_preference(
                data,
                mode["theta"][None],
                mode["alpha"][None],
                mode["b"][None],
                np.array([mode["tau"]]) if cell_effect else None,
                lapse=np.array([mode["lapse"]]) if "lapse" in mode else None,
                rng_key=jax.random.PRNGKey(1),
                noise=False,
            )
            delta[rows] = delta[rows] - delta[rows].mean(axis=0) + at_mode.delta[0]
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(delta, [tail, 1.0 - tail], axis=0)
    observed = net_preference(
        cells.judgment_comparison,
        cells.judgment_prompt,
        cells.judgment_y - 1,
        cells.num_comparisons,
        level=level,
    )
    struct_mean = implied.structural.mean(axis=0)
    ppc_sd = np.sqrt(implied.replicate_var.mean(axis=0) + implied.structural.var(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        ppc_z = np.where(ppc_sd > 0, (observed.mean - struct_mean) / ppc_sd, 0.0)
    est = delta.mean(axis=0)
    sign_agrees = ~((np.sign(est) * np.sign(observed.mean)) < 0)
    return {
        "net_preference": est,
        "net_sd": delta.std(axis=0, ddof=1),
        "net_ci_low": low,
        "net_ci_high": high,
        "observed_net": observed.mean,
        "observed_se": observed.se,
        "observed_ci_low": observed.ci_low,
        "observed_ci_high": observed.ci_high,
        "ppc_z": np.nan_to_num(ppc_z),
        "ppc_flag": np.abs(np.nan_to_num(ppc_z)) > PPC_Z,
        "sign_agrees": sign_agrees,
    }
