"""Offset commit/fetch/delete fencing, expiry and group deletion in the pure core (Kafka 4.0)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.core import records as r
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import (
    ErrorCode,
    GroupIdNotFoundError,
    IllegalGenerationError,
    NonEmptyGroupError,
    StaleMemberEpochError,
    UnknownMemberIdError,
    UnsupportedVersionError,
)
from coordinator.core.model import ZERO_TOPIC_ID
from coordinator.core.offsets import (
    FetchedPartition,
    FetchedTopic,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteResponse,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
    PartitionResult,
    TopicResult,
)
from coordinator.core.timers import SESSION, ArmTimer
from coordinator.harness import Harness

G = "grp"


@pytest.fixture
def h() -> Harness:
    h = Harness(config=GroupCoordinatorConfig(offsets_retention_minutes=10))
    h.create_topic("foo", 2)
    h.create_topic("bar", 1)
    return h


def commit_req(
    epoch: int, member: str = "A", *, metadata: str | None = None, **parts: int
) -> OffsetCommit:
    return OffsetCommit(
        group_id=G,
        generation_id_or_member_epoch=epoch,
        member_id=member,
        topics=(
            OffsetCommitTopic(
                name="foo",
                partitions=tuple(
                    OffsetCommitPartition(
                        partition_index=int(k[1:]), committed_offset=v, committed_metadata=metadata
                    )
                    for k, v in sorted(parts.items())
                ),
            ),
        ),
    )


def test_an_old_commit_version_is_refused_to_a_member_of_the_consumer_protocol(h: Harness) -> None:
    """Kafka's ConsumerGroup.validateOffsetCommit: OffsetCommit v8 or older (``legacy_version``)
    from a member of the consumer protocol is UNSUPPORTED_VERSION, whatever its epoch; an
    unknown member and an admin commit to an emptied group are left to the other checks."""
    h.join("A", ["foo"])
    for epoch in (1, 7):
        with pytest.raises(UnsupportedVersionError, match="version 9 or above"):
            h.shard.offset_commit(commit_req(epoch, p0=10), 5, legacy_version=True)
    with pytest.raises(UnknownMemberIdError):
        h.shard.offset_commit(commit_req(1, member="Z", p0=10), 5, legacy_version=True)
    assert h.shard.offset_commit(commit_req(1, p0=10), 5).response == OffsetCommitResponse(
        topics=(TopicResult(name="foo", topic_id=h.topic_id("foo"),
                            partitions=(PartitionResult(partition_index=0),)),)
    )  # fmt: skip
    h.heartbeat(member_id="A", member_epoch=-1)  # the group is empty
    admin = h.shard.offset_commit(commit_req(-1, member="", p0=11), 6, legacy_version=True)
    assert [rec.value.offset for rec in admin.records] == [11]  # type: ignore[union-attr]


def test_an_old_commit_version_to_a_missing_group_is_illegal_generation(h: Harness) -> None:
    """Kafka's OffsetMetadataManager.validateOffsetCommit: a commit with a generation >= 0 to a
    group that does not exist is GROUP_ID_NOT_FOUND from OffsetCommit v9 on, and
    ILLEGAL_GENERATION (its default message) for v8 or older, which classic clients rejoin on.
    Nothing is written either way."""
    before = h.shard.snapshot()
    for epoch in (0, 3):
        with pytest.raises(IllegalGenerationError) as old:
            h.shard.offset_commit(commit_req(epoch, p0=10), 5, legacy_version=True)
        assert (old.value.code, old.value.message) == (
            ErrorCode.ILLEGAL_GENERATION,
            "Specified group generation id is not valid.",
        )
        with pytest.raises(GroupIdNotFoundError) as new:
            h.shard.offset_commit(commit_req(epoch, p0=10), 5)
        assert (new.value.code, new.value.message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group grp not found.",
        )
    assert h.shard.snapshot() == before
    # Generation -1 creates the simple group, in every version.
    admin = h.shard.offset_commit(commit_req(-1, member="", p0=11), 6, legacy_version=True)
    assert [rec.value.offset for rec in admin.records] == [11]  # type: ignore[union-attr]


def test_member_commit_with_its_epoch_is_durable_record(h: Harness) -> None:
    h.join("A", ["foo"])
    res = h.shard.offset_commit(commit_req(1, p0=10, p1=20), 5)
    foo = h.topic_id("foo")
    assert res.response.topics == (
        TopicResult(
            name="foo",
            topic_id=foo,
            partitions=(PartitionResult(partition_index=0), PartitionResult(partition_index=1)),
        ),
    )
    assert res.records == [
        r.offset_commit_record(
            G,
            "foo",
            0,
            r.OffsetCommitValue(offset=10, leader_epoch=-1, metadata="", commit_timestamp_ms=5),
        ),
        r.offset_commit_record(
            G,
            "foo",
            1,
            r.OffsetCommitValue(offset=20, leader_epoch=-1, metadata="", commit_timestamp_ms=5),
        ),
    ]


@pytest.mark.parametrize("epoch", [0, 2, 7])
def test_consumer_member_with_other_epoch_gets_stale_member_epoch(h: Harness, epoch: int) -> None:
    h.join("A", ["foo"])  # epoch 1
    before = h.shard.snapshot()
    with pytest.raises(StaleMemberEpochError) as err:
        h.shard.offset_commit(commit_req(epoch, p0=1), 5)
    assert err.value.code == ErrorCode.STALE_MEMBER_EPOCH
    assert h.shard.snapshot() == before


def test_unknown_member_and_unknown_group(h: Harness) -> None:
    h.join("A", ["foo"])
    with pytest.raises(UnknownMemberIdError):
        h.shard.offset_commit(commit_req(1, member="Z", p0=1), 5)
    with pytest.raises(GroupIdNotFoundError):
        h.shard.offset_commit(
            OffsetCommit(group_id="nope", generation_id_or_member_epoch=3, member_id="A"), 5
        )


def test_admin_commit_only_on_empty_or_missing_group(h: Harness) -> None:
    # Missing group: a "simple" group is created (offsets only), listed as an empty classic group.
    res = h.shard.offset_commit(
        OffsetCommit(
            group_id="simple",
            topics=(
                OffsetCommitTopic(
                    name="bar",
                    partitions=(OffsetCommitPartition(partition_index=0, committed_offset=3),),
                ),
            ),
        ),
        1,
    )
    assert res.response.topics[0].partitions == (PartitionResult(partition_index=0),)
    assert [(g.group_id, g.group_type, g.group_state) for g in h.shard.list_groups()] == [
        ("simple", "classic", "Empty")
    ]
    # Non-empty consumer group: epoch -1 is refused (the member id is unknown).
    h.join("A", ["foo"])
    with pytest.raises(UnknownMemberIdError):
        h.shard.offset_commit(commit_req(-1, member="", p0=1), 5)
    # Once empty again, the admin commit is accepted.
    h.heartbeat(member_id="A", member_epoch=-1)
    assert (
        h.shard.offset_commit(commit_req(-1, member="", p0=9), 6)
        .response.topics[0]
        .partitions[0]
        .error_code
        == ErrorCode.NONE
    )


def test_per_partition_errors(h: Harness) -> None:
    h.join("A", ["foo"])
    big = "x" * 4097
    req = OffsetCommit(
        group_id=G,
        generation_id_or_member_epoch=1,
        member_id="A",
        topics=(
            OffsetCommitTopic(
                name="foo",
                partitions=(
                    OffsetCommitPartition(
                        partition_index=0, committed_offset=1, committed_metadata=big
                    ),
                    OffsetCommitPartition(partition_index=5, committed_offset=1),
                    OffsetCommitPartition(
                        partition_index=1, committed_offset=2, committed_metadata="ok"
                    ),
                ),
            ),
            OffsetCommitTopic(
                name="missing",
                partitions=(OffsetCommitPartition(partition_index=0, committed_offset=1),),
            ),
            OffsetCommitTopic(
                topic_id="AAAAAAAAAAAAAAAAAAAAfw",
                partitions=(OffsetCommitPartition(partition_index=0, committed_offset=1),),
            ),
        ),
    )
    res = h.shard.offset_commit(req, 5)
    codes = [[p.error_code for p in t.partitions] for t in res.response.topics]
    assert codes == [
        [ErrorCode.OFFSET_METADATA_TOO_LARGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE],
        [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
        [ErrorCode.UNKNOWN_TOPIC_ID],
    ]
    assert len(res.records) == 1


def test_metadata_size_is_counted_as_kafka_counts_it(h: Harness) -> None:
    """offset.metadata.max.bytes (4096) is compared with the metadata's Java string length,
    UTF-16 code units, as Kafka does — not its UTF-8 size: 3,000 'é' (6,000 bytes) and 2,048
    emoji (4,096 units, 8,192 bytes) fit; 2,049 emoji (4,098 units) do not."""
    h.join("A", ["foo"])

    def outcome(metadata: str) -> ErrorCode:
        req = commit_req(1, metadata=metadata, p0=1)
        response = h.run(lambda s: s.offset_commit(req, 5)).response
        return response.topics[0].partitions[0].error_code  # type: ignore[no-any-return]

    assert outcome("\u00e9" * 3_000) == ErrorCode.NONE
    assert outcome("\U0001f600" * 2_048) == ErrorCode.NONE
    assert outcome("\U0001f600" * 2_049) == ErrorCode.OFFSET_METADATA_TOO_LARGE
    assert outcome("x" * 4_096) == ErrorCode.NONE
    assert outcome("x" * 4_097) == ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_topic_addressed_by_id(h: Harness) -> None:
    h.join("A", ["foo"])
    foo = h.topic_id("foo")
    req = OffsetCommit(
        group_id=G,
        generation_id_or_member_epoch=1,
        member_id="A",
        topics=(
            OffsetCommitTopic(
                topic_id=foo,
                partitions=(OffsetCommitPartition(partition_index=1, committed_offset=77),),
            ),
        ),
    )
    assert h.shard.offset_commit(req, 5).response.topics[0].name == "foo"
    h.run(lambda s: s.offset_commit(req, 5))
    fetched = h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id=G, topics=(OffsetFetchTopic(topic_id=foo, partition_indexes=(0, 1)),)
        )
    )
    assert fetched == OffsetFetchGroupResponse(
        group_id=G,
        topics=(
            FetchedTopic(
                name="foo",
                topic_id=foo,
                partitions=(
                    FetchedPartition(partition_index=0),
                    FetchedPartition(partition_index=1, committed_offset=77, metadata=""),
                ),
            ),
        ),
    )


def test_fetch_fencing_and_unknown_group(h: Harness) -> None:
    h.join("A", ["foo"])
    h.commit(G, "A", 1, {("foo", 0): 5})
    assert (
        h.shard.offset_fetch(OffsetFetchGroup(group_id=G, member_id="A", member_epoch=2)).error_code
        == ErrorCode.STALE_MEMBER_EPOCH
    )
    assert (
        h.shard.offset_fetch(OffsetFetchGroup(group_id=G, member_id="Z", member_epoch=1)).error_code
        == ErrorCode.UNKNOWN_MEMBER_ID
    )
    ok = h.shard.offset_fetch(OffsetFetchGroup(group_id=G, member_id="A", member_epoch=1))
    assert ok.topics[0].partitions == (
        FetchedPartition(partition_index=0, committed_offset=5, metadata=""),
    )
    unknown = h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id="nope", topics=(OffsetFetchTopic(name="foo", partition_indexes=(0,)),)
        )
    )
    assert unknown.error_code == ErrorCode.NONE and unknown.topics[0].partitions == (
        FetchedPartition(partition_index=0),
    )


def test_offsets_survive_members_leaving_and_a_new_member_resumes(h: Harness) -> None:
    h.join("A", ["foo"])
    h.commit(G, "A", 1, {("foo", 0): 100, ("foo", 1): 200})
    h.heartbeat(member_id="A", member_epoch=-1)
    h.join("B", ["foo"])
    got = h.shard.offset_fetch(OffsetFetchGroup(group_id=G, member_id="B", member_epoch=3))
    assert [(p.partition_index, p.committed_offset) for p in got.topics[0].partitions] == [
        (0, 100),
        (1, 200),
    ]
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_delete_offsets_refused_for_subscribed_topic(h: Harness) -> None:
    h.join("A", ["foo"])
    h.commit(G, "A", 1, {("foo", 0): 1})
    res = h.shard.offset_delete(G, [("foo", [0])])
    assert res.response.topics[0].partitions[0].error_code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    assert res.records == []
    h.heartbeat(member_id="A", member_epoch=1, subscribed_topic_names=("bar",))
    res = h.shard.offset_delete(G, [("foo", [0, 1])])
    assert [p.error_code for p in res.response.topics[0].partitions] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
    ]
    assert res.records == [r.offset_commit_tombstone(G, "foo", 0)]
    with pytest.raises(GroupIdNotFoundError):
        h.shard.offset_delete("nope", [("foo", [0])])


def test_delete_offsets_of_topics_and_partitions_that_do_not_exist(h: Harness) -> None:
    """Kafka's KafkaApis answers them UNKNOWN_TOPIC_OR_PARTITION first, in the order asked, and
    the coordinator's answer for the rest is merged in after (appended to a topic answered
    already; a topic with no partition that exists is not asked about)."""
    h.commit(G, "", -1, {("foo", 1): 5, ("bar", 0): 6})
    res = h.shard.offset_delete(G, [("bar", [0]), ("foo", [1, 2, -1]), ("nope", [0]), ("bar", [])])
    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert res.response == OffsetDeleteResponse(
        topics=(
            TopicResult(
                name="foo",
                topic_id=h.topic_id("foo"),
                partitions=(
                    PartitionResult(
                        partition_index=2,
                        error_code=unknown,
                        error_message="Partition foo-2 does not exist.",
                    ),
                    PartitionResult(
                        partition_index=-1,
                        error_code=unknown,
                        error_message="Partition foo--1 does not exist.",
                    ),
                    PartitionResult(partition_index=1),
                ),
            ),
            TopicResult(
                name="nope",
                topic_id=ZERO_TOPIC_ID,
                partitions=(
                    PartitionResult(
                        partition_index=0,
                        error_code=unknown,
                        error_message="Topic nope does not exist.",
                    ),
                ),
            ),
            TopicResult(
                name="bar",
                topic_id=h.topic_id("bar"),
                partitions=(PartitionResult(partition_index=0),),
            ),
        )
    )
    assert res.records == [
        r.offset_commit_tombstone(G, "bar", 0),
        r.offset_commit_tombstone(G, "foo", 1),
    ]


def test_retention_expires_unsubscribed_topics_then_deletes_the_empty_group(h: Harness) -> None:
    h.join("A", ["foo", "bar"])
    h.commit(G, "A", 1, {("foo", 0): 1, ("bar", 0): 2})
    h.heartbeat(member_id="A", member_epoch=1, subscribed_topic_names=("foo",))
    for _ in range(22):  # 11 minutes, heartbeating every 30 s
        h.sleep(30_000)
        a = h.shard.groups[G].members[
            "A"
        ]  # acknowledges the revocation of bar by reporting what it owns
        h.heartbeat(
            member_id="A", member_epoch=a.member_epoch, topic_partitions=dict(a.assigned_partitions)
        )
    res = h.expire_offsets()
    assert res.records == [r.offset_commit_tombstone(G, "bar", 0)]  # foo is still subscribed
    h.heartbeat(member_id="A", member_epoch=-1)
    res = h.expire_offsets()
    assert res.records[0] == r.offset_commit_tombstone(G, "foo", 0)
    assert res.records[-1] == r.group_epoch_tombstone(G)
    assert G not in h.shard.groups and G not in h.shard.offsets
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_a_commits_own_retention_time_sets_when_its_offsets_expire(h: Harness) -> None:
    """OffsetCommit v2-v4's RetentionTimeMs (Kafka's expireTimestampMs): the offsets expire at
    commit time + that retention, whatever offsets.retention.minutes says (10 min here); -1
    keeps the broker's retention."""
    kept = replace(commit_req(-1, member="", p0=1), group_id="kept")
    short = replace(
        commit_req(-1, member="", p0=2, p1=3), group_id="short", retention_time_ms=1_000
    )
    res = h.run(lambda s: s.offset_commit(short, 5))
    expiries = [rec.value.expire_timestamp_ms for rec in res.records]  # type: ignore[union-attr]
    assert expiries == [1_005, 1_005]
    res = h.run(lambda s: s.offset_commit(kept, 5))
    assert [rec.value.expire_timestamp_ms for rec in res.records] == [-1]  # type: ignore[union-attr]
    h.now_ms = 1_004
    assert h.expire_offsets().records == []
    h.now_ms = 1_005
    assert h.expire_offsets().records == [
        r.offset_commit_tombstone("short", "foo", 0),
        r.offset_commit_tombstone("short", "foo", 1),
    ]
    assert "short" not in h.shard.offsets and "kept" in h.shard.offsets
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_offset_delete_of_a_busy_group_of_another_protocol_is_non_empty_group(h: Harness) -> None:
    """Kafka's ClassicGroup.validateOffsetDelete: a classic group with members whose protocol
    type is not "consumer" (Connect's, a custom one) keeps its offsets, NON_EMPTY_GROUP with
    Kafka's default message; nothing is written. Once it is Empty they may go."""
    h.run(lambda s: s.offset_commit(replace(commit_req(-1, member="", p0=4), group_id="wk"), 1))
    connect: dict[str, Any] = dict(
        group_id="wk", protocol_type="connect", protocols=(("v1", b"m"),)
    )
    member_id = h.join_group(**connect).member_id  # MEMBER_ID_REQUIRED, then the join
    h.join_group(member_id, **connect)  # waits in PreparingRebalance: the group has a member
    before = h.shard.snapshot()
    with pytest.raises(NonEmptyGroupError) as err:
        h.shard.offset_delete("wk", [("foo", [0])])
    assert (err.value.code, err.value.message) == (
        ErrorCode.NON_EMPTY_GROUP,
        "The group is not empty.",
    )
    assert h.shard.snapshot() == before
    h.leave_group(member_id, group_id="wk")
    h.sleep(3_000)  # group.initial.rebalance.delay.ms: the join phase ends, the group Empty
    res = h.run(lambda s: s.offset_delete("wk", [("foo", [0])]))
    assert res.records == [r.offset_commit_tombstone("wk", "foo", 0)]


