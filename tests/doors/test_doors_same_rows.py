"""Issue 39: significance, the next batch, pruning and item fit of the same judgments through the
command line, ``import evalset`` and the service give the same rows (decisions:
tests/doors/test_decisions_doors_http.py).

The command line and Python fit the judgments themselves and give the same rows, to 1e-9, and
so does the service's significance with ``model=default`` (the same fit on its stored
judgments, on a background thread). Its live answers read the snapshot its worker published
(the per-system live model), so from it the rows carry the same data half
(judgments, observed net preference and interval, the data's adjusted verdict) and the next
batch leaves out the same comparisons; its pruning runs the same function on the stored
judgments and gives the same rows.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer, same_rows, when_ready

ROOT = Path(__file__).resolve().parents[2]
NCM = ROOT / "data" / "chateval_ncm"
#: NCM's first prompts (11 systems, their compared pairs): every fit takes seconds
NUM_PROMPTS = 24


def _close(got: object, want: object, where: object) -> None:
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where
    else:
        assert got == want, where


def _none(value: object) -> object:
    """NaN as JSON gives it (null)."""
    return None if isinstance(value, float) and value != value else value


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The subsample as a judgments file beside NCM's prompt and response texts."""
    folder = tmp_path_factory.mktemp("ncm")
    frame = pl.read_csv(NCM / "judgments.csv")
    first = frame["item_id"].unique(maintain_order=True).head(NUM_PROMPTS)
    frame.filter(pl.col("item_id").is_in(first.to_list())).write_csv(folder / "judgments.csv")
    for name in ("items.csv", "responses.csv"):
        shutil.copy(NCM / name, folder / name)
    return folder / "judgments.csv"


@pytest.fixture(scope="module")
def served(data, tmp_path_factory) -> Iterator[tuple[ThreadServer, httpx.Client, str, dict]]:
    """The subsample in a served project, with the worker's first snapshot of it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'doors.db'}"
    frame = pl.read_csv(data)
    with ThreadServer(Settings(database_url=url, nuts=False)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as api:
            project_id = f"p-{uuid.uuid4().hex[:8]}"
            token = api.post("/projects", json={"project_id": project_id}).json()["token"]
            headers = {"Authorization": f"Bearer {token}"}
            systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
            body = {"systems": [{"system_id": s} for s in systems]}
            assert api.post(
                f"/projects/{project_id}/systems", json=body, headers=headers
            ).is_success
            # the texts the command line reads beside the file: which cells can be annotated
            texts = dict(pl.read_csv(NCM / "items.csv").select("item_id", "prompt").iter_rows())
            responses: dict[str, dict[str, str]] = {}
            for item, system, text in pl.read_csv(NCM / "responses.csv").iter_rows():
                responses.setdefault(item, {})[system] = text
            prompts = frame["item_id"].unique(maintain_order=True).to_list()
            body = {
                "prompts": [
                    {"prompt_id": p, "text": texts[p], "responses": responses.get(p, {})}
                    for p in prompts
                ]
            }
            assert api.post(
                f"/projects/{project_id}/prompts", json=body, headers=headers
            ).is_success
            rows = [{"judgment_id": f"j{i}", **r} for i, r in enumerate(frame.to_dicts())]
            r = api.post(
                f"/projects/{project_id}/judgments", json={"judgments": rows}, headers=headers
            )
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 180
            while True:
                snaps = api.get(f"/projects/{project_id}", headers=headers).json()["snapshots"]
                if snaps and snaps[0]["num_judgments"] == frame.height:
                    break
                assert time.monotonic() < deadline, "no snapshot of the judgments"
                time.sleep(0.1)
            yield server, api, project_id, headers


def _cli(argv: list[str], capsys) -> tuple[str, str]:
    assert main(argv) == 0
    out = capsys.readouterr()
    return out.out, out.err


@pytest.fixture
def fresh_jobs(served, monkeypatch) -> Iterator[object]:
    """The served project's background jobs, none run yet (whatever tests ran before)."""
    from services.runtime.background import BackgroundJobs

    jobs = BackgroundJobs()
    monkeypatch.setattr(served[0].state, "jobs", jobs)
    yield jobs
    jobs.shutdown()


