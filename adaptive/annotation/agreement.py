"""Inter-annotator agreement on the cells that were judged more than once.

A **cell** is (prompt, unordered pair of systems, dimension). Every judgment is first turned
to its pair's canonical order (the two system names sorted) and labelled 0 when the first
system of that order wins, 1 when the other wins, 2 for a tie: a judgment of (B, A) won by
``a`` is the same answer as one of (A, B) won by ``b``, so a pair shown in either order is no
disagreement. Cells judged once carry no agreement and are left out.

Per dimension (:func:`dimension_rows`):

* **Krippendorff's alpha**, nominal over the three labels (Krippendorff 2011, "Computing
  Krippendorff's alpha-reliability", alpha = 1 - D_o / D_e from the coincidence matrix),
  computed by the ``krippendorff`` package from the cells' label counts. Each annotator is a
  coder who gives a cell one value: its first judgment of the cell (in row order); its later
  ones are the same coder again, intra- not inter-annotator agreement, and are left out
  (``n_self_repeats`` counts them; ``self_repeats="keep"`` counts every judgment as a value
  of its cell). Judgments without an annotator id are each a coder of their own.
* ``observed_agreement`` and ``expected_agreement``: 1 - D_o and 1 - D_e of the same
  coincidences, so alpha = (observed - expected) / (1 - expected).
* **Fleiss' kappa** (Fleiss 1971, "Measuring nominal scale agreement among many raters") when
  every repeated cell of the dimension has the same number of judgments; otherwise null, and
  the note says why (its chance term assumes a fixed number of ratings per subject).

Per annotator and dimension (:func:`annotator_rows`): each of the annotator's judgments of a
cell that other annotators judged too is compared with the most frequent label of the
*others'* judgments of that cell (a cell whose others tie for the most frequent label has no
majority and is not compared). ``agree_majority`` is the share that match;
``chance_agreement`` the share an annotator would match on average who answers with the same
label shares but independently of the cell; ``kappa_majority`` the chance-corrected
``(agree - chance) / (1 - chance)``; ``p_value`` the one-sided probability, under that null,
of matching at least as often (the Poisson-binomial tail); ``flagged``: not significantly
above chance at ``test_level``, a screen like the correlation test of
:mod:`adaptive.annotation.annotators`, not a verdict. An annotator with fewer than ``MIN_COMPARED``
compared judgments is reported, not tested. Judgments without an annotator id count as other
raters but get no row.
"""

from __future__ import annotations

from typing import Any

import krippendorff
import numpy as np
import polars as pl

#: the labels of a judgment in its pair's canonical (sorted) order
LABELS: tuple[str, ...] = ("first wins", "second wins", "tie")
NUM_LABELS = len(LABELS)
#: compared judgments below which an annotator is reported but not tested
MIN_COMPARED = 5
REPORTS: tuple[str, ...] = ("dimensions", "annotators")
#: what to do with an annotator's later judgments of a cell it already judged
SELF_REPEATS: tuple[str, ...] = ("drop", "keep")
_CELL = ["dimension", "item_id", "_lo", "_hi"]


class NoRepeatedCells(ValueError):
    """Judgments in which no cell was judged twice: there is no agreement to measure."""


# ---------------------------------------------------------------- numbers (label counts)


