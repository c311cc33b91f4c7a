"""Graded tutor labels (MRBench): desired-annotation match rate and pairwise conversion.

MRBench (Maurya et al., NAACL 2025) labels every tutor reply of a dialogue on
eight dimensions with three-level labels. Two uses here:

* :func:`damr`: the *desired annotation match rate* (section 5.4), the share
  of a tutor's replies whose label is the desired one (Table 4: "Yes" for six
  dimensions, "No" for revealing the answer, "Encouraging" for the tone).
* :func:`to_pairwise`: graded labels -> pairwise judgments within each
  dialogue, so that the Bradley-Terry (and graded-response) machinery can rank
  tutors per dimension. Labels are mapped to an ordinal score (desired best);
  for every pair of tutors that answered the same dialogue, the higher score
  wins and equal scores are a tie. This is *rank breaking* of the per-dialogue
  ordering (Azari Soufiani et al. 2014): k labelled replies give k(k-1)/2
  pairs, which are not independent evidence, so each pair carries weight
  1/(k-1): every label then counts once in the (composite) likelihood, and
  posterior intervals are not overstated k/2-fold. The pairs are in
  alphabetical order with no ``shown_first``: graded labels have no position,
  so fit them without the position intercept.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from adaptive.core.data import DataError

#: desired label per dimension (MRBench Table 4); any other dimension: "Yes"
DESIRED: dict[str, str] = {
    "Revealing_of_the_Answer": "No",
    "Tutor_Tone": "Encouraging",
}
DEFAULT_DESIRED = "Yes"

#: ordinal score of each label (higher = closer to the desired label)
LABEL_SCORES: dict[str, dict[str, int]] = {
    "default": {"Yes": 2, "To some extent": 1, "No": 0},
    # not revealing is desired; revealing an incorrect answer is worse than a correct one
    "Revealing_of_the_Answer": {
        "No": 2,
        "Yes (and the answer is correct)": 1,
        "Yes (but the answer is incorrect)": 0,
    },
    "Tutor_Tone": {"Encouraging": 2, "Neutral": 1, "Offensive": 0},
}

RATING_COLUMNS = ("item_id", "system", "dimension", "label")

#: MRBench Table 3 (DAMR in %, 192 V1 dialogues; Novice only on Bridge dialogues)
PAPER_TABLE3: dict[str, dict[str, float]] = {
    "Novice": dict(zip(
        ("Mistake_Identification", "Mistake_Location", "Revealing_of_the_Answer",
         "Providing_Guidance", "Actionability", "Coherence", "Tutor_Tone", "Humanlikeness"),
        (43.33, 16.67, 80.00, 11.67, 1.67, 50.00, 90.00, 35.00),
    )),
}  # fmt: skip
_PAPER_ROWS = {
    "Expert": (76.04, 63.02, 90.62, 67.19, 76.04, 79.17, 92.19, 87.50),
    "Llama318B": (80.21, 54.69, 73.96, 45.31, 42.71, 80.73, 19.79, 93.75),
    "Phi3": (28.65, 26.04, 73.96, 17.71, 11.98, 39.58, 45.31, 52.08),
    "Gemini": (63.02, 39.58, 67.71, 37.50, 42.71, 56.77, 21.88, 68.23),
    "Sonnet": (85.42, 69.79, 94.79, 59.38, 60.94, 88.54, 54.69, 96.35),
    "Mistral": (93.23, 73.44, 86.46, 63.54, 70.31, 86.98, 15.10, 95.31),
    "GPT4": (94.27, 84.38, 53.12, 76.04, 46.35, 90.17, 37.50, 89.62),
    "Llama31405B": (94.27, 84.38, 80.73, 77.08, 74.48, 91.67, 16.15, 90.62),
}
DIMENSIONS: tuple[str, ...] = tuple(PAPER_TABLE3["Novice"])
for _name, _values in _PAPER_ROWS.items():
    PAPER_TABLE3[_name] = dict(zip(DIMENSIONS, _values))


def desired_label(dimension: str) -> str:
    return DESIRED.get(dimension, DEFAULT_DESIRED)


def read_ratings(path: str | Path, *, subset: str = "all", items: str | Path | None = None):
    """Read graded ratings (item_id, system, dimension, label; annotator_id optional).

    Args:
        path: the ratings CSV.
        subset: ``all`` or ``v1`` (only items with ``in_v1`` true in ``items``).
        items: the items CSV (default: ``items.csv`` next to ``path``).
    """
    path = Path(path)
    if not path.exists():
        raise DataError(str(path), message="file not found")
    frame = pl.read_csv(path, infer_schema=False)
    missing = [c for c in RATING_COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(
            str(path), message=f"missing column(s) {missing}; expected {list(RATING_COLUMNS)}"
        )
    frame = frame.with_columns(pl.col(c).str.strip_chars() for c in RATING_COLUMNS)
    if subset == "v1":
        items_path = Path(items) if items else path.with_name("items.csv")
        if not items_path.exists():
            raise DataError(str(items_path), message="items file (with in_v1) not found")
        item_frame = pl.read_csv(items_path, infer_schema=False, columns=["item_id", "in_v1"])
        keep = item_frame.filter(pl.col("in_v1").str.to_lowercase() == "true")["item_id"]
        frame = frame.filter(pl.col("item_id").is_in(keep.to_list()))
    elif subset != "all":
        raise ValueError(f"unknown subset {subset!r}; expected 'all' or 'v1'")
    if frame.height == 0:
        raise DataError(str(path), message="no ratings")
    return frame


def damr(ratings: pl.DataFrame, *, desired: dict | None = None) -> list[dict]:
    """DAMR per (system, dimension): n replies, n with the desired label, percentage.

    Args:
        ratings: one row per (item_id, system, dimension) with its label.
        desired: overrides of the desired label(s) per dimension, e.g.
            ``{"Tutor_Tone": ("Encouraging", "Neutral")}`` for the "non-offensive"
            reading the paper mentions in section 6.

    Example:
        >>> r = pl.DataFrame({"item_id": ["d1", "d2"], "system": ["T", "T"],
        ...     "dimension": ["Coherence", "Coherence"], "label": ["Yes", "No"]})
        >>> damr(r)[0]["damr"]
        50.0
    """
    wanted: dict[str, tuple[str, ...]] = {}
    for d in ratings["dimension"].unique().to_list():
        value = (desired or {}).get(d, desired_label(d))
        wanted[d] = (value,) if isinstance(value, str) else tuple(value)
    hit = pl.struct("dimension", "label").map_elements(
        lambda s: s["label"] in wanted[s["dimension"]], return_dtype=pl.Boolean
    )
    out = (
        ratings.with_columns(hit.alias("hit"))
        .group_by("system", "dimension")
        .agg(pl.len().alias("n"), pl.col("hit").sum().alias("n_desired"))
        .with_columns((100.0 * pl.col("n_desired") / pl.col("n")).alias("damr"))
        .sort("system", "dimension")
    )
    return [
        {**r, "desired_label": " or ".join(wanted[r["dimension"]])}
        for r in out.iter_rows(named=True)
    ]


def compare_with_paper(rows: list[dict], paper: dict = PAPER_TABLE3) -> list[dict]:
    """Our DAMR next to MRBench Table 3, with the difference (ours - paper) per cell."""
    out = []
    for r in rows:
        ref = paper.get(r["system"], {}).get(r["dimension"])
        out.append(
            {
                **r,
                "paper_damr": ref,
                "difference": None if ref is None else r["damr"] - ref,
            }
        )
    return out


def label_score(dimension: str, label: str) -> int:
    scores = LABEL_SCORES.get(dimension, LABEL_SCORES["default"])
    if label not in scores:
        raise DataError(
            "<ratings>", message=f"unknown label {label!r} for {dimension}; expected {list(scores)}"
        )
    return scores[label]


def to_pairwise(ratings: pl.DataFrame, *, weighting: str = "per_label") -> pl.DataFrame:
    """Graded labels -> pairwise judgments in the common schema, plus ``weight``.

    Args:
        ratings: one row per (item_id, system, dimension) with a label.
        weighting: ``per_label`` (weight 1/(k-1), each label counts once) or
            ``none`` (weight 1: every pair as an independent judgment).

    Returns:
        Columns item_id, system_a, system_b, annotator_id, winner, dimension,
        weight, score_a, score_b; a/b in alphabetical order.
    """
    if weighting not in ("per_label", "none"):
        raise ValueError("weighting must be 'per_label' or 'none'")
    scored = ratings.with_columns(
        pl.struct("dimension", "label")
        .map_elements(lambda s: label_score(s["dimension"], s["label"]), return_dtype=pl.Int64)
        .alias("score")
    )
    if "annotator_id" not in scored.columns:
        scored = scored.with_columns(pl.lit("").alias("annotator_id"))
    left = scored.select(
        "item_id",
        "dimension",
        pl.col("system").alias("system_a"),
        pl.col("score").alias("score_a"),
        pl.col("annotator_id").fill_null(""),
    )
    right = scored.select(
        "item_id", "dimension", pl.col("system").alias("system_b"), pl.col("score").alias("score_b")
    )
    pairs = left.join(right, on=["item_id", "dimension"]).filter(
        pl.col("system_a") < pl.col("system_b")
    )
    k = scored.group_by("item_id", "dimension").agg(pl.len().alias("k"))
    pairs = pairs.join(k, on=["item_id", "dimension"])
    weight = (1.0 / (pl.col("k") - 1)) if weighting == "per_label" else pl.lit(1.0)
    return pairs.select(
        "item_id",
        "system_a",
        "system_b",
        "annotator_id",
        pl.when(pl.col("score_a") > pl.col("score_b"))
        .then(pl.lit("a"))
        .when(pl.col("score_a") < pl.col("score_b"))
        .then(pl.lit("b"))
        .otherwise(pl.lit("tie"))
        .alias("winner"),
        "dimension",
        weight.cast(pl.Float64).alias("weight"),
        "score_a",
        "score_b",
    ).sort("dimension", "item_id", "system_a", "system_b")


def pairwise_weights(pairs: pl.DataFrame) -> np.ndarray:
    """The ``weight`` column of :func:`to_pairwise` output as an array (1 when absent)."""
    if "weight" not in pairs.columns:
        return np.ones(pairs.height)
    return pairs["weight"].cast(pl.Float64).to_numpy()
