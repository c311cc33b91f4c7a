"""The service's shape: sizes, thin routes, and doors that reach the core through evalset.

Each rule lists what is still over it today (``SIZE_DEBT``, ``DOOR_DEBT``): an entry may
shrink or go, never grow, and nothing new joins it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _core_files(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


#: a route handler's lines at most (decorators aside): parse, call the use case, answer
ROUTE_LINES = 40
#: lines of a product module and of a function in services/ and evalset/, at most
MODULE_LINES, FUNCTION_LINES = 450, 80
#: what is still over those bounds, with its size today: an entry may shrink or go, never
#: grow, and nothing new joins it (migrations are exempt: an applied one is never edited)
SIZE_DEBT = {
    "services/answers.py:pair_rows": 133,
    "services/api/dashboard_page.py": 580,
    "services/api/dashboard_page.py:render_dashboard": 235,
    "services/api/limits.py:__call__": 160,
    "services/api/routes/analysis.py": 454,
    "services/cli/analysis.py": 452,
    "services/cli/analysis.py:_add_fit_args": 121,
    "services/cli/bt.py": 527,
    "services/cli/bt.py:register": 137,
    "services/cli/crowd.py:register": 87,
    "services/cli/recommend.py": 481,
    "services/cli/recommend.py:recommend_from_project": 89,
    "services/cli/recommend.py:register": 117,
    "services/cli/selection.py:register": 82,
    "services/cli/server.py:register": 84,
    "services/runtime/refresher.py": 513,
    "services/runtime/refresher.py:update": 85,
    "services/runtime/state.py": 527,
    "services/schemas.py": 544,
    "services/store/repository/gold.py:add_gold_cells": 127,
    "services/store/repository/judgments.py": 471,
    "services/store/repository/judgments.py:add_judgments": 119,
    "services/store/repository/verdicts.py:add_verdicts": 126,
    "evalset/bradley_terry.py:elo": 99,
    "evalset/plots.py": 493,
    "evalset/recommend_adapter.py:prepare": 105,
}


def _product_files() -> list[Path]:
    return [p for p in _core_files("services", "evalset") if "migrations" not in p.parts]


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _lines(node: ast.AST) -> int:
    return int(node.end_lineno or node.lineno) - node.lineno + 1  # type: ignore[attr-defined]


def _sizes() -> dict[str, int]:
    """Every module over :data:`MODULE_LINES` and function over :data:`FUNCTION_LINES`."""
    found = {}
    for path in _product_files():
        rel, text = path.relative_to(ROOT).as_posix(), path.read_text()
        if (n := len(text.splitlines())) > MODULE_LINES:
            found[rel] = n
        for f in _functions(ast.parse(text)):
            if _lines(f) > FUNCTION_LINES:
                found[f"{rel}:{f.name}"] = max(found.get(f"{rel}:{f.name}", 0), _lines(f))
    return found


def test_no_module_over_450_lines_nor_function_over_80_beyond_the_listed_debt():
    sizes = _sizes()
    grown = {k: n for k, n in sizes.items() if n > SIZE_DEBT.get(k, 0)}
    assert grown == {}
    paid = sorted(set(SIZE_DEBT) - set(sizes))  # within the bounds now: off the list
    assert paid == []


def _route_handlers(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    def routed(d: ast.expr) -> bool:
        func = d.func if isinstance(d, ast.Call) else d
        return isinstance(func, ast.Attribute) and ast.unparse(func.value) in ("router", "app")

    return [f for f in _functions(tree) if any(routed(d) for d in f.decorator_list)]


def test_no_route_handler_over_40_lines():
    """A route parses, calls the use case and answers; the work is in named functions."""
    long = {
        f"{path.relative_to(ROOT)}:{f.name}": _lines(f)
        for path in _core_files("services/api")
        for f in _route_handlers(ast.parse(path.read_text()))
        if _lines(f) > ROUTE_LINES
    }
    assert long == {}


#: the doors that reach the core through evalset: the routes and the command line
DOORS = ("services/api/routes", "services/cli")
#: imports of core functions the doors still make (types and constants are free to import):
#: an entry may go, nothing new joins it
DOOR_DEBT = {
    "services/api/routes/agreement.py": {"agreement_rows"},
    "services/api/routes/crowd.py": {"parse_json_lines", "parse_json_text"},
    "services/api/routes/decisions.py": {"decision_rows", "rule_options_model", "rule_problems"},
    "services/api/routes/gold.py": {"gold_rows"},
    "services/api/routes/hybrid.py": {"validate_judgments"},
    "services/cli/analysis.py": {
        "preset_config",
        "read_judgments",
        "analyze",
        "analysis_item_rows",
    },
    "services/cli/bt.py": {
        "bt",
        "damr",
        "filter_judgments",
        "read_judgments",
        "screen_annotators",
        "flagged_annotators",
        "write_csv",
        "validate_judgments",
    },
    "services/cli/common.py": {"rows_to_csv"},
    "services/cli/crowd.py": {"csv_text", "write_csv"},
    "services/cli/decisions.py": {"rule_problems", "filter_judgments", "read_judgments"},
    "services/cli/plot.py": {"analysis_item_rows"},
    "services/cli/questions.py": {"filter_judgments", "read_judgments"},
    "services/cli/recommend.py": {"filter_judgments", "read_judgments", "replay_files"},
    "services/cli/selection.py": {
        "build_cells",
        "read_judgments",
        "loco_data",
        "heldout_curve",
        "cell_table",
        "judged_from_cells",
        "run_loco",
        "summarize_folds",
    },
    "services/cli/server.py": {"read_judgments", "record_lines", "csv_text", "write_csv"},
}


def _core_calls(tree: ast.AST) -> set[str]:
    """Names a module imports from adaptive or stan_free_models that are neither types
    (CapWords) nor constants (UPPER_CASE): functions and modules of the core."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in CORE:
            found |= {a.name for a in node.names if not a.name[:1].isupper()}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] in CORE}
    return found


CORE = ("adaptive", "stan_free_models")


def test_the_doors_reach_the_core_through_evalset():
    """Routes and the CLI call evalset's use cases; from the core they take types and
    constants only (beyond the listed debt, which may only shrink)."""
    new = {
        rel: extra
        for path in _core_files(*DOORS)
        if (rel := path.relative_to(ROOT).as_posix())
        and (extra := _core_calls(ast.parse(path.read_text())) - DOOR_DEBT.get(rel, set()))
    }
    assert new == {}
    paid = {
        rel: names - _core_calls(ast.parse((ROOT / rel).read_text()))
        if (ROOT / rel).exists()
        else names
        for rel, names in DOOR_DEBT.items()
    }
    assert {rel: names for rel, names in paid.items() if names} == {}  # paid: off the list
