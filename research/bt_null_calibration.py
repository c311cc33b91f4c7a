"""How often `evalset bt --report differences` flags a difference on null campaigns.

A null campaign has systems that are all equal in the population of items. For every
campaign, design, ``--by`` and method this script fits the Bradley-Terry model as
``evalset bt`` does (:func:`adaptive.leaderboards.bt.fit_dimension`, Davidson ties, position
intercept, the product's NUTS settings unless told otherwise) and records, from
:func:`adaptive.leaderboards.bt.difference_rows`:

* whether any system pair is ``significant`` (95% HDI excludes 0), ``model_adjusted``
  (Holm over the pairs on posterior tail probabilities) and ``significant_adjusted`` (the
  verdict: the model's and the data's adjusted verdicts agree, in the same direction);
* for every pair, the reported difference with its HDI, and the true difference over
  the items the pair was judged on (the finite-sample truth: the mean over those items
  of quality(B) - quality(A), which is what ``--by item`` reports on; it is 0 only when
  items carry no item-by-system variation);
* three frequentist checks of the same pairs on the same campaigns, each with Holm over
  the pairs: items as units (``scipy.stats.ttest_1samp`` of each item's net preference,
  +1 B / -1 A / 0 tie, averaged over the pair's direct judgments of the item: the data
  check of ``adaptive/estimation/significance.py``), and the pooled Bradley-Terry difference by
  maximum likelihood (ties dropped, fitted with ``scipy.optimize``) with Wald tests on the
  model's standard errors (every judgment independent, as the pooled model assumes) and
  on cluster-robust ones (items as clusters). The last two test the same difference with
  and without the dependence within items, so they show whether the posterior's flags
  come from ignoring it.

Designs (``--design``; one seed is the same campaign skeleton in every design: the same
items, responders, annotators, positions and uniforms, only the qualities differ):

* ``independent``: every judgment an independent draw from Davidson's model with equal
  abilities: a tie probability and a position pull, drawn per campaign from the model's
  priors (log nu ~ N(-1, 1), position intercept ~ N(0, 1));
* ``items-0.5`` / ``items-1.0``: the same plus a quality per (item, system), N(0, sd) on
  the logit scale, seen by every annotator of the item: the judgments of one item are
  dependent; systems are equal on average over items (population mean 0) but not on a
  campaign's finite set of items.

Every campaign: ``--systems`` systems (5), ``--items`` items (20), ``--responders``
systems answering each item (4, chosen at random), ``--annotators`` annotators per
item (5, from a pool of 30), each judging every pair of the item's responses once, in
a random order on screen (``shown_first``).

    python research/bt_null_calibration.py --design independent items-0.5 items-1.0 \\
        --by pooled item --method laplace --campaigns 40 --jsonl research/calibration/bt_null.jsonl
    python research/bt_null_calibration.py --design independent items-1.0 \\
        --by pooled item --method nuts --campaigns 10 --jsonl research/calibration/bt_null.jsonl
    python research/bt_null_calibration.py --summarize research/calibration/bt_null.jsonl

``--jsonl FILE`` appends one line per fit; a fit already in FILE (same design, seed,
``--by``, method and campaign size) is not run again, so a run can be stopped and
resumed. ``--summarize FILE`` prints the table: per design, ``--by`` and method, the
number of campaigns, how many had any flag and the share with its one-sided 95%
Clopper-Pearson upper bound, for the model's adjusted and unadjusted verdicts and the
three frequentist checks; for ``--by item`` the coverage of the finite-sample truth by the
95% HDI and the adjusted flags whose sign contradicts it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from calibration import record  # noqa: E402

DESIGNS = {"independent": 0.0, "items-0.5": 0.5, "items-1.0": 1.0}
ANNOTATOR_POOL = 30


@dataclass(frozen=True)
class Campaign:
    """A simulated null campaign: the judgments and each (item, system)'s true quality."""

    judgments: pl.DataFrame
    quality: dict[tuple[str, str], float]
    position: float
    log_nu: float


