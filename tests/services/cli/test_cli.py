"""The significance and items commands as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from services.cli.common import render_rows

ROOT = Path(__file__).resolve().parents[3]
NCM = ROOT / "data" / "chateval_ncm" / "judgments.csv"
#: fast-path draws: these tests are about the command's output, not the draw count (the
#: refinement sweeps cost time in proportion to it; the default is 4000)
DRAWS = "400"
KEYS = {
    "system_a",
    "system_b",
    "mean",
    "sd",
    "ci_low",
    "ci_high",
    "p_b_better",
    "significant",
    "n_judgments",
    "n_prompts",
    "net_preference",
    "net_ci_low",
    "net_ci_high",
    "observed_net",
    "ppc_z",
    "sign_agrees",
    "note",
}


def evalset(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def small_file(tmp_path_factory) -> Path:
    """Six comparisons of the real data, rows of one comparison written the other way round."""
    df = pl.read_csv(NCM)
    keep = df.filter(
        pl.col("system_a").is_in(["NCM", "Human1", "Human2"]) | pl.col("system_b").is_in(["Human2"])
    )
    flipped = keep.with_columns(
        pl.when(pl.col("system_a") == "Human1")
        .then(pl.col("system_b"))
        .otherwise(pl.col("system_a"))
        .alias("system_a"),
        pl.when(pl.col("system_a") == "Human1")
        .then(pl.col("system_a"))
        .otherwise(pl.col("system_b"))
        .alias("system_b"),
        pl.when(pl.col("system_a") == "Human1")
        .then(pl.col("winner").replace({"a": "b", "b": "a"}))
        .otherwise(pl.col("winner"))
        .alias("winner"),
    )
    path = tmp_path_factory.mktemp("cli") / "judgments.csv"
    flipped.write_csv(path)
    return path


def test_significance_json_keys_orientation_and_the_same_answer_from_cached_programs(
    small_file, tmp_path
):
    args = ("significance", "--data", str(small_file), "--method", "fast", "--draws", DRAWS)
    # the first run compiles and leaves its programs in the cache; the second loads them,
    # and with the same seed must answer the same, in CSV
    cache = {"EVALSET_JAX_CACHE_DIR": str(tmp_path / "jax")}
    out = evalset(*args, "--format", "json", "--seed", "3", "--quiet", env=cache)
    assert out.returncode == 0, out.stderr
    assert any((tmp_path / "jax").glob("*-cache"))
    rows = json.loads(out.stdout)
    assert rows and all(KEYS <= row.keys() for row in rows)
    first_rows = pl.read_csv(small_file).select("system_a", "system_b").unique(maintain_order=True)
    oriented = {frozenset(r): r for r in first_rows.iter_rows()}
    for row in rows:
        assert (row["system_a"], row["system_b"]) == oriented[
            frozenset((row["system_a"], row["system_b"]))
        ]
        assert row["ci_low"] <= row["mean"] <= row["ci_high"]
        assert row["significant"] == (row["ci_low"] > 0 or row["ci_high"] < 0)
        assert row["net_ci_low"] <= row["net_preference"] <= row["net_ci_high"]
    # Human2's replies beat S2SAttn_Twitter's by far (the paper: 2.76*)
    twitter = next(
        r for r in rows if {r["system_a"], r["system_b"]} == {"S2SAttn_Twitter", "Human2"}
    )
    sign = 1 if twitter["system_b"] == "Human2" else -1
    assert sign * twitter["mean"] > 1.5 and twitter["significant"]

    again = evalset(*args, "--format", "csv", "--seed", "3", "--quiet", env=cache)
    assert again.returncode == 0, again.stderr
    assert KEYS <= set(again.stdout.splitlines()[0].split(","))
    # every value, to the last digit (floats print as repr, which JSON keeps)
    assert again.stdout.rstrip("\n") == render_rows(rows, "csv").rstrip("\n")


def test_items_lists_discrimination_and_thresholds(small_file):
    # the paper's model: six thresholds of the 7-category net rating (the default has two)
    out = evalset(
        "items",
        "--data",
        str(small_file),
        "--method",
        "fast",
        "--draws",
        DRAWS,
        "--preset",
        "paper",
        "--format",
        "json",
        "--quiet",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {"item_id", "alpha_mean", "alpha_sd", "b1_mean", "b6_mean", "group"} <= rows[0].keys()
    for row in rows:
        assert [row[f"b{k}_mean"] for k in range(1, 7)] == sorted(
            row[f"b{k}_mean"] for k in range(1, 7)
        )
    alphas = [r["alpha_mean"] for r in rows]
    assert alphas == sorted(alphas, reverse=True)
    # n_comparisons counted from the raw file: distinct pairs (either order) per prompt
    raw = pl.read_csv(small_file).with_columns(
        pl.min_horizontal("system_a", "system_b").alias("lo"),
        pl.max_horizontal("system_a", "system_b").alias("hi"),
    )
    pairs = dict(raw.group_by("item_id").agg(pl.struct("lo", "hi").n_unique()).iter_rows())
    single = [r for r in rows if not r["group"]]
    assert single and all(r["n_comparisons"] == pairs[r["item_id"]] for r in single)


def test_bad_file_gives_one_line_reason_and_nonzero_exit(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,system_a,system_b,annotator_id,winner\np1,x,y,w,maybe\n")
    out = evalset("significance", "--data", str(bad), "--method", "fast")
    assert out.returncode == 2
    assert out.stdout == ""
    assert "line 2, column 'winner'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_draws_must_be_positive():
    out = evalset("significance", "--data", str(NCM), "--method", "fast", "--draws", "0")
    assert out.returncode != 0 and out.stdout == ""
    assert "--draws must be at least 1" in out.stderr


def test_a_bad_compilation_cache_bound_is_one_line_before_any_fit(tmp_path):
    env = {"EVALSET_JAX_CACHE_DIR": str(tmp_path / "jax"), "EVALSET_JAX_CACHE_MAX_MB": "lots"}
    out = evalset("significance", "--data", str(NCM), "--method", "fast", env=env)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == (
        "evalset significance: error: EVALSET_JAX_CACHE_MAX_MB: a positive whole number of MiB, "
        "not 'lots'"
    )
    assert not (tmp_path / "jax").exists()


def test_a_lapse_rate_needs_the_default_models_cell_effect():
    for extra in (["--preset", "paper"], ["--no-cell-effect"]):
        out = evalset("significance", "--data", str(NCM), "--method", "fast", "--lapse", *extra)
        assert out.returncode != 0 and out.stdout == ""
        assert "--lapse needs the default model's cell effect" in out.stderr


def test_the_default_model_is_fast_and_robust_and_random_answers_are_asked_for():
    from services.cli import build_parser
    from services.cli.analysis import fit_config

    def config(*extra: str):
        return fit_config(build_parser().parse_args(["significance", "--data", "x", *extra]))

    default = config()
    assert default.method == "fast" and default.robust
    assert not default.priors.lapse and not default.cell_effect
    assert config("--lapse").priors.lapse and config("--lapse").cell_effect
    assert not config("--lapse").robust
    assert config("--cell-effect").cell_effect and not config("--cell-effect").priors.lapse
    assert not config("--no-lapse").priors.lapse and config("--no-lapse").robust
    assert (
        not config("--no-cell-effect").priors.lapse and not config("--preset", "paper").priors.lapse
    )
    assert not config("--likelihood", "net").priors.lapse
    assert config("--method", "nuts").method == "nuts"
    out = evalset("significance", "--data", str(NCM), "--lapse", "--no-lapse")
    assert out.returncode == 2 and out.stdout == ""
    assert "not allowed with argument --lapse" in out.stderr


def test_strong_comparisons_under_the_default_prior_get_a_note():
    from services.cli.analysis import strong_note

    rows = [{"observed_net": 0.1}, {"observed_net": -0.65}, {"observed_net": 0.59}]
    note = strong_note(rows, 1.0)
    assert note is not None and note.startswith("note: 1 comparison(s)")
    assert "--theta-scale 3" in note
    assert strong_note(rows, 3.0) is None  # a wider prior: nothing to warn about
    assert strong_note(rows[:1] + rows[2:], 1.0) is None  # no strong comparison


def test_a_strong_comparison_held_below_its_judgments_by_the_lapse_gets_a_note():
    """Under the lapse, Δ is at most 1 - the rate: a flagged strong comparison is told to
    compare with --no-lapse, whatever theta's prior; an unflagged or weak one is not."""
    from services.cli.analysis import strong_note

    rows = [
        {"observed_net": 0.74, "ppc_flag": True},
        {"observed_net": -0.61, "ppc_flag": False},
        {"observed_net": 0.2, "ppc_flag": True},
    ]
    note = strong_note(rows, 3.0, lapse=True)
    assert note is not None and note.startswith("note: 1 strong comparison(s) disagree")
    assert "--no-lapse" in note and "--theta-scale" not in note
    both = strong_note(rows, 1.0, lapse=True)
    assert both is not None and both.count("note:") == 2
    assert strong_note(rows, 3.0, lapse=False) is None  # no lapse: no cap
    assert strong_note([rows[1], rows[2]], 3.0, lapse=True) is None  # no flagged strong one


