"""research/ (the measurement notebooks, their rows and how the defaults were chosen) stays
apart from the product: its own tests run in their own process, no test reaches into it or
into scripts/ through sys.path, it is no package, and it keeps the 600-line rule."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 600


def test_research_checks_pass_in_their_own_process():
    """research/test_*.py: the calibration suite's tables and command line, the Bradley-Terry
    null campaigns' simulator and frequentist checks, and the verdicts on those campaigns."""
    env = os.environ | {"PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "research"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def _path_insertions(path: Path) -> list[str]:
    """The sys.path.insert / append calls of a file, as source."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("insert", "append")
            and ast.unparse(node.func.value) == "sys.path"
        ):
            found.append(ast.unparse(node))
    return found


def test_no_test_imports_from_scripts_or_research_through_sys_path():
    offenders = {
        path.relative_to(ROOT).as_posix(): calls
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (calls := [c for c in _path_insertions(path) if "scripts" in c or "research" in c])
    }
    assert offenders == {}


def test_research_is_not_a_package_and_keeps_the_line_rule():
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert not any(p.startswith("research") for p in found["packages"]["find"]["include"])
    assert not (ROOT / "research" / "__init__.py").exists()
    assert (ROOT / "research" / "README.md").exists()
    long = {
        path.relative_to(ROOT).as_posix(): n
        for folder in ("research", "scripts")
        for pattern in ("*.py", "*.md")
        for path in (ROOT / folder).rglob(pattern)
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_the_statistics_page_stays_a_users_page_and_its_row_links_resolve():
    """docs/statistics.md is what a user reads to understand the numbers (under 450 lines); the
    measurements behind it live in research/, and each link to them names a file that exists."""
    import re

    page = ROOT / "docs" / "statistics.md"
    text = page.read_text()
    assert len(text.splitlines()) < 450
    links = re.findall(r"\]\((\.\./research/[^)#\s]+)", text)
    missing = [link for link in links if not (page.parent / link).resolve().exists()]
    assert links and missing == []