def simulate(
    seed: int,
    item_sd: float,
    *,
    systems: int = 5,
    items: int = 20,
    responders: int = 4,
    annotators: int = 5,
) -> Campaign:
    """One null campaign. Every random number is drawn whatever ``item_sd`` is, so one
    seed gives the same skeleton in every design and only the qualities scale."""
    from adaptive.core.data import validate_judgments

    rng = np.random.default_rng(seed)
    names = [f"s{k}" for k in range(systems)]
    position = float(rng.normal(0.0, 1.0))  # the model's prior of the intercept
    log_nu = float(rng.normal(-1.0, 1.0))  # the model's prior of Davidson's log nu
    z = rng.normal(size=(items, systems))
    quality = {}
    rows = []
    for i in range(items):
        item = f"item{i:03d}"
        answered = np.sort(rng.permutation(systems)[:responders])
        for s in answered:
            quality[(item, names[s])] = float(item_sd * z[i, s])
        raters = rng.choice(ANNOTATOR_POOL, size=annotators, replace=False)
        for r in raters:
            for x, a in enumerate(answered):
                for b in answered[x + 1 :]:
                    a_first = bool(rng.integers(0, 2))
                    u = float(rng.uniform())
                    first, second = (a, b) if a_first else (b, a)
                    d = position + item_sd * (z[i, first] - z[i, second])
                    w = np.array([np.exp(d / 2), np.exp(log_nu), np.exp(-d / 2)])
                    p_first, p_tie, _ = w / w.sum()
                    if u < p_first:
                        winner = "a" if a_first else "b"
                    elif u < p_first + p_tie:
                        winner = "tie"
                    else:
                        winner = "b" if a_first else "a"
                    rows.append(
                        {
                            "item_id": item,
                            "system_a": names[a],
                            "system_b": names[b],
                            "annotator_id": f"r{r:02d}",
                            "winner": winner,
                            "dimension": "overall",
                            "shown_first": "a" if a_first else "b",
                        }
                    )
    return Campaign(validate_judgments(pl.DataFrame(rows)), quality, position, log_nu)


def finite_truth(camp: Campaign, sa: str, sb: str) -> float:
    """quality(sb) - quality(sa), averaged over the items where both answered."""
    items = sorted(
        {it for it, s in camp.quality if s == sa} & {it for it, s in camp.quality if s == sb}
    )
    return float(np.mean([camp.quality[(it, sb)] - camp.quality[(it, sa)] for it in items]))


def holm_any(p_values: list[float], alpha: float = 0.05) -> tuple[bool, int]:
    """(any rejected, number rejected) by Holm's step-down (the product's, doctested)."""
    from adaptive.estimation.significance import holm

    rejected = holm(np.asarray(p_values, dtype=float), alpha)
    return bool(rejected.any()), int(rejected.sum())


def item_t_p(judgments: pl.DataFrame, sa: str, sb: str) -> float:
    """Two-sided p-value of "sa vs sb" with items as units: ``scipy.stats.ttest_1samp`` of
    each item's net preference for sb (+1 sb / -1 sa / 0 tie, mean over the item's direct
    judgments of the pair)."""
    from scipy.stats import ttest_1samp

    direct = judgments.filter(
        ((pl.col("system_a") == sa) & (pl.col("system_b") == sb))
        | ((pl.col("system_a") == sb) & (pl.col("system_b") == sa))
    )
    winner = np.where(
        direct["winner"] == "a",
        direct["system_a"],
        np.where(direct["winner"] == "b", direct["system_b"], ""),
    )
    score = np.where(winner == sb, 1.0, np.where(winner == sa, -1.0, 0.0))
    per_item = (
        pl.DataFrame({"item": direct["item_id"], "score": score})
        .group_by("item")
        .agg(pl.col("score").mean())["score"]
        .to_numpy()
    )
    if len(per_item) < 2 or np.ptp(per_item) == 0:
        # no spread: the sign test's p, as the product's data check
        # (adaptive.estimation.significance.observed_from_judgments)
        return 1.0 if len(per_item) < 2 or per_item[0] == 0 else 2.0 ** (1 - len(per_item))
    return float(ttest_1samp(per_item, 0.0).pvalue)


