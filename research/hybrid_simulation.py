"""Simulated campaigns with an automatic judge of controlled quality: validity and human judgments saved.

Each campaign: 10 comparisons x 200 cells. A cell has a human verdict v (A, tie, B) drawn with
the comparison's net preference; a human judgment is v with probability 1 - noise, else one of
the other two; the truth is Δ = mean over the cells of P(B) - P(A) (what the hybrid estimates).
Two comparisons are exact nulls (cells in mirrored pairs, Δ = 0). Judges:

* ``agree_XX``: the judge says v on XX% of cells (agreement with the cells' human verdict, the
  way MT-Bench's "GPT-4 agrees with the human majority on 71%" is counted), else another verdict;
* ``position_bias``: an 80% judge that says A (shown first) on 30% of cells whatever it thinks;
* ``verbosity_bias``: an 80% judge that says "the longer answer" on 30% of cells, where which
  system is longer leans by up to 40 points per comparison;
* ``random``: a verdict at random; ``adversarial_flip``: always the opposite of v;
  ``adversarial_wrong_side``: always the side opposite to the comparison's true sign.

Every comparison is decided after every batch of 10 of its human judgments, alpha 0.05 over the
campaign (Bonferroni), margin 0.1, until it closes or spends 8,000 human judgments. Policies:
``human_only`` is the product's human-only rule (:func:`adaptive.simulation.hybrid_replay.run_human_only`:
:mod:`adaptive.stopping.decisions`, unit ``judgment``, the same level per comparison) on uniform draws;
``hybrid_uniform`` / ``hybrid_routed`` the hybrid (sign e-processes on Z, equivalence by the
CS); ``*_sequence`` the hybrid whose CS also decides signs (the rule before); ``no_judge`` the
hybrid's machinery without a judge (Z = Y). ``bound`` is 1 - eta^2, the best variance ratio
any calibration of the verdicts can give.

Run in pieces (each appends rows to ``research/hybrid/simulation_signs.jsonl``; a piece of
500 campaigns and a few policies takes a few minutes), e.g.
``nice -n 10 .venv/bin/python research/hybrid_simulation.py --noise 0.1 --policies human_only``
then ``--noise 0.1 --judges agree_80 random --policies hybrid_uniform hybrid_routed``;
``--table`` prints the README's tables from the rows (ratios against the ``human_only`` row of
the same noise, kind and seed). ``--stress``: all-null campaigns, alpha 0.05 per comparison,
2,000 human judgments each: the per-comparison error rate of each judge and policy.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from adaptive.judge.hybrid import HUMAN_ONLY, HybridConfig
from adaptive.simulation.hybrid_replay import Population, population, run, run_human_only, wrong

OUT = Path(__file__).parent / "hybrid" / "simulation_signs.jsonl"
EFFECTS = np.array([0.0, 0.0, 0.15, -0.2, 0.25, -0.3, 0.4, -0.5, 0.6, -0.7])
TIE = 0.2
CELLS = 200
JUDGES = (
    "agree_60", "agree_70", "agree_80", "agree_90", "agree_95", "position_bias",
    "verbosity_bias", "random", "adversarial_flip", "adversarial_wrong_side",
)  # fmt: skip
POLICIES = {
    "hybrid_uniform": HybridConfig(),
    "hybrid_routed": HybridConfig(routing=True),
    "hybrid_uniform_sequence": HybridConfig(sign="sequence"),
    "hybrid_routed_sequence": HybridConfig(routing=True, sign="sequence"),
}
#: policies that use no judge (one row per noise, not per judge)
BASELINES = {"human_only": None, "no_judge": HUMAN_ONLY}


def human_verdicts(rng, campaigns: int, effects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R, CELLS) verdict codes (0 A, 1 tie, 2 B) and (R,) True for the mirrored nulls."""
    R = campaigns * effects.shape[0]
    eff = np.tile(effects, campaigns)
    p = np.stack([(1 - TIE - eff) / 2, np.full(R, TIE), (1 - TIE + eff) / 2], axis=1)
    u = rng.random((R, CELLS))
    v = (u[..., None] > np.cumsum(p, axis=1)[:, None, :]).sum(axis=2).clip(0, 2)
    null = eff == 0
    half = CELLS // 2
    v[null, half:] = 2 - v[null, :half]  # mirrored pairs: Δ exactly 0
    return v, null


