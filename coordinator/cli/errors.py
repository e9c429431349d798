"""The two ways a sub-command stops early: a usage error (exit 2) and a failure already
reported on stderr (exit 1)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad flags or configuration: printed as one clear line, exit 2."""


class CommandFailed(Exception):
    """Already reported on stderr; exit 1."""
