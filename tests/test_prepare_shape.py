"""The worker compiles the next padded size before a campaign grows into it."""

from __future__ import annotations

import time

from adaptive import streaming as st
from services.api.refresher import Refresher
from services.api.schedule import PREPARE_SHARE, next_shape
from services.settings import Settings
from stan_free_models.engine import TRACE_COUNTS
from stan_free_models.inference import OBS_BUCKET_MINIMUM, bucket
from tests.factories import SYSTEMS, simulate


def test_next_shape_is_due_past_its_share_and_once() -> None:
    size = bucket(1000, OBS_BUCKET_MINIMUM)
    assert next_shape(int(PREPARE_SHARE * size) - 1, 0) is None
    target = next_shape(int(PREPARE_SHARE * size) + 1, 0)
    assert target == size + 1 and bucket(target, OBS_BUCKET_MINIMUM) > size
    assert next_shape(size, target) is None  # prepared already


class Grows:
    """One key whose judgments are the first ``num`` of a simulated campaign."""

    def __init__(self, num: int) -> None:
        self.all = simulate(400, seed=3, num_prompts=8)
        self.num = num
        self.published: list[st.Snapshot] = []

    def load(self, key: object) -> st.Source:
        frame = self.all.head(self.num)
        return st.Source(frame, "overall", SYSTEMS, frame.height, frame.height)

    def publish(self, key: object, snapshot: st.Snapshot) -> int:
        self.published.append(snapshot)
        return len(self.published)


def test_an_update_crossing_into_a_prepared_size_traces_nothing_new() -> None:
    size = bucket(100, OBS_BUCKET_MINIMUM)  # 128
    campaign = Grows(int(PREPARE_SHARE * size) + 2)
    worker = Refresher(
        load_fn=campaign.load,
        publish_fn=campaign.publish,
        latest_fn=lambda key: None,
        config=Settings(nuts=False, fast_num_draws=20, snapshot_max_draws=20),
    )
    assert worker.update("k") is not None
    deadline = time.monotonic() + 300
    while not any(e.kind == "prepared" for e in worker.events) and time.monotonic() < deadline:
        time.sleep(0.1)
    (prepared,) = [e for e in worker.events if e.kind == "prepared"]
    assert prepared.detail == "next shape" and prepared.num_judgments == size + 1
    traced = TRACE_COUNTS["laplace"]
    campaign.num = size + 20  # past the old padded size
    snapshot = worker.update("k")
    assert snapshot is not None and snapshot.num_judgments == size + 20
    assert TRACE_COUNTS["laplace"] == traced  # the prepared program, not a new trace
    assert [e.kind for e in worker.events].count("failed") == 0