def pooled_wald_p(
    judgments: pl.DataFrame, pairs: list[tuple[str, str]]
) -> tuple[list[float], list[float]]:
    """Two-sided p-values of the pooled Bradley-Terry difference of each pair, by maximum
    likelihood (ties dropped, a position intercept, fitted with ``scipy.optimize``), once
    with the model's standard errors (judgments independent) and once with cluster-robust
    ones (items as clusters: the sandwich with the per-item score sums, CR1 factor
    G / (G - 1), normal reference)."""
    from scipy.optimize import minimize
    from scipy.stats import norm

    df = judgments.filter(pl.col("winner") != "tie")
    names = sorted(set(df["system_a"].to_list()) | set(df["system_b"].to_list()))
    col = {s: k for k, s in enumerate(names)}
    a_first = (df["shown_first"] == "a").to_numpy()
    first = np.where(a_first, df["system_a"], df["system_b"])
    second = np.where(a_first, df["system_b"], df["system_a"])
    y = (np.where(df["winner"] == "a", df["system_a"], df["system_b"]) == first).astype(float)
    x = np.zeros((df.height, len(names)))
    x[np.arange(df.height), [col[s] for s in first]] += 1.0
    x[np.arange(df.height), [col[s] for s in second]] -= 1.0
    x[:, 0] = 1.0  # names[0] is the reference (ability 0); its column carries the position

    def nll(beta):
        eta = x @ beta
        return float(np.sum(np.logaddexp(0.0, eta) - y * eta)), x.T @ (1 / (1 + np.exp(-eta)) - y)

    beta = minimize(nll, np.zeros(len(names)), jac=True, method="BFGS", tol=1e-10).x
    p = 1 / (1 + np.exp(-(x @ beta)))
    bread = np.linalg.inv((x * (p * (1 - p))[:, None]).T @ x)
    scores = x * (y - p)[:, None]
    items = df["item_id"].to_numpy()
    groups = np.unique(items)
    meat = np.zeros_like(bread)
    for g in groups:
        s = scores[items == g].sum(axis=0)
        meat += np.outer(s, s)
    robust = bread @ meat @ bread * len(groups) / (len(groups) - 1)
    naive_p, robust_p = [], []
    for sa, sb in pairs:
        c = np.zeros(len(names))
        if col[sb]:
            c[col[sb]] += 1.0
        if col[sa]:
            c[col[sa]] -= 1.0
        est = c @ beta
        naive_p.append(float(2 * norm.sf(abs(est) / np.sqrt(c @ bread @ c))))
        robust_p.append(float(2 * norm.sf(abs(est) / np.sqrt(c @ robust @ c))))
    return naive_p, robust_p


