"""``kip848 simulate``: delegated to ``coordinator.cli.simulation`` (seeded simulations and the
exhaustive explorer of ``coordinator.sim``; docs/simulation.md), loaded when it runs."""

from __future__ import annotations

from coordinator.cli.registry import Commands


def run(argv: list[str]) -> int:
    from coordinator.cli.simulation import main

    return main(argv)


def register(commands: Commands) -> None:
    commands.delegate(
        "simulate",
        run,
        help="deterministic simulation / exhaustive exploration (see docs/simulation.md)",
    )
