"""LOCO folds batched: every fast fit of a run at one padded shape, one compiled program.

:func:`adaptive.loco.run_fold` makes each fit at its own padded shape, and each shape
bucket compiles its own program; on ChatEval NCM (17 folds) that is four programs of
about 20 s each, most of a serial run. :func:`run_folds` advances several folds together
(:func:`adaptive.loco.fold_steps`) and makes each round's fits at :func:`loco_shape`.
"""

from __future__ import annotations

import time

import numpy as np

from adaptive.loco import FitRequest, FoldResult, LocoConfig, LocoData, fold_steps
from adaptive.tier_plan import ItemFit, fit_items_batch
from stan_free_models.inference import bucket
from stan_free_models.laplace_batch import BatchShape


def loco_shape(data: LocoData, batch: int = 1) -> BatchShape:
    """The one padded shape of every fit of a batched LOCO run: the largest training fit's.

    It depends on the data only, not on which folds run together, so a group of folds on a
    Ray worker gets the same numbers as the whole run in one process.
    """
    per_fold = np.bincount(data.cell_comparison, minlength=data.num_comparisons)
    return BatchShape(
        batch,
        bucket(int(len(data.cell_y) - per_fold.min()), 64),
        bucket(data.num_comparisons - 1),
        bucket(data.num_prompts),
    )


def run_folds(
    data: LocoData,
    config: LocoConfig,
    folds: list[int],
    *,
    vmap: bool = False,
    progress=None,
) -> list[FoldResult]:
    """Several folds with every fast fit at one padded shape: one compiled program.

    The folds advance together (:func:`fold_steps`): all training fits, then all tier
    fits, each round through :func:`adaptive.tier_plan.fit_items_batch` at
    :func:`loco_shape`. One fold at a time, each fit compiles a program for its own shape
    bucket (on ChatEval NCM: the training fits' one and the tier fits' three), which is
    most of a serial run's time; here the run compiles one.

    Numbers: a training fit's shape is already :func:`loco_shape`'s, so with ``vmap=False``
    it is :func:`run_fold`'s bit for bit, and so is every policy that uses it alone
    (``random``, ``prompt``, ``discrimination``, the full-set SE). A tier refit (2-7
    comparisons) is padded up from its own bucket: padding is exact in arithmetic but
    changes float32 rounding, and L-BFGS stops within its tolerance somewhere else, so
    ``prompt_model``'s tier information (and with ``tier_estimate`` "tier"/"linked", its
    SEs) moves by that much, and a near-tie of two prompts' information can swap
    (docs/performance.md has the measured differences). The batched numbers do not
    depend on which folds run together or how many (a fold alone, a Ray group, all).
    ``vmap=True`` runs each round as one vmapped program instead of a loop over one
    compiled fit: the same shapes, float differences of the order above in every fit.

    Returns:
        The results in ``folds`` order; ``info["seconds"]`` is the fold's own time plus
        its share of the rounds' fits.
    """
    shape = loco_shape(data, len(folds) if vmap else 1)
    steps = {f: fold_steps(data, config, f, reuse_likelihood=True) for f in folds}
    spent = dict.fromkeys(folds, 0.0)
    requests: dict[int, FitRequest] = {}
    results: dict[int, FoldResult] = {}

    def advance(fold: int, fit: ItemFit | None) -> None:
        start = time.perf_counter()
        try:
            requests[fold] = next(steps[fold]) if fit is None else steps[fold].send(fit)
        except StopIteration as stop:
            results[fold] = stop.value
            if progress is not None:
                progress(len(results), len(folds))
        spent[fold] += time.perf_counter() - start

    for fold in folds:
        advance(fold, None)
    while requests:
        asked = list(requests)
        start = time.perf_counter()
        fits, shape = fit_items_batch(
            data,
            [requests[f][0] for f in asked],
            [requests[f][1] for f in asked],
            config.num_draws,
            shape=shape,
            vmap=vmap,
        )
        share = (time.perf_counter() - start) / len(asked)
        requests = {}
        for fold, fit in zip(asked, fits):
            spent[fold] += share
            advance(fold, fit)
    for fold in folds:
        results[fold].info["seconds"] = spent[fold]
    return [results[f] for f in folds]


def fold_group_task(shared: tuple[LocoData, LocoConfig], group: list[int]) -> list[FoldResult]:
    """:func:`run_folds` on a group of folds, the form :mod:`adaptive.parallel` maps."""
    data, config = shared
    return run_folds(data, config, group)


__all__ = ["fold_group_task", "loco_shape", "run_folds"]
