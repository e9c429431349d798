"""Authorization of the service layer's requests: Kafka's per-API rules (KafkaApis), once for
both protocols.

The service layer asks before it changes or reads anything; a refusal is answered in-band in
the RPC's own shape (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED, with Kafka's messages), so a refused request changes nothing and
a caller learns that a group exists only if it may describe it (the check comes before any
lookup). Every refusal is reported (``Authorizer.on_refused``: the audit trail and the metrics),
except where Kafka filters silently: ListGroups, ListTopics/Metadata and regex resolution drop
what the caller may not describe.

Per RPC (the API's Kafka name; G = the group, T = a topic, C = the cluster):

* ConsumerGroupHeartbeat, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupWatch:
  G READ. ConsumerGroupHeartbeat's SubscribedTopicNames: T DESCRIBE each, else the request is
  TOPIC_AUTHORIZATION_FAILED; a regex resolved in a member's heartbeat matches only the topics
  that member may describe (:meth:`RequestAuthorizer.topic_describable`, the core's
  ``ConsumerGroups.topic_filter``; the command carries the principal).
* OffsetCommit: G READ; T READ per topic, else TOPIC_AUTHORIZATION_FAILED on its partitions.
  OffsetFetch: G DESCRIBE; named topics T DESCRIBE (else per partition), "all topics" omits
  the others. OffsetDelete: G DELETE; T READ per topic.
* ConsumerGroupDescribe, DescribeGroups, FindCoordinator: G DESCRIBE (per group/key);
  ConsumerGroupDescribe also T DESCRIBE on every topic its members subscribe to or are
  assigned (KAFKA-18813), else that group is TOPIC_AUTHORIZATION_FAILED.
  ListGroups: C DESCRIBE lists every group; else the groups the caller may describe.
  DeleteGroups: G DELETE. DescribeConfigs/IncrementalAlterConfigs (GROUP): G DESCRIBE_CONFIGS
  / ALTER_CONFIGS.
* Topics: CreateTopics C CREATE or T CREATE; DeleteTopics T DELETE; CreatePartitions T ALTER;
  ListTopics/Metadata list what the caller may describe; ListOffsets T DESCRIBE.
* Security administration: DescribeAcls, DescribeUserScramCredentials C DESCRIBE; CreateAcls,
  DeleteAcls, AlterUserScramCredentials C ALTER. AdvanceTime (the manual clock): C ALTER.

The APIs the Kafka listener forwards to an open broker are checked there, with the same
questions (``kafka/topic_guard.py``, ``admin_guard.py``, ``txn_guard.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

from coordinator.core.errors import (
    ClusterAuthorizationFailedError,
    CoordinatorError,
    CoordinatorLoadInProgressError,
    ErrorCode,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    PartitionResult,
    TopicResult,
    TxnOffsetCommit,
)
from coordinator.security.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
)
from coordinator.security.authorizer import Authorizer, Refusal
from coordinator.security.principal import ANONYMOUS, KafkaPrincipal

from .api import Caller

T = TypeVar("T")
C = TypeVar("C", OffsetCommit, TxnOffsetCommit)

# Plain ints (Kafka's numbers) in the hot path: an IntEnum hashes through Python code, and each
# question is a cache key.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (
    int(AclOperation.READ),
    int(AclOperation.WRITE),
    int(AclOperation.CREATE),
    int(AclOperation.DELETE),
    int(AclOperation.ALTER),
    int(AclOperation.DESCRIBE),
)
DESCRIBE_CONFIGS, ALTER_CONFIGS = (
    int(AclOperation.DESCRIBE_CONFIGS),
    int(AclOperation.ALTER_CONFIGS),
)
GROUP, TOPIC, CLUSTER = int(ResourceType.GROUP), int(ResourceType.TOPIC), int(ResourceType.CLUSTER)
TRANSACTIONAL_ID = int(ResourceType.TRANSACTIONAL_ID)


_TOPIC_CONFIGS = 2
_CLUSTER_CONFIGS = frozenset({4, 8, 16})
"""Kafka's ConfigResource types TOPIC; BROKER, BROKER_LOGGER, CLIENT_METRICS."""


