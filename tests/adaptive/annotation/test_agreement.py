"""Inter-annotator agreement (adaptive/annotation/agreement.py) against the reference packages, on the
bundled logs and on simulated ones, and the same rows through every door."""

from __future__ import annotations

import csv
import json
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import krippendorff
import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.annotation.agreement import (
    NoRepeatedCells,
    annotator_rows,
    dimension_rows,
    fleiss_kappa,
    nominal_agreement,
    nominal_alpha,
    poisson_binomial_tail,
)
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer, same_rows

ROOT = Path(__file__).resolve().parents[3]
LOGS = {
    name: ROOT / "data" / name / "judgments.csv"
    for name in ("ai_teacher_test", "chateval_dbdc", "chateval_ncm", "mtbench")
}
LABEL = {"first": 0, "second": 1, "tie": 2}


Cells = dict[tuple[str, str, str], dict[str, list[int]]]


def _reference_cells(path: Path) -> dict[str, Cells]:
    """Per dimension, each cell's labels by annotator in file order, read with the csv module
    (independent of the product's reader): the pair sorted, the winner turned to it."""
    out: dict[str, Cells] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            a, b, winner = row["system_a"], row["system_b"], row["winner"]
            lo, hi = sorted((a, b))
            if winner == "tie":
                label = LABEL["tie"]
            else:
                won = a if winner == "a" else b
                label = LABEL["first"] if won == lo else LABEL["second"]
            cells = out.setdefault(row.get("dimension") or "overall", {})
            by = cells.setdefault((row["item_id"], lo, hi), defaultdict(list))
            by[row["annotator_id"]].append(label)
    return out


def _by_annotator(cells: Cells) -> np.ndarray:
    """The classic reliability data: annotators x cells, each annotator's first label of a
    cell, NaN where it did not judge it."""
    coders = sorted({a for by in cells.values() for a in by})
    out = np.full((len(coders), len(cells)), np.nan)
    for j, by in enumerate(cells.values()):
        for a, labels in by.items():
            out[coders.index(a), j] = labels[0]
    return out


def _values(cells: Cells) -> list[list[int]]:
    """Every judgment of each cell judged at least twice (self repeats kept)."""
    every = [[v for labels in by.values() for v in labels] for by in cells.values()]
    return [c for c in every if len(c) >= 2]


def _reliability(cells: list[list[int]]) -> np.ndarray:
    """Coders x units with NaN where missing: the k-th judgment of a cell is 'coder' k."""
    out = np.full((max(len(c) for c in cells), len(cells)), np.nan)
    for j, labels in enumerate(cells):
        out[: len(labels), j] = labels
    return out


# ---------------------------------------------------------------- the bundled logs


@pytest.mark.parametrize("name", sorted(LOGS))
def test_alpha_of_each_bundled_log_is_the_reference_package_s(name):
    judgments = evalset.read(LOGS[name])
    reference = _reference_cells(LOGS[name])
    rows = dimension_rows(judgments)
    assert [r["dimension"] for r in rows] == list(reference)
    for row in rows:
        cells = reference[row["dimension"]]
        # annotators as the coders, one value each per cell
        want = krippendorff.alpha(
            reliability_data=_by_annotator(cells), level_of_measurement="nominal"
        )
        assert row["alpha"] == pytest.approx(want, abs=1e-9), row
        sizes = [len(by) for by in cells.values() if len(by) >= 2]
        assert row["n_cells"] == len(sizes) and row["n_judgments"] == sum(sizes)
        assert (row["per_cell_min"], row["per_cell_max"]) == (min(sizes), max(sizes))
        again = sum(len(labels) - 1 for by in cells.values() for labels in by.values())
        assert row["n_self_repeats"] == again
        observed, expected = row["observed_agreement"], row["expected_agreement"]
        assert row["alpha"] == pytest.approx((observed - expected) / (1 - expected), abs=1e-12)
        if row["per_cell_min"] == row["per_cell_max"]:
            assert row["fleiss_kappa"] is not None and row["note"] == ""
        else:
            assert row["fleiss_kappa"] is None and "no Fleiss' kappa" in row["note"]
    # every judgment a value of its cell, an annotator's repeats too
    for row in dimension_rows(judgments, self_repeats="keep"):
        cells = _values(reference[row["dimension"]])
        want = krippendorff.alpha(
            reliability_data=_reliability(cells), level_of_measurement="nominal"
        )
        assert row["alpha"] == pytest.approx(want, abs=1e-9), row
        assert row["n_judgments"] == sum(map(len, cells))


