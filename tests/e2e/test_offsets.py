"""End-to-end: OffsetCommit / OffsetFetch / OffsetDelete through a real ``kip848 serve`` (manual
clock): every fencing rule of Kafka 4.0 at the gRPC level, topic addressing, "all offsets"
fetches, the rejoin guarantee, retention expiry and topic deletion."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ServerProcess, join_request, owned
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from coordinator.core.model import topic_id_from_bytes
from kip848.v1 import (
    admin_pb2,
    classic_group_pb2,
    classic_group_pb2_grpc,
    common_pb2,
    offsets_pb2,
    offsets_pb2_grpc,
)
from kip848.v1 import consumer_group_pb2 as cg

pytestmark = pytest.mark.postgresql_too

OC = offsets_pb2.OffsetCommitRequest
OCR = offsets_pb2.OffsetCommitResponse
OF = offsets_pb2.OffsetFetchRequest
OFR = offsets_pb2.OffsetFetchResponse
OD = offsets_pb2.OffsetDeleteRequest
ODR = offsets_pb2.OffsetDeleteResponse
MINUTE = 60_000


def stub(s: ServerProcess) -> offsets_pb2_grpc.OffsetServiceStub:
    return offsets_pb2_grpc.OffsetServiceStub(s.channel)


def commit_request(
    group: str,
    offsets: dict[tuple[str, int], int],
    *,
    epoch: int | None = None,
    member_id: str = "",
    metadata: str | None = None,
) -> OC:
    req = OC(group_id=group, member_id=member_id)
    if epoch is not None:
        req.generation_id_or_member_epoch = epoch
    by_topic: dict[str, list[OC.Partition]] = {}
    for (topic, p), o in offsets.items():
        part = OC.Partition(partition_index=p, committed_offset=o)
        if metadata is not None:
            part.committed_metadata = metadata
        by_topic.setdefault(topic, []).append(part)
    req.topics.extend(OC.Topic(name=t, partitions=ps) for t, ps in by_topic.items())
    return req


def commit(s: ServerProcess, group: str, offsets: dict[tuple[str, int], int], **kw: object) -> OCR:
    return stub(s).OffsetCommit(commit_request(group, offsets, **kw), timeout=10)  # type: ignore[arg-type]


def committed(topic: str, topic_id: bytes, *partitions: int) -> OCR.Topic:
    return OCR.Topic(
        name=topic,
        topic_id=topic_id,
        partitions=[OCR.Partition(partition_index=p) for p in partitions],
    )


def refused(
    topic: str, code: int, message: str, *partitions: int, topic_id: bytes = b""
) -> OCR.Topic:
    return OCR.Topic(
        name=topic,
        topic_id=topic_id,
        partitions=[
            OCR.Partition(partition_index=p, error_code=code, error_message=message)
            for p in partitions
        ],
    )


def fetch(s: ServerProcess, *groups: OF.Group) -> OFR:
    return stub(s).OffsetFetch(OF(groups=list(groups)), timeout=10)


def wanted(*items: tuple[str, list[int]]) -> common_pb2.TopicPartitionIndexesList:
    return common_pb2.TopicPartitionIndexesList(
        items=[common_pb2.TopicPartitionIndexes(name=n, partition_indexes=ps) for n, ps in items]
    )


def part(
    p: int, offset: int = -1, *, epoch: int = -1, metadata: str = "", error: int = 0
) -> OFR.Partition:
    return OFR.Partition(
        partition_index=p,
        committed_offset=offset,
        committed_leader_epoch=epoch,
        metadata=metadata,
        error_code=error,
    )


def topic_offsets(s: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group ("all offsets" fetch, no member validation)."""
    resp = fetch(s, OF.Group(group_id=group))
    assert resp.error_code == 0 and resp.groups[0].error_code == 0, resp
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in resp.groups[0].topics
        for p in t.partitions
    }


