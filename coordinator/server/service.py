"""The service layer: every RPC of the coordinator, defined once, for every protocol.

Each method takes a request dataclass (the core's, the bridge's, or :mod:`.api`'s) and a
:class:`~.api.Caller`, calls the runtime and answers a response dataclass. Protocol errors
(:class:`CoordinatorError`) never escape: each RPC answers them in Kafka's shape for that RPC
(top-level, per group, per partition), from one table of codes (``errors.to_error_code``). An
unexpected exception is a bug: logged with its traceback, answered UNKNOWN_SERVER_ERROR.

The codecs — gRPC (``services.py`` + ``convert.py``) and the Kafka protocol (``kafka/``) — only
translate their wire messages to these dataclasses and back. Rules that depend on a Kafka API
version live here, keyed on ``caller.api_version`` (gRPC sends None = Kafka's latest version):
a ConsumerGroupHeartbeat v1+ must carry the member id the consumer generated; a KIP-848 member
must commit with OffsetCommit v9+; JoinGroup v0-v3 has no MEMBER_ID_REQUIRED round trip;
DescribeGroups v0-v5 answers an unknown or consumer group as Dead, not GROUP_ID_NOT_FOUND.

While the runtime shuts down every RPC answers COORDINATOR_NOT_AVAILABLE (Kafka's clients then
look the coordinator up again), or raises :class:`ShuttingDown` for a transport with its own
answer (``caller.abort_when_closing``: gRPC's UNAVAILABLE).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from coordinator.core.commands import ConsumerGroupHeartbeat, ConsumerGroupHeartbeatResponse
from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorNotAvailableError,
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    InvalidGroupIdError,
    InvalidRequestError,
    MemberIdRequiredError,
    StaleMemberEpochError,
    UnsupportedVersionError,
)
from coordinator.core.model import ZERO_TOPIC_ID
from coordinator.core.offsets import (
    ListedGroup,
    OffsetCommit,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    PartitionResult,
    TxnOffsetCommit,
    commit_error_response,
)
from coordinator.core.offsets import TopicResult as OffsetTopicResult
from coordinator.core.topics import NewTopic, TopicResult
from coordinator.runtime import CoordinatorRuntime
from coordinator.security.acls import CLUSTER_NAME, AclBinding, new_binding, new_filter
from coordinator.security.authorizer import Authorizer, AuthorizerConfig
from coordinator.security.metadata import AclCreation, AclDeletion, UserResult
from coordinator.security.scram import ScramCredential, ScramMechanism
from legacy_bridge import messages as m
from legacy_bridge.protocol import ProtocolError, decode_subscription

from .api import (
    EVERY_TOPIC,
    AclSpec,
    AlterResource,
    AlterResult,
    AlterScramCredentials,
    Caller,
    ConfigResource,
    ConfigResult,
    Coordinator,
    DescribeConfigs,
    DescribedConsumerGroup,
    GroupError,
    IncrementalAlterConfigs,
    Node,
    Reply,
    TopicChanges,
    WatchEvent,
    WatchRequest,
    check_sync_protocol,
)
from .authorization import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    READ,
    TOPIC,
    TRANSACTIONAL_ID,
    WRITE,
    RequestAuthorizer,
    described_topics_denied,
    refused_groups_apart,
    topics_denied,
)
from .find_coordinator import find_coordinators
from .group_configs import (
    alter_checks,
    alter_error,
    alter_result,
    check_config_resource,
    config_changes,
    config_error,
    config_result,
    in_kafka_order,
)
from .limits import GROUPS as GROUPS_LIMIT
from .limits import RequestLimits
from .log_offsets import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ListOffsets,
    LogOffset,
    LogOffsetSource,
)
from .push import MemberPush, ShuttingDownError
from .rpc import RpcObserver, ShuttingDown, batched, each, on_each, reply_error, rpc
from .topic_admin import TopicAdmin
from .topic_source import RegistryTopics, TopicSource

if TYPE_CHECKING:
    from .cluster import ClusterRouting

log = logging.getLogger("kip848.server")

JOIN_MEMBER_ID_REQUIRED_VERSION = 4
"""JoinGroup v4+: a dynamic member's first join gets MEMBER_ID_REQUIRED (KIP-394)."""
DESCRIBE_GROUP_NOT_FOUND_VERSION = 6
"""DescribeGroups v6+: GROUP_ID_NOT_FOUND for an unknown or consumer group (KIP-1043); older: Dead."""
MEMBER_ID_REQUIRED_HEARTBEAT_VERSION = 1
"""ConsumerGroupHeartbeat v1+: the consumer names itself (KIP-1082; checked after the ACLs)."""
OFFSET_COMMIT_KIP848_VERSION = 9
"""OffsetCommit v9+ is required from members of the consumer protocol."""
TXN_OFFSET_COMMIT_V6 = 6
"""KIP-1319: from TxnOffsetCommit v6 a stale member epoch is STALE_MEMBER_EPOCH and a group
that does not exist GROUP_ID_NOT_FOUND; before, Kafka answers ILLEGAL_GENERATION for both."""


