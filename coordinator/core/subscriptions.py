"""What a consumer group subscribes to: its subscription metadata (the topics image's view of
the topics its members name or their regexes resolved to) and its regular expressions,
resolved off the heartbeat path (Kafka 4.x's maybeUpdateRegularExpressions and
handleRegularExpressionsResult; KIP-848 "Regex Based Subscription").

One :class:`Subscriptions` per shard, a part of its consumer groups (``consumer_groups.py``):
it writes the subscription metadata and regex records; what follows from them (a new group
epoch, a new target) is the consumer groups' own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from assignors.api import TopicMetadata

from . import records as r
from .commands import ConsumerGroupHeartbeat, Result
from .context import ShardContext
from .group import ConsumerGroup
from .regex import resolve_regex

REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000
"""Kafka's: a group's regexes are resolved again at most this often."""
REGEX_RESOLUTION_TIMEOUT_MS = 30_000
"""A resolution asked for and not run this long after (lost with a failed write, or the
runtime never ran it) is asked for again by the next heartbeat."""

TopicFilter = Callable[[object, str, str], bool]
"""May (principal, client host) describe this topic? (``ConsumerGroups.topic_filter``)"""


class Subscriptions:
    """A shard's consumer groups' subscriptions (see the module doc)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx
        self._regex_cache: dict[str, tuple[int, frozenset[str]]] = {}  # soft, process-local

    # ------------------------------------------------------------------ subscription metadata

    def metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        """Every topic the group subscribes to that exists, by name, with its partition racks
        (from the topics image).
        The group's current entries are reused where they still hold (so an unchanged result
        compares equal by identity, and a join to a group of many topics builds nothing; the
        partition racks are the image's own mapping while they hold, compared by identity
        first: a join does not compare every partition's racks)."""
        by_name = self._ctx.topics.by_name
        current = group.subscription_metadata
        out = {}
        for name in group.topic_subscribers:
            t = by_name.get(name)
            if t is not None:
                old = current.get(name)
                if (
                    old is not None
                    and old.topic_id == t.topic_id
                    and old.num_partitions == t.num_partitions
                    and (
                        old.partition_racks is t.partition_racks
                        or old.partition_racks == t.partition_racks
                    )
                ):
                    out[name] = old
                else:
                    out[name] = TopicMetadata(
                        topic_id=t.topic_id,
                        name=name,
                        num_partitions=t.num_partitions,
                        partition_racks=t.partition_racks,
                    )
        return out

    def refresh(self, result: Result[Any], group: ConsumerGroup) -> bool:
        """Recompute subscription metadata against the topics image (regexes as last
        resolved: one not resolved yet matches nothing). Returns True if it changed (a group
        epoch bump is due)."""
        metadata = self.metadata(group)
        if metadata != group.subscription_metadata:
            self._ctx.emit(result, r.partition_metadata_record(group.group_id, metadata))
            return True
        return False

    # ------------------------------------------------------------------ regexes

    def maybe_ask_regexes(
        self,
        result: Result[Any],
        group: ConsumerGroup,
        now_ms: int,
        req: ConsumerGroupHeartbeat,
        new_regex: bool,
    ) -> None:
        """Kafka 4.x's maybeUpdateRegularExpressions: the group's regexes are resolved again,
        off the heartbeat path (``Result.regex_resolutions``; ``ConsumerGroups.resolve_regexes``
        when the runtime runs it), when none is being resolved, the last resolution is more
        than ``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS`` old, and a regex is unresolved (a member
        just brought it), the topics image changed since, or
        ``group.consumer.regex.refresh.interval.ms`` passed. The heartbeat that asks names the
        principal the regexes are resolved for."""
        asked = group.regex_asked_ms
        if asked >= 0 and now_ms - asked < REGEX_RESOLUTION_TIMEOUT_MS:
            return
        since = now_ms - group.regex_refreshed_ms
        if group.regex_refreshed_ms >= 0 and since <= REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
            return
        due = (
            new_regex
            or any(x not in group.resolved_regexes for x in group.regex_members)
            or group.regex_image_version != self._ctx.topics.version
            or since >= self._ctx.config.consumer_regex_refresh_interval_ms
        )
        if due:
            group.set("regex_asked_ms", now_ms)
            group.set("regex_trigger", (req.principal, req.client_host))
            result.regex_resolutions.append(group.group_id)

    def resolve_regexes(
        self, result: Result[Any], group: ConsumerGroup, now_ms: int, allows: TopicFilter | None
    ) -> bool:
        """Resolve the group's regexes against the topics image: each regex the group still
        subscribes to gets its resolution record (Kafka writes them all: the timestamp is the
        group's last refresh). With ``allows``, a regex resolves only to the topics the member
        whose heartbeat asked may describe (Kafka's TopicRegexResolver). True when a resolution
        changed (also one that became empty, KAFKA-19899)."""
        trigger = group.regex_trigger
        group.set("regex_asked_ms", -1)
        image = self._ctx.topics
        group.set("regex_image_version", image.version)
        changed = False
        for regex in sorted(group.regex_members):
            topics = self._resolve(regex)
            if allows is not None and trigger is not None:
                who, host = trigger
                topics = frozenset(t for t in topics if allows(who, host, t))
            resolved = group.resolved_regexes.get(regex)
            changed |= resolved is None or resolved[0] != topics
            self._ctx.emit(
                result, r.regex_record(group.group_id, regex, topics, image.version, now_ms)
            )
        return changed

    def _resolve(self, regex: str) -> frozenset[str]:
        """Resolve against the current image; cached per (regex, image version) in this process
        only (image versions restart with the process, so persisted versions are not trusted)."""
        image = self._ctx.topics
        cached = self._regex_cache.get(regex)
        if cached is not None and cached[0] == image.version:
            return cached[1]
        topics = resolve_regex(regex, image.by_name)
        if len(self._regex_cache) > 4096:
            self._regex_cache.clear()
        self._regex_cache[regex] = (image.version, topics)
        return topics

    def maybe_drop_regex(self, result: Result[Any], group: ConsumerGroup, regex: str) -> None:
        """The last member using a regex dropped it: delete its resolution."""
        if regex not in group.regex_members and regex in group.resolved_regexes:
            self._ctx.emit(result, r.regex_tombstone(group.group_id, regex))
