"""Clocks. The core never reads time; the runtime passes ``now_ms`` from one of these.

Two kinds of time, as in Kafka:

* **Wall time** (``now_ms``): what Kafka defines in wall-clock terms — record timestamps,
  commit and expiry timestamps of offsets (offset retention), regex resolution times. This is
  the ``now_ms`` the core receives.
* **Timer time** (``monotonic_ms``): how long something has been silent — session and rebalance
  timeouts, classic join/sync timeouts, the retention *check* interval. Kafka's timers are
  relative delays on a monotonic clock; ours are too: the runtime's :class:`TimerTable` holds
  deadlines in timer time, so a wall-clock step (an NTP correction, an operator's ``date -s``)
  neither fires a session timeout early nor keeps a dead member for an hour.

The core computes a timer's deadline as ``now_ms + timeout`` from the wall time it was given.
:meth:`SystemClock.timer_deadline` turns that into timer time with the wall/monotonic pair of
the same ``now_ms`` reading (the runtime converts a command's timer operations right after the
command ran, with no other reading in between), so a deadline keeps exactly its delay.

``SystemClock`` reads the system's clocks (injectable, for tests of clock steps).
``ManualClock`` (``--clock manual`` and ``TestingService.AdvanceTime``; the server starts it at
the wall-clock milliseconds of start-up) moves only when ``advance`` is called: its wall and
timer times are the same, and no timer ever fires on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from coordinator.virtual import VirtualClock


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class SystemClock:
    manual = False

    def __init__(
        self,
        wall_ms: Callable[[], int] = _wall_ms,
        monotonic_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic_ms
        self._offset_ms = monotonic_ms() - wall_ms()  # timer time - wall time at last reading

    def now_ms(self) -> int:
        """Wall-clock milliseconds; also remembers how this reading maps to timer time."""
        mono = self._monotonic()
        wall = self._wall_ms()
        self._offset_ms = mono - wall
        return wall

    def monotonic_ms(self) -> int:
        """Timer time: milliseconds that only move forward, whatever the wall clock does."""
        return self._monotonic()

    def timer_deadline(self, deadline_ms: int) -> int:
        """A deadline the core computed from the last :meth:`now_ms` reading (wall time), in
        timer time: the same delay after the same instant."""
        return deadline_ms + self._offset_ms


ManualClock = VirtualClock
"""The manual clock is the harness's and the simulator's virtual clock
(``coordinator/virtual.py``): wall and timer time are the same, it moves only when advanced, and
no timer fires on its own."""
