"""An exactly-once consume-transform-produce application (confluent-kafka), in a process of its
own, for tests/e2e/test_kafka_transactions.py:

    python tests/e2e/eos_app.py '{"bootstrap": ..., "group": ..., "input": ..., "output": ...,
                                  "transactional_id": ..., "protocol": "consumer"|"classic",
                                  "idle_s": 8, "delay_s": 0, "producer": {...}}'

A read_committed consumer (no auto-commit) and a transactional producer: for each batch it
polled, one transaction writes every record's output (value
``<partition>:<offset>:<input>:<transactional id>/<pid>/<transaction>``, to the same partition of
the output topic; the last field says which process and which of its transactions wrote it) and
commits the inputs' next offsets with ``send_offsets_to_transaction`` — the canonical loop of
Kafka's exactly-once semantics. An abortable error aborts the transaction and rewinds to the
committed offsets; a retriable one is retried (``transact``); a fatal one (the producer fenced,
or retries that kept failing) ends the process with exit code 3. It exits
0 after ``idle_s`` without input. ``delay_s``: how long each transaction waits between sending
its offsets and committing (so that kills and rebalances land inside transactions, with offsets
pending). ``producer``, ``consumer``: more of the producer's and the consumer's settings
(librdkafka's names).

Each line of stdout is JSON, with the time it was written (``at``): the process's start
(``{"started": pid}``), each assignment (with the offsets it starts at) and revocation, each
rewind, and each transaction's end (``{"committed": n, ...}``, ``{"aborted": ...}``,
``{"retry": ...}``, ``{"fatal": ...}``) with its name (``txn``, as in its outputs) and the
offsets it sent.

**Where an assigned partition starts.** The consumer does not let librdkafka look up the
committed offsets of the partitions it is given: it asks for them itself (``committed()``, which
with read_committed requires stable offsets and waits while another producer's transaction
holds offsets of the partition pending) and assigns each partition at its offset (the beginning
when the group has none: ``auto.offset.reset=earliest``). librdkafka's own lookup (2.16) starts a
partition at ``auto.offset.reset`` when an OffsetFetch that was answered UNSTABLE_OFFSET_COMMIT
for it is handled after the assignment changed (a rebalance that gave the partition back, or
any incremental change): its assignment code puts the partition back on its pending list with
the answer's offset, which is −1, INVALID, and a pending partition at INVALID is started at
``auto.offset.reset`` — here the beginning, so the inputs up to the pending offsets are
processed again and their outputs committed twice (any broker answers a pending partition
−1 with UNSTABLE_OFFSET_COMMIT, Kafka's own group coordinator too). A rewind waits for stable
offsets the same way, and never takes a partition it could not read for one without offsets.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

TIMEOUT_S = 30.0
ATTEMPTS = 5
"""Calls of send_offsets_to_transaction or commit_transaction while they fail retriably."""
STABLE_WAIT_S = 90.0
"""How long an assignment or a rewind waits for the committed offsets to be stable (another
producer's transaction ends, or an InitProducerId of its transactional id aborts it)."""


def new_consumer(config: dict[str, Any]) -> Consumer:
    """The application's read_committed consumer of ``config["group"]`` (not subscribed yet)."""
    return Consumer(
        {
            "bootstrap.servers": config["bootstrap"],
            "group.id": config["group"],
            "group.protocol": config.get("protocol", "consumer"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": "eos-consumer",
            **(
                {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
                if config.get("protocol") == "classic"
                else {}
            ),
            **config.get("consumer", {}),
        }
    )


def subscribe(consumer: Consumer, topics: list[str], protocol: str) -> None:
    """Subscribe; each partition assigned starts at its stable committed offset (module doc).
    KIP-848's protocol assigns incrementally, the classic one (eager assignors) in whole."""
    incremental = protocol == "consumer"

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        positions = committed_positions(c, partitions)
        say({"assigned": {f"{tp.topic}:{tp.partition}": tp.offset for tp in positions}})
        if incremental:
            c.incremental_assign(positions)
        else:
            c.assign(positions)

    consumer.subscribe(
        topics,
        on_assign=on_assign,
        on_revoke=lambda _c, tps: say({"revoked": [f"{tp.topic}:{tp.partition}" for tp in tps]}),
    )


def main(config: dict[str, Any]) -> int:
    consumer = new_consumer(config)
    producer = Producer(
        {
            "bootstrap.servers": config["bootstrap"],
            "transactional.id": config["transactional_id"],
            "linger.ms": 5,
            "client.id": "eos-producer",
            **config.get("producer", {}),
        }
    )
    pid = os.getpid()
    say({"started": pid, "transactional_id": config["transactional_id"]})
    producer.init_transactions(TIMEOUT_S)
    subscribe(consumer, [config["input"]], config.get("protocol", "consumer"))
    seq = 0
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < config.get("idle_s", 8):
            batch = [m for m in consumer.consume(num_messages=5, timeout=0.5) if not m.error()]
            if not batch:
                continue
            idle_since = time.monotonic()
            seq += 1
            outcome = transact(
                producer, consumer, batch, config, f"{config['transactional_id']}/{pid}/{seq}"
            )
            if outcome == "fatal":
                return 3
    finally:
        consumer.close()
    return 0


def transact(
    producer: Producer, consumer: Consumer, batch: list[Any], config: dict[str, Any], tag: str
) -> str:
    """One transaction: the batch's outputs and its inputs' next offsets; "committed",
    "aborted" (an abortable error: aborted, and the consumer rewound to the committed offsets)
    or "fatal" (the producer cannot go on: the process ends, and its restart's InitProducerId
    settles what it left). A retriable error is retried as librdkafka documents it:
    ``send_offsets_to_transaction`` with the same offsets and group metadata, and
    ``commit_transaction`` called again, which resumes the commit going on in the background
    (a timeout); never a rewind or a new transaction while this one may still commit."""
    sent: dict[str, int] = {}
    try:
        producer.begin_transaction()
        for m in batch:
            value = f"{m.partition()}:{m.offset()}:{m.value().decode()}:{tag}"
            producer.produce(config["output"], value.encode(), partition=m.partition())
        # The batch's own next offsets: a partition revoked since it was polled is committed
        # with the rest, and the group refuses it if it is no longer ours (an abortable error:
        # the transaction, its output too, is aborted).
        nexts: dict[tuple[str, int], int] = {}
        for m in batch:
            nexts[(m.topic(), m.partition())] = m.offset() + 1
        positions = [TopicPartition(t, p, o) for (t, p), o in sorted(nexts.items())]
        sent = {str(tp.partition): tp.offset for tp in positions}
        group = consumer.consumer_group_metadata()
        retrying(lambda: producer.send_offsets_to_transaction(positions, group, TIMEOUT_S), tag)
        time.sleep(config.get("delay_s", 0))
        retrying(lambda: producer.commit_transaction(TIMEOUT_S), tag)
        say({"committed": len(batch), "txn": tag, "offsets": sent})
        return "committed"
    except KafkaException as exc:
        error = exc.args[0]
        if error.txn_requires_abort():
            producer.abort_transaction(TIMEOUT_S)
            rewind(consumer)
            say({"aborted": str(error), "txn": tag, "offsets": sent})
            return "aborted"
        say({"fatal": str(error), "txn": tag, "offsets": sent})
        return "fatal"


def retrying(call: Callable[[], None], tag: str) -> None:
    """``call``, again after each retriable error, up to ``ATTEMPTS`` calls in all (each retry
    printed); any other error, or the last one, is raised."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            call()
            return
        except KafkaException as exc:
            error = exc.args[0]
            if (
                not error.retriable()
                or error.txn_requires_abort()
                or error.fatal()
                or attempt == ATTEMPTS
            ):
                raise
            say({"retry": str(error), "txn": tag, "attempt": attempt})


def say(line: dict[str, Any]) -> None:
    print(json.dumps({**line, "at": round(time.time(), 3)}), flush=True)


def committed_positions(
    consumer: Consumer, partitions: list[TopicPartition]
) -> list[TopicPartition]:
    """Each partition at its committed offset once stable, the beginning if the group has none.
    ``committed()`` retries UNSTABLE_OFFSET_COMMIT for its timeout; a partition still in error
    then (or a retriable failure of the whole call) is asked again, up to ``STABLE_WAIT_S``;
    after that the error is raised: a partition is never started without its offset."""
    deadline = time.monotonic() + STABLE_WAIT_S
    asked = [TopicPartition(tp.topic, tp.partition) for tp in partitions]
    while True:
        try:
            answer = consumer.committed(asked, TIMEOUT_S)
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise
            continue
        errors = [tp.error for tp in answer if tp.error is not None]
        if not errors:
            return [
                TopicPartition(
                    tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                )
                for tp in answer
            ]
        if time.monotonic() > deadline:
            raise KafkaException(errors[0])


def rewind(consumer: Consumer) -> None:
    """Back to the committed offsets (the aborted transaction's inputs are read again)."""
    assignment = consumer.assignment()
    if not assignment:
        return
    positions = committed_positions(consumer, assignment)
    for tp in positions:
        consumer.seek(tp)
    say({"rewound": {f"{tp.topic}:{tp.partition}": tp.offset for tp in positions}})


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
