"""``kip848 assignors``: delegated to ``assignors.cli`` (list the installed assignors, run the
conformance kit)."""

from __future__ import annotations

from coordinator.cli.registry import Commands


def run(argv: list[str]) -> int:
    from assignors.cli import main

    return main(argv)


def register(commands: Commands) -> None:
    commands.delegate("assignors", run, help="list and inspect partition assignors")
