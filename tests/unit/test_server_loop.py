"""The server's event loop: both kinds run a coroutine, with the server's GIL switch interval."""

from __future__ import annotations

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