def fit_record(camp: Campaign, design: str, by: str, method: str, seed: int, args) -> dict:
    """Fit one campaign as `evalset bt --by BY --method METHOD --report differences` does."""
    from adaptive.leaderboards import bt

    config = bt.BTConfig(
        by=by,
        method=method,
        seed=seed,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_samples=args.draws,
    )
    start = time.perf_counter()
    fit = bt.fit_dimension(camp.judgments, "overall", config)
    rows = bt.difference_rows(fit)
    seconds = time.perf_counter() - start
    truth = [finite_truth(camp, r["system_a"], r["system_b"]) for r in rows]
    pairs = [(r["system_a"], r["system_b"]) for r in rows]
    p_items = [item_t_p(camp.judgments, sa, sb) for sa, sb in pairs]
    p_naive, p_robust = pooled_wald_p(camp.judgments, pairs)
    items_any, items_num = holm_any(p_items)
    naive_any, naive_num = holm_any(p_naive)
    robust_any, robust_num = holm_any(p_robust)
    low = np.array([r["ci_low"] for r in rows])
    high = np.array([r["ci_high"] for r in rows])
    t = np.array(truth)
    adjusted = np.array([r["significant_adjusted"] for r in rows])
    model_adjusted = np.array([r["model_adjusted"] for r in rows])
    mean = np.array([r["mean"] for r in rows])
    rec = {
        "design": design,
        "item_sd": DESIGNS[design],
        "seed": seed,
        "by": by,
        "method": method,
        "seconds": seconds,
        "systems": args.systems,
        "items": args.items,
        "responders": args.responders,
        "annotators": args.annotators,
        "n_judgments": camp.judgments.height,
        "position": camp.position,
        "log_nu": camp.log_nu,
        "num_pairs": len(rows),
        "any_adjusted": bool(adjusted.any()),
        "num_adjusted": int(adjusted.sum()),
        "any_model_adjusted": bool(model_adjusted.any()),
        "num_model_adjusted": int(model_adjusted.sum()),
        "any_data_adjusted": any(r["data_adjusted"] for r in rows),
        "wrong_sign_model_adjusted": int(
            np.sum(model_adjusted & (np.sign(mean) != np.sign(t)) & (t != 0))
        ),
        "any_significant": any(r["significant"] for r in rows),
        "num_significant": sum(r["significant"] for r in rows),
        "any_items_adjusted": items_any,
        "num_items_adjusted": items_num,
        "any_wald_adjusted": naive_any,
        "num_wald_adjusted": naive_num,
        "any_robust_adjusted": robust_any,
        "num_robust_adjusted": robust_num,
        "covered": int(np.sum((low <= t) & (t <= high))),
        "wrong_sign_adjusted": int(np.sum(adjusted & (np.sign(mean) != np.sign(t)) & (t != 0))),
        "pairs": [f"{r['system_a']}|{r['system_b']}" for r in rows],
        "est": mean.tolist(),
        "sd": [r["sd"] for r in rows],
        "ci_low": low.tolist(),
        "ci_high": high.tolist(),
        "p_two_sided": [r["p_two_sided"] for r in rows],
        "truth": truth,
        "p_items": p_items,
        "p_wald": p_naive,
        "p_robust": p_robust,
    }
    if method == "nuts":
        d = fit.posterior.diagnostics
        rec.update(
            chains=args.chains,
            warmup=args.warmup,
            draws=args.draws,
            max_rhat=d.max_rhat(),
            min_ess_bulk=d.min_ess_bulk(),
            divergences=int(d.num_divergences),
        )
    return rec


