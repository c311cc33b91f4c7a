"""Hybrid decisions for every door: human judgments plus a named automatic judge's verdicts.

:func:`decide_with_judge` is the one function :func:`evalset.decisions` (``judge=``),
``evalset decisions --judge-data`` and ``GET /projects/{id}/hybrid-decisions`` call, so the
same judgments and verdicts give the same rows through each door. The family, the rule's
level, margin and unit are those of :func:`evalset.decide.decide_judgments`; the decision of
each comparison is :func:`adaptive.judge.hybrid_decisions.decide_hybrid`'s (human judgments in
arrival order taken as uniform draws of the comparison's judged cells; docs/hybrid.md).

Judge verdicts are a frame (or file) in the judgments schema whose ``annotator_id`` names the
judge, with an optional ``inconsistent`` column (true: the judge disagreed with itself when
the two answers swapped sides; such ties get a calibration of their own). They are never
human judgments: they enter no count of judgments and no human-only decision.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from adaptive.stopping.corrections import Correction
from adaptive.stopping.rule import DecisionRule, Family
from evalset._common import read

#: columns of a hybrid decision row beyond those it shares with the human-only rows
HYBRID_COLUMNS = (
    "judge",
    "judge_cells",
    "judge_agreement",
    "effective_humans",
    "judge_weight",
)
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")
_CODE = {"a": 0, "tie": 1, "b": 2}
_FLIP_CODE = {"a": 2, "tie": 1, "b": 0}


class JudgeError(ValueError):
    """Judge verdicts that cannot be used (no judge, an unknown or ambiguous one, bad flags),
    or a rule hybrid decisions do not take; ``field`` names the parameter at fault."""

    def __init__(self, message: str, *, field: str = "judge") -> None:
        super().__init__(message)
        self.field = field


def read_verdicts(source: Any) -> pl.DataFrame:
    """Validated judge verdicts (the judgments schema) with a boolean ``inconsistent`` column.

    Args:
        source: a file (CSV, JSONL, Parquet, ...) or a polars / pandas frame.

    Raises:
        adaptive.core.data.DataError: a row breaks the judgments schema; JudgeError: a bad
            ``inconsistent`` value, or a judge's second verdict on a cell (dimension, prompt,
            pair of systems in either order): a judge gives one verdict per cell, as the
            service's store refuses a second one.
    """
    from adaptive.core.data import as_polars, read_judgments

    frame = read_judgments(source)
    raw = _raw_flags(Path(source)) if isinstance(source, str | Path) else as_polars(source)
    flags = [False] * frame.height
    if "inconsistent" in raw.columns:
        text = raw["inconsistent"].cast(pl.String).fill_null("").str.to_lowercase()
        values = text.gather(frame["row"] - 1).to_list()
        for i, v in enumerate(values):
            if v not in _TRUE + _FALSE:
                row = int(frame["row"][i])
                raise JudgeError(
                    f"row {row}, column 'inconsistent': got {v!r}, expected true/false"
                )
            flags[i] = v in _TRUE
    cell = pl.struct(
        "annotator_id",
        "dimension",
        "item_id",
        pl.min_horizontal("system_a", "system_b").alias("_lo"),
        pl.max_horizontal("system_a", "system_b").alias("_hi"),
    )
    again = frame.with_columns(cell.alias("_cell")).with_columns(
        pl.col("row").first().over("_cell").alias("_first")
    )
    again = again.filter(pl.col("row") != pl.col("_first"))
    if again.height:
        row, first, name = again.select("row", "_first", "annotator_id").row(0)
        raise JudgeError(
            f"row {row}: judge {name!r} already has a verdict on this cell (row {first}); "
            f"a judge gives one verdict per cell ({again.height} such row(s))"
        )
    return frame.with_columns(pl.Series("inconsistent", flags, pl.Boolean))


def _raw_flags(path: Path) -> pl.DataFrame:
    """The file's ``inconsistent`` column, if any (the judgments reader keeps only the schema's)."""
    import json

    from adaptive.core.data import _read_raw

    suffix = path.suffix.lower()
    if suffix == ".json":
        records = json.loads(path.read_text())
        if any("inconsistent" in r for r in records):
            return pl.DataFrame({"inconsistent": [r.get("inconsistent") for r in records]})
        return pl.DataFrame()
    if suffix in {".parquet", ".pq"}:
        if "inconsistent" in pl.read_parquet_schema(path):
            return pl.read_parquet(path, columns=["inconsistent"])
        return pl.DataFrame()
    return _read_raw(path)


def choose_judge(judges: Iterable[str], judge: str | None) -> str:
    """The judge a decision uses: ``judge``, or the only one (else an error listing them).

    Args:
        judges: the judges' names (of every verdict, or each once).
    """
    names = sorted(set(judges))
    if judge is not None:
        if judge not in names:
            raise JudgeError(f"no verdicts of judge {judge!r}; the judges are {names}")
        return judge
    if not names:
        raise JudgeError("no judge verdicts: give an automatic judge's verdicts first")
    if len(names) != 1:
        raise JudgeError(f"the verdicts name {len(names)} judges {names}: choose one (judge)")
    if not names[0]:
        raise JudgeError("judge verdicts need an annotator_id naming the judge")
    return str(names[0])


class HybridReport(NamedTuple):
    """What :func:`decide_with_judge` answers: the rows and how they were made."""

    rows: list[dict[str, Any]]
    rule: DecisionRule
    judge: str
    family: Family
    outside: list[tuple[str, str, str]]
    decisions: Any  # adaptive.judge.hybrid_decisions.HybridDecisions (next_rates: the routing's)
    cells: pl.DataFrame  # the design: comparison (family index), item_id, verdict code


def _family_table(family: Any) -> pl.DataFrame:
    """(dimension, system_a, system_b) -> comparison index and orientation, both ways round."""
    rows = []
    for f, (d, a, b) in enumerate(family.comparisons):
        rows.append((d, a, b, f, False))
        rows.append((d, b, a, f, True))
    return pl.DataFrame(
        rows,
        schema={"dimension": pl.String, "system_a": pl.String, "system_b": pl.String,
                "comparison": pl.Int64, "flipped": pl.Boolean},
        orient="row",
    )  # fmt: skip


def describe(rule: DecisionRule, judge: str, size: int) -> str:
    """The rule's words for hybrid rows."""
    each = rule.alpha_each(size)
    return (
        f"hybrid with judge {judge!r}, on the human judgments corrected by the judge's "
        f"calibrated verdicts: sign by beta({rule.mixture:g}) mixture e-processes at "
        f"{each / 2:.3g} each side; equivalence |delta| < {rule.margin:g} by an "
        f"empirical-Bernstein confidence sequence at {each / 2:.3g} each side; unit "
        f"{rule.unit}; {rule.correction.describe(rule.alpha, size)}"
    )


