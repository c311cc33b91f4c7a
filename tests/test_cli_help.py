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
