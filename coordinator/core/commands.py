"""Commands (requests), responses and results of the core, as frozen dataclasses.

The server converts protobuf messages into these at the boundary; the core never sees proto.
Kafka "nullable" fields are ``None`` when absent ("null means unchanged").
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from .events import LogEvent
from .model import Assignment
from .records import Record
from .timers import TimerOp

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeat:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: Assignment | None = None
    """Owned partitions reported by the member; None = unchanged / not provided."""
    client_id: str = ""
    client_host: str = ""
    principal: object = None
    """Who sent it (the server's principal; opaque to the core): a regex this heartbeat
    resolves matches only the topics ``ConsumerGroups.topic_filter`` lets it describe."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatAssignment:
    assigned: Assignment
    pending: Assignment
    """In the member's target but not yet released by their previous owners."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatResponse:
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: HeartbeatAssignment | None = None
    should_compute_assignment: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    """One group in a ListGroups answer."""

    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class Pending:
    """A deferred response (classic JoinGroup/SyncGroup wait at a barrier): the answer comes
    later, in some result's ``completions`` as ``(token, response)``."""

    token: int


@dataclass(frozen=True, slots=True)
class WriteWatch:
    """A change whose write the core must hear about if it fails or is not durable within
    the write timeout (``offsets.commit.timeout.ms``): the failure side of Kafka's
    ``CoordinatorResult`` append future. ``kind`` names the component that asked (as a timer
    key's kind does); ``group_id`` and ``payload`` are its own. The runtime then runs the
    shard's :meth:`~coordinator.core.shard.GroupCoordinatorShard.on_write_error` as a command
    of its own: at the write timeout of the command that asked (the write still in flight), or
    once the write failed (after the rollback; again if it had timed out first)."""

    kind: str
    group_id: str
    payload: tuple[int, ...] = ()


@dataclass(slots=True)
class Result(Generic[T]):
    """What a handler returns: records (already replayed into the shard), the response, and
    timer operations to apply once the records are durable. ``completions`` answer earlier
    :class:`Pending` responses and ``events`` say what happened (for the log); like timers,
    they are released only once the records are durable (and dropped if the write fails: the
    rollback makes the requests pending again and the events never happened)."""

    records: list[Record] = field(default_factory=list)
    response: T | None = None
    timers: list[TimerOp] = field(default_factory=list)
    completions: list[tuple[int, Any]] = field(default_factory=list)
    events: list[LogEvent] = field(default_factory=list)
    offloads: list[str] = field(default_factory=list)
    """Groups whose target assignment is to be computed outside the event loop (the runtime
    copies the inputs with ``ConsumerGroups.assignment_job`` and applies the outcome with
    ``apply_assignment``); released like timers, once the records are durable."""
    regex_resolutions: list[str] = field(default_factory=list)
    """Groups whose regular expressions are to be resolved off the heartbeat path (Kafka 4.x:
    on the coordinator's executor): the runtime runs ``ConsumerGroups.resolve_regexes`` for
    each, as a command of its own, once the records are durable; one at a time per group."""
    parked_joins: list[tuple[str, bool]] = field(default_factory=list)
    """Groups with parked joins (members that joined before the group's first target), each
    with True for the first of them (the first target is to wait for the burst of joins) or
    False (a target is there, more to answer): the runtime calls
    ``ConsumerGroups.first_target`` for each (once the burst is in), again while its results
    ask for it; that computes the target, then answers the parked joins a few at a time."""

    write_watches: list[WriteWatch] = field(default_factory=list)
    """Changes whose write failing or timing out the core must hear about (:class:`WriteWatch`;
    kept with the batch holding the command's records)."""

    def absorb(self, other: Result[Any]) -> None:
        """Take over everything of ``other`` but its response (a sub-step of this command)."""
        self.records += other.records
        self.timers += other.timers
        self.completions += other.completions
        self.events += other.events
        self.offloads += other.offloads
        self.regex_resolutions += other.regex_resolutions
        self.parked_joins += other.parked_joins
        self.write_watches += other.write_watches


class IdSource(Protocol):
    """Where fresh identifiers come from. The runtime supplies random ones; tests supply a
    deterministic sequence. The core itself has no randomness."""

    def new_member_id(self) -> str: ...

    def new_uuid(self) -> str:
        """A random UUID as Java's ``UUID.toString()`` writes it (36 characters): the random
        part of a classic member id, ``<client.id>-<uuid>`` (Kafka's ClassicGroup)."""
        ...

    def new_group_uid(self) -> str: ...

    def new_topic_id(self) -> str: ...


class SequentialIds:
    """Deterministic ids for tests and simulations: ``member-1``, ``cgp_…0001``, topic ids
    derived from a counter."""

    def __init__(self, prefix: str = "") -> None:
        self._n = 0
        self._prefix = prefix

    def _next(self) -> int:
        self._n += 1
        return self._n

    def new_member_id(self) -> str:
        return f"{self._prefix}member-{self._next()}"

    def new_uuid(self) -> str:
        return f"{self._prefix}member-{self._next()}"

    def new_group_uid(self) -> str:
        return "cgp_" + f"{self._next():026d}"

    def new_topic_id(self) -> str:
        raw = self._next().to_bytes(16, "big")
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