def _check_correction(rule: DecisionRule) -> None:
    """Hybrid decisions split the level as the correction does; they do not close by e-Holm."""
    if rule.correction.closes_by_e_holm:
        taken = [c.value for c in Correction if not c.closes_by_e_holm]
        raise JudgeError(
            f"hybrid decisions take correction {' or '.join(taken)} (not {rule.correction})",
            field="correction",
        )


def decide_with_judge(
    judgments: pl.DataFrame,
    verdicts: pl.DataFrame,
    rule: DecisionRule | None = None,
    *,
    judge: str | None = None,
    routes: pl.DataFrame | None = None,
    systems: Sequence[str] = (),
    config: Any = None,
) -> HybridReport:
    """Every family comparison's hybrid decision: human judgments and one judge's verdicts.

    Args:
        judgments: validated human judgments in arrival order (:func:`evalset.read`).
        verdicts: :func:`read_verdicts`'s frame (one or several judges).
        rule: the :class:`DecisionRule` (its family, level, margin, unit; a correction that
            does not close by e-Holm).
        judge: which judge (default: the only one).
        routes: the rates cells were served with by the hybrid's routing (the service's next
            batch records them): ``lease_id, annotator_id, dimension, item_id, system_a,
            system_b, judge, rates`` (a list per verdict code, oriented as the row's
            systems). A human judgment of a routed cell divides by its rate and always counts
            (a routed draw is with replacement, whatever the unit); the others are taken as
            uniform draws. A judgment that names its lease (``lease_id``) is that lease's
            draw of the cell; one without is matched by annotator and cell, to a route no
            judgment with its lease has taken.
        systems: the campaign's systems, for the ``all-pairs`` family (default: those
            judged; the service passes its registered systems, as ``GET /decisions`` does).
        config: how the judge is used (:class:`adaptive.judge.hybrid.HybridConfig`; default its
            defaults; ``sign="sequence"`` gives the rule before the sign e-processes).

    Returns:
        :class:`HybridReport`; a row per family comparison (:func:`hybrid_rows`). As in the
        human-only rows, a sign is decided by its e-process (``e_b_better`` / ``e_a_better``
        now; the decision when one reached ``2 / alpha_each`` at some judgment) and
        ``cs_low, cs_high`` is the confidence sequence that decides equivalence.
    """
    from adaptive.judge.hybrid_decisions import decide_hybrid, design_shares
    from adaptive.stopping.decisions import decision_observations
    from evalset.family import family_judgments

    rule = rule or DecisionRule()
    _check_correction(rule)
    name = choose_judge(verdicts["annotator_id"].to_list(), judge)
    fj = family_judgments(judgments, rule, systems=systems)
    family, R = fj.family, fj.family.size
    order = np.argsort(fj.source, kind="stable")  # arrival order across the dimensions
    comp, prompt = fj.comparison[order], fj.prompt[order]
    humans = _humans(judgments, fj.source[order], comp)
    table = _family_table(family)
    cells = _judge_cells(verdicts, name, table)
    cost = _running_count(comp)
    joined = humans.select("comparison", "item_id").join(
        cells, on=["comparison", "item_id"], how="left", maintain_order="left"
    )
    verdict = joined["verdict"].to_numpy(allow_copy=True).astype(np.float64)
    judge_cells = np.bincount(cells["comparison"].to_numpy(), minlength=R)
    unjudged = judge_cells[comp] == 0
    in_design = ~np.isnan(verdict) | unjudged
    verdict = np.where(unjudged, 1, np.nan_to_num(verdict)).astype(np.int64)
    rates, routed, repeat = _recorded_rates(humans, routes, table, name)
    keep = (decision_observations(comp, prompt, rule.unit) | routed) & in_design & ~repeat
    share = design_shares(cells["comparison"].to_numpy(), cells["verdict"].to_numpy(), R)
    d = decide_hybrid(
        comp[keep],
        verdict[keep],
        fj.signed[order][keep],
        cost[keep],
        share,
        alpha_each=rule.alpha_each(R),
        margin=rule.margin,
        config=config,
        rates=rates[keep] if routed.any() else None,
        mixture=rule.mixture,
    )
    counts = HumanCounts(np.bincount(comp, minlength=R), _prompts_judged(comp, prompt, R))
    rows = hybrid_rows(d, family, rule, name, judge_cells, counts)
    return HybridReport(rows, rule, name, family, fj.outside, d, cells)


