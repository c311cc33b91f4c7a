"""``evalset replay --judge-data``: human-only and hybrid policies replayed on a human log and
one judge's verdicts (:mod:`adaptive.simulation.hybrid_replay`), the judge chosen as every
other door chooses it (:func:`evalset.hybrid.choose_judge`)."""

from __future__ import annotations

from typing import Any

__all__ = ["replay_with_judge"]


def replay_with_judge(
    data: str,
    verdicts_file: Any,
    *,
    judge: str | None = None,
    seed: int = 0,
    seeds: int = 20,
    alpha: float,
    margin: float,
) -> list[dict[str, Any]]:
    """One row per policy and dimension: the human judgments of ``data`` and the verdicts of
    ``judge`` (or the only judge) in ``verdicts_file``."""
    import polars as pl

    from adaptive.simulation.hybrid_replay import replay_files
    from evalset.hybrid import choose_judge, read_verdicts

    verdicts = read_verdicts(verdicts_file)
    name = choose_judge(verdicts["annotator_id"].to_list(), judge)
    return replay_files(
        data, verdicts.filter(pl.col("annotator_id") == name), seed=seed, seeds=seeds,
        alpha=alpha, margin=margin,
    )  # fmt: skip