def test_item_fit_is_the_same_through_every_door(data, served, fresh_jobs, capsys, monkeypatch):
    """``GET .../item-fit`` gives the rows of ``evalset items --fit`` and the curves of
    ``--information`` for the same judgments, and ``evalset.item_fit.fit_items`` the same
    rows. It checks the default model's fit that ``significance?model=default`` reads: one
    fit per judgments seen, counted on a fresh set of background jobs whatever ran before,
    and one check for every level."""
    from evalset.item_fit import fit_items
    from services.api.routes.item_fit import check_stored_items
    from services.runtime import background

    base = ["items", "--data", str(data), "--format", "json", "--quiet"]
    cli = json.loads(_cli([*base, "--fit"], capsys)[0])
    curves = json.loads(_cli([*base, "--information"], capsys)[0])
    _, api, project_id, headers = served
    fits: list[int] = []
    checks: list[int] = []

    def counted_fits(source):  # noqa: ANN001, ANN202
        fits.append(source.num_judgments)
        return significance_fits(source)

    def counted_check(*args):  # noqa: ANN002, ANN202
        checks.append(1)
        return check_stored_items(*args)

    significance_fits = background.significance_fits
    monkeypatch.setattr(background, "significance_fits", counted_fits)
    monkeypatch.setattr("services.api.routes.item_fit.check_stored_items", counted_check)
    url = f"/projects/{project_id}/item-fit"
    r = when_ready(lambda: api.get(url, headers=headers), "item_fit_pending")
    assert r.status_code == 200, r.text
    body = r.json()
    same_rows(body["rows"], cli)
    same_rows(body["information"], curves)
    assert {"fit_p", "misfit", "misfit_reason"} <= set(body["rows"][0])
    assert body["num_flagged"] == sum(row["misfit"] for row in cli)
    assert body["model"] == "default" and body["level"] == 0.05
    assert body["num_judgments"] == pl.read_csv(data).height
    # the fit was shared: the default model's significance answers at once
    r = api.get(
        f"/projects/{project_id}/significance", params={"model": "default"}, headers=headers
    )
    assert r.status_code == 200, r.text
    # another level reads the same check at once, and gives the command line's rows
    r = api.get(url, params={"level": 0.3}, headers=headers)
    assert r.status_code == 200, r.text
    at_level = json.loads(_cli([*base, "--fit", "--level", "0.3"], capsys)[0])
    same_rows(r.json()["rows"], at_level)
    assert r.json()["num_flagged"] >= body["num_flagged"]
    assert fits == [body["num_judgments"]] and checks == [1]
    same_rows(fit_items(data, level=0.3).to_dicts(), at_level)
    bad = api.get(url, params={"level": 1.5}, headers=headers)
    assert bad.status_code == 422
    unknown = api.get(url, params={"dimension": "nope"}, headers=headers)
    assert unknown.status_code == 404