class HumanCounts(NamedTuple):
    """(family size,) each comparison's human judgments and prompts judged."""

    judgments: np.ndarray
    prompts: np.ndarray


def _humans(judgments: pl.DataFrame, source: np.ndarray, comp: np.ndarray) -> pl.DataFrame:
    """The family's human judgments (``source``: their rows) with their ``comparison``."""
    leased = ["lease_id"] if "lease_id" in judgments.columns else []
    picked = judgments.select("item_id", "annotator_id", *leased)[source]
    return picked.with_columns(pl.Series("comparison", comp, pl.Int64))


def _judge_cells(verdicts: pl.DataFrame, judge: str, table: pl.DataFrame) -> pl.DataFrame:
    """The judge's verdict code on each family cell (comparison, item_id), oriented as the
    family (an inconsistent tie: code 3)."""
    key = ["dimension", "system_a", "system_b"]
    cells = (
        verdicts.filter(pl.col("annotator_id") == judge)
        .select([*key, "item_id", "winner", "inconsistent"])
        .join(table, on=key, how="inner")
        .unique(subset=["comparison", "item_id"], keep="first", maintain_order=True)
    )
    forward = pl.col("winner").replace_strict(_CODE, return_dtype=pl.Int64)
    backward = pl.col("winner").replace_strict(_FLIP_CODE, return_dtype=pl.Int64)
    code = pl.when(pl.col("flipped")).then(backward).otherwise(forward)
    return cells.with_columns(
        pl.when(pl.col("inconsistent") & (pl.col("winner") == "tie"))
        .then(pl.lit(3, pl.Int64))
        .otherwise(code)
        .alias("verdict")
    ).select("comparison", "item_id", "verdict")


