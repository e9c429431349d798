"""Clocks. The core never reads time; the runtime passes ``now_ms`` from one of these.

``SystemClock`` is wall-clock milliseconds. ``ManualClock`` starts at the wall-clock
milliseconds of start-up and moves only when ``advance`` is called (``--clock manual`` and
``TestingService.AdvanceTime``): with it, no timer ever fires on its own.
"""

from __future__ import annotations

import time


class SystemClock:
    manual = False

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    manual = True

    def __init__(self, start_ms: int | None = None) -> None:
        self._now_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"cannot move the clock backwards ({ms} ms)")
        self._now_ms += ms
        return self._now_ms
