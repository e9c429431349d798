"""CI kill -9 loop (#13): 50 cycles of SIGKILL under a load of acknowledged writes, over one
store, with 0 acknowledged writes lost and a store that replays at the end. Longer runs:
``bash scripts/soak`` (killloop.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from . import killloop
from .server import ForkServer

CYCLES = 50


@pytest.mark.slow
def test_kill9_loop_loses_no_acknowledged_write(tmp_path: Path) -> None:
    with ForkServer() as fork:
        report = asyncio.run(
            killloop.run(
                tmp_path / "data",
                CYCLES,
                lambda d: fork.start(d, *killloop.SERVER_FLAGS),
                seed=848,
                min_s=0.1,
                max_s=0.5,
            )
        )
    assert report.lost == [], "\n".join(report.lost[:20])
    assert report.cycles == CYCLES
    # Under load: thousands of writes acknowledged, of every kind checked.
    assert report.acked_writes > 2_000 and report.acked_topics > 50 and report.acked_joins > 50
    assert report.replay["ok"] is True and report.replay["problems"] == []
    assert report.replay["topics"] == report.acked_topics + 1 or report.replay["topics"] > (
        report.acked_topics
    )


def test_the_check_notices_a_lost_write(tmp_path: Path) -> None:
    """The loop's check is not vacuous: an acknowledgement the store does not hold is reported."""
    with ForkServer() as fork:
        server = fork.start(tmp_path / "data")
        try:

            async def probe() -> list[str]:
                async with grpc.aio.insecure_channel(server.address) as channel:
                    await killloop.wait_loaded(channel)
                    ledger = killloop.Ledger()
                    ledger.acked[("soak-0", 3)] = 17
                    ledger.sent[("soak-0", 3)] = 17
                    ledger.topics.add("never-created")
                    ledger.members["ghost"] = 1
                    return await killloop.check(channel, ledger)

            lost = asyncio.run(probe())
        finally:
            assert server.stop() == 0
    assert lost == [
        "offset ('soak-0', 3): acknowledged 17, found -1",
        "topic never-created acknowledged, missing",
        "member ghost: acknowledged epoch 1, found None",
    ]