def test_the_prior_sd_of_theta_is_the_presets_unless_given_and_must_be_positive():
    from services.cli import build_parser
    from services.cli.analysis import fit_config

    def config(*extra: str):
        return fit_config(build_parser().parse_args(["significance", "--data", "x", *extra]))

    assert config("--preset", "paper").priors.theta_scale == 1.0
    assert config("--theta-scale", "2.5").priors.theta_scale == 2.5
    assert config("--method", "fast").laplace.refine_below == 30.0
    assert config("--method", "fast", "--refine-always").laplace.refine_below == float("inf")
    with pytest.raises(SystemExit, match="--refine-always applies to --method fast"):
        config("--method", "nuts", "--refine-always")
    for bad in ("0", "-1", "nan"):
        with pytest.raises(SystemExit, match="theta_scale must be a positive number"):
            config("--theta-scale", bad)


@pytest.mark.slow
def test_the_default_fit_reports_its_robust_widening_and_every_comparison():
    out = evalset("significance", "--data", str(NCM), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert "cluster-robust intervals" in out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 17 and all(-1 <= r["net_preference"] <= 1 for r in rows)
    # the Δ users read is each comparison's own observed net preference
    assert all(r["net_preference"] == pytest.approx(r["observed_net"]) for r in rows)
    line = next(x for x in out.stderr.splitlines() if "cluster-robust sd up to" in x)
    assert "MAP converged" in line
    # the widest ability is widened by a real factor, never narrowed
    (factor,) = (float(v) for v in re.findall(r"up to (\d+\.\d+)x", line))
    assert 1.0 <= factor < 3.0


def test_an_ess_target_is_for_nuts_and_positive():
    out = evalset("significance", "--data", str(NCM), "--method", "fast", "--min-ess", "400")
    assert out.returncode != 0 and out.stdout == ""
    assert "--min-ess applies to --method nuts" in out.stderr
    out = evalset("significance", "--data", str(NCM), "--method", "nuts", "--min-ess", "-1")
    assert out.returncode != 0 and out.stdout == ""
    assert "--min-ess must be 0 (one block) or positive" in out.stderr


def test_loco_serially_gives_every_policy_and_k_and_a_figure(small_file, tmp_path):
    plot = tmp_path / "loco.png"
    out = evalset(
        "loco",
        "--data",
        str(small_file),
        "--workers",
        "1",
        "--num-random",
        "3",
        "--grid",
        "5,10",
        "--format",
        "json",
        "--plot",
        str(plot),
        "--quiet",
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    raw = pl.read_csv(small_file).with_columns(
        pl.min_horizontal("system_a", "system_b").alias("lo"),
        pl.max_horizontal("system_a", "system_b").alias("hi"),
    )
    per_comparison = raw.group_by("lo", "hi").agg(pl.col("item_id").n_unique().alias("prompts"))
    assert [(r["policy"], r["k"]) for r in rows] == [
        ("full", int(per_comparison["prompts"].max())),
        *[(p, k) for p in ("random", "prompt", "prompt_model") for k in (5, 10)],
    ]
    full = rows[0]["se_mean"]
    for r in rows:
        assert r["n_folds"] == per_comparison.height
        assert 0 < r["se_mean"] < 1.0 and np.isfinite(r["rmse_vs_full"])
        assert r["se_ratio"] == pytest.approx(r["se_mean"] / full, rel=1e-9)
        assert (r["draw_sd"] > 0) == (r["policy"] == "random")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nuts_defaults_to_a_short_warm_up_and_blocks_until_an_ess_target():
    from services.cli import build_parser
    from services.cli.analysis import NUTS_DRAWS, NUTS_MIN_ESS, NUTS_WARMUP, fit_config

    def config(*extra: str):
        return fit_config(build_parser().parse_args(["significance", "--data", "x", *extra]))

    nuts = config("--method", "nuts")
    assert (nuts.nuts.num_warmup, nuts.nuts.num_samples, nuts.nuts.min_ess) == (
        NUTS_WARMUP,
        NUTS_DRAWS,
        NUTS_MIN_ESS,
    )
    assert config("--method", "nuts", "--min-ess", "0").nuts.min_ess is None  # one block
    assert config("--method", "nuts", "--draws", "700").nuts.num_samples == 700
    assert config().nuts.min_ess is None  # the fast path has no ESS
    with pytest.raises(SystemExit, match="applies to --method nuts"):
        config("--min-ess", "100")
    # import evalset resolves the same NUTS run and the same fast path as the command line
    # (which alone shows a progress bar)
    from dataclasses import replace

    from evalset import _fit_config

    def python(**kwargs):
        return replace(_fit_config(**kwargs), progress=True)

    assert python(method="nuts") == nuts
    assert python(method="nuts", num_samples=700) == config("--method", "nuts", "--draws", "700")
    assert python(method="fast") == config()
