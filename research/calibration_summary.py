"""The tables of the calibration suite's rows (``research/calibration.py --summarize``).

Every function here reads stored rows (one JSON line per fit, :func:`read_rows`), never
fits: per simulator and preset, a table of each row label's flags, coverage of Δ's 95%
intervals, mean abs z, mean sd and seconds (:func:`print_tables`), then the lines below it:
campaign-bootstrap intervals of coverage and of the sparse exaggeration
(:func:`interval_lines`), the slope of the true Δ on its estimate (:func:`shrinkage_lines`),
coverage by the size of the true Δ (:func:`size_lines`), the posterior predictive check's
hits (:func:`ppc_lines`) and two models on the same campaigns (:func:`paired_lines`);
``--plot`` draws coverage by share (:func:`plot_coverage`).
"""

from __future__ import annotations

import json

import numpy as np


def read_rows(
    paths: list[str], *, pool_samplers: bool = False
) -> dict[tuple[str, float], list[dict]]:
    """The rows of --jsonl files, by (row label, share).

    ``pool_samplers``: NUTS rows of one model measured with different samplers are pooled
    under one label ending in ``[samplers pooled]`` (both sample the same posterior: the slow
    test ``test_whitened_and_diagonal_nuts_give_the_same_posterior``). A campaign measured with
    both counts once, with the default (whitened) sampler's row.
    """
    by_key: dict[tuple[str, float], dict[tuple[str, int], dict]] = {}
    for path in paths:
        for line in open(path):
            rec = json.loads(line)
            label = row_label(rec)
            if pool_samplers and rec["method"] == "nuts":
                label = row_label({**rec, "sampler": None}) + "[samplers pooled]"
            rows = by_key.setdefault((label, rec["fraction"]), {})
            key = (rec["kind"], rec.get("preset", "default"), rec["seed"])
            # rows from before NUTS rows said their sampler: lapse rows diagonal, others whitened
            sampler = rec.get("sampler") or ("diagonal" if rec.get("lapse") else "whitened")
            if key not in rows or sampler == "whitened":
                rows[key] = rec
    return {key: list(rows.values()) for key, rows in by_key.items()}


def print_tables(results: dict[tuple[str, float], list[dict]], kind: str, preset: str) -> None:
    """The table of one simulator's rows, then their intervals and paired comparisons."""
    campaigns = max(len(recs) for recs in results.values())
    print(f"kind={kind} preset={preset} campaigns={campaigns}")
    width = max([6] + [len(m) for m, _ in results])
    print(
        f"{'method':{width}s}  fraction    n  campaigns_with_flag  (model alone)  (data alone)  coverage_95  "
        "mean_abs_z  mean_sd  seconds"
    )
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        flag = np.mean([r["any_adjusted"] for r in recs])
        flag_model = np.mean([r.get("any_model_adjusted", np.nan) for r in recs])
        flag_data = np.mean([r.get("any_data_adjusted", np.nan) for r in recs])
        cov = (
            sum(r["covered"] for r in recs) / sum(r["num"] for r in recs)
            if "covered" in recs[0]
            else float("nan")
        )
        absz = np.mean([r.get("abs_z", np.nan) for r in recs])
        msd = np.mean([r.get("mean_sd", np.nan) for r in recs])
        # a row whose fit was paused has no meaningful time (null)
        secs = np.nanmean([np.nan if r["seconds"] is None else r["seconds"] for r in recs])
        print(
            f"{method:{width}s}  {fraction:8.2f}  {len(recs):3d}  {flag:19.3f}  {flag_model:13.3f}  {flag_data:12.3f}  "
            f"{cov:11.3f}  {absz:10.2f}  {msd:7.4f}  {secs:7.1f}"
        )
    for line in (
        interval_lines(results)
        + shrinkage_lines(results)
        + size_lines(results)
        + ppc_lines(results)
    ):
        print(line)
    for line in paired_lines(results):
        print(line)


