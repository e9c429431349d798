"""Transactions through the listener against a fake upstream with a transaction coordinator of
its own (tests/e2e/fake_upstream.py, ``FakeCluster(transactions=True)``; docs/kafka.md,
"Transactions") — what Tansu cannot show: it has no DescribeTransactions, its EndTxn cannot be
held, and its transaction coordinator knows no TxnOffsetCommit v6.

Transactions that end without the listener seeing their outcome:

* the coordinator is killed (SIGKILL) while the producer's EndTxn is at the upstream, which
  completed the transaction but whose answer never came back: started again, the coordinator
  sends the EndTxn it had recorded (PREPARE_COMMIT / PREPARE_ABORT) once more, and the answer
  commits or drops the pending offsets — the outcome the producer asked for, not a guess;
* a transaction that timed out at the upstream (aborted, the producer's epoch bumped) or was
  committed by an EndTxn that did not pass through the listener is settled by the periodic
  DescribeTransactions check; one still ongoing stays pending (UNSTABLE_OFFSET_COMMIT) however
  often it is asked about;
* one that timed out while the coordinator was down is settled by the check at start.

TxnOffsetCommit v6 (KIP-1319): topics by id, UNKNOWN_TOPIC_ID for an id no topic has, and
GROUP_ID_NOT_FOUND / STALE_MEMBER_EPOCH where v0-5 answer ILLEGAL_GENERATION. Transaction
version 2 (TxnOffsetCommit v5+, no AddOffsetsToTxn from the producer): the coordinator adds the
group's offsets to the transaction itself. Group deletion and reset-offsets (the real ``kip848
groups`` commands) with pending transactional offsets, as Kafka's coordinator. AddOffsetsToTxn
and TxnOffsetCommit authorized here, before anything reaches the upstream.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_upstream import TOPIC, TOPIC_ID, FakeCluster
from kafka_support import KafkaClient, KafkaServer, request
from kio.schema.errors import ErrorCode as E

from kip848.v1 import admin_pb2

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


def serve(cluster: FakeCluster, data: Path, check_ms: int = CHECK_MS) -> KafkaServer:
    return KafkaServer(
        data,
        "--kafka-upstream",
        cluster.nodes[1].address,
        "--set",
        f"kafka.upstream.transaction.check.interval.ms={check_ms}",
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
        line = f"Transaction t-held (producer {pid} epoch {epoch}) completed: {outcome}"
        while line not in server.stderr_text():  # logged once the outcome is durable: after
            assert time.monotonic() < deadline, server.stderr_text()  # a fetch may see it
            time.sleep(0.05)
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_an_abort_sent_after_a_commit_does_not_replace_it(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A commit forwarded, completed upstream, its answer held; an abort of the same
    transaction forwarded meanwhile is refused (INVALID_TXN_STATE: Kafka's transaction
    coordinator takes nothing but a commit after one); the coordinator killed. Started again
    in front of an upstream without DescribeTransactions (as Tansu), it sends the commit again
    — the end that may have acted, the one recorded — and the offsets are committed. (Before,
    the abort replaced the recorded commit: sent again at start and refused, the transaction
    stayed pending, UNSTABLE_OFFSET_COMMIT, for good.)"""
    cluster.describe_transactions = False
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-both", "g-both", 5)
        producer = {"transactional_id": "t-both", "producer_id": pid, "producer_epoch": epoch}
        cluster.hold_end = True
        c.send(request(26, 3, committed=True, **producer))
        assert cluster.end_held.wait(10), "EndTxn never reached the upstream"
        assert cluster.txns["t-both"].state == "CompleteCommit"
        cluster.hold_end = False
        other = server.client()
        refused: Any = other.call(request(26, 3, committed=False, **producer))
        assert refused.error_code == E.invalid_txn_state
        assert fetch(other, "g-both") == (-1, E.unstable_offset_commit)
        other.close()
        server.proc.kill()  # the commit's answer never comes back to the listener
        server.proc.wait(10)
        c.close()
    finally:
        server.stop()
    cluster.end_released.set()
    ends_before = len(cluster.requests(26))
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        deadline = time.monotonic() + 15
        while (answer := fetch(c, "g-both"))[1] == E.unstable_offset_commit:
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        assert answer == (5, E.none)
        assert len(cluster.requests(26)) == ends_before + 1  # the commit, sent again
        assert len(cluster.requests(65)) == 0
        c.close()
        line = f"Transaction t-both (producer {pid} epoch {epoch}) completed: committed"
        while line not in server.stderr_text():  # logged after the outcome is visible
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.05)
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_an_abort_answered_fenced_after_a_commit_leaves_the_commit_to_decide(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A commit forwarded and completed upstream, which bumped the producer's epoch as
    transaction version 2 does, its answer held; an abort of the same transaction sent
    meanwhile is answered INVALID_PRODUCER_EPOCH — which says nothing of the commit: the offsets
    stay pending (before, they were dropped as aborted), and the commit's answer, released,
    commits them."""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-fence", "g-fence", 5)
        producer = {"transactional_id": "t-fence", "producer_id": pid, "producer_epoch": epoch}
        cluster.hold_end = True
        c.send(request(26, 3, committed=True, **producer))
        assert cluster.end_held.wait(10), "EndTxn never reached the upstream"
        cluster.hold_end = False
        with cluster.lock:
            assert cluster.txns["t-fence"].state == "CompleteCommit"
            cluster.txns["t-fence"].producer_epoch += 1  # as transaction version 2 ends it
        other = server.client()
        fenced: Any = other.call(request(26, 3, committed=False, **producer))
        assert fenced.error_code == E.invalid_producer_epoch
        assert fetch(other, "g-fence") == (-1, E.unstable_offset_commit)
        cluster.end_released.set()
        assert c.receive().error_code == E.none
        assert fetch(other, "g-fence") == (5, E.none)
        other.close()
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_a_transaction_kept_by_init_producer_id_commits_with_the_new_epoch(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """KIP-939: InitProducerId v6 with KeepPreparedTxn keeps the ongoing transaction (the
    answer names it: OngoingTxnProducerId/Epoch) under the bumped epoch; its offsets stay
    pending, and the EndTxn of the new epoch commits them. (Before, the listener took the
    initialization for an abort: the offsets were dropped, and the commit that followed
    committed the output without them.)"""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-kept", "g-kept", 5)
        init: Any = c.call(
            request(
                22,
                6,
                transactional_id="t-kept",
                transaction_timeout=60_000,
                producer_id=pid,
                producer_epoch=epoch,
                enable2_pc=True,
                keep_prepared_txn=True,
            )
        )
        assert (init.error_code, init.producer_id, init.producer_epoch) == (E.none, pid, epoch + 1)
        assert (init.ongoing_txn_producer_id, init.ongoing_txn_producer_epoch) == (pid, epoch)
        assert fetch(c, "g-kept") == (-1, E.unstable_offset_commit)
        ended: Any = c.call(
            request(
                26,
                3,
                transactional_id="t-kept",
                producer_id=pid,
                producer_epoch=epoch + 1,
                committed=True,
            )
        )
        assert ended.error_code == E.none
        assert cluster.txns["t-kept"].state == "CompleteCommit"
        assert fetch(c, "g-kept") == (5, E.none)
        c.close()
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


def test_transactions_that_ended_while_the_coordinator_was_down_are_settled_at_start(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """Open transactions are asked about once at start, whatever the check interval: one that
    timed out upstream while the coordinator was down is settled (aborted) at once; one still
    ongoing stays pending."""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        begin(c, "t-down", "g-down", 7)
        begin(c, "t-alive", "g-alive", 8)
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()
    cluster.expire("t-down")
    asked = len(cluster.requests(65))
    server = serve(cluster, tmp_path / "data", check_ms=600_000)
    try:
        c = server.client()
        deadline = time.monotonic() + 15
        while fetch(c, "g-down")[1] != E.none or len(cluster.requests(65)) < asked + 2:
            assert time.monotonic() < deadline, server.stderr_text()
            time.sleep(0.1)
        assert fetch(c, "g-down") == (-1, E.none)
        assert fetch(c, "g-alive") == (-1, E.unstable_offset_commit)
        assert len(cluster.requests(65)) == asked + 2  # each open transaction asked about once
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def txn_commit(
    c: KafkaClient,
    version: int,
    producer: dict[str, Any],
    group: str,
    topics: list[Any],
    generation: int = -1,
    member: str = "",
) -> list[tuple[Any, list[E]]]:
    """TxnOffsetCommit of offset 9 for partition 0 of each topic (v6: ids; before: names)."""
    key = "topic_id" if version >= 6 else "name"
    partition = {"partition_index": 0, "committed_offset": 9, "committed_metadata": ""}
    resp: Any = c.call(
        request(
            28,
            version,
            group_id=group,
            generation_id=generation,
            member_id=member,
            topics=[{key: t, "partitions": [partition]} for t in topics],
            **producer,
        )
    )
    return [(getattr(t, key), [p.error_code for p in t.partitions]) for t in resp.topics]


def test_txn_offset_commit_v6_names_topics_by_id(cluster: FakeCluster, tmp_path: Path) -> None:
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        versions: Any = c.call(
            request(18, 3, client_software_name="t", client_software_version="1")
        )
        assert [(k.min_version, k.max_version) for k in versions.api_keys if k.api_key == 28] == [
            (0, 6)
        ]
        pid, epoch = begin(c, "t-v6", "g-v6", 5)
        producer = {"transactional_id": "t-v6", "producer_id": pid, "producer_epoch": epoch}
        nobody, zero = uuid.uuid4(), uuid.UUID(int=0)
        assert txn_commit(c, 6, producer, "g-v6", [TOPIC_ID, nobody, zero]) == [
            (TOPIC_ID, [E.none]),
            (nobody, [E.unknown_topic_id]),
            (None, [E.unknown_topic_id]),  # the zero id: none on the wire either
        ]
        assert fetch(c, "g-v6") == (-1, E.unstable_offset_commit)
        # A group that does not exist, named with a generation: KIP-1319's code from v6.
        assert txn_commit(c, 6, producer, "g-none", [TOPIC_ID], 1, "m") == [
            (TOPIC_ID, [E.group_id_not_found])
        ]
        assert txn_commit(c, 5, producer, "g-none", [TOPIC]) == [(TOPIC, [E.none])]
        assert txn_commit(c, 5, producer, "g-none2", [TOPIC], 1, "m") == [
            (TOPIC, [E.illegal_generation])
        ]
        # A member of the consumer protocol ahead of its epoch: STALE_MEMBER_EPOCH from v6.
        member = "Zk8Sdl+/AAAAAAAAAAAAAC"
        join: Any = c.call(
            request(
                68,
                1,
                group_id="g-848",
                member_id=member,
                member_epoch=0,
                rebalance_timeout=300000,
                subscribed_topic_names=[TOPIC],
                subscribed_topic_regex="",
                topic_partitions=[],
            )
        )
        assert (join.error_code, join.member_epoch) == (E.none, 1)
        assert txn_commit(c, 6, producer, "g-848", [TOPIC_ID], 2, member) == [
            (TOPIC_ID, [E.stale_member_epoch])
        ]
        assert txn_commit(c, 4, producer, "g-848", [TOPIC], 2, member) == [
            (TOPIC, [E.illegal_generation])
        ]
        assert txn_commit(c, 6, producer, "g-848", [TOPIC_ID], 1, member) == [(TOPIC_ID, [E.none])]
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def end_txn(c: KafkaClient, producer: dict[str, Any], commit: bool = True) -> E:
    answer: Any = c.call(request(26, 3, committed=commit, **producer))
    return answer.error_code


def test_transaction_version_2_adds_the_offsets_on_the_producers_behalf(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A producer of transaction version 2 (TxnOffsetCommit v5+) sends no AddOffsetsToTxn: the
    coordinator adds the group's offsets to its transaction at the transaction coordinator
    itself, as Kafka's does, so the transaction's end has something to complete. A refusal by
    the transaction coordinator refuses the commit, nothing pending."""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        init: Any = c.call(request(22, 4, transactional_id="t-tv2", transaction_timeout=60_000))
        assert init.error_code == E.none, init
        producer = {
            "transactional_id": "t-tv2",
            "producer_id": int(init.producer_id),
            "producer_epoch": int(init.producer_epoch),
        }
        adds = len(cluster.requests(25))
        unknown = {**producer, "producer_id": int(init.producer_id) + 7}
        assert txn_commit(c, 5, unknown, "g-tv2", [TOPIC]) == [
            (TOPIC, [E.invalid_producer_id_mapping])
        ]
        assert fetch(c, "g-tv2") == (-1, E.none)  # nothing pending
        assert txn_commit(c, 5, producer, "g-tv2", [TOPIC]) == [(TOPIC, [E.none])]
        assert len(cluster.requests(25)) == adds + 2  # each v5 commit added it first
        assert (cluster.txns["t-tv2"].state, cluster.txns["t-tv2"].groups) == (
            "Ongoing",
            {"g-tv2"},
        )
        assert fetch(c, "g-tv2") == (-1, E.unstable_offset_commit)
        assert end_txn(c, producer) == E.none  # the upstream had the group's offsets to complete
        assert fetch(c, "g-tv2") == (9, E.none)
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_a_zombie_producers_commit_after_a_new_init_producer_id_is_refused(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """A new InitProducerId of the transactional id (epoch bumped) aborts the ongoing
    transaction; the old producer (a zombie) committing offsets at its old epoch afterwards is
    refused INVALID_PRODUCER_EPOCH at once, as Kafka's group coordinator refuses it, and
    nothing becomes pending — also after a restart. (Before, the commit was accepted and its
    offsets stayed pending until the new producer's next transaction aborted them.) The new
    producer's transaction goes on as usual, and once it is over the zombie is still refused."""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-zombie", "g-zombie", 5)
        init: Any = c.call(request(22, 4, transactional_id="t-zombie", transaction_timeout=60_000))
        assert (init.error_code, init.producer_id, init.producer_epoch) == (E.none, pid, epoch + 1)
        assert fetch(c, "g-zombie") == (-1, E.none)  # its transaction aborted
        zombie = {"transactional_id": "t-zombie", "producer_id": pid, "producer_epoch": epoch}
        for version in (3, 4):
            assert txn_commit(c, version, zombie, "g-zombie", [TOPIC]) == [
                (TOPIC, [E.invalid_producer_epoch])
            ]
        # v5 (transaction version 2): the transaction coordinator refuses the offsets added
        # on the zombie's behalf (PRODUCER_FENCED), answered INVALID_PRODUCER_EPOCH as Kafka.
        adds = len(cluster.requests(25))
        assert txn_commit(c, 5, zombie, "g-zombie", [TOPIC]) == [
            (TOPIC, [E.invalid_producer_epoch])
        ]
        assert len(cluster.requests(25)) == adds + 1
        assert fetch(c, "g-zombie") == (-1, E.none)  # nothing pending
        c.close()
        assert server.stop() == 0, server.stderr_text()
        server = serve(cluster, tmp_path / "data")
        c = server.client()
        assert txn_commit(c, 3, zombie, "g-zombie", [TOPIC]) == [
            (TOPIC, [E.invalid_producer_epoch])
        ]
        assert fetch(c, "g-zombie") == (-1, E.none)
        producer = {**zombie, "producer_epoch": epoch + 1}
        added: Any = c.call(request(25, 3, group_id="g-zombie", **producer))
        assert added.error_code == E.none, added
        assert txn_commit(c, 3, producer, "g-zombie", [TOPIC]) == [(TOPIC, [E.none])]
        assert txn_commit(c, 3, zombie, "g-zombie", [TOPIC]) == [
            (TOPIC, [E.invalid_producer_epoch])
        ]
        assert end_txn(c, producer) == E.none
        assert fetch(c, "g-zombie") == (9, E.none)
        # The new producer's transaction is over: the zombie stays refused (Kafka keeps the
        # producer id's last epoch for producer.id.expiration.ms; before, it was accepted and
        # pending again), also after a restart.
        for restart in (False, True):
            if restart:
                c.close()
                assert server.stop() == 0, server.stderr_text()
                server = serve(cluster, tmp_path / "data")
                c = server.client()
            for version in (3, 4):
                assert txn_commit(c, version, zombie, "g-zombie", [TOPIC]) == [
                    (TOPIC, [E.invalid_producer_epoch])
                ]
            assert fetch(c, "g-zombie") == (9, E.none)  # nothing pending
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def kip848(server: KafkaServer, *args: str) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *args, "--bootstrap-server", server.grpc_address],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def test_deletion_and_reset_offsets_with_pending_transactional_offsets(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """As Kafka's coordinator: an inactive group whose only offsets are pending in an open
    transaction is deleted with them (the transaction's commit then commits nothing); a
    reset-offsets during an open transaction is accepted, the pending offsets stay unstable
    until the end, and the reset, written after them, is what stays when the transaction
    commits (Kafka keeps the most recent offset)."""
    server = serve(cluster, tmp_path / "data")
    try:
        c = server.client()
        pid, epoch = begin(c, "t-del", "g-del", 7)
        assert kip848(server, "groups", "delete", "--group", "g-del")[0] == 0
        code, out, err = kip848(server, "groups", "list")
        assert "g-del" not in out, (code, out, err)
        producer = {"transactional_id": "t-del", "producer_id": pid, "producer_epoch": epoch}
        assert end_txn(c, producer) == E.none
        assert fetch(c, "g-del") == (-1, E.none)

        pid, epoch = begin(c, "t-reset", "g-reset", 7)
        code, out, err = kip848(
            server,
            "groups",
            "reset-offsets",
            "--group",
            "g-reset",
            "--topic",
            f"{TOPIC}:0",
            "--to-latest",
            "--execute",
            "--output",
            "json",
        )
        assert code == 0, (out, err)
        latest = 1000  # the fake's log end of partition 0 on node 1
        plan = json.loads(out)
        assert (
            plan["executed"],
            [(x["partition"], x["new_offset"]) for x in plan["partitions"]],
        ) == (
            True,
            [(0, latest)],
        )
        assert fetch(c, "g-reset") == (-1, E.unstable_offset_commit)
        producer = {"transactional_id": "t-reset", "producer_id": pid, "producer_epoch": epoch}
        assert end_txn(c, producer) == E.none
        assert fetch(c, "g-reset") == (latest, E.none)
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()


def allow_alice(server: KafkaServer, resource_type: int, name: str, operation: int) -> None:
    """An ACL for User:alice only: the resource is no longer open to anyone else."""
    made = server.admin.CreateAcls(
        admin_pb2.CreateAclsRequest(
            creations=[
                admin_pb2.AclBinding(
                    resource_type=resource_type,
                    resource_name=name,
                    pattern_type=3,  # LITERAL
                    principal="User:alice",
                    host="*",
                    operation=operation,
                    permission_type=3,  # ALLOW
                )
            ]
        ),
        timeout=10,
    )
    assert [r.error_code for r in made.results] == [0]


def test_transactional_offsets_are_authorized_as_kafka(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    """AddOffsetsToTxn and TxnOffsetCommit are checked here as Kafka checks them — the
    transactional id's WRITE, the group's READ (the group's ACLs are this coordinator's), the
    topics' READ — before anything reaches the upstream: a refused AddOffsetsToTxn, or a
    refused TxnOffsetCommit v5 (transaction version 2), adds nothing to the transaction."""
    group, topic, transactional_id = 3, 2, 5
    read, write = 3, 4
    server = serve(cluster, tmp_path / "data")
    try:
        allow_alice(server, group, "g-secret", read)
        allow_alice(server, transactional_id, "t-secret", write)
        c = server.client()  # User:ANONYMOUS
        init: Any = c.call(request(22, 4, transactional_id="t-ok", transaction_timeout=60_000))
        producer = {
            "transactional_id": "t-ok",
            "producer_id": int(init.producer_id),
            "producer_epoch": int(init.producer_epoch),
        }
        secret = {**producer, "transactional_id": "t-secret"}
        adds = len(cluster.requests(25))
        refused: Any = c.call(request(25, 3, group_id="g-secret", **producer))
        assert refused.error_code == E.group_authorization_failed
        refused = c.call(request(25, 3, group_id="g-open", **secret))
        assert refused.error_code == E.transactional_id_authorization_failed
        for version in (3, 5):
            assert txn_commit(c, version, producer, "g-secret", [TOPIC]) == [
                (TOPIC, [E.group_authorization_failed])
            ]
            assert txn_commit(c, version, secret, "g-open", [TOPIC]) == [
                (TOPIC, [E.transactional_id_authorization_failed])
            ]
        assert len(cluster.requests(25)) == adds  # nothing joined a transaction upstream
        assert fetch(c, "g-open") == (-1, E.none)  # nothing pending
        assert c.call(request(25, 3, group_id="g-open", **producer)).error_code == E.none
        allow_alice(server, topic, TOPIC, read)
        assert txn_commit(c, 3, producer, "g-open", [TOPIC]) == [
            (TOPIC, [E.topic_authorization_failed])
        ]
        c.close()
    finally:
        assert server.stop() == 0, server.stderr_text()