def test_delete_groups(h: Harness) -> None:
    h.join("A", ["foo"])
    h.commit(G, "A", 1, {("foo", 0): 1})
    res = h.shard.delete_groups([G, "nope"])
    assert [(g, c) for g, c, _m in res.response] == [
        (G, ErrorCode.NON_EMPTY_GROUP),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    h.heartbeat(member_id="A", member_epoch=-1)
    res = h.run(lambda s: s.delete_groups([G]))
    assert res.response == [(G, ErrorCode.NONE, None)]
    assert res.records == [
        r.offset_commit_tombstone(G, "foo", 0),
        r.target_assignment_epoch_tombstone(G),
        r.partition_metadata_tombstone(G),
        r.group_epoch_tombstone(G),
    ]
    assert h.shard.group_state(G).value == "Dead"


SESSION_CFG = "consumer.session.timeout.ms"
HB_CFG = "consumer.heartbeat.interval.ms"
AI_CFG = "consumer.assignment.interval.ms"
DEFAULTS = {SESSION_CFG: "45000", HB_CFG: "5000", AI_CFG: "1000"}


def test_deleting_a_group_keeps_its_config_overrides(h: Harness) -> None:
    """KIP-848 and Kafka: a group's dynamic configs live in the cluster log (the controller's
    ConfigRecords) and outlive the group; the group created again under the same id has
    them."""
    h.alter_configs(G, {SESSION_CFG: "50000", HB_CFG: "7000"})
    h.join("A", ["foo"])
    h.commit(G, "A", 1, {("foo", 0): 1})
    h.heartbeat(member_id="A", member_epoch=-1)
    assert h.shard.group_config(G) == {SESSION_CFG: "50000", HB_CFG: "7000", AI_CFG: "1000"}
    res = h.run(lambda s: s.delete_groups([G]))
    assert res.response == [(G, ErrorCode.NONE, None)]
    assert res.records == [
        r.offset_commit_tombstone(G, "foo", 0),
        r.target_assignment_epoch_tombstone(G),
        r.partition_metadata_tombstone(G),
        r.group_epoch_tombstone(G),
    ]
    assert h.shard.group_config(G) == {SESSION_CFG: "50000", HB_CFG: "7000", AI_CFG: "1000"}
    again = h.join("B", ["foo"])
    assert again.response is not None and again.response.heartbeat_interval_ms == 7_000
    assert ArmTimer((SESSION, G, "B"), h.now_ms + 50_000) in again.timers
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_configs_of_a_group_that_does_not_exist_are_kept(h: Harness) -> None:
    """Configs may be set before the group exists; DeleteGroups of a missing group changes
    nothing (GROUP_ID_NOT_FOUND)."""
    h.alter_configs("future", {HB_CFG: "7000"})
    res = h.run(lambda s: s.delete_groups(["future"]))
    assert [(g, c) for g, c, _m in res.response] == [("future", ErrorCode.GROUP_ID_NOT_FOUND)]
    assert res.records == []
    assert h.expire_offsets().records == []
    assert h.shard.group_config("future")[HB_CFG] == "7000"


def test_a_group_deleted_by_offset_expiry_keeps_its_config_overrides(h: Harness) -> None:
    h.alter_configs(G, {HB_CFG: "7000"})
    h.alter_configs("simple", {HB_CFG: "8000"})
    h.join("A", ["foo"])
    h.heartbeat(member_id="A", member_epoch=-1)  # empty, no offsets: deleted at the next run
    h.commit("simple", "", -1, {("bar", 0): 2})  # offsets only
    h.sleep(10 * 60_000)
    res = h.expire_offsets()
    assert res.records == [
        r.target_assignment_epoch_tombstone(G),
        r.partition_metadata_tombstone(G),
        r.group_epoch_tombstone(G),
        r.offset_commit_tombstone("simple", "bar", 0),
    ]
    assert h.shard.group_config(G)[HB_CFG] == "7000"
    assert h.shard.group_config("simple")[HB_CFG] == "8000"
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_deleting_a_topic_deletes_its_offsets(h: Harness) -> None:
    h.commit("simple", "", -1, {("foo", 0): 1, ("bar", 0): 2})
    h.delete_topic("foo")
    assert list(h.shard.offsets["simple"]) == [("bar", 0)]
    h.create_topic("foo", 2)  # re-created: starts fresh
    got = h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id="simple", topics=(OffsetFetchTopic(name="foo", partition_indexes=(0,)),)
        )
    )
    assert got.topics[0].partitions == (FetchedPartition(partition_index=0),)