def test_significance_is_the_same_through_every_door(data, served, capsys):
    out, _ = _cli(["significance", "--data", str(data), "--format", "json", "--quiet"], capsys)
    cli = json.loads(out)
    python = evalset.significance(data).to_dicts()
    same_rows(python, cli)
    # the model's estimate is labelled as the model's, with the reason when it disagrees
    for row in cli:
        theta, observed = row["mean"], row["observed_net"]
        assert row["model_agrees"] == (row["disagreement"] is None)
        if theta * observed < 0 or row["ppc_flag"]:
            assert not row["model_agrees"]
        if theta * observed < 0:
            assert f"the model's theta ({theta:+.3f})" in row["disagreement"]
    _, api, project_id, headers = served
    # the service fits the default model on its stored judgments when asked: the same rows,
    # column for column (computed on its background thread: 409 until then)
    url = f"/projects/{project_id}/significance"
    params = {"model": "default"}
    r = when_ready(lambda: api.get(url, params=params, headers=headers), "significance_pending")
    assert r.status_code == 200, r.text
    table = r.json()
    assert table["model"] == "default" and table["num_judgments"] == sum(
        row["n_judgments"] for row in cli
    )
    same_rows(table["rows"], cli)
    # other options read the same fit: answered at once, as Python answers them
    params = {"model": "default", "alpha": 0.1, "adjust": "bonferroni", "level": 0.9}
    r = api.get(f"/projects/{project_id}/significance", params=params, headers=headers)
    assert r.status_code == 200, r.text
    other = evalset.significance(data, alpha=0.1, adjust="bonferroni", level=0.9).to_dicts()
    same_rows(r.json()["rows"], [{k: _none(v) for k, v in row.items()} for row in other])
    bad = api.get(
        f"/projects/{project_id}/significance",
        params={"model": "default", "all_pairs": True},
        headers=headers,
    )
    assert bad.status_code == 422 and "model=snapshot" in bad.json()["error"]["message"]
    # the live answer comes from the worker's snapshot: the data's half is the same
    r = api.get(f"/projects/{project_id}/significance", headers=headers)
    assert r.status_code == 200, r.text
    http = {frozenset((row["system_a"], row["system_b"])): row for row in r.json()["rows"]}
    assert set(http) == {frozenset((row["system_a"], row["system_b"])) for row in cli}
    for row in cli:
        got = http[frozenset((row["system_a"], row["system_b"]))]
        if (got["system_a"], got["system_b"]) != (row["system_a"], row["system_b"]):
            low, high = got["observed_ci_low"], got["observed_ci_high"]
            got = {
                **got,
                "system_a": got["system_b"],
                "system_b": got["system_a"],
                "observed_net": -got["observed_net"],
                "observed_ci_low": None if high is None else -high,
                "observed_ci_high": None if low is None else -low,
            }
        for key in ("n_judgments", "n_prompts", "observed_net", "data_adjusted"):
            _close(got[key], row[key], (key, got, row))
        for key in ("observed_ci_low", "observed_ci_high"):
            if got[key] is not None:
                _close(got[key], row[key], (key, got, row))


def test_pruning_is_the_same_through_every_door(data, served, capsys):
    out, _ = _cli(["prune", "--data", str(data), "--keep", "8", "--format", "json"], capsys)
    cli = json.loads(out)
    assert {r["kept"] for r in cli} == {True, False}
    python = evalset.prune(data, keep=8).to_dicts()
    same_rows(python, cli)
    _, api, project_id, headers = served
    url = f"/projects/{project_id}/pruning"
    r = when_ready(lambda: api.get(url, params={"keep": 8}, headers=headers), "pruning_pending")
    assert r.status_code == 200, r.text
    same_rows(r.json()["rows"], cli)


def _not_served(log: str) -> set[tuple[str, str, str, int | None, int]]:
    """The comparisons a batch's notes leave out: (dimension, A, B, needed, servable prompts)."""
    out = set()
    for line in log.splitlines():
        if not line.startswith("not served: "):
            continue
        words = line.removeprefix("not served: ").split()
        need = None if words[5] == "no" else int(words[5].lstrip("~"))
        servable = int(line.split(" and has ")[1].split()[0])
        out.add((words[0], words[1], words[3], need, servable))
    return out


