"""Exactly-once consume-transform-produce through the Kafka listener in front of Tansu
(docs/kafka.md, "Transactions"): the transaction coordinator is Tansu's, the group's offsets are
ours.

* An application (tests/e2e/eos_app.py: confluent-kafka's transactional producer, a
  read_committed consumer of the KIP-848 protocol or the classic one) copies every input record
  to the output topic in transactions that also commit its input offsets, while the coordinator
  and the application are killed with SIGKILL at random points and started again: every input
  record's output is committed exactly once, and the committed offsets are never ahead of the
  committed output.
* The committed output is read from the log itself — every batch, its producer and the commit
  or abort markers Tansu writes — because Tansu's own read_committed Fetch does not hide the
  records of aborted transactions (its Fetch has no aborted-transactions list): a real
  read_committed consumer would see them there. The markers are right; only that filtering is
  missing (checked below).
* An aborted transaction leaves the offsets where they were; offsets pending in a transaction are
  invisible to OffsetFetch and UNSTABLE_OFFSET_COMMIT to one that requires stable offsets.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_clients import STACK_SETTINGS
from kafka_support import KafkaClient, KafkaServer, Tansu, create_topics, request
from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode as E

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parent / "eos_app.py"
TRANSACTIONAL = 0x10
CONTROL = 0x20


class Stack:
    """Tansu with the coordinator in front; the coordinator can be killed (SIGKILL) and started
    again on the same data directory and the same Kafka port (clients keep their address)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tansu = Tansu(root)
        self.server = self._start()
        self.port = int(self.server.kafka_address.rpartition(":")[2])

    def _start(self, *extra: str) -> KafkaServer:
        return KafkaServer(
            self.root / "data",
            "--kafka-upstream",
            self.tansu.address,
            *STACK_SETTINGS,
            # A killed application's member leaves its partitions after 6 s, not 45.
            "--set",
            "group.consumer.min.session.timeout.ms=6000",
            "--set",
            "group.consumer.session.timeout.ms=6000",
            *extra,
            clock="system",
        )

    @property
    def address(self) -> str:
        return self.server.kafka_address

    def create_topics(self, **partitions: int) -> None:
        """Topics created through the listener (name: number of partitions)."""
        client = self.server.client()
        try:
            create_topics(client, **partitions)
        finally:
            client.close()

    def offset_fetch(self, group: str, topic: str, *, stable: bool) -> list[tuple[int, int]]:
        """One OffsetFetch v7 of ``group``'s offset of partition 0 of ``topic`` through the
        listener (``stable``: require_stable): its committed offset and error code."""
        resp = offset_fetch(self.address, group, topic, 1, stable=stable)
        return [(p.committed_offset, p.error_code) for p in resp.topics[0].partitions]

    def kill_coordinator(self) -> None:
        self.server.proc.kill()
        self.server.proc.wait(timeout=10)
        self.server.stop()
        self.server = self._start("--kafka-listen", f"127.0.0.1:{self.port}")

    def stop(self) -> None:
        try:
            assert self.server.stop() == 0, self.server.stderr_text()
        finally:
            self.tansu.stop()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.stop()


# ---------------------------------------------------------------- reading the log


def committed_log(address: str, topic: str, partition: int) -> list[bytes]:
    """What a correct read_committed reader returns: the values of non-transactional records
    and of transactional ones whose producer's next marker in the partition is COMMIT, in log
    order; records of a transaction with no marker yet are not returned."""
    return [value for value, _how in committed_records(address, topic, partition)]


