"""One decision rule's parameters through every door: the Python keywords, the command line's
flags, the HTTP query and a next batch's body are made from ``DecisionRule``'s fields, so a
bad value is refused the same way, naming the parameter at fault; the multiplicity rule is a
``Correction`` value (no door switches on its name); the hybrid decisions take the human-only
path's family and row columns."""

from __future__ import annotations

import ast
import inspect
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import polars as pl
import pytest

import evalset
from adaptive.stopping.rule import CORRECTIONS, DecisionRule
from services.cli import main
from services.settings import Settings
from tests.factories import ThreadServer

ROOT = Path(__file__).resolve().parents[2]
#: the rule's parameters a door takes
RULE_OPTIONS = ("alpha", "margin", "unit", "correction", "family", "pairs")

#: (options, the parameter at fault, the start of its message)
BAD_RULES = [
    ({"alpha": 2.0}, "alpha", "Input should be less than 1"),
    ({"margin": -0.1}, "margin", "Input should be greater than or equal to 0"),
    ({"unit": "cell"}, "unit", "Input should be 'prompt' or 'judgment'"),
    ({"correction": "holm"}, "correction", "Input should be 'bonferroni', 'e-holm' or 'none'"),
    ({"family": "registered"}, "pairs", "pairs go with family='registered'"),
    ({"family": "all-pairs", "pairs": [("s0", "s1")]}, "pairs", "pairs go with"),
    ({"pairs": [("s0", "s0")]}, "pairs", "a registered pair compares two different systems"),
]


def _frame() -> pl.DataFrame:
    return evalset.example(num_systems=3, num_prompts=12, seed=4)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[httpx.Client, str, dict]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('rule') / 'rule.db'}"
    frame = _frame()
    with (
        ThreadServer(Settings(database_url=url, streaming=False)) as server,
        httpx.Client(base_url=server.url, timeout=60) as api,
    ):
        project_id = f"r-{uuid.uuid4().hex[:8]}"
        r = api.post("/projects", json={"project_id": project_id})
        headers = {"Authorization": f"Bearer {r.json()['token']}"}
        systems = sorted(set(frame["system_a"]) | set(frame["system_b"]))
        r = api.post(
            f"/projects/{project_id}/systems",
            json={"systems": [{"system_id": s} for s in systems]},
            headers=headers,
        )
        assert r.status_code < 300, r.text
        yield api, project_id, headers


def _flags(options: dict) -> list[str]:
    out = []
    for name, value in options.items():
        text = ",".join(f"{a}:{b}" for a, b in value) if name == "pairs" else str(value)
        out += [f"--{name}", text]
    return out


def _query(options: dict) -> dict:
    return {k: [f"{a}:{b}" for a, b in v] if k == "pairs" else v for k, v in options.items()}


@pytest.mark.parametrize(("options", "field", "message"), BAD_RULES)
def test_a_bad_rule_is_refused_alike_at_every_door_naming_the_parameter(
    options, field, message, served, tmp_path, capsys
):
    api, project_id, headers = served
    frame = _frame()
    with pytest.raises(ValueError) as python:
        evalset.decisions(frame, **options)
    assert str(python.value).startswith(f"{field}: {message}")
    assert "\n" not in str(python.value)
    path = tmp_path / "j.csv"
    frame.write_csv(path)
    try:
        code = main(["decisions", "--data", str(path), *_flags(options)])
    except SystemExit as exc:  # argparse refuses a value outside a flag's choices itself
        code = exc.code
    assert code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--{field}: {message}" in line or f"argument --{field}: invalid choice" in line
    # the line names the flag at fault only (an --alpha error once blamed --pairs)
    assert [f for f in RULE_OPTIONS if f"--{f}" in line] == [field]
    query = api.get(f"/projects/{project_id}/decisions", params=_query(options), headers=headers)
    body = api.post(
        f"/projects/{project_id}/next-batch",
        json={"size": 1, **{k: list(v) if k == "pairs" else v for k, v in options.items()}},
        headers=headers,
    )
    for r in (query, body):
        assert r.status_code == 422, r.text
        problems = r.json()["error"]["problems"]
        assert [p["field"].rsplit(".", 1)[-1] for p in problems] == [field], problems
        assert problems[0]["message"].startswith(message), problems


