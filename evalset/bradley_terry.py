"""Bradley-Terry for notebooks: the pooled leaderboard and the annotator screen."""

from __future__ import annotations

from typing import Any

import polars as pl

from evalset._common import _dims, _method, read


def _bt_fit(
    judgments: pl.DataFrame, dim: str, method: str, ties: str, seed: int,
    weight: Any = None, **kw: Any,
) -> Any:  # fmt: skip
    from adaptive.leaderboards.bt import BTConfig, fit_dimension

    bt_method = {"fast": "laplace", "nuts": "nuts"}[_method(method)]
    config = BTConfig(by="pooled", method=bt_method, ties=ties, seed=seed, **kw)
    return fit_dimension(judgments, dim, config, weight=weight)


def cell_weights(judgments: pl.DataFrame) -> Any:
    """Each judgment's weight 1 / (judgments of its cell): a (dimension, pair of systems,
    prompt) cell counts once, however many annotators judged it (the decisions' unit)."""
    low = pl.min_horizontal("system_a", "system_b")
    high = pl.max_horizontal("system_a", "system_b")
    size = pl.len().over("dimension", low, high, "item_id")
    return judgments.select(1.0 / size).to_series().to_numpy()


def leaderboard(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    ties: str = "davidson",
    reference: str | None = None,
    level: float = 0.95,
    seed: int = 0,
    unit: str = "prompt",
) -> pl.DataFrame:
    """Pooled Bradley-Terry abilities with a position effect, best first.

    Abilities are only defined up to a constant; they are reported **sum-to-zero**
    (the average system is 0) or, with ``reference``, relative to that system (its
    ability is 0 and every interval is of the difference from it). The ``scale``
    column says which. Also ``rank_mean``, ``p_best`` and ``n_judgments``.
    ``unit``: ``prompt`` (default) weighs each judgment 1 / (judgments of its cell, a pair's
    prompt), so a cell judged by three annotators counts once, as in the decisions;
    ``judgment`` counts every judgment as independent. ``decided_group, decided_ranks,
    note``: the decisions' ``ranking`` answer at ``1 - level`` beside the row; the note names
    the systems the decisions do not put below one whose ``p_best`` reaches ``level``.

    Example:
        >>> from evalset import example
        >>> board = leaderboard(example(num_systems=3, num_prompts=10))
        >>> board["system"].to_list(), board["scale"][0]
        (['s2', 's1', 's0'], 'sum-to-zero')
    """
    from adaptive.leaderboards.bt import hdi
    from evalset.ranking_beside import decided_ranking

    if unit not in ("prompt", "judgment"):
        raise ValueError(f"unit must be 'prompt' or 'judgment' (got {unit!r})")
    judgments = read(data)
    weight = cell_weights(judgments) if unit == "prompt" else None
    dims = _dims(judgments, dimension)
    decided = decided_ranking(judgments.filter(pl.col("dimension").is_in(dims)), level)
    rows = []
    for dim in dims:
        result = _bt_fit(judgments, dim, method, ties, seed, weight)
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
        board = []
        for i, name in enumerate(names):
            board.append(
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
        rows += _beside_bt(decided, dim, board, level)
    return pl.DataFrame(rows).sort(["dimension", "ability"], descending=[False, True])


def _beside_bt(
    decided: Any, dim: str, board: list[dict[str, Any]], level: float
) -> list[dict[str, Any]]:
    """Bradley-Terry rows with the decided ranking's columns."""
    from evalset.ranking_beside import best_notes, group_columns

    notes = best_notes(decided, dim, board, level)
    return [r | group_columns(decided, dim, r["system"]) | {"note": n}
            for r, n in zip(board, notes, strict=True)]  # fmt: skip


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
    bootstrap: str = "prompt",
) -> pl.DataFrame:
    """Arena-style Elo leaderboard (:mod:`adaptive.leaderboards.elo`): maximum-likelihood ratings on the Elo
    scale (the average system at 1000, ties half a win), bootstrap percentile intervals over
    ``rounds`` resamples, and each system's rank interval; best first.

    Columns ``dimension, rank, system, elo, ci_low, ci_high, rank_best, rank_worst,
    n_judgments, decided_group, decided_ranks, note``. ``ci_low, ci_high``: each rating's
    percentile interval at ``level`` (as Arena reports them). ``rank_best, rank_worst``: ranks
    that hold for every system at once at ``level``, from intervals at
    ``1 - (1 - level) / systems`` (Bonferroni). ``anchor``: ``(system, rating)`` shifts every
    rating (and interval) so that system has that rating (Arena anchors one model).
    ``bootstrap``: ``prompt`` (default) resamples whole prompts with all their judgments (a
    prompt's judgments are not independent: the decisions' unit), ``judgment`` resamples
    battles (the notebook's method: ``tests/adaptive/leaderboards/test_elo.py`` compares
    them). Every judgment is one battle (no position effect). ``decided_group,
    decided_ranks, note``: the decisions' ``ranking`` answer at ``1 - level`` beside the row
    (:mod:`evalset.ranking_beside`).

    Example:
        >>> from evalset import example
        >>> board = elo(example(num_systems=3, num_prompts=10), rounds=50)
        >>> board["system"].to_list()
        ['s2', 's1', 's0']
    """
    if rounds < 10:
        raise ValueError("rounds must be at least 10 (the interval's resamples)")
    if not 0.5 < level < 1:
        raise ValueError("level must be between 0.5 and 1")
    if bootstrap not in ("judgment", "prompt"):
        raise ValueError(f"bootstrap must be 'judgment' or 'prompt' (got {bootstrap!r})")
    from evalset.ranking_beside import decided_ranking

    judgments = read(data)
    dims = _dims(judgments, dimension)
    present = judgments["dimension"].unique().to_list()
    if dimension is not None and dimension not in present:
        raise ValueError(f"no judgments for dimension {dimension!r} (the data has {present})")
    decided = decided_ranking(judgments.filter(pl.col("dimension").is_in(dims)), level)
    rows: list[dict[str, Any]] = []
    for dim in dims:
        frame = judgments.filter(pl.col("dimension") == dim)
        board = _elo_board(frame, dim, rounds, level, seed, anchor, bootstrap)
        rows += _beside_elo(decided, dim, board)
    return pl.DataFrame(rows)


def _elo_board(
    frame: pl.DataFrame, dim: str, rounds: int, level: float, seed: int,
    anchor: tuple[str, float] | None, bootstrap: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """One dimension's Elo rows, best first: ratings, bootstrap intervals, rank intervals."""
    import numpy as np

    from adaptive.leaderboards.elo import (
        battles_of,
        bootstrap_ratings,
        mle_ratings,
        rank_intervals,
        win_table,
    )

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
    board = []
    for rank, i in enumerate(order, start=1):
        board.append(
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
    return board


def _beside_elo(decided: Any, dim: str, board: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Elo rows with the decided ranking's columns."""
    from evalset.ranking_beside import elo_notes, group_columns

    notes = elo_notes(decided, dim, board)
    return [r | group_columns(decided, dim, r["system"]) | {"note": n}
            for r, n in zip(board, notes, strict=True)]  # fmt: skip
