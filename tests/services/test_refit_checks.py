"""The worker's checks: full refits compared with the live snapshot, slow compiles recorded."""

from __future__ import annotations

import json
import time

import pytest

from adaptive.estimation import streaming as st
from services.runtime import refit_checks
from services.runtime.refresher import Refresher
from services.settings import Settings
from tests.factories import MemoryKey, simulate


class Campaign(MemoryKey):
    def __init__(self, num: int, num_prompts: int = 12) -> None:
        super().__init__(simulate(num, seed=11, num_prompts=num_prompts))


def _worker(campaign: Campaign, **settings: object) -> Refresher:
    config = Settings(fast_num_draws=400, snapshot_max_draws=400, **settings)  # type: ignore[arg-type]
    return Refresher(
        load_fn=campaign.load,
        publish_fn=campaign.publish,
        latest_fn=lambda key: None,
        config=config,
    )


def _compared(worker: Refresher, kind: str) -> dict:
    [event] = [e for e in worker.events if e.kind == "compared" and e.method == kind]
    return json.loads(event.detail)


def test_a_fit_from_no_warm_start_agrees_with_the_warm_started_live_snapshot() -> None:
    campaign = Campaign(300)
    worker = _worker(campaign, nuts_max_judgments=100, prepare_next_shape=False)
    live = worker.update("k")
    assert live is not None and live.diagnostics["converged"]
    # the live snapshot is warm-started from the one before: refit it from the previous size
    campaign.frame = simulate(330, seed=11)
    assert worker.update("k") is not None
    scratch = worker.scratch("k")
    assert scratch is not None and scratch.num_judgments == 330
    d = _compared(worker, refit_checks.SCRATCH)
    assert d["pairs"] == 15 and d["flips"] == 0 and d["max_sd"] < 0.05, d
    assert (d["full_judgments"], d["live_judgments"]) == (330, 330)
    assert len(campaign.published) == 2  # the scratch fit is a check, not a snapshot


def test_a_moved_live_snapshot_is_reported_as_diverging() -> None:
    campaign = Campaign(300)
    worker = _worker(campaign, nuts_max_judgments=100, prepare_next_shape=False)
    assert worker.update("k") is not None
    state = worker._state("k")
    assert state.fast is not None
    skill = state.fast.skill.copy()
    skill[:, 0] += 1.0  # as if the live path had drifted by a whole skill unit
    state.fast = st.Snapshot(**{**state.fast.__dict__, "skill": skill})
    worker.scratch("k")
    d = _compared(worker, refit_checks.SCRATCH)
    assert d["diverging"] and d["max_sd"] > 1 and "s0" in d["worst"], d


def test_a_slow_compile_is_recorded_with_its_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refit_checks, "COMPILE_EVENT_SECONDS", 0.0)
    campaign = Campaign(157, num_prompts=23)  # a size no other test fits
    worker = _worker(campaign, nuts=False, prepare_next_shape=False)
    snapshot = worker.update("k")
    assert snapshot is not None and snapshot.diagnostics["compiles"] >= 1
    compiled = [e for e in worker.events if e.kind == "compiled"]
    assert compiled and compiled[0].seconds == pytest.approx(
        snapshot.diagnostics["longest_compile"][1]
    )
    assert snapshot.diagnostics["longest_compile"][0] in compiled[0].detail


@pytest.mark.slow
def test_a_nuts_refit_is_compared_with_the_laplace_live_snapshot() -> None:
    """The model is the simulator's: the Laplace live snapshot is within a fraction of an sd
    of NUTS on every pair."""
    campaign = Campaign(400)
    # a short run: R-hat up to 1.05 (the doors ask 1.01 of longer runs)
    worker = _worker(
        campaign, nuts_max_judgments=10_000, nuts_max_rhat=1.05, prepare_next_shape=False
    )
    assert worker.update("k") is not None
    full = worker.refit("k")
    assert full is not None and full.method == st.FULL
    d = _compared(worker, refit_checks.NUTS)
    assert d["pairs"] == 15 and d["flips"] == 0 and d["max_sd"] < 0.5, d
    assert d["full_method"] == st.FULL and d["live_method"] == st.FAST


def test_a_failed_check_waits_for_its_schedule_and_a_passed_one_clears_it() -> None:
    """Was: a failing check was retried every 0.2 s and /health stayed degraded after one
    passed (a passed check stored no outcome)."""
    from services.runtime.fit_health import OUTCOMES
    from services.runtime.schedule import scratch_due

    campaign = Campaign(300)
    worker = _worker(campaign, nuts_max_judgments=100, check_every_seconds=600)
    assert worker.update("k") is not None
    state = worker._state("k")
    state.nuts_at = -1e9  # long ago: due
    assert scratch_due(state, now=0.0, config=worker.config)
    load = worker.load_fn
    worker.load_fn = lambda key: (_ for _ in ()).throw(RuntimeError("store gone"))
    with pytest.raises(RuntimeError):
        worker.scratch("k")
    assert not scratch_due(state, now=time.monotonic(), config=worker.config)
    worker.load_fn = load
    state.nuts_at = -1e9
    campaign.frame = simulate(310, seed=11)
    assert worker.update("k") is not None
    assert worker.scratch("k") is not None
    outcome = [e for e in worker.events if e.method == refit_checks.SCRATCH][-1]
    assert outcome.kind in OUTCOMES and outcome.kind == "compared"
