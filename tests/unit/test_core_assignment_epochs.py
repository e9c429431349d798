"""KIP-1251 (Kafka 4.3): assignment epochs and the offset commits they let through.

A consumer-protocol member may commit with an epoch older than its current one when every
partition it commits is one it owns (assigned or pending revocation) since that epoch or before:
``assignment epoch <= client epoch <= member epoch``; anything else is STALE_MEMBER_EPOCH for the
whole commit. The cases follow Kafka's own (ConsumerGroupTest's validateOffsetCommit cases and
GroupMetadataManagerTest's assignment-epoch stories): an epoch bump by a new partition must not
fence commits of partitions the member still owns; a partition assigned after the client's
epoch, one it no longer owns, one pending revocation, a newer epoch, a classic member, a static
member replaced under a new member id, and records written before the epochs existed.
"""

from __future__ import annotations

import orjson
import pytest

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.errors import (
    CoordinatorError,
    ErrorCode,
    IllegalGenerationError,
    StaleMemberEpochError,
)
from coordinator.core.model import ConsumerGroupMember, MemberState
from coordinator.harness import Harness
from tests.builders import RoundRobinAssignor, ca, p, pp

G = "grp"


@pytest.fixture
def h() -> Harness:
    """A alone in the group, STABLE at epoch 1 with foo-0 and foo-1, subscribed to foo and bar
    (bar does not exist yet)."""
    h = Harness(assignors=[RoundRobinAssignor()])
    h.create_topic("foo", 2)
    assert h.join("A", ["foo", "bar"]).response.member_epoch == 1
    return h


def epochs(h: Harness, member_id: str) -> dict[int, dict[str, list[int]]]:
    m = h.shard.groups[G].members[member_id]
    return {e: {t: sorted(ps) for t, ps in a.items()} for e, a in m.assignment_epochs.items()}


def commit_error(h: Harness, member_id: str, epoch: int, *tps: tuple[str, int]) -> ErrorCode:
    """The commit's outcome: NONE (and records) or the error that refused all of it (none)."""
    before = h.shard.snapshot()
    try:
        response = h.commit(G, member_id, epoch, dict.fromkeys(tps, 7))
    except CoordinatorError as exc:
        assert h.shard.snapshot() == before  # refused as a whole: nothing written
        return exc.code
    assert response is not None
    assert {x.error_code for t in response.topics for x in t.partitions} == {ErrorCode.NONE}
    return ErrorCode.NONE


def test_a_new_partition_bumps_the_epoch_but_older_commits_of_kept_partitions_pass(
    h: Harness,
) -> None:
    """The false fencing KIP-1251 removed: bar appears, A moves to epoch 2 with bar-0 assigned at
    2 and foo kept at 1. A commit that left the client before it heard of epoch 2 passes for
    foo; bar-0 at epoch 1 would be a partition the client cannot have had yet."""
    foo, bar = h.topic_id("foo"), h.create_topic("bar", 1)
    assert h.heartbeat(member_id="A", member_epoch=1).member_epoch == 2
    assert epochs(h, "A") == {1: {foo: [0, 1]}, 2: {bar: [0]}}
    assert commit_error(h, "A", 1, ("foo", 0), ("foo", 1)) == ErrorCode.NONE
    assert commit_error(h, "A", 2, ("foo", 0), ("bar", 0)) == ErrorCode.NONE
    assert commit_error(h, "A", 1, ("bar", 0)) == ErrorCode.STALE_MEMBER_EPOCH
    # One partition that fails refuses the whole commit (Kafka's validator throws).
    assert commit_error(h, "A", 1, ("foo", 0), ("bar", 0)) == ErrorCode.STALE_MEMBER_EPOCH


