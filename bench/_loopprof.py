"""What holds a server's event loop: every callback and garbage collection timed in CPU time.

``bench/storm.py --loop-profile`` starts ``kip848 serve`` through this module
(``python bench/_loopprof.py OUT serve ...``) on asyncio's own loop (uvloop's callbacks cannot be
timed from Python): each loop callback that takes more than :data:`RECORD_MS` of the loop
thread's CPU is recorded with what it ran (a task's coroutine, or the callback's name), and so
is every garbage collection the loop's thread runs (CPU time, generation). When the server exits, ``OUT`` gets one JSON
object: the recorded callbacks and collections, for the report's "longest callbacks" and GC
columns. CPU time, not wall time, so that a busy machine, which takes the CPU away from the
server between two instructions, does not count against the server's own work.

With ``LOOPPROF_STACKS=PATH`` in the environment, two more things for finding out what a long
step was: the loop thread's stack sampled every millisecond while a callback, or the loop
iteration it is part of, has run for 10 ms or more (the 60 commonest, counted, to ``PATH``), and every loop iteration whose work took
20 ms or more of wall time (when, wall ms, CPU ms, callbacks ready at its start: ``iterations``
in ``OUT``). ``bench/storm.py`` then keeps ``OUT`` as ``PATH.json`` and the load generator's
result (its per-second timeline) as ``PATH.gen.json``.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import asyncio.events
import atexit
import gc
import json
import os
import sys
import threading
import time
from collections import Counter
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


_running: list[Any] = [None, 0.0, 0.0]
"""The callback the loop runs now, when it began, and when the loop's iteration began its
work (the selector's wait over; for the stack sampler)."""
SAMPLE_AFTER_S = 0.01
"""Stacks are sampled once a callback, or its iteration's work, has run this long (wall)."""


def _sample_stacks(out: str) -> None:
    """Every millisecond, the loop thread's stack while a callback has run longer than
    ``SAMPLE_AFTER_S`` or its iteration's work has: the innermost frames counted per callback,
    written to ``out``."""
    main = threading.main_thread().ident
    assert main is not None
    counts: Counter[str] = Counter()

    def sample() -> None:
        while True:
            time.sleep(0.001)
            handle, began, iteration = _running
            if handle is None or time.monotonic() - min(began, iteration) < SAMPLE_AFTER_S:
                continue
            frame = sys._current_frames().get(main)
            names: list[str] = []
            while frame is not None and len(names) < 12:
                code = frame.f_code
                names.append(f"{Path(code.co_filename).name}:{code.co_name}:{frame.f_lineno}")
                frame = frame.f_back
            counts[f"{_what(handle)} | " + " < ".join(names)] += 1

    threading.Thread(target=sample, daemon=True).start()

    def dump() -> None:
        Path(out).write_text("\n".join(f"{n} {s}" for s, n in counts.most_common(60)))

    atexit.register(dump)


def _time_iterations(began: float) -> list[tuple[float, float, float, int]]:
    """Loop iterations whose work (wall time outside the selector's wait) took 20 ms or more:
    (when, wall ms, the loop thread's CPU ms, callbacks run)."""
    import selectors

    long: list[tuple[float, float, float, int]] = []
    waited = [0.0]
    select = selectors.EpollSelector.select

    def timed_select(self: Any, timeout: float | None = None) -> Any:
        t = time.monotonic()
        try:
            return select(self, timeout)
        finally:
            _running[2] = time.monotonic()
            waited[0] += _running[2] - t

    selectors.EpollSelector.select = timed_select  # type: ignore[method-assign]
    base: Any = asyncio.base_events.BaseEventLoop
    run_once = base._run_once

    def timed_run_once(self: Any) -> None:
        waited[0] = 0.0
        n = len(self._ready)
        t, cpu = time.monotonic(), time.thread_time()
        run_once(self)
        wall = (time.monotonic() - t - waited[0]) * 1e3
        if wall >= 20:
            cpu_ms = (time.thread_time() - cpu) * 1e3
            long.append((round(t - began, 3), round(wall, 1), round(cpu_ms, 1), n))

    base._run_once = timed_run_once
    return long


def install(out: str) -> None:
    callbacks: list[tuple[float, float, str]] = []
    collections: list[tuple[int, float]] = []
    began = time.monotonic()
    run = asyncio.events.Handle._run

    def timed(handle: Any) -> None:
        cpu = time.thread_time()
        _running[0] = handle
        _running[1] = time.monotonic()
        run(handle)
        _running[0] = None
        spent = (time.thread_time() - cpu) * 1e3
        if spent >= RECORD_MS:
            callbacks.append((round(time.monotonic() - began, 3), round(spent, 2), _what(handle)))

    asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
    stacks_out = os.environ.get("LOOPPROF_STACKS")
    if stacks_out:
        _sample_stacks(stacks_out)
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
    iterations = _time_iterations(began) if os.environ.get("LOOPPROF_STACKS") else []

    def dump() -> None:
        Path(out).write_text(
            json.dumps(
                {"callbacks": callbacks, "collections": collections, "iterations": iterations}
            )
        )

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
