"""How a replay runs (:mod:`adaptive.simulation.replay` runs it, :mod:`adaptive.simulation.replay_policies` reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adaptive.recommend import DEFAULT_BURN_IN, DEFAULT_NEED_SHARE
from adaptive.stopping.decisions import DecisionRule
from adaptive.stopping.questions import Question


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay.

    Attributes:
        batch_size: judgments per batch (decisions are updated after each).
        budget: stop after this many judgments (default: no limit but the log).
        rule: the decision rule every policy shares.
        burn_in, need_share: of the adaptive policy (:func:`adaptive.recommend.allocate`).
        num_tests: comparisons the rule's alpha is split over (the declared family's size;
            default: the log's comparisons, the ``compared`` family).
        question: the campaign's question (:mod:`adaptive.stopping.questions`; default
            none: every comparison's sign, as ``all-pairs``): the replay stops when it is
            settled, and question-aware policies serve only the comparisons that can
            still change its answer. The log must know its systems (``Log.pair_a``).
        late: comparisons whose judgments cannot be had before ``late_after`` judgments were
            spent (a system that enters the campaign late); meanwhile they count as able
            to close, so a question waits for them instead of settling without them.
        late_after: judgments spent before the ``late`` comparisons open.
    """

    batch_size: int = 100
    budget: int | None = None
    rule: DecisionRule = field(default_factory=DecisionRule)
    burn_in: int = DEFAULT_BURN_IN
    need_share: float = DEFAULT_NEED_SHARE
    num_tests: int | None = None
    question: Question | None = None
    late: tuple[int, ...] = ()
    late_after: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {self.batch_size}")
        if self.num_tests is not None and self.num_tests < 1:
            raise ValueError(f"num_tests must be >= 1, not {self.num_tests}")
