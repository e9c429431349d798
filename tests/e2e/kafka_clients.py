"""A harness for real Kafka clients (confluent-kafka/librdkafka, kafka-python, aiokafka) against
the Kafka listener: consumers in processes of their own, their callback logs, producers.

* :class:`Fleet` starts consumers (``kafka_client_worker.py``, one process each, so a member
  can be restarted with another protocol or killed) and collects every event they print —
  rebalance callbacks, processed records, commits — with ``time.monotonic`` timestamps (one
  clock for every process of the machine). Every wait is bounded (:meth:`Fleet.wait_for`).
* :meth:`Fleet.check_exclusive_ownership` checks, from the callbacks, that no partition was
  owned by two consumers at the same time: a consumer owns a partition from its ``assign``
  callback until its ``revoke``/``lost`` callback returned, it stopped processing, or it was
  killed.
* :func:`produce` writes numbered records and waits for every delivery report;
  :class:`BackgroundProducer` writes at a steady rate until stopped (load during a migration).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("kafka_client_worker.py")
KAFKAJS_DIR = Path(__file__).with_name("kafkajs")
STOP_TIMEOUT_S = 25.0
DELIVERY_TIMEOUT_S = 20.0

Partition = tuple[str, int]


@dataclass(slots=True)
class Consumer:
    """One consumer process (one incarnation of a member ``name``)."""

    fleet: Fleet
    name: str
    index: int
    config: dict[str, Any]
    proc: subprocess.Popen[bytes]
    log_path: Path
    killed_at: float | None = None
    reader: threading.Thread | None = None

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop gracefully (the client's own close: revoke, commit, leave) — bounded; the
        process must exit 0 and print ``closed``."""
        if self.proc.poll() is None:
            self.send("stop")
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not close within {timeout} s") from None
        if self.reader is not None:
            self.reader.join(timeout=5)
        assert rc == 0, f"{self.name} exited {rc}: {self.fleet.log_text(self)}"
        assert self.events("closed"), f"{self.name} did not close: {self.fleet.log_text(self)}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.killed_at = time.monotonic()
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.reader is not None:
            self.reader.join(timeout=5)

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.fleet.events_of(self) if not kinds or e["event"] in kinds]

    def owned(self) -> set[Partition]:
        """What this consumer owns now, from its callbacks."""
        return _owned(self.fleet.events_of(self))

    def records(self) -> list[tuple[str, int, int, str]]:
        return [tuple(r) for e in self.events("records") for r in e["records"]]  # type: ignore[misc]


def _owned(events: Iterable[dict[str, Any]]) -> set[Partition]:
    owned: set[Partition] = set()
    for e in events:
        parts = {(t, p) for t, p in e.get("partitions", ())}
        if e["event"] == "assign":
            owned |= parts
        elif e["event"] in ("revoke", "lost"):
            owned -= parts
        elif e["event"] in ("stopping", "closed", "error"):
            owned = set()
    return owned