def test_the_self_repeats_of_chateval_raise_its_alpha():
    """ChatEval posted each block of prompts as 3 HITs and some workers took two of them:
    agreeing with oneself is not agreement between annotators."""
    judgments = evalset.read(LOGS["chateval_dbdc"])
    (drop,) = dimension_rows(judgments)
    (keep,) = dimension_rows(judgments, self_repeats="keep")
    assert drop["n_self_repeats"] == keep["n_self_repeats"] == 62
    assert keep["n_judgments"] == 492 and drop["n_judgments"] < 492 - 62 + 1
    assert keep["alpha"] > drop["alpha"] + 0.05


def test_fleiss_kappa_of_the_log_with_three_judgments_per_cell_is_statsmodels():
    from statsmodels.stats.inter_rater import aggregate_raters
    from statsmodels.stats.inter_rater import fleiss_kappa as reference

    (cells,) = [_values(c) for c in _reference_cells(LOGS["chateval_dbdc"]).values()]
    assert {len(c) for c in cells} == {3}
    table, _ = aggregate_raters(np.array(cells))
    judgments = evalset.read(LOGS["chateval_dbdc"])
    (row,) = dimension_rows(judgments, self_repeats="keep")
    assert row["fleiss_kappa"] == pytest.approx(reference(table, method="fleiss"), abs=1e-9)
    # with an annotator's repeats left out, some cells have 2 judgments: no kappa, and why
    (row,) = dimension_rows(judgments)
    assert row["fleiss_kappa"] is None and "2 to 3 judgments" in row["note"]
    # and on random tables of any shape, label counts per subject
    rng = np.random.default_rng(3)
    for _ in range(20):
        raters = int(rng.integers(2, 8))
        counts = rng.multinomial(raters, rng.dirichlet(np.ones(3)), size=int(rng.integers(5, 60)))
        if np.count_nonzero(counts.sum(axis=0)) > 1:
            assert fleiss_kappa(counts) == pytest.approx(reference(counts), abs=1e-12)


def test_alpha_from_counts_is_the_package_s_from_reliability_data():
    rng = np.random.default_rng(4)
    for _ in range(20):
        sizes = rng.integers(2, 7, size=int(rng.integers(3, 40)))
        cells = [list(rng.integers(0, 3, size=int(n))) for n in sizes]
        counts = np.array([np.bincount(c, minlength=3) for c in cells])
        if np.count_nonzero(counts.sum(axis=0)) > 1:
            want = krippendorff.alpha(
                reliability_data=_reliability(cells), level_of_measurement="nominal"
            )
            assert nominal_alpha(counts) == pytest.approx(want, abs=1e-12)
            observed, expected = nominal_agreement(counts)
            assert want == pytest.approx((observed - expected) / (1 - expected), abs=1e-12)


def test_the_poisson_binomial_tail_is_scipy_s():
    stats = pytest.importorskip("scipy.stats")
    if not hasattr(stats, "poisson_binom"):
        pytest.skip("scipy < 1.15 has no poisson_binom")
    rng = np.random.default_rng(5)
    probs = rng.uniform(0, 1, size=60)
    for k in (0, 1, 20, 30, 45, 60, 61):
        want = stats.poisson_binom(probs).sf(k - 1)
        assert poisson_binomial_tail(probs, k) == pytest.approx(want, abs=1e-12)


# ---------------------------------------------------------------- simulated logs


