"""Shared pieces of the subcommands: common arguments, data loading and output formats."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

FORMATS = ("table", "json", "csv")


class DefaultsHelp(argparse.RawDescriptionHelpFormatter):
    """Help that shows each flag's default (when it has one and does not say it already)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "default" in text
            or action.default in (None, argparse.SUPPRESS, False)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


def add_data_args(parser: argparse.ArgumentParser, *, formats: Sequence[str] = FORMATS) -> None:
    """--data, --dimension, --format and --seed, as every analysis subcommand takes them."""
    parser.add_argument(
        "--data",
        required=True,
        help="judgments: CSV, TSV, JSON array, JSONL or Parquet, in the common schema or a "
        "Chatbot Arena battle log (model_a, model_b, winner)",
    )
    add_map_arg(parser)
    parser.add_argument(
        "--dimension", help="analyse only this dimension (default: every dimension)"
    )
    parser.add_argument(
        "--format",
        choices=list(formats),
        default=formats[0],
        help="output format (default: %(default)s; tables are drawn with rich on a terminal)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="random seed; results are reproducible (default: 0)"
    )


class MappedPath(str):
    """A judgments file named on the command line with its ``--map`` (a ``str``, so a command
    can still take its folder; :func:`adaptive.core.data.read_judgments` reads the map)."""

    column_map: Any = None


def add_map_arg(parser: argparse.ArgumentParser, *, dest: str = "data") -> None:
    """``--map`` for the judgments file in ``dest`` (applied by :func:`apply_map`)."""
    parser.add_argument(
        "--map",
        action="append",
        metavar="COLUMN=FILE_COLUMN,...|FILE",
        help="the file's own column names for the schema's: item_id=idx,system_a=model_1,"
        "system_b=model_2 (values too: winner:1=a,winner:2=b), or a .toml/.json mapping "
        "file; repeatable (docs/python_api.md, bring your own data)",
    )
    parser.set_defaults(map_dest=dest)


def apply_map(args: argparse.Namespace) -> argparse.Namespace:
    """The parsed ``--map`` attached to the file it maps (checked before the command runs)."""
    from adaptive.core.column_map import ColumnMap

    dest = getattr(args, "map_dest", None)
    if dest is None or not getattr(args, "map", None):
        return args
    if getattr(args, dest, None) is None:
        raise ValueError(f"--map maps the columns of a file: give it with --{dest}")
    path = MappedPath(getattr(args, dest))
    path.column_map = ColumnMap.of(args.map)
    setattr(args, dest, path)
    return args


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def render_rows(
    rows: list[dict[str, Any]],
    fmt: str,
    *,
    columns: Sequence[str] | None = None,
    floatfmt: str = ".3f",
) -> str:
    """Rows of flat dicts as a text table, a JSON array or CSV."""
    columns = list(columns or (rows[0].keys() if rows else []))
    if fmt == "json":
        return json.dumps([{k: _clean(r.get(k)) for k in r} for r in rows], indent=1)
    if fmt == "csv":  # text cells that would start a spreadsheet formula are escaped
        from evalset.files import rows_to_csv

        cleaned = ({k: _clean(r.get(k)) for k in columns} for r in rows)
        return rows_to_csv(cleaned, columns).rstrip("\n")
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")

    def cell(v: Any) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, float):
            return format(v, floatfmt)
        return "" if v is None else str(v)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for b in body:
        out.append("  ".join(v.ljust(w) for v, w in zip(b, widths)))
    return "\n".join(out)


def _rich_table(rows: list[dict[str, Any]], columns: Sequence[str] | None) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = list(columns or (rows[0].keys() if rows else []))
    table = Table(show_edge=False, header_style="bold", pad_edge=False)
    for c in columns:
        numeric = any(isinstance(r.get(c), int | float) and not isinstance(r.get(c), bool)
                      for r in rows)  # fmt: skip
        table.add_column(c, justify="right" if numeric else "left")
    for r in rows:
        table.add_row(*[_cell(r.get(c)) for c in columns])
    Console().print(table)


def _cell(v: Any, floatfmt: str = ".3f") -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, floatfmt)
    return "" if v is None else str(v)


def emit(rows: list[dict[str, Any]], fmt: str, *, columns: Sequence[str] | None = None) -> None:
    """Rows to stdout: a rich table on a terminal, otherwise the plain text table (stable
    for pipes and files), JSON or CSV."""
    if fmt == "table" and sys.stdout.isatty():
        _rich_table(rows, columns)
        return
    print(render_rows(rows, fmt, columns=columns), file=sys.stdout)


@contextlib.contextmanager
def spinner(message: str, *, quiet: bool = False) -> Iterator[None]:
    """A spinner with the elapsed time on stderr while a long step runs (rich; nothing when
    ``quiet`` or when stderr is not a terminal, where a line is logged when it ends)."""
    import time

    if quiet:
        yield
        return
    start = time.perf_counter()
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(message):
            yield
    else:
        yield
    log(f"{message}: done in {time.perf_counter() - start:.1f} s")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def bt_method(method: str) -> str:
    """A Bradley-Terry fit's internal method name: ``fast`` is the Laplace path."""
    return "laplace" if method == "fast" else method


def dimensions_of(judgments: pl.DataFrame, only: str | None = None) -> list[str]:
    """The dimensions to analyse: ``only`` (``--dimension``), else every one in file order.

    A dimension the data does not have is reported by the analysis itself, with the list
    of those it has.
    """
    if only:
        return [only]
    return judgments["dimension"].unique(maintain_order=True).to_list()


@contextlib.contextmanager
def progress_bar(label: str, *, quiet: bool = False) -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``: a rich progress bar on a terminal's stderr, otherwise
    a log line at every tenth of the work (nothing when ``quiet``)."""
    if quiet:
        yield lambda done, total: None
        return
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        with Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
        ) as bar:  # fmt: skip
            task = bar.add_task(label, total=None)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield update
        return
    shown = {"step": -1}

    def log_update(done: int, total: int) -> None:
        step = (10 * done) // max(total, 1)
        if step != shown["step"]:
            shown["step"] = step
            log(f"{label}: {done}/{total}")

    yield log_update
