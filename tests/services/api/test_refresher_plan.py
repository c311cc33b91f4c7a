"""The worker's scheduling, decided by pure functions: which key next, skill update or full
fit, whether a NUTS refit is due (no threads, no clock, no fits)."""

from __future__ import annotations

from services.runtime.schedule import KeyState, UpdatePlan, next_key, nuts_due, plan_update
from services.settings import Settings


def test_next_key_takes_dirty_keys_only_and_spaces_their_updates() -> None:
    states = {
        "clean": KeyState(dirty=False),
        "recent": KeyState(dirty=True, last_fast_at=9.8),
        "old": KeyState(dirty=True, last_fast_at=5.0),
    }
    assert next_key(states, now=10.0, min_interval=0.0) == "recent"
    assert next_key(states, now=10.0, min_interval=1.0) == "old"
    assert next_key(states, now=10.0, min_interval=10.0) is None
    assert next_key({"clean": KeyState()}, now=10.0, min_interval=0.0) is None


def test_plan_update_refreshes_items_past_the_window_and_keeps_skill_updates() -> None:
    config = Settings(
        items_every_judgments=500, items_every_share=0.05, items_max_lag=4.0, skill_updates=True
    )
    # the window is max(500, 5% of 20,000) = 1,000 judgments
    plan = lambda n, running=False: plan_update(  # noqa: E731
        config, base_judgments=20_000, num_judgments=n, items_running=running
    )
    assert plan(21_000) == UpdatePlan(skills=True, refresh_items=False)
    assert plan(21_001) == UpdatePlan(skills=True, refresh_items=True)
    # far behind: the refresh this update starts (or one under way) carries the skills on
    assert plan(30_000) == UpdatePlan(skills=True, refresh_items=True)
    assert plan(30_000, running=True) == UpdatePlan(skills=True, refresh_items=True)
    for settings, base in ((config, None), (Settings(skill_updates=False), 20_000)):
        assert plan_update(
            settings, base_judgments=base, num_judgments=21_001, items_running=False
        ) == UpdatePlan(skills=False, refresh_items=False)


def test_nuts_is_due_by_judgments_or_by_time_and_never_twice_at_once() -> None:
    config = Settings(refit_every_judgments=1000, refit_every_seconds=600)
    state = KeyState(published_judgments=1999, nuts_judgments=1000, nuts_at=0.0)
    assert not nuts_due(state, now=599.0, config=config)
    assert nuts_due(state, now=600.0, config=config)
    state.published_judgments = 2000
    assert nuts_due(state, now=1.0, config=config)
    state.nuts_running = True
    assert not nuts_due(state, now=1e6, config=config)
    unchanged = KeyState(published_judgments=1000, nuts_judgments=1000, nuts_at=0.0)
    assert not nuts_due(unchanged, now=1e6, config=config)


def test_nuts_is_never_due_past_its_size_cap() -> None:
    config = Settings(refit_every_judgments=1000, nuts_max_judgments=30_000)
    state = KeyState(published_judgments=30_000, nuts_judgments=0, nuts_at=0.0)
    assert nuts_due(state, now=1.0, config=config)
    state.published_judgments = 30_001
    assert not nuts_due(state, now=1e6, config=config)
    assert nuts_due(state, now=1.0, config=Settings(nuts_max_judgments=10**9))
