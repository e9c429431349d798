"""The server's event loop: both kinds run a coroutine, with the server's GIL switch interval."""

from __future__ import annotations

import gc
import sys

import pytest

from coordinator.server.loop import LOOPS, SWITCH_INTERVAL_S, run


@pytest.mark.parametrize("kind", LOOPS)
def test_a_server_loop_runs_with_the_short_switch_interval(kind: str) -> None:
    before = sys.getswitchinterval()

    async def seen() -> float:
        return sys.getswitchinterval()

    try:
        assert run(seen(), kind) == pytest.approx(SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
    assert SWITCH_INTERVAL_S < 0.005  # shorter than CPython's default


def test_an_unknown_loop_is_refused() -> None:
    async def nothing() -> None:
        return None

    coro = nothing()
    with pytest.raises(ValueError, match="unknown event loop 'tokio'"):
        run(coro, "tokio")
    coro.close()


def test_a_server_loop_freezes_what_survives_a_full_collection() -> None:
    """The coordinator's long-lived state is not rescanned by every later full collection."""

    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: tracked by the collector

    async def collect() -> tuple[int, int]:
        kept = [Node() for _ in range(1_000)]
        before = gc.get_freeze_count()
        gc.collect(2)
        after = gc.get_freeze_count()
        assert all(n.me is n for n in kept)  # alive and untouched
        return before, after

    gc.unfreeze()
    try:
        before, after = run(collect(), "asyncio")
        assert after >= before + 1_000
        frozen = gc.get_freeze_count()
        outside = [Node() for _ in range(1_000)]
        gc.collect(2)  # outside a server loop: the survivors are not frozen
        # (frozen objects that die meanwhile leave the count: it may only shrink)
        assert gc.get_freeze_count() <= frozen
        assert all(n.me is n for n in outside)
    finally:
        gc.unfreeze()
