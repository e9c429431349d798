"""One test per error path of ConsumerGroupHeartbeat.

Every rejected request must raise the exact typed error (Kafka code and message) and leave no
trace: the shard's canonical snapshot, the record log, the undo log and the timers are the same
before and after (KIP-848 "Request Validation", "Request Handling", "Fencing", "Static
Membership"; reference notes §1.3, §1.10, §1.12).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from builders import RoundRobinAssignor, p

from assignors.api import GroupAssignment, GroupSpec, PartitionAssignorError, TopicMetadata
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    FencedInstanceIdError,
    FencedMemberEpochError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    InvalidRegularExpressionError,
    InvalidRequestError,
    UnknownMemberIdError,
    UnknownServerError,
    UnreleasedInstanceIdError,
    UnsupportedAssignorError,
)
from coordinator.core.model import MemberState
from coordinator.harness import Harness

G = "grp"


# --------------------------------------------------------------------------- helpers


class FailingAssignor:
    name = "failing"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        raise self.error


class ForgetfulAssignor:
    """Returns an invalid assignment: the first member (in id order) is missing."""

    name = "forgetful"

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        members = sorted(spec.members)
        return GroupAssignment(members={m: {} for m in members[1:]})


class DoubleBookingAssignor:
    """Returns an invalid assignment: every member gets every partition."""

    name = "double"

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        return GroupAssignment(
            members={
                m: {t: frozenset(range(md.num_partitions)) for t, md in topics.items()}
                for m in spec.members
            }
        )


def harness(**kw: Any) -> Harness:
    kw.setdefault("assignors", [RoundRobinAssignor()])
    return Harness(**kw)


def stable_group(epoch: int = 5) -> tuple[Harness, str]:
    """Group "grp" at ``epoch``: A=[foo-0,1], B=[foo-2,3], both STABLE at ``epoch`` (previous
    epoch ``epoch - 1``)."""
    h = harness()
    foo = h.create_topic("foo", 4)
    h.seed_group(G, epoch, {"A": (["foo"], p(foo, 0, 1)), "B": (["foo"], p(foo, 2, 3))})
    return h, foo


def static_group() -> tuple[Harness, str]:
    """Group "grp" with one static member S (instance id "i1") at epoch 1 owning foo-0..3."""
    h = harness()
    foo = h.create_topic("foo", 4)
    res = h.join("S", ["foo"], instance_id="i1")
    assert res.response.member_epoch == 1
    return h, foo


def timers_state(h: Harness) -> list[tuple[Any, Any]]:
    return [(k, h.timers.get(k)) for k in h.timers.keys()]  # noqa: SIM118 (not a dict)


def assert_rejected(
    h: Harness, exc_type: type[CoordinatorError], code: int, message: str, **fields: Any
) -> CoordinatorError:
    """The heartbeat raises exactly ``exc_type`` with ``code`` and ``message`` and changes
    nothing: same snapshot, no records logged, nothing left in the undo log, same timers."""
    before = h.shard.snapshot()
    log_len = len(h.log)
    timers = timers_state(h)
    assert len(h.shard.undo) == 0
    with pytest.raises(CoordinatorError) as info:
        h.heartbeat_result(**fields)
    err = info.value
    assert type(err) is exc_type
    assert err.code == code
    assert err.message == message
    assert str(err) == message
    assert h.shard.snapshot() == before
    assert len(h.log) == log_len
    assert len(h.shard.undo) == 0
    assert timers_state(h) == timers
    assert h.replayed().snapshot() == h.shard.snapshot()
    return err


def join_fields(member_id: str = "X", **over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=60_000,
        subscribed_topic_names=("foo",),
        topic_partitions={},
    )
    fields.update(over)
    return fields


# --------------------------------------------------------------------------- INVALID_REQUEST

INVALID = ErrorCode.INVALID_REQUEST

VALIDATION_CASES = [
    ("empty_group_id", join_fields(group_id=""), "GroupId can't be empty."),
    ("blank_group_id", join_fields(group_id="   "), "GroupId can't be empty."),
    (
        "empty_group_id_heartbeat",
        dict(group_id="", member_id="A", member_epoch=5),
        "GroupId can't be empty.",
    ),
    ("empty_instance_id", join_fields(instance_id=""), "InstanceId can't be empty."),
    ("blank_instance_id", join_fields(instance_id=" \t"), "InstanceId can't be empty."),
    ("empty_rack_id", join_fields(rack_id=""), "RackId can't be empty."),
    ("blank_rack_id", join_fields(rack_id="  "), "RackId can't be empty."),
    ("epoch_minus_3", dict(member_id="A", member_epoch=-3), "MemberEpoch is invalid."),
    ("epoch_very_negative", dict(member_id="A", member_epoch=-(2**31)), "MemberEpoch is invalid."),
    ("missing_member_id_epoch_5", dict(member_id="", member_epoch=5), "MemberId can't be empty."),
    ("blank_member_id_epoch_5", dict(member_id="  ", member_epoch=5), "MemberId can't be empty."),
    ("missing_member_id_leave", dict(member_id="", member_epoch=-1), "MemberId can't be empty."),
    (
        "missing_member_id_static_leave",
        dict(member_id="", member_epoch=-2, instance_id="i1"),
        "MemberId can't be empty.",
    ),
    ("blank_member_id_join", join_fields(member_id="  "), "MemberId can't be empty."),
    (
        "rebalance_timeout_missing_on_join",
        join_fields(rebalance_timeout_ms=-1),
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "rebalance_timeout_zero_on_join",
        join_fields(rebalance_timeout_ms=0),
        "RebalanceTimeoutMs must be larger than zero, got 0.",
    ),
    (
        "rebalance_timeout_negative_on_join",
        join_fields(rebalance_timeout_ms=-5),
        "RebalanceTimeoutMs must be larger than zero, got -5.",
    ),
    (
        "rebalance_timeout_zero_on_heartbeat",
        dict(member_id="A", member_epoch=5, rebalance_timeout_ms=0),
        "RebalanceTimeoutMs must be larger than zero, got 0.",
    ),
    (
        "owned_partitions_null_on_join",
        join_fields(topic_partitions=None),
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "owned_partitions_non_empty_on_join",
        join_fields(topic_partitions={"AAAAAAAAAAAAAAAAAAAAAQ": frozenset({0})}),
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "neither_names_nor_regex_on_join",
        join_fields(subscribed_topic_names=None),
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    ),
    (
        "static_leave_without_instance_id",
        dict(member_id="A", member_epoch=-2),
        "InstanceId can't be null.",
    ),
    (
        "negative_partition_index",
        dict(
            member_id="A",
            member_epoch=5,
            topic_partitions={"AAAAAAAAAAAAAAAAAAAAAQ": frozenset({0, -1})},
        ),
        "TopicPartitions has a negative partition index for topic AAAAAAAAAAAAAAAAAAAAAQ.",
    ),
]


@pytest.mark.parametrize(
    "fields,message", [c[1:] for c in VALIDATION_CASES], ids=[c[0] for c in VALIDATION_CASES]
)
def test_invalid_request(fields: dict[str, Any], message: str) -> None:
    h, _foo = stable_group()
    assert_rejected(h, InvalidRequestError, INVALID, message, **fields)


PRECEDENCE_CASES = [
    # Kafka's order (throwIfConsumerGroupHeartbeatRequestIsInvalid): the member id first ...
    (
        "member_id_before_group_id",
        dict(group_id="", member_id="", member_epoch=5),
        InvalidRequestError,
        "MemberId can't be empty.",
    ),
    (
        "member_id_before_epoch",
        dict(member_id="", member_epoch=-3),
        InvalidRequestError,
        "MemberId can't be empty.",
    ),
    (
        "blank_member_id_before_group_id_on_join",
        join_fields(member_id=" ", group_id=""),
        InvalidRequestError,
        "MemberId can't be empty.",
    ),
    # ... then the group, instance and rack ids, then the join's fields ...
    (
        "rack_id_before_join_fields",
        join_fields(rack_id="", rebalance_timeout_ms=-1),
        InvalidRequestError,
        "RackId can't be empty.",
    ),
    # ... then the assignor, and only then our own checks (docs/proto.md).
    (
        "assignor_before_our_rebalance_timeout_check",
        join_fields(rebalance_timeout_ms=0, server_assignor="sticky"),
        UnsupportedAssignorError,
        "ServerAssignor sticky is not supported. Supported assignors: rr.",
    ),
    (
        "assignor_before_our_partition_check",
        dict(
            member_id="A",
            member_epoch=5,
            server_assignor="sticky",
            topic_partitions={"AAAAAAAAAAAAAAAAAAAAAQ": frozenset({-1})},
        ),
        UnsupportedAssignorError,
        "ServerAssignor sticky is not supported. Supported assignors: rr.",
    ),
]


@pytest.mark.parametrize(
    "fields,exc_type,message",
    [c[1:] for c in PRECEDENCE_CASES],
    ids=[c[0] for c in PRECEDENCE_CASES],
)
def test_validation_order_is_kafkas(
    fields: dict[str, Any], exc_type: type[CoordinatorError], message: str
) -> None:
    h, _foo = stable_group()
    assert_rejected(h, exc_type, exc_type.code, message, **fields)


def test_invalid_request_is_checked_before_the_group_is_looked_up() -> None:
    h = harness()
    assert_rejected(
        h,
        InvalidRequestError,
        INVALID,
        "MemberId can't be empty.",
        group_id="nope",
        member_id="",
        member_epoch=3,
    )
    assert h.shard.groups == {}


def test_existing_member_cannot_take_over_a_released_instance_id() -> None:
    h, _foo = static_group()
    h.join("B", ["foo"])
    h.heartbeat(member_id="S", member_epoch=-2, instance_id="i1")
    assert_rejected(
        h,
        InvalidRequestError,
        INVALID,
        "Member B is already in group grp; it cannot take over instance id i1.",
        **join_fields("B", instance_id="i1"),
    )


# --------------------------------------------------------------------------- GROUP_ID_NOT_FOUND


def test_unknown_group_with_positive_epoch() -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        GroupIdNotFoundError,
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Consumer group other not found.",
        group_id="other",
        member_id="A",
        member_epoch=5,
    )


def test_leave_of_unknown_group() -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        GroupIdNotFoundError,
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group other not found.",
        group_id="other",
        member_id="A",
        member_epoch=-1,
    )


def test_static_leave_of_unknown_group() -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        GroupIdNotFoundError,
        ErrorCode.GROUP_ID_NOT_FOUND,
        "Group other not found.",
        group_id="other",
        member_id="S",
        member_epoch=-2,
        instance_id="i1",
    )


def test_a_group_of_another_type_is_not_a_consumer_group() -> None:
    """Kafka's consumerGroup / getOrMaybeCreateConsumerGroup: a classic group, or a simple one
    (offsets only, a classic group in Kafka), answers a heartbeat, a leave and a
    ConsumerGroupDescribe GROUP_ID_NOT_FOUND "Group ... is not a consumer group."; a group that
    does not exist "Consumer group ... not found." (heartbeat) or "Group ... not found."."""
    h, _foo = stable_group()
    h.join_group(group_id="classic")  # a classic group with a member
    h.commit("simple", "", -1, {("foo", 0): 5})  # a simple group
    for gid in ("classic", "simple"):
        message = f"Group {gid} is not a consumer group."
        for fields in (
            dict(member_id="A", member_epoch=5),
            dict(member_id="A", member_epoch=-1),
            dict(member_id="A", member_epoch=-2, instance_id="i1"),
        ):
            assert_rejected(
                h, GroupIdNotFoundError, ErrorCode.GROUP_ID_NOT_FOUND, message,
                group_id=gid, **fields,
            )  # fmt: skip
        with pytest.raises(GroupIdNotFoundError, match=f"^{message}$"):
            h.shard.describe_group(gid)
    with pytest.raises(GroupIdNotFoundError, match="^Group none not found.$"):
        h.shard.describe_group("none")


# --------------------------------------------------------------------------- UNKNOWN_MEMBER_ID


def test_unknown_dynamic_member_with_positive_epoch() -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        UnknownMemberIdError,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Member Z is not a member of group grp.",
        member_id="Z",
        member_epoch=5,
    )


def test_leave_of_unknown_member() -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        UnknownMemberIdError,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Member Z is not a member of group grp.",
        member_id="Z",
        member_epoch=-1,
    )


def test_unknown_static_instance_id_with_positive_epoch() -> None:
    h, _foo = static_group()
    assert_rejected(
        h,
        UnknownMemberIdError,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id i9 is unknown.",
        member_id="S",
        member_epoch=1,
        instance_id="i9",
    )


def test_unknown_static_instance_id_on_leave() -> None:
    h, _foo = static_group()
    assert_rejected(
        h,
        UnknownMemberIdError,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id i9 is unknown.",
        member_id="S",
        member_epoch=-1,
        instance_id="i9",
    )
    assert_rejected(
        h,
        UnknownMemberIdError,
        ErrorCode.UNKNOWN_MEMBER_ID,
        "Instance id i9 is unknown.",
        member_id="S",
        member_epoch=-2,
        instance_id="i9",
    )


# --------------------------------------------------------------------------- FENCED_MEMBER_EPOCH

GREATER = (
    "The consumer group member has a greater member epoch ({received}) than the one known by the "
    "group coordinator ({current}). The member must abandon all its partitions and rejoin."
)
SMALLER = (
    "The consumer group member has a smaller member epoch ({received}) than the one known by the "
    "group coordinator ({current}). The member must abandon all its partitions and rejoin."
)


def test_fenced_greater_epoch() -> None:
    h, foo = stable_group(5)
    assert_rejected(
        h,
        FencedMemberEpochError,
        ErrorCode.FENCED_MEMBER_EPOCH,
        GREATER.format(received=6, current=5),
        member_id="A",
        member_epoch=6,
        topic_partitions=p(foo, 0, 1),
    )


def test_fenced_smaller_epoch_that_is_not_the_previous_one() -> None:
    h, foo = stable_group(5)  # A: epoch 5, previous 4
    assert_rejected(
        h,
        FencedMemberEpochError,
        ErrorCode.FENCED_MEMBER_EPOCH,
        SMALLER.format(received=3, current=5),
        member_id="A",
        member_epoch=3,
        topic_partitions=p(foo, 0, 1),
    )


NOT_A_SUBSET: dict[str, Callable[[str, str], Any]] = {
    "a_partition_not_assigned": lambda foo, bar: p(foo, 0, 1, 2),
    "another_topic": lambda foo, bar: {**p(foo, 0), **p(bar, 0)},
    # Kafka's isSubset: a topic the member is not assigned fails even without partitions.
    "an_unassigned_topic_without_partitions": lambda foo, bar: {**p(foo, 0), bar: frozenset()},
    "null": lambda foo, bar: None,
}


@pytest.mark.parametrize("owned", NOT_A_SUBSET.values(), ids=NOT_A_SUBSET.keys())
def test_fenced_previous_epoch_when_owned_is_not_a_subset(owned: Callable[[str, str], Any]) -> None:
    h, foo = stable_group(5)
    bar = h.create_topic("bar", 1)
    assert_rejected(
        h,
        FencedMemberEpochError,
        ErrorCode.FENCED_MEMBER_EPOCH,
        SMALLER.format(received=4, current=5),
        member_id="A",
        member_epoch=4,
        topic_partitions=owned(foo, bar),
    )


def test_previous_epoch_with_an_assigned_topic_without_partitions() -> None:
    h, foo = stable_group(5)
    res = h.heartbeat(member_id="A", member_epoch=4, topic_partitions={foo: frozenset()})
    assert res.member_epoch == 5


def test_fenced_static_member_epoch() -> None:
    h, _foo = static_group()  # S: epoch 1, previous 0
    assert_rejected(
        h,
        FencedMemberEpochError,
        ErrorCode.FENCED_MEMBER_EPOCH,
        GREATER.format(received=2, current=1),
        member_id="S",
        member_epoch=2,
        instance_id="i1",
    )


def test_fenced_member_in_unknown_state() -> None:
    """A member whose persisted state byte is unknown is fenced unless it reports owning nothing."""
    from coordinator.core import records as r
    from coordinator.core.model import ConsumerGroupMember

    h, foo = stable_group(5)
    m = h.shard.groups[G].members["A"]
    record = r.Record(
        r.ConsumerGroupCurrentMemberAssignmentKey(G, "A"),
        r.ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=4,
            previous_member_epoch=4,
            state=99,
            assigned_partitions=m.assigned_partitions,
            partitions_pending_revocation={},
        ),
    )
    h.shard.replay(record)  # as if loaded from a store written by a newer build
    h.log.append(record)
    h.shard.release(h.shard.mark())
    assert h.shard.groups[G].members["A"].state is MemberState.UNKNOWN
    assert isinstance(m, ConsumerGroupMember)
    assert_rejected(
        h,
        FencedMemberEpochError,
        ErrorCode.FENCED_MEMBER_EPOCH,
        "The consumer group member is in a unknown state. The member must abandon all its "
        "partitions and rejoin.",
        member_id="A",
        member_epoch=4,
        topic_partitions=p(foo, 0, 1),
    )


# --------------------------------------------------------------------------- static membership


def test_fenced_instance_id_on_heartbeat() -> None:
    h, _foo = static_group()
    assert_rejected(
        h,
        FencedInstanceIdError,
        ErrorCode.FENCED_INSTANCE_ID,
        "Static member X with instance id i1 was fenced by member S.",
        member_id="X",
        member_epoch=1,
        instance_id="i1",
    )


def test_fenced_instance_id_on_leave() -> None:
    h, _foo = static_group()
    for epoch in (-1, -2):
        assert_rejected(
            h,
            FencedInstanceIdError,
            ErrorCode.FENCED_INSTANCE_ID,
            "Static member X with instance id i1 was fenced by member S.",
            member_id="X",
            member_epoch=epoch,
            instance_id="i1",
        )


def test_unreleased_instance_id() -> None:
    h, _foo = static_group()
    assert_rejected(
        h,
        UnreleasedInstanceIdError,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        "Static member X with instance id i1 cannot join the group because the instance "
        "id is owned by S member.",
        **join_fields("X", instance_id="i1"),
    )


def test_unreleased_instance_id_when_the_static_member_is_revoking() -> None:
    """Only a temporary leave (epoch -2) releases an instance id; a busy member does not."""
    h, foo = static_group()
    h.join("B", ["foo"])
    assert (
        h.heartbeat(
            member_id="S", member_epoch=1, instance_id="i1", topic_partitions=p(foo, 0, 1, 2, 3)
        ).member_epoch
        == 1
    )
    assert h.shard.groups[G].members["S"].state is MemberState.UNREVOKED_PARTITIONS
    assert_rejected(
        h,
        UnreleasedInstanceIdError,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        "Static member X with instance id i1 cannot join the group because the instance "
        "id is owned by S member.",
        **join_fields("X", instance_id="i1"),
    )


def test_a_static_member_rejoining_under_its_own_member_id_gets_itself_back() -> None:
    """Deliberately unlike Kafka 4.3 (UNRELEASED_INSTANCE_ID, fatal to its Java client), as the
    fix proposed upstream (docs/proto.md): the holder of an instance id joining again with
    epoch 0 — a lost join response, or a rejoin after FENCED_MEMBER_EPOCH — gets its member and
    assignment back, with no record and no new epoch."""
    h, foo = static_group()
    log_len = len(h.log)
    res = h.join("S", ["foo"], instance_id="i1")
    assert res.response.member_id == "S" and res.response.member_epoch == 1
    assert res.response.assignment is not None
    assert res.response.assignment.assigned == p(foo, 0, 1, 2, 3)
    assert len(h.log) == log_len
    assert h.shard.groups[G].static_members == {"i1": "S"}


# --------------------------------------------------------------------------- GROUP_MAX_SIZE_REACHED

FULL = "The consumer group has reached its maximum capacity of 2 members."


def full_group() -> tuple[Harness, str]:
    h = harness(config=GroupCoordinatorConfig(consumer_max_size=2))
    foo = h.create_topic("foo", 4)
    h.join("A", ["foo"])
    h.join("S", ["foo"], instance_id="i1")
    return h, foo


def test_group_max_size_reached_for_a_new_member() -> None:
    h, _foo = full_group()
    assert_rejected(
        h, GroupMaxSizeReachedError, ErrorCode.GROUP_MAX_SIZE_REACHED, FULL, **join_fields("C")
    )


def test_group_max_size_reached_for_a_generated_member_id() -> None:
    h, _foo = full_group()
    assert_rejected(
        h, GroupMaxSizeReachedError, ErrorCode.GROUP_MAX_SIZE_REACHED, FULL, **join_fields("")
    )


def test_group_max_size_reached_for_a_new_static_member() -> None:
    h, _foo = full_group()
    assert_rejected(
        h,
        GroupMaxSizeReachedError,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        FULL,
        **join_fields("C", instance_id="i2"),
    )


def test_existing_member_may_heartbeat_and_rejoin_in_a_full_group() -> None:
    h, _foo = full_group()
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    assert res.response.member_epoch in (1, 2)
    res = h.join("A", ["foo"])
    assert res.response.member_id == "A"
    assert len(h.shard.groups[G].members) == 2


def test_static_replacement_in_a_full_group_is_refused() -> None:
    """Kafka's throwIfConsumerGroupIsFull runs before the static member is looked up: a full
    group refuses a member id it does not know, also a static member coming back under a new
    member id after its temporary leave (and before UNRELEASED_INSTANCE_ID would be answered
    for an instance id still held)."""
    h, _foo = full_group()
    assert_rejected(
        h,
        GroupMaxSizeReachedError,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        FULL,
        **join_fields("S2", instance_id="i1"),
    )
    h.heartbeat(member_id="S", member_epoch=-2, instance_id="i1")
    assert_rejected(
        h,
        GroupMaxSizeReachedError,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        FULL,
        **join_fields("S2", instance_id="i1"),
    )
    # The same incarnation is a member: it rejoins.
    res = h.join("S", ["foo"], instance_id="i1")
    assert (res.response.member_id, sorted(h.shard.groups[G].members)) == ("S", ["A", "S"])


# --------------------------------------------------------------------------- UNSUPPORTED_ASSIGNOR


def test_unsupported_assignor_lists_the_supported_names() -> None:
    h = harness(assignors=[RoundRobinAssignor("uniform"), RoundRobinAssignor("range")])
    h.create_topic("foo", 2)
    h.join("A", ["foo"])
    assert_rejected(
        h,
        UnsupportedAssignorError,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor sticky is not supported. Supported assignors: uniform, range.",
        **join_fields("B", server_assignor="sticky"),
    )
    assert_rejected(
        h,
        UnsupportedAssignorError,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor  is not supported. Supported assignors: uniform, range.",
        member_id="A",
        member_epoch=1,
        server_assignor="",
    )


def test_unsupported_assignor_with_the_default_assignors() -> None:
    h = Harness()
    assert_rejected(
        h,
        UnsupportedAssignorError,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor cooperative-sticky is not supported. Supported assignors: uniform, range.",
        **join_fields("B", server_assignor="cooperative-sticky"),
    )


# --------------------------------------------------------------------------- INVALID_REGULAR_EXPRESSION


@pytest.mark.parametrize(
    "regex,reason",
    [
        ("(a", "missing ): (a"),
        ("(a)\\1", "invalid escape sequence: \\1"),  # RE2 has no back-references
        ("(?=x)y", "invalid perl operator: (?="),  # nor look-around
        ("[z-a]", "invalid character class range: z-a"),
    ],
    ids=["unbalanced", "back_reference", "lookahead", "bad_range"],
)
def test_invalid_regular_expression(regex: str, reason: str) -> None:
    h, _foo = stable_group()
    assert_rejected(
        h,
        InvalidRegularExpressionError,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}.",
        **join_fields("C", subscribed_topic_names=None, subscribed_topic_regex=regex),
    )


def test_regex_is_checked_after_the_member() -> None:
    """Kafka compiles a new regex in maybeUpdateRegularExpressions, once the group, the member
    and its epoch are known: their errors come first, and a leave never looks at it."""
    h, _foo = stable_group()
    bad = dict(subscribed_topic_regex="(a")
    first: list[tuple[type[CoordinatorError], str, dict[str, Any]]] = [
        (
            UnknownMemberIdError,
            "Member Z is not a member of group grp.",
            dict(member_id="Z", member_epoch=5),
        ),
        (
            FencedMemberEpochError,
            "The consumer group member has a greater member epoch (9) than the one known by "
            "the group coordinator (5). The member must abandon all its partitions and rejoin.",
            dict(member_id="A", member_epoch=9),
        ),
        (
            GroupIdNotFoundError,
            "Consumer group other not found.",
            dict(group_id="other", member_id="A", member_epoch=5),
        ),
    ]
    for exc_type, message, fields in first:
        assert_rejected(h, exc_type, exc_type.code, message, **fields, **bad)
    left = h.heartbeat(member_id="A", member_epoch=-1, **bad)
    assert (left.member_id, left.member_epoch) == ("A", -1)
    assert sorted(h.shard.groups[G].members) == ["B"]


def test_invalid_regular_expression_on_a_heartbeat_of_a_known_member() -> None:
    h, _foo = stable_group()
    err = assert_rejected(
        h,
        InvalidRegularExpressionError,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
        "SubscribedTopicRegex `(a` is not a valid regular expression: missing ): (a.",
        member_id="A",
        member_epoch=5,
        subscribed_topic_regex="(a",
    )
    assert isinstance(err, InvalidRegularExpressionError)


# --------------------------------------------------------------------------- UNKNOWN_SERVER_ERROR


def assignor_failure_case(assignor: Any) -> Harness:
    """A with foo is in the group (installed by records, so the failing assignor never ran)."""
    h = harness(assignors=[assignor])
    foo = h.create_topic("foo", 2)
    h.seed_group(G, 3, {"A": (["foo"], p(foo, 0, 1))})
    return h


@pytest.mark.parametrize(
    "assignor,reason",
    [
        (FailingAssignor(PartitionAssignorError("no can do")), "no can do"),
        (FailingAssignor(RuntimeError("oops")), "assignor 'failing' raised RuntimeError: oops"),
        (
            ForgetfulAssignor(),
            "invalid assignment: member 'A' is missing from the result (1 missing)",
        ),
        (
            DoubleBookingAssignor(),
            "invalid assignment: partition 0 of topic 'AAAAAAAAAAAAAAAAAAAAAQ' "
            "(foo) is given to both 'A' and 'B'",
        ),
    ],
    ids=["partition_assignor_error", "plugin_bug", "missing_member", "double_booking"],
)
def test_assignor_failure_is_unknown_server_error_and_rolls_back(
    assignor: Any, reason: str
) -> None:
    h = assignor_failure_case(assignor)
    before = h.shard.snapshot()
    # B's join emits (and replays) its member metadata record and the group epoch bump before
    # the assignor runs; all of it must be rolled back.
    assert_rejected(
        h,
        UnknownServerError,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        f"Failed to compute a new target assignment for epoch 4: {reason}",
        **join_fields("B"),
    )
    group = h.shard.groups[G]
    assert "B" not in group.members
    assert group.group_epoch == 3
    assert h.shard.snapshot() == before


def test_assignor_failure_when_creating_a_group_leaves_no_group() -> None:
    h = harness(assignors=[FailingAssignor(PartitionAssignorError("boom"))])
    h.create_topic("foo", 2)
    assert_rejected(
        h,
        UnknownServerError,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Failed to compute a new target assignment for epoch 1: boom",
        **join_fields("A"),
    )
    assert h.shard.groups == {}
    assert h.shard.snapshot() == Harness(assignors=[RoundRobinAssignor()]).shard.snapshot()


def test_assignor_failure_on_a_subscription_change_keeps_the_old_subscription() -> None:
    h = assignor_failure_case(FailingAssignor(PartitionAssignorError("boom")))
    h.create_topic("bar", 1)
    assert_rejected(
        h,
        UnknownServerError,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Failed to compute a new target assignment for epoch 4: boom",
        member_id="A",
        member_epoch=3,
        subscribed_topic_names=("foo", "bar"),
    )
    assert h.shard.groups[G].members["A"].subscribed_topic_names == ("foo",)


class SwitchableAssignor(RoundRobinAssignor):
    """Round robin until told to fail."""

    def __init__(self) -> None:
        super().__init__("switchable")
        self.fail = False

    def assign(self, spec: GroupSpec, topics: Mapping[str, TopicMetadata]) -> GroupAssignment:
        if self.fail:
            raise PartitionAssignorError("switched off")
        return super().assign(spec, topics)


def test_assignor_failure_rolls_back_a_static_replacement() -> None:
    """The replacement writes the old member's tombstones and the new member's records before
    the assignor runs (the new incarnation also changes its subscription): all undone."""
    assignor = SwitchableAssignor()
    h = harness(assignors=[assignor])
    h.create_topic("foo", 2)
    h.create_topic("bar", 1)
    h.join("S", ["foo"], instance_id="i1")
    h.heartbeat(member_id="S", member_epoch=-2, instance_id="i1")
    assignor.fail = True
    assert_rejected(
        h,
        UnknownServerError,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Failed to compute a new target assignment for epoch 2: switched off",
        **join_fields("S2", instance_id="i1", subscribed_topic_names=("foo", "bar")),
    )
    group = h.shard.groups[G]
    assert group.static_members == {"i1": "S"}
    assert group.members["S"].member_epoch == -2
    assert "S2" not in group.members
    # Once the assignor works again the same request succeeds.
    assignor.fail = False
    assert h.join("S2", ["foo", "bar"], instance_id="i1").response.member_epoch == 2


def test_assignor_failure_after_a_regex_resolution_keeps_the_resolution() -> None:
    """The regex is resolved off the heartbeat path (Kafka 4.x); the target that follows fails
    (the assignor raises): the resolution and its epoch bump stand, the failure is logged, the
    target is left to the next heartbeat — which answers UNKNOWN_SERVER_ERROR and changes
    nothing while the assignor still fails, and computes it once the assignor works."""
    assignor = SwitchableAssignor()
    h = harness(assignors=[assignor])
    h.create_topic("foo", 2)
    h.join("A", ["foo"])
    h.create_topic("fa", 1)
    assert (
        h.heartbeat(member_id="A", member_epoch=1, subscribed_topic_regex="f.+").member_epoch == 1
    )
    assignor.fail = True
    h.sleep(20_000)  # past the assignment interval: the target is computed at once
    res = h.resolve_regexes(G)
    assert dict(h.shard.groups[G].resolved_regexes) == {
        "f.+": (frozenset({"fa", "foo"}), h.shard.topics.version)
    }
    assert h.shard.groups[G].group_epoch == 2 and h.shard.groups[G].assignment_epoch == 1
    assert [e.event.value for e in res.events] == ["group_epoch_bumped", "target_assignment_failed"]
    assert_rejected(
        h,
        UnknownServerError,
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Failed to compute a new target assignment for epoch 2: switched off",
        member_id="A",
        member_epoch=1,
    )
    assignor.fail = False
    assert h.heartbeat(member_id="A", member_epoch=1).member_epoch == 2
