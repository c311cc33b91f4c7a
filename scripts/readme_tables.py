"""Rewrite the README's output tables from fresh runs of the commands they show.

Each table sits between ``<!-- table: NAME ... -->`` and ``<!-- /table -->`` in README.md:
the command's own text output (what a pipe or a file gets), with the columns the README
leaves out removed, the rows it shows kept and ``...`` where rows are left out.

    python scripts/readme_tables.py                    # rewrite README.md's tables
    python scripts/readme_tables.py --check            # exit 1 with a diff when one drifted
    python scripts/readme_tables.py --only decisions   # one table (decisions: about a second)
    python scripts/readme_tables.py --paper            # also docs/paper_table.md (NUTS: minutes)

The significance table is the demo's default fit (about a minute cold); tests/scripts/
test_readme_tables.py checks the decisions table in the default suite and the significance
table in the slow one.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DATA = "data/chateval_ncm/judgments.csv"
#: the documented command that writes docs/paper_table.md (docs/statistics.md)
PAPER_ARGS = ("--method", "nuts", "--b-scale", "5", "--draws", "4000")


@dataclass(frozen=True)
class Table:
    """One README table: the ``evalset`` arguments that print it and what of it is shown."""

    name: str
    argv: tuple[str, ...]
    #: the (system_a, system_b) rows shown, in the command's order (none: ``head`` and ``tail``)
    rows: tuple[tuple[str, str], ...] = ()
    #: columns left out of the README
    drop: tuple[str, ...] = ()
    #: without ``rows``, the first ``head`` and the last ``tail`` rows are shown
    head: int = 0
    tail: int = 0


TABLES = (
    Table(
        "decisions",
        ("decisions", "--data", DATA),
        rows=(
            ("Cakechat", "S2SAttn_Twitter"),
            ("Cakechat", "OpenNMT_Harvard"),
            ("Cakechat", "NCM"),
            ("Human1", "S2SAttn_Twitter"),
            ("Human1", "Human2"),
            ("NCM", "S2SAttn_Twitter"),
        ),
        drop=("dimension",),
    ),
    Table(
        "significance",
        ("significance", "--data", DATA),
        drop=("dimension", "note"),
        head=2,
        tail=1,
    ),
)


@dataclass(frozen=True)
class Run:
    """A command's output and how long it took."""

    stdout: str
    stderr: str
    seconds: float


def run(argv: tuple[str, ...]) -> Run:
    """``evalset ARGV`` from the checkout, as the README runs it (output to a pipe)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "services.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"evalset {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return Run(done.stdout, done.stderr, time.perf_counter() - start)


def _spans(rule: str) -> list[tuple[int, int]]:
    """Each column's (start, end) from the table's line of dashes."""
    return [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]


def excerpt(output: str, table: Table) -> str:
    """The rows ``table`` shows of a plain text table, its columns ``drop`` left out."""
    header, rule, *body = output.rstrip("\n").split("\n")
    spans = _spans(rule)
    names = [header[a:b].strip() for a, b in spans]
    # a column's text runs to the next column's start (the last one to the line's end)
    starts = [a for a, _ in spans] + [None]
    cells = [slice(starts[i], starts[i + 1]) for i in range(len(spans))]
    keep = [cells[i] for i, n in enumerate(names) if n not in table.drop]

    def cut(line: str) -> str:
        return "".join(line[s] for s in keep).rstrip()

    col_a, col_b = cells[names.index("system_a")], cells[names.index("system_b")]
    wanted = set(table.rows)
    ends = set(range(table.head)) | set(range(len(body) - table.tail, len(body)))
    lines, skipped = [cut(header), cut(rule)], False
    for k, line in enumerate(body):
        if (line[col_a].strip(), line[col_b].strip()) in wanted or (not wanted and k in ends):
            if skipped:
                lines.append("...")
            lines.append(cut(line))
            skipped = False
        else:
            skipped = True
    if skipped:
        lines.append("...")
    shown = sum(1 for line in lines if line != "...") - 2
    if table.rows and shown != len(table.rows):
        raise SystemExit(f"{table.name}: {shown} of the {len(table.rows)} rows named were found")
    return "\n".join(lines)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(
        rf"(<!-- table: {re.escape(name)}\b[^>]*-->\n```\n)(.*?)(\n```\n<!-- /table -->)", re.S
    )


def shown(text: str, name: str) -> str:
    """The table ``name`` as the README shows it now."""
    found = _block(name).search(text)
    if found is None:
        raise SystemExit(f"README.md has no block <!-- table: {name} -->")
    return found.group(2)


def replace(text: str, name: str, body: str) -> str:
    """``text`` with the table ``name`` replaced by ``body``."""
    shown(text, name)  # it must be there
    return _block(name).sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def fresh(table: Table) -> tuple[str, Run]:
    """The table as a fresh run prints it, and the run."""
    got = run(table.argv)
    return excerpt(got.stdout, table), got


def write_paper_table() -> None:
    """docs/paper_table.md from a fresh NUTS fit of the paper preset (minutes)."""
    script = ROOT / "scripts" / "reproduce_paper_table.py"
    out = ROOT / "docs" / "paper_table.md"
    subprocess.run([sys.executable, str(script), *PAPER_ARGS, "--out", str(out)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on drift")
    parser.add_argument("--only", choices=[t.name for t in TABLES], action="append")
    parser.add_argument(
        "--paper", action="store_true", help="also rewrite docs/paper_table.md (a NUTS fit)"
    )
    args = parser.parse_args(argv)
    text = README.read_text()
    new, drifted = text, []
    for table in TABLES:
        if args.only and table.name not in args.only:
            continue
        body, got = fresh(table)
        print(f"{table.name}: {got.seconds:.1f} s", file=sys.stderr)
        if body != shown(new, table.name):
            drifted.append(table.name)
            sys.stderr.writelines(
                difflib.unified_diff(
                    (shown(new, table.name) + "\n").splitlines(True),
                    (body + "\n").splitlines(True),
                    f"README.md ({table.name})",
                    "fresh run",
                )
            )
        new = replace(new, table.name, body)
    if args.check:
        return 1 if drifted else 0
    if new != text:
        README.write_text(new)
    print(f"README.md: {', '.join(drifted) or 'nothing'} rewritten", file=sys.stderr)
    if args.paper:
        write_paper_table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
