"""The listener's guard of forwarded APIs (coordinator/server/kafka/admin_guard.py,
txn_guard.py): every API the codec knows has an owner, so nothing is forwarded unchecked in
front of a broker the listener authorizes for; transactional records are told apart as Kafka
tells them."""

from __future__ import annotations

from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.index import api_key_map

from coordinator.server.kafka import apis, topic_guard, txn_guard
from coordinator.server.kafka.listener import GUARD_RULES
from coordinator.server.kafka.served import GUARDED_SERVED


def test_every_api_has_an_owner_while_guarded() -> None:
    """Served here, never forwarded, a data API of the topic guard, served in order while
    guarded (Metadata, DescribeTopicPartitions), the transaction bridge's, or a rule: no API
    the codec knows is left out (a new one fails here until it gets a rule)."""
    owners = {
        "served": set(apis.SERVED) | {apis.API_VERSIONS},
        "never forwarded": set(apis.NOT_ADVERTISED),
        "data": set(topic_guard.GUARDED),
        "served while guarded": set(GUARDED_SERVED),
        "transaction bridge": set(apis.TRANSACTION_KEYS),
        "rule": set(GUARD_RULES),
    }
    owned = set().union(*owners.values())
    assert sorted(set(api_key_map) - owned) == []
    # Each owner once (the bridge's InitProducerId and EndTxn are checked by their rule first).
    bridge_checked = owners["transaction bridge"] & owners["rule"]
    assert bridge_checked == {apis.INIT_PRODUCER_ID, apis.END_TXN}
    assert not owners["never forwarded"] & (owned - owners["never forwarded"])
    assert {52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82, 83, 84, 85, 86, 87} <= set(
        apis.BETWEEN_BROKERS
    )


def batch(transactional: bool) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=1 << 20,
        transactional=transactional,
        producer_id=7 if transactional else -1,
        producer_epoch=0 if transactional else -1,
        base_sequence=0 if transactional else -1,
    )
    builder.append(timestamp=1, key=None, value=b"v", headers=[])
    builder.close()
    return bytes(builder.buffer())


def test_transactional_records_are_told_by_their_first_batch() -> None:
    assert txn_guard.transactional(batch(True))
    assert not txn_guard.transactional(batch(False))
    assert not txn_guard.transactional(None)
    assert not txn_guard.transactional(b"")
    assert not txn_guard.transactional(batch(True)[:60])  # too short to be a batch
    old = bytearray(batch(True))
    old[16] = 1  # magic 1: no transactions
    assert not txn_guard.transactional(bytes(old))