def row_label(rec: dict) -> str:
    """The method of a stored row, with what sets its model apart (a lapse, an alternative's
    variant), so --summarize never pools or pairs rows of different models."""
    label = rec["method"]
    if rec.get("lapse"):
        label += "+lapse"
    # NUTS rows say their sampler since the lapse became the default; before that, the lapse
    # rows were measured with the diagonal sampler and the rest with the whitened one
    sampler = rec.get("sampler")
    if (
        rec["method"] == "nuts"
        and sampler
        and sampler != ("diagonal" if rec.get("lapse") else "whitened")
    ):
        label += f"[{sampler}]"
    if rec.get("variant"):
        label += f"[{rec['variant']}]"
    if rec.get("robust"):
        label += "[robust]"  # the default since the cluster-robust intervals
    elif rec.get("cell_effect") is False and rec.get("preset", "default") == "default":
        label += "[no-cells]"  # --no-cell-effect (rows before it was recorded had the effect)
    if rec.get("theta_scale", 1.0) != 1.0:  # rows before it was recorded had the prior N(0, 1)
        label += f"[theta~N(0,{rec['theta_scale']:g})]"
    if rec.get("refine_always"):
        label += "[refined]"
    return label


def campaign_interval(data: tuple, statistic, level: float = 0.9) -> tuple[float, float]:
    """scipy's percentile bootstrap over campaigns (paired arrays, one entry per campaign);
    nan with fewer than 3 campaigns."""
    from scipy.stats import bootstrap

    if len(data[0]) < 3:
        return float("nan"), float("nan")
    ci = bootstrap(
        data,
        statistic,
        paired=True,
        vectorized=True,
        confidence_level=level,
        method="percentile",
        n_resamples=4000,
        random_state=np.random.default_rng(0),
    ).confidence_interval
    return float(ci.low), float(ci.high)


def coverage(recs: list[dict], level: float = 0.9) -> tuple[float, float, float]:
    """Pooled coverage of Δ's 95% intervals over campaigns, with its campaign-bootstrap
    interval."""
    covered = np.array([r["covered"] for r in recs], dtype=float)
    num = np.array([r["num"] for r in recs], dtype=float)
    low, high = campaign_interval(
        (covered, num), lambda c, n, axis: c.sum(axis=axis) / n.sum(axis=axis), level
    )
    return covered.sum() / num.sum(), low, high


