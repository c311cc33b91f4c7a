"""evalset for notebooks: the analyses of the command line as functions on a DataFrame.

Every function takes judgments as a polars or pandas DataFrame (or a file path), in
the common schema (``item_id, system_a, system_b, annotator_id, winner`` with
``winner`` in ``a|b|tie``, optional ``dimension, judgment_id, shown_first,
timestamp``) or as a Chatbot Arena battle log (``model_a, model_b, winner``), and
returns a polars DataFrame (``.to_pandas()`` for pandas, needs pyarrow). Sign
convention everywhere: a comparison "A vs B" has theta > 0 when **B is better**.

>>> import evalset
>>> df = evalset.example(num_systems=3, num_prompts=20, seed=1)
>>> df.columns[:5]
['item_id', 'system_a', 'system_b', 'annotator_id', 'winner']
>>> evalset.decisions(df).select("system_a", "system_b", "decision").row(1)
('s0', 's2', 'B better')

========================= =============================================================
function                  what
========================= =============================================================
:func:`read`              validate a frame or read a file (CSV, JSON, JSONL, Parquet)
:func:`significance`      every comparison's theta, interval, P(B better), verdicts
:func:`decisions`         anytime-valid decision per comparison from its own judgments
:func:`answer`            the campaign's question (top-k, ranking, versus) from the decisions
:func:`evidence`          each comparison's e-values and confidence sequence over time
:func:`items`             per prompt: discrimination alpha, thresholds, redundancy group
:func:`leaderboard`       pooled Bradley-Terry abilities (sum-to-zero or vs a reference)
:func:`elo`               Arena-style Elo ratings with bootstrap and rank intervals
:func:`annotators`        per annotator: position bias and agreement, flags
:func:`agreement`         Krippendorff's alpha / Fleiss' kappa of repeated cells, per annotator
:func:`gold`              each annotator scored on gold cells (known answers), with a flag
:func:`recommend`         the next annotation batch (a task table)
:func:`prune`             kept and dropped prompts per model tier
:func:`replay`            judgments each allocation policy needs on a logged campaign (or
                          until its question is answered)
:func:`fit`               the graded-response fit itself (for :func:`inference_data`)
:func:`inference_data`    an ArviZ ``InferenceData`` with named coordinates
``plot_*``                the pictures of :mod:`evalset.plots` (PNG or SVG)
========================= =============================================================

``method="fast"`` (MAP + Laplace, seconds to a minute) is the default here, ``"nuts"`` the full
posterior (minutes); ``"laplace"`` is accepted as another name for ``"fast"``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from adaptive.stopping.rule import DEFAULT_LEVEL
from evalset._common import _dims, _method, example, read
from evalset.annotator_agreement import agreement
from evalset.bradley_terry import annotators, elo, leaderboard
from evalset.decide import decisions, evidence
from evalset.gold import gold
from evalset.questions import answer
from evalset.verdicts import DEFAULT_ADJUST, DEFAULT_INTERVAL, DEFAULT_METHOD, DEFAULT_SEED

__all__ = [
    "agreement",
    "annotators",
    "answer",
    "decisions",
    "elo",
    "gold",
    "evidence",
    "example",
    "fit",
    "inference_data",
    "items",
    "leaderboard",
    "plot_annotators",
    "plot_evidence",
    "plot_forest",
    "plot_item_information",
    "plot_matrices",
    "plot_progress",
    "prune",
    "read",
    "recommend",
    "replay",
    "significance",
]

# ---------------------------------------------------------------- graded response


def fit(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = "fast",
    preset: str = "default",
    likelihood: str | None = None,
    parameterization: str = "comparison",
    lapse: bool | None = None,
    num_draws: int | None = None,
    num_chains: int | None = None,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    group_redundant: bool = True,
    seed: int = 0,
):
    """The graded-response fit of one dimension (:class:`adaptive.estimation.pipeline.Analysis`).

    Args:
        data: judgments (frame or file).
        dimension: which one (needed when the data has several).
        method: ``fast`` (MAP + Laplace) or ``nuts``.
        preset: ``default`` (every judgment a graded response, one fit, intervals that
            hold when the judgments of a cell are dependent; as ``evalset significance``)
            or ``paper`` (Sedoc & Ungar's net rating per cell; docs/statistics.md).
        likelihood: ``net`` or ``judgment`` instead of the preset's (``net`` has no cells,
            so no cell effect and no lapse).
        parameterization: ``comparison`` (one theta per comparison) or ``system``
            (theta = s_B - s_A; symmetric thresholds, so theta = 0 means no preference).
        lapse: learn the share of random answers (``None``: the preset's, off); it brings
            the model's cell effect and turns the default's robust intervals off.
        num_draws, num_chains, num_warmup, num_samples: the fit's sizes (``None``: the
            command line's: :class:`adaptive.estimation.fitting.FitConfig`'s for the fast path; for
            NUTS a 300-iteration warm-up, then blocks of 250 draws per chain until every
            parameter has a bulk and tail ESS of 400).
        group_redundant: group prompts whose judgments correlate > 0.6.
    """
    from adaptive.estimation.pipeline import analyze

    judgments = read(data)
    config = _fit_config(
        method=method,
        preset=preset,
        likelihood=likelihood,
        parameterization=parameterization,
        lapse=lapse,
        num_draws=num_draws,
        num_chains=num_chains,
        num_warmup=num_warmup,
        num_samples=num_samples,
        seed=seed,
    )
    return analyze(judgments, dimension=dimension, config=config, group_redundant=group_redundant)


def _fit_config(
    *,
    method: str = "fast",
    preset: str = "default",
    likelihood: str | None = None,
    parameterization: str = "comparison",
    lapse: bool | None = None,
    **run: Any,
):
    """The FitConfig of :func:`fit`'s arguments: what the user chose, resolved by
    :func:`adaptive.estimation.fitting.preset_config` (the command line's and the service's too)."""
    from adaptive.estimation.fitting import preset_config

    chosen: dict[str, Any] = {"likelihood": likelihood, "lapse": lapse, **run}
    overrides = {k: v for k, v in chosen.items() if v is not None}
    return preset_config(
        preset, method=_method(method), parameterization=parameterization, **overrides
    )


def significance_fits(
    judgments: pl.DataFrame, *, dimension: str | None, method: str, seed: int, **fit_options: Any
) -> list[Any]:
    """The fits :func:`significance` reads its rows from, one per dimension (``dimension``: one
    of them; ``fit_options`` go to :func:`fit`); the service's ``model=default`` reads them too."""
    return [
        fit(judgments, dimension=dim, method=method, seed=seed, **fit_options)
        for dim in _dims(judgments, dimension)
    ]


