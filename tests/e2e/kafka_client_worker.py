"""One real Kafka consumer in a process of its own, for the real-client e2e tests
(``kafka_clients.py`` starts it and reads what it prints).

    python tests/e2e/kafka_client_worker.py '{"kind": ..., "bootstrap": ..., ...}'

``kind``: ``librdkafka-consumer`` (confluent-kafka, ``group.protocol=consumer``: KIP-848),
``librdkafka-classic`` (confluent-kafka, classic protocol; ``assignor`` ``range``,
``roundrobin`` or ``cooperative-sticky``), ``kafka-python`` (classic; ``range``, ``roundrobin``
or ``cooperative-sticky``) and ``aiokafka`` (classic, eager). The other keys: ``name``,
``bootstrap``, ``group``, ``topics`` or ``pattern``, ``instance_id``, ``session_timeout_ms`` and
``heartbeat_interval_ms`` (classic members; 6000 and 500 unless given, null for the client's
default), ``remote_assignor``, ``client_id``, ``client_rack`` (librdkafka's ``client.rack``),
``debug`` (librdkafka's).

The application is what a careful at-least-once consumer does: it processes a record only while
the rebalance callbacks say it owns the record's partition (records of a partition revoked
between the fetch and the processing are dropped; their new owner reads them again), and after
each batch it commits, synchronously, the offsets after the records it processed; a failed
commit is tried again (every 0.5 s) for the partitions it still owns. Callbacks and processing
take one lock (kafka-python runs callbacks on its IO thread).

Commands on stdin, one per line: ``stop`` (stop processing, close the consumer — revoke,
commit, leave as the client does on close — and exit 0). Events on stdout, one JSON object per
line: ``{"t": time.monotonic(), "name", "event", ...}`` with event in

* ``started``; ``assign`` / ``revoke`` / ``lost`` with ``partitions`` ([[topic, p], ...];
  ``t`` = when the callback was invoked for ``assign``, when it returned for the others);
* ``records``: ``records`` [[topic, p, offset, value], ...] processed, then ``commit``:
  ``offsets`` [[topic, p, next offset], ...], or ``commit-error``: ``error``;
* ``stopping`` (processing has stopped: the application owns nothing from here on),
  ``closed``; ``error`` (``error``) for anything unexpected, then exit 1.

``time.monotonic`` is the same clock in every process of the machine, so events of several
workers can be merged in time order.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

POLL_S = 0.2
CLOSE_TIMEOUT_S = 15.0

_out = threading.Lock()


def emit(name: str, event: str, **fields: Any) -> None:
    line = json.dumps({"t": time.monotonic(), "name": name, "event": event, **fields})
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def tps(items: Iterable[Any]) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in items)


class App:
    """The application's view: owned partitions, processed records, offsets to commit."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.name: str = config["name"]
        self.lock = threading.RLock()
        self.owned: set[tuple[str, int]] = set()
        self.uncommitted: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()
        self.last_try = 0.0
        self.failed = False

    def assigned(self, items: Iterable[Any]) -> None:
        with self.lock:
            got = tps(items)
            emit(self.name, "assign", partitions=got)
            self.owned |= {(t, p) for t, p in got}

    def revoked(self, items: Iterable[Any], event: str = "revoke") -> None:
        with self.lock:
            gone = {(t, p) for t, p in tps(items)}
            self.owned -= gone
            for tp in gone:  # not committed: the next owner reads those records again
                self.uncommitted.pop(tp, None)
            emit(self.name, event, partitions=sorted([t, p] for t, p in gone))

    def take(self, records: list[tuple[str, int, int, bytes | None]]) -> None:
        """Process the records of owned partitions (the others are dropped)."""
        with self.lock:
            if self.stop.is_set():
                return
            done = [r for r in records if (r[0], r[1]) in self.owned]
            if not done:
                return
            emit(
                self.name,
                "records",
                records=[[t, p, o, (v or b"").decode()] for t, p, o, v in done],
            )
            for t, p, o, _v in done:
                self.uncommitted[(t, p)] = max(self.uncommitted.get((t, p), -1), o + 1)

    def to_commit(self, retry_s: float = 0.5) -> dict[tuple[str, int], int]:
        """What to commit now: everything processed and not yet committed — after a failed
        commit, again once ``retry_s`` has passed."""
        with self.lock:
            now = time.monotonic()
            if not self.uncommitted or (now - self.last_try < retry_s and self.failed):
                return {}
            self.last_try = now
            return dict(self.uncommitted)

    def committed(self, offsets: dict[tuple[str, int], int], error: BaseException | None) -> None:
        with self.lock:
            self.failed = error is not None
            if error is not None:
                emit(self.name, "commit-error", error=repr(error))
                return
            for tp, offset in offsets.items():
                if self.uncommitted.get(tp) == offset:
                    del self.uncommitted[tp]
            emit(self.name, "commit", offsets=sorted([t, p, o] for (t, p), o in offsets.items()))

    def commit_with(self, commit: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """Commit synchronously, outside the lock (kafka-python's commit needs its IO thread,
        which may be waiting in a callback)."""
        offsets = self.to_commit()
        if not offsets:
            return
        try:
            commit(offsets)
        except Exception as exc:  # noqa: BLE001 - a failed commit is an event, not a crash
            self.committed(offsets, exc)
        else:
            self.committed(offsets, None)

    def stopping(self) -> None:
        with self.lock:
            self.stop.set()
            emit(self.name, "stopping", partitions=sorted([t, p] for t, p in self.owned))
            self.owned.clear()


def timeouts(config: dict[str, Any], session: str, heartbeat: str) -> dict[str, Any]:
    """A classic member's session timeout and heartbeat interval, named as its client names
    them: 6 s and 0.5 s unless ``session_timeout_ms``/``heartbeat_interval_ms`` say otherwise;
    None leaves the client's own default."""
    out = {}
    for key, name, default in (
        ("session_timeout_ms", session, 6000),
        ("heartbeat_interval_ms", heartbeat, 500),
    ):
        value = config.get(key, default)
        if value is not None:
            out[name] = value
    return out


def read_commands(app: App, on_stop: Callable[[], None] | None = None) -> None:
    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        app.stop.set()  # stdin closed (the test ended) counts as stop
        if on_stop is not None:
            on_stop()

    threading.Thread(target=run, daemon=True).start()


# ---------------------------------------------------------------- confluent-kafka (librdkafka)


def run_librdkafka(config: dict[str, Any], app: App) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": config["bootstrap"],
        "group.id": config["group"],
        "client.id": config.get("client_id") or config["name"],
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if config["kind"] == "librdkafka-consumer":
        conf["group.protocol"] = "consumer"
        if config.get("remote_assignor"):
            conf["group.remote.assignor"] = config["remote_assignor"]
    else:
        conf["group.protocol"] = "classic"
        conf["partition.assignment.strategy"] = config.get("assignor") or "range"
        conf |= timeouts(config, "session.timeout.ms", "heartbeat.interval.ms")
    if config.get("instance_id"):
        conf["group.instance.id"] = config["instance_id"]
    if config.get("client_rack"):
        conf["client.rack"] = config["client_rack"]
    if config.get("debug"):
        conf["debug"] = config["debug"]
    consumer = Consumer(conf)
    subscription = [config["pattern"]] if config.get("pattern") else config["topics"]
    consumer.subscribe(
        subscription,
        on_assign=lambda _c, parts: app.assigned(parts),
        on_revoke=lambda _c, parts: app.revoked(parts),
        on_lost=lambda _c, parts: app.revoked(parts, "lost"),
    )
    read_commands(app)
    emit(app.name, "started")

    def commit(offsets: dict[tuple[str, int], int]) -> None:
        try:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                asynchronous=False,
            )
        except KafkaException as exc:
            raise RuntimeError(str(exc.args[0])) from None

    while not app.stop.is_set():
        batch = consumer.consume(num_messages=500, timeout=POLL_S)
        app.take(
            [(m.topic(), m.partition(), m.offset(), m.value()) for m in batch if m.error() is None]
        )
        app.commit_with(commit)
    app.stopping()
    consumer.close()