def committed_records(address: str, topic: str, partition: int) -> list[tuple[bytes, str]]:
    """:func:`committed_log` with how each value came to be committed: its batch's offset,
    producer id and epoch and its commit marker's offset and epoch (evidence for a failed
    check)."""
    out: list[tuple[bytes, str]] = []
    open_txns: dict[int, list[tuple[bytes, str]]] = {}
    for batch in read_log(address, topic, partition):
        pid = int(batch.producer_id)
        where = f"@{batch.base_offset} producer {pid} epoch {batch.producer_epoch}"
        if batch.attributes & CONTROL:
            (marker,) = batch.records
            assert marker.key is not None
            kind = int.from_bytes(marker.key[2:4], "big")  # 0 abort, 1 commit
            values = open_txns.pop(pid, [])
            if kind == 1:
                out += [(v, f"{how}, commit {where}") for v, how in values]
        elif batch.attributes & TRANSACTIONAL:
            open_txns.setdefault(pid, []).extend((r.value or b"", where) for r in batch.records)
        else:
            out += [(r.value or b"", where) for r in batch.records]
    return out


def exactly_once_failure(
    address: str, topic: str, partitions: int, seen: dict[str, int], apps: list[App]
) -> str:
    """What a failed exactly-once check needs to be explained: each input not committed once,
    with the committed outputs of it (their transactions, producers, markers), and every
    application's lines but its plain commits."""
    wrong = {k: n for k, n in seen.items() if n != 1}
    lines = [f"not exactly once: {wrong}"]
    for p in range(partitions):
        for value, how in committed_records(address, topic, p):
            if value.decode().split(":")[2] in wrong:
                lines.append(f"  partition {p}: {value.decode()} ({how})")
    for n, app in enumerate(apps):
        lines.append(f"app {n}:")
        lines += [f"  {json.dumps(line)}" for line in app.lines if "committed" not in line]
    return "\n".join(lines)


def read_log(address: str, topic: str, partition: int) -> list[Any]:
    """Every record batch of the partition, from the broker's Fetch (read_uncommitted)."""
    c = KafkaClient(address)
    offset, out = 0, []
    try:
        for _ in range(1_000):
            resp: Any = c.call(
                request(
                    1,
                    12,
                    replica_id=-1,
                    max_wait=200,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    isolation_level=0,
                    session_id=0,
                    session_epoch=-1,
                    topics=[
                        {
                            "topic": topic,
                            "partitions": [
                                {
                                    "partition": partition,
                                    "current_leader_epoch": -1,
                                    "fetch_offset": offset,
                                    "last_fetched_epoch": -1,
                                    "log_start_offset": -1,
                                    "partition_max_bytes": 1 << 20,
                                }
                            ],
                        }
                    ],
                    forgotten_topics_data=[],
                    rack_id="",
                )
            )
            if not resp.responses:
                break
            part = resp.responses[0].partitions[0]
            data = part.records or b""
            pos = 0
            while pos < len(data):
                batch, size = read_batch(data, pos)
                pos += size
                out.append(batch)
                offset = int(batch.base_offset) + int(batch.last_offset_delta) + 1
            if not data or offset >= part.high_watermark:
                break
    finally:
        c.close()
    return out


def offset_fetch(address: str, group: str, topic: str, partitions: int, *, stable: bool) -> Any:
    """One OffsetFetch v7 of ``group``'s offsets of partitions 0 to ``partitions`` - 1 of
    ``topic`` (``stable``: require_stable): its response."""
    c = KafkaClient(address)
    try:
        return c.call(
            request(
                9,
                7,
                group_id=group,
                topics=[{"name": topic, "partition_indexes": list(range(partitions))}],
                require_stable=stable,
            )
        )
    finally:
        c.close()


def committed_offsets(
    address: str, group: str, topic: str, partitions: int, timeout: float = 20
) -> list[int]:
    """OffsetFetch v7 with require_stable (bounded retries while the group fails over — a
    top-level error — or its offsets are unstable): the group's committed offsets, -1 for
    none."""
    deadline = time.monotonic() + timeout
    while True:
        resp = offset_fetch(address, group, topic, partitions, stable=True)
        if resp.error_code == E.none:
            parts = resp.topics[0].partitions
            if all(p.error_code == E.none for p in parts):
                return [int(p.committed_offset) for p in parts]
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)