def test_every_door_declares_the_rule_s_fields_with_their_range_and_meaning(served):
    from adaptive.stopping.rule_options import RULE_FIELDS
    from adaptive.stopping.rule_options import RULE_OPTIONS as OPTIONS

    assert OPTIONS == RULE_OPTIONS
    api, _, _ = served
    spec = api.get("/openapi.json").json()
    query = {
        p["name"]: p for p in spec["paths"]["/projects/{project_id}/decisions"]["get"]["parameters"]
    }
    body = spec["components"]["schemas"]["NextBatchCreate"]["properties"]
    for name in RULE_OPTIONS:
        meaning = RULE_FIELDS[name].description
        assert query[name]["description"] == meaning
        assert body[name]["description"] == meaning
    for schema in (query["alpha"]["schema"], body["alpha"]):
        assert (schema["minimum"], schema["exclusiveMaximum"]) == (1e-12, 1.0)
    assert "mixture" not in query and "mixture" not in body
    from services.cli import build_parser

    parser = build_parser("decisions")
    (sub,) = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    flags = {a.option_strings[0]: a for a in sub.choices["decisions"]._actions if a.option_strings}
    for name in RULE_OPTIONS:
        assert RULE_FIELDS[name].description in flags[f"--{name}"].help
    assert flags["--correction"].choices == list(CORRECTIONS)


def _correction_switches(path: Path) -> list[str]:
    """Comparisons of a ``correction`` with a rule's name (``rule.correction == "e-holm"``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(
            isinstance(s, ast.Attribute | ast.Name)
            and (getattr(s, "attr", None) or getattr(s, "id", None)) == "correction"
            for s in sides
        )
        words = any(isinstance(s, ast.Constant) and s.value in CORRECTIONS for s in sides)
        if named and words:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_door_or_algorithm_switches_on_a_correction_s_name():
    from adaptive.stopping.corrections import Correction

    found = []
    for package in ("adaptive", "evalset", "services"):
        for path in sorted((ROOT / package).rglob("*.py")):
            found += _correction_switches(path)
    assert found == []
    # what a rule does is the member's: its level, its words, whether e-Holm closes more
    assert [c.alpha_each(0.05, 4) for c in Correction] == [0.0125, 0.0125, 0.05]
    assert [c.closes_by_e_holm for c in Correction] == [False, True, False]
    assert DecisionRule(correction="none").correction is Correction.NONE


def _two_orientations() -> pl.DataFrame:
    """Every pair judged both ways round, in two dimensions."""
    frame = evalset.example(num_systems=3, num_prompts=20, seed=5).drop("dimension")
    swapped = frame.with_columns(
        system_a=pl.col("system_b"),
        system_b=pl.col("system_a"),
        winner=pl.col("winner").replace({"a": "b", "b": "a"}),
    )
    both = pl.concat([frame, swapped.gather_every(3)])
    return pl.concat([both.with_columns(dimension=pl.lit(d)) for d in ("fluency", "helpful")]).drop(
        "row", strict=False
    )


@pytest.mark.parametrize("correction", ["bonferroni", "none"])
def test_hybrid_decisions_take_the_human_only_family_words_and_outside(correction):
    from evalset.family import decide_judgments
    from evalset.hybrid import decide_with_judge, read_verdicts

    humans = evalset.read(_two_orientations())
    cell = ["dimension", "item_id", "lo", "hi"]
    verdicts = read_verdicts(
        humans.with_columns(
            lo=pl.min_horizontal("system_a", "system_b"),
            hi=pl.max_horizontal("system_a", "system_b"),
        )
        .unique(subset=cell, keep="first", maintain_order=True)
        .select("item_id", "system_a", "system_b", "dimension", "winner")
        .with_columns(annotator_id=pl.lit("gpt"))
    )
    rule = DecisionRule(correction=correction, family="registered", pairs=(("s1", "s0"),))
    human = decide_judgments(humans, rule)
    hybrid = decide_with_judge(humans, verdicts, rule)
    assert hybrid.family == human.family
    assert hybrid.outside == human.outside  # each outside comparison once, as the humans'
    assert len(human.outside) == 4
    split = human.rows[0]["rule"].split("; ")[-2]  # the multiplicity rule in words
    assert split.startswith(correction.replace("none", "no correction"))
    assert all(r["rule"].endswith(split) for r in hybrid.rows)
    shared = ("dimension", "system_a", "system_b", "n_judgments", "n_prompts", "alpha_each")
    for h, y in zip(human.rows, hybrid.rows, strict=True):
        assert {k: h[k] for k in shared} == {k: y[k] for k in shared}


def test_the_hybrid_decision_is_one_short_function():
    from evalset.hybrid import decide_with_judge

    assert len(inspect.getsource(decide_with_judge).splitlines()) < 80