def significance(
    data: Any,
    *,
    dimension: str | None = None,
    method: str = DEFAULT_METHOD,
    adjust: str = DEFAULT_ADJUST,
    alpha: float = DEFAULT_LEVEL,
    level: float = DEFAULT_INTERVAL,
    seed: int = DEFAULT_SEED,
    rule: str | None = None,
    **fit_options: Any,
) -> pl.DataFrame:
    """Every comparison: theta mean, sd, interval, P(B better), raw and adjusted verdicts.

    Rows are sorted by dimension, then by ``mean`` (the largest preference for B first).
    ``adjust``: the multiplicity adjustment of ``significant_adjusted`` (``holm``,
    ``bonferroni`` or ``none``; as ``evalset significance --adjust``) at family-wise level
    ``alpha``; ``rule`` is its former name (deprecated: a rule is a decision rule).
    ``fit_options`` go to :func:`fit` (e.g. ``preset="paper"`` or ``lapse=False``).

    Example:
        >>> sig = significance(example(num_systems=3, num_prompts=10), num_draws=200)
        >>> sig.select("system_a", "system_b", "significant").row(0)
        ('s0', 's2', True)
    """
    from evalset.verdicts import significance_rows

    if rule is not None:
        warnings.warn(
            "significance(rule=...) is now adjust=...: a rule is a decision rule",
            DeprecationWarning,
            stacklevel=2,
        )
        adjust = rule
    fits = significance_fits(
        read(data), dimension=dimension, method=method, seed=seed, **fit_options
    )
    rows = significance_rows(fits, adjust=adjust, alpha=alpha, level=level)
    return pl.DataFrame(rows, infer_schema_length=None)


def items(
    data: Any, *, dimension: str | None = None, method: str = "fast", seed: int = 0, **fit_options
) -> pl.DataFrame:
    """Per prompt (or redundancy group): discrimination alpha and thresholds b, most
    discriminating first."""
    from adaptive.estimation.pipeline import analysis_item_rows

    judgments = read(data)
    rows = []
    for dim in _dims(judgments, dimension):
        rows += analysis_item_rows(
            fit(judgments, dimension=dim, method=method, seed=seed, **fit_options)
        )
    return pl.DataFrame(rows, infer_schema_length=None)


