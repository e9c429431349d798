"""tests/e2e/eos_app.py's transaction (``transact``) with fake clients, each error as
librdkafka raises it: a retriable one is retried as librdkafka documents it
(``send_offsets_to_transaction`` with the same offsets and group metadata, ``commit_transaction``
called again: it resumes the commit going on in the background), never followed by a rewind or
a new transaction; an abortable one aborts and rewinds to the committed offsets; retries that
keep failing end the application (its restart's InitProducerId settles the transaction)."""

from __future__ import annotations

from typing import Any

import eos_app
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

GROUP = object()  # the consumer's group metadata (opaque)


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return f"r{self._offset}".encode()


class FakeProducer:
    """Records its calls; ``failures`` maps a method to the errors its next calls raise."""

    def __init__(self, **failures: list[KafkaError]) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.failures = failures

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        errors = self.failures.get(call[0])
        if errors:
            raise KafkaException(errors.pop(0))

    def begin_transaction(self) -> None:
        self._call("begin_transaction")

    def produce(self, topic: str, value: bytes, partition: int) -> None:
        self._call("produce", topic, value.decode().rsplit(":", 1)[0], partition)

    def send_offsets_to_transaction(self, positions: Any, group: Any, timeout: float) -> None:
        offsets = [(tp.topic, tp.partition, tp.offset) for tp in positions]
        self._call("send_offsets_to_transaction", offsets, group is GROUP)

    def commit_transaction(self, timeout: float) -> None:
        self._call("commit_transaction")

    def abort_transaction(self, timeout: float) -> None:
        self._call("abort_transaction")


class FakeConsumer:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def consumer_group_metadata(self) -> object:
        return GROUP

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("in", 0)]

    def committed(self, partitions: Any, timeout: float) -> list[TopicPartition]:
        self.calls.append(("committed",))
        return [TopicPartition("in", 0, 5)]

    def seek(self, tp: TopicPartition) -> None:
        self.calls.append(("seek", tp.topic, tp.partition, tp.offset))


def timed_out() -> KafkaError:
    return KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True)


def run(producer: FakeProducer) -> tuple[str, FakeConsumer]:
    consumer = FakeConsumer()
    batch = [Message(5), Message(6)]
    config = {"output": "out", "delay_s": 0}
    return eos_app.transact(producer, consumer, batch, config, "t/1/1"), consumer  # type: ignore[arg-type]


WRITES = [
    ("begin_transaction",),
    ("produce", "out", "0:5:r5", 0),
    ("produce", "out", "0:6:r6", 0),
]
SEND = ("send_offsets_to_transaction", [("in", 0, 7)], True)


def test_a_commit_that_timed_out_is_resumed_not_rewound() -> None:
    producer = FakeProducer(commit_transaction=[timed_out(), timed_out()])
    outcome, consumer = run(producer)
    assert outcome == "committed"
    assert producer.calls == [*WRITES, SEND] + [("commit_transaction",)] * 3
    assert consumer.calls == []


def test_a_retriable_send_offsets_is_sent_again_with_the_same_offsets_and_metadata() -> None:
    producer = FakeProducer(send_offsets_to_transaction=[timed_out()])
    outcome, consumer = run(producer)
    assert outcome == "committed"
    assert producer.calls == [*WRITES, SEND, SEND, ("commit_transaction",)]
    assert consumer.calls == []


def test_an_abortable_error_aborts_and_rewinds() -> None:
    fenced = KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "zombie", txn_requires_abort=True)
    producer = FakeProducer(send_offsets_to_transaction=[fenced])
    outcome, consumer = run(producer)
    assert outcome == "aborted"
    assert producer.calls == [*WRITES, SEND, ("abort_transaction",)]
    assert consumer.calls == [("committed",), ("seek", "in", 0, 5)]


@pytest.mark.parametrize("method", ["send_offsets_to_transaction", "commit_transaction"])
def test_retries_that_keep_failing_end_the_application(method: str) -> None:
    producer = FakeProducer(**{method: [timed_out() for _ in range(eos_app.ATTEMPTS)]})
    outcome, consumer = run(producer)
    assert outcome == "fatal"
    assert [c for c in producer.calls if c[0] == method] == [
        next(c for c in producer.calls if c[0] == method)
    ] * eos_app.ATTEMPTS
    assert ("abort_transaction",) not in producer.calls
    assert consumer.calls == []
