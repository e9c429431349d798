"""Coroutines started at once: the first step of a request's handler runs now, and a task is
made only if it has to wait.

Most requests finish without waiting for anything (a steady heartbeat: no write to wait for),
so a task per request — created, scheduled, stepped one loop iteration later, then collected —
is most of what they would cost beyond their own work. :func:`start` runs the coroutine's first
step in a copy of the current context (as a task would), and hands what is left, if anything,
to a task that finishes it (:class:`Resume`): cancelling that task cancels the coroutine, as
it would have. The Kafka listener serves its requests this way, and our gRPC server its calls.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any


def start(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any] | None:
    """Run ``coro`` up to its first wait, now; None if it finished, else the task that
    finishes it. An exception of its first step is raised here."""
    context = contextvars.copy_context()
    try:
        waiting = context.run(coro.send, None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_finish(coro, waiting), context=context)


async def _finish(coro: Coroutine[Any, Any, Any], waiting: Any) -> Any:
    return await Resume(coro, waiting)


class Resume:
    """Awaiting it finishes a coroutine that was started by hand (``coro.send(None)``) and
    is suspended on ``waiting`` (what it yielded): the same steps ``await coro`` would take
    from there, inside the awaiting task."""

    __slots__ = ("coro", "waiting")

    def __init__(self, coro: Any, waiting: Any) -> None:
        self.coro, self.waiting = coro, waiting

    def __await__(self) -> Any:
        coro, waiting = self.coro, self.waiting
        while True:
            try:
                yield waiting
            except BaseException as exc:  # noqa: BLE001 - passed on to the coroutine
                try:
                    waiting = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    waiting = coro.send(None)
                except StopIteration as stop:
                    return stop.value