def judge_verdicts(rng, name: str, v: np.ndarray) -> np.ndarray:
    """(R, CELLS) the judge's verdict codes on cells whose human verdict is v."""
    R, N = v.shape
    other = (v + rng.integers(1, 3, size=v.shape)) % 3
    if name.startswith("agree_") or name.endswith("_bias"):
        a = int(name.split("_")[1]) / 100 if name.startswith("agree_") else 0.8
        j = np.where(rng.random(v.shape) < a, v, other)
        if name == "position_bias":
            j = np.where(rng.random(v.shape) < 0.3, 0, j)
        if name == "verbosity_bias":
            lean = rng.uniform(-0.4, 0.4, size=(R, 1))
            longer = np.where(rng.random(v.shape) < 0.5 + lean, 2, 0)
            j = np.where(rng.random(v.shape) < 0.3, longer, j)
        return j
    if name == "random":
        return rng.integers(0, 3, size=v.shape)
    if name == "adversarial_flip":
        return 2 - v
    if name == "adversarial_wrong_side":
        net = (v == 2).mean(axis=1) - (v == 0).mean(axis=1)
        return np.broadcast_to(np.where(net > 0, 0, 2)[:, None], v.shape).copy()
    raise ValueError(name)


def make_population(v: np.ndarray, j: np.ndarray, noise: float, budget: int) -> Population:
    R, N = v.shape
    human = np.full((3, 3), noise / 2)
    np.fill_diagonal(human, 1 - noise)
    return population(np.repeat(np.arange(R), N), j.reshape(-1), human[v.reshape(-1)], R, budget)


def bound(pop: Population) -> float:
    """Mean over comparisons of E[Var(Y | verdict)] / Var(Y) (the best a verdict table can do)."""
    vals = np.array([-1.0, 0.0, 1.0])
    mu, ey2 = pop.cell_prob @ vals, pop.cell_prob @ vals**2
    R, K = pop.num_rows, pop.num_verdicts
    key = pop.cell_row * K + pop.cell_verdict
    cnt = np.bincount(key, minlength=R * K).reshape(R, K)
    smu = np.bincount(key, weights=mu, minlength=R * K).reshape(R, K)
    sey2 = np.bincount(key, weights=ey2, minlength=R * K).reshape(R, K)
    n = cnt.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        resid = (sey2.sum(axis=1) - np.nansum(smu**2 / cnt, axis=1)) / n
        total = sey2.sum(axis=1) / n - (smu.sum(axis=1) / n) ** 2
    return float(np.mean(resid / total))


def summarise(res, truth, null, campaigns: int, margin: float) -> dict:
    C = truth.shape[0] // campaigns
    bad = wrong(res.outcome, truth, margin).reshape(campaigns, C)
    used = res.used.reshape(campaigns, C)
    rep = res.report
    row = {
        "human_judgments_mean": float(used.sum(axis=1).mean()),
        "human_judgments_se": float(used.sum(axis=1).std(ddof=1) / np.sqrt(campaigns)),
        "per_comparison": [round(float(x), 1) for x in used.mean(axis=0)],
        "closed_share": float((res.outcome != 0).mean()),
        "wrong_campaigns": float(bad.any(axis=1).mean()),
        "wrong_per_comparison": float(bad.mean()),
        "wrong_null_per_comparison": float(bad.reshape(-1)[null].mean()),
    }
    if rep is not None:
        row["agreement_with_humans"] = float(np.nanmean(rep.agreement))
        row["effective_per_human"] = float(np.nansum(rep.effective_humans) / rep.num_human.sum())
    return row


def run_policy(seed: int, pop: Population, name: str, **kw) -> object:
    """One policy's run (``human_only``: the product's rule; the others the hybrid's)."""
    config = BASELINES[name] if name in BASELINES else POLICIES[name]
    if config is None:
        return run_human_only(seed, pop, **kw)
    return run(seed, pop, config, **kw)


