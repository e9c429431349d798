"""What holds a server's event loop: every callback and garbage collection timed in CPU time.

``bench/storm.py --loop-profile`` starts ``kip848 serve`` through this module
(``python bench/_loopprof.py OUT serve ...``) on asyncio's own loop (uvloop's callbacks cannot be
timed from Python): each loop callback that takes more than :data:`RECORD_MS` of the loop
thread's CPU is recorded with what it ran (a task's coroutine, or the callback's name), and so
is every garbage collection the loop's thread runs (CPU time, generation). When the server exits, ``OUT`` gets one JSON
object: the recorded callbacks and collections, for the report's "longest callbacks" and GC
columns. CPU time, not wall time, so that a busy machine, which takes the CPU away from the
server between two instructions, does not count against the server's own work.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import atexit
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

RECORD_MS = 5.0
"""Callbacks that take less CPU than this are not recorded one by one."""


def _what(handle: Any) -> str:
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    get_coro = getattr(owner, "get_coro", None)
    if get_coro is not None:
        coro = get_coro()
        return f"task {getattr(coro, '__qualname__', type(coro).__name__)}"
    func = getattr(callback, "func", callback)  # functools.partial
    return getattr(func, "__qualname__", type(func).__name__)


def install(out: str) -> None:
    callbacks: list[tuple[float, float, str]] = []
    collections: list[tuple[int, float]] = []
    began = time.monotonic()
    run = asyncio.events.Handle._run

    def timed(handle: Any) -> None:
        cpu = time.thread_time()
        run(handle)
        spent = (time.thread_time() - cpu) * 1e3
        if spent >= RECORD_MS:
            callbacks.append((round(time.monotonic() - began, 3), round(spent, 2), _what(handle)))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
    started: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if asyncio._get_running_loop() is None:
            return  # start-up and shutdown (imports), not the loop's
        if phase == "start":
            started[0] = time.thread_time()
        else:
            collections.append(
                (info["generation"], round((time.thread_time() - started[0]) * 1e3, 3))
            )

    gc.callbacks.insert(0, on_gc)

    def dump() -> None:
        Path(out).write_text(json.dumps({"callbacks": callbacks, "collections": collections}))

    atexit.register(dump)


def summary(path: str) -> dict[str, Any]:
    """The longest callbacks (CPU ms, what) and the collections (count, CPU, longest) of a
    server's record; what collections ran inside a callback also counts in that callback."""
    data = json.loads(Path(path).read_text())
    callbacks = sorted(data["callbacks"], key=lambda c: -c[1])
    collections = data["collections"]
    return {
        "longest_callbacks": [(ms, what) for _t, ms, what in callbacks[:3]],
        "callbacks_over_20ms": sum(1 for _t, ms, _w in callbacks if ms > 20),
        "gc_count": len(collections),
        "gc_cpu_ms": sum(ms for _g, ms in collections),
        "gc_longest_ms": max((ms for _g, ms in collections), default=0.0),
    }


if __name__ == "__main__":  # python bench/_loopprof.py OUT serve ... (cwd: the checkout to run)
    sys.path[0] = str(Path.cwd())  # not this script's checkout: the one whose server runs
    install(sys.argv[1])
    from coordinator.cli import main

    raise SystemExit(main(sys.argv[2:]))
