"""The answers' rows and envelopes (significance, leaderboard, prompt parameters, pruning)
and the snapshot they came from; :mod:`services.schemas` re-exports them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class SnapshotPublic(BaseModel):
    """The posterior snapshot an answer came from."""

    dimension: str
    version: int
    num_judgments: int = Field(description="judgments the fit saw")
    method: str = Field(description="laplace (fast update) or nuts (full refit)")
    created_at: datetime
    fit_seconds: float
    diagnostics: dict[str, Any]


class SignificanceRow(BaseModel):
    dimension: str
    system_a: str
    system_b: str
    mean: float = Field(description="posterior mean of theta = s_B - s_A (> 0: B better)")
    sd: float
    ci_low: float
    ci_high: float
    p_b_better: float
    significant: bool = Field(description="the interval excludes 0")
    ci_mcse: float | None = Field(
        description="Monte Carlo error of the interval end nearest 0 (ArviZ's quantile "
        "MCSE over the snapshot's draws); null when it cannot be estimated",
    )
    verdict_settled: bool = Field(
        description="false when that end lies within 2 of its Monte Carlo errors of 0: "
        "a snapshot with other draws could give the other `significant`",
    )
    p_two_sided: float
    significant_adjusted: bool = Field(
        description="the model's and the data's adjusted verdicts agree, in the same direction "
        "(a pair never compared: never)"
    )
    model_adjusted: bool = Field(description="the adjusted verdict on theta's posterior tail")
    data_adjusted: bool | None = Field(
        description="the adjusted verdict of a prompts-as-units t-test of the pair's own "
        "judgments; null for a pair never compared"
    )
    observed_net: float | None = Field(
        description="the pair's mean signed judgment over its prompts (+1: B, -1: A, 0: tie); "
        "null for a pair never compared"
    )
    observed_se: float | None = Field(
        description="its standard error, prompts as the units (between-prompt sd / "
        "sqrt(prompts)); null with fewer than two prompts"
    )
    observed_ci_low: float | None = Field(
        description="the observed net preference's t interval at the requested level "
        "(one look: not an anytime-valid bound; GET .../decisions gives those); null with "
        "fewer than two prompts"
    )
    observed_ci_high: float | None
    observed_p: float | None = Field(description="two-sided p-value of that t-test")
    adjust_rule: str
    family_size: int
    n_judgments: int
    n_prompts: int


class SignificancePublic(BaseModel):
    snapshot: SnapshotPublic
    rows: list[SignificanceRow]


class SignificanceTableRow(BaseModel):
    """A row of ``evalset significance --format json``: its every column, in its order (NaN
    as null); ``mean`` is the model's theta (> 0: B better), docs/decisions.md reads them."""

    model_config = ConfigDict(extra="allow")
    dimension: str
    system_a: str
    system_b: str


class SignificanceTablePublic(BaseModel):
    """``GET .../significance?model=default``: the default model fitted on the stored
    judgments, the rows the command line and ``evalset.significance`` give for them."""

    dimension: str
    num_judgments: int
    model: Literal["default"]
    rows: list[SignificanceTableRow]


class LeaderboardRow(BaseModel):
    dimension: str
    rank: int | None = Field(description="1 = best; null for a system with no judgments (unranked)")
    system_id: str
    mean: float
    sd: float
    ci_low: float
    ci_high: float
    mean_rank: float | None
    p_best: float | None
    judged: bool


class LeaderboardPublic(BaseModel):
    snapshot: SnapshotPublic
    rows: list[LeaderboardRow]


class PromptParameterRow(BaseModel):
    dimension: str
    item_id: str
    alpha_mean: float
    alpha_sd: float
    b_mean: list[float]
    b_sd: list[float]


class PromptParametersPublic(BaseModel):
    snapshot: SnapshotPublic
    rows: list[PromptParameterRow]


class PruningRow(BaseModel):
    dimension: str
    item_id: str
    tier: str
    kept: bool
    reason: str
    rank: int | None
    information: float
    se_ratio: float = Field(
        description="the tier's SE ratio of the kept prompts against all prompts on fresh "
        "judgments: per comparison its SNR with all prompts over its SNR with the kept ones, "
        "median over the clearly signed comparisons (docs/selection.md)"
    )