def plot_coverage(results: dict, path: str) -> str:
    """One panel per simulator: each row label's coverage against the share of the data kept,
    with 90% campaign-bootstrap bars and the 93-97% goal shaded; the count of campaigns is
    written at each point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_kind: dict[str, dict[str, list[tuple[float, list[dict]]]]] = {}

    def panel(rec: dict) -> str:
        preset = rec.get("preset", "default")
        return rec["kind"] if preset == "default" else f"{rec['kind']}, {preset} preset"

    for (label, fraction), recs in results.items():
        for kind in sorted({panel(r) for r in recs if "covered" in r}):
            these = [r for r in recs if panel(r) == kind and "covered" in r]
            by_kind.setdefault(kind, {}).setdefault(label, []).append((fraction, these))
    if not by_kind:
        raise SystemExit("--plot: no rows with coverage (non-null campaigns) to draw")
    fig, axes = plt.subplots(
        1, len(by_kind), figsize=(5.2 * len(by_kind), 3.8), sharey=True, squeeze=False
    )
    shares = sorted({f for _, f in results})
    for ax, (kind, labels) in zip(axes[0], sorted(by_kind.items())):
        ax.axhspan(0.93, 0.97, color="#d9f0d3", label="goal 93-97%")
        ax.axhline(0.95, color="#7fbf7b", lw=0.8)
        for i, (label, points) in enumerate(sorted(labels.items())):
            points.sort()
            offset = (i - (len(labels) - 1) / 2) * 0.12
            xs = [shares.index(f) + offset for f, _ in points]
            stats = [coverage(recs) for _, recs in points]
            mid = np.array([c for c, _, _ in stats])
            err = np.array([[c - lo, hi - c] for c, lo, hi in stats]).T
            err = np.where(np.isfinite(err), err, 0.0)
            ax.errorbar(xs, mid, yerr=err, fmt="o-", capsize=3, lw=1.2, label=label)
            for x, y, (_, recs) in zip(xs, mid, points):
                ax.annotate(str(len(recs)), (x, y), xytext=(3, 3), textcoords="offset points",
                            fontsize=7)  # fmt: skip
        ax.set_xticks(range(len(shares)), [f"{f:.0%}" for f in shares])
        ax.set_xlabel("share of the campaign's judgments")
        ax.set_title(f"{kind} simulator")
        ax.set_ylim(0.85, 1.0)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("coverage of Δ's 95% intervals")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.suptitle("Calibration on simulated campaigns (numbers: campaigns; bars: 90% bootstrap)",
                 fontsize=9)  # fmt: skip
    fig.savefig(path, bbox_inches="tight", dpi=110)
    plt.close(fig)
    return path


def interval_lines(results: dict, level: float = 0.9) -> list[str]:
    """Campaign-bootstrap intervals of each row's coverage, and of the sparse exaggeration.

    Comparisons of one campaign share its prompts, so their errors are not independent
    (a campaign can miss together): the unit of resampling is the campaign. The sparse
    exaggeration is mean abs z at the smallest fraction over mean abs z at 100%, on the
    campaigns measured at both (paired by seed).
    """

    def interval(data: tuple, statistic) -> tuple[float, float]:
        return campaign_interval(data, statistic, level)

    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "covered" in r]
        if not recs:
            continue
        cov, low, high = coverage(recs, level)
        lines.append(
            f"{method} {fraction:.2f}: coverage {cov:.3f}, "
            f"{level:.0%} campaign-bootstrap interval {low:.3f}-{high:.3f} ({len(recs)} campaigns)"
        )
    for method in sorted({m for m, _ in results}):
        full = {r["seed"]: r["abs_z"] for r in results.get((method, 1.0), []) if "abs_z" in r}
        sparse_fractions = sorted(f for m, f in results if m == method and f < 1.0)
        if not full or not sparse_fractions:
            continue
        smallest = sparse_fractions[0]
        sparse = {r["seed"]: r["abs_z"] for r in results[(method, smallest)] if "abs_z" in r}
        seeds = sorted(set(full) & set(sparse))
        if not seeds:
            continue
        a = np.array([sparse[s] for s in seeds])
        b = np.array([full[s] for s in seeds])
        low, high = interval((a, b), lambda x, y, axis: x.mean(axis=axis) / y.mean(axis=axis))
        lines.append(
            f"{method} sparse exaggeration (mean abs z at {smallest:.2f} / at 1.00, {len(seeds)} "
            f"campaigns at both): {a.mean():.2f} / {b.mean():.2f} = {a.mean() / b.mean():.2f}, "
            f"{level:.0%} campaign-bootstrap interval {low:.2f}-{high:.2f}"
        )
    return lines


def paired_lines(results: dict) -> list[str]:
    """Two models or methods on the same campaigns, comparison by comparison.

    For every two row labels at one fraction (``fast`` and ``nuts``, ``fast`` and
    ``fast+lapse``, ...), on the campaigns both measured (the same kind and seed): the ratio
    of their sds of Δ (first / second, in label order), each one's coverage there, and how
    far apart the estimates are in the second's sds. Null campaigns (rows without sds): how
    often the two verdicts agree, campaign by campaign, and each one's share flagged there, so
    a model measured on fewer null campaigns is read against one measured on more.
    """
    lines = []
    for fraction in sorted({f for _, f in results}, reverse=True):
        labels = sorted(m for m, f in results if f == fraction)
        for i, first in enumerate(labels):
            for second in labels[i + 1 :]:
                lines += _paired_null_line(results, first, second, fraction)
                a, b = (
                    {(r["kind"], r["seed"]): r for r in results[(m, fraction)] if "sd" in r}
                    for m in (first, second)
                )
                both = sorted(set(a) & set(b))
                if not both:
                    continue
                ratio = np.concatenate([np.array(a[k]["sd"]) / np.array(b[k]["sd"]) for k in both])
                line = (
                    f"{first}/{second} sd of Δ at {fraction:.2f} ({len(both)} campaigns, "
                    f"{len(ratio)} comparisons): mean {ratio.mean():.3f}, "
                    f"median {np.median(ratio):.3f}, "
                    f"5-95% {np.quantile(ratio, 0.05):.2f}-{np.quantile(ratio, 0.95):.2f}"
                )
                if all("covered" in a[k] and "covered" in b[k] for k in both):
                    num = sum(b[k]["num"] for k in both)
                    line += (
                        f"; coverage {sum(a[k]['covered'] for k in both) / num:.3f} / "
                        f"{sum(b[k]['covered'] for k in both) / num:.3f}"
                    )
                if all("est" in a[k] and "est" in b[k] for k in both):
                    shift = np.concatenate(
                        [
                            (np.array(a[k]["est"]) - np.array(b[k]["est"])) / np.array(b[k]["sd"])
                            for k in both
                        ]
                    )
                    line += (
                        f"; mean abs ({first} - {second} estimate) / {second} sd "
                        f"{np.abs(shift).mean():.2f}"
                    )
                lines.append(line)
    return lines


def _paired_null_line(results: dict, first: str, second: str, fraction: float) -> list[str]:
    """The verdicts of two row labels on the null campaigns both measured (rows without sds)."""
    a, b = (
        {(r["kind"], r["seed"]): r for r in results[(m, fraction)] if "sd" not in r}
        for m in (first, second)
    )
    both = sorted(set(a) & set(b))
    if not both:
        return []
    flags = np.array([[a[k]["any_adjusted"], b[k]["any_adjusted"]] for k in both], dtype=bool)
    return [
        f"{first}/{second} null verdicts at {fraction:.2f} ({len(both)} campaigns): the same in "
        f"{int((flags[:, 0] == flags[:, 1]).sum())}; campaigns flagged {int(flags[:, 0].sum())} / "
        f"{int(flags[:, 1].sum())}"
    ]


def shrinkage_lines(results: dict) -> list[str]:
    """Per row: the least-squares slope of the true Δ on its estimate, and the sd of z.

    A calibrated posterior mean is the expected truth given the data, so the slope is 1
    (the regression of the estimate on the truth is below 1 whenever the data are sparse:
    that is shrinkage, as it should be). Below 1 the estimates are too far from 0 (the
    posterior shrinks too little); above 1, too close. sd of z above 1 with a slope of 1:
    the sds are too small. Pooled over the row's comparisons.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "est" in r]
        if not recs:
            continue
        est = np.concatenate([r["est"] for r in recs])
        truth = np.concatenate([r["truth"] for r in recs])
        sd = np.concatenate([r["sd"] for r in recs])
        ok = np.isfinite(est) & np.isfinite(truth) & (sd > 0)
        est, truth, sd = est[ok], truth[ok], sd[ok]
        if est.size < 3 or np.ptp(est) == 0:
            continue
        centred = est - est.mean()
        slope = float(centred @ (truth - truth.mean()) / (centred @ centred))
        lines.append(
            f"{method} {fraction:.2f}: slope of true Δ on estimate {slope:.3f}, "
            f"sd of z {float(np.std((est - truth) / sd)):.3f} ({est.size} comparisons)"
        )
    return lines