def listed(s: ServerProcess) -> dict[str, tuple[str, str]]:
    resp = s.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
    return {g.group_id: (g.group_type, g.group_state) for g in resp.groups}


# ---------------------------------------------------------------- fencing


def test_consumer_member_commits_with_its_member_epoch(
    manual_server: ServerProcess,
) -> None:
    """A newer epoch is stale; an older one passes only for partitions owned since then
    (KIP-1251): here none was assigned before epoch 1."""
    s = manual_server
    t = s.create_topic("fence", 2)
    join = s.heartbeat(**join_request("g-fence", ["fence"], member_id="A"))
    assert join.member_epoch == 1
    offsets = {("fence", 0): 10, ("fence", 1): 20}
    assert commit(s, "g-fence", offsets, epoch=1, member_id="A") == OCR(
        topics=[committed("fence", t, 0, 1)]
    )
    for stale in (2, 7):
        assert commit(s, "g-fence", offsets, epoch=stale, member_id="A") == OCR(
            topics=[
                refused(
                    "fence",
                    113,
                    f"The received member epoch {stale} is newer than the current member epoch 1.",
                    0,
                    1,
                )
            ]
        )
    assert commit(s, "g-fence", offsets, epoch=0, member_id="A") == OCR(
        topics=[
            refused(
                "fence",
                113,
                f"Partition {topic_id_from_bytes(t)}-0 was assigned to member A at epoch 1, "
                "after the received "
                "member epoch 0.",
                0,
                1,
            )
        ]
    )
    assert commit(s, "g-fence", offsets, epoch=1, member_id="Z") == OCR(
        topics=[refused("fence", 25, "Member Z is not a member of group g-fence.", 0, 1)]
    )
    # An admin commit (epoch absent or -1) on a group with members: the member "" is unknown.
    for epoch in (None, -1):
        assert commit(s, "g-fence", offsets, epoch=epoch) == OCR(
            topics=[refused("fence", 25, "Member  is not a member of group g-fence.", 0, 1)]
        )
    assert topic_offsets(s, "g-fence") == {("fence", 0): 10, ("fence", 1): 20}


