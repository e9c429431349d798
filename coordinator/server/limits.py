"""Bounded cost per request: the limits the service layer checks before any work (#13).

Rules and theory of operation:

* Every request names a bounded amount of work and of state. The service layer (``service.py``)
  calls these checks first, before the runtime sees the request, so a request over a limit is
  refused before any work or state change — for gRPC and the Kafka protocol alike.
* The limits are configs with Kafka-style names (``coordinator/core/config.py``; defaults and
  reasons in docs/operations.md "Limits"): ``group.coordinator.identifier.max.bytes`` (group,
  member, instance, rack and client ids, subscribed topic names), ``group.consumer.regex.max.bytes``,
  ``group.consumer.max.subscribed.topics``, ``group.coordinator.request.max.partitions``
  (partitions — and topics — named in one request; a heartbeat's owned partitions may go up to
  every partition the coordinator knows, since it may have assigned them all to one member) and ``group.coordinator.request.max.groups``
  (groups — and config resources — named in one request).
* A refusal uses Kafka's code for the field where Kafka has one: INVALID_GROUP_ID for a group
  id (INVALID_REQUEST in ConsumerGroupHeartbeat, as Kafka answers its malformed group ids),
  INVALID_REGULAR_EXPRESSION for a regex, INVALID_REQUEST otherwise; the message names the
  field, its size, the limit and the config that sets it.
* Identifiers are measured in UTF-8 bytes, as Kafka's wire format measures strings.
* Only what a request could make the coordinator store or compute is bounded here; a lookup by
  an over-long id simply finds nothing (the request itself is bounded by the message size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    InvalidGroupIdError,
    InvalidRegularExpressionError,
    InvalidRequestError,
)

IDENTIFIER = "group.coordinator.identifier.max.bytes"
REGEX = "group.consumer.regex.max.bytes"
SUBSCRIBED_TOPICS = "group.consumer.max.subscribed.topics"
PARTITIONS = "group.coordinator.request.max.partitions"
GROUPS = "group.coordinator.request.max.groups"


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLimits:
    identifier_max_bytes: int
    regex_max_bytes: int
    max_subscribed_topics: int
    max_partitions: int
    max_groups: int

    @classmethod
    def of(cls, config: GroupCoordinatorConfig) -> RequestLimits:
        return cls(
            identifier_max_bytes=config.identifier_max_bytes,
            regex_max_bytes=config.consumer_regex_max_bytes,
            max_subscribed_topics=config.consumer_max_subscribed_topics,
            max_partitions=config.request_max_partitions,
            max_groups=config.request_max_groups,
        )

    # -- building blocks ------------------------------------------------------------------------

    def identifier(
        self,
        field: str,
        value: str | None,
        error: type[CoordinatorError] = InvalidRequestError,
    ) -> None:
        """``value`` (None: absent) is at most ``identifier_max_bytes`` UTF-8 bytes."""
        if value is None:
            return
        limit = self.identifier_max_bytes
        if len(value) * 4 <= limit:  # fast path: cannot be over, whatever the characters
            return
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise error(
                f"{field} is {size} bytes long; at most {limit} are allowed ({IDENTIFIER})."
            )

    def group_id(self, group_id: str, *, heartbeat: bool = False) -> None:
        self.identifier(
            "GroupId", group_id, InvalidRequestError if heartbeat else InvalidGroupIdError
        )

    def count(self, what: str, n: int, limit: int, config: str) -> None:
        if n > limit:
            raise InvalidRequestError(
                f"The request names {n} {what}; at most {limit} are allowed in one request "
                f"({config})."
            )

    def partitions(self, n: int) -> None:
        self.count("partitions", n, self.max_partitions, PARTITIONS)

    def groups(self, n: int) -> None:
        self.count("groups", n, self.max_groups, GROUPS)

    # -- requests -------------------------------------------------------------------------------

    def owned_partitions(
        self,
        n: int,
        known_partitions: Callable[[], int],
        authorize: Callable[[], None] | None = None,
    ) -> None:
        """Partitions a member says it owns. A member may own every partition there is (the
        coordinator may have assigned them all to it), so over ``max_partitions`` the bound is
        the number of partitions of every topic the coordinator knows (counted only then).
        That bound is state: ``authorize`` (the group's READ) is asked first, so a caller
        refused the group is answered its refusal, as Kafka authorizes before anything, and
        cannot probe how many partitions exist; the refusal names no count either."""
        if n <= self.max_partitions:
            return
        if authorize is not None:
            authorize()
        if n > known_partitions():
            raise InvalidRequestError(
                f"The request names {n} owned partitions; at most {self.max_partitions} are "
                f"allowed in one request ({PARTITIONS}), or every partition the coordinator "
                "knows when there are more."
            )

    def heartbeat(
        self,
        req: Any,
        known_partitions: Callable[[], int],
        authorize: Callable[[], None] | None = None,
    ) -> None:
        """A ConsumerGroupHeartbeat: everything a join or heartbeat may store or compute
        (``authorize``: see :meth:`owned_partitions`)."""
        self.group_id(req.group_id, heartbeat=True)
        self.identifier("MemberId", req.member_id)
        self.identifier("InstanceId", req.instance_id)
        self.identifier("RackId", req.rack_id)
        self.identifier("ClientId", req.client_id)
        names = req.subscribed_topic_names
        if names is not None:
            if len(names) > self.max_subscribed_topics:
                raise InvalidRequestError(
                    f"SubscribedTopicNames lists {len(names)} topics; at most "
                    f"{self.max_subscribed_topics} are allowed ({SUBSCRIBED_TOPICS})."
                )
            for name in names:
                self.identifier("A subscribed topic name", name)
        regex = req.subscribed_topic_regex
        if regex is not None and len(regex) * 4 > self.regex_max_bytes:
            size = len(regex.encode("utf-8", "surrogatepass"))
            if size > self.regex_max_bytes:
                raise InvalidRegularExpressionError(
                    f"SubscribedTopicRegex is {size} bytes long; at most {self.regex_max_bytes} "
                    f"are allowed ({REGEX})."
                )
        owned = req.topic_partitions
        if owned:
            self.owned_partitions(sum(len(p) for p in owned.values()), known_partitions, authorize)

    def offset_commit(self, req: Any) -> None:
        self.group_id(req.group_id)
        self.identifier("MemberId", req.member_id)
        self.identifier("GroupInstanceId", req.group_instance_id)
        self.partitions(sum(len(t.partitions) for t in req.topics))

    def offset_fetch(self, groups: Sequence[Any]) -> None:
        """The request as a whole; group ids are checked per group (:meth:`group_id`)."""
        self.groups(len(groups))
        total = 0
        for g in groups:
            topics = getattr(g, "topics", None)
            if topics:
                total += sum(len(t.partition_indexes or ()) for t in topics)
        self.partitions(total)

    def offset_delete(self, group_id: str, topics: Iterable[tuple[str, Sequence[int]]]) -> None:
        self.group_id(group_id)
        self.partitions(sum(len(partitions) for _name, partitions in topics))

    def classic_join(self, req: Any) -> None:
        self.group_id(req.group_id)
        self.identifier("MemberId", req.member_id)
        self.identifier("GroupInstanceId", req.group_instance_id)
        self.identifier("ClientId", req.client_id)
        self.identifier("ProtocolType", req.protocol_type)
        if len(req.protocols) > self.max_groups:
            raise InvalidRequestError(
                f"The request names {len(req.protocols)} protocols; at most {self.max_groups} "
                f"are allowed ({GROUPS})."
            )
        for name, _metadata in req.protocols:
            self.identifier("A protocol name", name)

    def precheck_grpc(
        self,
        method: str,
        request: Any,
        known_partitions: Callable[[], int],
        authorize: Callable[[], None] | None = None,
    ) -> None:
        """The partition counts of a gRPC request, taken on the wire message before it is
        converted (converting a million partitions is itself seconds of work); the service
        layer checks the same again for every codec. ``authorize``: the heartbeat's group READ
        (:meth:`owned_partitions`)."""
        if method == "OffsetCommit":
            n = sum(len(t.partitions) for t in request.topics)
        elif method == "OffsetDelete":
            n = sum(len(t.partition_indexes) for t in request.topics)
        elif method == "OffsetFetch":
            self.groups(len(request.groups))
            n = sum(
                len(t.partition_indexes)
                for g in request.groups
                if g.HasField("topics")
                for t in g.topics.items
            )
        elif method == "ConsumerGroupHeartbeat" and request.HasField("topic_partitions"):
            n = sum(len(t.partitions) for t in request.topic_partitions.items)
            self.owned_partitions(n, known_partitions, authorize)
            return
        else:
            return
        self.partitions(n)

    def topics(self, names: Iterable[str]) -> None:
        """CreateTopics / CreatePartitions / DeleteTopics: topics named in one request."""
        self.count("topics", sum(1 for _ in names), self.max_partitions, PARTITIONS)
