"""Bradley-Terry analyses of pairwise judgments: per item or pooled, per dimension.

* ``by="item"`` (Tack & Piech's setting, several responders per dialogue
  item): one ability per (item, system) and one position intercept per item,
  fitted jointly for all items of a dimension (the items share no parameter
  except Davidson's tie parameter, so this equals separate per-item fits).
* ``by="pooled"``: one ability per system and one position intercept: a
  leaderboard.

Ties ("I cannot tell"):

* ``davidson`` (default): Davidson's tie model, ties are data;
* ``random``: the paper's treatment, each tie becomes a win for a or b with
  probability 1/2, reproducible under ``seed``;
* ``drop``: ties are left out.

Position: the first-shown response is the one in ``shown_first`` when the
data has that column; otherwise response ``a`` is taken as shown first (the
``position_source`` of every fit says which).

Sign convention: a difference "A vs B" is ability(B) - ability(A), > 0 when B
is better (as everywhere in the product).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np
import polars as pl

from adaptive.core.data import DataError
from stan_free_models.bradley_terry import FIRST, SECOND, TIE
from stan_free_models.bt_inference import BTData, MLEResult, fit_laplace, fit_mle, fit_nuts
from stan_free_models.fit_settings import NutsSettings
from stan_free_models.posterior import Posterior

TIE_TREATMENTS = ("davidson", "random", "drop")
BY = ("item", "pooled")
METHODS = ("nuts", "laplace", "mle")


def hdi(draws: np.ndarray, prob: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Highest-density interval of each column of ``draws`` (num_draws, ...).

    The narrowest window holding floor(prob * n) + 1 sorted draws, as
    ``arviz.hdi`` computes it (tested against it); vectorised over columns
    because a per-item fit has hundreds of parameters.
    """
    x = np.sort(np.asarray(draws, dtype=np.float64), axis=0)
    n = x.shape[0]
    inc = int(np.floor(prob * n))
    if inc >= n:
        return x[0], x[-1]
    width = x[inc:] - x[: n - inc]
    idx = np.argmin(width, axis=0)
    low = np.take_along_axis(x, idx[None], axis=0)[0]
    high = np.take_along_axis(x, (idx + inc)[None], axis=0)[0]
    return low, high


@dataclass(frozen=True)
class BTConfig:
    """How to fit. The defaults follow the paper (N(0, 1) priors, 4 x 1,000 NUTS draws)."""

    by: str = "item"
    ties: str = "davidson"
    method: str = "nuts"
    position: bool = True
    # NUTS's run (stan_free_models.fit_settings.NutsSettings's defaults: the paper's)
    num_chains: int = NutsSettings.num_chains
    num_warmup: int = NutsSettings.num_warmup
    num_samples: int = NutsSettings.num_samples
    num_draws: int = 4000
    seed: int = 0
    prob: float = 0.95
    reference: str | None = None  # mle: the system pinned to 0 (default: the first seen)

    def __post_init__(self) -> None:
        if self.by not in BY:
            raise ValueError(f"unknown --by {self.by!r}; expected one of {BY}")
        if self.ties not in TIE_TREATMENTS:
            raise ValueError(f"unknown tie treatment {self.ties!r}; expected {TIE_TREATMENTS}")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; expected one of {METHODS}")


def resolve_ties(judgments: pl.DataFrame, ties: str, seed: int = 0) -> pl.DataFrame:
    """Apply a tie treatment to the judgments (a new frame; the input is unchanged).

    ``random`` draws one fair coin per tie, in row order, from ``seed``: the
    same file and seed always give the same resolved data.
    """
    if ties not in TIE_TREATMENTS:
        raise ValueError(f"unknown tie treatment {ties!r}; expected {TIE_TREATMENTS}")
    if ties == "davidson":
        return judgments
    if ties == "drop":
        return judgments.filter(pl.col("winner") != "tie")
    is_tie = (judgments["winner"] == "tie").to_numpy()
    coin = np.random.default_rng(seed).integers(0, 2, size=int(is_tie.sum()))
    winner = judgments["winner"].to_numpy().astype(object)
    winner[is_tie] = np.where(coin == 1, "a", "b")
    return judgments.with_columns(pl.Series("winner", winner.astype(str)))