def begin_with_offsets(producer: Any, topic: str, value: bytes, offset: Any, consumer: Any) -> None:
    """A transaction of confluent-kafka's ``producer`` begun: ``value`` produced to partition
    0 of ``topic``, and ``offset`` (a TopicPartition) sent for ``consumer``'s group, pending
    until the transaction ends."""
    producer.begin_transaction()
    producer.produce(topic, value, partition=0)
    producer.send_offsets_to_transaction([offset], consumer.consumer_group_metadata(), 20)


def produce(address: str, topic: str, values: list[str], partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": address, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, v.encode(), partition=i % partitions)
    assert p.flush(20) == 0


# ---------------------------------------------------------------- the application


class App:
    """tests/e2e/eos_app.py in a process of its own."""

    def __init__(self, stack: Stack, config: dict[str, Any], log: Path) -> None:
        self.stack, self.config, self.log_path = stack, config, log
        self.lines: list[dict[str, Any]] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), json.dumps(self.config)],
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """The process's lines, kept here and (the evidence of a run) in ``<log>.jsonl``."""
        assert proc.stdout is not None
        with open(self.log_path.with_suffix(".jsonl"), "ab") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                self.lines.append(json.loads(line))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.close()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def check_offsets_not_ahead(
    stack: Stack, group: str, topic_in: str, topic_out: str, partitions: int
) -> None:
    """Committed offsets never ahead of committed output: every input below each
    partition's committed offset has its output committed."""
    offsets = committed_offsets(stack.address, group, topic_in, partitions)
    for p in range(partitions):
        outputs = {
            v.decode().split(":")[1] for v in committed_log(stack.tansu.address, topic_out, p)
        }
        for offset in range(max(offsets[p], 0)):
            assert str(offset) in outputs, (p, offset, offsets, sorted(outputs))


def committed_outputs(stack: Stack, topic_out: str, partitions: int) -> dict[str, int]:
    """Input value -> how many times its output is committed (each in its input's partition)."""
    seen: dict[str, int] = {}
    for p in range(partitions):
        for v in committed_log(stack.tansu.address, topic_out, p):
            part, _offset, value = v.decode().split(":")[:3]
            assert int(part) == p
            seen[value] = seen.get(value, 0) + 1
    return seen


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_exactly_once_through_kills(stack: Stack, tmp_path: Path, protocol: str) -> None:
    """80 inputs, copied in transactions of up to 5 records; meanwhile the coordinator is
    killed twice and the application twice, at random moments (seeded), each started again.
    Then: each input's output committed exactly once, committed offsets at the end, and at
    every check on the way the committed offsets never ahead of the committed output."""
    rng = random.Random(f"eos-{protocol}")
    topic_in, topic_out, group = f"eos-in-{protocol}", f"eos-out-{protocol}", f"eos-{protocol}"
    stack.create_topics(**{topic_in: 2, topic_out: 2})
    values = [f"r{i}" for i in range(80)]
    produce(stack.address, topic_in, values, 2)
    config = {
        "bootstrap": stack.address,
        "group": group,
        "input": topic_in,
        "output": topic_out,
        "transactional_id": f"eos-app-{protocol}",
        "protocol": protocol,
        "idle_s": 10,
    }
    app = App(stack, config, tmp_path / "app.log")

    def check_prefix() -> None:
        check_offsets_not_ahead(stack, group, topic_in, topic_out, 2)

    deadline = time.monotonic() + 90
    for event in ["coordinator", "app", "coordinator", "app"]:
        time.sleep(rng.uniform(0.5, 3.0))
        if event == "coordinator":
            stack.kill_coordinator()
        else:
            app.kill()
            app.start()
        check_prefix()
    # Let it finish: every input processed (bounded), then the application goes idle.
    while time.monotonic() < deadline:
        if committed_offsets(stack.address, group, topic_in, 2) == [40, 40]:
            break
        if not app.alive():
            app.start()  # fenced by its own restart, or done early: go on
        time.sleep(0.5)
    assert committed_offsets(stack.address, group, topic_in, 2) == [40, 40], app.lines[-10:]
    check_prefix()
    seen = committed_outputs(stack, topic_out, 2)
    assert seen == dict.fromkeys(values, 1), exactly_once_failure(
        stack.tansu.address, topic_out, 2, seen, [app]
    )
    if app.alive():
        app.kill()