def print_tables(path: Path) -> None:
    """The README's tables: each row's human judgments over the ``human_only`` row's (the
    product's rule, same noise, kind and seed), and the wrong decisions."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    # a setting run again (a piece repeated) gives the same row: keep one
    key = ("kind", "seed", "noise", "judge", "policy", "campaigns")
    rows = list({tuple(r[k] for k in key): r for r in rows}.values())
    order = [*BASELINES, *POLICIES]
    rows.sort(
        key=lambda r: (
            r["kind"], r["seed"], r["noise"], -1 if r["judge"] is None else JUDGES.index(r["judge"]),
            order.index(r["policy"]),
        )
    )  # fmt: skip
    base = {
        (r["noise"], r["kind"], r["seed"]): r["human_judgments_mean"]
        for r in rows
        if r["policy"] == "human_only"
    }
    no_judge = {
        (r["noise"], r["kind"], r["seed"]): r["human_judgments_mean"]
        for r in rows
        if r["policy"] == "no_judge"
    }
    signs = EFFECTS != 0  # the comparisons a sign decides (the others: equivalence)
    base_signs = {
        (r["noise"], r["kind"], r["seed"]): np.sum(np.array(r["per_comparison"])[signs])
        for r in rows
        if r["policy"] == "human_only" and r["kind"] == "campaign"
    }
    print(
        "| noise | judge | agreement (cells) | policy | human judgments (se) | ratio to human-only"
        " | on signs | to no judge | variance bound | closed | wrong campaigns | wrong per null comparison |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kind"] != "campaign":
            continue
        b = base.get((r["noise"], r["kind"], r["seed"]))
        ratio = f"{r['human_judgments_mean'] / b:.3f}" if b else "-"
        bs = base_signs.get((r["noise"], r["kind"], r["seed"]))
        on_signs = np.sum(np.array(r["per_comparison"])[signs])
        ratio_signs = f"{on_signs / bs:.3f}" if bs else "-"
        nj = no_judge.get((r["noise"], r["kind"], r["seed"]))
        ratio_nj = f"{r['human_judgments_mean'] / nj:.3f}" if nj else "-"
        agree = f"{r['agreement_with_cells']:.2f}" if "agreement_with_cells" in r else "-"
        print(
            f"| {r['noise']} | {r['judge'] or '-'} | {agree} | {r['policy']} | "
            f"{r['human_judgments_mean']:.0f} ({r['human_judgments_se']:.0f}) | {ratio} | "
            f"{ratio_signs} | {ratio_nj} | "
            f"{r.get('bound', '-')} | {r['closed_share']:.4f} | {r['wrong_campaigns']:.3f} | "
            f"{r['wrong_null_per_comparison']:.4f} |"
        )
    print("\n| noise | judge | policy | wrong per comparison (level 0.05) | closed |")
    print("|---|---|---|---|---|")
    for r in rows:
        if r["kind"] == "stress_nulls":
            print(
                f"| {r['noise']} | {r['judge'] or '-'} | {r['policy']} | "
                f"{r['wrong_per_comparison']:.4f} | {r['closed_share']:.3f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--campaigns", type=int, default=500)
    ap.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.2])
    ap.add_argument("--judges", nargs="*", default=list(JUDGES))
    ap.add_argument("--policies", nargs="+", default=["human_only", *POLICIES])
    ap.add_argument("--budget", type=int, default=8000)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--margin", type=float, default=0.1)
    ap.add_argument("--stress", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--table", action="store_true", help="print the tables of the rows in --out")
    args = ap.parse_args()
    if args.table:
        print_tables(Path(args.out))
        return
    effects = np.zeros(10) if args.stress else EFFECTS
    alpha_each = args.alpha if args.stress else args.alpha / effects.shape[0]
    budget = 2000 if args.stress else args.budget
    kw = {"alpha_each": alpha_each, "margin": args.margin}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    common = {"campaigns": args.campaigns, "comparisons": int(effects.shape[0]), "cells": CELLS}
    common |= {"alpha_each": alpha_each, "margin": args.margin, "budget": budget, "batch": 10}
    common |= {"kind": "stress_nulls" if args.stress else "campaign", "seed": args.seed}
    with open(args.out, "a") as out:

        def emit(row: dict, t0: float) -> None:
            row["seconds"] = round(time.time() - t0, 1)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(row, flush=True)

        for noise in args.noise:
            rng = np.random.default_rng([args.seed, int(noise * 1000)])
            v, null = human_verdicts(rng, args.campaigns, effects)
            first = make_population(v, v, noise, budget)
            truth = first.truth
            for name in [p for p in args.policies if p in BASELINES]:
                t0 = time.time()
                res = run_policy(args.seed, first, name, **kw)
                row = {**common, "noise": noise, "judge": None, "policy": name}
                emit(row | summarise(res, truth, null, args.campaigns, args.margin), t0)
            for judge in args.judges:
                jrng = np.random.default_rng([args.seed, int(noise * 1000), JUDGES.index(judge)])
                j = judge_verdicts(jrng, judge, v)
                pop = make_population(v, j, noise, budget)
                for name in [p for p in args.policies if p in POLICIES]:
                    t0 = time.time()
                    res = run_policy(args.seed, pop, name, **kw)
                    row = {**common, "noise": noise, "judge": judge, "policy": name}
                    row |= summarise(res, truth, null, args.campaigns, args.margin)
                    row["agreement_with_cells"] = float(np.mean(j == v))
                    row["bound"] = round(bound(pop), 4)
                    emit(row, t0)


if __name__ == "__main__":
    main()