def _simulated(
    rng: np.random.Generator,
    *,
    num_prompts: int = 60,
    per_cell: int = 3,
    copy: float = 1.0,
    random_annotator: str | None = None,
    num_annotators: int = 6,
) -> pl.DataFrame:
    """Every pair of 3 systems on each prompt, judged ``per_cell`` times by distinct annotators
    who copy the cell's true label with probability ``copy`` (else answer at random), each
    shown the pair in a random order; ``random_annotator`` always answers at random."""
    systems = ("x", "y", "z")
    names = [f"w{i}" for i in range(num_annotators)]
    if random_annotator:
        names.append(random_annotator)
    rows = []
    for p in range(num_prompts):
        for i in range(3):
            for j in range(i + 1, 3):
                truth = rng.choice(["lo", "hi", "tie"], p=[0.4, 0.4, 0.2])
                for who in rng.choice(names, size=per_cell, replace=False):
                    said = truth if rng.random() < copy else rng.choice(["lo", "hi", "tie"])
                    if who == random_annotator:
                        said = rng.choice(["lo", "hi", "tie"])
                    a, b = (systems[i], systems[j])
                    if rng.random() < 0.5:
                        a, b = b, a
                    lo = min(a, b)
                    winner = (
                        "tie" if said == "tie" else ("a" if (said == "lo") == (a == lo) else "b")
                    )
                    rows.append((f"p{p}", a, b, str(who), winner))
    return evalset.read(
        pl.DataFrame(
            rows, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
        )
    )


def test_annotators_who_copy_a_truth_agree_and_random_ones_do_not():
    rng = np.random.default_rng(0)
    (copying,) = dimension_rows(_simulated(rng, copy=1.0))
    assert copying["alpha"] == pytest.approx(1.0) and copying["fleiss_kappa"] == pytest.approx(1.0)
    (noisy,) = dimension_rows(_simulated(rng, copy=0.9))
    assert 0.75 < noisy["alpha"] < 1.0
    (random,) = dimension_rows(_simulated(rng, copy=0.0))
    # the null's sampling range: alpha of the same design (180 cells x 3) answered at random
    null = np.array(
        [nominal_alpha(rng.multinomial(3, [1 / 3] * 3, size=random["n_cells"])) for _ in range(400)]
    )
    assert abs(null.mean()) < 0.01  # centred on 0
    low, high = np.quantile(null, [0.005, 0.995])
    assert low < random["alpha"] < high
    assert high < 0.15 and noisy["alpha"] > 0.75


def test_a_pair_shown_in_the_other_order_is_no_disagreement():
    rows = []
    for p, winner in enumerate(["a", "b", "tie", "a", "b", "a"]):
        mirror = {"a": "b", "b": "a", "tie": "tie"}[winner]
        rows.append((f"p{p}", "x", "y", "u", winner))
        rows.append((f"p{p}", "y", "x", "v", mirror))
    frame = pl.DataFrame(
        rows, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
    )
    # the raw winners differ in every decided cell; oriented, they are the same answer
    assert (frame["winner"][0::2] != frame["winner"][1::2]).sum() == 5
    (row,) = dimension_rows(evalset.read(frame))
    assert row["observed_agreement"] == 1.0 and row["alpha"] == pytest.approx(1.0)
    for r in annotator_rows(evalset.read(frame)):
        assert r["agree_majority"] == 1.0 and r["n_compared"] == 6


def test_the_annotator_report_flags_a_random_annotator():
    rng = np.random.default_rng(1)
    frame = _simulated(rng, num_prompts=80, copy=0.85, random_annotator="coin", num_annotators=5)
    rows = {r["annotator_id"]: r for r in annotator_rows(frame)}
    coin = rows.pop("coin")
    assert coin["flagged"] and coin["n_compared"] >= 60
    assert "not above chance" in coin["note"]
    assert abs(coin["kappa_majority"]) < 0.2
    assert not any(r["flagged"] for r in rows.values())
    assert all(r["kappa_majority"] > 0.5 and r["p_value"] < 1e-6 for r in rows.values())
    # the lowest agreement comes first
    assert annotator_rows(frame)[0]["annotator_id"] == "coin"


