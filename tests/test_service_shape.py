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
SIZE_DEBT: dict[str, int] = {}


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
DOOR_DEBT: dict[str, set[str]] = {}


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