#: edges of the bins of |true Δ| in :func:`size_lines`
SIZE_EDGES = (0.0, 0.2, 0.4, 0.6, 1.0)


def size_lines(results: dict) -> list[str]:
    """Per row: coverage and the mean signed z by the size of the true Δ.

    The signed z is (estimate - truth) / sd times the truth's sign: positive where the
    estimate is further from 0 than the truth (exaggerated), negative where it is closer
    (shrunk). A prior shrinks the largest effects most, so pooled coverage can hide a miss
    concentrated on strong comparisons, the ones a user acts on first.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "est" in r]
        if not recs:
            continue
        est, truth, sd = (np.concatenate([r[k] for r in recs]) for k in ("est", "truth", "sd"))
        ok = np.isfinite(est) & np.isfinite(truth) & (sd > 0)
        z = (est[ok] - truth[ok]) / sd[ok] * np.sign(truth[ok])
        size = np.abs(truth[ok])
        parts = []
        for low, high in zip(SIZE_EDGES[:-1], SIZE_EDGES[1:]):
            inside = (size >= low) & ((size < high) | (high == SIZE_EDGES[-1]))
            if inside.any():
                parts.append(
                    f"{low:.1f}-{high:.1f}: {int(inside.sum())}, coverage "
                    f"{float(np.mean(np.abs(z[inside]) <= 1.96)):.2f}, signed z "
                    f"{float(z[inside].mean()):+.2f}"
                )
        lines.append(f"{method} {fraction:.2f} by |true Δ|: " + "; ".join(parts))
    return lines


def ppc_lines(results: dict) -> list[str]:
    """Per row whose fits stored it: how often the posterior predictive check (the model's
    implied Δ against each comparison's own judgments, ``ppc_flag``) flags a comparison, and
    how many of the intervals that miss the true Δ it flags.

    On a simulator the model fits, the flags are false alarms; on one it does not, the share
    of misses flagged is the check's power to warn of them.
    """
    lines = []
    for (method, fraction), recs in sorted(results.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        recs = [r for r in recs if "ppc_flag" in r]
        if not recs:
            continue
        flag = np.concatenate([r["ppc_flag"] for r in recs]).astype(bool)
        missed = ~np.concatenate([r["inside"] for r in recs]).astype(bool)
        lines.append(
            f"{method} {fraction:.2f} posterior predictive check ({len(recs)} campaigns): flags "
            f"{int(flag.sum())} of {flag.size} comparisons ({float(flag.mean()):.3f}); of the "
            f"{int(missed.sum())} intervals that miss the true Δ it flags {int((flag & missed).sum())}"
        )
    return lines


#: the goals the suite is held to (docs/statistics.md, "Calibration on simulated campaigns")
NULL_GOAL = 0.05
COVERAGE_GOAL = (0.93, 0.97)
SPARSE_GOAL = 1.10


def goal_lines(results: dict[tuple[str, float], list[dict]]) -> list[str]:
    """The table of the goals, one row per simulator and share (and row label, where rows
    of more than one model are given).

    Null campaigns: the share with any adjusted-significant comparison, goal at most 5%;
    the others: coverage of Δ's 95% intervals with its 90% campaign-bootstrap interval,
    goal 93-97%, and the sparse exaggeration (mean abs z at the smallest share over at
    100%, on the campaigns measured at both), goal at most 1.10.
    """
    by_kind: dict[tuple[str, str], dict[float, list[dict]]] = {}
    for (label, fraction), recs in results.items():
        for rec in recs:
            by_kind.setdefault((rec["kind"], label), {}).setdefault(fraction, []).append(rec)
    labels = {label for _, label in by_kind}
    lines = [
        "| simulator | share | campaigns | measured | goal | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (kind, label), shares in sorted(by_kind.items()):
        name = kind if len(labels) == 1 else f"{kind} ({label})"
        for fraction, recs in sorted(shares.items(), reverse=True):
            if all("covered" not in r for r in recs):
                flagged = sum(bool(r["any_adjusted"]) for r in recs)
                rate = flagged / len(recs)
                lines.append(
                    f"| {name} | {fraction:.0%} | {len(recs)} | {flagged} of {len(recs)} "
                    f"flagged ({rate:.1%}) | <= {NULL_GOAL:.0%} | "
                    f"{'yes' if rate <= NULL_GOAL else 'no'} |"
                )
                continue
            recs = [r for r in recs if "covered" in r]
            cov, low, high = coverage(recs)
            met = COVERAGE_GOAL[0] <= cov <= COVERAGE_GOAL[1]
            lines.append(
                f"| {name} | {fraction:.0%} | {len(recs)} | coverage {cov:.3f} "
                f"({low:.3f}-{high:.3f}) | {COVERAGE_GOAL[0]:.2f}-{COVERAGE_GOAL[1]:.2f} | "
                f"{'yes' if met else 'no'} |"
            )
        full = {r["seed"]: r["abs_z"] for r in shares.get(1.0, []) if "abs_z" in r}
        sparse = sorted(f for f in shares if f < 1.0)
        if full and sparse:
            smallest = {r["seed"]: r["abs_z"] for r in shares[sparse[0]] if "abs_z" in r}
            seeds = sorted(set(full) & set(smallest))
            if seeds:
                a = np.mean([smallest[s] for s in seeds])
                b = np.mean([full[s] for s in seeds])
                lines.append(
                    f"| {name} | sparse exaggeration, {sparse[0]:.0%} / 100% | {len(seeds)} | "
                    f"{a:.2f} / {b:.2f} = {a / b:.2f} | <= {SPARSE_GOAL:.2f} | "
                    f"{'yes' if a / b <= SPARSE_GOAL else 'no'} |"
                )
    return lines
