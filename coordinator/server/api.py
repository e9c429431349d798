"""The service layer's own requests and responses (where the core and the bridge have none).

Most RPCs take and answer the core's dataclasses (``ConsumerGroupHeartbeat``, ``OffsetCommit``,
the bridge's ``JoinGroup`` ...). The types here fill the gaps: who is calling (:class:`Caller`),
a top-level error around a core response (:class:`Reply`), FindCoordinator, ConsumerGroupDescribe
entries, and GROUP configs. Frozen, slotted, keyword-only, like the core's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from coordinator.core.errors import ErrorCode, InconsistentGroupProtocolError
from coordinator.core.model import Assignment
from coordinator.core.shard import GroupDescription
from coordinator.security.metadata import ScramDeletion, ScramUpsertion
from coordinator.security.principal import ANONYMOUS, KafkaPrincipal

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A broker address as FindCoordinator and Metadata answer it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who sent a request, through what.

    ``api_version`` is the Kafka API version of the request; None for gRPC, which carries no
    version and behaves like Kafka's latest (docs/proto.md). ``node`` is the address of the
    listener the request came through (FindCoordinator answers it). ``abort_when_closing``: the
    transport has its own "unavailable" answer (gRPC's UNAVAILABLE status): the service raises
    :class:`ShuttingDown` instead of answering COORDINATOR_NOT_AVAILABLE in-band.

    What only the gRPC transport knows, for the observation of the request
    (``coordinator/observability/requests.py``): ``received``, when a front end received a
    call it forwarded (its ``time.monotonic()``; None: the call starts here), and
    ``trace_metadata``, the call's metadata when it carries a W3C ``traceparent`` (read only
    while tracing is on; None: none, or tracing off). While tracing is on, a gRPC call whose
    client id was not otherwise needed leaves it unread (``client_id`` empty) and
    ``identify`` reads it: only a traced request's span names it (:meth:`identity`).
    ``client_host`` is every call's, on every transport: each authorization decision of the
    call matches ACL hosts against it, one made after the call started included.

    ``principal``: who sent it, as the transport authenticated it (``User:ANONYMOUS`` when it
    did not): what the authorizer decides on (``coordinator/security``)."""

    client_id: str = ""
    client_host: str = ""
    api_version: int | None = None
    node: Node | None = None
    abort_when_closing: bool = False
    received: float | None = None
    trace_metadata: Sequence[tuple[str, Any]] | None = None
    principal: KafkaPrincipal = ANONYMOUS
    identify: Callable[[], tuple[str, str]] | None = None

    def identity(self) -> tuple[str, str]:
        """The client id and address: read now if the transport left them unread
        (``identify``)."""
        if self.identify is None:
            return self.client_id, self.client_host
        return self.identify()

    def version_below(self, version: int) -> bool:
        """True for a Kafka request older than ``version`` (never for gRPC)."""
        return self.api_version is not None and self.api_version < version


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply(Generic[T]):
    """A core response, or a top-level error (``value`` None)."""

    value: T | None = None
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicChanges(Generic[T]):
    """A CreateTopics, CreatePartitions or DeleteTopics request: its entries, in order, and
    ``timeout_ms``, how long its answer waits for the write to the cluster log (Kafka's
    ``timeoutMs``, from the request's arrival; None: ``offsets.commit.timeout.ms``)."""

    entries: Sequence[T]
    timeout_ms: int | None = None
    validate_only: bool = False
    """Each entry answered as it would be, nothing changed (Kafka's validateOnly; CreateTopics
    and CreatePartitions)."""
    assignments: Mapping[str, int] = field(default_factory=dict)
    """CreatePartitions: topics given manual assignments of their new partitions, with how
    many (a Kafka request's; the registry places no replicas)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupError:
    """A group of a multi-group request whose part of the request did not decode: answered
    with this error for that group only."""

    group_id: str
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Coordinator:
    """One FindCoordinator answer (per key; v3 and older answer a single key)."""

    key: str
    node_id: int
    host: str
    port: int
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerGroup:
    """One ConsumerGroupDescribe entry: a description, or an error for that group id."""

    group_id: str
    description: GroupDescription | None = None
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


# ---------------------------------------------------------------- GROUP configs

GROUP_RESOURCE = 16
"""GROUP in the wire contract (docs/proto.md, DescribeConfigs) and KIP-848's text."""
KAFKA_GROUP_RESOURCE = 32
"""GROUP in Kafka's ConfigResource.Type; accepted too, and answered with the number asked."""
GROUP_RESOURCES = (GROUP_RESOURCE, KAFKA_GROUP_RESOURCE)
CONFIG_SOURCE_GROUP = 8  # Kafka's DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
CONFIG_SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
CONFIG_TYPE_INT = 3
OP_SET, OP_DELETE = 0, 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResource:
    """A DescribeConfigs resource; ``keys`` None = every config."""

    resource_type: int
    resource_name: str
    keys: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSynonym:
    name: str
    value: str
    source: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigEntry:
    name: str
    value: str
    read_only: bool
    source: int
    is_sensitive: bool
    config_type: int
    synonyms: tuple[ConfigSynonym, ...] = ()
    documentation: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResult:
    resource_type: int
    resource_name: str
    configs: tuple[ConfigEntry, ...] = ()
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigs:
    resources: tuple[ConfigResource, ...]
    include_synonyms: bool = False
    include_documentation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfig:
    name: str
    operation: int
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterResource:
    resource_type: int
    resource_name: str
    configs: tuple[AlterConfig, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigs:
    resources: tuple[AlterResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchRequest:
    """ConsumerGroupWatch: the push stream of one member."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchEvent:
    """One message of the push stream: the member's target and what was released for it, or an
    error (after which the stream ends)."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    member_epoch: int = -1
    group_epoch: int = -1
    assignment_epoch: int = -1
    target: Assignment = field(default_factory=dict)
    released: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class AclSpec:
    """An ACL to create or an ACL filter, as a request carries it: Kafka's numbers, not yet
    checked (``coordinator.security.acls.new_binding`` / ``new_filter`` check them). In a
    filter, None strings match any value."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterScramCredentials:
    """AlterUserScramCredentials: deletions and upsertions (salted by the client)."""

    deletions: tuple[ScramDeletion, ...] = ()
    upsertions: tuple[ScramUpsertion, ...] = ()

    def users(self) -> list[str]:
        """Each user the request names, once, in order."""
        return list(
            dict.fromkeys([*(d.name for d in self.deletions), *(u.name for u in self.upsertions)])
        )


class EveryTopic:
    """ListTopics asked by a caller that leaves out the topics the client may not describe
    itself, off the loop: every topic (the Kafka listener's Metadata of every topic,
    ``kafka/served.py``, with ``RequestAuthorizer.pinned``)."""

    __slots__ = ()


EVERY_TOPIC = EveryTopic()
"""The one :class:`EveryTopic` request."""


def check_sync_protocol(
    protocol_type: str | None, protocol_name: str | None, caller: Caller
) -> None:
    """SyncGroup v5 and later must name the protocol type and name: Kafka's KafkaApis refuses
    one that does not INCONSISTENT_GROUP_PROTOCOL, before it authorizes the request (older
    versions have neither)."""
    kafka_v5 = caller.api_version is not None and not caller.version_below(5)
    if kafka_v5 and (protocol_type is None or protocol_name is None):
        raise InconsistentGroupProtocolError(
            "SyncGroup v5 and later must name the protocol type and name."
        )
