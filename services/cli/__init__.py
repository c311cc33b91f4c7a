"""The ``evalset`` command line: one command, a subcommand per job.

Machine-readable output goes to stdout; progress, warnings and logs to stderr.
Exit code 0 on success, non-zero with a one-line reason on failure.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from services.cli.errors import CliError as CliError  # re-exported; commands import errors

# Several CPU "devices" let NUTS run chains in parallel; this must be set
# before JAX initialises its backend, so it lives at the entry point.
os.environ.setdefault(
    "XLA_FLAGS", f"--xla_force_host_platform_device_count={max(4, os.cpu_count() or 1)}"
)

#: modules that each add subcommands through ``register(subparsers)``, with the commands
#: each adds: a run imports only its command's module (tests/services/cli/test_cli.py checks the table)
COMMANDS: dict[str, tuple[str, ...]] = {
    "services.cli.analysis": ("significance", "items"),
    "services.cli.bt": ("bt", "elo", "annotators", "damr"),
    "services.cli.agreement": ("agreement",),
    "services.cli.gold": ("gold",),
    "services.cli.selection": ("loco", "prune"),
    "services.cli.server": ("serve", "token", "import", "export"),
    "services.cli.recommend": ("recommend", "replay"),
    "services.cli.decisions": ("decisions",),
    "services.cli.questions": ("answer",),
    "services.cli.crowd": ("crowd",),
    "services.cli.plot": ("plot",),
}
COMMAND_MODULES: tuple[str, ...] = tuple(COMMANDS)

#: packages of the optional extras (pyproject.toml), by the name they are imported as: a
#: command that needs one says which extra to install
EXTRAS: dict[str, str] = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "psycopg": "postgres",
    "ray": "ray",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with ``command`` (a known command's name) of that
    one alone, so that a run does not import the other commands' libraries."""
    parser = argparse.ArgumentParser(
        prog="evalset",
        description="Adaptive evaluation-set optimizer for human pairwise evaluation.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, commands in COMMANDS.items():
        if command is not None and command not in commands:
            continue
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue  # that group of commands is not installed
            raise
        module.register(sub)
    for child in sub.choices.values():
        _show_defaults(child)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every flag's help says its default (nested subcommands too), unless it already does."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_defaults(child)
            continue
        if (
            action.help
            and action.help != argparse.SUPPRESS
            and action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
            and "default" not in action.help
        ):
            action.help += " (default: %(default)s)"


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    known = {c for commands in COMMANDS.values() for c in commands}
    parser = build_parser(words[0] if words and words[0] in known else None)
    args = parser.parse_args(argv)
    from adaptive.core.data import DataError
    from services.cli.common import apply_map
    from services.jax_cache import configure_jax

    try:
        configure_jax()  # EVALSET_JAX_CACHE_DIR: a later run loads this one's compiled fits
        result = args.func(apply_map(args))
    except (CliError, DataError, ValueError, KeyError, FileNotFoundError) as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"evalset {args.command}: error: {message}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        package = (exc.name or "").split(".")[0]
        if package not in EXTRAS:
            raise
        print(
            f"evalset {args.command}: error: needs {package}, which is not installed: "
            f"pip install 'adaptive-evalset[{EXTRAS[package]}]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"evalset {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
