"""Draw judgments from known graded-response parameters (for recovery tests and benchmarks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stan_free_models.inference import GRMData


@dataclass(frozen=True)
class Truth:
    """The parameters a simulation was drawn from."""

    theta: np.ndarray  # (C,)
    alpha: np.ndarray  # (P,)
    b: np.ndarray  # (P, K-1), ordered
    skill: np.ndarray | None = None  # (S,) for per-system simulations


def draw_truth(
    rng: np.random.Generator,
    num_comparisons: int,
    num_items: int,
    num_categories: int,
    *,
    alpha_scale: float = 1.0,
    b_scale: float = 2.0,
    num_systems: int | None = None,
    pair_a: np.ndarray | None = None,
    pair_b: np.ndarray | None = None,
) -> Truth:
    """Parameters drawn from the model's priors (theta ~ N(0,1), log alpha ~ N(0, s), b sorted N(0, s_b))."""
    alpha = np.exp(rng.normal(0.0, alpha_scale, num_items))
    b = np.sort(rng.normal(0.0, b_scale, (num_items, num_categories - 1)), axis=1)
    if num_systems is not None:
        skill = rng.normal(0.0, 1.0, num_systems)
        return Truth(theta=skill[pair_b] - skill[pair_a], alpha=alpha, b=b, skill=skill)
    return Truth(theta=rng.normal(0.0, 1.0, num_comparisons), alpha=alpha, b=b)


