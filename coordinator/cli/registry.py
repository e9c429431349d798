"""How a sub-command plugs into ``kip848``: its module defines ``register(commands)`` and is
listed once in ``coordinator.cli.commands.SUBCOMMANDS``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]
Delegate = Callable[[list[str]], int]


class Commands:
    """The ``kip848`` sub-command table being built.

    * ``add``: a sub-command parsed by argparse; ``func(args)`` runs it and returns the exit code.
    * ``delegate``: a sub-command that parses its own arguments (``main(argv)``), e.g. one with
      its own ``argparse`` program such as ``assignors`` and ``simulate``.
    """

    def __init__(self, sub: Any) -> None:
        self._sub = sub
        self.delegated: dict[str, Delegate] = {}

    def add(self, name: str, func: Handler, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._sub.add_parser(name, **kwargs)
        parser.set_defaults(func=func)
        return parser

    def delegate(self, name: str, main: Delegate, *, help: str) -> None:
        self._sub.add_parser(name, help=help, add_help=False)
        self.delegated[name] = main
