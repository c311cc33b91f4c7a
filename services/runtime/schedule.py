"""When the re-estimation worker does what: pure functions of its state, testable without
threads or a clock. :func:`next_key` (which key to update now), :func:`plan_update` (skill
update or full fit, and whether to refresh the held items), :func:`nuts_due` (and
:func:`nuts_too_large`; past it :func:`scratch_due`), :func:`next_shapes` (which padded
sizes to compile ahead).
The worker itself is :mod:`services.runtime.refresher`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Set
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

from adaptive.estimation.skill_update import SkillBase
from adaptive.estimation.snapshot import Snapshot
from services.settings import Settings

K = TypeVar("K", bound=Hashable)


@dataclass
class KeyState:
    """What the worker knows about one key (mutable, guarded by the refresher's lock)."""

    pending: list[tuple[int, float]] = field(default_factory=list)  # (seq, accepted at)
    dirty: bool = False
    fitting: bool = False  # a fast-update thread is updating it (no other may take it)
    fast: Snapshot | None = None  # last fast snapshot (warm start)
    published_judgments: int = -1
    published_seq: int = -1
    last_fast_at: float = 0.0
    nuts_judgments: int = 0
    nuts_at: float = field(default_factory=time.monotonic)
    nuts_running: bool = False
    nuts_skip_noted: bool = False  # the 'skipped' event of nuts_max_judgments is recorded
    base: SkillBase | None = None  # item parameters held by skill-only updates
    base_fresh: bool = False  # a new base not yet used by a published snapshot
    items_running: bool = False
    prepared: set[Shape] = field(default_factory=set)  # padded sizes compiled ahead
    prompts: int = 0  # prompts at the last fast update (do they grow?)
    rows_at: tuple[int, int] = (0, 0)  # (judgments, the fit's rows) when rows were last counted


# ---------------------------------------------------------------- scheduling decisions

#: past this share of the judgments (or prompts) its compiled programs are padded to, a
#: fast update prepares the next padded size on a thread of its own, so that the update
#: crossing into it reuses compiled programs instead of compiling while batches wait
PREPARE_SHARE = 0.8


@dataclass(frozen=True)
class UpdatePlan:
    """What one fast update of a key does (:func:`plan_update`)."""

    skills: bool  # a skill-only update on the held items (else a full fast fit)
    refresh_items: bool  # also start a full fit of new items on a thread of its own


def next_key(states: Mapping[K, KeyState], *, now: float, min_interval: float) -> K | None:
    """The first key with unfitted judgments, not being fitted, whose last fast update is
    ``min_interval`` old.

    Batches that arrive while a key is being fitted only mark it dirty, so they are
    coalesced into its next update, which waits for that fit to end (with several
    fast-update threads, ``refit_parallel``, a key is never fitted by two at once);
    ``min_interval`` (``FAST_MIN_INTERVAL_SECONDS``) spaces the updates of one key further.

    Example:
        >>> states = {"a": KeyState(dirty=True, last_fast_at=9.5), "b": KeyState(dirty=True)}
        >>> next_key(states, now=10.0, min_interval=1.0), next_key(states, now=10.0, min_interval=0)
        ('b', 'a')
        >>> states["a"].fitting = True
        >>> next_key(states, now=10.0, min_interval=0)
        'b'
        >>> states["b"].fitting = True
        >>> next_key(states, now=10.0, min_interval=0) is None
        True
    """
    for key, state in states.items():
        if state.dirty and not state.fitting and now - state.last_fast_at >= min_interval:
            return key
    return None


def plan_update(
    config: Settings, *, base_judgments: int | None, num_judgments: int, items_running: bool
) -> UpdatePlan:
    """Skill-only update or full fit, and whether the held items are due for a refresh.

    With ``skill_updates`` and a base (held items fitted on ``base_judgments``), the
    items are refreshed once more than ``max(ITEMS_EVERY_JUDGMENTS, ITEMS_EVERY_SHARE
    * base_judgments)`` judgments arrived since; the update itself stays a skill
    update while the lag is within ``items_max_lag`` such windows or a refresh is
    under way (the one due here counts: two full fits would only slow each other).

    Example:
        >>> s = Settings(items_every_judgments=500, items_every_share=0.05, skill_updates=True)
        >>> plan_update(s, base_judgments=10_000, num_judgments=10_400, items_running=False)
        UpdatePlan(skills=True, refresh_items=False)
        >>> plan_update(s, base_judgments=10_000, num_judgments=10_600, items_running=False)
        UpdatePlan(skills=True, refresh_items=True)
        >>> plan_update(s, base_judgments=None, num_judgments=10_600, items_running=False)
        UpdatePlan(skills=False, refresh_items=False)
    """
    if not config.skill_updates or base_judgments is None:
        return UpdatePlan(skills=False, refresh_items=False)
    lag = num_judgments - base_judgments
    window = max(config.items_every_judgments, config.items_every_share * base_judgments)
    refresh = lag > window
    return UpdatePlan(
        skills=lag <= config.items_max_lag * window or items_running or refresh,
        refresh_items=refresh,
    )


class Shape(NamedTuple):
    """How many observations and prompts a fit is compiled for (their padded buckets).

    ``judgments`` is the fit's rows: the judgments themselves, or with the default model
    (which merges a cell's judgments into one row) the judged cells
    (:func:`services.runtime.shapes.fit_rows`)."""

    judgments: int
    prompts: int


def padded(shape: Shape) -> Shape:
    """The padded sizes the fits' compiled programs are keyed by."""
    from stan_free_models.inference import OBS_BUCKET_MINIMUM, bucket

    return Shape(bucket(max(shape.judgments, 1), OBS_BUCKET_MINIMUM), bucket(max(shape.prompts, 1)))


def next_shapes(now: Shape, prepared: Set[Shape], *, prompts_growing: bool) -> list[Shape]:
    """The judgments and prompts to fit so as to compile the padded sizes a campaign grows
    into next, when due and not ``prepared`` yet (a set of padded sizes): the next size of
    the judgments once they pass :data:`PREPARE_SHARE` of theirs; of the prompts once they
    pass it too and are still growing (a campaign that judges a fixed set of prompts never
    needs more); and of both when both are due.

    Example:
        >>> next_shapes(Shape(100_000, 1100), set(), prompts_growing=True)
        []
        >>> next_shapes(Shape(110_000, 1100), set(), prompts_growing=True)
        [Shape(judgments=131073, prompts=1100)]
        >>> next_shapes(Shape(110_000, 1300), set(), prompts_growing=False)
        [Shape(judgments=131073, prompts=1300)]
        >>> len(next_shapes(Shape(110_000, 1300), set(), prompts_growing=True))
        3
    """
    size = padded(now)
    judgments = [now.judgments]
    if now.judgments >= PREPARE_SHARE * size.judgments:
        judgments.append(size.judgments + 1)
    prompts = [now.prompts]
    if prompts_growing and now.prompts >= PREPARE_SHARE * size.prompts:
        prompts.append(size.prompts + 1)
    targets = []
    for j in judgments:
        for p in prompts:
            target = Shape(j, p)
            if target != now and padded(target) not in prepared | {size}:
                targets.append(target)
    return targets


def nuts_too_large(state: KeyState, config: Settings) -> bool:
    """More judgments than a scheduled NUTS refit is run for (``nuts_max_judgments``)."""
    return state.published_judgments > config.nuts_max_judgments


def nuts_due(state: KeyState, *, now: float, config: Settings) -> bool:
    """A NUTS refit is due: ``REFIT_EVERY_JUDGMENTS`` new judgments published, or
    ``REFIT_EVERY_SECONDS`` since the last one with any new judgment; never above
    ``nuts_max_judgments`` judgments.

    Example:
        >>> s = Settings(refit_every_judgments=1000, refit_every_seconds=600)
        >>> state = KeyState(published_judgments=1500, nuts_judgments=1000, nuts_at=0.0)
        >>> nuts_due(state, now=10.0, config=s), nuts_due(state, now=601.0, config=s)
        (False, True)
    """
    if state.nuts_running or state.published_judgments <= state.nuts_judgments:
        return False
    if nuts_too_large(state, config):
        return False
    new = state.published_judgments - state.nuts_judgments
    waited = now - state.nuts_at
    return new >= config.refit_every_judgments or waited >= config.refit_every_seconds


def scratch_due(state: KeyState, *, now: float, config: Settings) -> bool:
    """The scheduled check of a key past ``nuts_max_judgments`` is due: a fast fit from no
    warm start, compared with the live snapshot, every ``CHECK_EVERY_SECONDS`` (0: never)
    with new judgments (run by the NUTS thread, so only with ``nuts`` on).

    Example:
        >>> s = Settings(nuts_max_judgments=1000, check_every_seconds=600)
        >>> state = KeyState(published_judgments=5000, nuts_judgments=4000, nuts_at=0.0)
        >>> scratch_due(state, now=10.0, config=s), scratch_due(state, now=601.0, config=s)
        (False, True)
        >>> state.published_judgments = 900  # NUTS' own size: nuts_due schedules it
        >>> scratch_due(state, now=601.0, config=s)
        False
    """
    if state.nuts_running or state.published_judgments <= state.nuts_judgments:
        return False
    if not config.check_every_seconds or not nuts_too_large(state, config):
        return False
    return now - state.nuts_at >= config.check_every_seconds


__all__ = [
    "PREPARE_SHARE",
    "KeyState",
    "Shape",
    "UpdatePlan",
    "next_key",
    "next_shapes",
    "nuts_due",
    "padded",
    "nuts_too_large",
    "plan_update",
    "scratch_due",
]