def group_denied(group_id: str) -> CoordinatorError:
    return GroupAuthorizationFailedError(f"Not authorized to access group: {group_id}")


def topics_denied(names: Iterable[str]) -> CoordinatorError:
    return TopicAuthorizationFailedError(f"Not authorized to access topics: [{', '.join(names)}]")


def described_topics_denied() -> CoordinatorError:
    """ConsumerGroupDescribe of a group whose members use topics the caller may not describe
    (KAFKA-18813): Kafka's message, which names none of them — the caller may not learn them."""
    return TopicAuthorizationFailedError(
        "The described group uses topics that the client is not authorized to describe."
    )


def _topic_id_denied(topic_id: str) -> CoordinatorError:
    """A topic given by id and refused: named by its id (no secret), not by its name."""
    return TopicAuthorizationFailedError(f"Not authorized to access topic id {topic_id}.")


def cluster_denied() -> CoordinatorError:
    return ClusterAuthorizationFailedError("Cluster authorization failed.")


_ERRORS: dict[int, Callable[[str], CoordinatorError]] = {
    GROUP: group_denied,
    TOPIC: lambda name: topics_denied([name]),
    CLUSTER: lambda _name: cluster_denied(),
    int(ResourceType.TRANSACTIONAL_ID): lambda name: TransactionalIdAuthorizationFailedError(
        f"Not authorized to access transactional id: {name}"
    ),
}


def refused_groups_apart(answers: list[T], code_of: Callable[[T], int], first: bool) -> list[T]:
    """Per-group answers in Kafka's order: KafkaApis answers the groups it refuses
    (GROUP_AUTHORIZATION_FAILED) apart from the coordinator's answer — before it
    (DescribeGroups, ConsumerGroupDescribe) or after it (DeleteGroups) —, each part in the
    order of the request."""
    refused = [a for a in answers if code_of(a) == ErrorCode.GROUP_AUTHORIZATION_FAILED]
    if not refused:
        return answers
    served = [a for a in answers if code_of(a) != ErrorCode.GROUP_AUTHORIZATION_FAILED]
    return refused + served if first else served + refused


def host_of(caller: Caller) -> str:
    """The client's address as ACLs name hosts (``/10.0.0.1`` -> ``10.0.0.1``)."""
    return caller.client_host.lstrip("/")


