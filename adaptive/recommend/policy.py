"""The policy: :func:`recommend` chains the steps."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from adaptive.recommend.state import Batch, CellState, RecommenderState, RecommendInfo, Request
from adaptive.recommend.steps import (
    allocate,
    assign_order,
    candidate_mask,
    decided_mask,
    target_mask,
)


def recommend_key(seed: int, version: int) -> jax.Array:
    """The recommender's key for a snapshot version: ``fold_in(PRNGKey(seed), version)``.

    The same seed and snapshot version give the same key, so any batch can be
    replayed exactly (STYLE.md, rule 2); :mod:`evalset.recommend_adapter`
    derives its key the same way. Seeds and versions in int32 take one compiled
    call (the two eager operations cost a next-batch request milliseconds when its
    threads share the CPU); larger ones the same operations eagerly.
    """
    if 0 <= seed < 2**31 and 0 <= version < 2**31:
        return _compiled_key(seed, version)
    return jax.random.fold_in(jax.random.PRNGKey(seed), version)


@jax.jit
def _compiled_key(seed: jax.Array, version: jax.Array) -> jax.Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), version)


def _numpy_rng(rng_key: jax.Array) -> np.random.Generator:
    """The numpy generator the steps draw from, determined by the JAX key."""
    data = rng_key
    if jnp.issubdtype(rng_key.dtype, jax.dtypes.prng_key):
        data = jax.random.key_data(rng_key)
    return np.random.default_rng(np.asarray(data, dtype=np.uint32).ravel().tolist())


def _legacy_seed_rng(seed: int) -> np.random.Generator:
    """The generator of an int seed, as :func:`recommend` drew before it required a key."""
    warnings.warn(
        "recommend() with an int seed is deprecated: pass recommend_key(seed, snapshot.version)",
        DeprecationWarning,
        stacklevel=3,
    )
    return np.random.default_rng(int(seed))


def recommend(
    rng_key: jax.Array, snapshot: RecommenderState, cells: CellState, request: Request
) -> tuple[Batch, RecommendInfo]:
    """The next batch: open comparisons only, closest to a decision first, fresh prompts.

    Deterministic: the same snapshot, cell state, request and key give the
    same batch. Derive the key with :func:`recommend_key` (``fold_in(PRNGKey(seed),
    snapshot.version)``).

    Args:
        rng_key: a JAX PRNG key, the only source of the batch's randomness. (An int
            seed is still accepted, with a DeprecationWarning, for callers not yet
            moved: it seeds numpy directly, as before.)
        snapshot: from :func:`snapshot_from_draws` (names: evalset.recommend_adapter).
        cells: the cell state.
        request: the request.

    Returns:
        The batch and a :class:`RecommendInfo`.
    """
    if isinstance(rng_key, int | np.integer):
        rng = _legacy_seed_rng(rng_key)
    else:
        rng = _numpy_rng(rng_key)
    targets = target_mask(snapshot, request)
    candidates = candidate_mask(snapshot, cells, request, targets)
    judged = snapshot.judged if snapshot.judged is not None else np.zeros_like(cells.available)
    targeted = np.zeros(snapshot.num_comparisons, bool)
    if request.targets is not None:
        targeted[np.asarray(request.targets, np.int64)] = True
    assert snapshot.decisions is not None, "the snapshot carries no decisions"
    unclosable = np.full(snapshot.num_comparisons, -1, np.int64)
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
        unclosable=unclosable,
    )
    order = assign_order(rng, cells, comp, prompt)
    batch = Batch(comp, prompt, order, reason, need)
    info = RecommendInfo(
        snapshot_version=snapshot.version,
        targets=targets,
        decided=decided_mask(snapshot),
        num_candidates=int((candidates & ((judged == 0) | request.allow_repeats)).sum()),
        unannotatable=int((~cells.annotatable).sum()) if cells.annotatable is not None else 0,
        unclosable=unclosable,
    )
    return batch, info