def test_fetch_validates_the_member_when_asked(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("ffence", 1)
    s.heartbeat(**join_request("g-ffence", ["ffence"], member_id="A"))
    commit(s, "g-ffence", {("ffence", 0): 5}, epoch=1, member_id="A")
    good = fetch(s, OF.Group(group_id="g-ffence", member_id="A", member_epoch=1))
    assert good == OFR(
        groups=[
            OFR.Group(
                group_id="g-ffence",
                topics=[OFR.Topic(name="ffence", topic_id=t, partitions=[part(0, 5)])],
            )
        ]
    )
    assert fetch(s, OF.Group(group_id="g-ffence", member_id="A", member_epoch=2)) == OFR(
        groups=[
            OFR.Group(
                group_id="g-ffence",
                error_code=113,
                error_message="The received member epoch 2 does not match the expected member epoch 1.",
            )
        ]
    )
    assert fetch(s, OF.Group(group_id="g-ffence", member_id="B", member_epoch=1)) == OFR(
        groups=[
            OFR.Group(
                group_id="g-ffence",
                error_code=25,
                error_message="Member B is not a member of group g-ffence.",
            )
        ]
    )
    # No member id and epoch -1: no validation (an admin fetch).
    assert fetch(s, OF.Group(group_id="g-ffence", member_epoch=-1)) == good


def _classic_join(s: ServerProcess, group_id: str, topics: list[str]) -> tuple[str, int]:
    """A classic member joins a consumer group for real (JoinGroup through the legacy bridge,
    with kafka-python's embedded subscription bytes): (member id, generation = member epoch)."""
    stub = classic_group_pb2_grpc.ClassicGroupServiceStub(s.channel)
    metadata = KSubscription(
        version=3,
        topics=topics,
        user_data=None,
        owned_partitions=[],
        generation_id=-1,
        rack_id=None,
    ).encode(version=3)

    def join(member_id: str) -> classic_group_pb2.JoinGroupResponse:
        return stub.JoinGroup(
            classic_group_pb2.JoinGroupRequest(
                group_id=group_id,
                session_timeout_ms=45_000,
                rebalance_timeout_ms=30_000,
                member_id=member_id,
                protocol_type="consumer",
                protocols=[
                    classic_group_pb2.JoinGroupRequest.Protocol(name="range", metadata=metadata)
                ],
            ),
            timeout=10,
        )

    first = join("")
    assert first.error_code == 79, first  # MEMBER_ID_REQUIRED
    joined = join(first.member_id)
    assert joined.error_code == 0, joined
    return joined.member_id, joined.generation_id


def test_classic_member_commits_with_its_generation(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("legacy", 2)
    s.heartbeat(**join_request("g-classic", ["legacy"], member_id="K"))
    c, generation = _classic_join(s, "g-classic", ["legacy"])
    assert generation == 2
    assert {x.member_id: x.member_type for x in s.describe("g-classic").groups[0].members} == {
        c: 0,
        "K": 1,
    }
    offsets = {("legacy", 0): 1, ("legacy", 1): 2}
    for other in (1, 3):
        assert commit(s, "g-classic", offsets, epoch=other, member_id=c) == OCR(
            topics=[
                refused(
                    "legacy",
                    22,
                    f"The received generation id {other} does not match the expected member epoch 2.",
                    0,
                    1,
                )
            ]
        )
    assert commit(s, "g-classic", offsets, epoch=2, member_id="X") == OCR(
        topics=[refused("legacy", 25, "Member X is not a member of group g-classic.", 0, 1)]
    )
    assert commit(s, "g-classic", offsets, epoch=2, member_id=c) == OCR(
        topics=[committed("legacy", t, 0, 1)]
    )
    assert fetch(s, OF.Group(group_id="g-classic", member_id=c, member_epoch=1)).groups[
        0
    ] == OFR.Group(
        group_id="g-classic",
        error_code=22,
        error_message="The received generation id 1 does not match the expected member epoch 2.",
    )


def test_admin_commits_only_on_an_empty_or_missing_group(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("adm", 1)
    # Missing group, epoch >= 0: GROUP_ID_NOT_FOUND.
    assert commit(s, "g-adm-missing", {("adm", 0): 1}, epoch=3, member_id="A") == OCR(
        topics=[refused("adm", 69, "Group g-adm-missing not found.", 0)]
    )
    assert "g-adm-missing" not in listed(s)
    # Missing group, no epoch: accepted; a "simple" group (offsets only) appears.
    assert commit(s, "g-adm-simple", {("adm", 0): 1}) == OCR(topics=[committed("adm", t, 0)])
    assert listed(s)["g-adm-simple"] == ("classic", "Empty")
    # A simple group has no members: a commit with a generation names an unknown member.
    assert commit(s, "g-adm-simple", {("adm", 0): 2}, epoch=0, member_id="A") == OCR(
        topics=[refused("adm", 25, "Member A is not a member of group g-adm-simple.", 0)]
    )
    # A consumer group: refused while it has members, accepted once it is empty.
    join = s.heartbeat(**join_request("g-adm", ["adm"], member_id="A"))
    assert commit(s, "g-adm", {("adm", 0): 3}, epoch=-1) == OCR(
        topics=[refused("adm", 25, "Member  is not a member of group g-adm.", 0)]
    )
    s.heartbeat(
        group_id="g-adm",
        member_id="A",
        member_epoch=join.member_epoch,
        topic_partitions=owned((t, [0])),
    )
    s.heartbeat(group_id="g-adm", member_id="A", member_epoch=-1)
    assert s.describe("g-adm").groups[0].group_state == "Empty"
    assert commit(s, "g-adm", {("adm", 0): 3}, epoch=-1) == OCR(topics=[committed("adm", t, 0)])
    assert topic_offsets(s, "g-adm") == {("adm", 0): 3}


def test_per_partition_errors_and_topic_addressing(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("addr", 2)
    other = s.create_topic("addr-other", 1)
    unknown_id = bytes(range(100, 116))
    req = OC(
        group_id="g-addr",
        topics=[
            OC.Topic(
                name="addr",
                partitions=[
                    OC.Partition(
                        partition_index=0, committed_offset=1, committed_metadata="x" * 4097
                    ),
                    OC.Partition(
                        partition_index=1,
                        committed_offset=2,
                        committed_leader_epoch=4,
                        committed_metadata="m" * 4096,
                    ),
                    OC.Partition(partition_index=2, committed_offset=3),
                ],
            ),
            OC.Topic(
                name="no-such-topic",
                partitions=[OC.Partition(partition_index=0, committed_offset=1)],
            ),
            OC.Topic(
                topic_id=other, partitions=[OC.Partition(partition_index=0, committed_offset=7)]
            ),
            OC.Topic(
                topic_id=unknown_id,
                partitions=[OC.Partition(partition_index=0, committed_offset=1)],
            ),
            OC.Topic(
                name="addr",
                topic_id=other,
                partitions=[OC.Partition(partition_index=0, committed_offset=1)],
            ),
            OC.Topic(partitions=[OC.Partition(partition_index=0, committed_offset=1)]),
        ],
    )
    unknown_b64 = "ZGVmZ2hpamtsbW5vcHFycw"
    assert stub(s).OffsetCommit(req, timeout=10) == OCR(
        topics=[
            OCR.Topic(
                name="addr",
                topic_id=t,
                partitions=[
                    OCR.Partition(
                        partition_index=0,
                        error_code=12,
                        error_message="Offset metadata is larger than offset.metadata.max.bytes (4096).",
                    ),
                    OCR.Partition(partition_index=1),
                    OCR.Partition(
                        partition_index=2,
                        error_code=3,
                        error_message="Partition addr-2 does not exist.",
                    ),
                ],
            ),
            refused("no-such-topic", 3, "Topic no-such-topic does not exist.", 0),
            committed("addr-other", other, 0),
            refused("", 100, f"Topic id {unknown_b64} does not exist.", 0, topic_id=unknown_id),
            refused(
                "addr",
                42,
                f"Topic id {s_id(other)} is topic addr-other, not addr.",
                0,
                topic_id=other,
            ),
            refused("", 42, "A topic needs a name or a topic id.", 0),
        ]
    )
    got = fetch(s, OF.Group(group_id="g-addr"))
    assert got == OFR(
        groups=[
            OFR.Group(
                group_id="g-addr",
                topics=[
                    OFR.Topic(
                        name="addr",
                        topic_id=t,
                        partitions=[part(1, 2, epoch=4, metadata="m" * 4096)],
                    ),
                    OFR.Topic(name="addr-other", topic_id=other, partitions=[part(0, 7)]),
                ],
            )
        ]
    )
    # A topic id that is not 16 bytes: the whole request is invalid, on every partition.
    bad = OC(
        group_id="g-addr",
        topics=[
            OC.Topic(
                topic_id=b"short", partitions=[OC.Partition(partition_index=0, committed_offset=1)]
            ),
            OC.Topic(name="addr", partitions=[OC.Partition(partition_index=1, committed_offset=1)]),
        ],
    )
    assert stub(s).OffsetCommit(bad, timeout=10) == OCR(
        topics=[
            refused("", 42, "A topic id has 16 bytes, got 5.", 0, topic_id=b"short"),
            refused("addr", 42, "A topic id has 16 bytes, got 5.", 1),
        ]
    )
    assert commit(s, "", {("addr", 0): 1}) == OCR(
        topics=[refused("addr", 24, "Group id can't be empty.", 0)]
    )


def s_id(raw: bytes) -> str:
    from coordinator.core.model import topic_id_from_bytes

    return topic_id_from_bytes(raw)


def test_fetch_all_by_name_by_id_and_unknowns(manual_server: ServerProcess) -> None:
    s = manual_server
    a = s.create_topic("fa", 3)
    b = s.create_topic("fb", 1)
    commit(s, "g-fetch", {("fb", 0): 4, ("fa", 2): 3, ("fa", 0): 1})
    everything = OFR.Group(
        group_id="g-fetch",
        topics=[
            OFR.Topic(name="fa", topic_id=a, partitions=[part(0, 1), part(2, 3)]),
            OFR.Topic(name="fb", topic_id=b, partitions=[part(0, 4)]),
        ],
    )
    assert fetch(s, OF.Group(group_id="g-fetch")) == OFR(groups=[everything])
    by_id = OF.Group(
        group_id="g-fetch",
        topics=common_pb2.TopicPartitionIndexesList(
            items=[
                common_pb2.TopicPartitionIndexes(topic_id=a, partition_indexes=[1, 2]),
                common_pb2.TopicPartitionIndexes(topic_id=bytes(16 * [7]), partition_indexes=[0]),
                common_pb2.TopicPartitionIndexes(name="gone", partition_indexes=[0]),
            ]
        ),
    )
    unknown = bytes(16 * [7])
    assert fetch(
        s,
        by_id,
        OF.Group(group_id="g-fetch-none", topics=wanted(("fa", [0]))),
        OF.Group(group_id=""),
        OF.Group(group_id="g-fetch-none"),
    ) == OFR(
        groups=[
            OFR.Group(
                group_id="g-fetch",
                topics=[
                    OFR.Topic(name="fa", topic_id=a, partitions=[part(1), part(2, 3)]),
                    OFR.Topic(topic_id=unknown, partitions=[part(0, error=100)]),
                    OFR.Topic(name="gone", partitions=[part(0)]),
                ],
            ),
            # An unknown group: no error, every partition without an offset (Kafka).
            OFR.Group(
                group_id="g-fetch-none",
                topics=[OFR.Topic(name="fa", topic_id=a, partitions=[part(0)])],
            ),
            OFR.Group(group_id="", error_code=24, error_message="Group id can't be empty."),
            OFR.Group(group_id="g-fetch-none"),
        ]
    )
    # An empty list of topics is not "all".
    assert fetch(s, OF.Group(group_id="g-fetch", topics=wanted())) == OFR(
        groups=[OFR.Group(group_id="g-fetch")]
    )


def test_offset_delete(manual_server: ServerProcess) -> None:
    s = manual_server
    t = s.create_topic("del-sub", 2)
    s.create_topic("del-free", 2)
    join = s.heartbeat(**join_request("g-del", ["del-sub"], member_id="A"))
    commit(
        s,
        "g-del",
        {("del-sub", 0): 1, ("del-free", 0): 2, ("del-free", 1): 3},
        epoch=join.member_epoch,
        member_id="A",
    )
    resp = stub(s).OffsetDelete(
        OD(
            group_id="g-del",
            topics=[
                OD.Topic(name="del-sub", partition_indexes=[0, 1]),
                OD.Topic(name="del-free", partition_indexes=[1, 5]),
            ],
        ),
        timeout=10,
    )
    # As Kafka's KafkaApis: a partition that does not exist is answered first
    # (UNKNOWN_TOPIC_OR_PARTITION), the coordinator's answer merged in after it.
    assert resp == ODR(
        topics=[
            ODR.Topic(
                name="del-free",
                partitions=[
                    ODR.Partition(
                        partition_index=5,
                        error_code=3,
                        error_message="Partition del-free-5 does not exist.",
                    ),
                    ODR.Partition(partition_index=1),
                ],
            ),
            ODR.Topic(
                name="del-sub",
                partitions=[
                    ODR.Partition(
                        partition_index=p,
                        error_code=86,
                        error_message="The group is subscribed to topic del-sub.",
                    )
                    for p in (0, 1)
                ],
            ),
        ]
    )
    assert topic_offsets(s, "g-del") == {("del-sub", 0): 1, ("del-free", 0): 2}
    assert stub(s).OffsetDelete(
        OD(group_id="g-del-nope", topics=[OD.Topic(name="del-free", partition_indexes=[0])]),
        timeout=10,
    ) == ODR(error_code=69, error_message="Group g-del-nope not found.")
    assert stub(s).OffsetDelete(OD(group_id=""), timeout=10) == ODR(
        error_code=24, error_message="Group id can't be empty."
    )
    # Once the member moves off del-sub, its offsets can go.
    s.heartbeat(
        group_id="g-del",
        member_id="A",
        member_epoch=join.member_epoch,
        subscribed_topic_names=common_pb2.TopicNames(names=["del-free"]),
        topic_partitions=owned((t, [0, 1])),
    )
    resp = stub(s).OffsetDelete(
        OD(group_id="g-del", topics=[OD.Topic(name="del-sub", partition_indexes=[0])]), timeout=10
    )
    assert resp == ODR(
        topics=[ODR.Topic(name="del-sub", partitions=[ODR.Partition(partition_index=0)])]
    )
    assert topic_offsets(s, "g-del") == {("del-free", 0): 2}


def test_offsets_survive_every_member_leaving_and_a_new_member_resumes(
    manual_server: ServerProcess,
) -> None:
    s = manual_server
    t = s.create_topic("resume", 2)
    a = s.heartbeat(**join_request("g-resume", ["resume"], member_id="A"))
    commit(
        s, "g-resume", {("resume", 0): 100, ("resume", 1): 200}, epoch=a.member_epoch, member_id="A"
    )
    s.heartbeat(group_id="g-resume", member_id="A", member_epoch=-1)
    desc = s.describe("g-resume").groups[0]
    assert (desc.group_state, list(desc.members)) == ("Empty", [])
    b = s.heartbeat(**join_request("g-resume", ["resume"], member_id="B"))
    assert b.member_epoch == 3 and b.assignment.assigned_topic_partitions[0].partitions == [0, 1]
    resumed = fetch(
        s,
        OF.Group(
            group_id="g-resume", member_id="B", member_epoch=3, topics=wanted(("resume", [0, 1]))
        ),
    )
    assert resumed == OFR(
        groups=[
            OFR.Group(
                group_id="g-resume",
                topics=[
                    OFR.Topic(name="resume", topic_id=t, partitions=[part(0, 100), part(1, 200)])
                ],
            )
        ]
    )
    assert commit(s, "g-resume", {("resume", 0): 150}, epoch=3, member_id="B") == OCR(
        topics=[committed("resume", t, 0)]
    )


def test_deleting_a_topic_deletes_its_offsets(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("doomed", 1)
    commit(s, "g-doomed", {("doomed", 0): 9})
    commit(s, "g-doomed-2", {("doomed", 0): 8})
    assert (
        s.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["doomed"]), timeout=10)
        .results[0]
        .error_code
        == 0
    )
    assert topic_offsets(s, "g-doomed") == {}
    again = s.create_topic("doomed", 1)
    assert fetch(s, OF.Group(group_id="g-doomed-2", topics=wanted(("doomed", [0])))) == OFR(
        groups=[
            OFR.Group(
                group_id="g-doomed-2",
                topics=[OFR.Topic(name="doomed", topic_id=again, partitions=[part(0)])],
            )
        ]
    )
    # Groups left with no offsets and no members go with them.
    assert "g-doomed" not in listed(s)


# ---------------------------------------------------------------- retention


def test_retention_expires_unsubscribed_offsets_then_the_empty_group(
    start_server, tmp_path: Path
) -> None:
    s: ServerProcess = start_server(
        tmp_path / "data",
        "--set",
        "offsets.retention.minutes=10",
        "--set",
        "offsets.retention.check.interval.ms=60000",
    )
    t = s.create_topic("keep", 1)
    s.create_topic("drop", 1)
    join = s.heartbeat(**join_request("g-ret", ["keep"], member_id="A"))
    commit(s, "g-ret", {("keep", 0): 1, ("drop", 0): 2}, epoch=join.member_epoch, member_id="A")
    commit(s, "g-ret-simple", {("keep", 0): 3})
    for _ in range(19):  # 9.5 minutes: the member heartbeats every 30 s (session timeout 45 s)
        assert s.advance(MINUTE // 2).error_code == 0
        beat = s.heartbeat(
            group_id="g-ret", member_id="A", member_epoch=1, topic_partitions=owned((t, [0]))
        )
        assert beat.error_code == 0, beat
    assert topic_offsets(s, "g-ret") == {("keep", 0): 1, ("drop", 0): 2}
    assert topic_offsets(s, "g-ret-simple") == {("keep", 0): 3}
    s.advance(MINUTE // 2)  # 10 minutes after the commits: the check runs
    assert topic_offsets(s, "g-ret") == {("keep", 0): 1}  # subscribed: kept
    assert "g-ret-simple" not in listed(s)  # its only offset expired: the simple group is gone
    # The member leaves: nothing is subscribed any more; the remaining offset expires 10 min after
    # its commit (already past), at the next check; the empty group is deleted with it.
    s.heartbeat(group_id="g-ret", member_id="A", member_epoch=-1)
    assert topic_offsets(s, "g-ret") == {("keep", 0): 1}  # the rejoin guarantee until the check
    s.advance(MINUTE)
    assert topic_offsets(s, "g-ret") == {}
    assert s.describe("g-ret").groups[0].error_code == 69
    assert listed(s) == {}
    log = s.stderr_text()
    assert "[GroupId g-ret] Expired 1 offsets." in log
    assert "[GroupId g-ret] Group deleted (expired)." in log
    assert s.stop() == 0


def test_commits_are_replayed_at_load(start_server, tmp_path: Path) -> None:
    s: ServerProcess = start_server(tmp_path / "data")
    t = s.create_topic("replayed", 2)
    join = s.heartbeat(**join_request("g-replay", ["replayed"], member_id="A"))
    commit(
        s,
        "g-replay",
        {("replayed", 0): 5, ("replayed", 1): 6},
        epoch=join.member_epoch,
        member_id="A",
        metadata="meta",
    )
    commit(s, "g-replay-simple", {("replayed", 1): 7})
    before = fetch(s, OF.Group(group_id="g-replay"), OF.Group(group_id="g-replay-simple"))
    assert before.groups[0].topics[0] == OFR.Topic(
        name="replayed",
        topic_id=t,
        partitions=[part(0, 5, metadata="meta"), part(1, 6, metadata="meta")],
    )
    s.kill9()
    again: ServerProcess = start_server(tmp_path / "data")
    assert (
        fetch(again, OF.Group(group_id="g-replay"), OF.Group(group_id="g-replay-simple")) == before
    )
    assert listed(again) == {
        "g-replay": ("consumer", "Stable"),
        "g-replay-simple": ("classic", "Empty"),
    }
    assert again.stop() == 0


def test_describe_shows_offsets_unaffected_by_heartbeats(manual_server: ServerProcess) -> None:
    """Committing never changes the group: no epoch bump, no records other than the offsets."""
    s = manual_server
    t = s.create_topic("quiet", 1)
    join = s.heartbeat(**join_request("g-quiet", ["quiet"], member_id="A"))
    before = s.describe("g-quiet")
    for i in range(5):
        commit(s, "g-quiet", {("quiet", 0): i}, epoch=join.member_epoch, member_id="A")
    assert s.describe("g-quiet") == before
    assert s.heartbeat(
        group_id="g-quiet", member_id="A", member_epoch=1, topic_partitions=owned((t, [0]))
    ) == cg.ConsumerGroupHeartbeatResponse(
        member_id="A", member_epoch=1, heartbeat_interval_ms=5000
    )
