"""The calls the ``kip848 groups`` actions share.

Among several coordinator nodes (docs/ha.md) a group's requests go to the node leading its
coordinator partition, found with FindCoordinator through ``--bootstrap-server`` (and found
again, within ``--timeout``, when the answer says NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE
for the whole request: the group moved); what every node answers for its own groups
(ListGroups) is asked of every node DescribeCluster names. A single node is all of these."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from coordinator.cli.errors import CommandFailed
from coordinator.cli.report import report
from coordinator.cli.rpc import (
    LOAD_IN_PROGRESS,
    RETRY_FIRST_S,
    RETRY_MAX_S,
    call,
    channel,
    nothing_done,
    retried,
)

MOVED = (15, 16)
"""COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the group's coordinator is elsewhere now."""
CLUSTER_AUTHORIZATION_FAILED = 31
UNSETTLED = (LOAD_IN_PROGRESS, 15)
"""COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE: DescribeCluster asked again."""


class GroupClient:
    """The stubs of one node's channel and the calls the group commands share; the clients of
    the other nodes are made as needed (:meth:`for_group`, :meth:`every_node`)."""

    def __init__(self, args: argparse.Namespace, channel: Any, address: str | None = None) -> None:
        from kip848.v1 import (
            admin_pb2_grpc,
            classic_group_pb2_grpc,
            consumer_group_pb2_grpc,
            offsets_pb2_grpc,
        )

        self.args = args
        self.address = address or args.bootstrap_server
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        self.groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
        self.classic = classic_group_pb2_grpc.ClassicGroupServiceStub(channel)
        self._channel = channel
        self._listed: dict[str, Any] | None = None
        self._nodes: dict[str, GroupClient] = {self.address: self}
        self._coordinators: dict[str, GroupClient] = {}
        self._every: list[GroupClient] | None = None

    def call(self, fn: Any, request: Any) -> Any:
        return call(fn, request, self.args)

    def close(self) -> None:
        """Close the channels this client opened to other nodes."""
        for client in self._nodes.values():
            if client is not self:
                client._channel.close()

    # -- several nodes ------------------------------------------------------------------------

    def at(self, address: str) -> GroupClient:
        """The client of the node at ``address`` (this one for its own address)."""
        if address not in self._nodes:
            self._nodes[address] = GroupClient(self.args, channel(self.args, address), address)
        return self._nodes[address]

    def for_group(self, group_id: str) -> GroupClient:
        """The client of ``group_id``'s coordinator, as FindCoordinator through this node names
        it (this node itself when no coordinator can be named: its answer then says why)."""
        found = self._coordinators.get(group_id)
        if found is not None:
            return found
        if len(self.every_node()) == 1:
            return self  # one node: everything goes to --bootstrap-server, as it is given
        from kip848.v1 import classic_group_pb2

        resp = self.call(
            self.classic.FindCoordinator,
            classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id]),
        )
        entry = next((c for c in resp.coordinators if c.key == group_id), None)
        if resp.error_code or entry is None or entry.error_code:
            return self
        host = f"[{entry.host}]" if ":" in entry.host else entry.host
        found = self._coordinators[group_id] = self.at(f"{host}:{entry.port}")
        return found

    def call_group(self, group_id: str, method: Callable[[GroupClient], Any], request: Any) -> Any:
        """``method(client)(request)`` on ``group_id``'s coordinator; found again while the
        answer says the group is not there (bounded by ``--timeout``)."""
        deadline = time.monotonic() + self.args.timeout
        pause = RETRY_FIRST_S
        while True:
            client = self.for_group(group_id)
            resp = client.call(method(client), request)
            if not nothing_done(resp, MOVED) or time.monotonic() + pause >= deadline:
                return resp
            self._coordinators.pop(group_id, None)
            time.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def every_node(self) -> list[GroupClient]:
        """The clients of every live node (DescribeCluster, asked once); this one alone for a
        single node, or when the server does not say (a principal without DESCRIBE on the
        cluster, a server without the RPC). A node still loading is asked again within
        ``--timeout``; still loading then, the command fails (its own groups are not all)."""
        if self._every is None:
            self._every = [self]
            import grpc

            from kip848.v1 import admin_pb2

            try:  # asked again while the node loads, within --timeout
                resp = retried(
                    self.admin.DescribeCluster,
                    admin_pb2.DescribeClusterRequest(),
                    self.args,
                    UNSETTLED,
                )
            except grpc.RpcError:
                return self._every
            if resp.error_code in UNSETTLED:  # not this node's groups alone, as if all
                report("describe cluster", resp.error_code, resp.error_message)
                raise CommandFailed
            if not resp.error_code and len(resp.nodes) > 1:
                self._every = [
                    self.at(f"[{n.host}]:{n.port}" if ":" in n.host else f"{n.host}:{n.port}")
                    for n in resp.nodes
                ]
        return self._every

    def _by_node(self, group_ids: Sequence[str]) -> list[list[str]]:
        """``group_ids`` (each once) grouped by their coordinator, in the order given."""
        by_node: dict[str, list[str]] = {}
        for g in dict.fromkeys(group_ids):
            by_node.setdefault(self.for_group(g).address, []).append(g)
        return list(by_node.values())

    # -- the calls ----------------------------------------------------------------------------

    def describe(self, group_ids: Sequence[str]) -> list[Any]:
        """ConsumerGroupDescribe of ``group_ids``, each asked of its coordinator (the groups of
        one node in one request), in the order given."""
        described: dict[str, Any] = {}
        for ids in self._by_node(group_ids):
            for g, d in self._describe_at(ids).items():
                described[g] = d
        return [described[g] for g in group_ids]

    def _describe_at(self, group_ids: list[str]) -> dict[str, Any]:
        from kip848.v1 import consumer_group_pb2

        request = consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=group_ids)
        resp = self.call_group(group_ids[0], lambda c: c.groups.ConsumerGroupDescribe, request)
        if resp.error_code:
            report("describe", resp.error_code, resp.error_message)
            raise CommandFailed
        out = {d.group_id: d for d in resp.groups}
        moved = [d.group_id for d in resp.groups if d.error_code in MOVED]
        if len(moved) < len(group_ids):  # some moved meanwhile: each asked again, alone
            for g in moved:
                self._coordinators.pop(g, None)
                out.update(self._describe_at([g]))
        return out

    def describe_classic(self, group_id: str) -> Any:
        """A group as DescribeGroups describes it (classic groups; ``generation_id`` too)."""
        from kip848.v1 import classic_group_pb2

        resp = self.call_group(
            group_id,
            lambda c: c.classic.DescribeGroups,
            classic_group_pb2.DescribeGroupsRequest(group_ids=[group_id]),
        )
        if resp.error_code:
            report("describe", resp.error_code, resp.error_message)
            raise CommandFailed
        return resp.groups[0]

    def list_groups(self, request: Any) -> Any:
        """ListGroups of every node (each lists its own groups, as brokers do), in one
        answer; the first error any node gives, if one does."""
        from kip848.v1 import admin_pb2

        nodes = self.every_node()
        if len(nodes) == 1:
            return self.call(self.admin.ListGroups, request)
        groups = []
        for node in nodes:
            resp = node.call(node.admin.ListGroups, request)
            if resp.error_code:
                return resp
            groups += resp.groups
        return admin_pb2.ListGroupsResponse(groups=sorted(groups, key=lambda g: g.group_id))

    def delete_groups(self, group_ids: Sequence[str]) -> Any:
        """DeleteGroups, each group asked of its coordinator (the groups of one node in one
        request); the results in the order given, or the first top-level error."""
        from kip848.v1 import admin_pb2

        results: dict[str, Any] = {}
        for ids in self._by_node(group_ids):
            resp = self.call_group(
                ids[0],
                lambda c: c.admin.DeleteGroups,
                admin_pb2.DeleteGroupsRequest(group_ids=ids),
            )
            if resp.error_code:
                return resp
            results.update((r.group_id, r) for r in resp.results)
        return admin_pb2.DeleteGroupsResponse(
            results=[results[g] for g in dict.fromkeys(group_ids)]
        )

    def listed(self) -> dict[str, Any]:
        """Every group the coordinators list, by id (asked once per command)."""
        from kip848.v1 import admin_pb2

        if self._listed is None:
            resp = self.list_groups(admin_pb2.ListGroupsRequest())
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
        resp = self.call_group(
            group_id,
            lambda c: c.offsets.OffsetFetch,
            offsets_pb2.OffsetFetchRequest(groups=[group]),
        )
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
