"""Every command's help names each flag's default."""

from __future__ import annotations

import argparse

from services.cli import build_parser


def _commands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield name, child
                yield from _commands(child)


def test_every_flag_with_a_default_says_it():
    missing = []
    for name, command in _commands(build_parser()):
        help_text = command.format_help()  # formats every %(default)s
        assert help_text
        for action in command._actions:
            if not action.option_strings or action.help in (None, argparse.SUPPRESS):
                continue
            if action.default in (None, False, argparse.SUPPRESS):
                continue
            if "default" not in action.help:
                missing.append(f"{name} {action.option_strings[0]}")
    assert missing == []


def test_the_command_table_names_what_each_module_registers():
    import importlib

    from services.cli import COMMANDS

    for module, commands in COMMANDS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert tuple(sub.choices) == commands, module
    for commands in COMMANDS.values():
        for command in commands:
            parser = build_parser(command)
            (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            assert tuple(sub.choices) == commands


def test_a_significance_run_does_not_load_the_store_or_the_recommender():
    import subprocess
    import sys

    code = (
        "import sys; from services.cli import build_parser; build_parser('significance');"
        "print(sorted(m for m in ('alembic', 'sqlalchemy', 'services.crowd', "
        "'adaptive.recommend') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