# ---------------------------------------------------------------- kafka-python


def run_kafka_python(config: dict[str, Any], app: App) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata, TopicPartition

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    strategy = config.get("assignor")
    consumer = KafkaConsumer(
        bootstrap_servers=config["bootstrap"],
        group_id=config["group"],
        client_id=config.get("client_id") or config["name"],
        group_instance_id=config.get("instance_id"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **timeouts(config, "session_timeout_ms", "heartbeat_interval_ms"),
        metadata_max_age_ms=1000,
        partition_assignment_strategy=(assignors[strategy],)
        if strategy
        else (RangePartitionAssignor, RoundRobinPartitionAssignor),
    )

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            app.revoked(revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            app.assigned(assigned)

        def on_partitions_lost(self, lost: Any) -> None:
            app.revoked(lost, "lost")

    if config.get("pattern"):
        consumer.subscribe(pattern=config["pattern"], listener=Listener())
    else:
        consumer.subscribe(config["topics"], listener=Listener())
    read_commands(app)
    emit(app.name, "started")

    def commit(offsets: dict[tuple[str, int], int]) -> None:
        consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}
        )

    while not app.stop.is_set():
        polled = consumer.poll(timeout_ms=int(POLL_S * 1000), max_records=500)
        app.take([(r.topic, r.partition, r.offset, r.value) for rs in polled.values() for r in rs])
        app.commit_with(commit)
    app.stopping()
    consumer.close(timeout_ms=int(CLOSE_TIMEOUT_S * 1000))


