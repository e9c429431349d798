"""Values shared by the sans-IO member and its IO layers: topic partitions, error codes, errors.

Topic ids are kept as Kafka's text form (base64url of the 16 raw bytes, 22 characters, what
``Uuid.toString()`` prints and the CLI shows); they become raw bytes only on the wire.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TopicId = str
"""A topic id in Kafka's text form (base64url, 22 chars). "" = unknown (address by name)."""

Partitions = Mapping[TopicId, frozenset[int]]
"""Partitions by topic id. Never contains an empty set."""


def topic_id_from_bytes(raw: bytes) -> TopicId:
    """16 raw bytes -> base64url text."""
    if len(raw) != 16:
        raise ValueError(f"a topic id has 16 bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def topic_id_to_bytes(topic_id: TopicId) -> bytes:
    """Base64url text -> 16 raw bytes ("" -> b"", a topic addressed by name)."""
    if not topic_id:
        return b""
    raw = base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a topic id: {topic_id!r}")
    return raw


def partitions_of(items: Iterable[tuple[TopicId, Iterable[int]]]) -> dict[TopicId, frozenset[int]]:
    """Normalise (topic id, partitions) pairs: merge repeated topics, drop empty sets."""
    out: dict[TopicId, frozenset[int]] = {}
    for topic_id, parts in items:
        merged = out.get(topic_id, frozenset()) | frozenset(parts)
        if merged:
            out[topic_id] = merged
    return out


def minus(a: Partitions, b: Partitions) -> dict[TopicId, frozenset[int]]:
    """Partitions in ``a`` and not in ``b``."""
    out: dict[TopicId, frozenset[int]] = {}
    for topic_id, parts in a.items():
        rest = parts - b.get(topic_id, frozenset())
        if rest:
            out[topic_id] = rest
    return out


def union(a: Partitions, b: Partitions) -> dict[TopicId, frozenset[int]]:
    out = dict(a)
    for topic_id, parts in b.items():
        merged = out.get(topic_id, frozenset()) | parts
        if merged:
            out[topic_id] = merged
    return out


def count(a: Partitions) -> int:
    return sum(len(parts) for parts in a.values())


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic, as callbacks and commits see it.

    ``topic_id`` identifies the topic (a deleted and re-created topic has the same name and a
    new id); callbacks always fill it. A ``TopicPartition`` you build yourself for a commit may
    leave it "" (the topic is then addressed by name).
    """

    topic: str
    partition: int
    topic_id: TopicId = ""

    def __str__(self) -> str:
        return f"{self.topic or self.topic_id}-{self.partition}"


def to_topic_partitions(
    parts: Partitions, names: Mapping[TopicId, str]
) -> frozenset[TopicPartition]:
    return frozenset(
        TopicPartition(names.get(topic_id, ""), p, topic_id)
        for topic_id, ps in parts.items()
        for p in ps
    )


class ErrorCode(enum.IntEnum):
    """Kafka's error codes (the wire's ``error_code``); mirrors ``kip848.v1.common_pb2.ErrorCode``
    (a unit test keeps them equal)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class ClientError(Exception):
    """Base of the errors this package raises."""


class KafkaError(ClientError):
    """An in-band error answered by the coordinator: ``code`` (Kafka's number) and message."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.code = int(code)
        self.message = message or ""
        super().__init__(f"{error_name(code)}: {message}" if message else error_name(code))


class MemberFailedError(KafkaError):
    """The member stopped for good: the coordinator answered a non-retriable error
    (INVALID_REQUEST, GROUP_AUTHORIZATION_FAILED, UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED,
    INVALID_REGULAR_EXPRESSION, FENCED_INSTANCE_ID, GROUP_ID_NOT_FOUND on join, or a code this
    client does not know)."""


class CommitFailedError(KafkaError):
    """An offset commit failed for good. ``errors`` maps each failed partition to its code."""

    def __init__(
        self,
        code: int,
        message: str | None = None,
        errors: Mapping[TopicPartition, int] | None = None,
    ) -> None:
        super().__init__(code, message)
        self.errors: dict[TopicPartition, int] = dict(errors or {})