class RequestAuthorizer:
    """The service layer's questions to the :class:`Authorizer` (see the module doc)."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    def may(self, caller: Caller, operation: int, resource_type: int, name: str) -> bool:
        """Silent: nothing is reported (a filter)."""
        return self.authorizer.authorize(
            caller.principal, caller.client_host, operation, resource_type, name
        )

    def allowed(
        self, caller: Caller, api: str, operation: int, resource_type: int, name: str
    ) -> bool:
        """:meth:`may`, reporting a refusal (for the audit trail and the metrics). Before the
        ACLs are loaded, COORDINATOR_LOAD_IN_PROGRESS (raised) for all but super users: the
        caller retries, as it retries what the runtime answers while loading, instead of a
        refusal decided on no ACLs (or an allowance: ``Authorizer.ready``)."""
        if self.authorizer.authorize(
            caller.principal, caller.client_host, operation, resource_type, name
        ):
            return True
        if not self.authorizer.ready:
            raise CoordinatorLoadInProgressError()  # the runtime's own answer while loading
        self.authorizer.refused(
            Refusal(
                principal=caller.principal,
                host=host_of(caller),
                operation=AclOperation(operation),
                resource_type=ResourceType(resource_type),
                resource_name=name,
                api=api,
                client_id=caller.client_id,
                protocol="grpc" if caller.api_version is None else "kafka",
            )
        )
        return False

    def check(
        self, caller: Caller, api: str, operation: int, resource_type: int, name: str
    ) -> None:
        """Raise the resource type's authorization error (reported) unless allowed."""
        if not self.allowed(caller, api, operation, resource_type, name):
            raise _ERRORS[resource_type](name)

    def check_cluster(self, caller: Caller, api: str, operation: int) -> None:
        self.check(caller, api, operation, CLUSTER, CLUSTER_NAME)

    def check_group(self, caller: Caller, api: str, operation: int, group_id: str) -> None:
        self.check(caller, api, operation, GROUP, group_id)

    def denied_topics(
        self, caller: Caller, api: str, operation: int, names: Iterable[str]
    ) -> list[str]:
        """The names (each once, in order) ``caller`` may not ``operation``; reported."""
        if self.authorizer.open:
            return []
        return [
            n for n in dict.fromkeys(names) if not self.allowed(caller, api, operation, TOPIC, n)
        ]

    def visible(
        self,
        caller: Caller,
        items: Sequence[T],
        operation: int,
        resource_type: int,
        name: Callable[[T], str],
    ) -> list[T]:
        """The items whose resource the caller may ``operation``, silently (a filter)."""
        if self.authorizer.open:
            return list(items)
        return [i for i in items if self.may(caller, operation, resource_type, name(i))]

    def may_any(self, caller: Caller, operation: int, resource_type: int) -> bool:
        """May the caller ``operation`` some resource of the type (silent)?"""
        return self.authorizer.authorize_by_resource_type(
            caller.principal, caller.client_host, operation, resource_type
        )

    def authorized_operations(self, caller: Caller, resource_type: int, name: str) -> int:
        """Kafka's "authorized operations" bit field of a resource for the caller (bit n:
        operation n allowed), over the operations its type has (silent)."""
        return operations_of(partial(self.may, caller), resource_type, name)

    def pinned(self, caller: Caller) -> Callable[[int, int, str], bool]:
        """:meth:`may` for ``caller`` as the ACLs are now, for another thread (silent; pure
        over one state of the ACLs: ``Authorizer.pinned``)."""
        decide = self.authorizer.pinned()
        principal, host = caller.principal, caller.client_host
        return lambda operation, resource_type, name: decide(
            principal, host, operation, resource_type, name
        )

    def cluster_operations(self, caller: Caller) -> int:
        """The cluster's authorized operations as Metadata and DescribeCluster answer them
        (Kafka): 0 without DESCRIBE on the cluster, else the caller's bit field."""
        if not self.may(caller, DESCRIBE, CLUSTER, CLUSTER_NAME):
            return 0
        return self.authorized_operations(caller, CLUSTER, CLUSTER_NAME)

    def names(self, caller: Caller, name_of: Callable[[str], str]) -> Callable[[str], str]:
        """``name_of`` (a topic id's name, for an answer) as ``caller`` may see it: "" for a
        topic it may not DESCRIBE. Kafka holds a topic id no secret and its name one; a member
        can be assigned such a topic through a regex another member resolved (KAFKA-19147).
        Decided as the ACLs are now (no ACL: ``name_of`` itself): make one per answer, never
        one for a stream's every message."""
        if self.authorizer.open:
            return name_of

        def shown(topic_id: str) -> str:
            name = name_of(topic_id)
            return name if name and self.may(caller, DESCRIBE, TOPIC, name) else ""

        return shown

    def other_config_resource(
        self, caller: Caller, api: str, operation: int
    ) -> Callable[[int, str], None]:
        """Kafka's authorization of a config resource that is not a group's (raises its
        refusal; ConfigHelper, ControllerApis.authorizeAlterResource): TOPIC on the topic,
        BROKER, BROKER_LOGGER and CLIENT_METRICS on the cluster (``operation``:
        DESCRIBE_CONFIGS or ALTER_CONFIGS)."""

        def check(resource_type: int, name: str) -> None:
            if resource_type == _TOPIC_CONFIGS:
                self.check(caller, api, operation, TOPIC, name)
            elif resource_type in _CLUSTER_CONFIGS:
                self.check_cluster(caller, api, operation)

        return check

    def topic_describable(self, principal: object, client_host: str, topic: str) -> bool:
        """May ``principal`` (from ``client_host``) describe ``topic``? The core's filter of a
        regex resolution (``ConsumerGroups.topic_filter``), silent like Kafka's."""
        who = principal if isinstance(principal, KafkaPrincipal) else ANONYMOUS
        return self.authorizer.authorize(who, client_host, DESCRIBE, TOPIC, topic)

    # ------------------------------------------------------------ offsets, per topic

    def split_commit(
        self, caller: Caller, api: str, req: C, name_of: Callable[[str], str]
    ) -> tuple[C, list[TopicResult]]:
        """(the part of ``req`` on topics the caller may READ, TOPIC_AUTHORIZATION_FAILED
        answers for the others). A topic given by id is judged by its name (``name_of``; an
        unknown id is left to the core to answer UNKNOWN_TOPIC_ID); given by name and id
        (gRPC), by both: the core refuses a name and an id of two topics naming the id's
        topic, which only a caller that may read it is told."""
        if self.authorizer.open:
            return req, []
        kept, refused = [], []
        for t in req.topics:
            name = t.name or name_of(t.topic_id)
            by_id = name_of(t.topic_id) if t.name else name
            if not name or self.allowed(caller, api, READ, TOPIC, name):
                if not by_id or by_id == name or self.allowed(caller, api, READ, TOPIC, by_id):
                    kept.append(t)
                    continue
                exc = _topic_id_denied(t.topic_id)
            else:
                exc = topics_denied([name]) if t.name else _topic_id_denied(t.topic_id)
            refused.append(
                TopicResult(
                    name=t.name,
                    topic_id=t.topic_id,
                    partitions=tuple(
                        PartitionResult(
                            partition_index=p.partition_index,
                            error_code=exc.code,
                            error_message=exc.message,
                        )
                        for p in t.partitions
                    ),
                )
            )
        if not refused:
            return req, []
        return replace(req, topics=tuple(kept)), refused

    @staticmethod
    def merge_commit(
        answered: OffsetCommitResponse, refused: list[TopicResult]
    ) -> OffsetCommitResponse:
        """The refusals, then the answers of the kept topics: Kafka's order
        (KafkaApis.handleOffsetCommitRequest answers the refused topics first and merges the
        coordinator's answer after them), each part in the order of the request."""
        if not refused:
            return answered
        return OffsetCommitResponse(topics=(*refused, *answered.topics))

    def filter_fetch(
        self,
        caller: Caller,
        api: str,
        group: OffsetFetchGroup,
        answer: OffsetFetchGroupResponse,
        name_of: Callable[[str], str],
    ) -> OffsetFetchGroupResponse:
        """OffsetFetch's topic rule: named topics the caller may not DESCRIBE answer
        TOPIC_AUTHORIZATION_FAILED on each partition, after the others (Kafka's order:
        KafkaApis appends them to the coordinator's answer); a fetch of every topic omits
        them."""
        if self.authorizer.open or answer.error_code:
            return answer
        if group.topics is None:
            kept = [
                t
                for t in answer.topics
                if self.may(caller, DESCRIBE, TOPIC, t.name or name_of(t.topic_id))
            ]
            return replace(answer, topics=tuple(kept))
        out, denied = [], []
        asked = {x.name for x in group.topics if x.name}
        for t in answer.topics:
            name = t.name or name_of(t.topic_id)
            if not name or self.allowed(caller, api, DESCRIBE, TOPIC, name):
                out.append(t)
                continue
            denied.append(
                replace(
                    t,
                    name=name if name in asked else "",  # asked by id: its name is not told
                    partitions=tuple(
                        replace(
                            p,
                            committed_offset=-1,
                            committed_leader_epoch=-1,
                            metadata="",
                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        )
                        for p in t.partitions
                    ),
                )
            )
        return replace(answer, topics=(*out, *denied))


def operations_of(may: Callable[[int, int, str], bool], resource_type: int, name: str) -> int:
    """Kafka's "authorized operations" bit field of a resource (bit n: operation n allowed),
    over the operations its type has, as ``may`` (operation, resource type, name) decides."""
    bits = 0
    for op in SUPPORTED_OPERATIONS[ResourceType(resource_type)]:
        if may(int(op), resource_type, name):
            bits |= 1 << int(op)
    return bits