def test_an_aborted_transaction_leaves_the_offsets_and_pending_ones_are_unstable(
    stack: Stack,
) -> None:
    """Offsets sent in a transaction are invisible to a plain OffsetFetch and
    UNSTABLE_OFFSET_COMMIT to one that requires stable offsets until the transaction ends; an
    abort leaves the committed offsets as they were, a commit makes the new ones committed."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    stack.create_topics(**{"tx-in": 1, "tx-out": 1})
    consumer = Consumer({"bootstrap.servers": stack.address, "group.id": "tx-g"})
    consumer.commit(offsets=[TopicPartition("tx-in", 0, 3)], asynchronous=False)
    producer = Producer({"bootstrap.servers": stack.address, "transactional.id": "tx-1"})
    producer.init_transactions(20)
    try:
        for commit, offset in ((False, 7), (True, 9)):
            begin_with_offsets(
                producer, "tx-out", b"x", TopicPartition("tx-in", 0, offset), consumer
            )
            assert stack.offset_fetch("tx-g", "tx-in", stable=False) == [
                (3, E.none)  # the abort before left them
            ]
            assert stack.offset_fetch("tx-g", "tx-in", stable=True) == [
                (-1, E.unstable_offset_commit)
            ]
            if commit:
                producer.commit_transaction(20)
                assert committed_offsets(stack.address, "tx-g", "tx-in", 1) == [9]
            else:
                producer.abort_transaction(20)
                assert committed_offsets(stack.address, "tx-g", "tx-in", 1) == [3]
    finally:
        consumer.close()
    # Tansu writes the markers right (abort then commit) but its read_committed Fetch shows
    # the aborted record too: the reason the exactly-once test reads the log itself.
    batches = read_log(stack.tansu.address, "tx-out", 0)
    markers = [
        int.from_bytes(b.records[0].key[2:4], "big") for b in batches if b.attributes & CONTROL
    ]
    assert markers == [0, 1]
    assert committed_log(stack.tansu.address, "tx-out", 0) == [b"x"]


def test_a_zombie_producer_stays_fenced_after_the_new_producers_transaction(
    stack: Stack,
) -> None:
    """confluent-kafka's transactional producer A has offsets pending when a second producer
    B initializes the same transactional id (A's transaction aborted) and commits a
    transaction of its own. A, a zombie unaware of it, then sends offsets in its old
    transaction: Tansu's transaction coordinator takes its AddOffsetsToTxn at the old epoch,
    the coordinator refuses it as Kafka's transaction coordinator would (INVALID_PRODUCER_EPOCH
    to librdkafka's AddOffsetsToTxn v0, PRODUCER_FENCED from v2: fenced, a fatal error for A)
    and nothing of A's becomes pending: B's committed offset stays, stable.
    (Before, the end of B's transaction forgot A's epoch: A's offsets were accepted and stayed
    pending, UNSTABLE_OFFSET_COMMIT to read_committed consumers.)"""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

    stack.create_topics(**{"zf-in": 1, "zf-out": 1})
    consumer = Consumer({"bootstrap.servers": stack.address, "group.id": "zf-g"})
    config = {"bootstrap.servers": stack.address, "transactional.id": "zf-1"}
    zombie, producer = Producer(config), Producer(config)
    try:
        zombie.init_transactions(20)
        begin_with_offsets(zombie, "zf-out", b"zombie", TopicPartition("zf-in", 0, 5), consumer)
        producer.init_transactions(20)  # aborts the zombie's transaction
        begin_with_offsets(producer, "zf-out", b"new", TopicPartition("zf-in", 0, 10), consumer)
        producer.commit_transaction(20)
        assert committed_offsets(stack.address, "zf-g", "zf-in", 1) == [10]
        with pytest.raises(KafkaException) as refused:
            zombie.send_offsets_to_transaction(
                [TopicPartition("zf-in", 0, 7)], consumer.consumer_group_metadata(), 20
            )
        error = refused.value.args[0]
        assert error.code() == KafkaError._FENCED and error.fatal(), error
        assert stack.offset_fetch("zf-g", "zf-in", stable=True) == [(10, E.none)]
    finally:
        consumer.close()
    refusals = [
        line for line in stack.server.stderr_text().splitlines() if "AddOffsetsToTxn v" in line
    ]
    assert len(refusals) == 1 and " of zf-1 refused: Producer " in refusals[0], refusals


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_exactly_once_across_a_consumer_crash_and_rebalances(
    stack: Stack, tmp_path: Path, protocol: str
) -> None:
    """KIP-447's setup: two instances of the application in one group (KIP-848's protocol, or
    the classic one through the legacy bridge), each with a transactional id of its own, so
    that only the member epochs (generations) that ``consumer_group_metadata`` carries into
    TxnOffsetCommit fence a zombie. In turn each instance is killed (SIGKILL) inside a
    transaction — its partitions move to the other after its session times out, whose stable
    OffsetFetch waits until the restart's InitProducerId aborts the open transaction — and
    paused (SIGSTOP) past its session timeout, then let run on as a zombie with its old
    member: its TxnOffsetCommit is refused, it aborts. Every input's output is committed exactly
    once (counted), and the committed offsets are never ahead of the committed output."""
    rng = random.Random(f"eos-rebalance-{protocol}")
    topic_in, topic_out, group = f"eosr-in-{protocol}", f"eosr-out-{protocol}", f"eosr-{protocol}"
    partitions, count = 4, 400
    stack.create_topics(**{topic_in: partitions, topic_out: partitions})
    values = [f"r{i}" for i in range(count)]
    produce(stack.address, topic_in, values, partitions)

    def config(n: int) -> dict[str, Any]:
        return {
            "bootstrap": stack.address,
            "group": group,
            "input": topic_in,
            "output": topic_out,
            "transactional_id": f"eosr-app-{n}",
            "protocol": protocol,
            "idle_s": 15,
            "delay_s": 0.3,
        }

    apps = [App(stack, config(n), tmp_path / f"app{n}.log") for n in range(2)]

    def check_prefix() -> None:
        check_offsets_not_ahead(stack, group, topic_in, topic_out, partitions)

    done = [count // partitions] * partitions
    deadline = time.monotonic() + 180
    for how, victim in (("kill", 0), ("pause", 1), ("kill", 1), ("pause", 0)):
        time.sleep(rng.uniform(1.0, 3.0))
        if how == "kill":
            apps[victim].kill()
            time.sleep(rng.uniform(7.0, 9.0))  # past the session timeout: a rebalance
            # The killed one's transaction is open upstream until its transactional id's next
            # InitProducerId (Tansu neither times it out nor describes it): its offsets stay
            # pending — UNSTABLE_OFFSET_COMMIT to the survivor — until the restart.
            apps[victim].start()
        else:
            # A zombie: paused past its session timeout (its partitions move to the other),
            # then it runs on with its old member epoch and producer.
            apps[victim].signal(signal.SIGSTOP)
            time.sleep(rng.uniform(7.0, 9.0))
            apps[victim].signal(signal.SIGCONT)
        check_prefix()
    while time.monotonic() < deadline:
        if committed_offsets(stack.address, group, topic_in, partitions) == done:
            break
        for app in apps:
            if not app.alive():
                app.start()
        time.sleep(0.5)
    assert committed_offsets(stack.address, group, topic_in, partitions) == done, [
        a.lines[-10:] for a in apps
    ]
    check_prefix()
    seen = committed_outputs(stack, topic_out, partitions)
    assert seen == dict.fromkeys(values, 1), exactly_once_failure(
        stack.tansu.address, topic_out, partitions, seen, apps
    )
    for app in apps:
        if app.alive():
            app.kill()


def test_kafka_pythons_transactional_producer(stack: Stack) -> None:
    """kafka-python's transactional producer (send_offsets_to_transaction with a group id:
    TxnOffsetCommit naming no member) through the listener: the offsets are pending —
    UNSTABLE_OFFSET_COMMIT to a stable fetch, invisible to a plain one — until the commit,
    then committed; an abort leaves them where they were."""
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    stack.create_topics(**{"kp-in": 1, "kp-out": 1})

    def fetch(stable: bool) -> list[tuple[int, int]]:
        return stack.offset_fetch("kp-g", "kp-in", stable=stable)

    producer = KafkaProducer(bootstrap_servers=stack.address, transactional_id="kp-t")
    try:
        producer.init_transactions()
        for commit, offset in ((True, 11), (False, 12)):
            producer.begin_transaction()
            producer.send("kp-out", b"v", partition=0)
            producer.send_offsets_to_transaction(
                {KTP("kp-in", 0): OffsetAndMetadata(offset, "", -1)}, "kp-g"
            )
            assert fetch(True) == [(-1, E.unstable_offset_commit)]
            assert fetch(False) == [(-1 if commit else 11, E.none)]
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
            assert fetch(True) == [(11, E.none)]
    finally:
        producer.close()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_a_partition_given_back_while_its_offsets_are_pending_starts_at_the_committed_offset(
    stack: Stack, protocol: str
) -> None:
    """The application's consumer (tests/e2e/eos_app.py) starts a partition at its stable
    committed offset even when the partition comes back to it in a rebalance while another
    producer's transaction holds its offsets pending. librdkafka's own lookup (2.16) would start
    it at auto.offset.reset — the beginning: an OffsetFetch answered UNSTABLE_OFFSET_COMMIT
    (offset −1, as Kafka answers) and handled after the assignment changed puts the partition
    back as pending at INVALID — which is how tests/e2e's exactly-once check once found the
    first five inputs of a partition committed twice (eos_app's module doc). Here: committed
    offset 10, a transaction with offset 20 pending; the consumer (subscribed to ``in`` and
    ``side``) gets ``in``; another consumer joins for ``side`` (a rebalance that leaves ``in``
    where it was); the transaction is aborted. The consumer reads ``in`` from 10 on, and
    nothing of it before the abort."""
    import eos_app
    from confluent_kafka import Consumer, Producer, TopicPartition

    group, topic = f"gb-{protocol}", f"gb-in-{protocol}"
    stack.create_topics(**{topic: 1, f"gb-side-{protocol}": 2, f"gb-out-{protocol}": 1})
    produce(stack.address, topic, [f"v{i}" for i in range(30)], 1)
    admin = Consumer({"bootstrap.servers": stack.address, "group.id": group})
    admin.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    producer = Producer({"bootstrap.servers": stack.address, "transactional.id": f"gb-{protocol}"})
    producer.init_transactions(20)
    begin_with_offsets(producer, f"gb-out-{protocol}", b"x", TopicPartition(topic, 0, 20), admin)
    admin.close()
    config = {"bootstrap": stack.address, "group": group, "protocol": protocol}
    read: list[tuple[int, float]] = []  # (offset of `in`, when)
    stop = threading.Event()

    def run(topics: list[str], own: bool) -> None:
        consumer = eos_app.new_consumer(config)
        if own:
            eos_app.subscribe(consumer, topics, protocol)
        else:
            consumer.subscribe(topics)
        try:
            while not stop.is_set():
                for m in consumer.consume(num_messages=10, timeout=0.1):
                    if not m.error() and m.topic() == topic:
                        read.append((m.offset(), time.time()))
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=([topic, f"gb-side-{protocol}"], True))]
    threads[0].start()
    time.sleep(3)  # assigned; the offsets of `in` unstable
    threads.append(threading.Thread(target=run, args=([f"gb-side-{protocol}"], False)))
    threads[1].start()
    time.sleep(4)  # the rebalance
    aborted_at = time.time()
    producer.abort_transaction(20)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not set(range(10, 30)) <= {o for o, _ in read}:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(30)
    assert read, "nothing read"
    assert min(o for o, _ in read) == 10, [o for o, _ in read]
    assert {o for o, _ in read} == set(range(10, 30)), [o for o, _ in read]
    assert all(at >= aborted_at for _, at in read), (aborted_at, read[:3])