def inference_data(result: Any):
    """An ArviZ ``InferenceData`` of a fit, with named dimensions and coordinates.

    Args:
        result: :func:`fit`'s result (graded response: ``comparison``, ``item``,
            ``system``, ``threshold``) or an :class:`adaptive.leaderboards.bt.BTFit` (``system``).

    Example:
        >>> idata = inference_data(fit(example(num_systems=3, num_prompts=10), num_draws=200))
        >>> idata.posterior["theta"].coords["comparison"].values[:2].tolist()
        ['s0 vs s1', 's0 vs s2']
    """
    from stan_free_models.arviz_safe import import_arviz

    az = import_arviz()  # guards the first import against a race between processes
    if hasattr(result, "cells"):  # graded response
        cells, post = result.cells, result.posterior
        comparisons = [f"{a} vs {b}" for a, b in cells.comparison_names()]
        coords = {
            "comparison": comparisons,
            "item": ["+".join(m) for m in cells.item_members],
            "system": list(cells.systems),
        }
        dims = {"theta": ["comparison"], "alpha": ["item"], "log_alpha": ["item"],
                "b": ["item", "threshold"], "skill": ["system"]}  # fmt: skip
        draws = post.draws
        coords["threshold"] = list(range(1, draws["b"].shape[-1] + 1))
    else:  # Bradley-Terry
        players = result.input.players
        coords = {"system": [s if not i else f"{i}:{s}" for i, s in players]}
        draws = result.posterior.draws
        coords["group"] = list(range(draws["intercept"].shape[-1])) if "intercept" in draws else []
        dims = {"ability": ["system"], "intercept": ["group"]}
    dims = {k: v for k, v in dims.items() if k in draws}
    return az.from_dict(
        posterior={k: np.asarray(v) for k, v in draws.items()}, coords=coords, dims=dims
    )


# ---------------------------------------------------------------- thin wrappers


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def recommend(
    data: Any,
    *,
    texts_from: str | Path | None = None,
    targets: Sequence[tuple[str, str]] | Sequence[str] = (),
    **options: Any,
) -> pl.DataFrame:
    """The next annotation batch of a judgments file or frame (as ``evalset recommend --data``).

    Calls :func:`evalset.batch.recommend_batch`, the command line's library. The prompt
    and response texts come from ``items.csv`` / ``responses.csv`` in ``texts_from`` (a
    folder; default: the folder of ``data`` when it is a file). ``targets``: comparisons
    that matter, as ``("A", "B")`` or ``"A:B"``. ``options``: the fields of
    :class:`evalset.batch.RecommendRequest` (``size`` 20, ``seed`` 0, ``adjacent``,
    ``tier``, ``burn_in``, ``max_per_cell``, ``annotator``, ``parameterization``,
    ``draws``, ``question``: only what can still change its answer) and of its decision rule (``alpha``, ``margin``, ``unit``, ``correction``);
    the defaults are those types'. What the batch leaves out (comparisons its prompts cannot
    close, a short batch) is printed to stderr, as the command line does.
    """
    from evalset.batch import as_pairs, recommend_batch, side_tables
    from evalset.decide import rule_of
    from evalset.plan import RecommendRequest

    if texts_from is None and isinstance(data, str | Path):
        texts_from = Path(data).parent
    prompt_text, responses = side_tables(texts_from) if texts_from is not None else ({}, {})
    rule_keys = ("alpha", "margin", "unit", "correction")
    rule = rule_of(**{k: options.pop(k) for k in rule_keys if k in options})
    if "tier" in options:
        options["tier"] = tuple(options["tier"])
    request = RecommendRequest(rule=rule, targets=as_pairs(targets), **options)
    rows = recommend_batch(
        read(data), request, prompt_text=prompt_text, responses=responses, note=_stderr
    )
    return pl.DataFrame(rows, infer_schema_length=None)