def test_partitions_that_do_not_exist_are_not_judged_by_epoch(h: Harness) -> None:
    """Kafka's KafkaApis answers a partition that does not exist UNKNOWN_TOPIC_OR_PARTITION
    before the coordinator validates the rest: an older epoch's commit of a kept partition and
    of foo-5 commits foo-0 (the whole commit was STALE_MEMBER_EPOCH)."""
    h.create_topic("bar", 1)
    assert h.heartbeat(member_id="A", member_epoch=1).member_epoch == 2
    response = h.commit(G, "A", 1, {("foo", 0): 7, ("foo", 5): 7})
    assert response is not None
    assert [(x.partition_index, x.error_code) for t in response.topics for x in t.partitions] == [
        (0, ErrorCode.NONE),
        (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]


def test_a_newer_epoch_is_stale(h: Harness) -> None:
    assert commit_error(h, "A", 2, ("foo", 0)) == ErrorCode.STALE_MEMBER_EPOCH
    with pytest.raises(StaleMemberEpochError) as err:
        h.commit(G, "A", 2, {("foo", 0): 1})
    assert (
        err.value.message == "The received member epoch 2 is newer than the current member epoch 1."
    )


def test_an_epoch_before_the_assignment_is_stale(h: Harness) -> None:
    """foo was assigned at 1: a commit at epoch 0 (before the member had anything) fails."""
    h.create_topic("bar", 1)
    h.heartbeat(member_id="A", member_epoch=1)  # epoch 2
    with pytest.raises(StaleMemberEpochError) as err:
        h.commit(G, "A", 0, {("foo", 0): 1})
    foo = h.topic_id("foo")
    assert err.value.message == (
        f"Partition {foo}-0 was assigned to member A at epoch 1, after the received member epoch 0."
    )


def test_partitions_pending_revocation_commit_until_revoked_then_never(h: Harness) -> None:
    """B joins (epoch 2): A must give foo-1 up. While it is pending revocation A may still commit
    it with its epoch 1 (its last progress before revoking); once A acknowledged the revocation
    (epoch 2) foo-1 is no longer A's: a commit of it with any older epoch is stale, while foo-0,
    kept since epoch 1, still commits at 1."""
    foo = h.topic_id("foo")
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    a = h.shard.groups[G].members["A"]
    assert a.state is MemberState.UNREVOKED_PARTITIONS and a.member_epoch == 1
    assert epochs(h, "A") == {1: {foo: [0, 1]}}
    assert commit_error(h, "A", 1, ("foo", 0), ("foo", 1)) == ErrorCode.NONE

    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0))
    assert h.shard.groups[G].members["A"].member_epoch == 2
    assert epochs(h, "A") == {1: {foo: [0]}}
    assert commit_error(h, "A", 1, ("foo", 1)) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit_error(h, "A", 1, ("foo", 0)) == ErrorCode.NONE
    # At its current epoch a member's commit is not checked partition by partition (Kafka).
    assert commit_error(h, "A", 2, ("foo", 0), ("foo", 1)) == ErrorCode.NONE


def test_a_partition_given_back_is_assigned_anew(h: Harness) -> None:
    """A is revoking foo-1 (pending, assigned at 1) when B leaves and the next target gives it
    back: once A acknowledges, foo-1 is assigned anew at the new epoch, as Kafka's
    CurrentAssignmentBuilder does, so epoch 1 no longer commits it; foo-0 stays at 1."""
    foo = h.topic_id("foo")
    h.join("B", ["foo"])  # epoch 2: A keeps foo-0, revokes foo-1
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    h.heartbeat(member_id="B", member_epoch=-1)  # epoch 3: A gets everything back
    assert h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0)).member_epoch == 3
    assert epochs(h, "A") == {1: {foo: [0]}, 3: {foo: [1]}}
    assert commit_error(h, "A", 1, ("foo", 1)) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit_error(h, "A", 1, ("foo", 0)) == ErrorCode.NONE
    assert commit_error(h, "A", 3, ("foo", 1)) == ErrorCode.NONE


def test_a_partition_of_another_member_is_never_committed_with_an_older_epoch(h: Harness) -> None:
    """B owns foo-1 from epoch 2 on. A (at 2, foo-0 kept from 1) commits foo-1 with epoch 1:
    refused, it is not A's."""
    foo = h.topic_id("foo")
    h.join("B", ["foo"])
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0, 1))
    h.heartbeat(member_id="A", member_epoch=1, topic_partitions=p(foo, 0))
    h.heartbeat(member_id="B", member_epoch=2)
    assert h.shard.groups[G].owner_of(foo, 1) == "B"
    assert commit_error(h, "A", 1, ("foo", 1)) == ErrorCode.STALE_MEMBER_EPOCH
    assert commit_error(h, "B", 2, ("foo", 1)) == ErrorCode.NONE


def test_a_classic_member_must_send_its_generation() -> None:
    """Members of the classic protocol keep Kafka's strict rule: ILLEGAL_GENERATION for any
    other generation, whatever their assignment epochs."""
    from coordinator.core.model import ClassicMemberMetadata

    h = Harness(assignors=[RoundRobinAssignor()])
    foo = h.create_topic("foo", 1)
    classic = ClassicMemberMetadata(session_timeout_ms=10_000, supported_protocols=())
    for record in (
        r.member_metadata_record(
            G,
            ConsumerGroupMember(
                member_id="C",
                subscribed_topic_names=("foo",),
                rebalance_timeout_ms=60_000,
                classic_member_metadata=classic,
            ),
        ),
        r.group_epoch_record(G, 3, "cgp_x"),
        r.target_assignment_record(G, "C", p(foo, 0)),
        r.target_assignment_epoch_record(G, 3),
        ca("C", 3, 2, MemberState.STABLE, p(foo, 0), epochs={1: p(foo, 0)}),
    ):
        h.shard.replay(record)
    with pytest.raises(IllegalGenerationError):
        h.commit(G, "C", 2, {("foo", 0): 1})
    assert commit_error(h, "C", 3, ("foo", 0)) == ErrorCode.NONE


