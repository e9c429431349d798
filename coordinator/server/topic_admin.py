"""The topic RPCs' authorization and limits (CreateTopics, CreatePartitions, DeleteTopics), as
Kafka's ControllerApis authorizes them, before the change goes where topics come from
(``service.topics``: the registry, or the upstream broker it follows). Shared by every codec
(gRPC, the Kafka listener in coordinator-only mode) through :class:`~.service.CoordinatorService`.

The answers wait for their write to the cluster log within the request's ``timeout_ms``
(Kafka's timeoutMs): past it, REQUEST_TIMED_OUT (``Driver._cluster_bound``).
"""

from __future__ import annotations

from typing import Protocol

from coordinator.core.errors import UnknownTopicOrPartitionError
from coordinator.core.topics import NewTopic, TopicResult
from coordinator.security.acls import CLUSTER_NAME

from .api import Caller, TopicChanges
from .authorization import (
    ALTER,
    CLUSTER,
    CREATE,
    DELETE,
    DESCRIBE,
    TOPIC,
    RequestAuthorizer,
    topics_denied,
)
from .limits import RequestLimits
from .topic_source import TopicSource


class TopicHost(Protocol):
    """What the topic RPCs need of the service (``service.CoordinatorService``)."""

    limits: RequestLimits
    authz: RequestAuthorizer
    topics: TopicSource
    """Where topics come from: read at each call (the server may replace it)."""

    def topic_exists(self, name: str) -> bool: ...


class TopicAdmin:
    """The topic RPCs of one service."""

    def __init__(self, service: TopicHost) -> None:
        self.service = service

    async def create_topics(self, req: TopicChanges[NewTopic], caller: Caller) -> list[TopicResult]:
        """CREATE on the cluster, or on each topic."""
        s = self.service
        topics = req.entries
        s.limits.topics(t.name for t in topics)
        for t in topics:  # replica racks are identifiers too (each distinct set checked once)
            for racks in set(t.partition_racks.values()):
                for rack in racks:
                    s.limits.identifier("ReplicaRack", rack)
        denied = (
            set()
            if s.authz.may(caller, CREATE, CLUSTER, CLUSTER_NAME)
            else set(
                s.authz.denied_topics(caller, "CreateTopics", CREATE, (t.name for t in topics))
            )
        )
        kept = [t for t in topics if t.name not in denied]
        created = iter(
            await s.topics.create_topics(
                kept, timeout_ms=req.timeout_ms, validate_only=req.validate_only
            )
            if kept
            else []
        )
        return [_denied(t.name) if t.name in denied else next(created) for t in topics]

    async def create_partitions(
        self, req: TopicChanges[tuple[str, int]], caller: Caller
    ) -> list[TopicResult]:
        """ALTER on each topic."""
        s = self.service
        requests = req.entries
        s.limits.topics(name for name, _count in requests)
        denied = set(
            s.authz.denied_topics(caller, "CreatePartitions", ALTER, (n for n, _c in requests))
        )
        kept = [(n, c) for n, c in requests if n not in denied]
        grown = iter(
            await s.topics.create_partitions(
                kept,
                timeout_ms=req.timeout_ms,
                validate_only=req.validate_only,
                assignments=req.assignments,
            )
            if kept
            else []
        )
        return [_denied(n) if n in denied else next(grown) for n, _c in requests]

    async def delete_topics(self, req: TopicChanges[str], caller: Caller) -> list[TopicResult]:
        """DELETE on the cluster, or on each topic. A refused topic the caller may describe
        and that does not exist is answered as unknown (UNKNOWN_TOPIC_OR_PARTITION), any other
        TOPIC_AUTHORIZATION_FAILED: what the caller may not describe is not told of."""
        s = self.service
        names = req.entries
        s.limits.topics(names)
        denied = (
            set()
            if s.authz.may(caller, DELETE, CLUSTER, CLUSTER_NAME)
            else set(s.authz.denied_topics(caller, "DeleteTopics", DELETE, names))
        )
        kept = [n for n in names if n not in denied]
        deleted = iter(
            await s.topics.delete_topics(kept, timeout_ms=req.timeout_ms) if kept else []
        )
        return [self._delete_refused(n, caller) if n in denied else next(deleted) for n in names]

    def _delete_refused(self, name: str, caller: Caller) -> TopicResult:
        s = self.service
        if s.authz.may(caller, DESCRIBE, TOPIC, name) and not s.topic_exists(name):
            exc = UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
            return TopicResult(name=name, error_code=exc.code, error_message=exc.message)
        return _denied(name)


def _denied(name: str) -> TopicResult:
    exc = topics_denied([name])
    return TopicResult(name=name, error_code=exc.code, error_message=exc.message)
