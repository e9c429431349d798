"""A batch: the records of many commands, written by one append, and everything that waits for
it (the driver's group commit, ``driver.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.core.events import LogEvent
from coordinator.core.records import Record
from coordinator.core.timers import TimerOp

from .write_timeout import Watched

__all__ = ["Batch"]


class Batch:
    """Records of many commands, written by one append."""

    __slots__ = (
        "cluster",
        "commands",
        "completions",
        "end_marks",
        "error",
        "events",
        "groups",
        "offloads",
        "records",
        "regex_resolutions",
        "resolved",
        "start_marks",
        "then",
        "timed",
        "timeout",
        "timeout_at",
        "timer_ops",
        "waiters",
        "watches",
    )

    def __init__(self, start_marks: dict[int, int]) -> None:
        self.records: list[Record] = []  # encoded by the writer, off the loop
        self.cluster: list[Record] = []  # those of the cluster log, for ``Driver.committed``
        self.timer_ops: dict[int, list[TimerOp]] = {}  # machine -> its commands' timer ops
        # machine -> its mark just before its first records in this batch: what it rolls back
        # to if the batch fails (only the machines with records in it)
        self.start_marks = start_marks
        self.end_marks: list[int] | None = None
        self.commands = 0
        self.completions: list[tuple[int, int, Any]] = []  # (machine, token, response)
        self.events: list[LogEvent] = []  # written once durable, dropped on failure
        # shard -> the groups (None: the shard as a whole) it marked uncommitted with this batch
        self.groups: dict[int, set[str | None]] = {}
        self.offloads: list[tuple[int, str]] = []  # (machine, group): computations to start
        self.regex_resolutions: list[tuple[int, str]] = []  # (machine, group): to resolve
        # (caller's future, its response, its state machine; None: the driver's own wait)
        self.waiters: list[tuple[Any, Any, int | None]] = []
        self.then: list[Callable[[BaseException | None], Any]] = []  # the driver's own
        self.watches: list[Watched] = []  # told to the core if the write fails or times out
        # (when its wait times out: host.perf(), a caller's future, a parked request's
        # (machine, token) or a Watched, None or a cluster-log command's bound), in the order
        # of their timeouts: what the write timeout answers (WriteTimeouts.time)
        self.timed: list[tuple[float, Any, tuple[int, str] | None]] = []
        self.timeout: Any = None  # the host's handle of the next write-timeout check
        self.timeout_at = 0.0  # when it runs (host.perf())
        self.resolved = False
        self.error: BaseException | None = None  # why its write failed
