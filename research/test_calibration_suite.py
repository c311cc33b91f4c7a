"""The calibration suite's own checks: its tables of stored rows and its command line.

Run with ``python -m pytest research`` (tests/test_research.py runs it in its own process).
The product's calibration (the simulators' truth, the default model's Δ and its coverage on
fewer campaigns than the suite) is tested in tests/adaptive/estimation/test_calibration.py.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import polars as pl
import pytest
from scipy import stats


def test_campaign_bootstrap_intervals_of_coverage_and_sparse_exaggeration():
    from calibration_summary import interval_lines

    rng = np.random.default_rng(1)
    full = [{"seed": s, "covered": 19, "num": 20, "abs_z": 0.8} for s in range(12)]
    sparse = [
        {"seed": s, "covered": int(c), "num": 20, "abs_z": float(z)}
        for s, c, z in zip(range(12), rng.integers(15, 21, 12), rng.uniform(0.6, 1.4, 12))
    ]
    lines = interval_lines({("fast", 1.0): full, ("fast", 0.05): sparse})
    assert lines[0].startswith("fast 1.00: coverage 0.950") and "0.950-0.950" in lines[0]
    cov = sum(r["covered"] for r in sparse) / 240
    low, high = (float(x) for x in lines[1].split("interval ")[1].split(" ")[0].split("-"))
    assert low < cov < high and high - low > 0.01
    ratio = np.mean([r["abs_z"] for r in sparse]) / 0.8
    assert f"= {ratio:.2f}" in lines[2]
    low, high = (float(x) for x in lines[2].rsplit("interval ", 1)[1].split("-"))
    assert low < ratio < high
    # campaigns measured at one fraction only do not enter the ratio
    lines = interval_lines({("fast", 1.0): full[:5], ("fast", 0.05): sparse})
    assert "5 campaigns at both" in lines[-1]


def test_shrinkage_slope_reads_exaggerated_and_overshrunk_estimates():
    from calibration_summary import shrinkage_lines

    rng = np.random.default_rng(2)
    truth = rng.normal(0.0, 0.2, (30, 20))
    noise = rng.normal(0.0, 0.1, (30, 20))
    # a calibrated posterior: truth ~ N(0, 0.2^2), data truth + noise, posterior mean and sd
    shrink = 0.2**2 / (0.2**2 + 0.1**2)
    post_sd = np.sqrt(shrink) * 0.1

    def rows(est):
        return [
            {"est": e.tolist(), "truth": t.tolist(), "sd": [post_sd] * 20}
            for e, t in zip(est, truth)
        ]

    def slope(line):
        return float(line.split("estimate ")[1].split(",")[0])

    good = shrink * (truth + noise)
    (line,) = shrinkage_lines({("fast", 0.05): rows(good)})
    assert abs(slope(line) - 1.0) < 0.08 and "600 comparisons" in line
    assert abs(float(line.split("sd of z ")[1].split(" ")[0]) - 1.0) < 0.1
    (line,) = shrinkage_lines({("fast", 0.05): rows(truth + noise)})  # not shrunk
    assert slope(line) < 0.9
    (line,) = shrinkage_lines({("fast", 0.05): rows(0.5 * good)})  # shrunk twice over
    assert slope(line) > 1.5


def test_summarize_keeps_rows_of_different_models_apart(tmp_path, capsys):
    """Rows of a lapse fit or of an alternative variant are never pooled with the shipped
    model's rows of the same method and fraction, and are compared with them under their own
    labels, on the campaigns both measured (kind and seed)."""
    from calibration import main
    from calibration_summary import row_label

    assert row_label({"method": "fast"}) == "fast"
    assert row_label({"method": "fast", "lapse": True}) == "fast+lapse"
    assert row_label({"method": "nuts", "variant": "x"}) == "nuts[x]"
    # a NUTS row's sampler is in its label where it is not the one such rows had before
    # rows carried it (lapse: diagonal, else whitened)
    assert row_label({"method": "nuts", "lapse": True, "sampler": "diagonal"}) == "nuts+lapse"
    assert row_label({"method": "nuts", "lapse": True}) == "nuts+lapse"
    assert row_label({"method": "nuts", "lapse": True, "sampler": "whitened"}) == (
        "nuts+lapse[whitened]"
    )
    assert row_label({"method": "nuts", "sampler": "diagonal"}) == "nuts[diagonal]"
    assert row_label({"method": "nuts", "sampler": "whitened"}) == "nuts"
    assert row_label({"method": "fast", "lapse": True, "sampler": "whitened"}) == "fast+lapse"
    # what a run writes, so that it resumes only its own rows: the default preset has the
    # lapse on its own sampler, --lapse the diagonal one of the stored rows
    from argparse import Namespace

    from calibration import run_label

    def label(method, **flags):
        args = dict(preset="default", lapse=False, no_lapse=False, sampler=None)
        args |= dict(thresholds=None, no_cell_effect=False, gaussian_items=False)
        args |= dict(theta_scale=None, refine_always=False)
        args |= dict(chains=2, warmup=10, draws=10) | flags
        return run_label(Namespace(**args), method)

    # the default: no lapse, no cell effect, robust intervals
    assert label("nuts") == "nuts[robust]" and label("fast") == "fast[robust]"
    assert label("nuts", no_lapse=True) == "nuts[robust]"
    assert label("fast", no_cell_effect=True) == "fast[robust]"
    # the model-based treatment of dependent judgments is another model, and says so
    assert label("nuts", lapse=True) == "nuts+lapse"
    assert label("fast", lapse=True, cell_effect=True) == "fast+lapse"
    assert label("fast", cell_effect=True) == "fast"
    assert label("nuts", preset="paper") == "nuts"
    # another prior of theta or the refinement at every size is another model
    assert label("fast", theta_scale=3.0) == "fast[robust][theta~N(0,3)]"
    assert label("fast", theta_scale=3.0, refine_always=True) == (
        "fast[no-cells][theta~N(0,3)][refined]"
    )
    assert label("fast", theta_scale=1.0) == "fast[robust]"  # the default's prior, no suffix
    assert row_label({"method": "fast", "cell_effect": False, "preset": "paper"}) == "fast"

    def rec(method, covered, **extra):
        return {
            "kind": "varied",
            "preset": "default",
            "seed": 0,
            "fraction": 0.05,
            "method": method,
            "seconds": 1.0,
            "any_adjusted": False,
            "covered": covered,
            "num": 20,
            "abs_z": 0.8,
            "mean_sd": 0.1,
            "sd": [0.1] * 20,
            **extra,
        }

    path = tmp_path / "rows.jsonl"
    rows = [rec("fast", 20), rec("fast", 10, lapse=True), rec("nuts", 19, variant="x")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sys.argv = ["calibration.py", "--summarize", str(path)]
    assert main() == 0
    out = capsys.readouterr().out
    assert "fast 0.05: coverage 1.000" in out and "fast+lapse 0.05: coverage 0.500" in out
    assert "fast/nuts sd" not in out  # the only NUTS row is another model's
    assert (
        "fast/fast+lapse sd of Δ at 0.05 (1 campaigns, 20 comparisons): mean 1.000" in out
        and "coverage 1.000 / 0.500" in out
    )


def test_paired_lines_compare_two_models_on_the_campaigns_both_measured():
    from calibration_summary import paired_lines

    def rec(kind, seed, sd, est, covered):
        return {
            "kind": kind,
            "seed": seed,
            "sd": [sd] * 4,
            "est": [est] * 4,
            "covered": covered,
            "num": 4,
        }

    results = {
        ("fast", 0.3): [rec("varied", 0, 0.1, 0.2, 4), rec("varied", 1, 0.1, 0.2, 2)],
        # seed 1 of another kind and seed 2 are not the same campaigns as fast's
        ("fast+lapse", 0.3): [
            rec("varied", 0, 0.2, 0.0, 3),
            rec("paper", 1, 0.05, 0.0, 0),
            rec("varied", 2, 1.0, 0.0, 0),
        ],
    }
    (line,) = paired_lines(results)
    assert line.startswith(
        "fast/fast+lapse sd of Δ at 0.30 (1 campaigns, 4 comparisons): mean 0.500"
    )
    assert "coverage 1.000 / 0.750" in line
    assert line.endswith("mean abs (fast - fast+lapse estimate) / fast+lapse sd 1.00")
    assert paired_lines({("fast", 0.3): results[("fast", 0.3)]}) == []


def test_paired_lines_compare_two_models_verdicts_on_null_campaigns():
    from calibration_summary import paired_lines

    def rec(seed, flagged, kind="null"):
        return {"kind": kind, "seed": seed, "any_adjusted": flagged}

    results = {
        ("nuts", 1.0): [rec(0, False), rec(1, True), rec(2, False), rec(3, True)],
        # seed 4 and the null-asym campaign were not measured by both
        ("nuts+lapse", 1.0): [rec(0, False), rec(1, False), rec(2, False), rec(4, True)]
        + [rec(3, True, kind="null-asym")],
    }
    (line,) = paired_lines(results)
    assert line == (
        "nuts/nuts+lapse null verdicts at 1.00 (3 campaigns): the same in 2; "
        "campaigns flagged 1 / 0"
    )


def test_data_half_lists_the_seeds_whose_own_judgments_reject_and_checks_stored_rows(
    tmp_path, capsys
):
    """``--data-half`` flags a seed exactly when, recomputed here from the raw rows (a t-test
    per comparison of its prompts' mean signed judgments, scipy; Holm at 0.05 by hand), some
    comparison rejects; and it reports (exit 1) a stored row whose data half disagrees."""
    from calibration import campaign, main, subsample

    # small campaigns, so that some seeds flag and others do not, at each share
    seeds, fractions = range(6), (1.0, 0.3)
    argv = ["calibration.py", "--kind", "paper", "--comparisons", "6", "--prompts", "12"]
    argv += ["--campaigns", "6", "--fractions", *map(str, fractions), "--data-half"]

    def holm_any(p):
        p = np.sort(p)
        return bool(p[0] <= 0.05 / len(p))  # Holm rejects something iff its first step does

    def p_value(x):
        if len(x) < 2:
            return 1.0
        if np.ptp(x) == 0:  # no spread: the sign test's bound (docs/statistics.md)
            return 1.0 if x[0] == 0 else min(1.0, 2.0 ** (1 - len(x)))
        return stats.ttest_1samp(x, 0.0).pvalue

    expected = {f: [] for f in fractions}
    for seed in seeds:
        full = pl.DataFrame(campaign("paper", seed, 6, 12).rows)
        for f in fractions:
            per_prompt = (
                subsample(full, f, seed)
                .with_columns(
                    signed=pl.when(pl.col("winner") == "b")
                    .then(1.0)
                    .when(pl.col("winner") == "a")
                    .then(-1.0)
                    .otherwise(0.0)
                )
                .group_by("system_a", "system_b", "item_id")
                .agg(pl.col("signed").mean())
            )
            p = [
                p_value(g["signed"].to_numpy())
                for _, g in per_prompt.group_by("system_a", "system_b")
            ]
            if holm_any(np.array(p)):
                expected[f].append(seed)
    # the test needs seeds of both kinds, and shares that differ
    assert 0 < len(expected[1.0]) < 6 and expected[0.3] != expected[1.0], expected
    sys.argv = argv
    assert main() == 0
    out = capsys.readouterr().out
    for f in fractions:
        assert f"share {f:.2f}: data half flags {len(expected[f])} of 6 campaigns, " in out
        assert f"seeds {expected[f]}" in out
    # fits of the data-flagged seeds give the verdict's exact count over all the seeds
    path = tmp_path / "rows.jsonl"

    def fit_row(seed, verdict, data=True):
        return {
            "kind": "paper",
            "preset": "default",
            "seed": seed,
            "fraction": 1.0,
            "method": "fast",
            "any_data_adjusted": data,
            "any_adjusted": verdict,
        }

    first, *rest = expected[1.0]
    path.write_text("".join(json.dumps(fit_row(s, s == first)) + "\n" for s in expected[1.0]))
    sys.argv = argv + ["--jsonl", str(path)]
    assert main() == 0
    out = capsys.readouterr().out
    assert f"fast 1.00: the verdict flags 1 of 6 campaigns (seeds [{first}];" in out
    path.write_text(json.dumps(fit_row(first, True)) + "\n")
    assert main() == 0
    assert f"no fit yet of the data-flagged seeds {rest}" in capsys.readouterr().out
    # a stored row that contradicts the data is reported
    path.write_text(json.dumps(fit_row(first, False, data=False)) + "\n")
    assert main() == 1
    assert "1 rows of" in capsys.readouterr().out
    # --seeds: just these campaigns
    sys.argv = argv[: argv.index("--campaigns")] + ["--fractions", "1", "--data-half"]
    sys.argv += ["--seeds", *map(str, expected[1.0])]
    assert main() == 0
    assert (
        f"flags {len(expected[1.0])} of {len(expected[1.0])} campaigns" in capsys.readouterr().out
    )


def test_summarize_draws_coverage_by_share_one_panel_per_simulator(tmp_path, capsys):
    from calibration import main

    def rec(kind, seed, fraction, covered, **extra):
        return {"kind": kind, "preset": "default", "seed": seed, "fraction": fraction,
                "method": "fast", "seconds": 1.0, "any_adjusted": False, "covered": covered,
                "num": 20, "abs_z": 0.8, "mean_sd": 0.1, "sd": [0.1] * 20, **extra}  # fmt: skip

    rows = [rec(k, s, f, 19) for k in ("paper", "varied") for s in range(3) for f in (1.0, 0.05)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    picture = tmp_path / "coverage.png"
    sys.argv = ["calibration.py", "--summarize", str(path), "--plot", str(picture)]
    assert main() == 0
    assert f"wrote {picture}" in capsys.readouterr().out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # null campaigns have no coverage to draw: said, not an empty picture
    null = tmp_path / "null.jsonl"
    null.write_text(json.dumps({k: v for k, v in rows[0].items() if k != "covered"}) + "\n")
    sys.argv = ["calibration.py", "--summarize", str(null), "--plot", str(tmp_path / "n.png")]
    with pytest.raises(SystemExit, match="no rows with coverage"):
        main()
    assert not (tmp_path / "n.png").exists()


def test_summarize_prints_one_table_per_simulator_and_pools_samplers_on_request(tmp_path, capsys):
    """Files of two simulators give two tables (a campaign of one is never pooled or paired
    with the other's seed of the same number); --pool-samplers pools one model's NUTS rows of
    both samplers, counting a campaign measured with both once (the whitened row)."""
    from calibration import main

    def rec(kind, seed, covered, sampler, abs_z=0.8, fraction=0.05):
        return {"kind": kind, "preset": "default", "seed": seed, "fraction": fraction,
                "method": "nuts", "lapse": True, "sampler": sampler, "seconds": 1.0,
                "any_adjusted": False, "covered": covered, "num": 20, "abs_z": abs_z,
                "mean_sd": 0.1, "sd": [0.1] * 20}  # fmt: skip

    paper, varied = tmp_path / "paper.jsonl", tmp_path / "varied.jsonl"
    paper.write_text(
        "".join(json.dumps(rec("paper", s, 20, "diagonal", abs_z=2.0)) + "\n" for s in range(3))
        + "".join(json.dumps(rec("paper", s, 20, "diagonal", 1.0, 1.0)) + "\n" for s in range(3))
    )
    rows = [rec("varied", s, 10, "diagonal") for s in range(3)]  # seeds 0-2
    rows += [rec("varied", s, 18, "whitened") for s in range(2, 5)]  # seeds 2-4
    varied.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sys.argv = ["calibration.py", "--summarize", str(paper), str(varied)]
    assert main() == 0
    out = capsys.readouterr().out
    assert "kind=paper preset=default campaigns=3" in out
    assert "kind=varied preset=default campaigns=3" in out
    assert "nuts+lapse 0.05: coverage 1.000, " in out  # paper alone
    assert "nuts+lapse 0.05: coverage 0.500, " in out  # varied alone
    assert "nuts+lapse[whitened] 0.05: coverage 0.900, " in out
    # the sparse exaggeration pairs paper's seeds with paper's only
    sparse = "nuts+lapse sparse exaggeration (mean abs z at 0.05 / at 1.00, 3 campaigns at both)"
    assert f"{sparse}: 2.00 / 1.00" in out
    sys.argv += ["--pool-samplers"]
    assert main() == 0
    out = capsys.readouterr().out
    # varied: seeds 0-1 diagonal (10 of 20), 2-4 whitened (18 of 20): 5 campaigns
    assert "nuts+lapse[samplers pooled] 0.05: coverage 0.740, " in out and "(5 campaigns)" in out
    # another preset's rows of the same simulator make a table of their own
    other = tmp_path / "paper_preset.jsonl"
    other.write_text(json.dumps({**rec("varied", 0, 0, "diagonal"), "preset": "paper"}) + "\n")
    sys.argv = ["calibration.py", "--summarize", str(varied), str(other), "--pool-samplers"]
    assert main() == 0
    out = capsys.readouterr().out
    assert "kind=varied preset=paper campaigns=1" in out
    assert "nuts+lapse[samplers pooled] 0.05: coverage 0.740, " in out
    assert "nuts+lapse[samplers pooled] 0.05: coverage 0.000, " in out
    sys.argv = ["calibration.py", "--pool-samplers"]
    with pytest.raises(SystemExit):
        main()
    assert "give it with --summarize" in capsys.readouterr().err


def test_size_lines_split_coverage_by_the_size_of_the_true_effect():
    """Coverage and signed z by |true Δ|: shrunk strong effects show a negative signed z and
    a low coverage in the top bin, hidden in a pooled coverage that looks fine."""
    from calibration_summary import size_lines

    truth = np.array([0.05, -0.1, 0.15, 0.3, -0.35, 0.7, -0.8])
    sd = np.full(7, 0.02)
    est = truth.copy()
    est[5:] -= np.sign(truth[5:]) * 0.1  # the two strong ones shrunk by 5 sds
    rows = [{"est": est.tolist(), "truth": truth.tolist(), "sd": sd.tolist()}]
    (line,) = size_lines({("fast", 1.0): rows})
    assert line.startswith("fast 1.00 by |true Δ|: 0.0-0.2: 3, coverage 1.00, signed z +0.00")
    assert "0.2-0.4: 2, coverage 1.00, signed z +0.00" in line
    assert line.endswith("0.6-1.0: 2, coverage 0.00, signed z -5.00")
    assert "0.4-0.6" not in line  # empty bins are left out


def test_size_lines_top_bin_holds_a_unanimous_comparison():
    """|true Δ| = 1 (every judgment one way) belongs to the top bin, not to none."""
    from calibration_summary import size_lines

    rows = [{"est": [0.1, 0.9], "truth": [0.1, -1.0], "sd": [0.05, 0.05]}]
    (line,) = size_lines({("fast", 1.0): rows})
    assert line.endswith("0.6-1.0: 1, coverage 0.00, signed z -38.00")


def test_coverage_fields_keep_each_comparisons_check_and_ppc_lines_count_its_hits():
    """The check's flags and the intervals' misses are stored per comparison; the summary
    counts the flags, and the flags that fall on a miss."""
    from calibration import coverage_fields
    from calibration_summary import ppc_lines

    def row(est, low, high, ppc_z):
        return dict(
            net_preference=est,
            net_sd=0.05,
            net_ci_low=low,
            net_ci_high=high,
            ppc_z=ppc_z,
            ppc_flag=abs(ppc_z) > 3.0,
        )

    rows = [row(0.1, 0.0, 0.2, 0.5), row(0.5, 0.4, 0.6, 4.0), row(0.3, 0.2, 0.4, -3.5)]
    fields = coverage_fields(rows, np.array([0.15, 0.9, 0.25]))
    assert fields["covered"] == 2
    assert fields["inside"] == [True, False, True]
    assert fields["ppc_flag"] == [False, True, True]
    assert fields["ppc_z"] == [0.5, 4.0, -3.5]
    (line,) = ppc_lines({("fast", 1.0): [fields, fields]})
    assert line == (
        "fast 1.00 posterior predictive check (2 campaigns): flags 4 of 6 comparisons (0.667); "
        "of the 2 intervals that miss the true Δ it flags 2"
    )
    without = coverage_fields(
        [{k: v for k, v in r.items() if "ppc" not in k} for r in rows], np.array([0.15, 0.9, 0.25])
    )
    assert "ppc_flag" not in without and ppc_lines({("fast", 1.0): [without]}) == []


def test_goal_lines_hold_each_simulator_and_share_to_its_goal():
    """Null rows: the share of campaigns flagged against 5%; others: coverage against 93-97%
    and the sparse exaggeration, paired by seed, against 1.10; one row per simulator and
    share, never pooled across simulators."""
    from calibration_summary import goal_lines

    def rec(kind, seed, fraction, covered=None, abs_z=0.8, flagged=False):
        row = {"kind": kind, "seed": seed, "fraction": fraction, "method": "fast",
               "robust": True, "any_adjusted": flagged}  # fmt: skip
        if covered is not None:
            row |= {"covered": covered, "num": 20, "abs_z": abs_z}
        return row

    null = [rec("null", s, 1.0, flagged=s == 0) for s in range(40)]
    paper = [rec("paper", s, 1.0, 19) for s in range(4)]
    paper += [rec("paper", s, 0.05, 17, abs_z=1.0) for s in range(4)]
    lines = goal_lines({("fast[robust]", 1.0): null + paper[:4], ("fast[robust]", 0.05): paper[4:]})
    assert lines[0] == "| simulator | share | campaigns | measured | goal | met |"
    assert "| null | 100% | 40 | 1 of 40 flagged (2.5%) | <= 5% | yes |" in lines
    (full,) = [line for line in lines if line.startswith("| paper | 100% |")]
    assert "coverage 0.950" in full and full.endswith("| 0.93-0.97 | yes |")
    (sparse,) = [line for line in lines if line.startswith("| paper | 5% |")]
    assert "coverage 0.850" in sparse and sparse.endswith("| no |")
    assert "| paper | sparse exaggeration, 5% / 100% | 4 | 1.00 / 0.80 = 1.25 | <= 1.10 | no |" in (
        lines
    )
