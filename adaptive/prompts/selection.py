"""Prompt selection as small composable steps; named policies are compositions.

A step maps ``(rng_key, Ranking) -> Ranking``: a ranking is the list of
candidate prompt indices, best first, and the reason each removed prompt was
dropped. Steps chain like optax transforms::

    policy = chain(restrict(available), drop_redundant(groups, info),
                   rank_by_information(info), top_k(50, tier=0))
    ranking = select_prompts(policy, rng_key, num_prompts=200)

Everything is integer-indexed (prompts, tiers); reasons are tuples of numbers
that the command line turns into text (:func:`describe_reason`).

The three policies of Sedoc & Ungar's Figure 2 (section 6.2):

* Random: a random order of the available prompts;
* Prompt weighted: prompts ranked by their information averaged over the
  abilities of all training comparisons, item parameters from the global fit;
* Prompt and Model weighted: ranked by information at the abilities of the
  comparisons of the held-out comparison's tier, with item parameters
  re-estimated within that tier.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# reason codes (numbers in the core; text at the edge)
REDUNDANT = 1  # (REDUNDANT, representative prompt)
LOW_INFORMATION = 2  # (LOW_INFORMATION, tier)
UNAVAILABLE = 3  # (UNAVAILABLE, -1): no judgments where it would be used

Reason = tuple[int, int]


class Ranking(NamedTuple):
    """Candidate prompts best first, and why each dropped prompt was dropped."""

    order: np.ndarray  # (n,) prompt indices still in play, best first
    dropped: dict[int, Reason]

    def top(self, k: int) -> np.ndarray:
        return self.order[:k]


Step = Callable[[jax.Array, Ranking], Ranking]


def initial_ranking(num_prompts: int) -> Ranking:
    """Every prompt, in index order, none dropped."""
    return Ranking(np.arange(num_prompts, dtype=np.int64), {})


def chain(*steps: Step) -> Step:
    """Apply steps in order; step i gets ``fold_in(rng_key, i)``."""

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        for i, s in enumerate(steps):
            ranking = s(jax.random.fold_in(rng_key, i), ranking)
        return ranking

    return step


def restrict(available: np.ndarray) -> Step:
    """Keep only prompts with ``available[p]`` (e.g. judged for the comparison at hand)."""
    available = np.asarray(available, dtype=bool)

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        keep = available[ranking.order]
        dropped = dict(ranking.dropped)
        dropped.update({int(p): (UNAVAILABLE, -1) for p in ranking.order[~keep]})
        return Ranking(ranking.order[keep], dropped)

    return step


def drop_redundant(groups: Sequence[Sequence[int]], score: np.ndarray) -> Step:
    """From each redundancy group keep only its highest-scoring member still in play.

    Args:
        groups: groups of prompt indices (e.g. from
            :func:`adaptive.prompts.redundancy.redundant_pairs_matrix`).
        score: (P,) a score to choose the representative (ties: lowest index).
    """
    score = np.asarray(score, dtype=np.float64)

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        in_play = set(ranking.order.tolist())
        dropped = dict(ranking.dropped)
        for group in groups:
            members = [p for p in group if p in in_play]
            if len(members) < 2:
                continue
            rep = max(members, key=lambda p: (score[p], -p))
            for p in members:
                if p != rep:
                    dropped[int(p)] = (REDUNDANT, int(rep))
                    in_play.discard(p)
        keep = np.array([p in in_play for p in ranking.order.tolist()], dtype=bool)
        return Ranking(ranking.order[keep], dropped)

    return step


def rank_by_score(score: np.ndarray) -> Step:
    """Order the candidates by decreasing score (stable: ties keep index order)."""
    score = np.asarray(score, dtype=np.float64)

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        order = ranking.order
        idx = np.lexsort((order, -score[order]))
        return Ranking(order[idx], ranking.dropped)

    return step


def rank_by_information(information: np.ndarray) -> Step:
    """Most informative first; ``information`` is (P,) expected Fisher information."""
    return rank_by_score(information)


def rank_by_discrimination(alpha: np.ndarray) -> Step:
    """Highest discrimination alpha first (the paper's ranking when no tier is given)."""
    return rank_by_score(alpha)


def rank_random() -> Step:
    """A uniformly random order (the Random policy)."""

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        perm = permutation(rng_key, len(ranking.order))
        return Ranking(ranking.order[perm], ranking.dropped)

    return step


def permutation(rng_key: jax.Array, n: int) -> np.ndarray:
    """``jax.random.permutation(rng_key, n)``, the same numbers, one compiled program per size bucket.

    JAX compiles its shuffle for every n, and LOCO folds each have their own number of
    available prompts (on ChatEval NCM, 8 sizes for 17 folds: 0.3-1 s each). This is the
    same algorithm (JAX's ``_shuffle``: rounds of a stable sort by random 32-bit keys)
    at a padded size: with partitionable threefry (JAX's default) the first n of
    ``bits(key, (size,))`` are ``bits(key, (n,))``, and padding elements sort last by a
    leading key, so the real elements meet exactly the comparisons JAX's sort makes.
    ``tests/adaptive/prompts/test_selection.py`` checks it against ``jax.random.permutation``.
    """
    if n <= 1 or not getattr(jax.config, "jax_threefry_partitionable", False):
        return np.asarray(jax.random.permutation(rng_key, n))
    # JAX's static number of rounds for n elements (jax/_src/random: exponent 3)
    rounds = int(np.ceil(3 * np.log(n) / np.log(np.iinfo(np.uint32).max)))
    size = max(256, 1 << (n - 1).bit_length())
    return np.asarray(_padded_shuffle(rng_key, np.int32(n), size, rounds))[:n]


@functools.partial(jax.jit, static_argnums=(2, 3))
def _padded_shuffle(rng_key: jax.Array, n: jax.Array, size: int, rounds: int) -> jax.Array:
    x = jnp.arange(size, dtype=jnp.int32)
    pad = (x >= n).astype(jnp.int32)
    for _ in range(rounds):
        rng_key, subkey = jax.random.split(rng_key)
        sort_keys = jax.random.bits(subkey, (size,), jnp.uint32)
        pad, _, x = lax.sort((pad, sort_keys, x), num_keys=2, is_stable=True)
    return x


def top_k(k: int, *, tier: int = 0) -> Step:
    """Keep the first k candidates; the rest are dropped for low information in ``tier``."""

    def step(rng_key: jax.Array, ranking: Ranking) -> Ranking:
        dropped = dict(ranking.dropped)
        dropped.update({int(p): (LOW_INFORMATION, tier) for p in ranking.order[k:]})
        return Ranking(ranking.order[:k], dropped)

    return step


def select_prompts(policy: Step, rng_key: jax.Array, num_prompts: int) -> Ranking:
    """Run a policy from the full prompt list."""
    return policy(rng_key, initial_ranking(num_prompts))


def prefix_masks(order: np.ndarray, ks: Sequence[int], num_prompts: int) -> np.ndarray:
    """(len(ks), P) boolean masks of the first k prompts of ``order`` for each k."""
    rank = np.full(num_prompts, np.iinfo(np.int64).max)
    rank[order] = np.arange(len(order))
    return rank[None, :] < np.asarray(ks)[:, None]


def describe_reason(reason: Reason, prompt_names: Sequence[str], tier_names: Sequence[str]) -> str:
    """A dropped prompt's reason as text, e.g. ``redundant with ncm-009``."""
    kind, arg = reason
    if kind == REDUNDANT:
        return f"redundant with {prompt_names[arg]}"
    if kind == LOW_INFORMATION:
        return f"low information for tier {tier_names[arg]}"
    if kind == UNAVAILABLE:
        return "no judgments"
    raise ValueError(f"unknown reason code {kind}")
