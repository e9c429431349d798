"""Operator tools with a real log: ``AdminService.ListOffsets`` (the upstream broker's log
offsets, each partition asked of its leader), ``kip848 groups describe --offsets`` with
LOG-END-OFFSET and LAG, and ``kip848 groups reset-offsets --to-earliest / --to-latest /
--to-datetime / --by-duration`` (``--to-offset``/``--shift-by`` kept within the log), as
``kafka-consumer-groups.sh`` — in front of Tansu, in front of a fake two-broker cluster, and in
coordinator-only mode (no logs: UNSUPPORTED_VERSION, and the commands say so).

Tansu answers ListOffsets LATEST with the base offset of the last record batch + 1, which is
the log end only when that batch holds one record: these tests write each partition's last
record on its own.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import PARTITIONS, TOPIC, FakeCluster
from kafka_clients import STACK_SETTINGS, Fleet
from kafka_support import KafkaServer, KafkaStack, create_topics, request

from kip848.v1 import admin_pb2

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStack]:
    s = KafkaStack(tmp_path_factory.mktemp("kafka-log-offsets"), *STACK_SETTINGS)
    try:
        yield s
    finally:
        assert s.stop() == 0, s.server.stderr_text()


def kip848(grpc_address: str, *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args, "--bootstrap-server", grpc_address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def lines(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


def write(address: str, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records to partition ``p``; the last one of each partition on its own (so
    that Tansu's log end is right; see the module doc)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    for last in (False, True):
        for p, n in counts.items():
            for i in range(n - 1) if not last else ([n - 1] if n else []):
                producer.produce(topic, f"{topic}-{p}-{i}".encode(), partition=p)
        assert producer.flush(20) == 0


def new_topic(stack: KafkaStack, name: str, partitions: int) -> None:
    c = stack.server.client()
    create_topics(c, **{name: partitions})
    c.close()


def list_offsets(
    server: KafkaServer, queries: list[tuple[str, int, int]], isolation_level: int = 0
) -> Any:
    req = admin_pb2.ListOffsetsRequest(isolation_level=isolation_level)
    for topic, partition, timestamp in queries:
        if not req.topics or req.topics[-1].name != topic:
            req.topics.add(name=topic)
        req.topics[-1].partitions.add(partition_index=partition, timestamp=timestamp)
    return server.admin.ListOffsets(req, timeout=20)


def offsets(resp: Any) -> list[tuple[str, int, int, int]]:
    """(topic, partition, error code, offset) per answer."""
    assert resp.error_code == 0, resp
    return [
        (t.name, p.partition_index, p.error_code, p.offset)
        for t in resp.topics
        for p in t.partitions
    ]


# ---------------------------------------------------------------- the RPC


def test_list_offsets_answers_from_the_brokers_log(stack: KafkaStack) -> None:
    server = stack.server
    new_topic(stack, "lo-rpc", 3)
    write(server.kafka_address, "lo-rpc", {0: 6, 1: 1})
    both = [("lo-rpc", p, -1) for p in range(3)]
    assert offsets(list_offsets(server, both)) == [
        ("lo-rpc", 0, 0, 6),
        ("lo-rpc", 1, 0, 1),
        ("lo-rpc", 2, 0, 0),
    ]
    assert offsets(list_offsets(server, [("lo-rpc", p, -2) for p in range(3)])) == [
        ("lo-rpc", p, 0, 0) for p in range(3)
    ]
    # READ_COMMITTED: no transactions, so the last stable offset is the log end.
    assert offsets(list_offsets(server, both, isolation_level=1))[0] == ("lo-rpc", 0, 0, 6)
    # A time: the first record at or after it; after the last record: none (-1).
    past, future = 1_000_000_000_000, int(time.time() * 1000) + 3_600_000
    assert offsets(list_offsets(server, [("lo-rpc", 0, past), ("lo-rpc", 1, future)])) == [
        ("lo-rpc", 0, 0, 0),
        ("lo-rpc", 1, 0, -1),
    ]
    # Kafka's checks, per partition; the broker's own answers for what it does not have.
    resp = list_offsets(
        server,
        [("lo-rpc", 0, -1), ("lo-rpc", 0, -2), ("lo-rpc", 1, -7), ("lo-rpc", 9, -1)]
        + [("lo-missing", 0, -1)],
    )
    assert [
        (t.name, p.partition_index, p.error_code, p.error_message, p.offset)
        for t in resp.topics
        for p in t.partitions
    ] == [
        ("lo-rpc", 0, 42, "Duplicate partition.", -1),
        ("lo-rpc", 0, 42, "Duplicate partition.", -1),
        ("lo-rpc", 1, 42, "Invalid timestamp -7.", -1),
        ("lo-rpc", 9, 3, "This server does not host this topic-partition.", -1),
        ("lo-missing", 0, 3, "The upstream broker answered UNKNOWN_TOPIC_OR_PARTITION.", -1),
    ]
    bad = list_offsets(server, both, isolation_level=2)
    assert (bad.error_code, bad.error_message, list(bad.topics)) == (
        42,
        "Unknown isolation level 2.",
        [],
    )


def test_list_offsets_reaches_each_partitions_leader(tmp_path: Path) -> None:
    """A fake two-broker cluster: partition p is led by node 1 or 2, and each node answers
    ``node_id * 1000 + p``; node 1 advertises an address nobody can reach (the configured one
    is used)."""
    cluster = FakeCluster()
    cluster.add_node(1, advertised_host="node-1.invalid")
    cluster.add_node(2)
    server = KafkaServer(
        tmp_path / "data", "--kafka-upstream", cluster.nodes[1].address, clock="system"
    )
    try:
        resp = list_offsets(server, [(TOPIC, p, -1) for p in range(PARTITIONS)])
        assert offsets(resp) == [
            (TOPIC, p, 0, cluster.leader(p) * 1000 + p) for p in range(PARTITIONS)
        ]
        assert sorted(set(cluster.requests(2))) == [1, 2]
    finally:
        assert server.stop() == 0, server.stderr_text()
        cluster.stop()


def test_without_an_upstream_there_are_no_logs(tmp_path: Path) -> None:
    server = KafkaServer(tmp_path / "data")
    try:
        server.create_topic("bare", 2)
        resp = list_offsets(server, [("bare", 0, -1)])
        assert (resp.error_code, resp.error_message, list(resp.topics)) == (
            35,
            "This coordinator runs without an upstream broker (--kafka-upstream): it keeps no "
            "logs, so it has no log offsets.",
            [],
        )
        assert kip848(
            server.grpc_address, "groups", "reset-offsets", "g", "--topic", "bare", "--to-latest"
        ) == (
            1,
            "",
            "kip848: reset-offsets --to-latest reads the partitions' logs, and this coordinator "
            "has none: it runs without an upstream broker (--kafka-upstream).\n"
            "  hint: set the offsets with --to-offset N, --shift-by N or --from-file\n",
        )
        # --to-offset is taken as it is (nothing to keep it within).
        code, out, err = kip848(
            server.grpc_address,
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "bare:0",
            "--to-offset",
            "42",
            "--execute",
        )
        assert (code, err) == (0, "") and out.splitlines()[1].split() == [
            "g",
            "bare",
            "0",
            "-",
            "42",
            "reset",
        ]
    finally:
        assert server.stop() == 0, server.stderr_text()


# ---------------------------------------------------------------- describe --offsets


def test_describe_offsets_shows_log_end_offset_and_lag(stack: KafkaStack, tmp_path: Path) -> None:
    server = stack.server
    new_topic(stack, "lo-lag", 3)
    write(server.kafka_address, "lo-lag", {0: 10, 1: 4})
    for spec, offset in (("lo-lag:0", "3"), ("lo-lag:1", "4")):
        code, _out, err = kip848(
            server.grpc_address,
            "groups",
            "reset-offsets",
            "g-lag",
            "--topic",
            spec,
            "--to-offset",
            offset,
            "--execute",
        )
        assert (code, err) == (0, "")
    assert kip848(server.grpc_address, "groups", "describe", "g-lag", "--offsets") == (
        0,
        lines(
            "GROUP g-lag",
            "",
            "TOPIC   PARTITION  COMMITTED-OFFSET  LOG-END-OFFSET  LAG  LEADER-EPOCH  METADATA  MEMBER  HOST  CLIENT",
            "lo-lag  0          3                 10              7    -             -         -       -     -",
            "lo-lag  1          4                 4               0    -             -         -       -     -",
        ),
        "",
    )
    code, out, err = kip848(
        server.grpc_address, "groups", "describe", "g-lag", "--offsets", "--output", "json"
    )
    assert (code, err) == (0, "")
    [group] = json.loads(out)
    assert [
        (r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"])
        for r in group["offsets"]
    ] == [
        (0, 3, 10, 7),
        (1, 4, 4, 0),
    ]

    # A live KIP-848 consumer that read everything: lag 0 on the partitions it owns, and the
    # partition nobody committed (no records) shows its log end without a lag.
    fleet = Fleet(server.kafka_address, tmp_path)
    try:
        c = fleet.start("lag-c1", "librdkafka-consumer", "g-lag-live", topics=["lo-lag"])
        fleet.wait_for(lambda: len(c.owned()) == 3, 30, "c1 to own lo-lag")
        fleet.wait_for(
            lambda: (
                {(t, p): o for e in c.events("commit") for t, p, o in e["offsets"]}
                == {("lo-lag", 0): 10, ("lo-lag", 1): 4}
            ),
            30,
            "everything to be committed",
        )
        code, out, err = kip848(
            server.grpc_address, "groups", "describe", "g-lag-live", "--offsets", "--output", "json"
        )
        assert (code, err) == (0, "")
        [group] = json.loads(out)
        assert [
            (r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"], r["client_id"])
            for r in group["offsets"]
        ] == [(0, 10, 10, 0, "lag-c1"), (1, 4, 4, 0, "lag-c1"), (2, None, 0, None, "lag-c1")]
        fleet.stop_all()
    finally:
        fleet.close()


def test_a_log_end_below_the_committed_offset_shows_no_lag(stack: KafkaStack) -> None:
    """An upstream whose log end is below the group's committed offset (wrong watermarks, or
    a truncated log): LAG "-" (null in JSON) and a warning naming the partition, not a
    negative lag; the partition that is right keeps its lag."""
    server = stack.server
    new_topic(stack, "lo-behind", 2)
    write(server.kafka_address, "lo-behind", {0: 3, 1: 3})
    c = server.client()
    resp = c.call(
        request(
            8,
            9,
            group_id="g-behind",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                {
                    "name": "lo-behind",
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "committed_metadata": None}
                        for p, o in ((0, 50), (1, 1))
                    ],
                }
            ],
        )
    )
    c.close()
    assert [p.error_code for p in resp.topics[0].partitions] == [0, 0]
    warning = (
        "kip848: warning: lo-behind-0: the log end offset 3 is below the committed offset 50 "
        "(the upstream's watermarks are wrong, or its log was truncated): no LAG shown\n"
    )
    assert kip848(server.grpc_address, "groups", "describe", "g-behind", "--offsets") == (
        0,
        lines(
            "GROUP g-behind",
            "",
            "TOPIC      PARTITION  COMMITTED-OFFSET  LOG-END-OFFSET  LAG  LEADER-EPOCH  METADATA  MEMBER  HOST  CLIENT",
            "lo-behind  0          50                3               -    -             -         -       -     -",
            "lo-behind  1          1                 3               2    -             -         -       -     -",
        ),
        warning,
    )
    code, out, err = kip848(
        server.grpc_address, "groups", "describe", "g-behind", "--offsets", "--output", "json"
    )
    assert (code, err) == (0, warning)
    [group] = json.loads(out)
    assert [
        (r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"])
        for r in group["offsets"]
    ] == [(0, 50, 3, None), (1, 1, 3, 2)]


# ---------------------------------------------------------------- reset-offsets


def _plan(out: str) -> list[tuple[str, ...]]:
    """The rows of a reset-offsets table: (topic, partition, current, new[, status])."""
    return [tuple(row.split()[1:]) for row in out.splitlines()[1:] if row.startswith("g-")]


def test_reset_offsets_to_the_logs_ends_and_to_a_time(stack: KafkaStack) -> None:
    server, grpc = stack.server, stack.server.grpc_address
    new_topic(stack, "lo-reset", 2)
    write(server.kafka_address, "lo-reset", {0: 3, 1: 1})
    time.sleep(0.3)
    mark = int(time.time() * 1000)
    time.sleep(0.3)
    write(server.kafka_address, "lo-reset", {0: 2})  # offsets 3 and 4 of partition 0
    code, _out, err = kip848(
        grpc,
        "groups",
        "reset-offsets",
        "g-reset",
        "--topic",
        "lo-reset",
        "--to-offset",
        "1",
        "--execute",
    )
    assert (code, err) == (0, "")

    def reset(*how: str) -> tuple[int, list[tuple[str, ...]], str]:
        code, out, err = kip848(
            grpc, "groups", "reset-offsets", "g-reset", "--topic", "lo-reset", *how
        )
        return code, _plan(out), err

    # Dry run: the plan, nothing changed.
    code, out, err = kip848(
        grpc, "groups", "reset-offsets", "g-reset", "--topic", "lo-reset", "--to-earliest"
    )
    assert (code, err) == (0, "")
    assert out == lines(
        "GROUP    TOPIC     PARTITION  CURRENT-OFFSET  NEW-OFFSET",
        "g-reset  lo-reset  0          1               0",
        "g-reset  lo-reset  1          1               0",
        "Dry run (the default; add --execute to apply): nothing was changed.",
    )
    assert reset("--to-latest", "--execute") == (
        0,
        [("lo-reset", "0", "1", "5", "reset"), ("lo-reset", "1", "1", "1", "reset")],
        "",
    )
    at = dt.datetime.fromtimestamp(mark / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    # The first record at or after the time; none after it in partition 1: its log end.
    assert reset("--to-datetime", at.replace("+00:00", "Z"), "--execute") == (
        0,
        [("lo-reset", "0", "5", "3", "reset"), ("lo-reset", "1", "1", "1", "reset")],
        "",
    )
    assert reset("--by-duration", "P1D", "--execute") == (  # a day ago: every record is newer
        0,
        [("lo-reset", "0", "3", "0", "reset"), ("lo-reset", "1", "1", "0", "reset")],
        "",
    )
    assert reset("--by-duration=-PT1H", "--dry-run") == (  # an hour ahead: no record yet
        0,
        [("lo-reset", "0", "0", "5"), ("lo-reset", "1", "0", "1")],
        "",
    )
    # --to-offset and --shift-by stay within each log, with a note (as Kafka).
    assert reset("--to-offset", "4") == (
        0,
        [("lo-reset", "0", "0", "4"), ("lo-reset", "1", "0", "1")],
        "kip848: new offset (4) is higher than the latest offset of lo-reset-1; it will be set "
        "to 1.\n",
    )
    assert reset("--shift-by", "-3") == (
        0,
        [("lo-reset", "0", "0", "0"), ("lo-reset", "1", "0", "0")],
        "",
    )
    # A partition the broker does not have: nothing is reset.
    code, out, err = kip848(
        grpc,
        "groups",
        "reset-offsets",
        "g-reset",
        "--topic",
        "lo-reset:0,7",
        "--to-latest",
        "--execute",
    )
    assert (code, out, err) == (
        1,
        "",
        "kip848: log offsets of lo-reset-7: UNKNOWN_TOPIC_OR_PARTITION: This server does not "
        "host this topic-partition.\n"
        "  hint: see the registered topics and their partition counts with `kip848 topics list`\n",
    )


def test_reset_offset_flags_are_checked() -> None:
    def usage(*args: str) -> tuple[int, str]:
        code, out, err = kip848(
            "127.0.0.1:1", "groups", "reset-offsets", "g", "--topic", "t", *args
        )
        assert out == ""
        return code, err.splitlines()[-1]

    assert usage("--to-datetime", "2026-11-23") == (
        2,
        "kip848 groups reset-offsets: error: argument --to-datetime: expected "
        "YYYY-MM-DDTHH:mm:SS.sss (e.g. 2026-11-23T09:30:00.000), got '2026-11-23'",
    )
    assert usage("--by-duration", "1h") == (
        2,
        "kip848 groups reset-offsets: error: argument --by-duration: expected an ISO-8601 "
        "duration PnDTnHnMnS (e.g. PT30M, P1DT2H), got '1h'",
    )
    assert usage("--to-earliest", "--to-latest") == (
        2,
        "kip848 groups reset-offsets: error: argument --to-latest: not allowed with argument "
        "--to-earliest",
    )
