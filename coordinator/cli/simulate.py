"""``kip848 simulate``: delegated to ``coordinator.sim.cli`` (seeded simulations and the
exhaustive explorer; docs/simulation.md)."""

from __future__ import annotations

from coordinator.cli.registry import Commands


def run(argv: list[str]) -> int:
    from coordinator.sim.cli import main

    return main(argv)


def register(commands: Commands) -> None:
    commands.delegate(
        "simulate",
        run,
        help="deterministic simulation / exhaustive exploration (see docs/simulation.md)",
    )
