"""Observability in-process: the runtime and the servicers with metrics and tracing on (the
OpenTelemetry SDK's in-memory exporter), request instrumentation through the forwarded-call
path, JSON logs parsed line by line, audit lines, and the Grafana dashboard's queries."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from assignors.uniform import UniformAssignor
from coordinator.core.commands import ConsumerGroupHeartbeat, SequentialIds
from coordinator.core.config import parse_config
from coordinator.core.errors import ErrorCode
from coordinator.observability import tracing
from coordinator.observability.logs import audit, configure_logging, log_fields
from coordinator.observability.metrics import (
    CoordinatorMetrics,
    StateCounts,
    group_size_label,
    metric_names,
)
from coordinator.observability.observer import RuntimeObserver, count_state, loop_reader
from coordinator.observability.requests import RequestObserver, audit_lines
from coordinator.runtime import CoordinatorRuntime, ManualClock, SystemClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.api import Caller
from coordinator.server.catalog import observe_rpcs, rpc_name
from coordinator.server.forwarding import ForwardedContext
from coordinator.server.grpc_server import method_table
from coordinator.server.rpc import answer_code_reader, first_error, plain_value
from coordinator.server.service import CoordinatorService
from coordinator.server.services import AdminService, ConsumerGroupService, OffsetService
from kip848.v1 import admin_pb2, common_pb2, offsets_pb2
from kip848.v1 import consumer_group_pb2 as cg

ROOT = Path(__file__).resolve().parents[2]
HB = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
DESCRIBE = "/kip848.v1.ConsumerGroupService/ConsumerGroupDescribe"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def sample(metrics: CoordinatorMetrics, name: str, **labels: str) -> float:
    total = 0.0
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


class Server:
    """The coordinator's servicers behind the instrumented method table, called the way the
    coordinator process runs a call a front end forwarded."""

    def __init__(self, runtime: CoordinatorRuntime, metrics: CoordinatorMetrics | None) -> None:
        from coordinator.server.services import service_descriptors

        self.service = CoordinatorService(runtime)
        observe_rpcs(self.service, RequestObserver(metrics))
        descriptors = {d.name: d for d in service_descriptors()}
        served = [
            (descriptors["ConsumerGroupService"], ConsumerGroupService(self.service)),
            (descriptors["AdminService"], AdminService(self.service)),
            (descriptors["OffsetService"], OffsetService(self.service)),
        ]
        self.table = method_table(served)

    async def call(self, path: str, request: Any, *metadata: tuple[str, str]) -> Any:
        _parse, method = self.table[path]
        context = ForwardedContext(
            (("client-id", "app"), *metadata), "ipv4:127.0.0.1:40000", received=None
        )
        return await method(request, context)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    tracing.configure(exporter=exp, sample_ratio=1.0, max_traces_per_second=0)  # every request
    try:
        yield exp
    finally:
        tracing.shutdown()


async def started_runtime(observer: RuntimeObserver) -> CoordinatorRuntime:
    rt = CoordinatorRuntime(
        # Targets computed in the changing heartbeat: the stories do not move the clock.
        config=parse_config(
            {"group.coordinator.shards": "2", "group.consumer.assignment.interval.ms": "0"}
        ),
        store=MemoryRecordStore(partitions=2),
        clock=ManualClock(1_000_000),
        ids=SequentialIds(),
        assignors=[UniformAssignor()],
        observer=observer,
    )
    await rt.start()
    return rt


async def rebalance_story(server: Server) -> bytes:
    """Topic of 4 partitions; A joins (epoch 1); B joins (epoch 2); A revokes; both at 2;
    A commits partitions 0 and 1. Returns the topic id."""
    created = await server.call(
        "/kip848.v1.AdminService/CreateTopics",
        admin_pb2.CreateTopicsRequest(
            topics=[admin_pb2.CreateTopicsRequest.CreatableTopic(name="orders", num_partitions=4)]
        ),
    )
    t = created.topics[0].topic_id

    def join(member: str) -> cg.ConsumerGroupHeartbeatRequest:
        return cg.ConsumerGroupHeartbeatRequest(
            group_id="shop",
            member_id=member,
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=common_pb2.TopicNames(names=["orders"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )

    a = await server.call(HB, join("A"), ("traceparent", TRACEPARENT))
    assert (a.error_code, a.member_epoch) == (0, 1)
    b = await server.call(HB, join("B"))
    assert (b.error_code, b.member_epoch) == (0, 2)
    owned = common_pb2.TopicPartitionsList(
        items=[common_pb2.TopicPartitions(topic_id=t, partitions=[0, 1])]
    )
    a = await server.call(
        HB,
        cg.ConsumerGroupHeartbeatRequest(
            group_id="shop", member_id="A", member_epoch=1, topic_partitions=owned
        ),
    )
    assert a.member_epoch == 2
    b = await server.call(
        HB, cg.ConsumerGroupHeartbeatRequest(group_id="shop", member_id="B", member_epoch=2)
    )
    assert [p.partitions for p in b.assignment.assigned_topic_partitions] == [[2, 3]]
    commit = await server.call(
        "/kip848.v1.OffsetService/OffsetCommit",
        offsets_pb2.OffsetCommitRequest(
            group_id="shop",
            member_id="A",
            generation_id_or_member_epoch=2,
            topics=[
                offsets_pb2.OffsetCommitRequest.Topic(
                    topic_id=t,
                    partitions=[
                        offsets_pb2.OffsetCommitRequest.Partition(partition_index=p) for p in (0, 1)
                    ],
                )
            ],
        ),
    )
    assert [p.error_code for p in commit.topics[0].partitions] == [0, 0]
    return t


# ---------------------------------------------------------------- metrics


async def test_metrics_of_a_rebalance_a_commit_and_a_session_timeout() -> None:
    metrics = CoordinatorMetrics(process_collectors=False)
    observer = RuntimeObserver(metrics)
    rt = await started_runtime(observer)
    try:
        server = Server(rt, metrics)
        await rebalance_story(server)
        await rt.flush()
        assert (
            sample(
                metrics,
                "kip848_request_duration_seconds_count",
                rpc="ConsumerGroupHeartbeat",
                protocol="grpc",
                error="NONE",
            )
            == 4
        )
        assert sample(metrics, "kip848_request_duration_seconds_count", rpc="CreateTopics") == 1
        assert sample(metrics, "kip848_consumer_group_rebalances_total", cause="member_joined") == 2
        assert (
            sample(metrics, "kip848_rebalance_duration_seconds_count", group_type="consumer") == 2
        )
        assert sample(metrics, "kip848_offset_commits_total", error="NONE") == 2
        assert (
            sample(
                metrics,
                "kip848_assignment_duration_seconds_count",
                assignor="uniform",
                group_size="1-10",
            )
            == 2
        )
        shard = str(rt.shard_index("shop"))
        # join A, join B, A, B (4 heartbeats) + the commit ran on the group's shard
        assert sample(metrics, "kip848_event_processing_time_seconds_count", shard=shard) == 5
        assert sample(metrics, "kip848_event_queue_time_seconds_count", shard=shard) == 5
        assert sample(metrics, "kip848_event_processing_time_seconds_count", shard="registry") == 1
        assert sample(metrics, "kip848_batch_records_count") == sample(
            metrics, "kip848_batch_flush_time_seconds_count"
        )
        assert sample(metrics, "kip848_batch_commands_sum") == 1 + 4 + 1  # topic, 4 hb, commit
        assert sample(metrics, "kip848_event_purgatory_time_seconds_count", shard=shard) == 5

        # Both members go silent: their session timeouts fire; the group empties.
        await rt.advance_time(45_000)
        assert sample(metrics, "kip848_timeouts_total", kind="session") == 2
        assert (
            sample(
                metrics,
                "kip848_consumer_group_rebalances_total",
                cause="member_fenced_session_timeout",
            )
            == 2
        )
        assert sample(metrics, "kip848_event_queue_time_seconds_count", shard=shard) == 7

        counts = count_state(rt)
        assert counts.groups == {("consumer", "Empty"): 1}
        assert counts.members == {}
        assert counts.offsets == 2
        assert counts.shards == {"active": 2}
        assert sorted(counts.load_seconds) == [0, 1]
    finally:
        await rt.close()


async def test_heartbeat_answers_are_counted_by_their_code_before_and_after_a_plain_one() -> None:
    """The wrapper learns that a heartbeat's value carries no code of its own (plain_value)
    and reads the Reply's code directly from then on; error answers still count as errors."""
    from coordinator.core.commands import ConsumerGroupHeartbeatResponse
    from coordinator.core.offsets import OffsetCommitResponse
    from coordinator.server.api import Reply

    response = ConsumerGroupHeartbeatResponse(
        member_id="A", member_epoch=1, heartbeat_interval_ms=5000
    )
    assert plain_value(Reply(value=response)) is ConsumerGroupHeartbeatResponse
    assert plain_value(Reply(error_code=ErrorCode.UNKNOWN_MEMBER_ID)) is None
    assert plain_value(Reply(value=OffsetCommitResponse(topics=()))) is None  # has entries
    assert plain_value(Reply(value=[])) is None
    assert plain_value(response) is None  # not a Reply

    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started_runtime(RuntimeObserver(metrics))
    try:
        server = Server(rt, metrics)
        await rebalance_story(server)
        unknown = await server.call(
            HB, cg.ConsumerGroupHeartbeatRequest(group_id="shop", member_id="Z", member_epoch=3)
        )
        assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        steady = await server.call(
            HB, cg.ConsumerGroupHeartbeatRequest(group_id="shop", member_id="A", member_epoch=2)
        )
        assert (steady.error_code, steady.member_epoch) == (0, 2)
        counts = {
            error: sample(
                metrics,
                "kip848_request_duration_seconds_count",
                rpc="ConsumerGroupHeartbeat",
                protocol="grpc",
                error=error,
            )
            for error in ("NONE", "UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH")
        }
        assert counts == {"NONE": 5, "UNKNOWN_MEMBER_ID": 1, "FENCED_MEMBER_EPOCH": 0}
    finally:
        await rt.close()


