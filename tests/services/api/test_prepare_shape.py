"""The worker compiles the next padded size before a campaign grows into it."""

from __future__ import annotations

import pytest

from adaptive.estimation import streaming as st
from services.runtime.refresher import Refresher
from services.runtime.schedule import PREPARE_SHARE, Shape, next_shapes, padded
from services.runtime.shapes import fit_rows
from services.settings import Settings
from stan_free_models import robust
from stan_free_models.engine import TRACE_COUNTS
from stan_free_models.inference import OBS_BUCKET_MINIMUM, bucket
from tests.factories import SYSTEMS, simulate, wait_for


def test_next_shapes_are_due_past_their_share_and_once() -> None:
    size = bucket(1000, OBS_BUCKET_MINIMUM)
    due = int(PREPARE_SHARE * size) + 1
    assert next_shapes(Shape(due - 2, 17), set(), prompts_growing=True) == []
    (target,) = next_shapes(Shape(due, 17), set(), prompts_growing=True)
    assert target == Shape(size + 1, 17) and padded(target).judgments > size
    assert next_shapes(Shape(size, 17), {padded(target)}, prompts_growing=True) == []
    # prompts grow into their next padded size too, where they are growing
    assert next_shapes(Shape(100, 30), set(), prompts_growing=False) == []
    (grows,) = next_shapes(Shape(100, 30), set(), prompts_growing=True)
    assert grows == Shape(100, 33) and padded(grows) == Shape(128, 48)


class Grows:
    """One key whose judgments are the first ``num`` of a simulated campaign."""

    def __init__(self, num: int, num_prompts: int = 8) -> None:
        self.all = simulate(400, seed=3, num_prompts=num_prompts)
        self.num = num
        self.published: list[st.Snapshot] = []

    def load(self, key: object) -> st.Source:
        frame = self.all.head(self.num)
        return st.Source(frame, "overall", SYSTEMS, frame.height, frame.height)

    def publish(self, key: object, snapshot: st.Snapshot) -> int:
        self.published.append(snapshot)
        return len(self.published)


def _prepared(campaign: Grows) -> tuple[Refresher, object]:
    """A worker that fitted the campaign twice (two judgments apart) and then prepared the
    next shape."""
    worker = Refresher(
        load_fn=campaign.load,
        publish_fn=campaign.publish,
        latest_fn=lambda key: None,
        config=Settings(nuts=False, fast_num_draws=20, snapshot_max_draws=20),
    )
    campaign.num -= 2
    assert worker.update("k") is not None
    campaign.num += 2
    assert worker.update("k") is not None
    prepared = wait_for(
        lambda: next((e for e in worker.events if e.kind == "prepared"), None),
        "the next padded size's compile",
        every=0.1,
    )
    return worker, prepared


def _compiles() -> tuple[int, int]:
    """Traces of the fit and compiles of the robust intervals so far."""
    return TRACE_COUNTS["laplace"], robust._compiled.cache_info().misses


def _shape(frame: object) -> Shape:
    """The padded size the default model's fit of ``frame`` is compiled for."""
    return padded(Shape(fit_rows(frame, merged=True), frame["item_id"].n_unique()))  # type: ignore[index]


@pytest.mark.parametrize(
    ("start", "grown", "num_prompts"),
    [
        # 13 prompts x 10 pairs: judged cells (the fit's rows) grow with the judgments
        pytest.param(int(PREPARE_SHARE * 128) + 2, 130, 13, id="cells"),
        # every judgment on a prompt of its own: prompts and cells grow with the judgments
        pytest.param(30, 36, 400, id="prompts-and-cells"),
    ],
)
def test_an_update_crossing_into_a_prepared_size_compiles_nothing_new(
    start: int, grown: int, num_prompts: int
) -> None:
    campaign = Grows(start, num_prompts)
    before = _shape(campaign.all.head(start))
    after = _shape(campaign.all.head(grown))
    assert before != after  # the campaign grows into another padded size
    worker, prepared = _prepared(campaign)
    assert "not" not in prepared.detail and prepared.num_judgments >= start
    compiled = _compiles()
    campaign.num = grown
    snapshot = worker.update("k")
    assert snapshot is not None and snapshot.num_judgments == grown
    assert _compiles() == compiled  # the prepared programs, not new ones
    assert [e.kind for e in worker.events].count("failed") == 0


def test_judging_the_same_cells_again_needs_no_new_size() -> None:
    """Past a padded number of judgments, but on the same 40 cells: the default model's fit
    sees one row per cell, so nothing is prepared and the update compiles nothing."""
    campaign = Grows(int(PREPARE_SHARE * 128) + 2, 8)  # 10 pairs x 8 prompts: 40 cells
    assert _shape(campaign.all.head(campaign.num)) == _shape(campaign.all.head(200))
    worker = Refresher(
        load_fn=campaign.load,
        publish_fn=campaign.publish,
        latest_fn=lambda key: None,
        config=Settings(nuts=False, fast_num_draws=20, snapshot_max_draws=20),
    )
    assert worker.update("k") is not None
    compiled = _compiles()
    campaign.num = 200
    assert worker.update("k") is not None
    assert _compiles() == compiled
    assert [e.kind for e in worker.events if e.kind == "prepared"] == []
