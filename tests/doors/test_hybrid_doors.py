"""Hybrid decisions (issue 41) behind the decision doors: ``evalset.decisions(judge=...)``,
``evalset decisions --judge-data`` and the service's judge verdicts and hybrid decisions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import evalset
from evalset.hybrid import HYBRID_COLUMNS, JudgeError, read_verdicts
from services.cli import main
from tests.factories import same_rows

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "data" / "mtbench"


def null_campaign(seed: int, *, num_systems: int = 21, num_prompts: int = 40, judge: str):
    """Every pair of ``num_systems`` on ``num_prompts`` prompts, one human judgment per cell in
    random order, Δ exactly 0 per comparison (half the prompts lean B, half lean A as much),
    and a judge that tries to mislead: ``against`` says the opposite of each cell's lean,
    ``always_b`` says B everywhere, ``lean`` names the lean of the first half only."""
    rng = np.random.default_rng(seed)
    humans, verdicts = [], []
    half = num_prompts // 2
    for a in range(num_systems):
        for b in range(a + 1, num_systems):
            lean = rng.permutation(np.repeat([1, -1], half))  # +1: the cell leans B
            for p in range(num_prompts):
                probs = [0.15, 0.25, 0.6] if lean[p] > 0 else [0.6, 0.25, 0.15]
                winner = rng.choice(["a", "tie", "b"], p=probs)
                cell = (f"p{p}", f"s{a:02d}", f"s{b:02d}")
                humans.append((*cell, f"w{rng.integers(9)}", winner, rng.random()))
                if judge == "against":
                    say = "a" if lean[p] > 0 else "b"
                elif judge == "always_b":
                    say = "b"
                else:
                    say = ("b" if lean[p] > 0 else "a") if p < half else "tie"
                verdicts.append((*cell, "adversary", say))
    frame = pl.DataFrame(
        humans,
        schema=["item_id", "system_a", "system_b", "annotator_id", "winner", "u"],
        orient="row",
    )
    frame = frame.sort("u").drop("u")  # arrival order: a uniform shuffle of the cells
    judge_frame = pl.DataFrame(
        verdicts, schema=["item_id", "system_a", "system_b", "annotator_id", "winner"], orient="row"
    )
    return frame, judge_frame


@pytest.mark.parametrize("judge", ["against", "always_b", "lean"])
def test_a_null_campaign_with_an_adversarial_judge_decides_within_the_level(judge):
    """Δ = 0 on every comparison: a sign decision is wrong; with ``none`` each comparison may
    err at most alpha (two sides at alpha / 2), whatever the judge, at every look."""
    alpha, rates = 0.2, []
    for seed in range(2):
        humans, verdicts = null_campaign(seed, judge=judge)
        rows = evalset.decisions(humans, judge=verdicts, alpha=alpha, correction="none")
        assert rows.height == 210 and set(rows["judge"]) == {"adversary"}
        signs = rows.filter(pl.col("decision").is_in(["B better", "A better"])).height
        rates.append(signs / rows.height)
    # 420 comparisons: the observed rate stays below alpha with room for its sampling error
    assert np.mean(rates) <= alpha + 2.0 * np.sqrt(alpha * (1 - alpha) / 420)


def _cli(argv: list[str], capsys) -> list[dict]:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_python_and_the_command_line_give_the_same_hybrid_rows(capsys):
    data, judge = MTBENCH / "judgments.csv", MTBENCH / "judge_gpt4.csv"
    py = evalset.decisions(data, judge=judge).to_dicts()
    cli = _cli(
        ["decisions", "--data", str(data), "--judge-data", str(judge), "--format", "json"], capsys
    )
    same_rows(cli, py)
    human = evalset.decisions(data).to_dicts()
    # the columns that mean the same as the human-only rows', in their order, then the judge's
    shared = [
        c
        for c in human[0]
        if c in py[0] and c not in ("alpha_each", "family", "family_size", "rule")
    ]
    assert list(py[0]) == shared + list(HYBRID_COLUMNS) + [
        "alpha_each",
        "family",
        "family_size",
        "rule",
    ]
    for h, y in zip(human, py):
        assert (h["system_a"], h["system_b"], h["n_judgments"]) == (
            y["system_a"],
            y["system_b"],
            y["n_judgments"],
        )
        # every human cell of MT-Bench has a GPT-4 verdict: the same observations are used
        assert y["n_used"] == h["n_used"] and y["judge_cells"] == 160
        assert 0.4 < y["judge_agreement"] < 0.9
    # the log's own signs: a hybrid sign never contradicts the human-only estimate's sign
    for h, y in zip(human, py):
        if y["decision"] in ("B better", "A better"):
            assert np.sign(h["net_preference"]) == (1 if y["decision"] == "B better" else -1)
    assert sum(y["decision"] != "undecided" for y in py) >= 10


def test_verdicts_oriented_either_way_and_several_judges():
    data = pl.read_csv(MTBENCH / "judgments.csv")
    judge = read_verdicts(MTBENCH / "judge_gpt4.csv")
    want = evalset.decisions(data, judge=judge).to_dicts()
    swapped = judge.with_columns(
        pl.col("system_b").alias("system_a"),
        pl.col("system_a").alias("system_b"),
        pl.col("winner").replace({"a": "b", "b": "a"}),
    )
    same_rows(evalset.decisions(data, judge=swapped).to_dicts(), want)
    # a second judge: the decision names which one, or says which there are
    coin = judge.with_columns(
        pl.lit("coin").alias("annotator_id"),
        pl.Series("winner", np.random.default_rng(0).choice(["a", "b", "tie"], judge.height)),
    )
    both = pl.concat([judge, coin])
    with pytest.raises(JudgeError, match=r"2 judges \['coin', 'gpt4_pair'\]"):
        evalset.decisions(data, judge=both)
    same_rows(evalset.decisions(data, judge=both, judge_name="gpt4_pair").to_dicts(), want)
    rows = evalset.decisions(data, judge=both, judge_name="coin")
    assert set(rows["judge"]) == {"coin"}
    # a random judge agrees with humans about a third of the time and buys nothing
    assert rows["judge_agreement"].mean() < 0.45
    assert (rows["effective_humans"] < rows["n_used"] * 1.1).all()
    with pytest.raises(JudgeError, match="e-holm"):
        evalset.decisions(data, judge=judge, correction="e-holm")


def test_a_comparison_the_judge_never_saw_is_decided_by_its_humans():
    data = pl.read_csv(MTBENCH / "judgments.csv")
    judge = read_verdicts(MTBENCH / "judge_gpt4.csv")
    pair = ("alpaca-13b", "gpt-3.5-turbo")
    unseen = judge.filter(~pl.col("system_a").is_in(pair) | ~pl.col("system_b").is_in(pair))
    rows = {
        (r["system_a"], r["system_b"]): r for r in evalset.decisions(data, judge=unseen).to_dicts()
    }
    row = rows[pair]
    assert row["judge_cells"] == 0 and row["judge_agreement"] is None
    assert row["judge_weight"] is None
    # Z = Y: the estimate is the humans' mean over the observations used
    human = {(r["system_a"], r["system_b"]): r for r in evalset.decisions(data).to_dicts()}[pair]
    assert row["net_preference"] == pytest.approx(human["net_preference"], abs=1e-12)
    assert row["effective_humans"] == pytest.approx(row["n_used"], rel=0.02)
    assert row["decision"] == "B better"


def test_an_inconsistent_flag_must_be_true_or_false(tmp_path):
    path = tmp_path / "judge.csv"
    path.write_text(
        "item_id,system_a,system_b,annotator_id,winner,inconsistent\np1,x,y,j,tie,maybe\n"
    )
    with pytest.raises(JudgeError, match="row 1, column 'inconsistent'"):
        read_verdicts(path)
    path.write_text(
        "item_id,system_a,system_b,annotator_id,winner,inconsistent\np1,x,y,j,tie,TRUE\n"
    )
    assert read_verdicts(path)["inconsistent"].to_list() == [True]


# ---------------------------------------------------------------- the service


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def served(request, tmp_path_factory):
    """A served project holding MT-Bench's human judgments (file order) and GPT-4's verdicts,
    on each store."""
    if request.param == "postgres":
        from tests.factories import fresh_pg_database

        with fresh_pg_database() as url:
            yield from _serve(url)
    else:
        yield from _serve(f"sqlite:///{tmp_path_factory.mktemp('hybrid') / 'hybrid.db'}")


def _serve(url: str):
    import httpx

    from services.settings import Settings
    from tests.factories import ThreadServer

    humans = pl.read_csv(MTBENCH / "judgments.csv")
    judge = pl.read_csv(MTBENCH / "judge_gpt4.csv")
    with ThreadServer(Settings(database_url=url, streaming=False)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as api:
            token = api.post("/projects", json={"project_id": "mt"}).json()["token"]
            headers = {"Authorization": f"Bearer {token}"}
            systems = sorted(set(humans["system_a"]) | set(humans["system_b"]))
            prompts = sorted(set(humans["item_id"]) | set(judge["item_id"]))
            for path, body in (
                ("systems", {"systems": [{"system_id": x} for x in systems]}),
                ("prompts", {"prompts": [{"prompt_id": p, "text": p} for p in prompts]}),
            ):
                assert api.post(f"/projects/mt/{path}", json=body, headers=headers).is_success
            rows = [{"judgment_id": f"h{i}", **r} for i, r in enumerate(humans.to_dicts())]
            r = api.post("/projects/mt/judgments", json={"judgments": rows}, headers=headers)
            assert r.status_code == 200, r.text
            yield api, headers, judge, server


def _verdicts(judge: pl.DataFrame, prefix: str = "v") -> list[dict]:
    return [
        {"judgment_id": f"{prefix}{i}", **{k: v for k, v in r.items()}}
        for i, r in enumerate(
            judge.with_columns(pl.col("inconsistent").cast(pl.Boolean)).to_dicts()
        )
    ]


def test_the_service_stores_verdicts_apart_and_gives_the_same_hybrid_rows(served, capsys):
    api, headers, judge, _ = served
    verdicts = _verdicts(judge)
    before = api.get("/projects/mt", headers=headers).json()["num_judgments"]
    # no verdicts yet: the question names what is missing
    r = api.get("/projects/mt/hybrid-decisions", headers=headers)
    assert r.status_code == 422 and "no judge verdicts" in r.text
    r = api.post("/projects/mt/judge-verdicts", json={"verdicts": verdicts}, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 2400, "duplicates": 0, "judges": {"gpt4_pair": 2400}}
    # idempotent: the same batch again stores nothing
    r = api.post("/projects/mt/judge-verdicts", json={"verdicts": verdicts[:50]}, headers=headers)
    assert r.json()["accepted"] == 0 and r.json()["duplicates"] == 50
    # never a human judgment
    assert api.get("/projects/mt", headers=headers).json()["num_judgments"] == before
    human_rows = api.get("/projects/mt/decisions", headers=headers).json()["rows"]
    assert sum(row["n_judgments"] for row in human_rows) == before
    body = api.get("/projects/mt/hybrid-decisions", headers=headers).json()
    assert body["judge"] == "gpt4_pair" and body["num_verdicts"] == 2400
    data, judge_file = MTBENCH / "judgments.csv", MTBENCH / "judge_gpt4.csv"
    py = evalset.decisions(data, judge=judge_file).to_dicts()
    cli = _cli(
        ["decisions", "--data", str(data), "--judge-data", str(judge_file), "--format", "json"],
        capsys,
    )
    same_rows(cli, py)
    assert body["rule"] == py[0]["rule"]
    same_rows(body["rows"], [{k: v for k, v in row.items() if k != "rule"} for row in py])
    # the rule's options and a named judge reach the same function
    query = {"alpha": 0.1, "correction": "none", "unit": "judgment", "judge": "gpt4_pair"}
    body = api.get("/projects/mt/hybrid-decisions", params=query, headers=headers).json()
    py = evalset.decisions(data, judge=judge_file, alpha=0.1, correction="none", unit="judgment")
    same_rows(
        body["rows"], [{k: v for k, v in row.items() if k != "rule"} for row in py.to_dicts()]
    )
    # all-pairs: the project's registered systems, as GET /decisions counts them
    extra = {"systems": [{"system_id": "zz-unjudged"}]}
    assert api.post("/projects/mt/systems", json=extra, headers=headers).is_success
    everyone = {"family": "all-pairs"}
    hybrid = api.get("/projects/mt/hybrid-decisions", params=everyone, headers=headers).json()
    human = api.get("/projects/mt/decisions", params=everyone, headers=headers).json()
    pairs = [(r["dimension"], r["system_a"], r["system_b"]) for r in human["rows"]]
    assert [(r["dimension"], r["system_a"], r["system_b"]) for r in hybrid["rows"]] == pairs
    assert hybrid["family_size"] == human["family_size"] == 21
    r = api.get("/projects/mt/hybrid-decisions", params={"judge": "nobody"}, headers=headers)
    assert r.status_code == 422 and "['gpt4_pair']" in r.text
    r = api.get("/projects/mt/hybrid-decisions", params={"correction": "e-holm"}, headers=headers)
    assert r.status_code == 422 and "e-holm" in r.text


def test_a_bad_verdict_batch_is_refused_whole_with_row_and_reason(served):
    api, headers, judge, _ = served
    good = _verdicts(judge.head(3), prefix="bad")
    bad = [
        {**good[0], "winner": "B wins"},
        {**good[1], "annotator_id": ""},
        {**good[2], "system_b": "nobody"},
    ]
    r = api.post("/projects/mt/judge-verdicts", json={"verdicts": bad}, headers=headers)
    assert r.status_code == 422
    r = api.post(
        "/projects/mt/judge-verdicts", json={"verdicts": [bad[2], good[0]]}, headers=headers
    )
    assert r.status_code == 422, r.text
    problems = r.json()["error"]["problems"]
    # every bad row with its reason: an unknown system, a second verdict on a judged cell
    assert [(p["row"], p["field"]) for p in problems] == [(0, "system_b"), (1, "item_id")]
    assert "unknown system 'nobody'" in problems[0]["message"]
    assert "one verdict per cell" in problems[1]["message"]
    # a second verdict of the judge on a stored cell (another id) is refused, nothing stored
    r = api.post("/projects/mt/judge-verdicts", json={"verdicts": good}, headers=headers)
    assert r.status_code == 422 and "one verdict per cell" in r.text
    listed = api.get("/projects/mt/judge-verdicts", params={"judge": "gpt4_pair"}, headers=headers)
    assert not any(v["judgment_id"].startswith("bad") for v in listed.json()["verdicts"])


def _publish(server, project_id: str, systems: list[str], items: list[str], num: int) -> None:
    """A posterior snapshot of the project, as the worker would publish it (no fit)."""
    import time

    from adaptive.estimation.streaming import Snapshot

    rng = np.random.default_rng(0)
    draws = 100
    server.state.publish(
        (project_id, "overall"),
        Snapshot(
            dimension="overall",
            version=0,
            num_judgments=num,
            last_seq=num,
            method="laplace",
            created_at=time.time(),
            fit_seconds=0.1,
            diagnostics={},
            systems=tuple(systems),
            items=tuple(items),
            pair_a=np.array([0], np.int32),
            pair_b=np.array([1], np.int32),
            pair_judgments=np.array([1]),
            pair_prompts=np.array([1]),
            skill=rng.normal(0.0, 0.3, size=(draws, len(systems))).astype(np.float32),
            alpha=np.exp(rng.normal(0, 0.2, size=(draws, len(items)))).astype(np.float32),
            b=np.sort(rng.normal(0, 1, size=(draws, len(items), 2)), axis=-1).astype(np.float32),
        ),
    )


def test_next_batch_routes_judged_comparisons_and_decisions_use_the_recorded_rates(served):
    """A project with GPT-4's verdicts: next-batch draws a judged comparison's cells by the
    hybrid's routing and keeps the rates in the lease; the judgments of those cells come back
    and GET /hybrid-decisions divides by those rates, as evalset.hybrid does with them."""
    from adaptive.stopping.rule import DecisionRule
    from evalset.hybrid import decide_with_judge
    from services.store.repository.verdicts import fetch_routes

    api, _, judge, server = served
    humans = pl.read_csv(MTBENCH / "judgments.csv").head(1500)
    token = api.post("/projects", json={"project_id": "rt"}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    systems = sorted(set(humans["system_a"]) | set(humans["system_b"]))
    prompts = sorted(set(judge["item_id"]))
    for path, body in (
        ("systems", {"systems": [{"system_id": x} for x in systems]}),
        ("prompts", {"prompts": [{"prompt_id": p} for p in prompts]}),
    ):
        assert api.post(f"/projects/rt/{path}", json=body, headers=headers).is_success
    rows = [{"judgment_id": f"h{i}", **r} for i, r in enumerate(humans.to_dicts())]
    assert api.post("/projects/rt/judgments", json={"judgments": rows}, headers=headers).is_success
    r = api.post(
        "/projects/rt/judge-verdicts", json={"verdicts": _verdicts(judge)}, headers=headers
    )
    assert r.status_code == 200, r.text
    _publish(server, "rt", systems, prompts, humans.height)
    body = {"size": 30, "annotator_id": "fresh", "unit": "judgment", "seed": 3}
    # routing is asked for by naming the judge: a plain batch routes nothing (the human-only
    # decisions assume uniform draws), an unknown judge is a 404
    r = api.post("/projects/rt/next-batch", json=body, headers=headers)
    assert r.status_code == 200, r.text
    assert not any(c["reason"] == "routed" for c in r.json()["cells"])
    with server.state.store.read() as conn:
        assert fetch_routes(conn=conn, project_id="rt") == []
    r = api.post("/projects/rt/next-batch", json={**body, "route_by": "nobody"}, headers=headers)
    assert r.status_code == 404 and "gpt4" in r.text, r.text
    body = {**body, "annotator_id": "fresh2", "route_by": judge["annotator_id"][0]}
    r = api.post("/projects/rt/next-batch", json=body, headers=headers)
    assert r.status_code == 200, r.text
    cells = r.json()["cells"]
    assert len(cells) == 30 and sum(c["reason"] == "routed" for c in cells) >= 25
    with server.state.store.read() as conn:
        routes = fetch_routes(conn=conn, project_id="rt")
    assert len(routes) == sum(c["reason"] == "routed" for c in cells)
    design = {(r["item_id"], frozenset((r["system_a"], r["system_b"]))) for r in judge.to_dicts()}
    report = decide_with_judge(
        evalset.read(humans), read_verdicts(judge), DecisionRule(unit="judgment")
    )
    family = {
        frozenset((a, b)): (c, (a, b)) for c, (_, a, b) in enumerate(report.family.comparisons)
    }
    for route in routes:
        pair = frozenset((route["system_a"], route["system_b"]))
        assert (route["item_id"], pair) in design and route["judge"] == "gpt4_pair"
        c, oriented = family[pair]
        want = report.decisions.next_rates[c]
        if oriented != (route["system_a"], route["system_b"]):
            want = want[[2, 1, 0, 3]]
        # the rates the cell was drawn with: the routing's, after the campaign's judgments
        assert route["rates"] == pytest.approx(want.tolist(), rel=1e-12)
        assert min(route["rates"]) >= 0.3 - 1e-12  # the random floor
    # the annotator judges the batch, naming its lease; the decisions divide those residuals
    # by the rates
    lease = r.json()["lease_id"]
    back = [
        {"judgment_id": f"r{i}", "item_id": c["item_id"], "system_a": c["system_a"],
         "system_b": c["system_b"], "annotator_id": "fresh2", "winner": "b" if i % 3 else "a",
         "lease_id": lease}
        for i, c in enumerate(cells)
    ]  # fmt: skip
    # a lease that does not exist, or did not serve the cell: refused with the row and reason
    stray = {**back[0], "judgment_id": "stray", "lease_id": "no-such-lease"}
    leased = {(x["item_id"], frozenset((x["system_a"], x["system_b"]))) for x in cells}
    other = next(c for c in _verdicts(judge)
                 if (c["item_id"], frozenset((c["system_a"], c["system_b"]))) not in leased)  # fmt: skip
    unserved = {**back[0], "judgment_id": "unserved", "item_id": other["item_id"],
                "system_a": other["system_a"], "system_b": other["system_b"]}  # fmt: skip
    bad = api.post(
        "/projects/rt/judgments", json={"judgments": [back[1], stray, unserved]}, headers=headers
    )
    assert bad.status_code == 422, bad.text
    problems = [(p["row"], p["field"]) for p in bad.json()["error"]["problems"]]
    assert problems == [(1, "lease_id"), (2, "lease_id")], bad.text
    assert api.post("/projects/rt/judgments", json={"judgments": back}, headers=headers).is_success
    # a second judgment of a routed draw (another crowd assignment of the task, naming the
    # same lease): the cell and its verdict are known when it arrives, so it is left out
    second = {**back[0], "judgment_id": "second", "annotator_id": "fresh3"}
    assert api.post(
        "/projects/rt/judgments", json={"judgments": [second]}, headers=headers
    ).is_success
    got = api.get("/projects/rt/hybrid-decisions", headers=headers).json()["rows"]
    everything = pl.concat(
        [
            humans.select(pl.exclude("dimension")).with_columns(pl.lit(None, pl.Utf8).alias(
                "lease_id")),
            pl.DataFrame([*back, second]).drop("judgment_id"),
        ]
    )  # fmt: skip
    want_rows = decide_with_judge(
        evalset.read(everything), read_verdicts(judge), routes=pl.DataFrame(routes)
    ).rows
    same_rows(got, [{k: v for k, v in row.items() if k != "rule"} for row in want_rows])
    plain = decide_with_judge(evalset.read(everything), read_verdicts(judge)).rows
    assert [r["net_preference"] for r in plain] != [r["net_preference"] for r in want_rows]
    each = DecisionRule(unit="judgment")  # where a uniform repeat would count
    with_second = decide_with_judge(
        evalset.read(everything), read_verdicts(judge), each, routes=pl.DataFrame(routes)
    ).rows
    without = decide_with_judge(
        evalset.read(everything.head(everything.height - 1)),
        read_verdicts(judge),
        each,
        routes=pl.DataFrame(routes),
    ).rows
    for a, b in zip(with_second, without, strict=True):
        for key in ("n_used", "cs_low", "cs_high", "e_b_better", "e_a_better", "decision"):
            assert a[key] == b[key], (key, a, b)


def test_routed_draws_with_recorded_rates_keep_a_null_campaign_within_the_level():
    """The service's loop in numbers: after every batch the routing's rates come from the
    decisions so far, cells are drawn with them (draw_routed) and the rates are recorded;
    with Δ = 0 and a judge that always says B on the cells leaning A, the decisions stay
    within alpha, and the verdicts are drawn at share * rate."""
    from adaptive.judge.hybrid_decisions import decide_hybrid, design_shares, draw_routed

    rng = np.random.default_rng(5)
    R, M, alpha = 120, 40, 0.2
    lean = np.array([rng.permutation(np.repeat([1, -1], M // 2)) for _ in range(R)])
    verdict = np.where(lean < 0, 2, rng.choice([0, 1], size=(R, M)))  # misleading on A-leaners
    share = design_shares(np.repeat(np.arange(R), M), verdict.reshape(-1), R)
    comp, code, y, cost, rates = [], [], [], [], []
    drawn = np.zeros((R, 4))
    expected = np.zeros((R, 4))
    next_rates = np.ones((R, 4))
    for _ in range(12):  # batches of 10 per comparison
        for r in range(R):
            for _ in range(10):
                i = draw_routed(rng, next_rates[r], verdict[r], np.ones(M, bool))
                p = [0.15, 0.25, 0.6] if lean[r, i] > 0 else [0.6, 0.25, 0.15]
                comp.append(r)
                code.append(verdict[r, i])
                y.append(rng.choice([-1.0, 0.0, 1.0], p=p))
                cost.append(len(comp))
                rates.append(next_rates[r].copy())
                drawn[r, verdict[r, i]] += 1
                expected[r] += share[r] * next_rates[r]
        d = decide_hybrid(
            np.array(comp), np.array(code), np.array(y), np.array(cost), share,
            alpha_each=alpha, margin=0.0, rates=np.array(rates),
        )  # fmt: skip
        next_rates = d.next_rates
    assert (next_rates != 1.0).any()  # the routing left uniform sampling
    wrong = np.isin(d.outcome, (1, 2)).mean()
    assert wrong <= alpha + 2.0 * np.sqrt(alpha * (1 - alpha) / R)
    # the verdicts were drawn as recorded: counts match share * rate summed over the draws
    assert drawn.sum(axis=0) == pytest.approx(expected.sum(axis=0), rel=0.05)


def test_evalset_import_verdicts_stores_them_apart_and_again_is_a_no_op(tmp_path, capsys):
    from services.store import Store
    from services.store import repository as repo
    from services.store.repository.verdicts import fetch_verdicts

    url = f"sqlite:///{tmp_path / 'import.db'}"
    argv = ["import", str(MTBENCH / "judge_gpt4.csv"), "--project", "mt", "--database-url", url,
            "--verdicts", "--format", "json"]  # fmt: skip
    assert main([*argv, "--create"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["inserted"], first["num_verdicts"]) == (2400, 2400)
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["inserted"], again["duplicates"]) == (0, 2400)
    store = Store(url)
    with store.read() as conn:
        assert repo.count_judgments(conn=conn, project_id="mt") == 0
        stored = fetch_verdicts(conn=conn, project_id="mt")
    store.dispose()
    assert sum(v["inconsistent"] for v in stored) == 380  # the file's flags
    assert {v["annotator_id"] for v in stored} == {"gpt4_pair"}
    # exported, the verdicts import again into another project as the same rows
    out = tmp_path / "verdicts.csv"
    assert main(["export", "--project", "mt", "--verdicts", "--database-url", url,
                 "-o", str(out)]) == 0  # fmt: skip
    assert main(["import", str(out), "--project", "mt2", "--database-url", url,
                 "--verdicts", "--create", "--format", "json"]) == 0  # fmt: skip
    capsys.readouterr()
    store = Store(url)
    with store.read() as conn:
        back = fetch_verdicts(conn=conn, project_id="mt2")
    store.dispose()
    strip = [{k: v for k, v in r.items() if k != "seq"} for r in stored]
    assert [{k: v for k, v in r.items() if k != "seq"} for r in back] == strip


def test_a_judge_name_with_a_control_character_is_refused(served):
    api, headers, _, _ = served
    for path in ("hybrid-decisions", "judge-verdicts"):
        r = api.get(f"/projects/mt/{path}", params={"judge": "gpt4\x00"}, headers=headers)
        assert r.status_code == 422, r.text


def test_a_judge_is_never_taken_for_a_human(served):
    """Judgments posted under a judge's name are refused whole, with the row and the reason."""
    api, headers, judge, _ = served
    verdicts = {"verdicts": _verdicts(judge)}  # idempotent: stored once whatever ran before
    assert api.post("/projects/mt/judge-verdicts", json=verdicts, headers=headers).is_success
    name = judge["annotator_id"][0]
    row = judge.row(0, named=True)
    rows = [
        {"judgment_id": f"not-human-{i}", "item_id": row["item_id"], "system_a": row["system_a"],
         "system_b": row["system_b"], "annotator_id": who, "winner": "a"}
        for i, who in enumerate(["someone", name])
    ]  # fmt: skip
    before = api.get("/projects/mt", headers=headers).json()["num_judgments"]
    r = api.post("/projects/mt/judgments", json={"judgments": rows}, headers=headers)
    assert r.status_code == 422, r.text
    (problem,) = r.json()["error"]["problems"]
    assert problem["row"] == 1 and problem["field"] == "annotator_id"
    assert "automatic judge" in problem["message"]
    assert api.get("/projects/mt", headers=headers).json()["num_judgments"] == before
    # nor a human for a judge
    human = pl.read_csv(MTBENCH / "judgments.csv")["annotator_id"][0]
    verdict = {**_verdicts(judge)[0], "judgment_id": "not-a-judge", "annotator_id": human}
    r = api.post("/projects/mt/judge-verdicts", json={"verdicts": [verdict]}, headers=headers)
    assert r.status_code == 422 and "human judgments" in r.text, r.text


def test_a_verdict_has_no_screen_or_lease(served):
    """A judge's verdict is not a served human judgment: screen_id and lease_id are refused,
    not silently dropped (they were accepted and lost)."""
    api, headers, judge, _ = served
    verdict = _verdicts(judge, prefix="nolease")[0]
    for field in ("screen_id", "lease_id"):
        r = api.post(
            "/projects/mt/judge-verdicts",
            json={"verdicts": [{**verdict, field: "x"}]},
            headers=headers,
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["problems"][0]["field"].endswith(field), r.text
