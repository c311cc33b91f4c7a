"""Held-out SE of the IRT-ranked and random prompt sets, with and without item uncertainty.

``evalset loco`` scores a held-out comparison with the item parameters fixed at
the training fit's point estimates. This script repeats the prompt-weighted
(k = 100, 150, all) and random (k = 100, ``--num-random`` draws) policies and
also carries the training fit's item uncertainty into the held-out estimate:
the held-out posterior is the mixture over ``--item-draws`` Laplace draws of
(alpha, b), so its variance is E[Var(theta | items)] + Var(E[theta | items]).

    python research/loco_item_uncertainty.py [--data FILE] [--item-draws 100]
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

from adaptive.core.cells import build_cells
from adaptive.core.data import read_judgments
from adaptive.prompts.loco import fit_items, heldout_posterior, information_score, loco_data
from adaptive.prompts.selection import prefix_masks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", default="data/chateval_ncm/judgments.csv")
    parser.add_argument("--item-draws", type=int, default=100)
    parser.add_argument("--num-random", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 1 <= args.item_draws <= 400:
        parser.error("--item-draws must be between 1 and 400 (the Laplace draws of each fit)")

    data = loco_data(build_cells(read_judgments(args.data)))
    rng = np.random.default_rng(args.seed)
    rows: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for fold in range(data.num_comparisons):
        train = np.array([c for c in range(data.num_comparisons) if c != fold])
        fit = fit_items(data, train, jax.random.PRNGKey(args.seed + fold), 400)
        score = information_score(fit, 100)
        held = data.cell_comparison == fold
        y = np.zeros(data.num_prompts, np.int64)
        y[data.cell_prompt[held]] = data.cell_y[held]
        available = np.zeros(data.num_prompts, bool)
        available[data.cell_prompt[held]] = True
        order = np.argsort(-np.where(available, score, -np.inf), kind="stable")
        # the first k judged prompts in information order (k is capped at their number)
        ks = (100, 150, data.num_prompts)
        masks = list(prefix_masks(order[: int(available.sum())], ks, data.num_prompts))
        names = [("prompt", 100), ("prompt", 150), ("all", 0)]
        for _ in range(args.num_random):
            mask = np.zeros(data.num_prompts, bool)
            mask[rng.permutation(np.flatnonzero(available))[:100]] = True
            masks.append(mask)
            names.append(("random", 100))
        masks_arr = np.array(masks)
        _, sd_fixed = heldout_posterior(y, fit.alpha, fit.b, masks_arr)
        means, sds = [], []
        for s in range(args.item_draws):
            mu, sd = heldout_posterior(y, np.exp(fit.log_alpha_draws[s]), fit.b_draws[s], masks_arr)
            means.append(mu)
            sds.append(sd)
        sd_mixture = np.sqrt((np.array(sds) ** 2).mean(0) + np.array(means).var(0))
        for name, a, b in zip(names, sd_fixed, sd_mixture):
            rows.setdefault(name, []).append((a, b))
        print(f"fold {fold + 1}/{data.num_comparisons}", file=sys.stderr, flush=True)

    full = np.array(rows[("all", 0)]).mean(0)
    print("policy  k    se_fixed  ratio   se_with_item_uncertainty  ratio")
    for (policy, k), values in rows.items():
        mean = np.array(values).mean(0)
        label = "all" if policy == "all" else str(k)
        print(
            f"{policy:7s} {label:4s} {mean[0]:.4f}    {mean[0] / full[0]:.3f}   "
            f"{mean[1]:.4f}                    {mean[1] / full[1]:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
