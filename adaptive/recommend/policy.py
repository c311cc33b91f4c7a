"""The policy: :func:`recommend` chains the steps."""

from __future__ import annotations

import numpy as np

from adaptive.recommend.state import Batch, CellState, RecommendInfo, Request, Snapshot
from adaptive.recommend.steps import (
    allocate,
    assign_order,
    candidate_mask,
    decided_mask,
    target_mask,
)


def _numpy_rng(rng_key) -> np.random.Generator:
    """A numpy generator determined by a JAX PRNG key (or an int seed)."""
    if isinstance(rng_key, int | np.integer):
        return np.random.default_rng(int(rng_key))
    import jax

    data = rng_key
    if hasattr(rng_key, "dtype") and jax.dtypes.issubdtype(rng_key.dtype, jax.dtypes.prng_key):
        data = jax.random.key_data(rng_key)
    return np.random.default_rng(np.asarray(data, dtype=np.uint32).ravel().tolist())


def recommend(
    rng_key, snapshot: Snapshot, cells: CellState, request: Request
) -> tuple[Batch, RecommendInfo]:
    """The next batch: open comparisons only, closest to a decision first, fresh prompts.

    Deterministic: the same snapshot, cell state, request and key give the
    same batch. Derive the key as ``jax.random.fold_in(base_key, snapshot.version)``.

    Args:
        rng_key: a JAX PRNG key (or an int seed).
        snapshot: from :func:`snapshot_from_posteriors` or :func:`snapshot_from_draws`.
        cells: the cell state.
        request: the request.

    Returns:
        The batch and a :class:`RecommendInfo`.
    """
    rng = _numpy_rng(rng_key)
    targets = target_mask(snapshot, request)
    candidates = candidate_mask(snapshot, cells, request, targets)
    judged = snapshot.judged if snapshot.judged is not None else np.zeros_like(cells.available)
    targeted = np.zeros(snapshot.num_comparisons, bool)
    if request.targets is not None:
        targeted[np.asarray(request.targets, np.int64)] = True
    comp, prompt, reason, need = allocate(
        rng,
        snapshot.decisions,
        candidates,
        judged,
        int(request.size),
        targeted=targeted,
        burn_in=request.burn_in,
        allow_repeats=request.allow_repeats,
        max_per_cell=request.max_per_cell,
        available=cells.available,
    )
    order = assign_order(rng, cells, comp, prompt)
    batch = Batch(comp, prompt, order, reason, need)
    info = RecommendInfo(
        snapshot_version=snapshot.version,
        targets=targets,
        decided=decided_mask(snapshot),
        num_candidates=int((candidates & ((judged == 0) | request.allow_repeats)).sum()),
        unannotatable=int((~cells.annotatable).sum()) if cells.annotatable is not None else 0,
    )
    return batch, info