def sample_graded(
    rng: np.random.Generator, theta: np.ndarray, alpha: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """One graded response per (theta, alpha, b) row: P(y >= c) = sigmoid(alpha (theta - b_c))."""
    cum = 1.0 / (1.0 + np.exp(-alpha[:, None] * (theta[:, None] - b)))
    u = rng.uniform(size=(theta.shape[0], 1))
    return (u < cum).sum(axis=1).astype(np.int64)


def simulate_net_ratings(
    rng: np.random.Generator, truth: Truth, *, missing: float = 0.0
) -> GRMData:
    """Aggregated data: one net-rating category per (comparison, item) cell, as in the paper."""
    num_c, num_p = truth.theta.shape[0], truth.alpha.shape[0]
    comp_grid, item_grid = np.meshgrid(np.arange(num_c), np.arange(num_p), indexing="ij")
    comp, item = comp_grid.ravel(), item_grid.ravel()
    keep = rng.uniform(size=comp.shape[0]) >= missing
    comp, item = comp[keep], item[keep]
    y = sample_graded(rng, truth.theta[comp], truth.alpha[item], truth.b[item])
    return GRMData(
        comparison=comp,
        item=item,
        y=y,
        weight=np.ones(comp.shape[0]),
        num_comparisons=num_c,
        num_items=num_p,
        num_categories=truth.b.shape[1] + 1,
    )


def simulate_judgments(
    rng: np.random.Generator,
    *,
    systems: list[str],
    pairs: list[tuple[int, int]],
    num_prompts: int,
    num_annotators: int = 3,
    skill: np.ndarray | None = None,
    alpha: np.ndarray | None = None,
    b: np.ndarray | None = None,
    dimension: str = "overall",
) -> tuple[list[dict], Truth]:
    """Per-judgment rows in the common schema (3-category responses per annotator).

    Each annotator's judgment of cell (comparison i, prompt j) is a graded
    response with categories A better / tie / B better.
    """
    if skill is None:
        skill = rng.normal(0.0, 1.0, len(systems))
    pa = np.array([a for a, _ in pairs])
    pb = np.array([b_ for _, b_ in pairs])
    if alpha is None:
        alpha = np.exp(rng.normal(0.0, 1.0, num_prompts))
    if b is None:
        b = np.sort(rng.normal(0.0, 2.0, (num_prompts, 2)), axis=1)
    theta = skill[pb] - skill[pa]
    rows = []
    for i, (a, bb) in enumerate(pairs):
        for j in range(num_prompts):
            for k in range(num_annotators):
                y = sample_graded(rng, theta[i : i + 1], alpha[j : j + 1], b[j : j + 1])[0]
                rows.append(
                    {
                        "item_id": f"p{j:04d}",
                        "system_a": systems[a],
                        "system_b": systems[bb],
                        "annotator_id": f"w{(i * 7 + j + k) % 50:02d}",
                        "winner": ("a", "tie", "b")[y],
                        "dimension": dimension,
                    }
                )
    return rows, Truth(theta=theta, alpha=alpha, b=b, skill=skill)


# ------------------------------------------------------------------ campaigns with known Δ


def expected_signed(theta: np.ndarray, alpha: np.ndarray, b: np.ndarray) -> np.ndarray:
    """E[signed judgment] (+1 B, -1 A, 0 tie) of a 3-category graded response.

    With b = (b1, b2): P(B) - P(A) = sigmoid(alpha (theta - b2)) - (1 - sigmoid(alpha (theta - b1))).
    """
    p_b = 1.0 / (1.0 + np.exp(-alpha * (theta - b[..., 1])))
    p_not_a = 1.0 / (1.0 + np.exp(-alpha * (theta - b[..., 0])))
    return p_b - (1.0 - p_not_a)


@dataclass(frozen=True)
class Campaign:
    """Simulated per-judgment rows with the truth they were drawn from.

    Attributes:
        rows: per-judgment dicts in the common schema (``item_id, system_a, system_b,
            annotator_id, winner, dimension``), comparisons in the order of ``pairs``.
        theta: (C,) true ability differences (> 0: B better).
        cell_delta: (C, P) each cell's expected signed judgment, given everything the
            simulation drew for that cell (its prompt and its prompt-by-comparison
            effect), for an annotator drawn at random from the campaign's pool (so a
            share of random annotators scales it towards 0).
        systems, prompts: names; ``pairs[i] = (a, b)`` indexes ``systems``.
        random_annotators: ids of the annotators who answered at random.
    """

    rows: list[dict]
    theta: np.ndarray
    cell_delta: np.ndarray
    systems: tuple[str, ...]
    prompts: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    random_annotators: tuple[str, ...] = ()

    @property
    def delta(self) -> np.ndarray:
        """(C,) true net preference over every prompt of the campaign."""
        return self.cell_delta.mean(axis=1)

    def true_delta(self, comparison: np.ndarray, prompt: np.ndarray) -> np.ndarray:
        """(C,) true Δ over the prompts each comparison was judged on (in these judgments).

        This is the estimand of a fit to those judgments: the expected signed judgment
        averaged over the comparison's judged prompts (NaN for a comparison without any).
        """
        num_c = self.cell_delta.shape[0]
        seen = np.zeros_like(self.cell_delta, dtype=bool)
        seen[np.asarray(comparison), np.asarray(prompt)] = True
        with np.errstate(invalid="ignore"):
            return np.where(
                seen.any(axis=1),
                (self.cell_delta * seen).sum(axis=1) / np.maximum(seen.sum(axis=1), 1),
                np.nan,
            )[:num_c]


def draw_pairs(
    rng: np.random.Generator, num_comparisons: int, num_systems: int | None = None
) -> tuple[int, tuple[tuple[int, int], ...]]:
    """``num_comparisons`` distinct (a, b) pairs, a < b, drawn from ``num_systems`` systems
    (default: just enough for that many pairs), in sorted order: (systems, pairs)."""
    if num_systems is None:
        num_systems = 2
        while num_systems * (num_systems - 1) // 2 < num_comparisons:
            num_systems += 1
    all_pairs = [(a, b) for a in range(num_systems) for b in range(a + 1, num_systems)]
    chosen = rng.choice(len(all_pairs), size=num_comparisons, replace=False)
    return num_systems, tuple(all_pairs[i] for i in sorted(chosen))


def simulate_campaign(
    rng: np.random.Generator,
    *,
    num_comparisons: int = 20,
    num_prompts: int = 200,
    num_annotators: int = 3,
    null: bool = False,
    symmetric_null: bool = True,
    cell_sd: float = 0.0,
    random_annotators: float = 0.0,
    num_systems: int | None = None,
) -> Campaign:
    """A campaign in the paper's setting (one theta per comparison) with its true Δ.

    The paper's setting (``cell_sd=0, random_annotators=0``): theta ~ N(0, 1) per
    comparison, log alpha ~ N(0, 1), thresholds sorted N(0, 2), and every judgment an
    independent graded response. The second simulator adds what the model does not
    assume: a prompt-by-comparison effect ``eps ~ N(0, cell_sd)`` added to theta in
    each cell (the judgments of a cell share its two responses), and a share
    ``random_annotators`` of annotators who pick A, tie or B uniformly at random.

    Args:
        null: every system equal (theta = 0). With ``symmetric_null`` (default) the
            thresholds are also symmetric (b = (-d, d)), so every cell's judgments are
            exchangeable in A and B and every true Δ is exactly 0; without it the
            thresholds are drawn as in the paper, and each prompt's asymmetry (a lean
            towards the system named second, common to all comparisons) makes the true
            Δ of the judged prompts small but not 0.
        num_systems: systems to draw the pairs from (default: just enough for
            ``num_comparisons`` distinct pairs).
    """
    num_c, num_p = num_comparisons, num_prompts
    num_systems, pairs = draw_pairs(rng, num_c, num_systems)
    theta = np.zeros(num_c) if null else rng.normal(0.0, 1.0, num_c)
    alpha = np.exp(rng.normal(0.0, 1.0, num_p))
    if null and symmetric_null:
        d = np.abs(rng.normal(0.0, 2.0, num_p))
        b = np.stack([-d, d], axis=1)
    else:
        b = np.sort(rng.normal(0.0, 2.0, (num_p, 2)), axis=1)
    eps = rng.normal(0.0, cell_sd, (num_c, num_p)) if cell_sd > 0 else np.zeros((num_c, num_p))
    eta = theta[:, None] + eps
    model_delta = expected_signed(eta, alpha[None, :], b[None, :, :])
    # random annotators: a pool of 50, a share of them answering uniformly at random
    pool = 50
    is_random = rng.uniform(size=pool) < random_annotators
    rows: list[dict] = []
    systems = tuple(f"sys{s:02d}" for s in range(num_systems))
    prompts = tuple(f"p{j:04d}" for j in range(num_p))
    cum = 1.0 / (1.0 + np.exp(-alpha[None, :, None] * (eta[:, :, None] - b[None, :, :])))
    for i, (a, bb) in enumerate(pairs):
        for j in range(num_p):
            for k in range(num_annotators):
                ann = (i * 7 + j * 3 + k) % pool
                if is_random[ann]:
                    y = int(rng.integers(0, 3))
                else:
                    y = int((rng.uniform() < cum[i, j]).sum())
                rows.append(
                    {
                        "item_id": prompts[j],
                        "system_a": systems[a],
                        "system_b": systems[bb],
                        "annotator_id": f"w{ann:02d}",
                        "winner": ("a", "tie", "b")[y],
                        "dimension": "overall",
                    }
                )
    # a random annotator's expected signed judgment is 0
    cell_delta = (1.0 - is_random.mean()) * model_delta
    return Campaign(
        rows=rows,
        theta=theta,
        cell_delta=cell_delta,
        systems=systems,
        prompts=prompts,
        pairs=pairs,
        random_annotators=tuple(f"w{a:02d}" for a in np.flatnonzero(is_random)),
    )


def simulate_rough_campaign(
    rng: np.random.Generator,
    *,
    num_comparisons: int = 20,
    num_prompts: int = 200,
    mean_judgments: float = 3.0,
    missing: float = 0.15,
    pool: int = 40,
    random_annotators: float = 0.1,
    sensitivity_sd: float = 0.5,
    tie_sd: float = 0.5,
    skill_df: float = 4.0,
    skill_scale: float = 0.8,
    cell_df: float = 3.0,
    cell_scale: float = 0.35,
    lean: bool = True,
    num_systems: int | None = None,
) -> Campaign:
    """A campaign that departs from the model everywhere at once, with its true Δ.

    Not the paper's setting and not the model's assumptions, for checks the model was not
    tuned on:

    * systems, not comparisons, have skills, heavy-tailed (Student t, ``skill_df``, scale
      ``skill_scale``): a comparison's theta is skill(B) - skill(A);
    * prompts lean (thresholds sorted N(0.3, 1.5): each prompt's tie band is off centre,
      around 0.3 on average; ``lean=False`` centres every band on 0, as the default model's
      symmetric thresholds do), and their discrimination is drawn otherwise (log alpha ~
      N(0, 0.7), the paper's N(0, 1));
    * heavy-tailed prompt-by-comparison effects (t, ``cell_df``, scale ``cell_scale``);
    * annotators differ: each has a sensitivity (alpha times exp N(0, ``sensitivity_sd``))
      and a readiness to call a tie (the tie band's half-width times exp N(0, ``tie_sd``)),
      and a share ``random_annotators`` of the ``pool`` answer uniformly at random;
    * the design is unbalanced: a share ``missing`` of the cells is never judged, the others
      get 1 + Poisson(``mean_judgments`` - 1) judgments (at most ``pool``), each by a
      different annotator drawn at random from the pool.

    ``cell_delta`` is each cell's expected signed judgment for an annotator drawn at random
    from the pool (a random annotator's is 0), so Δ is what the pool would say on average.
    """
    num_c, num_p = num_comparisons, num_prompts
    num_systems, pairs = draw_pairs(rng, num_c, num_systems)
    skill = skill_scale * rng.standard_t(skill_df, num_systems)
    theta = np.array([skill[b] - skill[a] for a, b in pairs])
    alpha = np.exp(rng.normal(0.0, 0.7, num_p))
    b = np.sort(rng.normal(0.3, 1.5, (num_p, 2)), axis=1)
    mid, half = b.mean(axis=1), (b[:, 1] - b[:, 0]) / 2
    if not lean:  # the same tie bands, centred on 0 (the default model's thresholds)
        mid = np.zeros(num_p)
    eta = theta[:, None] + cell_scale * rng.standard_t(cell_df, (num_c, num_p))
    sensitivity = np.exp(rng.normal(0.0, sensitivity_sd, pool))
    tie_width = np.exp(rng.normal(0.0, tie_sd, pool))
    is_random = rng.uniform(size=pool) < random_annotators
    # (C, P, pool): P(y >= 1) and P(y = 2) for each annotator
    slope = alpha[None, :, None] * sensitivity[None, None, :]
    band = half[None, :, None] * tie_width[None, None, :]
    centred = eta[:, :, None] - mid[None, :, None]
    p_not_a = 1.0 / (1.0 + np.exp(-slope * (centred + band)))
    p_b = 1.0 / (1.0 + np.exp(-slope * (centred - band)))
    signed = np.where(is_random[None, None, :], 0.0, p_b - (1.0 - p_not_a))
    cell_delta = signed.mean(axis=2)
    systems = tuple(f"sys{s:02d}" for s in range(num_systems))
    prompts = tuple(f"p{j:04d}" for j in range(num_p))
    rows: list[dict] = []
    for i, (a, bb) in enumerate(pairs):
        for j in range(num_p):
            if rng.uniform() < missing:
                continue
            n = min(pool, 1 + int(rng.poisson(mean_judgments - 1.0)))
            for k in rng.choice(pool, size=n, replace=False):
                if is_random[k]:
                    y = int(rng.integers(0, 3))
                else:
                    u = rng.uniform()
                    y = int(u < p_not_a[i, j, k]) + int(u < p_b[i, j, k])
                rows.append(
                    {
                        "item_id": prompts[j],
                        "system_a": systems[a],
                        "system_b": systems[bb],
                        "annotator_id": f"w{k:02d}",
                        "winner": ("a", "tie", "b")[y],
                        "dimension": "overall",
                    }
                )
    return Campaign(
        rows=rows,
        theta=theta,
        cell_delta=cell_delta,
        systems=systems,
        prompts=prompts,
        pairs=pairs,
        random_annotators=tuple(f"w{a:02d}" for a in np.flatnonzero(is_random)),
    )


def _splits(num_annotators: int) -> dict[int, list[tuple[int, int, int]]]:
    """Every (A, tie, B) count of ``num_annotators`` judgments, by its net rating B - A."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for n_a in range(num_annotators + 1):
        for n_b in range(num_annotators + 1 - n_a):
            out.setdefault(n_b - n_a, []).append((n_a, num_annotators - n_a - n_b, n_b))
    return out


def simulate_net_split_campaign(
    rng: np.random.Generator,
    *,
    num_comparisons: int = 20,
    num_prompts: int = 200,
    num_annotators: int = 3,
    num_systems: int | None = None,
) -> Campaign:
    """A campaign told the paper's way: a cell's *net rating* is the graded response.

    Sedoc & Ungar model the net rating u = #B - #A of a cell's ``num_annotators``
    judgments as one graded response with 2n + 1 categories (theta ~ N(0, 1), log alpha
    ~ N(0, 1), thresholds sorted N(0, 2)). Here each cell draws u so, then splits it
    among its annotators: one (A, tie, B) count with B - A = u, chosen uniformly among
    those that exist, in a random order. A cell's judgments are then one draw, not
    independent answers, which no per-judgment model of this repository assumes.
    The true Δ of a cell is E[u] / n.
    """
    num_c, num_p, n = num_comparisons, num_prompts, num_annotators
    num_systems, pairs = draw_pairs(rng, num_c, num_systems)
    theta = rng.normal(0.0, 1.0, num_c)
    alpha = np.exp(rng.normal(0.0, 1.0, num_p))
    b = np.sort(rng.normal(0.0, 2.0, (num_p, 2 * n)), axis=1)
    cum = 1.0 / (1.0 + np.exp(-alpha[None, :, None] * (theta[:, None, None] - b[None, :, :])))
    # E[u] = sum_c P(y >= c) - n, with y = u + n in 0..2n
    cell_delta = (cum.sum(axis=-1) - n) / n
    splits = _splits(n)
    systems = tuple(f"sys{s:02d}" for s in range(num_systems))
    prompts = tuple(f"p{j:04d}" for j in range(num_p))
    rows: list[dict] = []
    for i, (a, bb) in enumerate(pairs):
        y = (rng.uniform(size=(num_p, 1)) < cum[i]).sum(axis=1)
        for j in range(num_p):
            options = splits[int(y[j]) - n]
            n_a, n_t, n_b = options[int(rng.integers(len(options)))]
            winners = ["a"] * n_a + ["tie"] * n_t + ["b"] * n_b
            for k in rng.permutation(n):
                rows.append(
                    {
                        "item_id": prompts[j],
                        "system_a": systems[a],
                        "system_b": systems[bb],
                        "annotator_id": f"w{(i * 7 + j * 3 + int(k)) % 50:02d}",
                        "winner": winners[int(k)],
                        "dimension": "overall",
                    }
                )
    return Campaign(
        rows=rows,
        theta=theta,
        cell_delta=cell_delta,
        systems=systems,
        prompts=prompts,
        pairs=pairs,
    )


#: the calibration suite's simulators by name (``research/calibration.py --kind``), each
#: a simulator (``simulator``: rough or net-split; else :func:`simulate_campaign`) and its
#: arguments
SIMULATOR_KINDS: dict[str, dict] = {
    # all systems equal, A/B-exchangeable prompts: every true Δ is exactly 0
    "null": dict(null=True),
    # all systems equal, thresholds drawn as in the paper (each prompt leans)
    "null-asym": dict(null=True, symmetric_null=False),
    # the paper's setting: a theta per comparison, independent judgments
    "paper": dict(),
    # prompt-by-comparison effects (sd 0.5) and 20% random annotators
    "varied": dict(cell_sd=0.5, random_annotators=0.2),
    # the varied simulator's two departures from the model, one at a time
    "varied-cells": dict(cell_sd=0.5),
    "varied-random": dict(random_annotators=0.2),
    # everything at once, on simulate_rough_campaign's defaults
    "rough": dict(simulator="rough"),
    # the paper's story: a cell's net rating is the graded response, split among its
    # annotators (simulate_net_split_campaign)
    "net-split": dict(simulator="net-split"),
    # the rough simulator's strong effects alone (theta sd 2.5, leaning prompts, its design):
    # no cell effects, no random or differing annotators
    "rough-strong": dict(
        simulator="rough",
        sensitivity_sd=0.0,
        tie_sd=0.0,
        random_annotators=0.0,
        cell_scale=0.0,
        skill_df=1e9,
        skill_scale=1.8,
    ),
}


def simulate_kind(
    kind: str, seed: int, *, num_comparisons: int = 20, num_prompts: int = 200
) -> Campaign:
    """Campaign ``seed`` of the calibration suite's simulator ``kind`` (:data:`SIMULATOR_KINDS`).

    The same kind and seed are the same campaign wherever they are drawn (the suite's
    rows, the slow tests), from ``np.random.default_rng(seed)``.
    """
    if kind not in SIMULATOR_KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(SIMULATOR_KINDS)}")
    options = dict(SIMULATOR_KINDS[kind])
    simulators: dict[str, Callable[..., Campaign]] = {
        "rough": simulate_rough_campaign,
        "net-split": simulate_net_split_campaign,
    }
    simulate = simulators.get(options.pop("simulator", ""), simulate_campaign)
    return simulate(
        np.random.default_rng(seed),
        num_comparisons=num_comparisons,
        num_prompts=num_prompts,
        **options,
    )


def subsample_index(num_rows: int, fraction: float, seed: int) -> np.ndarray:
    """The rows a share ``fraction`` of campaign ``seed``'s judgments keeps, in order.

    ``round(fraction * num_rows)`` rows drawn uniformly without replacement from
    ``np.random.default_rng(10_000 + seed)``; every row at ``fraction >= 1``. The
    calibration suite's sparse snapshots of a campaign are these rows.

    Example:
        >>> subsample_index(5, 1.0, 0).tolist()
        [0, 1, 2, 3, 4]
        >>> len(subsample_index(200, 0.05, 3))
        10
    """
    if fraction >= 1.0:
        return np.arange(num_rows)
    rng = np.random.default_rng(10_000 + seed)
    return np.sort(rng.choice(num_rows, size=round(fraction * num_rows), replace=False))


def simulate_planted_misfits(
    rng: np.random.Generator,
    *,
    num_comparisons: int = 20,
    num_prompts: int = 200,
    num_annotators: int = 3,
    planted: float = 0.1,
    kind: str = "reversed",
    cell_sd: float = 0.0,
    random_annotators: float = 0.0,
) -> tuple[list[dict], tuple[str, ...]]:
    """A campaign of :func:`simulate_campaign`'s model with a share of prompts it does not fit.

    A planted prompt's judgments ignore the model: ``reversed`` flips the sign of the
    ability in its cells (the worse system wins), ``random`` draws A, tie or B uniformly.
    ``cell_sd`` and ``random_annotators`` add what the model does not assume, as in
    :func:`simulate_campaign`. Returns the rows and the planted prompts' ids.
    """
    if kind not in ("reversed", "random"):
        raise ValueError(f"unknown kind {kind!r}; expected 'reversed' or 'random'")
    num_c, num_p, num_k = num_comparisons, num_prompts, num_annotators
    num_systems, pairs = draw_pairs(rng, num_c)
    theta = rng.normal(0.0, 1.0, num_c)
    alpha = np.exp(rng.normal(0.0, 1.0, num_p))
    b = np.sort(rng.normal(0.0, 2.0, (num_p, 2)), axis=1)
    bad = np.zeros(num_p, dtype=bool)
    bad[rng.choice(num_p, size=round(planted * num_p), replace=False)] = True
    eta = theta[:, None] * np.where(bad & (kind == "reversed"), -1.0, 1.0)[None, :]
    eta = eta + (rng.normal(0.0, cell_sd, (num_c, num_p)) if cell_sd > 0 else 0.0)
    cum = 1.0 / (1.0 + np.exp(-alpha[None, :, None] * (eta[:, :, None] - b[None, :, :])))
    y = (rng.uniform(size=(num_c, num_p, num_k, 1)) < cum[:, :, None, :]).sum(-1)
    pool = 50
    ann = (np.arange(num_c)[:, None, None] * 7 + np.arange(num_p)[None, :, None] * 3
           + np.arange(num_k)[None, None, :]) % pool  # fmt: skip
    uniform = rng.integers(0, 3, y.shape)
    noisy = (rng.uniform(size=pool) < random_annotators)[ann]
    if kind == "random":
        noisy = noisy | bad[None, :, None]
    y = np.where(noisy, uniform, y)
    prompts = tuple(f"p{j:04d}" for j in range(num_p))
    rows = [
        {
            "item_id": prompts[j],
            "system_a": f"sys{pairs[i][0]:02d}",
            "system_b": f"sys{pairs[i][1]:02d}",
            "annotator_id": f"w{ann[i, j, k]:02d}",
            "winner": ("a", "tie", "b")[y[i, j, k]],
            "dimension": "overall",
        }
        for i in range(num_c)
        for j in range(num_p)
        for k in range(num_k)
    ]
    return rows, tuple(p for p, is_bad in zip(prompts, bad) if is_bad)
