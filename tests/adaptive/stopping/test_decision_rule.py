"""Issue 39: one decision rule (level, margin, unit, multiplicity rule, family), written once,
and the same rows through the command line and ``import evalset``."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import evalset
from adaptive.stopping.decisions import decide
from adaptive.stopping.rule import (
    DEFAULT_LEVEL,
    DEFAULT_MARGIN,
    DecisionRule,
    comparison_family,
    e_holm_rejections,
)
from services.cli import main

ROOT = Path(__file__).resolve().parents[3]
MTBENCH = ROOT / "data" / "mtbench" / "judgments.csv"
NCM = ROOT / "data" / "chateval_ncm" / "judgments.csv"

#: parameters and flags that carry a decision rule's defaults
RULE_NAMES = {"alpha", "margin", "unit", "correction", "family", "--alpha", "--margin", "--unit",
              "--correction", "--family"}  # fmt: skip
#: files allowed to write a rule default themselves (none: every door takes adaptive.stopping.rule's)
KNOWN: set[str] = set()


def _uses_the_rule(tree: ast.AST) -> bool:
    modules = {"adaptive.stopping.decisions", "adaptive.stopping.rule", "evalset.decide"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in modules:
            return True
    return False


def _is_literal(node: ast.AST) -> bool:
    """A written value (None means "the rule's default", not a value)."""
    return isinstance(node, ast.Constant) and node.value is not None


def _literal_defaults(tree: ast.AST) -> list[tuple[str, int, object]]:
    """(name, line, value) of every literal default of a rule parameter or flag."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg in RULE_NAMES and _is_literal(default):
                    found.append((arg.arg, default.lineno, default.value))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            flag = node.args[0].value
            for kw in node.keywords:
                if (
                    flag in RULE_NAMES
                    and kw.arg == "default"
                    and isinstance(kw.value, ast.Constant)
                ):
                    found.append((flag, kw.value.lineno, kw.value.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id in RULE_NAMES and node.value and _is_literal(node.value):
                found.append((node.target.id, node.lineno, node.value.value))
    return found


def test_each_decision_default_is_written_once():
    offenders, known = [], []
    for package in ("adaptive", "evalset", "services"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "adaptive/stopping/rule.py":
                continue
            tree = ast.parse(path.read_text())
            if not _uses_the_rule(tree):
                continue
            hits = [
                f"{rel}:{line} {name}={value!r}" for name, line, value in _literal_defaults(tree)
            ]
            (known if rel in KNOWN else offenders).extend(hits)
    assert offenders == []
    # the rule's module is the one place the numbers are written
    rule_tree = ast.parse((ROOT / "adaptive" / "stopping" / "rule.py").read_text())
    numbers = [n.value for n in ast.walk(rule_tree) if isinstance(n, ast.Constant)]
    assert numbers.count(DEFAULT_LEVEL) == 1 and numbers.count(DEFAULT_MARGIN) == 1
    assert DecisionRule().alpha == DEFAULT_LEVEL and DecisionRule().margin == DEFAULT_MARGIN


def test_the_command_line_flags_take_the_rule_s_defaults():
    from services.cli import build_parser

    for command in ("decisions", "recommend", "replay"):
        args = build_parser(command).parse_args(
            [command, "--data", "x.csv"] + (["--size", "1"] if command == "recommend" else [])
        )
        rule = DecisionRule()
        assert (args.alpha, args.margin, args.unit, args.correction) == (
            rule.alpha,
            rule.margin,
            rule.unit,
            rule.correction,
        )


# ------------------------------------------------------------------ one family, two doors


def _two_dimensions() -> pl.DataFrame:
    one = evalset.example(num_systems=3, num_prompts=15, seed=2).drop("row", "dimension")
    return pl.concat([one.with_columns(dimension=pl.lit(d)) for d in ("fluency", "helpful")])


def test_python_and_command_line_give_the_same_rows_and_split_alpha_over_one_family(
    tmp_path, capsys
):
    frame = _two_dimensions()
    path = tmp_path / "j.csv"
    frame.write_csv(path)
    assert main(["decisions", "--data", str(path), "--format", "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    py = evalset.decisions(frame).to_dicts()
    assert py == cli
    # one family across both dimensions (before: per dimension in Python, 0.05 / 3)
    assert {r["family_size"] for r in py} == {6} and {r["family"] for r in py} == {"compared"}
    assert [r["alpha_each"] for r in py] == pytest.approx([0.05 / 6] * 6)


def test_a_declared_family_states_its_size_and_members(tmp_path):
    frame = evalset.example(num_systems=4, num_prompts=10, seed=3)
    # only s0-s1 and s2-s3 compared
    frame = frame.filter(
        ((pl.col("system_a") == "s0") & (pl.col("system_b") == "s1"))
        | ((pl.col("system_a") == "s2") & (pl.col("system_b") == "s3"))
    )
    compared = evalset.decisions(frame)
    assert compared.height == 2 and set(compared["family_size"]) == {2}
    every = evalset.decisions(frame, family="all-pairs")
    assert every.height == 6 and set(every["family_size"]) == {6}
    never = every.filter(pl.col("n_judgments") == 0)
    assert never.height == 4 and set(never["decision"]) == {"undecided"}
    mine = evalset.decisions(frame, pairs=[("s3", "s2")])
    assert mine.select("system_a", "system_b", "family", "family_size").rows() == [
        ("s2", "s3", "registered", 1)
    ]
    # the judgments of a comparison read the other way round are flipped, not lost
    assert mine["n_judgments"][0] == compared["n_judgments"][1]
    assert mine["net_preference"][0] == pytest.approx(compared["net_preference"][1])
    rule = DecisionRule(family="registered", pairs=(("b", "a"),))
    fam = comparison_family(rule, [("d", "a", "b")], dimensions=["d", "e"])
    assert fam.comparisons == (("d", "a", "b"), ("e", "b", "a"))
    with pytest.raises(ValueError, match="pairs"):
        DecisionRule(family="registered")


# ------------------------------------------------------------------ e-Holm


def test_e_holm_rejects_whatever_bonferroni_rejects_and_more_when_others_have_evidence():
    rng = np.random.default_rng(0)
    alpha, tests = 0.05, 12
    for _ in range(200):
        C = int(rng.integers(1, tests + 1))
        log_e = rng.normal(0.0, 3.0, size=(C, 4))
        got = e_holm_rejections(log_e, tests, alpha)
        assert got[log_e >= np.log(2 * tests / alpha)].all()
    # hand-computed: level 20; comparison 1's worst set is {A}: 0.01 - 20; comparison 0's
    # with B: {B, A}: (60 - 20) + (0.1 - 20) = 20.1; 20.1 - 19.99 >= 0 (Bonferroni needs 80)
    log_e = np.log([[60.0, 0.1, 30.0, 0.2], [1e6, 0.01, 50.0, 30.0]])
    assert e_holm_rejections(log_e, 2, alpha)[:, 0].tolist() == [True, True]
    assert not e_holm_rejections(log_e, 3, alpha)[0, 0]  # a third comparison in the family


def test_e_holm_decides_at_least_bonferroni_and_keeps_the_error_on_null_campaigns():
    rng = np.random.default_rng(1)
    C, n, wrong = 6, 300, 0
    for _ in range(60):
        comp = rng.integers(0, C, size=n)
        signed = rng.choice([-1.0, 0.0, 1.0], size=n, p=[0.4, 0.2, 0.4])
        prompt = np.arange(n)
        state_b = decide(comp, prompt, signed, C, DecisionRule())
        # e-Holm at every batch of 50: each look may close more
        from adaptive.stopping.decisions import decisions_of, start, update

        state = start(C, n, DecisionRule(correction="e-holm"))
        for lo in range(0, n, 50):
            state = update(state, comp[lo : lo + 50], prompt[lo : lo + 50], signed[lo : lo + 50])
        holm = decisions_of(state)
        assert (holm.closed | ~state_b.closed).all()
        # Δ = 0: every sign decision is wrong (equivalence is right when |Δ| < margin)
        wrong += bool(np.isin(holm.outcome, (1, 2)).any())
    assert wrong <= 3  # 60 null campaigns at 0.05: about 3 allowed, anytime-valid far fewer
