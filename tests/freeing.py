"""How much a piece of code frees at once: the most :class:`Tracked` objects deallocated
within one bytecode instruction of a traced thread.

Freeing a large structure is a cascade of deallocations in C, within one instruction (a
``del``, a function's return): the interpreter's lock is not handed over in between, so while
a thread frees it the event loop waits however short the switch interval. Between two
instructions the thread hands the lock over when another thread asks for it. Counted, not
timed (bench/loop_steps.py and bench/cluster_reload.py time it)."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


class Counts:
    """Deallocations of tracked objects: since each traced thread's last instruction, the most
    of those, all."""

    def __init__(self) -> None:
        self.runs: dict[int, int] = {}
        self.most = 0
        self.freed = 0

    def one(self) -> None:
        me = threading.get_ident()
        run = self.runs[me] = self.runs.get(me, 0) + 1
        self.freed += 1
        self.most = max(self.most, run)


COUNTS = Counts()


class Tracked:
    """An object whose deallocation is counted (:data:`COUNTS`)."""

    __slots__ = ("value",)

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tracked) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __del__(self) -> None:
        COUNTS.one()


class TrackedUUID(uuid.UUID):
    """A UUID (encoded as any) whose deallocation is counted."""

    __slots__ = ()

    def __del__(self) -> None:
        COUNTS.one()


_SKIPPED = {Tracked.__del__.__code__, TrackedUUID.__del__.__code__, Counts.one.__code__}


def _trace(frame: FrameType, event: str, _arg: Any) -> Callable[..., Any] | None:
    if frame.f_code in _SKIPPED:
        return None
    frame.f_trace_opcodes = True
    if event == "opcode":
        COUNTS.runs[threading.get_ident()] = 0
    return _trace


def _traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def traced(*args: Any) -> Any:
        previous = sys.gettrace()
        sys.settrace(_trace)
        try:
            return fn(*args)
        finally:
            sys.settrace(previous)

    return traced


@contextmanager
def most_freed_at_once(loop: asyncio.AbstractEventLoop | None = None) -> Iterator[Counts]:
    """Within: every instruction of this thread traced, and (``loop``) of what that loop runs
    in an executor; the counts of tracked objects freed (``most``: the most within one
    instruction of a thread; ``freed``: all)."""
    counts = COUNTS
    counts.runs.clear()
    counts.most = counts.freed = 0
    run_in_executor = None
    if loop is not None:
        run_in_executor = loop.run_in_executor

        def traced_run(executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
            assert run_in_executor is not None
            return run_in_executor(executor, _traced(fn), *args)

        loop.run_in_executor = traced_run  # type: ignore[method-assign]
    previous = sys.gettrace()
    sys.settrace(_trace)
    caller = sys._getframe(2)  # the with statement's frame: traced from its next instruction
    caller.f_trace, caller.f_trace_opcodes = _trace, True
    try:
        yield counts
    finally:
        sys.settrace(previous)
        caller.f_trace = None
        if loop is not None:
            del loop.run_in_executor  # the class's again
