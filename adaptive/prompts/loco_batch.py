"""LOCO folds batched: every fast fit of a run at one padded shape, one compiled program.

:func:`adaptive.prompts.loco.run_fold` makes each fit at its own padded shape, and each shape
bucket compiles its own program; on ChatEval NCM (17 folds) that is four programs of
about 20 s each (the training fits' bucket and three of the tier refits'), against
0.2 s to run a fit: most of a serial run. :func:`adaptive.prompts.loco.run_folds` advances
several folds together (:func:`adaptive.prompts.loco.fold_steps`, run here by
:func:`run_rounds`) and makes each round's fits at :func:`loco_shape`, so the run
compiles one program.

Numbers: a training fit's own shape is already :func:`loco_shape`'s, so it is
:func:`adaptive.prompts.loco.run_fold`'s bit for bit, and so is every policy that uses it alone
(``random``, ``prompt``, ``discrimination``, the full-set SE). A tier refit (2-7
comparisons) is padded up from its own bucket: exact in arithmetic, but float32 sums
round differently and L-BFGS stops within its tolerance somewhere else, so
``prompt_model``'s tier information (and with ``tier_estimate`` "tier"/"linked" its SEs)
can move by that much, and a near-tie of two prompts' information can swap. On ChatEval
NCM every SE and estimate came out identical; only some orders of ``prompt_model``
differ, below every k of the grid (docs/performance.md). A fold's batched numbers do not
depend on which folds run with it (a fold alone, a Ray group, all of them).
``vmap=True`` runs each round as one vmapped program: the same shapes, but batched
reductions round differently in every fit (differences up to the fit's tolerance),
and on 2 cores it compiles longer than it saves.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from adaptive.prompts.tier_plan import fit_items_batch
from stan_free_models.inference import bucket
from stan_free_models.laplace_batch import BatchShape

if TYPE_CHECKING:
    from adaptive.prompts.loco_data import LocoData


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


def run_rounds(
    data: LocoData,
    steps: dict[int, Generator[Any, Any, Any]],
    num_draws: int,
    *,
    vmap: bool = False,
    progress=None,
) -> tuple[dict[int, Any], dict[int, float]]:
    """Advance every fold's generator together; each round's fits in one batch.

    Returns:
        (each fold's result, each fold's seconds: its own plus its share of the rounds).
    """
    shape = loco_shape(data, len(steps) if vmap else 1)
    spent = dict.fromkeys(steps, 0.0)
    requests: dict[int, Any] = {}
    results: dict[int, Any] = {}

    def advance(fold: int, fit: Any) -> None:
        start = time.perf_counter()
        try:
            requests[fold] = next(steps[fold]) if fit is None else steps[fold].send(fit)
        except StopIteration as stop:
            results[fold] = stop.value
            if progress is not None:
                progress(len(results), len(steps))
        spent[fold] += time.perf_counter() - start

    for fold in steps:
        advance(fold, None)
    while requests:
        asked = list(requests)
        start = time.perf_counter()
        fits, shape = fit_items_batch(
            data,
            [requests[f][0] for f in asked],
            [requests[f][1] for f in asked],
            num_draws,
            shape=shape,
            vmap=vmap,
        )
        share = (time.perf_counter() - start) / len(asked)
        requests = {}
        for fold, fit in zip(asked, fits):
            spent[fold] += share
            advance(fold, fit)
    return results, spent


__all__ = ["loco_shape", "run_rounds"]
