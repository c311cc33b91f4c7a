"""When the re-estimation worker does what: pure functions of its state, testable without
threads or a clock. :func:`next_key` (which key to update now), :func:`plan_update` (skill
update or full fit, and whether to refresh the held items), :func:`nuts_due` (and
:func:`nuts_too_large`), :func:`next_shape` (which padded size to compile ahead).
The worker itself is :mod:`services.api.refresher`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from adaptive.skill_update import SkillBase
from adaptive.snapshot import Snapshot
from services.settings import Settings

K = TypeVar("K", bound=Hashable)


@dataclass
class KeyState:
    """What the worker knows about one key (mutable, guarded by the refresher's lock)."""

    pending: list[tuple[int, float]] = field(default_factory=list)  # (seq, accepted at)
    dirty: bool = False
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
    warmed_shape: int = 0  # judgments of the next compiled shape already prepared


# ---------------------------------------------------------------- scheduling decisions

#: past this share of the judgments its compiled programs are padded to, a fast update
#: prepares the next padded size on a thread of its own, so that the update crossing
#: into it reuses compiled programs instead of compiling while batches wait
PREPARE_SHARE = 0.8


@dataclass(frozen=True)
class UpdatePlan:
    """What one fast update of a key does (:func:`plan_update`)."""

    skills: bool  # a skill-only update on the held items (else a full fast fit)
    refresh_items: bool  # also start a full fit of new items on a thread of its own


def next_key(states: Mapping[K, KeyState], *, now: float, min_interval: float) -> K | None:
    """The first key with unfitted judgments whose last fast update is ``min_interval`` old.

    Batches that arrive while a key is being fitted only mark it dirty, so they are
    coalesced into its next update; ``min_interval`` (``FAST_MIN_INTERVAL_SECONDS``)
    spaces the updates of one key further.

    Example:
        >>> states = {"a": KeyState(dirty=True, last_fast_at=9.5), "b": KeyState(dirty=True)}
        >>> next_key(states, now=10.0, min_interval=1.0), next_key(states, now=10.0, min_interval=0)
        ('b', 'a')
    """
    for key, state in states.items():
        if state.dirty and now - state.last_fast_at >= min_interval:
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


def next_shape(num_judgments: int, prepared: int) -> int | None:
    """Judgments that fill the next padded size of the fits, when that size is due to be
    prepared (``num_judgments`` past :data:`PREPARE_SHARE` of its own) and is not yet.

    Example:
        >>> next_shape(100_000, 0), next_shape(110_000, 0), next_shape(110_000, 131_073)
        (None, 131073, None)
    """
    from stan_free_models.inference import OBS_BUCKET_MINIMUM, bucket

    size = bucket(max(num_judgments, 1), OBS_BUCKET_MINIMUM)
    if num_judgments < PREPARE_SHARE * size or prepared > size:
        return None
    return size + 1


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


__all__ = [
    "PREPARE_SHARE",
    "KeyState",
    "UpdatePlan",
    "next_key",
    "next_shape",
    "nuts_due",
    "nuts_too_large",
    "plan_update",
]
