"""What a group's request runs, on which state machine, and how it waits: one table for the
typed API (``runtime.py``) and the simulator, so both submit exactly the same commands.

A :class:`Command` is the request's group, the function of a shard it runs, whether it is a
join (a member's first heartbeat: it queues behind its shard's other commands, and a new
group's first target waits while joins keep arriving) and whether it may be answered later
(``Pending``: classic JoinGroup/SyncGroup at their barriers, joins before a group's first
target). :meth:`~.driver.Driver.request` submits one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.offsets import OffsetCommit
from legacy_bridge import messages as cm


class Command(NamedTuple):
    group_id: str
    fn: Callable[[Any], Any]
    join: bool = False
    park: bool = False


def heartbeat(req: ConsumerGroupHeartbeat, now_ms: int) -> Command:
    return Command(
        req.group_id,
        lambda s: s.consumer_group_heartbeat(req, now_ms),
        join=req.member_epoch == 0,
        park=True,
    )


def classic_join(req: cm.JoinGroup, now_ms: int) -> Command:
    return Command(req.group_id, lambda s: s.classic_groups.join(req, now_ms), park=True)


def classic_sync(req: cm.SyncGroup, now_ms: int) -> Command:
    return Command(req.group_id, lambda s: s.classic_groups.sync(req, now_ms), park=True)


def classic_heartbeat(req: cm.Heartbeat, now_ms: int) -> Command:
    return Command(req.group_id, lambda s: s.classic_groups.heartbeat(req, now_ms), park=True)


def classic_leave(req: cm.LeaveGroup, now_ms: int) -> Command:
    return Command(req.group_id, lambda s: s.classic_groups.leave(req, now_ms), park=True)


def offset_commit(req: OffsetCommit, now_ms: int, *, legacy_version: bool = False) -> Command:
    """``legacy_version``: the request came as OffsetCommit v8 or older (see
    ``Offsets.offset_commit``)."""
    return Command(
        req.group_id, lambda s: s.offset_commit(req, now_ms, legacy_version=legacy_version)
    )


COMMANDS: dict[type, Callable[[Any, int], Command]] = {
    ConsumerGroupHeartbeat: heartbeat,
    cm.JoinGroup: classic_join,
    cm.SyncGroup: classic_sync,
    cm.Heartbeat: classic_heartbeat,
    cm.LeaveGroup: classic_leave,
    OffsetCommit: offset_commit,
}
"""The command of each request type a group member sends."""


def command(req: Any, now_ms: int) -> Command:
    """The command of a member's request (:data:`COMMANDS`)."""
    return COMMANDS[type(req)](req, now_ms)