@pytest.mark.parametrize("unit", ["prompt", "judgment"])
def test_the_next_batch_is_the_same_through_every_door(data, served, unit, capsys):
    argv = ["recommend", "--data", str(data), "--size", "12", "--format", "json", "--seed", "3"]
    out, err = _cli([*argv, "--unit", unit], capsys)
    cli = json.loads(out)
    python = evalset.recommend(data, size=12, seed=3, unit=unit)
    python_log = capsys.readouterr().err
    same_rows(python.to_dicts(), cli)
    left_out = _not_served(err)
    assert _not_served(python_log) == left_out
    # the service's batch reads its worker's snapshot, not this fit: it leaves out the same
    # comparisons (the decisions say which cannot close) and serves open ones of the family
    _, api, project_id, headers = served
    body = {"size": 12, "unit": unit, "seed": 3, "lease_seconds": 1}
    r = api.post(f"/projects/{project_id}/next-batch", json=body, headers=headers)
    assert r.status_code == 200, r.text
    http = r.json()
    # model=default: the command line's fit of the stored judgments, so (no cell under
    # lease: the live batch's lease of 1 s has expired) the command line's batch, cell for cell
    time.sleep(1.1)
    url = f"/projects/{project_id}/next-batch"
    default = {**body, "model": "default"}
    r = when_ready(lambda: api.post(url, json=default, headers=headers), "recommendation_pending")
    assert r.status_code == 200, r.text
    columns = ("item_id", "dimension", "system_a", "system_b", "shown_first", "reason", "needed")
    same_rows(r.json()["cells"], cli, columns=columns)
    assert {
        (c["dimension"], c["system_a"], c["system_b"], c["needed"], c["servable_prompts"])
        for c in r.json()["not_served"]
    } == left_out
    assert {
        (c["dimension"], c["system_a"], c["system_b"], c["needed"], c["servable_prompts"])
        for c in http["not_served"]
    } == left_out
    undecided = evalset.decisions(data, unit=unit).filter(pl.col("decision") == "undecided")
    open_pairs = {frozenset(p) for p in undecided.select("system_a", "system_b").iter_rows()}
    for cells in (cli, http["cells"]):
        assert {frozenset((c["system_a"], c["system_b"])) for c in cells} <= open_pairs
    if unit == "prompt":  # 24 prompts close none of NCM's open comparisons
        assert len(left_out) == len(open_pairs) and cli == http["cells"] == []
    else:  # repeats count: nothing is left out, every door fills the batch
        assert left_out == set() and len(cli) == len(http["cells"]) == 12


def test_a_multiplicity_adjustment_is_adjust_and_a_test_level_is_not_alpha(served):
    """``rule`` names the decision rule and ``alpha`` the decision level; the significance
    adjustment and the annotators' test level have their own names (the former still work)."""
    _, api, project_id, headers = served
    url = f"/projects/{project_id}/significance"
    new = api.get(url, params={"adjust": "bonferroni"}, headers=headers)
    old = api.get(url, params={"rule": "bonferroni"}, headers=headers)
    assert new.status_code == old.status_code == 200
    assert new.json()["rows"] == old.json()["rows"]
    assert {r["adjust_rule"] for r in new.json()["rows"]} == {
        "bonferroni on the model and on the data"
    }
    df = evalset.example(num_systems=3, num_prompts=8, seed=1)
    with pytest.warns(DeprecationWarning, match="adjust="):
        former = evalset.significance(df, rule="none", num_draws=100)
    assert former.equals(evalset.significance(df, adjust="none", num_draws=100))
    with pytest.warns(DeprecationWarning, match="test_level="):
        former = evalset.annotators(df, alpha=0.2)
    assert former.equals(evalset.annotators(df, test_level=0.2))


def test_recommend_from_a_project_takes_the_family_the_decisions_take(data, served, capsys):
    server, api, project_id, headers = served
    pairs = "Cakechat:Human1,Cakechat:NCM"
    family = {frozenset(p.split(":")) for p in pairs.split(",")}
    token = headers["Authorization"].removeprefix("Bearer ")
    argv = ["recommend", "--size", "6", "--format", "json", "--unit", "judgment"]
    project = ["--project", project_id, "--url", server.url, "--token", token]
    out, _ = _cli([*argv, *project, "--pairs", pairs], capsys)
    tasks = json.loads(out)
    assert tasks and {frozenset((t["system_a"], t["system_b"])) for t in tasks} <= family
    # a file's batch serves its compared comparisons: it says so instead of ignoring the flag
    assert main([*argv, "--data", str(data), "--pairs", pairs]) == 2
    assert "--targets" in capsys.readouterr().err
    # a pair the service does not know is refused with its reason, as the decisions door does
    assert main([*argv, *project, "--pairs", "Cakechat:nobody"]) == 2
    assert "nobody" in capsys.readouterr().err


