"""The calls the ``kip848 groups`` actions share, on one channel."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coordinator.cli.errors import CommandFailed
from coordinator.cli.report import report
from coordinator.cli.rpc import call


class GroupClient:
    """The stubs of one channel and the calls the group commands share."""

    def __init__(self, args: argparse.Namespace, channel: Any) -> None:
        from kip848.v1 import admin_pb2_grpc, consumer_group_pb2_grpc, offsets_pb2_grpc

        self.args = args
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        self.groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
        self._channel = channel
        self._listed: dict[str, Any] | None = None

    def call(self, fn: Any, request: Any) -> Any:
        return call(fn, request, self.args)

    def describe(self, group_ids: Sequence[str]) -> list[Any]:
        from kip848.v1 import consumer_group_pb2

        resp = self.call(
            self.groups.ConsumerGroupDescribe,
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=group_ids),
        )
        if resp.error_code:
            report("describe", resp.error_code, resp.error_message)
            raise CommandFailed
        return list(resp.groups)

    def describe_classic(self, group_id: str) -> Any:
        """A group as DescribeGroups describes it (classic groups; ``generation_id`` too)."""
        from kip848.v1 import classic_group_pb2, classic_group_pb2_grpc

        stub = classic_group_pb2_grpc.ClassicGroupServiceStub(self._channel)
        resp = self.call(
            stub.DescribeGroups, classic_group_pb2.DescribeGroupsRequest(group_ids=[group_id])
        )
        if resp.error_code:
            report("describe", resp.error_code, resp.error_message)
            raise CommandFailed
        return resp.groups[0]

    def listed(self) -> dict[str, Any]:
        """Every group the coordinator lists, by id (asked once per command)."""
        from kip848.v1 import admin_pb2

        if self._listed is None:
            resp = self.call(self.admin.ListGroups, admin_pb2.ListGroupsRequest())
            if resp.error_code:
                report("list groups", resp.error_code, resp.error_message)
                raise CommandFailed
            self._listed = {g.group_id: g for g in resp.groups}
        return self._listed

    def topics(self) -> dict[str, int]:
        from kip848.v1 import admin_pb2

        resp = self.call(self.admin.ListTopics, admin_pb2.ListTopicsRequest())
        if resp.error_code:
            report("list topics", resp.error_code, resp.error_message)
            raise CommandFailed
        return {t.name: t.num_partitions for t in resp.topics}

    def topic_racks(self) -> dict[str, dict[int, frozenset[str]]]:
        """Topic name -> partition -> the racks of its replicas (topics with racks only)."""
        from kip848.v1 import admin_pb2

        resp = self.call(self.admin.ListTopics, admin_pb2.ListTopicsRequest())
        if resp.error_code:
            report("list topics", resp.error_code, resp.error_message)
            raise CommandFailed
        return {
            t.name: {p: frozenset(e.racks) for e in t.replica_racks for p in e.partitions}
            for t in resp.topics
            if t.replica_racks
        }

    def committed(
        self, group_id: str, wanted: dict[str, list[int]] | None = None
    ) -> dict[tuple[str, int], Any]:
        """(topic, partition) -> committed partition entry; all of the group's when ``wanted`` is None."""
        from kip848.v1 import common_pb2, offsets_pb2

        group = offsets_pb2.OffsetFetchRequest.Group(group_id=group_id)
        if wanted is not None:
            group.topics.CopyFrom(
                common_pb2.TopicPartitionIndexesList(
                    items=[
                        common_pb2.TopicPartitionIndexes(name=t, partition_indexes=ps)
                        for t, ps in wanted.items()
                    ]
                )
            )
        resp = self.call(self.offsets.OffsetFetch, offsets_pb2.OffsetFetchRequest(groups=[group]))
        code, message = resp.error_code, resp.error_message
        if not code and resp.groups[0].error_code:
            code, message = resp.groups[0].error_code, resp.groups[0].error_message
        if code:
            report(f"fetch offsets of group {group_id}", code, message)
            raise CommandFailed
        out = {}
        for t in resp.groups[0].topics:
            for p in t.partitions:
                if p.error_code:
                    report(
                        f"fetch offset of {t.name}-{p.partition_index}",
                        p.error_code,
                        p.error_message,
                    )
                    raise CommandFailed
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p
        return out

    def group_state(self, group_id: str) -> tuple[str, str, int] | None:
        """(type, state, members) of a group, None if the coordinator does not know it."""
        [g] = self.describe([group_id])
        if not g.error_code:
            return "consumer", g.group_state, len(g.members)
        if g.error_code != 69:  # GROUP_ID_NOT_FOUND: maybe a classic or offsets-only group
            report(f"group {group_id}", g.error_code, g.error_message)
            raise CommandFailed
        listed = self.listed().get(group_id)
        return None if listed is None else (listed.group_type, listed.group_state, 0)

    def log_offsets(
        self, partitions: Iterable[tuple[str, int]], timestamp: int | Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], Any] | None:
        """Offsets in the partitions' logs (``AdminService.ListOffsets``, from the upstream
        broker): (topic, partition) -> its answer (``offset``, ``timestamp``, ``error_code``,
        ``error_message``). ``timestamp``: one for every partition or one each (-1 the log end,
        -2 the log start, or ms since the epoch). None when the coordinator keeps no logs (it
        runs without ``--kafka-upstream``)."""
        from kip848.v1 import admin_pb2

        req = admin_pb2.ListOffsetsRequest()
        topics: dict[str, Any] = {}
        for topic, partition in partitions:
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = req.topics.add(name=topic)
            ts = timestamp if isinstance(timestamp, int) else timestamp[(topic, partition)]
            entry.partitions.add(partition_index=partition, timestamp=ts)
        if not topics:
            return {}
        resp = self.call(self.admin.ListOffsets, req)
        if resp.error_code == UNSUPPORTED_VERSION:
            return None
        if resp.error_code:
            report("list log offsets", resp.error_code, resp.error_message)
            raise CommandFailed
        return {(t.name, p.partition_index): p for t in resp.topics for p in t.partitions}


UNSUPPORTED_VERSION = 35
LATEST, EARLIEST = -1, -2
"""ListOffsets' special timestamps: the log end offset, the log start offset."""
