"""The command line's one error type, below :mod:`services.cli` and every command module."""

from __future__ import annotations


class CliError(Exception):
    """A failure to report as one line on stderr with a non-zero exit code."""


__all__ = ["CliError"]