def coincidences(counts: np.ndarray) -> np.ndarray:
    """Krippendorff's coincidence matrix of label counts per unit (units judged at least twice).

    Args:
        counts: (units, labels) number of judgments of each label in each unit.

    Returns:
        (labels, labels): o_ck = sum over units of n_uc (n_uk - [c = k]) / (n_u - 1).

    Example:
        >>> coincidences(np.array([[2, 0, 0], [1, 1, 0]])).tolist()
        [[2.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    counts = np.asarray(counts, dtype=np.float64)
    size = counts.sum(axis=1)
    pairs = counts[:, :, None] * counts[:, None, :] - counts[:, :, None] * np.eye(counts.shape[1])
    return (pairs / (size - 1)[:, None, None]).sum(axis=0)  # type: ignore[no-any-return]


def nominal_agreement(counts: np.ndarray) -> tuple[float, float]:
    """Observed and expected agreement of nominal alpha: 1 - D_o and 1 - D_e.

    Example:
        >>> nominal_agreement(np.array([[2, 0, 0], [0, 2, 0], [1, 1, 0]]))
        (0.6666666666666666, 0.4)
    """
    o = coincidences(counts)
    total = o.sum()
    marginal = o.sum(axis=0)
    observed = float(np.trace(o) / total)
    expected = float((marginal * (marginal - 1)).sum() / (total * (total - 1)))
    return observed, expected


def nominal_alpha(counts: np.ndarray) -> float | None:
    """Krippendorff's nominal alpha of label counts per unit (the ``krippendorff`` package);
    None when every value is the same label (no variation: D_e = 0)."""
    counts = np.asarray(counts, dtype=np.int64)
    if np.count_nonzero(counts.sum(axis=0)) < 2:
        return None
    return float(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))


def fleiss_kappa(counts: np.ndarray) -> float | None:
    """Fleiss' kappa of label counts per subject, every subject with the same number of
    ratings (Fleiss 1971, eqs. 2-9; statsmodels' ``fleiss_kappa`` is the test's reference);
    None when every rating is the same label.

    Raises:
        ValueError: the subjects have different numbers of ratings, or fewer than two.

    Example:
        >>> round(fleiss_kappa(np.array([[3, 0, 0], [0, 3, 0], [1, 2, 0]])), 4)
        0.55
    """
    counts = np.asarray(counts, dtype=np.float64)
    size = counts.sum(axis=1)
    if size.size == 0 or np.any(size != size[0]) or size[0] < 2:
        raise ValueError("Fleiss' kappa needs the same number (at least 2) of ratings per subject")
    per_subject = (counts * (counts - 1)).sum(axis=1) / (size * (size - 1))
    shares = counts.sum(axis=0) / counts.sum()
    chance = float((shares**2).sum())
    if chance >= 1.0:
        return None
    return (float(per_subject.mean()) - chance) / (1.0 - chance)


def poisson_binomial_tail(probs: np.ndarray, k: int) -> float:
    """P(X >= k) for X a sum of independent Bernoulli(probs), exactly.

    By the recursion over the trials (O(n^2)): scipy's ``poisson_binom`` needs scipy 1.15,
    above the floor this package supports; the test checks the two agree.

    Example:
        >>> poisson_binomial_tail(np.array([0.5, 0.5]), 1)
        0.75
    """
    probs = np.asarray(probs, dtype=np.float64)
    pmf = np.zeros(probs.size + 1)
    pmf[0] = 1.0
    for i, p in enumerate(probs):
        pmf[1 : i + 2] = pmf[1 : i + 2] * (1.0 - p) + pmf[: i + 1] * p
        pmf[0] *= 1.0 - p
    return float(min(1.0, pmf[max(k, 0) :].sum()))


def majority(others: np.ndarray) -> np.ndarray:
    """Per row of label counts, the single most frequent label, or -1 when none is (no
    counts, or a tie for the most frequent).

    Example:
        >>> majority(np.array([[2, 1, 0], [1, 1, 0], [0, 0, 0]])).tolist()
        [0, -1, -1]
    """
    top = others.max(axis=1, keepdims=True)
    single = ((others == top).sum(axis=1) == 1) & (top[:, 0] > 0)
    return np.where(single, others.argmax(axis=1), -1)


# ---------------------------------------------------------------- judgments -> cells


def oriented(judgments: pl.DataFrame) -> pl.DataFrame:
    """The judgments with their pair in canonical order (``_lo``, ``_hi``: the names sorted),
    ``label`` (0: ``_lo`` won, 1: ``_hi`` won, 2: tie) and ``_repeat`` (a named annotator's
    second or later judgment of the cell, in row order).

    Example:
        >>> frame = pl.DataFrame({"item_id": ["p", "p"], "system_a": ["x", "y"],
        ...     "system_b": ["y", "x"], "annotator_id": ["u", "v"], "winner": ["a", "b"],
        ...     "dimension": ["overall", "overall"]})
        >>> oriented(frame)["label"].to_list()
        [0, 0]
    """
    lo = pl.min_horizontal("system_a", "system_b")
    hi = pl.max_horizontal("system_a", "system_b")
    won = pl.when(pl.col("winner") == "a").then(pl.col("system_a")).otherwise(pl.col("system_b"))
    label = pl.when(pl.col("winner") == "tie").then(2).when(won == lo).then(0).otherwise(1)
    labelled = judgments.with_columns(
        lo.alias("_lo"),
        hi.alias("_hi"),
        label.cast(pl.Int64).alias("label"),
        pl.col("annotator_id").fill_null(""),
    )
    earlier = pl.int_range(pl.len()).over([*_CELL, "annotator_id"])
    return labelled.with_columns(((pl.col("annotator_id") != "") & (earlier > 0)).alias("_repeat"))


def cell_counts(labelled: pl.DataFrame, *, self_repeats: str = "drop") -> pl.DataFrame:
    """Per cell of :func:`oriented` judgments: ``n0, n1, n2`` (its values of each label),
    ``n`` (its values) and ``self_repeats`` (judgments whose named annotator had already
    judged the cell: values only with ``self_repeats="keep"``)."""
    if self_repeats not in SELF_REPEATS:
        raise ValueError(f"self_repeats must be one of {list(SELF_REPEATS)}, got {self_repeats!r}")
    value = pl.col("_repeat").is_not_null() if self_repeats == "keep" else ~pl.col("_repeat")
    return labelled.group_by(_CELL, maintain_order=True).agg(
        *[
            ((pl.col("label") == k) & value).sum().cast(pl.Int64).alias(f"n{k}")
            for k in range(NUM_LABELS)
        ],
        value.sum().cast(pl.Int64).alias("n"),
        pl.col("_repeat").sum().cast(pl.Int64).alias("self_repeats"),
    )


def _dimensions(judgments: pl.DataFrame) -> list[str]:
    return judgments["dimension"].unique(maintain_order=True).to_list()


def _require_repeats(cells: pl.DataFrame, num_judgments: int) -> None:
    if cells.height == 0 or int(cells["n"].max() or 0) < 2:  # type: ignore[arg-type]
        own = int(cells["self_repeats"].sum()) if cells.height else 0
        again = f" ({own} by an annotator judging its own cell again)" if own else ""
        raise NoRepeatedCells(
            "no cell was judged more than once by different annotators, so there is no "
            "agreement to measure: it needs prompts whose pair of systems (in either order) "
            "was judged by at least two annotators in the same dimension; the data has "
            f"{num_judgments} judgment(s){again} on {cells.height} cell(s), each judged by one"
        )


# ---------------------------------------------------------------- the two reports


def dimension_rows(judgments: pl.DataFrame, *, self_repeats: str = "drop") -> list[dict[str, Any]]:
    """One row per dimension: its repeated cells, alpha, its observed and expected agreement,
    Fleiss' kappa where it applies, and a note saying why a figure is missing.

    Raises:
        NoRepeatedCells: no cell of any dimension was judged twice.

    Example:
        >>> from evalset import example
        >>> row = dimension_rows(example(num_systems=3, num_prompts=10))[0]
        >>> row["n_cells"], row["per_cell_min"], row["per_cell_max"], round(row["alpha"], 3)
        (30, 2, 2, -0.023)
    """
    cells = cell_counts(oriented(judgments), self_repeats=self_repeats)
    _require_repeats(cells, judgments.height)
    rows = []
    for dim in _dimensions(judgments):
        mine = cells.filter(pl.col("dimension") == dim)
        repeated = mine.filter(pl.col("n") >= 2)
        row: dict[str, Any] = {
            "dimension": dim,
            "n_cells": repeated.height,
            "n_judgments": int(repeated["n"].sum()),
            "per_cell_min": None,
            "per_cell_max": None,
            "n_self_repeats": int(mine["self_repeats"].sum()),
            "n_single_cells": mine.height - repeated.height,
            "observed_agreement": None,
            "expected_agreement": None,
            "alpha": None,
            "fleiss_kappa": None,
            "note": "",
        }
        if repeated.height == 0:
            row["note"] = (
                f"no cell of {dim!r} was judged by two annotators ({mine.height} cell(s)): "
                "no agreement to measure"
            )
            rows.append(row)
            continue
        counts = repeated.select([f"n{k}" for k in range(NUM_LABELS)]).to_numpy()
        low, high = int(repeated["n"].min()), int(repeated["n"].max())  # type: ignore[arg-type]
        observed, expected = nominal_agreement(counts)
        row.update(per_cell_min=low, per_cell_max=high, observed_agreement=observed)
        row.update(expected_agreement=expected, alpha=nominal_alpha(counts))
        notes = []
        if row["alpha"] is None:
            notes.append(
                "every judgment of the repeated cells has the same label: alpha and kappa are "
                "undefined (no variation to agree on)"
            )
        elif low == high:
            row["fleiss_kappa"] = fleiss_kappa(counts)
        else:
            notes.append(
                f"no Fleiss' kappa: the repeated cells have {low} to {high} judgments, and "
                "it needs the same number in every cell (alpha allows any)"
            )
        row["note"] = "; ".join(notes)
        rows.append(row)
    return rows


def _annotator_row(
    dim: str, annotator: str, labels: np.ndarray, shared: int, maj: np.ndarray, test_level: float
) -> dict[str, Any]:
    """The row of one annotator: ``labels`` of its judgments, ``maj`` the others' majority of
    each (-1: none)."""
    compared = maj >= 0
    y, m = labels[compared], maj[compared]
    row: dict[str, Any] = {
        "dimension": dim,
        "annotator_id": annotator,
        "n_judgments": int(labels.size),
        "n_shared": shared,
        "n_compared": int(y.size),
        "agree_majority": None,
        "chance_agreement": None,
        "kappa_majority": None,
        "p_value": None,
        "flagged": False,
        "note": "",
    }
    if y.size == 0:
        row["note"] = (
            "judged no cell that other annotators judged"
            if shared == 0
            else "the others never had a single most frequent label on its shared cells"
        )
        return row
    hits = int((y == m).sum())
    chance_each = (np.bincount(y, minlength=NUM_LABELS) / y.size)[m]
    agree, chance = hits / y.size, float(chance_each.mean())
    row.update(agree_majority=agree, chance_agreement=chance)
    if chance < 1.0:
        row["kappa_majority"] = (agree - chance) / (1.0 - chance)
    said = f"matches the others' majority in {hits} of {y.size} ({agree:.0%}; chance {chance:.0%})"
    if y.size < MIN_COMPARED:
        row["note"] = f"only {y.size} compared judgment(s); not tested: {said}"
        return row
    row["p_value"] = poisson_binomial_tail(chance_each, hits)
    row["flagged"] = bool(row["p_value"] >= test_level)
    if chance >= 1.0:
        row["note"] = (
            f"one label throughout, as the others' majority: {said}; cannot be told from chance"
        )
    elif row["flagged"]:
        row["note"] = f"not above chance: {said}, one-sided p = {row['p_value']:.3g}"
    return row


def annotator_rows(
    judgments: pl.DataFrame, *, test_level: float = 0.05, self_repeats: str = "drop"
) -> list[dict[str, Any]]:
    """One row per named annotator and dimension with repeated cells: agreement with the
    majority of the other annotators on shared cells, against chance, and a flag.

    Rows are in dimension order, the lowest chance-corrected agreement first.

    Raises:
        NoRepeatedCells: no cell of any dimension was judged twice.

    Example:
        >>> from evalset import example
        >>> rows = annotator_rows(example(num_systems=3, num_prompts=10))
        >>> [(r["annotator_id"], r["n_shared"], r["n_compared"]) for r in rows][:2]
        [('w2', 12, 12), ('w0', 12, 12)]
    """
    if not 0.0 < test_level < 1.0:
        raise ValueError(f"test_level must be in (0, 1), got {test_level}")
    labelled = oriented(judgments)
    cells = cell_counts(labelled, self_repeats=self_repeats)
    _require_repeats(cells, judgments.height)
    if self_repeats == "drop":
        labelled = labelled.filter(~pl.col("_repeat"))
    totals = ["n0", "n1", "n2"]
    own = labelled.group_by([*_CELL, "annotator_id"]).agg(
        *[(pl.col("label") == k).sum().cast(pl.Int64).alias(f"o{k}") for k in range(NUM_LABELS)]
    )
    rows: list[dict[str, Any]] = []
    for dim in _dimensions(judgments):
        if int(cells.filter(pl.col("dimension") == dim)["n"].max() or 0) < 2:  # type: ignore[arg-type]
            continue
        part = (
            labelled.filter((pl.col("dimension") == dim) & (pl.col("annotator_id") != ""))
            .join(cells.select(*_CELL, *totals), on=_CELL, how="left")
            .join(own, on=[*_CELL, "annotator_id"], how="left")
            .sort("annotator_id", maintain_order=True)
        )
        if part.height == 0:  # only judgments without an annotator id
            continue
        others = part.select(
            [(pl.col(f"n{k}") - pl.col(f"o{k}")).alias(f"x{k}") for k in range(NUM_LABELS)]
        ).to_numpy()
        maj = majority(others)
        has_others = others.sum(axis=1) > 0
        cell_key = part.select(pl.concat_str(["item_id", "_lo", "_hi"], separator="\x1f"))
        keys = cell_key.to_series().to_numpy()
        labels = part["label"].to_numpy()
        names = part["annotator_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
        for start, stop in zip(starts, np.r_[starts[1:], names.size]):
            span = slice(int(start), int(stop))
            shared = int(np.unique(keys[span][has_others[span]]).size)
            rows.append(
                _annotator_row(dim, str(names[start]), labels[span], shared, maj[span], test_level)
            )
    order = {d: i for i, d in enumerate(_dimensions(judgments))}
    rows.sort(
        key=lambda r: (
            order[r["dimension"]],
            r["kappa_majority"] is None,
            r["kappa_majority"] if r["kappa_majority"] is not None else 0.0,
            r["annotator_id"],
        )
    )
    return rows


def agreement_rows(
    judgments: pl.DataFrame,
    *,
    report: str = "dimensions",
    test_level: float = 0.05,
    self_repeats: str = "drop",
) -> list[dict[str, Any]]:
    """The rows of one report: ``dimensions`` (:func:`dimension_rows`) or ``annotators``
    (:func:`annotator_rows`), as every door gives them."""
    if report == "dimensions":
        return dimension_rows(judgments, self_repeats=self_repeats)
    if report == "annotators":
        return annotator_rows(judgments, test_level=test_level, self_repeats=self_repeats)
    raise ValueError(f"unknown report {report!r}; expected one of {list(REPORTS)}")