def _running_count(comp: np.ndarray) -> np.ndarray:
    """(N,) each judgment's count among its comparison's judgments so far (1, 2, ...)."""
    by = np.argsort(comp, kind="stable")
    ranked = comp[by]
    count = np.empty(comp.shape[0], np.int64)
    count[by] = np.arange(comp.shape[0]) - np.searchsorted(ranked, ranked, side="left") + 1
    return count


def _prompts_judged(comp: np.ndarray, prompt: np.ndarray, size: int) -> np.ndarray:
    """(size,) the prompts each comparison has judgments of."""
    if comp.shape[0] == 0:
        return np.zeros(size, np.int64)
    cells = np.unique(np.stack([comp, prompt]), axis=1)
    return np.bincount(cells[0], minlength=size)


def hybrid_rows(
    d: Any, family: Family, rule: DecisionRule, judge: str, judge_cells: np.ndarray, counts: Any
) -> list[dict[str, Any]]:
    """One row per family comparison: the human-only rows' ``dimension, system_a, system_b,
    decision, net_preference, cs_low, cs_high, n_judgments, n_used, n_prompts, closed_at,
    e_b_better, e_a_better`` (:mod:`adaptive.stopping.decision_rows`), the judge's ``judge,
    judge_cells, judge_agreement, effective_humans, judge_weight``, then ``alpha_each,
    family, family_size, rule``."""
    from adaptive.stopping.decision_rows import comparison_columns, count_columns, rule_columns

    words, each = describe(rule, judge, family.size), rule.alpha_each(family.size)
    rows = []
    for c, names in enumerate(family.comparisons):
        judged = bool(judge_cells[c])
        row = comparison_columns(names, d.outcome[c], d.estimate[c], d.low[c], d.high[c])
        row |= count_columns(counts.judgments[c], d.num_used[c], counts.prompts[c], d.closed_at[c])
        row |= {"e_b_better": _evalue(d.log_eb[c]), "e_a_better": _evalue(d.log_ea[c])}
        row |= {
            "judge": judge,
            "judge_cells": int(judge_cells[c]),
            "judge_agreement": _finite(d.agreement[c]) if judged else None,
            "effective_humans": _finite(d.effective_humans[c]),
            "judge_weight": float(d.judge_weight[c]) if judged else None,
        }
        rows.append(row | rule_columns(each, family, words))
    return rows