@dataclass(slots=True)
class Fleet:
    """Consumers of one test; ``log_dir`` keeps each worker's stderr (client logs)."""

    bootstrap: str
    log_dir: Path
    consumers: list[Consumer] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def start(self, name: str, kind: str, group: str, **config: Any) -> Consumer:
        """Start a consumer: ``kind`` and the worker's other keys (``topics``/``pattern``,
        ``assignor``, ``instance_id``, ``session_timeout_ms``, ...); returns once it printed
        ``started`` (bounded). Kind ``kafkajs`` runs ``kafkajs/driver.js`` in Node instead of
        the Python worker (same keys, commands and events)."""
        full = {"name": name, "kind": kind, "group": group, "bootstrap": self.bootstrap}
        full |= config
        index = len(self.consumers)
        log_path = self.log_dir / f"{group}-{name}-{index}.log"
        command = [sys.executable, str(WORKER), json.dumps(full)]
        if kind == "kafkajs":
            assert (KAFKAJS_DIR / "node_modules" / "kafkajs").is_dir(), (
                "KafkaJS is not installed: run scripts/bootstrap (npm ci in tests/e2e/kafkajs)"
            )
            command = ["node", str(KAFKAJS_DIR / "driver.js"), json.dumps(full)]
        with open(log_path, "wb") as err:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        consumer = Consumer(self, name, index, full, proc, log_path)
        consumer.reader = threading.Thread(target=self._read, args=(consumer,), daemon=True)
        consumer.reader.start()
        self.consumers.append(consumer)
        self.wait_for(lambda: bool(consumer.events("started", "error")), 20, f"{name} to start")
        assert not consumer.events("error"), consumer.events("error")
        return consumer

    def _read(self, consumer: Consumer) -> None:
        assert consumer.proc.stdout is not None
        for line in consumer.proc.stdout:
            event = json.loads(line)
            event["index"] = consumer.index
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()

    def log_text(self, consumer: Consumer) -> str:
        return consumer.log_path.read_text(errors="replace")[-4000:]

    # ------------------------------------------------------------ reading the logs

    def events_of(self, consumer: Consumer) -> list[dict[str, Any]]:
        with self.cond:
            return [e for e in self.events if e["index"] == consumer.index]

    def snapshot(self) -> list[dict[str, Any]]:
        with self.cond:
            return list(self.events)

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Until ``predicate()`` (re-checked on every event and every 0.2 s), at most
        ``timeout`` seconds; fails with the workers' errors and the tail of the event log."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                errors = [e for e in self.events if e["event"] == "error"]
                assert not errors, errors
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = [
                        {k: v for k, v in e.items() if k != "records"} for e in self.events[-40:]
                    ]
                    raise AssertionError(f"timed out waiting for {what}; last events: {tail}")
                self.cond.wait(min(left, 0.2))

    def live(self) -> list[Consumer]:
        return [c for c in self.consumers if c.proc.poll() is None and c.killed_at is None]

    def assignment(self, names: Iterable[str] | None = None) -> dict[str, set[Partition]]:
        """Name -> owned partitions, for the live consumers (named ``names``)."""
        wanted = None if names is None else set(names)
        return {c.name: c.owned() for c in self.live() if wanted is None or c.name in wanted}

    def wait_for_assignment(
        self,
        partitions: set[Partition],
        timeout: float,
        names: Iterable[str] | None = None,
        check: Callable[[dict[str, set[Partition]]], bool] | None = None,
    ) -> dict[str, set[Partition]]:
        """Until the live consumers (or ``names``) own ``partitions`` between them, each
        exactly once, every one of them owns something (and ``check`` holds); the
        assignment."""
        wanted = set(names) if names is not None else None
        got: dict[str, set[Partition]] = {}

        def done() -> bool:
            nonlocal got
            got = self.assignment(wanted)
            if wanted is not None and set(got) != wanted:
                return False
            owned = [p for ps in got.values() for p in ps]
            return (
                sorted(owned) == sorted(partitions)
                and all(got.values())
                and (check is None or check(got))
            )

        self.wait_for(done, timeout, f"{sorted(partitions)} to be assigned")
        return got

    def consumed(self) -> dict[str, int]:
        """Value -> how many times it was processed (every consumer, every incarnation)."""
        counts: dict[str, int] = {}
        for e in self.snapshot():
            if e["event"] == "records":
                for _t, _p, _o, value in e["records"]:
                    counts[value] = counts.get(value, 0) + 1
        return counts

    def wait_consumed(self, values: Iterable[str], timeout: float) -> None:
        wanted = set(values)
        self.wait_for(
            lambda: wanted <= set(self.consumed()),
            timeout,
            f"{len(wanted)} records to be consumed",
        )

    def ownership_intervals(
        self, group: str | None = None
    ) -> dict[Partition, list[tuple[float, float, str]]]:
        """Partition -> [(from, until, consumer)] from the callbacks of every consumer (of
        ``group``): from its ``assign`` callback until its ``revoke``/``lost`` callback
        returned, it stopped processing, it failed or it was killed (still owned: until
        infinity)."""
        out: dict[Partition, list[tuple[float, float, str]]] = {}
        for c in self.consumers:
            if group is not None and c.config["group"] != group:
                continue
            label = f"{c.name}#{c.index}({c.config['kind']})"
            since: dict[Partition, float] = {}
            for e in self.events_of(c):
                parts = {(t, p) for t, p in e.get("partitions", ())}
                if e["event"] == "assign":
                    for p in parts:
                        since.setdefault(p, e["t"])
                elif e["event"] in ("revoke", "lost", "stopping", "error", "closed"):
                    ended = parts if e["event"] in ("revoke", "lost") else set(since)
                    for p in ended & set(since):
                        out.setdefault(p, []).append((since.pop(p), e["t"], label))
            end = c.killed_at if c.killed_at is not None else float("inf")
            for p, t in since.items():
                out.setdefault(p, []).append((t, end, label))
        return out

    def unowned(
        self, group: str, partitions: Iterable[Partition], since: float, until: float
    ) -> tuple[float, float]:
        """Between ``since`` and ``until`` (monotonic seconds): the partition-seconds when a
        partition had no owner in ``group``, in all, and the longest single gap."""
        intervals = self.ownership_intervals(group)
        total = longest = 0.0
        for p in partitions:
            at = since
            for start, end, _who in sorted(intervals.get(p, [])):
                if start > at:
                    gap = min(start, until) - at
                    if gap > 0:
                        total += gap
                        longest = max(longest, gap)
                at = max(at, end)
                if at >= until:
                    break
            if at < until:
                total += until - at
                longest = max(longest, until - at)
        return total, longest

    def check_exclusive_ownership(self) -> None:
        """In each group, no partition owned by two consumers at the same time (see
        :meth:`ownership_intervals`)."""
        overlaps = []
        groups = sorted({c.config["group"] for c in self.consumers})
        for p, intervals in sorted(
            (p, i) for g in groups for p, i in self.ownership_intervals(g).items()
        ):
            intervals.sort()
            held = intervals[0]  # the interval reaching furthest so far
            for interval in intervals[1:]:
                if interval[0] < held[1]:
                    overlaps.append((p, held, interval))
                if interval[1] > held[1]:
                    held = interval
        assert not overlaps, f"partitions owned twice at once: {overlaps}"

    def stop_all(self) -> None:
        for c in self.live():
            c.stop()

    def close(self) -> None:
        """Kill whatever still runs (the end of a test, passed or failed)."""
        for c in self.consumers:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait(timeout=10)
            if c.proc.stdin is not None:
                try:
                    c.proc.stdin.close()
                except OSError:
                    pass