# ---------------------------------------------------------------- aiokafka


def run_aiokafka(config: dict[str, Any], app: App) -> None:
    asyncio.run(_aiokafka(config, app))


async def _aiokafka(config: dict[str, Any], app: App) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    consumer = AIOKafkaConsumer(
        bootstrap_servers=config["bootstrap"],
        group_id=config["group"],
        client_id=config.get("client_id") or config["name"],
        group_instance_id=config.get("instance_id"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **timeouts(config, "session_timeout_ms", "heartbeat_interval_ms"),
        metadata_max_age_ms=1000,
    )

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            app.revoked(revoked)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            app.assigned(assigned)

    await consumer.start()
    if config.get("pattern"):
        consumer.subscribe(pattern=config["pattern"], listener=Listener())
    else:
        consumer.subscribe(config["topics"], listener=Listener())
    read_commands(app)
    emit(app.name, "started")
    while not app.stop.is_set():
        polled = await consumer.getmany(timeout_ms=int(POLL_S * 1000), max_records=500)
        app.take([(r.topic, r.partition, r.offset, r.value) for rs in polled.values() for r in rs])
        offsets = app.to_commit()
        if not offsets:
            continue
        try:
            await consumer.commit(
                {TopicPartition(t, p): OffsetAndMetadata(o, "") for (t, p), o in offsets.items()}
            )
        except Exception as exc:  # noqa: BLE001 - a failed commit is an event
            app.committed(offsets, exc)
        else:
            app.committed(offsets, None)
    app.stopping()
    await asyncio.wait_for(consumer.stop(), CLOSE_TIMEOUT_S)


RUNNERS = {
    "librdkafka-consumer": run_librdkafka,
    "librdkafka-classic": run_librdkafka,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main() -> int:
    config = json.loads(sys.argv[1])
    app = App(config)
    try:
        RUNNERS[config["kind"]](config, app)
    except Exception:  # noqa: BLE001 - reported to the test, which fails on it
        emit(app.name, "error", error=traceback.format_exc())
        return 1
    emit(app.name, "closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
