"""Log offsets from the upstream broker (``AdminService.ListOffsets`` with ``--kafka-upstream``):
Kafka's ListOffsets, sent as Kafka's AdminClient sends it.

* The partitions' leaders come from a Metadata request for the named topics (a topic the broker
  does not know, or a partition it does not list, is answered with the broker's error, or
  UNKNOWN_TOPIC_OR_PARTITION; a partition without a leader LEADER_NOT_AVAILABLE).
* One ListOffsets per leader, all at once, each over this module's own connection to that
  broker (at the configured ``--kafka-upstream`` address for its node, else where the broker
  says it is), at the highest version both the broker and the codec know. Partitions whose
  answer says the leader moved (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
  UNKNOWN_LEADER_EPOCH, FENCED_LEADER_EPOCH, OFFSET_NOT_AVAILABLE) are asked once more after a
  fresh Metadata; then the broker's answer stands.
* A broker that cannot be asked answers NETWORK_EXCEPTION for its partitions; MAX_TIMESTAMP
  needs ListOffsets v7 (else UNSUPPORTED_VERSION for that partition).
* A time lookup that finds no record answers offset -1. A found record always has a timestamp,
  so an answer without one (timestamp -1) is "none", whatever offset it carries: Tansu answers
  such a lookup with offset 0, which a reset to that time would take for the log start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from coordinator.core.errors import ErrorCode

from ...log_offsets import MAX_TIMESTAMP, ListOffsets, LogOffset, OffsetQuery, answer_all
from .. import wire
from .broker import METADATA_VERSION_CAP, Upstream, UpstreamClient, UpstreamError

LIST_OFFSETS = 2
MAX_TIMESTAMP_VERSION = 7
REQUEST_TIMEOUT_MS = 30_000
NETWORK_EXCEPTION = 13
LEADER_NOT_AVAILABLE = 5
RETRIABLE = frozenset({5, 6, 74, 76, 78})
"""LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
OFFSET_NOT_AVAILABLE: the leader moved or is catching up; ask again after a Metadata."""

Key = tuple[str, int]


class UpstreamLogOffsets:
    """Implements ``log_offsets.LogOffsetSource`` over the upstream broker(s)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._clients: dict[tuple[str, int], UpstreamClient] = {}

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, address: tuple[str, int]) -> UpstreamClient:
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self.upstream.new_client(address)
        return client

    async def list_offsets(self, req: ListOffsets) -> list[LogOffset]:
        queries = req.queries
        version = self.upstream.version_for(LIST_OFFSETS)
        if version is None:
            return answer_all(
                queries,
                ErrorCode.UNSUPPORTED_VERSION,
                "The upstream broker does not offer ListOffsets (API key 2).",
            )
        answers: dict[Key, LogOffset] = {}
        counts: dict[Key, int] = {}
        for q in queries:
            counts[(q.topic, q.partition)] = counts.get((q.topic, q.partition), 0) + 1
        wanted: list[OffsetQuery] = []
        for q in queries:
            key = (q.topic, q.partition)
            if counts[key] > 1:
                answers[key] = _error(q, ErrorCode.INVALID_REQUEST, "Duplicate partition.")
            elif q.timestamp < MAX_TIMESTAMP:
                answers[key] = _error(
                    q, ErrorCode.INVALID_REQUEST, f"Invalid timestamp {q.timestamp}."
                )
            elif q.timestamp == MAX_TIMESTAMP and version < MAX_TIMESTAMP_VERSION:
                answers[key] = _error(
                    q,
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"MAX_TIMESTAMP needs ListOffsets v{MAX_TIMESTAMP_VERSION}; the upstream "
                    f"broker offers v{version}.",
                )
            elif q.partition < 0:
                answers[key] = _error(
                    q, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unknown topic or partition."
                )
            else:
                wanted.append(q)
        for attempt in range(2):
            if not wanted:
                break
            got = await self._ask(wanted, version, req.isolation_level)
            answers.update(got)
            wanted = [
                q
                for q in wanted
                if attempt == 0 and got[(q.topic, q.partition)].error_code in RETRIABLE
            ]
        return [answers[(q.topic, q.partition)] for q in queries]

    async def _ask(
        self, queries: Sequence[OffsetQuery], version: int, isolation_level: int
    ) -> dict[Key, LogOffset]:
        """One round: Metadata for the leaders, then one ListOffsets per leader."""
        out: dict[Key, LogOffset] = {}
        try:
            leaders, failed, addresses = await self._leaders(sorted({q.topic for q in queries}))
        except UpstreamError as exc:
            return {(q.topic, q.partition): _error(q, NETWORK_EXCEPTION, str(exc)) for q in queries}
        by_node: dict[int, list[OffsetQuery]] = {}
        for q in queries:
            leader = leaders.get(q.topic, {}).get(q.partition)
            if q.topic in failed:
                code = failed[q.topic]
                out[(q.topic, q.partition)] = _error(q, code, _broker_message(code))
            elif leader is None:
                out[(q.topic, q.partition)] = _error(
                    q,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "This server does not host this topic-partition.",
                )
            elif leader < 0:
                out[(q.topic, q.partition)] = _error(
                    q, LEADER_NOT_AVAILABLE, "There is no leader for this topic-partition."
                )
            else:
                by_node.setdefault(leader, []).append(q)
        rounds = await asyncio.gather(
            *(
                self._list_on(node, addresses.get(node), qs, version, isolation_level)
                for node, qs in sorted(by_node.items())
            )
        )
        for answered in rounds:
            out.update(answered)
        return out

    async def _leaders(
        self, topics: list[str]
    ) -> tuple[dict[str, dict[int, int]], dict[str, int], dict[int, tuple[str, int]]]:
        """topic -> partition -> leader node id; topic -> the error the broker answered for
        it; node id -> where that broker is."""
        upstream = self.upstream
        version = upstream.version_for(3, METADATA_VERSION_CAP)
        assert version is not None  # checked when the upstream was connected
        meta = await self._client(upstream.address).call(
            wire.build(
                wire.request_class(3, version),
                topics=[{"name": t, "topic_id": None} for t in topics],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        addresses = {int(b.node_id): (b.host, int(b.port)) for b in meta.brokers}
        addresses.update(upstream.brokers)  # the configured address for its node
        leaders: dict[str, dict[int, int]] = {}
        failed: dict[str, int] = {}
        for t in meta.topics:
            if t.name is None:
                continue
            if t.error_code:
                failed[t.name] = int(t.error_code)
            else:
                leaders[t.name] = {int(p.partition_index): int(p.leader_id) for p in t.partitions}
        return leaders, failed, addresses

    async def _list_on(
        self,
        node: int,
        address: tuple[str, int] | None,
        queries: Sequence[OffsetQuery],
        version: int,
        isolation_level: int,
    ) -> dict[Key, LogOffset]:
        if address is None:
            return {
                (q.topic, q.partition): _error(
                    q, NETWORK_EXCEPTION, f"The upstream broker {node} has no known address."
                )
                for q in queries
            }
        topics: dict[str, list[dict[str, Any]]] = {}
        for q in queries:
            topics.setdefault(q.topic, []).append(
                {
                    "partition_index": q.partition,
                    "current_leader_epoch": -1,
                    "timestamp": q.timestamp,
                    "max_num_offsets": 1,
                }
            )
        request = wire.build(
            wire.request_class(LIST_OFFSETS, version),
            replica_id=-1,
            isolation_level=isolation_level,
            topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
            timeout=REQUEST_TIMEOUT_MS,
        )
        try:
            resp = await self._client(address).call(request)
        except UpstreamError as exc:
            return {(q.topic, q.partition): _error(q, NETWORK_EXCEPTION, str(exc)) for q in queries}
        asked = {(q.topic, q.partition): q.timestamp for q in queries}
        out: dict[Key, LogOffset] = {}
        for t in resp.topics:
            for p in t.partitions:
                key = (t.name, int(p.partition_index))
                code = int(p.error_code)
                timestamp = int(getattr(p, "timestamp", -1))
                offset = int(getattr(p, "offset", -1)) if not code else -1
                if asked.get(key, -1) >= 0 and timestamp < 0:
                    offset = -1  # no record at or after that time (Tansu says offset 0)
                out[key] = LogOffset(
                    topic=t.name,
                    partition=key[1],
                    error_code=code,
                    error_message=None if not code else _broker_message(code),
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=int(getattr(p, "leader_epoch", -1)),
                )
        for q in queries:
            out.setdefault(
                (q.topic, q.partition),
                _error(
                    q,
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "The upstream broker did not answer for this partition.",
                ),
            )
        return out


def _error(q: OffsetQuery, code: int, message: str | None) -> LogOffset:
    return LogOffset(topic=q.topic, partition=q.partition, error_code=code, error_message=message)


def _broker_message(code: int) -> str:
    try:
        name = ErrorCode(code).name
    except ValueError:
        return f"The upstream broker answered error {code}."
    return f"The upstream broker answered {name}."
