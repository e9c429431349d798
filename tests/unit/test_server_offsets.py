"""OffsetService / admin additions in-process: conversion, errors on every partition or per
group, bugs answered UNKNOWN_SERVER_ERROR in-band, UNAVAILABLE while shutting down."""

from __future__ import annotations

import grpc
import pytest
from test_server_services import Ctx, runtime

from coordinator.core.errors import CoordinatorLoadInProgressError, ErrorCode
from coordinator.core.model import ZERO_TOPIC_ID, topic_id_from_bytes
from coordinator.core.offsets import (
    FetchedPartition,
    FetchedTopic,
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchGroupResponse,
    OffsetFetchTopic,
)
from coordinator.server import convert
from coordinator.server.services import AdminService, OffsetService
from kip848.v1 import admin_pb2, common_pb2, offsets_pb2

OC = offsets_pb2.OffsetCommitRequest
OCR = offsets_pb2.OffsetCommitResponse
OF = offsets_pb2.OffsetFetchRequest
OFR = offsets_pb2.OffsetFetchResponse
T1 = bytes(range(1, 17))
ID1 = topic_id_from_bytes(T1)
LOADING = CoordinatorLoadInProgressError().message


def test_commit_conversion_absent_optionals_are_minus_one_and_none() -> None:
    req = OC(
        group_id="g",
        member_id="m",
        topics=[
            OC.Topic(name="a", partitions=[OC.Partition(partition_index=0, committed_offset=5)]),
            OC.Topic(
                topic_id=T1,
                partitions=[
                    OC.Partition(
                        partition_index=1,
                        committed_offset=6,
                        committed_leader_epoch=3,
                        committed_metadata="",
                    )
                ],
            ),
        ],
    )
    assert convert.offset_commit_from_proto(req) == OffsetCommit(
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="m",
        group_instance_id=None,
        topics=(
            OffsetCommitTopic(
                name="a",
                topic_id=ZERO_TOPIC_ID,
                partitions=(
                    OffsetCommitPartition(
                        partition_index=0,
                        committed_offset=5,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    ),
                ),
            ),
            OffsetCommitTopic(
                name="",
                topic_id=ID1,
                partitions=(
                    OffsetCommitPartition(
                        partition_index=1,
                        committed_offset=6,
                        committed_leader_epoch=3,
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    req = OC(group_id="g", generation_id_or_member_epoch=0, group_instance_id="i")
    cmd = convert.offset_commit_from_proto(req)
    assert (cmd.generation_id_or_member_epoch, cmd.group_instance_id) == (0, "i")


def test_fetch_conversion_absent_topics_is_all_and_empty_is_none() -> None:
    assert convert.offset_fetch_group_from_proto(OF.Group(group_id="g")) == OffsetFetchGroup(
        group_id="g", member_id=None, member_epoch=-1, topics=None
    )
    g = OF.Group(
        group_id="g", member_id="", member_epoch=3, topics=common_pb2.TopicPartitionIndexesList()
    )
    assert convert.offset_fetch_group_from_proto(g) == OffsetFetchGroup(
        group_id="g", member_id="", member_epoch=3, topics=()
    )
    g = OF.Group(
        group_id="g",
        topics=common_pb2.TopicPartitionIndexesList(
            items=[common_pb2.TopicPartitionIndexes(topic_id=T1, partition_indexes=[2, 1])]
        ),
    )
    assert convert.offset_fetch_group_from_proto(g).topics == (
        OffsetFetchTopic(topic_id=ID1, partition_indexes=(2, 1)),
    )
    resp = OffsetFetchGroupResponse(
        group_id="g",
        topics=(
            FetchedTopic(
                name="a",
                topic_id=ID1,
                partitions=(
                    FetchedPartition(partition_index=0, committed_offset=4, metadata="x"),
                    FetchedPartition(partition_index=1),
                ),
            ),
            FetchedTopic(
                name="gone",
                topic_id=ZERO_TOPIC_ID,
                partitions=(FetchedPartition(partition_index=0),),
            ),
        ),
    )
    assert convert.offset_fetch_group_to_proto(resp) == OFR.Group(
        group_id="g",
        topics=[
            OFR.Topic(
                name="a",
                topic_id=T1,
                partitions=[
                    OFR.Partition(
                        partition_index=0,
                        committed_offset=4,
                        committed_leader_epoch=-1,
                        metadata="x",
                    ),
                    OFR.Partition(
                        partition_index=1,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                    ),
                ],
            ),
            OFR.Topic(
                name="gone",
                partitions=[
                    OFR.Partition(
                        partition_index=0,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                    )
                ],
            ),
        ],
    )


async def test_load_in_progress_is_on_every_partition_and_every_group() -> None:
    rt = runtime()  # not started: loading
    service = OffsetService(rt)
    req = OC(
        group_id="g",
        topics=[
            OC.Topic(
                name="a",
                partitions=[OC.Partition(partition_index=0), OC.Partition(partition_index=1)],
            )
        ],
    )
    assert await service.OffsetCommit(req, Ctx()) == OCR(
        topics=[
            OCR.Topic(
                name="a",
                partitions=[
                    OCR.Partition(partition_index=p, error_code=14, error_message=LOADING)
                    for p in (0, 1)
                ],
            )
        ]
    )
    got = await service.OffsetFetch(
        OF(groups=[OF.Group(group_id="g"), OF.Group(group_id="h")]), Ctx()
    )
    assert got == OFR(
        groups=[OFR.Group(group_id=g, error_code=14, error_message=LOADING) for g in ("g", "h")]
    )
    deleted = await service.OffsetDelete(offsets_pb2.OffsetDeleteRequest(group_id="g"), Ctx())
    assert deleted == offsets_pb2.OffsetDeleteResponse(error_code=14, error_message=LOADING)
    groups = await AdminService(rt).DeleteGroups(
        admin_pb2.DeleteGroupsRequest(group_ids=["g"]), Ctx()
    )
    R = admin_pb2.DeleteGroupsResponse.DeletableGroupResult
    assert groups == admin_pb2.DeleteGroupsResponse(
        results=[R(group_id="g", error_code=14, error_message=LOADING)]
    )
    listed = await AdminService(rt).ListGroups(admin_pb2.ListGroupsRequest(), Ctx())
    assert listed == admin_pb2.ListGroupsResponse(error_code=14, error_message=LOADING)


async def test_a_bug_is_unknown_server_error_on_every_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = runtime()
    await rt.start()

    async def boom(_req):
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(rt, "offset_commit", boom)
    req = OC(
        group_id="g", topics=[OC.Topic(name="a", partitions=[OC.Partition(partition_index=3)])]
    )
    resp = await OffsetService(rt).OffsetCommit(req, Ctx())
    assert resp == OCR(
        topics=[OCR.Topic(name="a", partitions=[OCR.Partition(partition_index=3, error_code=-1)])]
    )
    await rt.close()


async def test_unavailable_while_shutting_down() -> None:
    rt = runtime()
    await rt.start()
    await rt.close()
    for call, req in (
        (OffsetService(rt).OffsetCommit, OC(group_id="g")),
        (OffsetService(rt).OffsetFetch, OF()),
        (OffsetService(rt).OffsetDelete, offsets_pb2.OffsetDeleteRequest(group_id="g")),
        (AdminService(rt).DeleteGroups, admin_pb2.DeleteGroupsRequest()),
    ):
        ctx = Ctx()
        with pytest.raises(RuntimeError, match="aborted"):
            await call(req, ctx)
        assert ctx.aborted == (grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")


def test_delete_groups_and_list_groups_conversion() -> None:
    R = admin_pb2.DeleteGroupsResponse.DeletableGroupResult
    assert convert.delete_groups_to_proto(
        [("a", ErrorCode.NONE, None), ("b", ErrorCode.NON_EMPTY_GROUP, "busy")]
    ) == admin_pb2.DeleteGroupsResponse(
        results=[R(group_id="a"), R(group_id="b", error_code=68, error_message="busy")]
    )
