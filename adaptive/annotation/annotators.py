"""Annotator screening: position bias and agreement with the other annotators.

Two screens, each reported per annotator with its evidence; flagged
annotators can be left out of a fit (:func:`exclude_flagged`), the data is
never changed.

(a) **Position bias** (Tack & Piech 2022, section 3.3, "Outlier Detection":
    "we reversed the method and computed different alpha parameters for each
    evaluator, combining the scores for all items evaluated by the
    evaluator"): per annotator and dimension, a Bradley-Terry model of that
    annotator's judgments alone (one ability per system, pooled over the
    annotator's items, and a position intercept, N(0, 1) priors); flagged
    when the 95% HDI of the intercept excludes 0 (> 0: keeps choosing the
    response shown first). The row says in how many dimensions the interval
    excludes 0. Needs to know which
    response was shown first (``shown_first``); without it the screen does not
    run unless the caller asserts that ``a`` was shown first.
(b) **Agreement** (Sedoc & Ungar 2020, section 5.3): the annotator's
    judgments are correlated with the mean judgment of the *other* annotators
    on the same cells; flagged when the correlation is not significantly above
    0 (one-sided test at ``alpha``). A judgment scores +1 / -1 / 0 when the
    alphabetically second / first system wins / tie; the annotator's scores
    over the dimensions of one (item, pair) are averaged first, because the
    dimensions of one screen are answered together and are not independent
    evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy import stats

from adaptive.leaderboards.bt import BTConfig, fit_dimension, intercept_rows, position_source
from stan_free_models.fit_settings import SHORT_NUTS

MIN_AGREEMENT_POINTS = 5


@dataclass(frozen=True)
class ScreenConfig:
    """How to screen. ``assume_a_first`` runs (a) without ``shown_first``, taking ``a`` as first."""

    ties: str = "davidson"
    method: str = "nuts"
    num_chains: int = SHORT_NUTS.num_chains  # one fit per annotator: a shorter warm-up
    num_warmup: int = SHORT_NUTS.num_warmup
    num_samples: int = SHORT_NUTS.num_samples
    seed: int = 0
    prob: float = 0.95
    alpha: float = 0.05
    assume_a_first: bool = False


def agreement_scores(judgments: pl.DataFrame) -> pl.DataFrame:
    """Per (annotator, item, pair): the annotator's mean score and the others' mean score.

    Scores are oriented to the alphabetical order of the pair (+1: the later
    name won). Returns columns annotator_id, item_id, pair, score, others,
    n_others.
    """
    lo = pl.min_horizontal("system_a", "system_b")
    hi = pl.max_horizontal("system_a", "system_b")
    winner_sys = (
        pl.when(pl.col("winner") == "a")
        .then(pl.col("system_a"))
        .when(pl.col("winner") == "b")
        .then(pl.col("system_b"))
        .otherwise(None)
    )
    df = judgments.with_columns(
        pl.concat_str([lo, hi], separator=" vs ").alias("pair"),
        pl.when(winner_sys.is_null())
        .then(0.0)
        .when(winner_sys == hi)
        .then(1.0)
        .otherwise(-1.0)
        .alias("s"),
    )
    cell = ["item_id", "pair", "dimension"]
    df = df.with_columns(
        pl.col("s").sum().over(cell).alias("cell_sum"),
        pl.len().over(cell).alias("cell_n"),
    ).with_columns(
        # leave-this-judgment-out mean of the other annotators on the same cell
        ((pl.col("cell_sum") - pl.col("s")) / (pl.col("cell_n") - 1)).alias("others"),
        (pl.col("cell_n") - 1).alias("n_others"),
    )
    df = df.filter(pl.col("n_others") > 0)
    return (
        df.group_by("annotator_id", "item_id", "pair")
        .agg(
            pl.col("s").mean().alias("score"),
            pl.col("others").mean().alias("others"),
            pl.col("n_others").min().alias("n_others"),
        )
        .sort("annotator_id", "item_id", "pair")
    )


def agreement_screen(judgments: pl.DataFrame, *, alpha: float = 0.05) -> dict[str, dict]:
    """Per annotator: Pearson r with the others, one-sided p-value for r > 0, flag.

    An annotator with fewer than ``MIN_AGREEMENT_POINTS`` shared (item, pair)
    points, or with constant answers, cannot be tested and is reported so.
    """
    scores = agreement_scores(judgments)
    out: dict[str, dict] = {}
    for (annotator,), part in scores.group_by(["annotator_id"], maintain_order=True):
        x = part["score"].to_numpy()
        y = part["others"].to_numpy()
        n = x.shape[0]
        row = {"agreement_n": n, "agreement_r": float("nan"), "agreement_p": float("nan")}
        if n < MIN_AGREEMENT_POINTS:
            row["agreement_flag"] = False
            row["agreement_note"] = f"only {n} shared item(s); not tested"
        elif np.std(x) == 0 or np.std(y) == 0:
            row["agreement_flag"] = True
            row["agreement_note"] = "constant answers; correlation undefined"
        else:
            r = float(np.corrcoef(x, y)[0, 1])
            res = stats.pearsonr(x, y, alternative="greater")
            row.update(agreement_r=r, agreement_p=float(res.pvalue))
            row["agreement_flag"] = bool(res.pvalue >= alpha)
            row["agreement_note"] = (
                f"r = {r:.2f} with the others (n = {n}), one-sided p = {res.pvalue:.3f}"
            )
        out[annotator] = row
    return out


def position_screen(
    judgments: pl.DataFrame, config: ScreenConfig = ScreenConfig()
) -> tuple[dict[str, dict], str]:
    """Per annotator: its position intercept in every dimension, and a flag.

    Returns:
        (rows by annotator, position source): the source is ``shown_first``,
        ``assumed_a`` (when ``config.assume_a_first``) or ``unavailable``.
    """
    source = position_source(judgments)
    if source != "shown_first" and not config.assume_a_first:
        return {}, "unavailable"
    bt_config = BTConfig(
        by="item",
        ties=config.ties,
        method=config.method,
        num_chains=config.num_chains,
        num_warmup=config.num_warmup,
        num_samples=config.num_samples,
        seed=config.seed,
        prob=config.prob,
    )
    out: dict[str, dict] = {}
    for dim in judgments["dimension"].unique(maintain_order=True).to_list():
        # one fit per annotator (abilities and intercept from its own judgments only),
        # run as one block-diagonal model: the fits share no parameter
        fit = fit_dimension(judgments, dim, bt_config, groups="annotator_id", scope="annotator_id")
        for r in intercept_rows(fit):
            row = out.setdefault(r["group"], {"position": {}})
            row["position"][dim] = r
    for row in out.values():
        per_dim = row["position"]
        flagged = [d for d, r in per_dim.items() if r["ci_low"] > 0 or r["ci_high"] < 0]
        strongest = max(per_dim.values(), key=lambda r: abs(r["mean"]) / max(r["sd"], 1e-9))
        row.update(
            position_intercept=float(np.mean([r["mean"] for r in per_dim.values()])),
            position_ci_low=strongest["ci_low"],
            position_ci_high=strongest["ci_high"],
            position_strongest_dimension=strongest["dimension"],
            position_dims_flagged=len(flagged),
            position_flag=bool(flagged),
            position_note=(
                "intercept HDI excludes 0 in "
                + ", ".join(
                    f"{d} ({per_dim[d]['mean']:+.2f} [{per_dim[d]['ci_low']:+.2f}, "
                    f"{per_dim[d]['ci_high']:+.2f}])"
                    for d in flagged
                )
                if flagged
                else ""
            ),
        )
    return out, source


def screen_annotators(
    judgments: pl.DataFrame, config: ScreenConfig = ScreenConfig()
) -> tuple[list[dict], dict]:
    """Both screens: one flat row per annotator, and an info dict (what ran, rules).

    Each row has annotator_id, n_judgments, share_first_chosen (share of
    non-tie judgments won by the response shown first), the position intercept
    (mean over dimensions) and the HDI of its strongest dimension, the number
    of dimensions whose HDI excludes 0, the agreement r / p / n, the flags and
    a ``reasons`` string.
    """
    source = position_source(judgments)
    if source == "shown_first":
        first_won = pl.col("winner") == pl.col("shown_first").fill_null("a")
    else:
        first_won = pl.col("winner") == "a"
    base = (
        judgments.group_by("annotator_id", maintain_order=True)
        .agg(
            pl.len().alias("n_judgments"),
            pl.col("item_id").n_unique().alias("n_items"),
            (first_won.cast(pl.Float64).sum() / (pl.col("winner") != "tie").sum()).alias(
                "share_first_chosen"
            ),
        )
        .sort("annotator_id")
    )
    position, pos_source = position_screen(judgments, config)
    agreement = agreement_screen(judgments, alpha=config.alpha)
    rows = []
    for annotator, n_judg, n_items, share in base.iter_rows():
        row: dict = {
            "annotator_id": annotator,
            "n_judgments": n_judg,
            "n_items": n_items,
            "share_first_chosen": share,
        }
        reasons = []
        pos = position.get(annotator)
        if pos is not None:
            row.update({k: v for k, v in pos.items() if k != "position"})
            if pos["position_flag"]:
                reasons.append("position bias: " + pos["position_note"])
        else:
            row.update(
                position_intercept=None,
                position_ci_low=None,
                position_ci_high=None,
                position_dims_flagged=None,
                position_flag=None,
            )
        agr = agreement.get(annotator, {"agreement_flag": False, "agreement_note": "no overlap"})
        row.update({k: v for k, v in agr.items() if k != "agreement_note"})
        row["agreement_flag"] = bool(agr["agreement_flag"])
        if agr["agreement_flag"]:
            reasons.append("low agreement: " + agr["agreement_note"])
        row["flagged"] = bool(row["agreement_flag"] or bool(row.get("position_flag")))
        row["reasons"] = "; ".join(reasons)
        rows.append(row)
    info = {
        "position_source": pos_source,
        "position_rule": f"{int(config.prob * 100)}% HDI of the annotator's intercept excludes 0 "
        "in at least one dimension",
        "agreement_rule": f"one-sided Pearson test of r > 0 with the other annotators, alpha = "
        f"{config.alpha}",
    }
    if pos_source == "unavailable":
        info["position_note"] = (
            "position screen not run: the data has no shown_first column saying which "
            "response each annotator saw first (pass assume_a_first to treat 'a' as first)"
        )
    elif pos_source == "assumed_a":
        info["position_note"] = "position screen assumes response 'a' was shown first"
    return rows, info


def flagged_annotators(rows: list[dict]) -> list[str]:
    """Ids of the flagged annotators of a screen."""
    return [r["annotator_id"] for r in rows if r["flagged"]]


def exclude_flagged(judgments: pl.DataFrame, rows: list[dict]) -> pl.DataFrame:
    """The judgments without the flagged annotators (a filtered view; nothing is deleted)."""
    return judgments.filter(~pl.col("annotator_id").is_in(flagged_annotators(rows)))