def test_the_reader_says_which_answers_carry_their_code_for_the_hook_to_read_them() -> None:
    """``answer_code_reader().plain``: [answer type, value type] of the plain answers, learned
    from the first answer (a type no answer has before); the service layer's hook reads such
    an answer's code itself (``a.error_code``), exactly what the reader would return."""
    from coordinator.core.commands import ConsumerGroupHeartbeatResponse
    from coordinator.core.offsets import OffsetCommitResponse
    from coordinator.server.api import Reply

    response = ConsumerGroupHeartbeatResponse(
        member_id="A", member_epoch=1, heartbeat_interval_ms=5000
    )
    read = answer_code_reader()
    plain = read.plain  # type: ignore[attr-defined]
    error = Reply(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
    assert type(error) is not plain[0] and read(error) == ErrorCode.UNKNOWN_MEMBER_ID
    assert read(Reply(value=response)) == 0  # learned from here on
    assert plain == [Reply, ConsumerGroupHeartbeatResponse]
    for answer in (
        Reply(value=response),
        Reply(value=response, error_code=ErrorCode.NOT_COORDINATOR),
    ):
        assert type(answer) is plain[0] and type(answer.value) is plain[1]
        assert answer.error_code == read(answer)
    assert type(error.value) is not plain[1]  # read by the reader, as before
    entries = answer_code_reader()
    assert entries(Reply(value=OffsetCommitResponse(topics=()))) == 0
    assert entries.plain[0] is not Reply  # type: ignore[attr-defined]  # never learned: entries


async def test_a_forwarded_call_is_timed_from_when_its_front_end_received_it() -> None:
    """``--grpc-processes``: a front end stamps when it received a call (``time.monotonic()``,
    one clock for every process of the machine); the call's latency and its command's queue
    time start there, not when the coordinator process got it."""
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started_runtime(RuntimeObserver(metrics))
    try:
        server = Server(rt, metrics)
        context = ForwardedContext(
            (("client-id", "app"),), "ipv4:127.0.0.1:40000", received=time.monotonic() - 0.3
        )
        _parse, describe = server.table[DESCRIBE]
        response = await describe(cg.ConsumerGroupDescribeRequest(group_ids=["g"]), context)
        assert [g.error_code for g in response.groups] == [ErrorCode.GROUP_ID_NOT_FOUND]
        duration = "kip848_request_duration_seconds_bucket"
        labels = {"rpc": "ConsumerGroupDescribe", "protocol": "grpc", "route": "served"}
        labels["error"] = "GROUP_ID_NOT_FOUND"
        assert [sample(metrics, duration, le=le, **labels) for le in ("0.25", "0.5")] == [0, 1]
        shard = str(rt.shard_index("g"))
        queue = "kip848_event_queue_time_seconds_bucket"
        assert [sample(metrics, queue, shard=shard, le=le) for le in ("0.25", "0.5")] == [0, 1]
        # The same call without a stamp starts its clock here.
        context = ForwardedContext((("client-id", "app"),), "ipv4:127.0.0.1:40000")
        await describe(cg.ConsumerGroupDescribeRequest(group_ids=["g"]), context)
        assert [sample(metrics, duration, le=le, **labels) for le in ("0.25", "0.5")] == [1, 2]
        assert [sample(metrics, queue, shard=shard, le=le) for le in ("0.25", "0.5")] == [1, 2]
    finally:
        await rt.close()


async def test_a_timer_is_as_late_as_its_deadline_in_timer_time_says() -> None:
    """With the system clock, timers run on the monotonic clock while the core gets wall time:
    a session timeout's queue time is how late it fired (milliseconds), not the distance between
    the two clocks."""
    metrics = CoordinatorMetrics(process_collectors=False)
    rt = CoordinatorRuntime(
        config=parse_config(
            {
                "group.coordinator.shards": "1",
                "group.consumer.min.session.timeout.ms": "200",
                "group.consumer.session.timeout.ms": "200",
                "group.consumer.min.heartbeat.interval.ms": "100",
                "group.consumer.heartbeat.interval.ms": "100",
            }
        ),
        store=MemoryRecordStore(partitions=1),
        clock=SystemClock(),
        assignors=[UniformAssignor()],
        observer=RuntimeObserver(metrics),
    )
    await rt.start()
    try:
        service = CoordinatorService(rt)
        observe_rpcs(service, RequestObserver(metrics))
        joined = await service.consumer_group_heartbeat(
            ConsumerGroupHeartbeat(
                group_id="g",
                member_id="m",
                member_epoch=0,
                rebalance_timeout_ms=1000,
                subscribed_topic_names=("t",),
                topic_partitions=(),
            ),
            Caller(),
        )
        assert (joined.error_code, joined.value.member_epoch) == (ErrorCode.NONE, 1)
        await rt.flush()
        queue = "kip848_event_queue_time_seconds"
        count, total = sample(metrics, f"{queue}_count"), sample(metrics, f"{queue}_sum")
        assert count >= 1  # the join's commands
        for _ in range(100):
            await asyncio.sleep(0.05)
            if sample(metrics, "kip848_timeouts_total", kind="session"):
                break
        assert sample(metrics, "kip848_timeouts_total", kind="session") == 1
        assert sample(metrics, f"{queue}_count") == count + 1  # the timer
        assert 0 <= sample(metrics, f"{queue}_sum") - total < 5.0
    finally:
        await rt.close()


async def test_state_gauges_are_read_on_the_loop_from_the_scrape_thread() -> None:
    import asyncio

    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started_runtime(RuntimeObserver(metrics))
    try:
        server = Server(rt, metrics)
        await rebalance_story(server)
        loop = asyncio.get_running_loop()
        metrics.set_state_reader(loop_reader(loop, lambda: count_state(rt)))
        text = await asyncio.to_thread(_exposition, metrics)
        assert 'kip848_groups{group_type="consumer",state="Stable"} 1.0' in text
        assert 'kip848_members{group_type="consumer",member_type="consumer"} 2.0' in text
        assert "kip848_offsets 2.0" in text
        assert 'kip848_shards{state="active"} 2.0' in text
    finally:
        await rt.close()


def _exposition(metrics: CoordinatorMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


async def test_only_admin_rpcs_are_wrapped_when_everything_is_off() -> None:
    rt = await started_runtime(RuntimeObserver(None))
    try:
        service = CoordinatorService(rt)
        observe_rpcs(service, RequestObserver(None))
        wrapped = sorted(n for n, v in vars(service).items() if isinstance(v, types.MethodType))
        assert wrapped == [
            "alter_user_scram_credentials",
            "create_acls",
            "create_partitions",
            "create_topics",
            "delete_acls",
            "delete_groups",
            "delete_topics",
            "incremental_alter_configs",
            "offset_commit",
            "offset_delete",
        ]
    finally:
        await rt.close()


def test_group_size_labels_rpc_names_and_errors_of_answers() -> None:
    from coordinator.core.offsets import OffsetCommitResponse, PartitionResult, TopicResult
    from coordinator.server.api import Reply

    assert [group_size_label(n) for n in (1, 10, 11, 1000, 10_000, 10_001)] == [
        "1-10",
        "1-10",
        "11-100",
        "101-1000",
        "1001-10000",
        ">10000",
    ]
    assert [rpc_name(n) for n in ("consumer_group_heartbeat", "heartbeat", "join_group")] == [
        "ConsumerGroupHeartbeat",
        "Heartbeat",
        "JoinGroup",
    ]
    commit = OffsetCommitResponse(
        topics=(
            TopicResult(
                name="t",
                topic_id="x",
                partitions=(
                    PartitionResult(partition_index=0),
                    PartitionResult(partition_index=1, error_code=ErrorCode.STALE_MEMBER_EPOCH),
                ),
            ),
        )
    )
    assert first_error(Reply(value=commit)) == ErrorCode.STALE_MEMBER_EPOCH
    assert first_error(Reply(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)) == 15
    assert (
        first_error(
            Reply(value=[("g", ErrorCode.NONE, None), ("h", ErrorCode.NON_EMPTY_GROUP, "x")])
        )
        == 68
    )
    assert first_error(Reply(value=[])) == 0


# ---------------------------------------------------------------- tracing


async def test_spans_for_rpcs_commands_batches_and_assignor_runs(
    exporter: InMemorySpanExporter,
) -> None:
    rt = await started_runtime(RuntimeObserver(None))
    try:
        await rebalance_story(Server(rt, None))
        await rt.flush()
    finally:
        await rt.close()
    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    rpc = by_name["kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"]
    assert len(rpc) == 4
    first = rpc[0]
    assert format(first.context.trace_id, "032x") == TRACE_ID  # the caller's traceparent
    assert dict(first.attributes) == {
        "rpc.system": "grpc",
        "rpc.service": "kip848.v1.ConsumerGroupService",
        "rpc.method": "ConsumerGroupHeartbeat",
        "messaging.client.id": "app",
        "client.address": "/127.0.0.1",
        "messaging.consumer.group.name": "shop",
        "kip848.member.id": "A",
        "kip848.member.epoch": 1,
        "kip848.error_code": "NONE",
    }
    commands = by_name["shard.heartbeat"]
    assert len(commands) == 4
    assert commands[0].parent.span_id == first.context.span_id
    assert dict(commands[0].attributes) == {
        "kip848.shard": rt.shard_index("shop"),
        "messaging.consumer.group.name": "shop",
        "kip848.member.id": "A",
        "kip848.member.epoch": 1,
        "kip848.records": 6,  # member, partition metadata, group epoch, target (2), current
    }
    runs = by_name["assignor.uniform"]
    assert [dict(r.attributes) for r in runs] == [
        {
            "kip848.assignor": "uniform",
            "kip848.group.size": n,
            "kip848.topics": 1,
            "messaging.consumer.group.name": "shop",
        }
        for n in (1, 2)
    ]
    assert runs[0].parent.span_id == commands[0].context.span_id
    batches = by_name["store.append"]
    linked = {link.context.span_id for b in batches for link in b.links}
    assert commands[0].context.span_id in linked
    assert sum(b.attributes["kip848.batch.records"] for b in batches) > 0
    assert "shard.create_topics" in by_name and "shard.offset_commit" in by_name


def test_tracing_is_off_without_an_endpoint() -> None:
    assert tracing.configure(None) is False
    assert tracing.STATE.enabled is False
    assert tracing.normalize_endpoint("collector:4317") == "http://collector:4317"
    assert tracing.normalize_endpoint("https://c:4317") == "https://c:4317"


# ---------------------------------------------------------------- logs and audit


def test_json_logs_one_object_a_line_with_fields_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = configure_logging("info", "json", stream=stream)
    try:
        log = logging.getLogger("kip848.test")
        log_fields(log, logging.INFO, "Bumped.", group_id="g", group_epoch=3, cause="member_joined")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("It failed")
        audit(
            "delete_group",
            client_id="ops",
            client_address="/10.0.0.1",
            protocol="grpc",
            result="NON_EMPTY_GROUP",
            message="Group g is not empty.",
            group_id="g",
        )
        log.debug("not shown at info")
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 3
    first = lines[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first.pop("time"))
    assert first == {
        "level": "INFO",
        "logger": "kip848.test",
        "message": "Bumped. group_id=g group_epoch=3 cause=member_joined",
        "process": "coordinator",
        "group_id": "g",
        "group_epoch": 3,
        "cause": "member_joined",
    }
    assert lines[1]["level"] == "ERROR" and "ValueError: boom" in lines[1]["exc_info"]
    audit_line = lines[2]
    del audit_line["time"]
    assert audit_line == {
        "level": "INFO",
        "logger": "kip848.audit",
        "message": (
            "Audit: action=delete_group result=NON_EMPTY_GROUP client_id=ops "
            'client_address=/10.0.0.1 protocol=grpc group_id=g error_message="Group g is not empty."'
        ),
        "process": "coordinator",
        "audit": True,
        "action": "delete_group",
        "result": "NON_EMPTY_GROUP",
        "client_id": "ops",
        "client_address": "/10.0.0.1",
        "protocol": "grpc",
        "group_id": "g",
        "error_message": "Group g is not empty.",
    }


def test_plain_logs_keep_their_format() -> None:
    stream = io.StringIO()
    handler = configure_logging("info", "plain", stream=stream)
    try:
        logging.getLogger("kip848.test").info("Hello %s.", "there")
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO kip848\.test: Hello there\.\n",
        stream.getvalue(),
    )
    with pytest.raises(ValueError, match="--log-format must be one of plain, json"):
        configure_logging("info", "xml")


def test_plain_logs_escape_what_a_client_sends_so_that_every_record_is_one_line() -> None:
    """A group id, client id or config value with a newline (the Kafka listener fuzz sent
    them) cannot break a line of the plain format or forge one; a traceback still follows."""
    stream = io.StringIO()
    handler = configure_logging("info", "plain", stream=stream)
    forged = "g\n2026-01-01 00:00:00,000 ERROR kip848.server: forged\r\x1b[2J\t\u2028é"
    try:
        logging.getLogger("kip848.test").info("[GroupId %s] Joined.", forged)
        audit(
            "DeleteGroups",
            client_id="c\nid",
            client_address="/127.0.0.1",
            protocol="kafka",
            result="NONE",
            group_id=forged,
        )
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("kip848.test").exception("Failed for %s.", "a\nb")
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    escaped = "g\\n2026-01-01 00:00:00,000 ERROR kip848.server: forged\\r\\x1b[2J\\t\\u2028é"
    assert lines[0].endswith(f"INFO kip848.test: [GroupId {escaped}] Joined.")
    assert lines[1].endswith(
        f'client_id="c\\nid" client_address=/127.0.0.1 protocol=kafka group_id="{escaped}"'
    )
    assert "INFO kip848.audit: Audit: action=DeleteGroups result=NONE" in lines[1]
    assert lines[2].endswith("ERROR kip848.test: Failed for a\\nb.")
    assert lines[3] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"
    assert len(lines) == 7


def test_audit_lines_of_every_admin_action() -> None:
    from coordinator.core.offsets import (
        OffsetCommit,
        OffsetCommitPartition,
        OffsetCommitResponse,
        OffsetCommitTopic,
        OffsetDeleteResponse,
        PartitionResult,
    )
    from coordinator.core.offsets import TopicResult as OffsetTopic
    from coordinator.core.topics import NewTopic, TopicResult
    from coordinator.server.api import (
        AlterConfig,
        AlterResource,
        AlterResult,
        IncrementalAlterConfigs,
        Reply,
        TopicChanges,
    )

    E = ErrorCode
    code = answer_code_reader()
    assert audit_lines(
        "create_topics",
        TopicChanges(entries=[NewTopic(name="t", num_partitions=3)]),
        Reply(value=[TopicResult(name="t", num_partitions=3)]),
        code,
    ) == [("create_topic", {"topic": "t", "partitions": 3}, 0, None)]
    assert audit_lines(
        "delete_topics",
        TopicChanges(entries=["t", "u"]),
        Reply(
            value=[
                TopicResult(name="t"),
                TopicResult(
                    name="u", error_code=E.UNKNOWN_TOPIC_OR_PARTITION, error_message="No u."
                ),
            ]
        ),
        code,
    ) == [
        ("delete_topic", {"topic": "t"}, 0, None),
        ("delete_topic", {"topic": "u"}, 3, "No u."),
    ]
    assert audit_lines(
        "create_partitions",
        TopicChanges(entries=[("t", 6)]),
        Reply(error_code=E.COORDINATOR_LOAD_IN_PROGRESS, error_message="Loading."),
        code,
    ) == [("add_partitions", {"topic": "t", "partitions": 6}, 14, "Loading.")]
    # A validate-only topic change changes nothing: not audited, as a validate-only config one.
    for method, entries, result in (
        ("create_topics", [NewTopic(name="t", num_partitions=3)], TopicResult(name="t")),
        ("create_partitions", [("t", 6)], TopicResult(name="t")),
    ):
        asked = TopicChanges(entries=entries, validate_only=True)
        assert audit_lines(method, asked, Reply(value=[result]), code) == []
    resource = AlterResource(
        resource_type=16,
        resource_name="g",
        configs=(
            AlterConfig(name="consumer.session.timeout.ms", operation=0, value="50000"),
            AlterConfig(name="consumer.heartbeat.interval.ms", operation=1, value=None),
        ),
    )
    altered = Reply(value=[AlterResult(resource_type=16, resource_name="g")])
    assert audit_lines(
        "incremental_alter_configs", IncrementalAlterConfigs(resources=(resource,)), altered, code
    ) == [
        (
            "alter_group_config",
            {
                "group_id": "g",
                "configs": "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=<default>",
            },
            0,
            None,
        )
    ]
    validate = IncrementalAlterConfigs(resources=(resource,), validate_only=True)
    assert audit_lines("incremental_alter_configs", validate, altered, code) == []
    assert audit_lines(
        "delete_groups", ["g"], Reply(value=[("g", E.NON_EMPTY_GROUP, "Not empty.")]), code
    ) == [("delete_group", {"group_id": "g"}, 68, "Not empty.")]
    reset = OffsetCommit(
        group_id="g",
        topics=(
            OffsetCommitTopic(
                name="t", partitions=(OffsetCommitPartition(partition_index=1, committed_offset=7),)
            ),
        ),
    )
    committed = Reply(
        value=OffsetCommitResponse(
            topics=(
                OffsetTopic(
                    name="t", topic_id="x", partitions=(PartitionResult(partition_index=1),)
                ),
            )
        )
    )
    assert audit_lines("offset_commit", reset, committed, code) == [
        ("reset_offsets", {"group_id": "g", "offsets": "t:1=7"}, 0, None)
    ]
    member_commit = OffsetCommit(group_id="g", member_id="A", generation_id_or_member_epoch=3)
    assert audit_lines("offset_commit", member_commit, committed, code) == []
    deleted = Reply(
        value=OffsetDeleteResponse(
            topics=(
                OffsetTopic(
                    name="t",
                    topic_id="x",
                    partitions=(
                        PartitionResult(partition_index=0),
                        PartitionResult(partition_index=2, error_code=E.GROUP_SUBSCRIBED_TO_TOPIC),
                    ),
                ),
            )
        )
    )
    assert audit_lines("offset_delete", ("g", [("t", [0, 2])]), deleted, code) == [
        ("delete_offsets", {"group_id": "g", "partitions": "t:0/2"}, 86, None)
    ]
    assert audit_lines("consumer_group_heartbeat", None, Reply(), code) == []


# ---------------------------------------------------------------- dashboard


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    metrics = CoordinatorMetrics(process_collectors=False)
    metrics.set_state_reader(lambda: StateCounts())
    exported = metric_names(metrics.registry)
    panels = list(_panels(dashboard["panels"]))
    assert len(panels) >= 12
    for panel in panels:
        targets = panel.get("targets", [])
        assert targets, f"panel {panel['title']!r} has no query"
        for target in targets:
            names = set(re.findall(r"\bkip848_[a-z0-9_]+", target["expr"]))
            assert names, f"panel {panel['title']!r}: {target['expr']!r} names no metric"
            assert names <= exported, f"panel {panel['title']!r}: unknown {names - exported}"
    queried = {
        n
        for p in panels
        for t in p["targets"]
        for n in re.findall(r"\bkip848_[a-z0-9_]+", t["expr"])
    }
    families = {f.name for f in metrics.registry.collect() if f.name.startswith("kip848_")}
    # every family but the build info is on the dashboard
    assert {f for f in families if not any(q.startswith(f) for q in queried)} == {"kip848_build"}


def _panels(panels: list[dict]) -> Iterator[dict]:
    for p in panels:
        if p.get("type") == "row":
            yield from _panels(p.get("panels", []))
        else:
            yield p


async def test_a_failing_observation_never_fails_the_request(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from coordinator.observability import requests as observed_requests
    from coordinator.server.api import Caller

    def broken(*_args: Any) -> Any:
        raise RuntimeError("audit bug")

    metrics = CoordinatorMetrics(process_collectors=False)
    rt = await started_runtime(RuntimeObserver(metrics))
    try:
        service = CoordinatorService(rt)
        observe_rpcs(service, RequestObserver(metrics))
        monkeypatch.setattr(observed_requests, "audit_lines", broken)
        answer = await service.delete_groups(["nope"], Caller(client_id="ops"))
        assert answer.value == [("nope", ErrorCode.GROUP_ID_NOT_FOUND, "Group nope not found.")]
        assert "Observing DeleteGroups failed" in caplog.text
        assert sample(metrics, "kip848_request_duration_seconds_count", rpc="DeleteGroups") == 1
    finally:
        await rt.close()
