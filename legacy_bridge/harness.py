"""The deterministic driver with the legacy bridge: :class:`CoreHarness` on a
:class:`~legacy_bridge.shard.BridgedShard`, plus classic-client helpers."""

from __future__ import annotations

from typing import Any

from coordinator.core.commands import Pending, Result
from coordinator.core.harness import CoreHarness

from . import messages as m
from .protocol import AssignmentMessage, Subscription, decode_assignment, encode_subscription
from .shard import BridgedShard


def subscription(
    topics: list[str] | tuple[str, ...],
    *,
    version: int = 3,
    owned: dict[str, list[int]] | None = None,
    generation_id: int = -1,
    rack_id: str | None = None,
) -> bytes:
    return encode_subscription(
        Subscription(
            version=version,
            topics=tuple(topics),
            owned_partitions=tuple((t, tuple(ps)) for t, ps in sorted((owned or {}).items()))
            if version >= 1
            else (),
            generation_id=generation_id if version >= 2 else -1,
            rack_id=rack_id if version >= 3 else None,
        )
    )


class ClassicHarness(CoreHarness):
    shard_class = BridgedShard
    shard: BridgedShard

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)

    def _call(self, res: Result[Any]) -> Any:
        return self._commit(res).response

    def join_group(
        self,
        member_id: str = "",
        topics: tuple[str, ...] | list[str] = ("foo",),
        *,
        group_id: str = "grp",
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        instance_id: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        owned: dict[str, list[int]] | None = None,
        version: int = 3,
        protocol_type: str = "consumer",
    ) -> Any:
        if protocols is None:
            protocols = (("range", subscription(topics, version=version, owned=owned)),)
        req = m.JoinGroup(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=protocols,
        )
        return self._call(self.shard.classic_join(req, self.now_ms))

    def sync_group(
        self,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group_id: str = "grp",
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Any:
        req = m.SyncGroup(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=tuple(sorted((assignments or {}).items())),
        )
        return self._call(self.shard.classic_sync(req, self.now_ms))

    def classic_heartbeat(
        self,
        member_id: str,
        generation_id: int,
        *,
        group_id: str = "grp",
        instance_id: str | None = None,
    ) -> m.HeartbeatResponse:
        req = m.Heartbeat(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
        )
        return self._call(self.shard.classic_heartbeat(req, self.now_ms))

    def leave_group(
        self, *members: m.LeaveMember | str, group_id: str = "grp"
    ) -> m.LeaveGroupResponse:
        ms = tuple(
            x if isinstance(x, m.LeaveMember) else m.LeaveMember(member_id=x) for x in members
        )
        return self._call(
            self.shard.classic_leave(m.LeaveGroup(group_id=group_id, members=ms), self.now_ms)
        )

    def resolve(self, response: Any) -> Any:
        """The response itself, or the completion of a ``Pending`` (None if still waiting)."""
        if isinstance(response, Pending):
            return self.completions.get(response.token)
        return response

    @staticmethod
    def assigned(sync: m.SyncGroupResponse) -> dict[str, list[int]]:
        a = decode_assignment(sync.assignment) if sync.assignment else AssignmentMessage()
        return {t: sorted(ps) for t, ps in a.assigned_partitions}
