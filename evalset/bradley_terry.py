"""Bradley-Terry for notebooks: the pooled leaderboard and the annotator screen."""

from __future__ import annotations

from typing import Any

import polars as pl

from evalset._common import _dims, _method, read


def _bt_fit(judgments: pl.DataFrame, dim: str, method: str, ties: str, seed: int, **kw: Any) -> Any:
    from adaptive.leaderboards.bt import BTConfig, fit_dimension

    bt_method = {"fast": "laplace", "nuts": "nuts"}[_method(method)]
    return fit_dimension(judgments, dim, BTConfig(by="pooled", method=bt_method, ties=ties,
                                                   seed=seed, **kw))  # fmt: skip


def leaderboard(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    ties: str = "davidson",
    reference: str | None = None,
    level: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """Pooled Bradley-Terry abilities with a position effect, best first.

    Abilities are only defined up to a constant; they are reported **sum-to-zero**
    (the average system is 0) or, with ``reference``, relative to that system (its
    ability is 0 and every interval is of the difference from it). The ``scale``
    column says which. Also ``rank_mean``, ``p_best`` and ``n_judgments``.

    Example:
        >>> from evalset import example
        >>> board = leaderboard(example(num_systems=3, num_prompts=10))
        >>> board["system"].to_list(), board["scale"][0]
        (['s2', 's1', 's0'], 'sum-to-zero')
    """
    from adaptive.leaderboards.bt import hdi

    judgments = read(data)
    rows = []
    for dim in _dims(judgments, dimension):
        result = _bt_fit(judgments, dim, method, ties, seed)
        names = [s for _, s in result.input.players]
        draws = result.ability_draws()
        if reference is None:
            draws = draws - draws.mean(axis=1, keepdims=True)
            scale = "sum-to-zero"
        else:
            if reference not in names:
                raise ValueError(f"reference system {reference!r} not in {names}")
            draws = draws - draws[:, [names.index(reference)]]
            scale = f"relative to {reference}"
        low, high = hdi(draws, level)
        ranks = 1 + (draws[:, None, :] > draws[:, :, None]).sum(axis=2)
        for i, name in enumerate(names):
            rows.append(
                {
                    "dimension": dim,
                    "system": name,
                    "ability": float(draws[:, i].mean()),
                    "sd": float(draws[:, i].std(ddof=1)),
                    "ci_low": float(low[i]),
                    "ci_high": float(high[i]),
                    "rank_mean": float(ranks[:, i].mean()),
                    "p_best": float((ranks[:, i] == 1).mean()),
                    "n_judgments": int(result.input.judgments_per_player[i]),
                    "scale": scale,
                    "method": result.posterior.method,
                }
            )
    return pl.DataFrame(rows).sort(["dimension", "ability"], descending=[False, True])


def annotators(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    assume_a_first: bool = False,
    test_level: float = 0.05,
    seed: int = 0,
    alpha: float | None = None,
) -> pl.DataFrame:
    """Per annotator: position bias (interval), agreement with the others, flags
    (:func:`adaptive.annotation.annotators.screen_annotators`). Without a ``shown_first`` column
    the position screen needs ``assume_a_first=True`` (response a shown first).
    ``test_level``: the level of the agreement test (``alpha`` is its former name,
    deprecated: alpha is the decision level)."""
    import warnings

    if alpha is not None:
        warnings.warn(
            "annotators(alpha=...) is now test_level=...: alpha is the decision level",
            DeprecationWarning,
            stacklevel=2,
        )
        test_level = alpha
    from adaptive.annotation.annotators import ScreenConfig, screen_annotators

    judgments = read(data)
    if dimension is not None:
        judgments = judgments.filter(pl.col("dimension") == dimension)
    bt_method = {"fast": "laplace", "nuts": "nuts"}[_method(method)]
    config = ScreenConfig(
        method=bt_method, assume_a_first=assume_a_first, alpha=test_level, seed=seed
    )
    rows, _ = screen_annotators(judgments, config)
    return pl.DataFrame(rows, infer_schema_length=None)


def elo(
    data: Any,
    *,
    dimension: str | None = None,
    rounds: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    anchor: tuple[str, float] | None = None,
    bootstrap: str = "judgment",
) -> pl.DataFrame:
    """Arena-style Elo leaderboard (:mod:`adaptive.leaderboards.elo`): maximum-likelihood ratings on the Elo
    scale (the average system at 1000, ties half a win), bootstrap percentile intervals over
    ``rounds`` resamples, and each system's rank interval; best first.

    Columns ``dimension, rank, system, elo, ci_low, ci_high, rank_best, rank_worst,
    n_judgments``. ``ci_low, ci_high``: each rating's percentile interval at ``level`` (as
    Arena reports them). ``rank_best, rank_worst``: ranks that hold for every system at once
    at ``level``, from intervals at ``1 - (1 - level) / systems`` (Bonferroni). ``anchor``:
    ``(system, rating)`` shifts every rating (and interval) so that system has that rating
    (Arena anchors one model). ``bootstrap``: ``judgment`` resamples battles (the notebook's
    method: ``tests/adaptive/leaderboards/test_elo.py`` compares them), ``prompt`` resamples whole prompts (their
    judgments are not independent). Every judgment is one battle (no position effect).

    Example:
        >>> from evalset import example
        >>> board = elo(example(num_systems=3, num_prompts=10), rounds=50)
        >>> board["system"].to_list()
        ['s2', 's1', 's0']
    """
    import numpy as np

    from adaptive.leaderboards.elo import (
        battles_of,
        bootstrap_ratings,
        mle_ratings,
        rank_intervals,
        win_table,
    )

    if rounds < 10:
        raise ValueError("rounds must be at least 10 (the interval's resamples)")
    if not 0.5 < level < 1:
        raise ValueError("level must be between 0.5 and 1")
    if bootstrap not in ("judgment", "prompt"):
        raise ValueError(f"bootstrap must be 'judgment' or 'prompt' (got {bootstrap!r})")
    judgments = read(data)
    rows: list[dict[str, Any]] = []
    for dim in _dims(judgments, dimension):
        frame = judgments.filter(pl.col("dimension") == dim)
        battles = battles_of(
            frame["system_a"].to_list(), frame["system_b"].to_list(), frame["winner"].to_list()
        )
        systems = battles.systems
        index = {s: i for i, s in enumerate(systems)}
        ratings = mle_ratings(win_table(battles))
        clusters = None
        if bootstrap == "prompt":
            clusters = frame["item_id"].cast(pl.Categorical).to_physical().to_numpy()
        boot = bootstrap_ratings(battles, rounds, seed, clusters)
        tail = (1 - level) / 2 / len(systems)
        joint_low, joint_high = np.quantile(boot, [tail, 1 - tail], axis=0)
        best, worst = rank_intervals(joint_low, joint_high)  # whatever the anchor
        if anchor is not None:  # in every resample, as the notebook anchors its rounds
            name, value = anchor
            if name not in index:
                raise ValueError(f"anchor system {name!r} is not in {list(systems)}")
            boot = boot + (value - boot[:, [index[name]]])
            ratings = ratings + (value - ratings[index[name]])
        low, high = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], axis=0)
        counts = np.bincount(np.concatenate([battles.a, battles.b]), minlength=len(systems))
        order = np.argsort(-ratings, kind="stable")
        for rank, i in enumerate(order, start=1):
            rows.append(
                {
                    "dimension": dim,
                    "rank": rank,
                    "system": systems[i],
                    "elo": float(ratings[i]),
                    "ci_low": float(low[i]),
                    "ci_high": float(high[i]),
                    "rank_best": int(best[i]),
                    "rank_worst": int(worst[i]),
                    "n_judgments": int(counts[i]),
                }
            )
    return pl.DataFrame(rows)
