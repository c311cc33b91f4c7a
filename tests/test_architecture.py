"""The core stays pure: no web, database or Ray imports in the statistical packages."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"fastapi", "sqlalchemy", "starlette", "uvicorn", "psycopg", "ray", "httpx"}
# Ray is allowed in exactly one module: the one that fans work out
ALLOWED = {("adaptive/parallel.py", "ray")}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_packages_do_not_import_web_database_or_ray():
    offenders = []
    for package in ("stan_free_models", "adaptive"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name in imported_roots(path) & FORBIDDEN:
                if (rel, name) not in ALLOWED:
                    offenders.append(f"{rel} imports {name}")
    assert offenders == []


def test_models_do_not_import_the_decision_layer_or_services():
    for path in sorted((ROOT / "stan_free_models").rglob("*.py")):
        assert not imported_roots(path) & {"adaptive", "services"}, path