def position_source(judgments: pl.DataFrame) -> str:
    """``shown_first`` when the data says which response was shown first, else ``assumed_a``."""
    if "shown_first" in judgments.columns and judgments["shown_first"].is_not_null().any():
        return "shown_first"
    return "assumed_a"


def outcome_codes(judgments: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(a_shown_first, y) per judgment: y 0 second preferred, 1 tie, 2 first preferred."""
    if position_source(judgments) == "shown_first":
        a_first = (judgments["shown_first"].fill_null("a") == "a").to_numpy()
    else:
        a_first = np.ones(judgments.height, dtype=bool)
    winner = judgments["winner"].to_numpy()
    a_won = winner == "a"
    y = np.where(winner == "tie", TIE, np.where(a_won == a_first, FIRST, SECOND))
    return a_first, y.astype(np.int64)


@dataclass(frozen=True)
class BTInput:
    """One dimension's judgments as Bradley-Terry data plus the index <-> name maps."""

    data: BTData
    dimension: str
    players: tuple[tuple[str, str], ...]  # (item_id or "", system)
    groups: tuple[str, ...]
    position_source: str
    num_judgments: int
    judgments_per_player: np.ndarray
    # the judgments as the data's own check reads them (:func:`difference_rows`): per judgment,
    # its systems (indices into :attr:`systems`), its item and its signed outcome (+1 system_b
    # preferred, -1 system_a, 0 tie) and weight
    judgment_a: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    judgment_b: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    judgment_item: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    judgment_signed: np.ndarray = field(default_factory=lambda: np.zeros(0))
    judgment_weight: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def systems(self) -> tuple[str, ...]:
        """The systems in the order they first appear among the players."""
        return tuple(dict.fromkeys(s for _, s in self.players))


def build_input(
    judgments: pl.DataFrame,
    *,
    dimension: str,
    by: str = "item",
    tie_model: str = "none",
    position: bool = True,
    groups: str | None = None,
    scope: str | None = None,
    weight: np.ndarray | None = None,
) -> BTInput:
    """Index one dimension's (tie-resolved) judgments for the model.

    Args:
        judgments: validated judgments (ties already resolved unless ``tie_model="davidson"``).
        dimension: the dimension to keep.
        by: ``item`` (ability per (item, system)) or ``pooled`` (per system).
        groups: column whose values carry one intercept each (default: ``item_id``
            when ``by="item"``, one global intercept when pooled).
        scope: column whose values scope the abilities (default: ``item_id``
            when ``by="item"``, none when pooled); ``annotator_id`` gives every
            annotator its own abilities (the position screen's per-annotator fit).
        weight: optional per-judgment likelihood weights (aligned with ``judgments``).
    """
    mask = (judgments["dimension"] == dimension).to_numpy()
    df = judgments.filter(pl.Series(mask))
    if df.height == 0:
        raise DataError("<bt>", message=f"no judgments for dimension {dimension!r}")
    w = np.ones(df.height) if weight is None else np.asarray(weight, dtype=np.float64)[mask]
    scope = scope or ("item_id" if by == "item" else None)
    item = df[scope].to_list() if scope else [""] * df.height
    sys_a, sys_b = df["system_a"].to_list(), df["system_b"].to_list()
    players: dict[tuple[str, str], int] = {}
    for it, a, b in zip(item, sys_a, sys_b):
        for s in (a, b):
            players.setdefault((it, s), len(players))
    pa = np.array([players[(it, a)] for it, a in zip(item, sys_a)], dtype=np.int64)
    pb = np.array([players[(it, b)] for it, b in zip(item, sys_b)], dtype=np.int64)
    a_first, y = outcome_codes(df)
    first = np.where(a_first, pa, pb)
    second = np.where(a_first, pb, pa)
    group_col = groups or ("item_id" if by == "item" else None)
    if group_col is None:
        group_names: tuple[str, ...] = ("all",)
        group = np.zeros(df.height, dtype=np.int64)
    else:
        values = df[group_col].to_list()
        names = list(dict.fromkeys(values))
        index = {g: i for i, g in enumerate(names)}
        group = np.array([index[v] for v in values], dtype=np.int64)
        group_names = tuple(names)
    data = BTData(
        first=first,
        second=second,
        group=group,
        y=y,
        weight=w,
        num_players=len(players),
        num_groups=len(group_names),
        position=position,
        tie_model=tie_model,
    )
    counts = np.bincount(np.concatenate([pa, pb]), minlength=len(players))
    system_index = {s: i for i, s in enumerate(dict.fromkeys(s for _, s in players))}
    winner = df["winner"].to_numpy()
    return BTInput(
        data=data,
        dimension=dimension,
        players=tuple(players),
        groups=group_names,
        position_source=position_source(df),
        num_judgments=df.height,
        judgments_per_player=counts,
        judgment_a=np.array([system_index[a] for a in sys_a], dtype=np.int64),
        judgment_b=np.array([system_index[b] for b in sys_b], dtype=np.int64),
        judgment_item=np.unique(df["item_id"].to_numpy(), return_inverse=True)[1].astype(np.int64),
        judgment_signed=np.where(winner == "b", 1.0, np.where(winner == "a", -1.0, 0.0)),
        judgment_weight=w,
    )


@dataclass(frozen=True)
class BTFit:
    """A fitted dimension: the posterior (or MLE draws-free result) and its names."""

    input: BTInput
    config: BTConfig
    posterior: Posterior | None
    mle: MLEResult | None = None
    info: dict = field(default_factory=dict)

    @property
    def dimension(self) -> str:
        return self.input.dimension

    def ability_draws(self) -> np.ndarray:
        """(num_draws, num_players) ability draws (chains merged)."""
        assert self.posterior is not None, "an MLE fit has no draws"
        return self.posterior.flat("ability")


def fit_dimension(
    judgments: pl.DataFrame,
    dimension: str,
    config: BTConfig = BTConfig(),
    *,
    weight: np.ndarray | None = None,
    groups: str | None = None,
    scope: str | None = None,
) -> BTFit:
    """Fit one dimension under ``config`` (ties treated as it says)."""
    tie_model = "davidson" if config.ties == "davidson" else "none"
    resolved = resolve_ties(judgments, config.ties, config.seed)
    if weight is not None and config.ties == "drop":
        weight = np.asarray(weight)[(judgments["winner"] != "tie").to_numpy()]
    bt_in = build_input(
        resolved,
        dimension=dimension,
        by=config.by,
        tie_model=tie_model,
        position=config.position,
        groups=groups,
        scope=scope,
        weight=weight,
    )
    # one key per dimension, derived from the seed, so a dimension's fit does not depend on others
    key = jax.random.fold_in(jax.random.PRNGKey(config.seed), _stable_hash(dimension))
    if config.method == "nuts":
        post = fit_nuts(
            bt_in.data,
            rng_key=key,
            num_chains=config.num_chains,
            num_warmup=config.num_warmup,
            num_samples=config.num_samples,
        )
        return BTFit(bt_in, config, post)
    if config.method == "laplace":
        post = fit_laplace(bt_in.data, rng_key=key, num_draws=config.num_draws)
        return BTFit(bt_in, config, post)
    reference = 0
    if config.reference is not None:
        names = [s for _, s in bt_in.players]
        if config.reference not in names:
            raise ValueError(f"reference system {config.reference!r} not in {names}")
        reference = names.index(config.reference)
    return BTFit(bt_in, config, None, mle=fit_mle(bt_in.data, reference=reference))


def _stable_hash(text: str) -> int:
    return int.from_bytes(text.encode()[:4].ljust(4, b"\0"), "little") % (2**31)


def fit_bt(
    judgments: pl.DataFrame, config: BTConfig = BTConfig(), dimensions: list[str] | None = None
) -> list[BTFit]:
    """Fit every dimension (or the given ones) separately."""
    dims = dimensions or judgments["dimension"].unique(maintain_order=True).to_list()
    return [fit_dimension(judgments, d, config) for d in dims]


def rank_draws(ability: np.ndarray, players: tuple[tuple[str, str], ...]) -> np.ndarray:
    """Per draw, each player's rank among the players of its item (1 = best)."""
    ranks = np.zeros(ability.shape, dtype=np.int64)
    items: dict[str, list[int]] = {}
    for i, (item, _) in enumerate(players):
        items.setdefault(item, []).append(i)
    for idx in items.values():
        sub = ability[:, idx]
        # rank 1 + number of strictly better competitors in the same draw
        ranks[:, idx] = 1 + (sub[:, None, :] > sub[:, :, None]).sum(axis=2)
    return ranks


def ability_rows(fit: BTFit) -> list[dict]:
    """One row per (item, system): ability mean, sd, HDI, P(> 0) and rank posterior."""
    bt_in, prob = fit.input, fit.config.prob
    rows = []
    if fit.posterior is None:
        m = fit.mle
        assert m is not None  # without a posterior, the fit is the MLE
        for i, (item, system) in enumerate(bt_in.players):
            rows.append(
                {
                    "dimension": fit.dimension,
                    "item_id": item or None,
                    "system": system,
                    "mean": float(m.ability[i]),
                    "sd": float(m.ability_se[i]),
                    "ci_low": float(m.ability[i] - 1.959964 * m.ability_se[i]),
                    "ci_high": float(m.ability[i] + 1.959964 * m.ability_se[i]),
                    "reference": i == m.reference,
                    "n_judgments": int(bt_in.judgments_per_player[i]),
                    "method": "mle",
                }
            )
        return rows
    a = fit.ability_draws()
    low, high = hdi(a, prob)
    ranks = rank_draws(a, bt_in.players)
    r_low, r_high = hdi(ranks.astype(np.float64), prob)
    for i, (item, system) in enumerate(bt_in.players):
        rows.append(
            {
                "dimension": fit.dimension,
                "item_id": item or None,
                "system": system,
                "mean": float(a[:, i].mean()),
                "sd": float(a[:, i].std(ddof=1)),
                "ci_low": float(low[i]),
                "ci_high": float(high[i]),
                "p_positive": float((a[:, i] > 0).mean()),
                "rank_mean": float(ranks[:, i].mean()),
                "rank_sd": float(ranks[:, i].std(ddof=1)),
                "rank_ci_low": float(r_low[i]),
                "rank_ci_high": float(r_high[i]),
                "n_judgments": int(bt_in.judgments_per_player[i]),
                "ties": fit.config.ties,
                "method": fit.posterior.method,
            }
        )
    return rows


def intercept_rows(fit: BTFit) -> list[dict]:
    """One row per intercept group: the position effect (> 0: first shown preferred)."""
    bt_in = fit.input
    if not bt_in.data.position:
        return []
    if fit.posterior is None:
        m = fit.mle
        # without a posterior, the fit is the MLE; with a position effect, it has intercepts
        assert m is not None and m.intercept is not None and m.intercept_se is not None
        return [
            {
                "dimension": fit.dimension,
                "group": g,
                "mean": float(m.intercept[j]),
                "sd": float(m.intercept_se[j]),
                "ci_low": float(m.intercept[j] - 1.959964 * m.intercept_se[j]),
                "ci_high": float(m.intercept[j] + 1.959964 * m.intercept_se[j]),
                "position_source": bt_in.position_source,
            }
            for j, g in enumerate(bt_in.groups)
        ]
    x = fit.posterior.flat("intercept")
    low, high = hdi(x, fit.config.prob)
    counts = np.bincount(bt_in.data.group, minlength=len(bt_in.groups))
    return [
        {
            "dimension": fit.dimension,
            "group": g,
            "mean": float(x[:, j].mean()),
            "sd": float(x[:, j].std(ddof=1)),
            "ci_low": float(low[j]),
            "ci_high": float(high[j]),
            "excludes_zero": bool(low[j] > 0 or high[j] < 0),
            "n_judgments": int(counts[j]),
            "position_source": bt_in.position_source,
        }
        for j, g in enumerate(bt_in.groups)
    ]


def _systems(bt_in: BTInput) -> list[str]:
    return list(dict.fromkeys(s for _, s in bt_in.players))


def system_difference_draws(fit: BTFit) -> tuple[list[str], dict[tuple[str, str], np.ndarray]]:
    """Draws of ability(B) - ability(A) per system pair.

    Pooled: the difference of the systems' abilities. Per item: the mean over
    the items where both systems answered of the per-item difference (the
    paper's "mean ability of Blender vs the teacher", section 4.2).
    """
    bt_in = fit.input
    a = fit.ability_draws()
    systems = _systems(bt_in)
    where: dict[str, dict[str, int]] = {}
    for i, (item, s) in enumerate(bt_in.players):
        where.setdefault(s, {})[item] = i
    out = {}
    for x, sa in enumerate(systems):
        for sb in systems[x + 1 :]:
            common = [it for it in where[sa] if it in where[sb]]
            if not common:
                continue
            ia = [where[sa][it] for it in common]
            ib = [where[sb][it] for it in common]
            out[(sa, sb)] = (a[:, ib] - a[:, ia]).mean(axis=1)
    return systems, out


def observed_differences(
    bt_in: BTInput, pairs: list[tuple[str, str]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data's own view of each pair "A vs B", items as the units.

    Per pair: the mean over the items where the two were compared directly of each item's
    (weighted) mean signed judgment (+1 B preferred, -1 A, 0 tie), the two-sided p-value of
    its t-test (:func:`adaptive.estimation.significance.observed_from_judgments`; p = 1 with fewer than
    two items or a mean of 0, the sign test's 2^(1 - items) where every item has the same
    non-zero mean), and the number of items. The judgments are the ones the model
    fitted (ties as the fit treats them).
    """
    from adaptive.estimation.significance import observed_from_judgments

    index = {s: i for i, s in enumerate(bt_in.systems)}
    # (system, system) -> the pair's index (-1: not a pair asked about) and the sign that
    # turns a judgment stored that way round into the pair's orientation
    pair_of = np.full((len(index), len(index)), -1, dtype=np.int64)
    sign_of = np.zeros((len(index), len(index)))
    for k, (sa, sb) in enumerate(pairs):
        pair_of[index[sa], index[sb]], sign_of[index[sa], index[sb]] = k, 1.0
        pair_of[index[sb], index[sa]], sign_of[index[sb], index[sa]] = k, -1.0
    comparison = pair_of[bt_in.judgment_a, bt_in.judgment_b]
    keep = comparison >= 0
    comparison = comparison[keep]
    signed = sign_of[bt_in.judgment_a, bt_in.judgment_b][keep] * bt_in.judgment_signed[keep]
    item = bt_in.judgment_item[keep]
    weight = bt_in.judgment_weight[keep]
    mean, p = observed_from_judgments(comparison, item, signed, len(pairs), weight=weight)
    # the items each pair was judged on (with some weight): distinct (pair, item) cells
    width = int(item.max(initial=0)) + 1
    cells = np.unique(comparison[weight > 0] * width + item[weight > 0])
    num_items = np.bincount(cells // width, minlength=len(pairs))
    return mean, p, num_items.astype(np.int64)


def difference_rows(fit: BTFit, *, alpha: float = 0.05) -> list[dict]:
    """Per system pair "A vs B": mean, sd, HDI of ability(B) - ability(A), P(B better), verdicts.

    ``significant``: the 95% HDI excludes 0 (all pairs come from one joint fit).
    ``model_adjusted``: Holm's step-down on two-sided posterior tail probabilities over
    the pairs of this dimension. ``data_adjusted``: the same on the pairs' own data, a
    t-test of the observed net preference with items as the units
    (:func:`observed_differences`). ``significant_adjusted``, the verdict, needs both in
    the same direction, as ``evalset significance``'s does: the model counts every judgment
    as independent evidence, so when every annotator of an item sees the same responses
    (item-by-system quality, sd 0.5-1 on the logit scale) it flags systems that are equal
    over items in 10-45% of null campaigns, pooled or per item (docs/bradley_terry.md);
    the items-as-units test holds its level there. A pair never compared directly has no data of its own and is never
    ``significant_adjusted``.
    """
    from adaptive.estimation.significance import adjusted_verdicts

    if fit.posterior is None:
        return []
    _, diffs = system_difference_draws(fit)
    rows = []
    pvals = []
    for (sa, sb), d in diffs.items():
        low, high = hdi(d[:, None], fit.config.prob)
        p_b = float((d > 0).mean())
        p_two = max(2 * min(p_b, 1 - p_b), 1.0 / (d.shape[0] + 1))
        pvals.append(p_two)
        rows.append(
            {
                "dimension": fit.dimension,
                "system_a": sa,
                "system_b": sb,
                "mean": float(d.mean()),
                "sd": float(d.std(ddof=1)),
                "ci_low": float(low[0]),
                "ci_high": float(high[0]),
                "p_b_better": p_b,
                "significant": bool(low[0] > 0 or high[0] < 0),
                "p_two_sided": p_two,
                "by": fit.config.by,
            }
        )
    if not rows:
        return rows
    model_adjusted = adjusted_verdicts(np.array(pvals), "holm", alpha)
    observed, observed_p, num_items = observed_differences(fit.input, list(diffs))
    data_adjusted = adjusted_verdicts(observed_p, "holm", alpha)
    for k, r in enumerate(rows):
        agree = bool(np.sign(r["mean"]) == np.sign(observed[k]))
        r["significant_adjusted"] = bool(model_adjusted[k] and data_adjusted[k] and agree)
        r["model_adjusted"] = bool(model_adjusted[k])
        r["data_adjusted"] = bool(data_adjusted[k])
        r["observed_net"] = float(observed[k]) if num_items[k] > 0 else None
        r["observed_p"] = float(observed_p[k])
        r["n_items"] = int(num_items[k])
        r["adjust_rule"] = "holm on the model and on the data"
    return rows


def summary_rows(fits: list[BTFit]) -> list[dict]:
    """All dimensions side by side: one row per system, columns ``<dimension>_<stat>``.

    Pooled fits give the system's ability and HDI; per-item fits give the mean
    over items of the posterior mean ability, the share of items with a
    positive ability and with a 95% HDI excluding 0 (Tack & Piech, Table 3),
    and the mean rank.
    """
    table: dict[str, dict] = {}
    for fit in fits:
        rows = ability_rows(fit)
        dim = fit.dimension
        by_system: dict[str, list[dict]] = {}
        for r in rows:
            by_system.setdefault(r["system"], []).append(r)
        for system, rs in by_system.items():
            row = table.setdefault(system, {"system": system})
            means = np.array([r["mean"] for r in rs])
            row[f"{dim}_mean"] = float(means.mean())
            if fit.config.by == "pooled" or len(rs) == 1:
                row[f"{dim}_ci_low"] = rs[0]["ci_low"]
                row[f"{dim}_ci_high"] = rs[0]["ci_high"]
            else:
                row[f"{dim}_share_positive"] = float((means > 0).mean())
                row[f"{dim}_share_ci_excludes_0"] = float(
                    np.mean([r["ci_low"] > 0 or r["ci_high"] < 0 for r in rs])
                )
            if "rank_mean" in rs[0]:
                row[f"{dim}_rank_mean"] = float(np.mean([r["rank_mean"] for r in rs]))
    return list(table.values())


def diagnostics_rows(fits: list[BTFit]) -> list[dict]:
    """One row per fitted dimension: sizes and convergence diagnostics."""
    out = []
    for fit in fits:
        row = {
            "dimension": fit.dimension,
            "n_judgments": fit.input.num_judgments,
            "n_players": len(fit.input.players),
            "ties": fit.config.ties,
            "position_source": fit.input.position_source,
        }
        if fit.posterior is not None:
            row.update(fit.posterior.diagnostics.summary())
            if "nu" in fit.posterior.draws:
                row["nu_mean"] = float(fit.posterior.mean("nu"))
        out.append(row)
    return out