def _recorded_rates(
    humans: pl.DataFrame, routes: pl.DataFrame | None, table: pl.DataFrame, judge: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, K) each human judgment's recorded rates (ones: none), (N,) whether it is a routed
    draw, and (N,) whether it is a further judgment of a routed draw already counted.

    A routed draw is one cell drawn by its rates: its first judgment is the draw's
    observation. A further judgment of the same draw (a second crowd assignment of the task,
    a repeat) is neither a new routed draw (the cell, and so its verdict, is already known
    when it arrives, so its residual over the rate has no mean Δ given the past) nor a
    uniform one; it is left out of the decisions.
    """
    from adaptive.judge.hybrid import VERDICTS

    N, K = humans.height, len(VERDICTS)
    rates, routed, repeat = np.ones((N, K)), np.zeros(N, bool), np.zeros(N, bool)
    if routes is None or routes.height == 0:
        return rates, routed, repeat
    key = ["dimension", "system_a", "system_b"]
    cell = ["comparison", "item_id"]
    if "lease_id" not in routes.columns:
        routes = routes.with_columns(pl.lit(None, pl.Utf8).alias("lease_id"))
    mine = (
        routes.filter(pl.col("judge") == judge)
        .join(table, on=key, how="inner")
        .select("lease_id", "annotator_id", *cell, "flipped", "rates")
    )
    people = humans.with_columns(
        (pl.col("lease_id") if "lease_id" in humans.columns else pl.lit(None, pl.Utf8)).alias(
            "lease_id"
        )
    ).select("lease_id", "annotator_id", *cell)
    # a judgment naming its lease is that lease's draw of the cell (its first judgment)
    by_lease = people.join(
        mine.unique(subset=["lease_id", *cell], keep="last").drop("annotator_id"),
        on=["lease_id", *cell],
        how="left",
        maintain_order="left",
    ).with_columns(pl.col("rates").is_not_null().alias("match"))
    by_lease = _first_match(by_lease, ["lease_id", *cell])
    taken = by_lease.filter("hit").select("lease_id", *cell)
    # the others by annotator and cell, among the routes no lease-named judgment took
    rest = (
        mine.join(taken, on=["lease_id", *cell], how="anti")
        .unique(subset=["annotator_id", *cell], keep="last", maintain_order=True)
        .drop("lease_id")
    )
    by_name = people.join(
        rest, on=["annotator_id", *cell], how="left", maintain_order="left"
    ).with_columns((pl.col("rates").is_not_null() & pl.col("lease_id").is_null()).alias("match"))
    by_name = _first_match(by_name, ["annotator_id", *cell])
    lease_hit, name_hit = by_lease["hit"].to_numpy(), by_name["hit"].to_numpy()
    repeat = (by_lease["match"].to_numpy() & ~lease_hit) | (by_name["match"].to_numpy() & ~name_hit)
    columns = {
        "lease": (by_lease["rates"].to_list(), by_lease["flipped"].to_list()),
        "name": (by_name["rates"].to_list(), by_name["flipped"].to_list()),
    }
    for i in np.flatnonzero(lease_hit | name_hit):
        got, flipped = columns["lease" if lease_hit[i] else "name"]
        rate = np.asarray(got[i], np.float64)
        rates[i] = rate[[2, 1, 0, 3]] if flipped[i] else rate  # A <-> B: the family's orientation
    routed = lease_hit | name_hit
    return rates, routed, repeat


def _first_match(frame: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """``hit``: the first row (in arrival order) of each ``key`` among the ``match`` rows."""
    indexed = frame.with_row_index("_i")
    firsts = indexed.filter("match").unique(subset=key, keep="first")["_i"]
    return indexed.with_columns(pl.col("_i").is_in(firsts.implode()).alias("hit"))


def _evalue(log_e: float) -> float:
    """An e-value from its log, capped as the human-only rows' (exp(LOG_E_CAP), about 1e300)."""
    from adaptive.stopping.rule import LOG_E_CAP

    return float(np.exp(min(float(log_e), LOG_E_CAP)))


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def hybrid_decisions(
    data: Any, judge_data: Any, *, judge: str | None = None, **rule: Any
) -> HybridReport:
    """:func:`decide_with_judge` on a judgments frame or file and a verdicts frame or file
    (``rule``: :func:`evalset.family.rule_of`'s options)."""
    from evalset.family import rule_of

    dimension = rule.pop("dimension", None)
    judgments = read(data)
    verdicts = read_verdicts(judge_data)
    if dimension is not None:
        judgments = judgments.filter(pl.col("dimension") == dimension)
        verdicts = verdicts.filter(pl.col("dimension") == dimension)
    return decide_with_judge(judgments, verdicts, rule_of(**rule), judge=judge)