def test_no_repeated_cell_is_a_clear_error_and_a_dimension_without_one_says_so(capsys, tmp_path):
    once = pl.DataFrame(
        {
            "item_id": ["p1", "p2", "p1"],
            "system_a": ["x", "x", "x"],
            "system_b": ["y", "y", "z"],
            "annotator_id": ["u", "v", "u"],
            "winner": ["a", "b", "tie"],
        }
    )
    with pytest.raises(NoRepeatedCells, match="no cell was judged more than once by different"):
        evalset.agreement(once)
    with pytest.raises(NoRepeatedCells):
        evalset.agreement(once, report="annotators")
    path = tmp_path / "once.csv"
    once.write_csv(path)
    assert main(["agreement", "--data", str(path)]) == 2
    assert "evalset agreement: error: no cell was judged more than once" in capsys.readouterr().err
    # an annotator who judged its own cell again is no second annotator
    again = pl.concat([once, once.head(1)])
    with pytest.raises(NoRepeatedCells, match=r"\(1 by an annotator judging its own cell again\)"):
        evalset.agreement(again)
    assert evalset.agreement(again, self_repeats="keep")["n_cells"].to_list() == [1]
    # one dimension with a repeated cell, one without: the second row says why it is empty
    twice = pl.concat(
        [
            once.with_columns(pl.lit("style").alias("dimension")),
            pl.DataFrame(
                {
                    "item_id": ["p1", "p1"],
                    "system_a": ["x", "y"],
                    "system_b": ["y", "x"],
                    "annotator_id": ["u", "v"],
                    "winner": ["a", "a"],
                    "dimension": ["overall", "overall"],
                }
            ),
        ]
    )
    rows = {r["dimension"]: r for r in evalset.agreement(twice).to_dicts()}
    assert rows["style"]["alpha"] is None and rows["style"]["n_cells"] == 0
    assert "no cell of 'style' was judged by two annotators" in rows["style"]["note"]
    # one cell whose two judgments disagree: observed 0, alpha defined (two labels)
    assert rows["overall"]["observed_agreement"] == 0.0 and rows["overall"]["alpha"] is not None


# ---------------------------------------------------------------- every door


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[httpx.Client, str, dict]]:
    """A server with an empty project (started outside any test's output capture: its
    logging keeps the streams it started with)."""
    db = tmp_path_factory.mktemp("agreement") / "agreement.db"
    with ThreadServer(Settings(database_url=f"sqlite:///{db}", streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=60) as api:
            project_id = f"p-{uuid.uuid4().hex[:8]}"
            token = api.post("/projects", json={"project_id": project_id}).json()["token"]
            yield api, project_id, {"Authorization": f"Bearer {token}"}


def test_the_command_line_python_and_the_service_give_the_same_rows(served, capsys):
    api, project_id, headers = served
    data = LOGS["chateval_dbdc"]
    frame = pl.read_csv(data)
    url = f"/projects/{project_id}/agreement"
    r = api.get(url, headers=headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_repeated_cells"
    systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
    body = {"systems": [{"system_id": s} for s in systems]}
    r = api.post(f"/projects/{project_id}/systems", json=body, headers=headers)
    assert r.is_success, r.text
    prompts = frame["item_id"].unique(maintain_order=True).to_list()
    body = {"prompts": [{"prompt_id": p} for p in prompts]}
    r = api.post(f"/projects/{project_id}/prompts", json=body, headers=headers)
    assert r.is_success, r.text
    rows = [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]
    r = api.post(f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 200, r.text
    for report in ("dimensions", "annotators"):
        argv = ["agreement", "--data", str(data), "--report", report, "--format", "json"]
        assert main(argv) == 0
        cli = json.loads(capsys.readouterr().out)
        python = evalset.agreement(data, report=report).to_dicts()
        same_rows(python, cli)
        r = api.get(url, params={"report": report}, headers=headers)
        assert r.status_code == 200, r.text
        assert r.json()["num_judgments"] == frame.height
        same_rows(r.json()["rows"], cli)
    r = api.get(url, params={"dimension": "nope"}, headers=headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    spec = api.get("/openapi.json").json()["paths"]["/projects/{project_id}/agreement"]
    assert {"404", "409"} <= set(spec["get"]["responses"])
