"""What ``evalset prune`` says of a tier's headroom on new systems."""

from __future__ import annotations

import pytest

from adaptive.prompts.prune_precision import Precision
from evalset.pruning import describe_headroom


def _precision(new_system_gain: float) -> Precision:
    return Precision(
        se_ratio=1.2, low=1.0, high=1.5, worth_random=2.0, num_comparisons=10, evaluations=200,
        between_share=0.3, best_gain=3.0, in_sample=1.1, new_system_gain=new_system_gain,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("gain", "shown", "below"),
    [(1.5, "1.5", True), (1.96, "2.0", False), (1.94, "1.9", True), (2.5, "2.5", False)],
)
def test_the_printed_bound_and_its_verdict_agree(gain: float, shown: str, below: bool) -> None:
    text = describe_headroom(_precision(gain))
    assert f"at most {shown} as these systems' judgments estimate it" in text
    assert ("below 2: no subset" in text) is below


def test_the_bound_says_it_was_found_lower_on_new_systems_judgments() -> None:
    assert "1.2-1.4x lower" in describe_headroom(_precision(2.5))
    assert "new systems" not in describe_headroom(_precision(float("nan")))