def test_static_member_replaced_keeps_the_assignment_epochs() -> None:
    """A static member that leaves (-2) and comes back under a new member id takes over its
    partitions with the epochs they were assigned at (Kafka keeps them across the replacement)."""
    h = Harness(assignors=[RoundRobinAssignor()])
    foo = h.create_topic("foo", 2)
    h.join("A", ["foo"], instance_id="i1")  # epoch 1
    h.create_topic("bar", 1)
    h.heartbeat(member_id="A", member_epoch=1, subscribed_topic_names=("foo", "bar"))  # 2
    bar = h.topic_id("bar")
    assert epochs(h, "A") == {1: {foo: [0, 1]}, 2: {bar: [0]}}
    h.heartbeat(member_id="A", member_epoch=-2, instance_id="i1")
    assert epochs(h, "A") == {1: {foo: [0, 1]}, 2: {bar: [0]}}
    res = h.join("A2", ["foo", "bar"], instance_id="i1")
    assert res.response.member_epoch == 2
    assert epochs(h, "A2") == {1: {foo: [0, 1]}, 2: {bar: [0]}}
    assert commit_error(h, "A2", 1, ("foo", 0)) == ErrorCode.NONE
    assert commit_error(h, "A2", 1, ("bar", 0)) == ErrorCode.STALE_MEMBER_EPOCH


# ---------------------------------------------------------------- records


def test_the_record_carries_the_epochs_and_replays_to_them(h: Harness) -> None:
    foo, bar = h.topic_id("foo"), h.create_topic("bar", 1)
    res = h.heartbeat_result(member_id="A", member_epoch=1)
    record = res.records[-1]
    assert record == ca(
        "A", 2, 1, MemberState.STABLE, pp(p(foo, 0, 1), p(bar, 0)), epochs={1: p(foo, 0, 1)}
    )
    key, value = codec.encode(record)
    assert value is not None
    fields = orjson.loads(value)
    # Older builds read the first five fields and ignore the rest: they are unchanged.
    assert fields[1:6] == [2, 1, 0, [[foo, [0, 1]], [bar, [0]]], []]
    assert fields[6] == [[1, [[foo, [0, 1]]]], [2, [[bar, [0]]]]]
    assert codec.decode(key, value) == record
    assert h.replayed().snapshot() == h.shard.snapshot()


@pytest.mark.parametrize(
    ("member_epoch", "default"), [(4, 4), (-2, 0)], ids=["member_epoch", "static_leave"]
)
def test_a_record_without_epochs_reads_as_assigned_at_the_member_epoch(
    member_epoch: int, default: int
) -> None:
    """A record written before KIP-1251 (five fields) decodes with no epochs, re-encodes to the
    same bytes, and replays as every partition assigned at max(member epoch, 0) (Kafka's
    default): an older epoch does not commit it, the member's own does."""
    h = Harness(assignors=[RoundRobinAssignor()])
    foo = h.create_topic("foo", 2)
    key = codec.encode_key(r.ConsumerGroupCurrentMemberAssignmentKey(G, "A"))
    legacy = orjson.dumps([0, member_epoch, 3, 0, [[foo, [0]]], [[foo, [1]]]])
    record = codec.decode(key, legacy)
    assert isinstance(record.value, r.ConsumerGroupCurrentMemberAssignmentValue)
    assert record.value.assignment_epochs is None
    assert codec.encode(record) == (key, legacy)
    h.shard.replay(r.member_metadata_record(G, ConsumerGroupMember(member_id="A")))
    h.shard.replay(record)
    assert epochs(h, "A") == {default: {foo: [0, 1]}}
    if member_epoch > 0:
        assert commit_error(h, "A", member_epoch - 1, ("foo", 0)) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit_error(h, "A", member_epoch, ("foo", 0)) == ErrorCode.NONE


def test_epochs_that_miss_a_partition_give_it_the_member_epoch() -> None:
    """A record whose epochs do not name every owned partition (Kafka logs it and falls back)
    reads the missing ones as assigned at the member epoch; epochs of partitions the member does
    not own are dropped."""
    h = Harness(assignors=[RoundRobinAssignor()])
    foo = h.create_topic("foo", 3)
    h.shard.replay(r.member_metadata_record(G, ConsumerGroupMember(member_id="A")))
    h.shard.replay(
        r.Record(
            r.ConsumerGroupCurrentMemberAssignmentKey(G, "A"),
            r.ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=5,
                previous_member_epoch=4,
                state=0,
                assigned_partitions=p(foo, 0, 1),
                partitions_pending_revocation={},
                assignment_epochs={2: p(foo, 0, 2)},
            ),
        )
    )
    assert epochs(h, "A") == {2: {foo: [0]}, 5: {foo: [1]}}
