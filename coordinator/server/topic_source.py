"""Where the service layer's topics come from and where its topic RPCs go.

:class:`TopicSource` is the small protocol between the service layer and an upstream broker:
the coordinator's own topic registry (:class:`RegistryTopics`, no upstream) or the broker the
registry follows (``--kafka-upstream``: the upstream package's ``TopicFeed``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Protocol

from coordinator.core.topics import NewTopic, TopicResult
from coordinator.runtime import CoordinatorRuntime


class TopicSource(Protocol):
    """Where topics come from and where the topic RPCs go: the coordinator's own registry
    (:class:`RegistryTopics`), or an upstream broker the registry follows
    (``kafka.upstream.topic_feed.TopicFeed``, with ``--kafka-upstream``)."""

    watches_subscriptions: bool
    """True: :meth:`subscribed` wants to see the subscriptions (names, regexes) of joins."""

    # timeout_ms: how long the change may take (the request's, Kafka's timeoutMs; None: the
    # source's default); validate_only: answered as it would be, nothing changed (Kafka's
    # validateOnly); assignments: topics given manual assignments of their new partitions, with
    # how many (a Kafka CreatePartitions).
    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> list[TopicResult]: ...
    async def create_partitions(
        self,
        requests: Sequence[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        assignments: Mapping[str, int] | None = None,
    ) -> list[TopicResult]: ...
    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> list[TopicResult]: ...
    async def list_topics(self) -> list[TopicResult]: ...
    def subscribed(
        self, names: Sequence[str] | None, regex: str | None
    ) -> Awaitable[None] | None: ...
    def lookup(self, names: Iterable[str], topic_ids: Iterable[str]) -> Awaitable[None] | None:
        """A request names topics (an offset commit): an awaitable that waits until those the
        registry lacks were looked up where topics come from (bounded); None: nothing to do."""
        ...


class RegistryTopics:
    """The coordinator's own topic registry (no upstream): the topic RPCs change it."""

    watches_subscriptions = False

    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    async def create_topics(
        self,
        topics: Sequence[NewTopic],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> list[TopicResult]:
        return await self.runtime.create_topics(
            topics, timeout_ms=timeout_ms, validate_only=validate_only
        )

    async def create_partitions(
        self,
        requests: Sequence[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
        assignments: Mapping[str, int] | None = None,
    ) -> list[TopicResult]:
        return await self.runtime.create_partitions(
            requests, timeout_ms=timeout_ms, validate_only=validate_only, assignments=assignments
        )

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int | None = None
    ) -> list[TopicResult]:
        return await self.runtime.delete_topics(names, timeout_ms=timeout_ms)

    async def list_topics(self) -> list[TopicResult]:
        return await self.runtime.list_topics()

    def subscribed(self, names: Sequence[str] | None, regex: str | None) -> Awaitable[None] | None:
        return None

    def lookup(self, names: Iterable[str], topic_ids: Iterable[str]) -> Awaitable[None] | None:
        return None