def test_a_simple_group_refuses_a_commit_with_a_generation(h: Harness) -> None:
    # Kafka's ClassicGroup.validateOffsetCommit: generation >= 0 validates the member, and a
    # simple group has none.
    h.commit("simple", "", -1, {("foo", 0): 1})
    before = h.shard.snapshot()
    with pytest.raises(UnknownMemberIdError) as err:
        h.shard.offset_commit(
            OffsetCommit(
                group_id="simple",
                generation_id_or_member_epoch=0,
                member_id="A",
                topics=(
                    OffsetCommitTopic(
                        name="foo",
                        partitions=(OffsetCommitPartition(partition_index=0, committed_offset=2),),
                    ),
                ),
            ),
            5,
        )
    assert err.value.message == "Member A is not a member of group simple."
    assert h.shard.snapshot() == before


def test_a_topic_needs_a_name_or_an_id(h: Harness) -> None:
    req = OffsetCommit(
        group_id="simple",
        topics=(
            OffsetCommitTopic(
                partitions=(OffsetCommitPartition(partition_index=0, committed_offset=1),)
            ),
        ),
    )
    res = h.shard.offset_commit(req, 5)
    assert res.response.topics == (
        TopicResult(
            name="",
            topic_id="AAAAAAAAAAAAAAAAAAAAAA",
            partitions=(
                PartitionResult(
                    partition_index=0,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="A topic needs a name or a topic id.",
                ),
            ),
        ),
    )
    assert res.records == []
    h.commit("simple", "", -1, {("foo", 0): 1})
    fetched = h.shard.offset_fetch(
        OffsetFetchGroup(
            group_id="simple",
            topics=(
                OffsetFetchTopic(partition_indexes=(0,)),
                OffsetFetchTopic(name="bar", topic_id=h.topic_id("foo"), partition_indexes=(0,)),
                OffsetFetchTopic(name="gone", partition_indexes=(0,)),
            ),
        )
    )
    assert [[p.error_code for p in t.partitions] for t in fetched.topics] == [
        [ErrorCode.INVALID_REQUEST],
        [ErrorCode.INVALID_REQUEST],
        [ErrorCode.NONE],
    ]


