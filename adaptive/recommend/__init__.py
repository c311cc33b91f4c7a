"""Which cells (prompt, system pair, dimension) to send to annotators next.

The recommender is a pure function of a prepared :class:`RecommenderState`
(``snapshot`` below), the state of the cells (what may still be asked, which
can be annotated at all, which response was shown first how often) and a
request::

    batch, info = recommend(recommend_key(seed, snapshot.version), snapshot, cells, request)

Everything is integer-indexed: comparison ``c`` (one per dimension and
system pair, across all dimensions), prompt ``p``; names live at the edge.

The recommender spends only where a decision is still open
(:mod:`adaptive.stopping.decisions`: B better, A better, equivalent or undecided, from
each comparison's own judgments, valid at every look). With a per-comparison
stopping rule, the judgments needed to close *every* comparison are the sum of
each comparison's own stopping time whatever the order, so the saving comes
from never sampling a closed comparison; the order decides how *early*
decisions arrive. How a batch is chosen (each step a small function):

1. :func:`target_mask`: every comparison not yet closed, or the comparisons
   the caller names (:func:`adjacent_comparisons`, :func:`tier_comparisons`);
   a closed comparison gets nothing unless it is named.
2. :func:`candidate_mask`: cells that may be handed out: judgments still
   available, annotatable (both systems have a response to the prompt and the
   two responses differ), not judged by this annotator, and for a system with
   little data only its pairings with systems of similar estimated strength.
3. :func:`allocate`: LUCB-style order: a burn-in of ``burn_in`` observations
   for every open comparison, then the comparison closest to a decision (the
   fewest judgments likely still needed) first, each up to its need; a fresh
   prompt per judgment, a judged cell only when the prompts run out.
4. :func:`assign_order`: which response is shown first, balanced per cell.

Prompts inside a comparison are chosen at random, not by Fisher information:
the decision's estimand is the average over the comparison's prompts, and an
information-weighted choice would change it unless importance-weighted, for a
gain bounded by the between-prompt share of the variance (0.16 on ChatEval
NCM, 0.24-0.27 on the AI Teacher Test). Prompt information is for pruning and
selection (:mod:`adaptive.prompts.selection`, :mod:`stan_free_models.information`).

The package: :mod:`.state` (the types), :mod:`.prepare` (a
:class:`RecommenderState` from posterior draws), :mod:`.steps` (the small
functions above), :mod:`.policy` (:func:`recommend`, :func:`recommend_key`).

References:
    Kalyanakrishnan et al. (2012), LUCB; Sedoc & Ungar (2020), graded
    response model and Fisher information; DESIGN.md "Next batch".
"""

from typing import TYPE_CHECKING, Any

from adaptive.recommend.state import (
    BURN_IN,
    CLOSEST,
    DEFAULT_BURN_IN,
    DEFAULT_NEED_SHARE,
    OUT_OF_SIGHT,
    REASON_CODES,
    REASONS,
    REPEAT,
    SHOW_A,
    SHOW_B,
    TARGETED,
    Batch,
    CellState,
    RecommenderState,
    RecommendInfo,
    Request,
)
from adaptive.recommend.steps import (
    adjacent_comparisons,
    allocate,
    assign_order,
    candidate_mask,
    decided_mask,
    new_system_mask,
    target_mask,
    tier_comparisons,
)

__all__ = [
    "BURN_IN",
    "CLOSEST",
    "DEFAULT_BURN_IN",
    "DEFAULT_NEED_SHARE",
    "OUT_OF_SIGHT",
    "REASONS",
    "REASON_CODES",
    "REPEAT",
    "SHOW_A",
    "SHOW_B",
    "TARGETED",
    "Batch",
    "CellState",
    "DimensionDraws",
    "RecommendInfo",
    "RecommenderState",
    "Request",
    "adjacent_comparisons",
    "allocate",
    "assign_order",
    "candidate_mask",
    "decided_mask",
    "new_system_mask",
    "recommend",
    "recommend_key",
    "snapshot_from_draws",
    "system_strength",
    "target_mask",
    "tier_comparisons",
]

# The policy (JAX) and the preparation from posteriors load on first use, so that what only
# needs the types and constants (the command line's flags, say) does not import JAX.
_LAZY = {
    "recommend": "adaptive.recommend.policy",
    "recommend_key": "adaptive.recommend.policy",
    "DimensionDraws": "adaptive.recommend.prepare",
    "snapshot_from_draws": "adaptive.recommend.prepare",
    "system_strength": "adaptive.recommend.prepare",
}

if TYPE_CHECKING:
    from adaptive.recommend.policy import recommend, recommend_key
    from adaptive.recommend.prepare import (
        DimensionDraws,
        snapshot_from_draws,
        system_strength,
    )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
