"""Transactions that end without the listener seeing their outcome (docs/kafka.md,
"Transactions"), against a fake upstream with a transaction coordinator of its own
(tests/e2e/fake_upstream.py, ``FakeCluster(transactions=True)``) — Tansu has no
DescribeTransactions, and its EndTxn cannot be held:

* the coordinator is killed (SIGKILL) while the producer's EndTxn is at the upstream, which
  completed the transaction but whose answer never came back: started again, the coordinator
  sends the EndTxn it had recorded (PREPARE_COMMIT / PREPARE_ABORT) once more, and the answer
  commits or drops the pending offsets — the outcome the producer asked for, not a guess;
* a transaction that timed out at the upstream (aborted, the producer's epoch bumped) or was
  committed by an EndTxn that did not pass through the listener is settled by the periodic
  DescribeTransactions check; one still ongoing stays pending (UNSTABLE_OFFSET_COMMIT) however
  often it is asked about.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import TOPIC, FakeCluster
from kafka_support import KafkaClient, KafkaServer, request
from kio.schema.errors import ErrorCode as E

CHECK_MS = 300


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    c = FakeCluster(transactions=True)
    c.add_node(1)
    try:
        yield c
    finally:
        c.end_released.set()
        c.stop()


def serve(cluster: FakeCluster, data: Path) -> KafkaServer:
    return KafkaServer(
        data,
        "--kafka-upstream",
        cluster.nodes[1].address,
        "--set",
        f"kafka.upstream.transaction.check.interval.ms={CHECK_MS}",
        clock="system",
    )


def begin(c: KafkaClient, transactional_id: str, group: str, offset: int) -> tuple[int, int]:
    """InitProducerId, AddOffsetsToTxn and TxnOffsetCommit of ``offset`` for partition 0 of the
    fake's topic: (producer id, epoch)."""
    init: Any = c.call(
        request(22, 4, transactional_id=transactional_id, transaction_timeout=60_000)
    )
    assert init.error_code == E.none, init
    pid, epoch = int(init.producer_id), int(init.producer_epoch)
    producer = {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch}
    added: Any = c.call(request(25, 3, group_id=group, **producer))
    assert added.error_code == E.none, added
    partition = {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
    committed: Any = c.call(
        request(
            28, 3, group_id=group, topics=[{"name": TOPIC, "partitions": [partition]}], **producer
        )
    )
    assert [(t.name, [p.error_code for p in t.partitions]) for t in committed.topics] == [
        (TOPIC, [E.none])
    ]
    return pid, epoch


def fetch(c: KafkaClient, group: str) -> tuple[int, E]:
    """OffsetFetch v8 with require_stable of partition 0: (offset, error)."""
    resp: Any = c.call(
        request(
            9,
            8,
            groups=[{"group_id": group, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
            require_stable=True,
        )
    )
    (p,) = resp.groups[0].topics[0].partitions
    return int(p.committed_offset), p.error_code


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_an_end_the_upstream_completed_is_completed_at_start(
    cluster: FakeCluster, tmp_path: Path, commit: bool
) -> None:
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-held", "g-held", 5)
        cluster.hold_end = True
        c.send(
            request(
                26,
                3,
                transactional_id="t-held",
                producer_id=pid,
                producer_epoch=epoch,
                committed=commit,
            )
        )
        assert cluster.end_held.wait(10), "EndTxn never reached the upstream"
        assert cluster.txns["t-held"].state == ("CompleteCommit" if commit else "CompleteAbort")
        server.proc.kill()  # the answer never comes back to the listener
        server.proc.wait(10)
        c.close()
    finally:
        server.stop()
    cluster.hold_end = False
    cluster.end_released.set()
    ends_before = len(cluster.requests(26))
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        deadline = time.monotonic() + 15  # completed at start, with no client's help
        while (answer := fetch(c, "g-held"))[1] == E.unstable_offset_commit:
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        assert answer == ((5, E.none) if commit else (-1, E.none))
        assert len(cluster.requests(26)) == ends_before + 1  # the recorded EndTxn, sent again
        c.close()
        outcome = "committed" if commit else "aborted"
        assert f"Transaction t-held (producer {pid} epoch {epoch}) completed: {outcome}" in (
            server.stderr_text()
        )
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_transactions_that_ended_upstream_are_settled_by_the_check(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        for name in ("expired", "direct", "open"):
            begin(c, f"t-{name}", f"g-{name}", 7)
            assert fetch(c, f"g-{name}") == (-1, E.unstable_offset_commit)
        cluster.expire("t-expired")  # timed out: aborted with the next epoch
        cluster.commit_directly("t-direct")  # an EndTxn that did not pass through us
        deadline = time.monotonic() + 15
        while fetch(c, "g-expired")[1] != E.none or fetch(c, "g-direct")[1] != E.none:
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        assert fetch(c, "g-expired") == (-1, E.none)
        assert fetch(c, "g-direct") == (7, E.none)
        asked = len(cluster.requests(65))
        while len(cluster.requests(65)) < asked + 3:  # asked about again and again
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        assert fetch(c, "g-open") == (-1, E.unstable_offset_commit)
        assert cluster.txns["t-open"].state == "Ongoing"
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()