def test_a_negative_offset_is_committed_and_fetched_back_as_kafka_stores_it(h: Harness) -> None:
    """Kafka's OffsetMetadataManager.commitOffset checks the metadata's size and the member, not
    the offset: a negative one is written and OffsetFetch answers it as committed. KafkaJS's
    ``admin.resetOffsets`` commits -2 (its EARLIEST sentinel; -1 for LATEST) from a member of
    the group, and its consumers then start from that end of the log; it was INVALID_REQUEST."""
    h.join("A", ["foo"])
    res = h.shard.offset_commit(commit_req(1, p0=-2, p1=-1), 5)
    assert res.records == [
        r.offset_commit_record(
            G, "foo", p, r.OffsetCommitValue(offset=o, leader_epoch=-1, metadata="", commit_timestamp_ms=5)
        )
        for p, o in ((0, -2), (1, -1))
    ]  # fmt: skip
    assert h.commit(G, "A", 1, {("foo", 0): -2, ("foo", 1): -1}) == OffsetCommitResponse(
        topics=(
            TopicResult(
                name="foo",
                topic_id=h.topic_id("foo"),
                partitions=(
                    PartitionResult(partition_index=0),
                    PartitionResult(partition_index=1),
                ),
            ),
        )
    )
    got = h.shard.offset_fetch(OffsetFetchGroup(group_id=G, member_id="A", member_epoch=1))
    assert got.topics[0].partitions == (
        FetchedPartition(partition_index=0, committed_offset=-2, metadata=""),
        FetchedPartition(partition_index=1, committed_offset=-1, metadata=""),
    )
    assert h.replayed().snapshot() == h.shard.snapshot()
