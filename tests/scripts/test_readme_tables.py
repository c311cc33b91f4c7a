"""The README's tables are what the commands print: scripts/readme_tables.py runs them and a
table that drifted from a fresh run fails here (the decisions table in the default suite,
the demo's significance table, a fit of about a minute, in the slow one)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "readme_tables.py"


def _script():  # noqa: ANN202 (a module loaded from its path)
    spec = importlib.util.spec_from_file_location("readme_tables", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


rt = _script()
TABLES = {t.name: t for t in rt.TABLES}

OUTPUT = """\
dimension  system_a  system_b  decision   note
---------  --------  --------  ---------  ----
overall    A         B         undecided  x
overall    A         C         B better
overall    B         C         A better   y z
overall    C         D         undecided
"""


def test_an_excerpt_keeps_the_rows_named_and_leaves_columns_out():
    table = rt.Table("t", (), rows=(("A", "C"), ("C", "D")), drop=("dimension", "note"))
    assert rt.excerpt(OUTPUT, table) == "\n".join(
        [
            "system_a  system_b  decision",
            "--------  --------  ---------",
            "...",
            "A         C         B better",
            "...",
            "C         D         undecided",
        ]
    )
    ends = rt.Table("t", (), drop=("note",), head=1, tail=1)
    assert rt.excerpt(OUTPUT, ends).split("\n")[2:] == [
        "overall    A         B         undecided",
        "...",
        "overall    C         D         undecided",
    ]
    missing = rt.Table("t", (), rows=(("A", "Z"),))
    with pytest.raises(SystemExit, match="0 of the 1 rows"):
        rt.excerpt(OUTPUT, missing)


def test_a_block_is_replaced_and_a_missing_one_is_named():
    text = "a\n<!-- table: t (x) -->\n```\nold\n```\n<!-- /table -->\nb\n"
    assert rt.shown(text, "t") == "old"
    assert rt.replace(text, "t", "new") == text.replace("old", "new")
    with pytest.raises(SystemExit, match="no block"):
        rt.shown(text, "u")


def test_the_readme_decisions_table_is_a_fresh_run():
    body, got = rt.fresh(TABLES["decisions"])
    assert rt.shown(rt.README.read_text(), "decisions") == body
    # and the figures the README quotes from its stderr
    readme = rt.README.read_text()
    decided = re.search(r"(\d+) of (\d+) comparisons decided", got.stderr)
    assert decided is not None and f"`{decided.group(0)}`" in readme
    needs = re.search(r"note: (\d+) undecided comparisons", got.stderr)
    assert needs is not None
    assert re.search(rf"a note that {needs.group(1)}\s+open\s+comparisons", readme)


@pytest.mark.slow
def test_the_readme_significance_table_is_a_fresh_run():
    body, _ = rt.fresh(TABLES["significance"])
    assert rt.shown(rt.README.read_text(), "significance") == body
