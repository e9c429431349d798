"""coordinator/server/eager.py: a coroutine's first step runs at once, in a context of its own;
a task finishes it only if it waits, and cancelling that task cancels the coroutine."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from coordinator.server import eager

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="outside")


async def test_a_coroutine_that_does_not_wait_runs_now_without_a_task() -> None:
    steps: list[str] = []

    async def quick() -> None:
        SEEN.set("inside")
        steps.append(SEEN.get())

    assert eager.start(quick()) is None
    assert steps == ["inside"]
    assert SEEN.get() == "outside"  # its context was a copy, as a task's is


async def test_one_that_waits_is_finished_by_a_task_that_can_cancel_it() -> None:
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def slow() -> str:
        steps.append("first")
        got = await gate
        steps.append(got)
        return got.upper()

    task = eager.start(slow())
    assert task is not None and steps == ["first"]
    gate.set_result("then")
    assert await task == "THEN" and steps == ["first", "then"]

    cancelled: list[bool] = []

    async def forever() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = eager.start(forever())
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]


async def test_an_error_of_the_first_step_is_raised_at_once() -> None:
    async def broken() -> None:
        raise ValueError("first step")

    with pytest.raises(ValueError, match="first step"):
        eager.start(broken())
