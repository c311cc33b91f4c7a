"""Draw judgments from known graded-response parameters (for recovery tests and benchmarks)."""

from __future__ import annotations

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
    comp, item = np.meshgrid(np.arange(num_c), np.arange(num_p), indexing="ij")
    comp, item = comp.ravel(), item.ravel()
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