# ---------------------------------------------------------------- producers


def new_topic(stack: Any, name: str, partitions: int) -> set[Partition]:
    """Create ``name`` with ``partitions`` partitions through the stack's coordinator; its
    partitions."""
    from kafka_support import create_topics

    c = stack.server.client()
    create_topics(c, **{name: partitions})
    c.close()
    return {(name, p) for p in range(partitions)}


def committed(admin: Any, group: str) -> dict[Partition, int]:
    """``group``'s committed offsets, read with a confluent-kafka AdminClient."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    return {(tp.topic, tp.partition): tp.offset for tp in got[group].result(10).topic_partitions}


def close_producer(producer: Any) -> None:
    """Close a confluent-kafka Producer now, before its broker stops: what it has not delivered
    (a test that failed) is purged first, so closing never waits for message.timeout.ms."""
    producer.purge()
    producer.close()


def produce(
    bootstrap: str, topic: str, values: Iterable[str], partitions: int
) -> dict[str, tuple[int, int]]:
    """Write ``values`` round-robin over ``partitions`` (confluent-kafka, acks=all) and wait
    for every delivery report (bounded); value -> (partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered: dict[str, tuple[int, int]] = {}
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(f"{msg.value()!r}: {err}")
        else:
            delivered[msg.value().decode()] = (msg.partition(), msg.offset())

    wanted = list(values)
    try:
        for i, value in enumerate(wanted):
            producer.produce(topic, value.encode(), partition=i % partitions, on_delivery=report)
            producer.poll(0)
        left = producer.flush(DELIVERY_TIMEOUT_S)
    finally:
        close_producer(producer)
    assert left == 0 and not failed, (left, failed[:5])
    assert set(delivered) == set(wanted)
    return delivered


def write_records(address: str, topic: str, counts: dict[int, int]) -> None:
    """``counts[p]`` records to partition ``p`` (values ``topic-p-i``); the last one of each
    partition in a batch of its own: Tansu answers ListOffsets LATEST with the base offset of
    the last batch + 1, the log end only when that batch holds one record."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    try:
        for last in (False, True):
            for p, n in counts.items():
                for i in ([n - 1] if n else []) if last else range(n - 1):
                    producer.produce(topic, f"{topic}-{p}-{i}".encode(), partition=p)
            assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    finally:
        close_producer(producer)


class BackgroundProducer:
    """Writes ``prefix-N`` records round-robin over the partitions at about ``rate`` records/s
    until :meth:`stop`; :attr:`delivered` has every acknowledged value."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, prefix: str):
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic, self.partitions, self.rate, self.prefix = topic, partitions, rate, prefix
        self.delivered: dict[str, tuple[int, int]] = {}
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(f"{msg.value()!r}: {err}")
        else:
            self.delivered[msg.value().decode()] = (msg.partition(), msg.offset())

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                value = f"{self.prefix}-{self.sent}"
                self.producer.produce(
                    self.topic,
                    value.encode(),
                    partition=self.sent % self.partitions,
                    on_delivery=self._report,
                )
                self.sent += 1
            self.producer.poll(0.02)

    def stop(self) -> dict[str, tuple[int, int]]:
        """Stop, wait for every delivery report (bounded), close the producer; value ->
        (partition, offset). Again: what it had delivered."""
        if self._stop.is_set():  # stopped before (a test, then its fixture): closed
            return dict(self.delivered)
        self._stop.set()
        self.thread.join(timeout=10)
        try:
            left = self.producer.flush(DELIVERY_TIMEOUT_S)
        finally:
            close_producer(self.producer)  # before its broker stops
        assert left == 0 and not self.failed, (left, self.failed[:5])
        assert len(self.delivered) == self.sent
        return dict(self.delivered)


# ---------------------------------------------------------------- the stack and the admin view

STACK_SETTINGS = (
    "--set",
    "kafka.upstream.metadata.max.age.ms=1000",
    "--set",
    "group.consumer.heartbeat.interval.ms=500",
    "--set",
    "group.consumer.min.heartbeat.interval.ms=500",
    "--set",
    "group.initial.rebalance.delay.ms=500",
)
"""``kip848 serve`` settings for real-client tests: KIP-848 members heartbeat every 0.5 s and a
new classic group waits 0.5 s for more members (Kafka: 5 s and 3 s), so each rebalance takes a
fraction of a second."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group as confluent-kafka's AdminClient describes it (``type``/``state`` names of its
    enums; KIP-848's Assigning/Reconciling states are ``UNKNOWN`` there) and as ours does
    (member types)."""

    type: str
    state: str
    members: dict[str, int]  # client id -> number of assigned partitions
    partitions: dict[str, set[Partition]]  # client id -> assigned partitions
    member_types: dict[str, str]  # client id -> "consumer"/"classic" (consumer groups only)


def wait_committed_to_end(
    admin: Any,
    fleet: Fleet,
    group: str,
    written: dict[str, tuple[int, int]],
    partitions: int,
    timeout: float,
) -> None:
    """Until ``group``'s committed offsets reach the end of every partition of the records
    ``written`` (value -> (partition, offset), :meth:`BackgroundProducer.stop`); bounded."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    ends = dict.fromkeys(range(partitions), 0)
    for partition, offset in written.values():
        ends[partition] = max(ends[partition], offset + 1)

    def committed() -> dict[int, int]:
        got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        return {tp.partition: tp.offset for tp in got[group].result(10).topic_partitions}

    fleet.wait_for(lambda: committed() == ends, timeout, "offsets committed to the end")


def describe(admin: Any, channel: Any, group: str) -> GroupView:
    from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc

    d = admin.describe_consumer_groups([group])[group].result(10)
    parts = {
        m.client_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for m in d.members
    }
    types: dict[str, str] = {}
    if d.type.name == "CONSUMER":
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        resp = stub.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=10
        )
        types = {
            m.client_id: {0: "classic", 1: "consumer"}.get(m.member_type, str(m.member_type))
            for m in resp.groups[0].members
        }
    return GroupView(
        type=d.type.name,
        state=d.state.name,
        members={k: len(v) for k, v in parts.items()},
        partitions=parts,
        member_types=types,
    )


def wait_described(
    admin: Any,
    channel: Any,
    group: str,
    check: Callable[[GroupView], bool],
    timeout: float,
    what: str,
) -> GroupView:
    """Describe every 0.2 s until ``check`` holds (bounded); the last view."""
    deadline = time.monotonic() + timeout
    while True:
        view = describe(admin, channel, group)
        if check(view):
            return view
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {view}"
        time.sleep(0.2)


def settle(
    fleet: Fleet,
    admin: Any,
    channel: Any,
    group: str,
    partitions: set[Partition],
    names: Iterable[str],
    group_type: str | None = None,
    timeout: float = 30.0,
) -> dict[str, set[Partition]]:
    """Until the consumers ``names`` own ``partitions`` between them (each something) and the
    coordinator describes the group as Stable (of ``group_type``) with that same assignment,
    which is returned. Bounded."""
    wanted = set(names)
    fleet.wait_for_assignment(partitions, timeout, names=wanted)
    view = wait_described(
        admin,
        channel,
        group,
        lambda v: (
            v.state == "STABLE"
            and (group_type is None or v.type == group_type)
            and v.partitions == fleet.assignment(wanted)
        ),
        timeout,
        f"{group} to be a stable {group_type or ''} group with the clients' assignment",
    )
    return view.partitions