def test_the_elo_leaderboard_is_the_same_through_every_door(data, served, capsys):
    argv = ["elo", "--data", str(data), "--rounds", "100", "--seed", "2", "--format", "json"]
    out, _ = _cli([*argv, "--anchor", "Human1=1200"], capsys)
    cli = json.loads(out)
    python = evalset.elo(data, rounds=100, seed=2, anchor=("Human1", 1200.0)).to_dicts()
    same_rows(python, cli)
    _, api, project_id, headers = served
    # every door's default bootstrap resamples whole prompts (the decisions' unit); the
    # service's rows carry every column, the decided ranking's beside the leaderboard's
    params = {"rounds": 100, "seed": 2, "anchor_system": "Human1", "anchor_rating": 1200}
    url = f"/projects/{project_id}/elo"
    r = when_ready(lambda: api.get(url, params=params, headers=headers), "elo_pending")
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    assert [k for k in rows[0]] == [k for k in cli[0] if k != "dimension"]
    same_rows(rows, cli, columns=tuple(rows[0]))
    assert {r["decided_ranks"] for r in rows} - {None}  # the decided ranking is served
    bad = api.get(
        f"/projects/{project_id}/elo", params={**params, "anchor_system": "nobody"}, headers=headers
    )
    assert bad.status_code == 404 and "nobody" in bad.json()["error"]["message"]


def test_the_leaderboard_on_the_elo_scale_is_the_elo_leaderboard(data, served, capsys):
    """``GET .../leaderboard?scale=elo`` gives the rows of ``evalset elo`` with the same options
    (the default scale stays the snapshot's skill)."""
    argv = ["elo", "--data", str(data), "--rounds", "60", "--seed", "5", "--level", "0.9"]
    out, _ = _cli(
        [*argv, "--bootstrap", "prompt", "--anchor", "NCM=900", "--format", "json"], capsys
    )
    cli = [{k: v for k, v in row.items() if k != "dimension"} for row in json.loads(out)]
    _, api, project_id, headers = served
    url = f"/projects/{project_id}/leaderboard"
    params = {"scale": "elo", "rounds": 60, "seed": 5, "level": 0.9, "bootstrap": "prompt"}
    params |= {"anchor_system": "NCM", "anchor_rating": 900}
    r = when_ready(lambda: api.get(url, params=params, headers=headers), "elo_pending")
    assert r.status_code == 200, r.text
    board = r.json()
    assert board["num_judgments"] == pl.read_csv(data).height
    same_rows(board["rows"], cli, columns=tuple(board["rows"][0]))
    assert board["rows"][[row["system"] for row in cli].index("NCM")]["elo"] == pytest.approx(900)
    # GET .../elo with the same options answers the same
    same = {k: v for k, v in params.items() if k != "scale"}
    elo = api.get(f"/projects/{project_id}/elo", params=same, headers=headers)
    assert elo.status_code == 200 and elo.json() == board
    # the default scale: the snapshot's skill, as before; options of one scale not the other's
    skill = api.get(url, headers=headers).json()
    assert set(skill) == {"snapshot", "rows"} and "system_id" in skill["rows"][0]
    bad = api.get(url, params={"rounds": 60}, headers=headers)
    assert bad.status_code == 422 and "scale=elo" in bad.json()["error"]["message"]
    bad = api.get(url, params={"scale": "elo", "method": "laplace"}, headers=headers)
    assert bad.status_code == 422 and "scale=skill" in bad.json()["error"]["message"]