class PruningPublic(BaseModel):
    dimension: str
    num_judgments: int = Field(description="judgments the pruning saw")
    rows: list[PruningRow]


class SnapshotsPublic(BaseModel):
    snapshots: list[SnapshotPublic]


class EloRow(BaseModel):
    rank: int
    system: str
    elo: float = Field(description="maximum-likelihood rating (the average system at 1000)")
    ci_low: float = Field(description="percentile bootstrap interval at the level asked")
    ci_high: float
    rank_best: int = Field(description="ranks that hold for every system at once")
    rank_worst: int
    n_judgments: int
    decided_group: int | None = Field(
        description="the 1-based index of the system's group in the decisions' ranking (the "
        "``ranking`` question's answer at alpha = 1 - level; null: no group)"
    )
    decided_ranks: str | None = Field(
        description="the ranks that group spans ('1-3', or '4' alone; null: no group)"
    )
    note: str = Field(
        description="empty, or each system the rank intervals separate this one from while "
        "their decision does not (or the reverse), with the decision and its reason"
    )


class EloPublic(BaseModel):
    """``GET .../elo``: Chatbot Arena's Elo leaderboard of the stored judgments."""

    dimension: str
    num_judgments: int
    rows: list[EloRow]


class ItemFitRow(BaseModel):
    """A row of ``evalset items --fit --format json``: the prompt's (or redundancy group's)
    parameters and its fit, in the command line's column order."""

    dimension: str
    item_id: str
    group: str = Field(description="the redundancy group's prompts joined by '+', or ''")
    group_size: int
    alpha_mean: float
    alpha_sd: float
    b1_mean: float
    b1_sd: float
    b2_mean: float
    b2_sd: float
    n_comparisons: int
    fit_p: float = Field(description="posterior predictive p-value of the judgments' trend")
    misfit: bool = Field(description="fit_p below the level")
    misfit_reason: str = Field(description="why it was flagged, in words ('' when not)")
    trend_observed: float = Field(description="slope of the signed judgment over the abilities")
    trend_model: float = Field(description="the model's expected slope")


class InformationPoint(BaseModel):
    """A point of a test information curve (``evalset items --information``)."""

    set: Literal["all", "without misfits"]
    dimension: str
    num_prompts: int
    theta: float
    information: float
    se: float = Field(description="1 / sqrt(1 + information), theta's SE under its prior")


class ItemFitPublic(BaseModel):
    """``GET .../item-fit``: each prompt's fit under the default model fitted on the stored
    judgments, the rows ``evalset items --fit --format json`` gives for them."""

    dimension: str
    num_judgments: int
    model: Literal["default"]
    level: float = Field(description="a prompt is flagged when its fit_p is below this")
    num_draws: int = Field(description="posterior draws the check used")
    num_flagged: int
    rows: list[ItemFitRow]
    information: list[InformationPoint] = Field(
        description="test information of every prompt and of those not flagged "
        "(`evalset items --information`)"
    )


class Verdict(BaseModel):
    system: str = Field(description="the compared system (versus: not a reference)")
    other: str
    outcome: str = Field(
        description="'better', 'worse', 'equivalent', 'undecided' or 'never compared'"
    )


class AnswerRow(BaseModel):
    """One dimension's answer: the row of ``evalset answer --format json``."""

    dimension: str
    question: str = Field(description="the question in its written form")
    answered: bool = Field(description="the question is answered (top-k: a separated set of k)")
    settled: bool = Field(description="answered, or no pending comparison can still close")
    answer: str = Field(description="the answer in words, with its level, valid at every look")
    top: list[str] = Field(description="top-k: the largest separated set of at most k")
    among: list[str] = Field(description="top-k: the smallest separated set of at least k")
    groups: list[list[str]] = Field(description="the systems in order, in tied groups")
    order: list[str] = Field(
        description="the systems by decided wins minus losses, then mean net preference"
    )
    verdicts: list[Verdict] = Field(description="versus and equivalence: each named pair")
    pending: int = Field(description="undecided comparisons that can still change the answer")
    needed: int | None = Field(
        description="judgments the pending comparisons likely still need (null: out of sight)"
    )
    family_size: int = Field(description="comparisons sharing alpha (the question's family)")
    alpha: float
