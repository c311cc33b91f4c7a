"""A dimension's next batch before its first posterior snapshot: the running decisions alone.

A fresh service fits a dimension's first snapshot minutes after its first judgments (a cold
compile, then the fit). The batch's order does not wait for it: which comparisons are open,
how close each is to a decision (its likely need) and the burn-in come from the running
decisions (:mod:`services.runtime.tally`), which need no model, and the prompts are drawn
as the recommender always draws them (a fresh prompt per judgment, at random: it reads no
item parameters). The posterior gives the recommender only the systems' strengths (the
leaderboard's adjacent pairs, a new system's opponents).

So until a dimension's first snapshot is published, :func:`decisions_fit` stands in for
it: one "draw" of the systems' strengths, from least squares on each judged comparison's
observed mean signed judgment (:func:`adaptive.recommend.system_strength`; a registered
system nobody judged yet gets 0, the middle). Per-system strengths give every pair of the
systems a comparison, as a snapshot's per-system draws do, so a family with pairs nobody
judged yet (``all-pairs``, a question's) is served as it will be once the snapshot exists;
the judgments, the decisions and the rule are the same. Cells chosen on it carry
``snapshot_version`` 0 and the answer's ``basis`` is ``decisions``, with a note naming what
the service is doing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, NamedTuple

import numpy as np

from services.api.errors import ApiError

if TYPE_CHECKING:
    from services.runtime.state import ServiceState
    from services.runtime.tally import ProjectTally

#: what a batch was chosen on (the answer's ``basis``)
Basis = Literal["snapshot", "decisions", "default"]
SNAPSHOT: Final = "snapshot"
DECISIONS: Final = "decisions"
DEFAULT: Final = "default"


class DecisionsFit(NamedTuple):
    """A dimension's stand-in for its first posterior snapshot (the fields the next batch
    reads of a :class:`adaptive.estimation.snapshot.Snapshot`).

    Attributes:
        dimension: the dimension.
        systems: the registered systems and every judged one, sorted.
        pair_a, pair_b: (C,) the judged comparisons on ``systems``, as first judged.
        skill: (1, S) the systems' strengths: one draw.
        items: the judged prompts.
        num_judgments: the judgments the strengths read.
        version: 0, no snapshot.
    """

    dimension: str
    systems: tuple[str, ...]
    pair_a: np.ndarray
    pair_b: np.ndarray
    skill: np.ndarray
    items: tuple[str, ...]
    num_judgments: int
    version: int = 0


def decisions_fit(tally: ProjectTally, dimension: str) -> DecisionsFit:
    """The stand-in of ``dimension``'s first snapshot from the project's running tally
    (advanced, its lock held)."""
    from adaptive.recommend import system_strength

    dim = tally.dimensions[dimension]
    systems = tuple(sorted({*tally.systems, *(s for pair in dim.orient for s in pair)}))
    index = {s: i for i, s in enumerate(systems)}
    comparison = dim.comparison.view()
    counts = np.bincount(comparison, minlength=len(dim.orient))
    sums = np.bincount(comparison, weights=dim.signed.view(), minlength=len(dim.orient))
    judged = np.flatnonzero(counts)
    pair_a = np.array([index[dim.orient[c][0]] for c in judged.tolist()], np.int64)
    pair_b = np.array([index[dim.orient[c][1]] for c in judged.tolist()], np.int64)
    # signed: +1 when the comparison's b won, so the mean estimates s_b - s_a
    strength = system_strength(sums[judged] / counts[judged], pair_a, pair_b, len(systems))
    return DecisionsFit(
        dimension=dimension,
        systems=systems,
        pair_a=pair_a,
        pair_b=pair_b,
        skill=np.nan_to_num(strength, nan=0.0)[None, :],
        items=tuple(dim.prompts),
        num_judgments=dim.num_judgments,
    )


def waiting_note(state: ServiceState, tally: ProjectTally, waiting: list[str]) -> str:
    """What the service is doing for the dimensions without a snapshot yet (``waiting``)."""
    num = sum(tally.dimensions[d].num_judgments for d in waiting)
    doing = (
        "first fit running"
        if state.streaming
        else "no re-estimation in this process (streaming off)"
    )
    return (
        f"{doing}, {num:,} judgments waiting (no posterior snapshot yet of "
        f"{', '.join(waiting)}): chosen on the running decisions and the registered design, "
        "the systems' strengths from the observed means"
    )


def nothing_to_serve(state: ServiceState, dims: list[str]) -> ApiError:
    """The 409 of dimensions with neither judgments nor a snapshot: nothing to decide."""
    doing = "fits start" if state.streaming else "decisions are kept"
    return ApiError(
        409,
        "no_snapshot",
        f"no judgments yet in {', '.join(dims)}: nothing is decided or fitted, so there is "
        f"nothing to order a batch by; post judgments first ({doing} as they arrive)",
    )