def prune(
    data: Any,
    *,
    keep: int | None = None,
    target_se_ratio: float | None = None,
    tiers: int = 2,
    dimension: str | None = None,
    seed: int = 0,
    rank: str = "shared",
) -> pl.DataFrame:
    """Kept and dropped prompts per model tier with reasons and expected SE (``evalset prune``).

    The rows of :func:`evalset.pruning.prune_judgments`, the library ``evalset prune`` and
    ``GET /projects/{id}/pruning`` call: the kept prompts first, most informative first.
    ``rank``: ``shared`` (each prompt's effect shared by the tier's comparisons, shrunk;
    the default, as ``evalset prune --rank``) or ``information`` (the paper's ranking).
    """
    from evalset.pruning import prune_config, prune_judgments

    config = prune_config(keep, target_se_ratio, tiers=tiers, seed=seed, rank=rank)
    rows = prune_judgments(read(data), config, dimension=dimension)
    return pl.DataFrame(rows, infer_schema_length=None)


def replay(
    data: Any,
    *,
    policies: Sequence[str] = ("adaptive", "uniform"),
    seeds: int = 3,
    batch_size: int = 100,
    dimension: str | None = None,
    seed: int = 0,
    question: str | None = None,
    semi_synthetic: bool = False,
    **rule: Any,
) -> pl.DataFrame:
    """Judgments each policy spends until every comparison is decided, or until the
    campaign's ``question`` (``top-k:2``, ``ranking``, ``versus:R``, ...) is answered, on the
    logged campaign itself (or on fresh campaigns simulated from it, ``semi_synthetic``);
    the rows of ``evalset replay --format json`` (:func:`evalset.replays.replay_rows`).
    ``rule``: ``alpha``, ``margin``, ``unit``, ``correction``, ``family``, ``pairs``."""
    from evalset.family import rule_of
    from evalset.replays import replay_rows

    judgments = read(data)
    rows = replay_rows(
        judgments,
        policies=policies,
        seeds=seeds,
        seed=seed,
        batch_size=batch_size,
        rule=rule_of(**rule),
        question=question,
        semi_synthetic=semi_synthetic,
        dimensions=_dims(judgments, dimension),
    )
    return pl.DataFrame(
        [{k: v for k, v in r.items() if k != "curve"} for r in rows], infer_schema_length=None
    )


# ---------------------------------------------------------------- pictures


def plot_forest(data: Any, path: str | Path, **options: Any) -> Path:
    """Leaderboard forest plot (intervals, coloured by the decision against the leader)."""
    from evalset.plots import plot_leaderboard

    judgments = read(data)
    return plot_leaderboard(leaderboard(judgments), decisions(judgments), path, **options)


def plot_annotators(
    data: Any,
    path: str | Path,
    *,
    dimension: str | None = None,
    method: str = "fast",
    assume_a_first: bool = False,
    seed: int = 0,
    **options: Any,
) -> Path:
    """Each annotator's position bias (interval) and agreement with the others
    (:func:`annotators`'s screens; ``assume_a_first`` as ``evalset plot annotators
    --assume-a-first``: without a ``shown_first`` column, response a was shown first)."""
    from evalset.plots import plot_annotators as draw

    table = annotators(
        data, dimension=dimension, method=method, assume_a_first=assume_a_first, seed=seed
    )
    return draw(table, path, **options)


def plot_item_information(data: Any, path: str | Path, **options: Any) -> Path:
    """Item information curves I_j(theta) of the most and least discriminating prompts.

    ``data``: :func:`fit`'s result (drawn as it is) or judgments (fitted first with
    ``dimension``, ``method``, ``preset``, ... from ``options``, as :func:`fit` takes them).
    """
    from evalset.plots import plot_item_information as draw

    if hasattr(data, "posterior") and hasattr(data, "cells"):  # a fit: no second fit
        return draw(data, path, **options)
    drawing = {k: options.pop(k) for k in ("num_curves", "title") if k in options}
    return draw(fit(data, **options), path, **drawing)


def plot_matrices(data: Any, path: str | Path, **options: Any) -> Path:
    """Win-rate and judgment-count matrices of the systems."""
    from evalset.plots import plot_matrices as draw

    return draw(read(data), path, **options)


def plot_evidence(data: Any, path: str | Path, **options: Any) -> Path:
    """Each comparison's e-values over its judgments, the decision boundary and where it
    closed."""
    from evalset.plots import plot_evidence as draw

    return draw(evidence(data, dimension=options.pop("dimension", None)), path, **options)


def plot_progress(data: Any, path: str | Path, **options: Any) -> Path:
    """Campaign progress: closed / open comparisons, judgments per comparison, judgments left."""
    from evalset.plots import plot_progress as draw

    return draw(decisions(data, dimension=options.pop("dimension", None)), path, **options)