def upper95(k: int, n: int) -> float:
    """One-sided 95% Clopper-Pearson upper bound of a share k / n."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(0.95, k + 1, n - k))


def summarize(paths: list[str]) -> None:
    groups: dict[tuple, list[dict]] = {}
    for path in paths:
        for line in open(path):
            rec = json.loads(line)
            size = (rec["systems"], rec["items"], rec["responders"], rec["annotators"])
            groups.setdefault((rec["design"], rec["by"], rec["method"], size), []).append(rec)

    def share(recs: list[dict], key: str) -> str:
        k, n = sum(bool(r[key]) for r in recs), len(recs)
        return f"{k:3d} {k / n:5.3f} <={upper95(k, n):5.3f}"

    print(
        "flags: campaigns with any flagged pair, share, one-sided 95% Clopper-Pearson upper bound\n"
        f"{'design':12s} {'by':6s} {'method':7s} {'n':>3s}  {'bt verdict':>19s}  "
        f"{'bt model alone':>19s}  "
        f"{'bt unadjusted':>19s}  {'items-as-units t':>19s}  {'ML Wald':>19s}  "
        f"{'ML Wald, clustered':>19s}  "
        f"{'coverage':>8s} {'wrong':>5s} {'s/fit':>6s}"
    )
    for (design, by, method, _size), recs in sorted(groups.items()):
        covered = sum(r["covered"] for r in recs) / sum(r["num_pairs"] for r in recs)
        wrong = sum(r["wrong_sign_adjusted"] for r in recs)
        secs = float(np.median([r["seconds"] for r in recs]))
        print(
            f"{design:12s} {by:6s} {method:7s} {len(recs):3d}  {share(recs, 'any_adjusted')}  "
            f"{share(recs, 'any_model_adjusted')}  "
            f"{share(recs, 'any_significant')}  {share(recs, 'any_items_adjusted')}  "
            f"{share(recs, 'any_wald_adjusted')}  {share(recs, 'any_robust_adjusted')}  "
            f"{covered:8.3f} {wrong:5d} {secs:6.1f}"
        )
    print(
        "coverage: share of pairs whose 95% HDI holds the mean over their items of the true\n"
        "quality difference (0 in `independent`); wrong: adjusted flags whose sign is not the\n"
        "sign of that finite-sample truth; s/fit: median wall seconds of a fit (compile included\n"
        "for the first). Campaign size (systems, items, responders, annotators): "
        + ", ".join(sorted({str(k[3]) for k in groups}))
        + "; all flag columns: Holm at 0.05 over the pairs, except bt unadjusted (HDI excludes 0)"
    )
    for design, by, method, size in sorted(groups):
        if method != "nuts" or (design, by, "laplace", size) not in groups:
            continue
        lap = {r["seed"]: r for r in groups[(design, by, "laplace", size)]}
        both = [(lap[r["seed"]], r) for r in groups[(design, by, method, size)] if r["seed"] in lap]
        same = sum(a["any_adjusted"] == b["any_adjusted"] for a, b in both)
        print(
            f"{design} {by}: laplace and nuts give the same adjusted verdict on {same} of "
            f"{len(both)} campaigns (flagged {sum(a['any_adjusted'] for a, _ in both)} / "
            f"{sum(b['any_adjusted'] for _, b in both)})"
        )
    nuts = [r for recs in groups.values() for r in recs if r["method"] == "nuts"]
    if nuts:
        print(
            f"NUTS ({len(nuts)} fits): max R-hat {max(r['max_rhat'] for r in nuts):.3f}, "
            f"min bulk ESS {min(r['min_ess_bulk'] for r in nuts):.0f}, "
            f"divergences {sum(r['divergences'] for r in nuts)}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", nargs="+", default=["independent"], choices=list(DESIGNS))
    parser.add_argument("--by", nargs="+", default=["pooled", "item"], choices=["pooled", "item"])
    parser.add_argument("--method", nargs="+", default=["nuts"], choices=["nuts", "laplace"])
    parser.add_argument("--campaigns", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--systems", type=int, default=5)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--responders", type=int, default=4)
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--chains", type=int, default=4, help="NUTS chains (product default)")
    parser.add_argument("--warmup", type=int, default=1000, help="NUTS warm-up per chain")
    parser.add_argument("--draws", type=int, default=1000, help="NUTS draws per chain")
    parser.add_argument("--jsonl", default=None, help="append one line per fit; skip fits in it")
    parser.add_argument("--summarize", nargs="+", default=None, help="print the table of FILEs")
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return 0

    size = (args.systems, args.items, args.responders, args.annotators)
    done: set[tuple] = set()
    if args.jsonl and os.path.exists(args.jsonl):
        for line in open(args.jsonl):
            rec = json.loads(line)
            rec_size = (rec["systems"], rec["items"], rec["responders"], rec["annotators"])
            if rec_size == size:
                done.add((rec["design"], rec["seed"], rec["by"], rec["method"]))
    for seed in range(args.first_seed, args.first_seed + args.campaigns):
        for design in args.design:
            todo = [
                (by, method)
                for by in args.by
                for method in args.method
                if (design, seed, by, method) not in done
            ]
            if not todo:
                continue
            camp = simulate(
                seed,
                DESIGNS[design],
                systems=args.systems,
                items=args.items,
                responders=args.responders,
                annotators=args.annotators,
            )
            for by, method in todo:
                rec = fit_record(camp, design, by, method, seed, args)
                record(
                    args.jsonl,
                    rec,
                    f"{design} seed {seed} {by} {method}: adjusted {rec['num_adjusted']}, "
                    f"unadjusted {rec['num_significant']}, items-t {rec['num_items_adjusted']}, "
                    f"wald {rec['num_wald_adjusted']}, clustered {rec['num_robust_adjusted']}, "
                    f"covered {rec['covered']}/"
                    f"{rec['num_pairs']} ({rec['seconds']:.1f} s)",
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
