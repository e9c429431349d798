"""Offsets in the partitions' logs (``AdminService.ListOffsets``; Kafka's ListOffsets): what the
operator tools need for a group's lag and for resetting offsets to the earliest or latest
record, or to a time.

The coordinator keeps no logs: in front of a broker (``--kafka-upstream``) the answers come from
the broker (``kafka.upstream.log_offsets.UpstreamLogOffsets``); in coordinator-only mode there
are none and the RPC answers UNSUPPORTED_VERSION. This module holds the protocol-neutral request
and answer values and the interface the service layer calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
"""Kafka's special ListOffsets timestamps; any value >= 0 is a time in ms since the epoch."""

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetQuery:
    """One partition: the offset ``timestamp`` names (a special value above, or ms)."""

    topic: str
    partition: int
    timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsets:
    queries: tuple[OffsetQuery, ...]
    isolation_level: int = READ_UNCOMMITTED


@dataclass(frozen=True, slots=True, kw_only=True)
class LogOffset:
    """The answer for one query: an offset (-1: none), the timestamp and leader epoch of the
    record found (-1: none or unknown), or an error (Kafka's code, possibly one the coordinator
    has no name for: the broker's own)."""

    topic: str
    partition: int
    error_code: int = 0
    error_message: str | None = None
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


class LogOffsetSource(Protocol):
    """Where log offsets come from (the upstream broker)."""

    async def list_offsets(self, req: ListOffsets) -> list[LogOffset]:
        """One answer per query, in the order of ``req.queries``."""
        ...

    def close(self) -> None: ...


def answer_all(queries: Sequence[OffsetQuery], code: int, message: str | None) -> list[LogOffset]:
    """The same error for every query."""
    return [
        LogOffset(topic=q.topic, partition=q.partition, error_code=code, error_message=message)
        for q in queries
    ]