def check_group_id(group_id: str, message: str = "Group id can't be empty.") -> None:
    """Kafka answers INVALID_GROUP_ID for an empty group id — once the caller is authorized on
    it (KafkaApis authorizes first, the group coordinator validates the id): a caller refused
    the group gets GROUP_AUTHORIZATION_FAILED for "" as for any other name."""
    if not group_id.strip():
        raise InvalidGroupIdError(message)


def _check_classic_group_id(group_id: str) -> None:
    check_group_id(group_id, f"Group id '{group_id}' is invalid.")


def _commit_error(
    req: OffsetCommit | TxnOffsetCommit, code: ErrorCode, text: str | None
) -> Reply[Any]:
    """OffsetCommit answers a group-level error on every partition, as Kafka does."""
    return Reply(value=commit_error_response(req, _Err(code, text)))


class _Err(CoordinatorError):
    """An error code and message (possibly None) in the shape ``commit_error_response`` takes."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message  # type: ignore[assignment]


def _resources(req: DescribeConfigs | IncrementalAlterConfigs) -> Sequence[Any]:
    return req.resources


def _described_error(group_id: str, code: ErrorCode, text: str | None) -> DescribedConsumerGroup:
    return DescribedConsumerGroup(group_id=group_id, error_code=code, error_message=text)


def _fetch_error(
    group: OffsetFetchGroup | GroupError, code: ErrorCode, text: str | None
) -> OffsetFetchGroupResponse:
    return OffsetFetchGroupResponse(group_id=group.group_id, error_code=code, error_message=text)


def _not_deleted(
    group_id: str, code: ErrorCode, text: str | None
) -> tuple[str, ErrorCode, str | None]:
    return group_id, code, text


def _classic_described_error(group_id: str, code: ErrorCode, text: str | None) -> m.DescribedGroup:
    return m.DescribedGroup(group_id=group_id, error_code=int(code), error_message=text)


def _join_error(req: m.JoinGroup, code: ErrorCode, text: str | None) -> m.JoinGroupResponse:
    return m.JoinGroupResponse(
        error_code=int(code), error_message=text, generation_id=-1, member_id=req.member_id
    )


def _sync_error(_req: m.SyncGroup, code: ErrorCode, text: str | None) -> m.SyncGroupResponse:
    return m.SyncGroupResponse(error_code=int(code), error_message=text)


def _heartbeat_error(_req: m.Heartbeat, code: ErrorCode, text: str | None) -> m.HeartbeatResponse:
    if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # As Kafka's GroupCoordinatorService: "the group is still loading, so blindly
        # respond" (a client takes LOAD_IN_PROGRESS in a Heartbeat for a fatal error).
        return m.HeartbeatResponse()
    return m.HeartbeatResponse(error_code=int(code), error_message=text)


def _leave_error(_req: m.LeaveGroup, code: ErrorCode, text: str | None) -> m.LeaveGroupResponse:
    return m.LeaveGroupResponse(error_code=int(code), error_message=text)


def _acl_creation_error(_spec: AclSpec, code: ErrorCode, text: str | None) -> AclCreation:
    return AclCreation(binding=None, error_code=code, error_message=text)


def _acl_deletion_error(_spec: AclSpec, code: ErrorCode, text: str | None) -> AclDeletion:
    return AclDeletion(error_code=code, error_message=text)


def _user_error(user: str, code: ErrorCode, text: str | None) -> UserResult:
    return UserResult(user=user, error_code=code, error_message=text)


class CoordinatorService:
    """Every RPC of the coordinator over one runtime (shared by every codec and listener).
    ``topics``: where topics come from (default: the coordinator's own registry)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        topics: TopicSource | None = None,
        log_offsets: LogOffsetSource | None = None,
        authorizer: AuthorizerConfig | None = None,
    ) -> None:
        self.runtime = runtime
        committed = runtime.committed
        self.authorizer = Authorizer(committed.security, authorizer, lambda: committed.loaded)
        """Kafka's authorizer over the ACL records (``coordinator/security``) once durable
        (``runtime/committed.py``, as Kafka's follows the committed metadata): always on; with
        no ACL and ``allow.everyone.if.no.acl.found`` (the default) it allows everything."""
        self.authz = RequestAuthorizer(self.authorizer)
        runtime.set_topic_filter(self.authz.topic_describable)  # regexes resolved per principal
        self.limits = RequestLimits.of(runtime.config)  # checked first by every RPC
        self.topics: TopicSource = topics if topics is not None else RegistryTopics(runtime)
        self.topic_admin = TopicAdmin(self)
        self.log_offsets = log_offsets
        """Where ListOffsets goes (the upstream broker); None: no logs (coordinator-only)."""
        self.push = MemberPush(runtime)
        self.routing: ClusterRouting | None = None
        """Several nodes on one store: who FindCoordinator names (``cluster.py``);
        None: this node coordinates every group."""
        self.observer: RpcObserver | None = None
        """Who observes the RPCs (metrics, spans, audit): set by :func:`~.rpc.observe`."""

    async def consumer_group_watch(
        self, req: WatchRequest, caller: Caller
    ) -> AsyncGenerator[WatchEvent, None]:
        """ConsumerGroupWatch: the push stream of one member (``push.py``); the only streaming
        RPC (GROUP READ, also before each message). Errors arrive as a last event."""
        allowed = partial(
            self.authz.allowed, caller, "ConsumerGroupWatch", READ, GROUP, req.group_id
        )
        try:
            async for event in self.push.watch(req, caller, allowed):
                yield event
        except ShuttingDownError as exc:
            raise ShuttingDown(str(exc)) from None

    def topic_name(self, topic_id: str) -> str:
        """Convenience name of a topic id for responses ("" when unknown)."""
        return self.runtime.topic_name(topic_id)

    def topic_exists(self, name: str) -> bool:
        """Whether a topic of that name exists as of the cluster log's last durable write
        (``runtime/committed.py``), as the authorizer decides on its committed ACLs: a refusal
        of a client that may describe the topic names it unknown (UNKNOWN_TOPIC_OR_PARTITION)
        or refused by this, never by a CreateTopics or DeleteTopics still in flight."""
        return name in self.runtime.committed.registry.image().by_name

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The stored SCRAM credential of ``user`` for ``mechanism`` (None: none): what the
        SASL/SCRAM server checks a client's proof against. A read of the credential records as
        of the cluster log's last durable write (``runtime/committed.py``), on the loop,
        without waiting."""
        return self.runtime.committed.security.scram_credential(user, mechanism)

    # ------------------------------------------------------------ KIP-848 consumer groups

    @rpc(reply_error)
    async def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeat, caller: Caller
    ) -> Reply[ConsumerGroupHeartbeatResponse]:
        kafka_v1 = caller.api_version is not None and not caller.version_below(
            MEMBER_ID_REQUIRED_HEARTBEAT_VERSION
        )
        authz = self.authz
        self.limits.heartbeat(
            req, self.runtime.known_partitions, self.heartbeat_authorization(caller, req.group_id)
        )
        authz.check_group(caller, "ConsumerGroupHeartbeat", READ, req.group_id)
        if req.subscribed_topic_names:
            denied = authz.denied_topics(
                caller, "ConsumerGroupHeartbeat", DESCRIBE, req.subscribed_topic_names
            )
            if denied:
                raise topics_denied(denied)
        if kafka_v1 and not req.member_id:
            raise InvalidRequestError("MemberId can't be empty.")
        if req.principal is not caller.principal:  # the codecs decode it in; others may not
            req = replace(req, principal=caller.principal)
        topics = self.topics
        if topics.watches_subscriptions and (
            req.subscribed_topic_names or req.subscribed_topic_regex
        ):
            waiting = topics.subscribed(req.subscribed_topic_names, req.subscribed_topic_regex)
            if waiting is not None:
                await waiting
        return Reply(value=await self.runtime.heartbeat(req))

    def heartbeat_authorization(self, caller: Caller, group_id: str) -> Callable[[], None]:
        """A heartbeat's group READ check, for the limits that depend on state (its owned
        partitions over the request bound: ``RequestLimits.owned_partitions``)."""

        def check() -> None:
            self.limits.group_id(group_id, heartbeat=True)
            self.authz.check_group(caller, "ConsumerGroupHeartbeat", READ, group_id)

        return check

    @rpc(on_each(list, _described_error))
    async def consumer_group_describe(
        self, group_ids: Sequence[str], caller: Caller
    ) -> Reply[list[DescribedConsumerGroup]]:
        self.limits.groups(len(group_ids))

        async def describe(group_id: str) -> DescribedConsumerGroup:
            self.limits.group_id(group_id)
            self.authz.check_group(caller, "ConsumerGroupDescribe", DESCRIBE, group_id)
            check_group_id(group_id)
            desc = await self.runtime.describe_group(group_id)
            if not self.authorizer.open:
                named = {
                    *(t for m in desc.members for t in m.subscribed_topic_names),
                    *(
                        self.topic_name(t)
                        for m in desc.members
                        for a in (m.assignment, m.target_assignment)
                        for t in a
                    ),
                }
                if self.authz.denied_topics(  # KAFKA-18813: the group is not described
                    caller, "ConsumerGroupDescribe", DESCRIBE, sorted(n for n in named if n)
                ):
                    raise described_topics_denied()
            return DescribedConsumerGroup(group_id=group_id, description=desc)

        described = await each(group_ids, describe, _described_error)
        return Reply(value=refused_groups_apart(described, lambda g: g.error_code, first=True))

    # ------------------------------------------------------------ offsets

    @rpc(_commit_error)
    async def offset_commit(self, req: OffsetCommit, caller: Caller) -> Reply[OffsetCommitResponse]:
        self.limits.offset_commit(req)
        self.authz.check_group(caller, "OffsetCommit", READ, req.group_id)
        check_group_id(req.group_id)
        await self._look_up(t for t in req.topics if not t.name)  # by id: the names decide
        req, refused = self.authz.split_commit(caller, "OffsetCommit", req, self.topic_name)
        await self._look_up(req.topics)  # only what it may commit to, as Kafka authorizes first
        legacy = caller.version_below(OFFSET_COMMIT_KIP848_VERSION)
        if refused and not req.topics:
            answered = OffsetCommitResponse(topics=())
        elif legacy:
            answered = await self.runtime.offset_commit(req, legacy_version=True)
        else:
            answered = await self.runtime.offset_commit(req)
        return Reply(value=self.authz.merge_commit(answered, refused))

    @rpc(_commit_error)
    async def txn_offset_commit(
        self, req: TxnOffsetCommit, caller: Caller
    ) -> Reply[OffsetCommitResponse]:
        """TxnOffsetCommit (Kafka listener only: the transaction coordinator is the upstream's):
        TRANSACTIONAL_ID WRITE, GROUP READ and each topic's READ as Kafka checks them; the
        offsets are pending in the producer's transaction once durable. A member's stale epoch
        or a missing group is ILLEGAL_GENERATION before v6 (Kafka; KIP-1319's v6 keeps
        STALE_MEMBER_EPOCH and GROUP_ID_NOT_FOUND)."""
        self.limits.offset_commit(req)
        self.check_transaction(caller, "TxnOffsetCommit", req.transactional_id, req.group_id)
        req, refused = self.authz.split_commit(caller, "TxnOffsetCommit", req, self.topic_name)
        await self._look_up(req.topics)  # only what it may commit to, as Kafka authorizes first
        if refused and not req.topics:
            answered = OffsetCommitResponse(topics=())
        else:
            try:
                answered = await self.runtime.txn_offset_commit(req)
            except (StaleMemberEpochError, GroupIdNotFoundError) as exc:
                if caller.version_below(TXN_OFFSET_COMMIT_V6):
                    raise IllegalGenerationError(exc.message) from None
                raise
        return Reply(value=self.authz.merge_commit(answered, refused))

    def check_transaction(
        self, caller: Caller, api: str, transactional_id: str, group_id: str
    ) -> None:
        """What Kafka checks before a group's offsets join a producer's transaction
        (TxnOffsetCommit, AddOffsetsToTxn): TRANSACTIONAL_ID WRITE, then GROUP READ, then the
        group id; raises the first that fails."""
        self.limits.identifier("TransactionalId", transactional_id)
        self.authz.check(caller, api, WRITE, TRANSACTIONAL_ID, transactional_id)
        self.authz.check_group(caller, api, READ, group_id)
        check_group_id(group_id)

    async def _look_up(self, topics: Iterable[Any]) -> None:
        """Topics an offset commit names (by name or id) that the registry lacks are looked up
        upstream first (bounded; ``TopicSource.lookup``): a commit right after the broker
        auto-created its topic is accepted, as on Kafka."""
        waiting = self.topics.lookup(
            (t.name for t in topics if t.name), (t.topic_id for t in topics if t.topic_id)
        )
        if waiting is not None:
            await waiting

    @rpc(on_each(list, _fetch_error))
    async def offset_fetch(
        self, groups: Sequence[OffsetFetchGroup | GroupError], caller: Caller
    ) -> Reply[list[OffsetFetchGroupResponse]]:
        self.limits.offset_fetch(groups)

        def check(g: OffsetFetchGroup | GroupError) -> None:
            if isinstance(g, GroupError):  # its part of the request did not decode
                raise _Err(g.error_code, g.error_message)
            self.limits.group_id(g.group_id)
            self.authz.check_group(caller, "OffsetFetch", DESCRIBE, g.group_id)
            check_group_id(g.group_id)

        async def fetch(
            valid: list[OffsetFetchGroup | GroupError],
        ) -> list[OffsetFetchGroupResponse]:
            asked = [g for g in valid if isinstance(g, OffsetFetchGroup)]
            answers = await self.runtime.offset_fetch(asked)
            if self.authorizer.open:
                return answers
            return [
                self.authz.filter_fetch(caller, "OffsetFetch", g, a, self.topic_name)
                for g, a in zip(asked, answers, strict=True)
            ]

        return Reply(value=await batched(groups, check, fetch, _fetch_error))

    @rpc(reply_error)
    async def offset_delete(
        self, req: tuple[str, Sequence[tuple[str, Sequence[int]]]], caller: Caller
    ) -> Reply[OffsetDeleteResponse]:
        """``req``: (group id, [(topic name, partitions)])."""
        group_id, topics = req
        self.limits.offset_delete(group_id, topics)
        self.authz.check_group(caller, "OffsetDelete", DELETE, group_id)
        check_group_id(group_id)
        denied = set(
            self.authz.denied_topics(caller, "OffsetDelete", READ, (n for n, _p in topics))
        )
        if denied:  # Kafka: those partitions answer TOPIC_AUTHORIZATION_FAILED, the rest go on
            # (none left: the coordinator still judges the group, as KafkaApis asks it).
            kept = [(n, ps) for n, ps in topics if n not in denied]
            answer = await self.runtime.offset_delete(group_id, kept)
            return Reply(value=_with_denied_topics(answer, topics, denied))
        return Reply(value=await self.runtime.offset_delete(group_id, topics))

    # ------------------------------------------------------------ group administration

    @rpc(reply_error)
    async def list_groups(
        self, req: tuple[Sequence[str], Sequence[str]], caller: Caller
    ) -> Reply[list[ListedGroup]]:
        """``req``: (states filter, types filter), case-insensitive."""
        states, types = req
        self.limits.count("state and type filters", len(states) + len(types), 64, "a fixed limit")
        listed = await self.runtime.list_groups(list(states), list(types))
        if self.authz.may(caller, DESCRIBE, CLUSTER, CLUSTER_NAME):
            return Reply(value=listed)
        # Kafka: without CLUSTER DESCRIBE, the groups the caller may describe (silently).
        return Reply(value=self.authz.visible(caller, listed, DESCRIBE, GROUP, _group_id_of))

    @rpc(on_each(list, _not_deleted))
    async def delete_groups(
        self, group_ids: Sequence[str], caller: Caller
    ) -> Reply[list[tuple[str, ErrorCode, str | None]]]:
        self.limits.groups(len(group_ids))

        def check(group_id: str) -> None:
            self.limits.group_id(group_id)
            self.authz.check_group(caller, "DeleteGroups", DELETE, group_id)
            check_group_id(group_id)

        return Reply(
            value=refused_groups_apart(
                await batched(group_ids, check, self.runtime.delete_groups, _not_deleted),
                lambda g: g[1],
                first=False,
            )
        )

    @rpc(on_each(_resources, config_error))
    async def describe_configs(
        self, req: DescribeConfigs, caller: Caller
    ) -> Reply[list[ConfigResult]]:
        self.limits.groups(len(req.resources))

        kafka = caller.api_version is not None
        other = self.authz.other_config_resource(caller, "DescribeConfigs", DESCRIBE_CONFIGS)

        async def describe(res: ConfigResource) -> ConfigResult:
            check_config_resource(res.resource_type, res.resource_name, kafka, other)
            self.limits.identifier("The group name", res.resource_name)
            self.authz.check_group(caller, "DescribeConfigs", DESCRIBE_CONFIGS, res.resource_name)
            configs, overrides = await self.runtime.describe_group_config(res.resource_name)
            return config_result(
                res, configs, overrides, req.include_synonyms, req.include_documentation
            )

        answers = await each(req.resources, describe, config_error)
        return Reply(value=in_kafka_order(answers, refused_first=False))

    @rpc(on_each(_resources, alter_error))
    async def incremental_alter_configs(
        self, req: IncrementalAlterConfigs, caller: Caller
    ) -> Reply[list[AlterResult]]:
        """Each resource checked on its own (an error answers it alone); those that pass are
        altered in one command, so one write, as Kafka's controller does."""
        self.limits.groups(len(req.resources))
        check = alter_checks(
            req.resources,
            lambda name: self.limits.identifier("The group name", name),
            lambda group: self.authz.check_group(
                caller, "IncrementalAlterConfigs", ALTER_CONFIGS, group
            ),
            caller.api_version is not None,
            self.authz.other_config_resource(caller, "IncrementalAlterConfigs", ALTER_CONFIGS),
        )

        async def alter(valid: list[AlterResource]) -> list[AlterResult]:
            alters = [(res.resource_name, config_changes(res)) for res in valid]
            errors = await self.runtime.alter_group_configs_each(alters, req.validate_only)
            return [alter_result(res, e) for res, e in zip(valid, errors, strict=True)]

        answers = await batched(req.resources, check, alter, alter_error)
        return Reply(value=in_kafka_order(answers, refused_first=True))

    # ------------------------------------------------------------ topic registry

    # The topic RPCs' answers wait for their write to the cluster log within the request's
    # timeout_ms (Kafka's timeoutMs): past it, REQUEST_TIMED_OUT (``Driver._cluster_bound``).

    @rpc(reply_error)
    async def create_topics(
        self, req: TopicChanges[NewTopic], caller: Caller
    ) -> Reply[list[TopicResult]]:
        return Reply(value=await self.topic_admin.create_topics(req, caller))

    @rpc(reply_error)
    async def create_partitions(
        self, req: TopicChanges[tuple[str, int]], caller: Caller
    ) -> Reply[list[TopicResult]]:
        return Reply(value=await self.topic_admin.create_partitions(req, caller))

    @rpc(reply_error)
    async def delete_topics(
        self, req: TopicChanges[str], caller: Caller
    ) -> Reply[list[TopicResult]]:
        return Reply(value=await self.topic_admin.delete_topics(req, caller))

    @rpc(reply_error)
    async def list_topics(self, req: object, caller: Caller) -> Reply[list[TopicResult]]:
        listed = await self.topics.list_topics()
        if req is not EVERY_TOPIC:  # else the caller leaves out what ``caller`` may not see
            listed = self.authz.visible(caller, listed, DESCRIBE, TOPIC, lambda t: t.name)
        return Reply(value=listed)

    @rpc(reply_error)
    async def describe_cluster(self, _req: None, caller: Caller) -> Reply[tuple[int, list[Node]]]:
        """(controller id, the nodes' gRPC addresses): every live node sharing the store
        (``cluster.py``), else this one alone."""
        self.authz.check_cluster(caller, "DescribeCluster", DESCRIBE)
        here = caller.node
        if here is None:
            raise CoordinatorNotAvailableError("The coordinator's address is not known yet.")
        routing = self.routing
        if routing is None:
            return Reply(value=(here.node_id, [here]))
        return Reply(value=routing.grpc_nodes(here))

    # ------------------------------------------------------------ log offsets (the broker's)

    @rpc(reply_error)
    async def list_offsets(self, req: ListOffsets, caller: Caller) -> Reply[list[LogOffset]]:
        """ListOffsets (``kafka/upstream/log_offsets.py``): from the upstream broker; without
        one there are no logs (UNSUPPORTED_VERSION)."""
        self.limits.partitions(len(req.queries))
        if req.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise InvalidRequestError(f"Unknown isolation level {req.isolation_level}.")
        denied = set(
            self.authz.denied_topics(
                caller, "ListOffsets", DESCRIBE, (q.topic for q in req.queries)
            )
        )
        kept = replace(req, queries=tuple(q for q in req.queries if q.topic not in denied))
        if self.log_offsets is None:
            if kept.queries or not req.queries:
                raise UnsupportedVersionError(
                    "This coordinator runs without an upstream broker (--kafka-upstream): it "
                    "keeps no logs, so it has no log offsets."
                )
            found: Iterator[LogOffset] = iter(())
        elif not denied:
            return Reply(value=await self.log_offsets.list_offsets(req))
        else:
            found = iter(await self.log_offsets.list_offsets(kept) if kept.queries else [])
        refusal = topics_denied(sorted(denied))
        return Reply(
            value=[
                LogOffset(
                    topic=q.topic,
                    partition=q.partition,
                    error_code=refusal.code,
                    error_message=refusal.message,
                )
                if q.topic in denied
                else next(found)
                for q in req.queries
            ]
        )

    # ------------------------------------------------------------ classic groups (the bridge)

    @rpc(reply_error)
    async def find_coordinator(
        self, req: tuple[int, Sequence[str]], caller: Caller
    ) -> Reply[list[Coordinator]]:
        """``req``: (key type, keys): ``find_coordinator.find_coordinators``."""
        return find_coordinators(self, req, caller)

    @rpc(_join_error)
    async def join_group(self, req: m.JoinGroup, caller: Caller) -> m.JoinGroupResponse:
        self.limits.classic_join(req)
        self.authz.check_group(caller, "JoinGroup", READ, req.group_id)
        if self.topics.watches_subscriptions and req.protocol_type == "consumer" and req.protocols:
            waiting = self.topics.subscribed(_subscribed_topics(req), None)
            if waiting is not None:
                await waiting
        answer = await self.runtime.classic_join(req)
        if (
            answer.error_code == MemberIdRequiredError.code
            and caller.version_below(JOIN_MEMBER_ID_REQUIRED_VERSION)
            and answer.member_id
        ):
            # JoinGroup v0-v3 clients do not know MEMBER_ID_REQUIRED: Kafka lets them join
            # with a new member id at once. The same two steps a v4+ client makes, here.
            answer = await self.runtime.classic_join(_with_member_id(req, answer.member_id))
        return answer

    @rpc(_sync_error)
    async def sync_group(self, req: m.SyncGroup, caller: Caller) -> m.SyncGroupResponse:
        check_sync_protocol(req.protocol_type, req.protocol_name, caller)
        self.authz.check_group(caller, "SyncGroup", READ, req.group_id)
        _check_classic_group_id(req.group_id)
        return await self.runtime.classic_sync(req)

    @rpc(_heartbeat_error)
    async def heartbeat(self, req: m.Heartbeat, caller: Caller) -> m.HeartbeatResponse:
        self.authz.check_group(caller, "Heartbeat", READ, req.group_id)
        _check_classic_group_id(req.group_id)
        return await self.runtime.classic_heartbeat(req)

    @rpc(_leave_error)
    async def leave_group(self, req: m.LeaveGroup, caller: Caller) -> m.LeaveGroupResponse:
        self.authz.check_group(caller, "LeaveGroup", READ, req.group_id)
        _check_classic_group_id(req.group_id)
        return await self.runtime.classic_leave(req)

    @rpc(on_each(list, _classic_described_error))
    async def describe_groups(
        self, group_ids: Sequence[str], caller: Caller
    ) -> Reply[list[m.DescribedGroup]]:
        self.limits.groups(len(group_ids))
        old = caller.version_below(DESCRIBE_GROUP_NOT_FOUND_VERSION)

        async def describe(group_id: str) -> m.DescribedGroup:
            self.limits.group_id(group_id)
            self.authz.check_group(caller, "DescribeGroups", DESCRIBE, group_id)
            _check_classic_group_id(group_id)
            (g,) = await self.runtime.describe_classic_groups([group_id])  # one per group id
            if old and g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return m.DescribedGroup(group_id=group_id, group_state="Dead")
            return g

        described = await each(group_ids, describe, _classic_described_error)
        return Reply(value=refused_groups_apart(described, lambda g: g.error_code, first=True))

    # ------------------------------------------------------------ security administration

    @rpc(reply_error)
    async def describe_acls(self, spec: AclSpec, caller: Caller) -> Reply[list[AclBinding]]:
        self.authz.check_cluster(caller, "DescribeAcls", DESCRIBE)
        _check_acl_strings(self.limits, spec)
        flt = new_filter(**_acl_fields(spec))
        return Reply(value=await self.runtime.describe_acls(flt))

    @rpc(on_each(list, _acl_creation_error))
    async def create_acls(
        self, specs: Sequence[AclSpec], caller: Caller
    ) -> Reply[list[AclCreation]]:
        self.limits.count("ACLs", len(specs), self.limits.max_groups, GROUPS_LIMIT)
        self.authz.check_cluster(caller, "CreateAcls", ALTER)
        creations = []
        for spec in specs:
            try:
                _check_acl_strings(self.limits, spec)
                binding = new_binding(**_acl_fields(spec, creating=True))
            except CoordinatorError as exc:
                creations.append(
                    AclCreation(binding=None, error_code=exc.code, error_message=exc.message)
                )
                continue
            creations.append(AclCreation(binding=binding))
        return Reply(value=await self.runtime.create_acls(creations))

    @rpc(on_each(list, _acl_deletion_error))
    async def delete_acls(
        self, specs: Sequence[AclSpec], caller: Caller
    ) -> Reply[list[AclDeletion]]:
        self.limits.count("ACL filters", len(specs), self.limits.max_groups, GROUPS_LIMIT)
        self.authz.check_cluster(caller, "DeleteAcls", ALTER)

        def check(spec: AclSpec) -> None:
            _check_acl_strings(self.limits, spec)
            new_filter(**_acl_fields(spec))

        async def delete(valid: list[AclSpec]) -> list[AclDeletion]:
            return await self.runtime.delete_acls([new_filter(**_acl_fields(f)) for f in valid])

        return Reply(value=await batched(specs, check, delete, _acl_deletion_error))

    @rpc(reply_error)
    async def describe_user_scram_credentials(
        self, users: Sequence[str] | None, caller: Caller
    ) -> Reply[list[UserResult]]:
        self.limits.count("users", len(users or ()), self.limits.max_groups, GROUPS_LIMIT)
        self.authz.check_cluster(caller, "DescribeUserScramCredentials", DESCRIBE)
        for user in users or ():
            self.limits.identifier("A user name", user)
        return Reply(value=await self.runtime.describe_scram_credentials(users))

    @rpc(on_each(AlterScramCredentials.users, _user_error))
    async def alter_user_scram_credentials(
        self, req: AlterScramCredentials, caller: Caller
    ) -> Reply[list[UserResult]]:
        n = len(req.deletions) + len(req.upsertions)
        self.limits.count("credential changes", n, self.limits.max_groups, GROUPS_LIMIT)
        self.authz.check_cluster(caller, "AlterUserScramCredentials", ALTER)
        for user in req.users():
            self.limits.identifier("A user name", user)
        return Reply(
            value=await self.runtime.alter_scram_credentials(req.deletions, req.upsertions)
        )

    # ------------------------------------------------------------ testing

    @rpc(reply_error)
    async def advance_time(self, ms: int, caller: Caller) -> Reply[int]:
        if ms < 0:
            raise InvalidRequestError(f"ms must be >= 0, got {ms}.")
        self.authz.check_cluster(caller, "AdvanceTime", ALTER)
        return Reply(value=await self.runtime.advance_time(ms))


def _acl_fields(spec: AclSpec, creating: bool = False) -> dict[str, Any]:
    fields = {
        "resource_type": spec.resource_type,
        "resource_name": spec.resource_name,
        "pattern_type": spec.pattern_type,
        "principal": spec.principal,
        "host": spec.host,
        "operation": spec.operation,
        "permission_type": spec.permission_type,
    }
    if creating:  # a binding names every field ("" where a filter would have None)
        for name in ("resource_name", "principal", "host"):
            fields[name] = fields[name] or ""
    return fields


def _check_acl_strings(limits: RequestLimits, spec: AclSpec) -> None:
    limits.identifier("A resource name", spec.resource_name)
    limits.identifier("A principal", spec.principal)
    limits.identifier("A host", spec.host)


def _subscribed_topics(req: m.JoinGroup) -> list[str]:
    """The topics a classic consumer's JoinGroup subscribes to (its first protocol's
    ConsumerProtocolSubscription; bytes that do not parse are the bridge's to answer)."""
    try:
        return list(decode_subscription(req.protocols[0][1]).topics)
    except ProtocolError:
        return []


def _with_member_id(req: m.JoinGroup, member_id: str) -> m.JoinGroup:
    return replace(req, member_id=member_id)


def _group_id_of(g: ListedGroup) -> str:
    return g.group_id


def _with_denied_topics(
    answer: OffsetDeleteResponse,
    asked: Sequence[tuple[str, Sequence[int]]],
    denied: set[str],
) -> OffsetDeleteResponse:
    """OffsetDelete's answer with TOPIC_AUTHORIZATION_FAILED on the partitions of ``denied``
    topics, in Kafka's order (KafkaApis.handleOffsetDeleteRequest): the topics answered before
    the coordinator is asked — refused, unknown, or naming partitions they do not have (the
    core answers those UNKNOWN_TOPIC_OR_PARTITION first) — in the order of the request, then
    the others, as the coordinator answered them."""
    served = {t.name: t for t in answer.topics}
    first: list[OffsetTopicResult] = []
    rest: list[OffsetTopicResult] = []
    for name, partitions in asked:
        if name in denied:
            exc = topics_denied([name])
            first.append(
                OffsetTopicResult(
                    name=name,
                    topic_id=ZERO_TOPIC_ID,
                    partitions=tuple(
                        PartitionResult(
                            partition_index=p, error_code=exc.code, error_message=exc.message
                        )
                        for p in partitions
                    ),
                )
            )
        elif (found := served.pop(name, None)) is not None:
            unknown = any(
                p.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for p in found.partitions
            )
            (first if unknown else rest).append(found)
    return replace(answer, topics=tuple(first + rest + list(served.values())))
