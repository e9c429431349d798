"""The ``kip848`` program: its sub-commands, its parser and ``main``.

Adding a sub-command: a module in this package with ``register(commands)`` (see
``coordinator.cli.registry.Commands``), listed once in ``SUBCOMMANDS`` below.
"""

from __future__ import annotations

import argparse
import os
import sys

from coordinator.cli import (
    acls,
    analytics,
    assignors,
    cluster,
    configs,
    dump_replay,
    groups,
    serve,
    simulate,
    store,
    topics,
    users,
)
from coordinator.cli.errors import UsageError
from coordinator.cli.registry import Commands

# In the order `kip848 --help` lists them.
SUBCOMMANDS = (
    serve,
    topics,
    groups,
    configs,
    acls,
    users,
    dump_replay,
    store,
    cluster,
    assignors,
    simulate,
    analytics,
)


def build() -> tuple[argparse.ArgumentParser, Commands]:
    parser = argparse.ArgumentParser(
        prog="kip848", description="A KIP-848 consumer group coordinator over gRPC."
    )
    parser.add_argument("--version", action="version", version=f"kip848 {version()}")
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND"))
    for module in SUBCOMMANDS:
        module.register(commands)
    return parser, commands


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("kip848-coordinator")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    return build()[0]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, commands = build()
    if argv and argv[0] in commands.delegated:
        return commands.delegated[argv[0]](argv[1:])
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    if args.command != "serve":
        # A client command reports a failed call itself (rpc.rpc_failed); grpc-core's own log
        # lines on stderr (a failed TLS handshake, ...) would only repeat it. GRPC_VERBOSITY
        # set by the caller wins.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"kip848 {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `kip848 dump | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
