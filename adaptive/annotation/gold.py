"""Gold (attention-check) cells: annotators scored on cells whose answer is known.

A team lists gold cells: a prompt, a pair of systems, optionally a dimension, and the known
answer (``a``, ``b`` or ``tie``, for the pair in the gold row's order). A judgment of a gold
cell, turned to the gold row's order, is right or wrong. Per annotator the rows give the
gold judgments, how many are right, the accuracy with its Wilson interval, and an
**anytime-valid flag**: the sequential test of H0 "accuracy >= ``careful``" against the
alternative "accuracy = ``careless``" (a careless annotator's, e.g. 1/2 for one clicking A
or B at random), as Wald's sequential probability ratio: the product over the annotator's
gold judgments, in arrival order, of ``careless / careful`` for a right answer and
``(1 - careless) / (1 - careful)`` for a wrong one. For any accuracy p >= ``careful`` each
factor has mean ``p careless / careful + (1 - p)(1 - careless) / (1 - careful) <= 1``, so the
product is a nonnegative supermartingale under H0 and, by Ville's inequality, an annotator at
least as accurate as ``careful`` reaches ``1 / level`` with probability at most ``level``,
however often the scores are read. The flag says when (after how many gold judgments) the
product first reached it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

#: accuracy on gold cells a careful annotator reaches at least (H0)
DEFAULT_CAREFUL = 0.8
#: accuracy of a careless annotator, the alternative (random clicks on A or B)
DEFAULT_CARELESS = 0.5
#: bound on the chance that an annotator at least as accurate as ``careful`` is ever flagged
DEFAULT_GOLD_LEVEL = 0.05

ANSWERS = ("a", "b", "tie")
_FLIP = {"a": "b", "b": "a", "tie": "tie"}


class GoldCellError(ValueError):
    """A bad gold row: ``row`` (1-based, as in the file) and the ``column`` at fault."""

    def __init__(self, row: int, column: str, message: str) -> None:
        super().__init__(f"gold row {row}: {message}")
        self.row = row
        self.column = column


@dataclass(frozen=True)
class GoldRule:
    """How annotators are scored on gold cells.

    Attributes:
        careful: accuracy a careful annotator reaches at least (the null hypothesis).
        careless: accuracy of a careless one (the alternative the test is built for);
            below ``careful``.
        level: chance, at most, that an annotator at least as accurate as ``careful`` is
            ever flagged, however often the scores are read.
    """

    careful: float = DEFAULT_CAREFUL
    careless: float = DEFAULT_CARELESS
    level: float = DEFAULT_GOLD_LEVEL

    def __post_init__(self) -> None:
        if not 0.0 < self.careless < self.careful < 1.0:
            raise ValueError(
                f"need 0 < careless < careful < 1 (careless {self.careless}, "
                f"careful {self.careful})"
            )
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"level must be in (0, 1), not {self.level}")


def read_gold(gold: pl.DataFrame) -> pl.DataFrame:
    """The gold cells, checked: ``item_id``, ``system_a``, ``system_b``, ``answer`` (``a``,
    ``b`` or ``tie``) and optionally ``dimension`` (a gold row without one holds for every
    dimension). Each cell at most once, in either order.

    Raises:
        ValueError: a missing column; :class:`GoldCellError` (a ValueError) for an unknown
            answer, a pair of one system or a cell listed twice, naming the row (1-based, as
            in the file). The service's gold cells are checked by this same function.
    """
    missing = [c for c in ("item_id", "system_a", "system_b", "answer") if c not in gold.columns]
    if missing:
        raise ValueError(f"gold cells need the column(s) {missing}; they have {gold.columns}")
    if "dimension" not in gold.columns:
        gold = gold.with_columns(pl.lit(None, pl.Utf8).alias("dimension"))
    # ids as the judgments' reader keeps them (stripped); an empty dimension: every dimension
    gold = gold.select(
        pl.col("item_id", "system_a", "system_b").cast(pl.Utf8).str.strip_chars(),
        pl.col("dimension").cast(pl.Utf8).str.strip_chars().replace("", None),
        pl.col("answer").cast(pl.Utf8).str.strip_chars().str.to_lowercase(),
    )
    seen: dict[tuple[Any, ...], int] = {}
    anywhere: dict[tuple[Any, ...], int] = {}
    for row, (item, a, b, dim, answer) in enumerate(gold.iter_rows(), start=1):
        cell_ids = (item, a, b)
        if answer not in ANSWERS:
            raise GoldCellError(row, "answer", f"answer {answer!r} is not one of {ANSWERS}")
        if not item or not a or not b:
            absent = next(c for c, v in zip(("item_id", "system_a", "system_b"), cell_ids) if not v)
            raise GoldCellError(row, absent, "item_id, system_a and system_b must be given")
        if a == b:
            raise GoldCellError(row, "system_b", f"a pair of one system ({a!r})")
        cell = (item, frozenset((a, b)))
        if (dim, *cell) in seen:
            raise GoldCellError(row, "item_id", f"the cell of row {seen[(dim, *cell)]} again")
        other = anywhere.get(cell)
        if other is not None and (dim is None or (None, *cell) in seen):
            raise GoldCellError(
                row,
                "dimension",
                f"the cell of row {other} again (a row without a dimension holds for every "
                "dimension)",
            )
        seen[(dim, *cell)] = row
        anywhere.setdefault(cell, row)
    return gold


def gold_rows(
    judgments: pl.DataFrame, gold: pl.DataFrame, rule: GoldRule | None = None
) -> list[dict[str, Any]]:
    """Per annotator with gold judgments: ``n_gold``, ``n_right``, ``accuracy``, its 95%
    Wilson interval ``accuracy_low`` / ``accuracy_high``, ``max_ratio`` (the largest the
    sequential probability ratio reached), ``flagged``, ``flagged_after`` (gold judgments
    when it first reached ``1 / level``) and ``reason`` in words. Judgments in arrival
    order; an annotator's first judgment of a gold cell counts, the others and those of
    cells not in the gold list are not scored, nor anonymous ones.

    Raises:
        ValueError: bad gold cells, or no judgment of any gold cell by a named annotator.
    """
    from scipy.stats import binomtest  # scipy.stats costs 0.6 s: not when the CLI starts

    rule = rule or GoldRule()
    gold = read_gold(gold)
    answers: dict[tuple[Any, ...], tuple[str, str]] = {}
    for item, a, b, dim, answer in gold.iter_rows():
        answers[(dim, item, frozenset((a, b)))] = (a, answer)
    has_dim = "dimension" in judgments.columns
    right_log = math.log(rule.careless / rule.careful)
    wrong_log = math.log((1.0 - rule.careless) / (1.0 - rule.careful))
    threshold = math.log(1.0 / rule.level)
    marks: dict[str, list[bool]] = {}
    scored: set[tuple[Any, ...]] = set()
    for r in judgments.iter_rows(named=True):
        annotator = r.get("annotator_id")
        if not annotator:  # anonymous judgments are nobody's answers
            continue
        pair = frozenset((r["system_a"], r["system_b"]))
        dim = r["dimension"] if has_dim else None
        hit = answers.get((dim, r["item_id"], pair)) or answers.get((None, r["item_id"], pair))
        if hit is None:
            continue
        # an annotator's first answer per gold cell: a repeat is no new evidence (its errors
        # repeat), and the test needs each answer right with chance >= careful given the past
        once = (str(annotator), dim, r["item_id"], pair)
        if once in scored:
            continue
        scored.add(once)
        first, answer = hit
        said = r["winner"] if r["system_a"] == first else _FLIP[r["winner"]]
        marks.setdefault(str(annotator), []).append(said == answer)
    if not marks:
        raise ValueError(
            "no judgment of a gold cell by a named annotator: check the gold file's item_id, "
            "system_a, system_b (and dimension) against the judgments'"
        )
    rows = []
    for annotator in sorted(marks):
        right = np.asarray(marks[annotator], bool)
        n, k = int(right.size), int(right.sum())
        path = np.cumsum(np.where(right, right_log, wrong_log))
        crossed = np.flatnonzero(path >= threshold)
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        flagged = crossed.size > 0
        if flagged:
            reason = (
                f"{k} of {n} gold answers right: after {int(crossed[0]) + 1} of them the "
                f"sequential test rejected accuracy >= {rule.careful:g} at level {rule.level:g}"
            )
        else:
            reason = (
                f"{k} of {n} gold answers right: consistent with accuracy >= "
                f"{rule.careful:g} so far"
            )
        rows.append(
            {
                "annotator_id": annotator,
                "n_gold": n,
                "n_right": k,
                "accuracy": k / n,
                "accuracy_low": float(ci.low),
                "accuracy_high": float(ci.high),
                "max_ratio": float(np.exp(min(path.max(initial=0.0), 700.0))),
                "flagged": flagged,
                "flagged_after": int(crossed[0]) + 1 if flagged else None,
                "reason": reason,
            }
        )
    return rows


def simulate_gold(
    rng: np.random.Generator,
    *,
    num_annotators: int = 50,
    careless_share: float = 0.1,
    num_gold: int = 30,
    careful_accuracy: tuple[float, float] = (0.8, 0.97),
    careless_answers: tuple[str, ...] = ANSWERS,
    tie_share: float = 0.1,
) -> tuple[pl.DataFrame, pl.DataFrame, set[str]]:
    """A campaign's gold judgments: careful annotators right with an accuracy drawn from
    ``careful_accuracy`` (wrong: the other side or a tie), careless ones clicking uniformly
    among ``careless_answers``; each judges ``num_gold`` gold cells, each shown in the other
    order with probability 1/2. Returns the judgments, the gold cells and the careless annotators."""
    answers = rng.choice(
        ["a", "b", "tie"], size=num_gold, p=[(1 - tie_share) / 2] * 2 + [tie_share]
    )
    gold = pl.DataFrame(
        {
            "item_id": [f"g{i}" for i in range(num_gold)],
            "system_a": ["x"] * num_gold,
            "system_b": ["y"] * num_gold,
            "answer": answers.tolist(),
        }
    )
    careless = set(
        rng.choice(num_annotators, size=round(careless_share * num_annotators), replace=False)
        .astype(str)
        .tolist()
    )
    rows = []
    for w in range(num_annotators):
        name = str(w)
        accuracy = rng.uniform(*careful_accuracy)
        for i in rng.permutation(num_gold):
            truth = str(answers[i])
            if name in careless:
                said = str(rng.choice(careless_answers))
            elif rng.random() < accuracy:
                said = truth
            else:
                said = str(rng.choice([x for x in ANSWERS if x != truth]))
            swap = rng.random() < 0.5
            rows.append(
                {
                    "item_id": f"g{i}",
                    "system_a": "y" if swap else "x",
                    "system_b": "x" if swap else "y",
                    "annotator_id": name,
                    "winner": _FLIP[said] if swap else said,
                }
            )
    return pl.DataFrame(rows), gold, careless
