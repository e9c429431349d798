"""A zombie's AddOffsetsToTxn through the Kafka listener (coordinator/server/kafka/
transactions.py): when the upstream's transaction coordinator accepts an epoch older than
one the group has seen of the producer id, the group does not join its transaction, and the
client gets what Kafka's transaction coordinator answers a stale epoch — PRODUCER_FENCED from
v2 (KIP-588), INVALID_PRODUCER_EPOCH before."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.offsets import OffsetCommitPartition, OffsetCommitTopic, TxnOffsetCommit
from coordinator.core.topics import NewTopic
from coordinator.core.transactions import EndTxn
from coordinator.server.kafka import wire
from coordinator.server.kafka.transactions import TransactionBridge

PID = 1000
ADD_OFFSETS_TO_TXN = 25


class _Upstream:
    """An upstream whose transaction coordinator accepts every AddOffsetsToTxn."""

    versions = {ADD_OFFSETS_TO_TXN: (0, 4)}

    async def forward_future(self, _conn: Any, key: int, version: int, frame: bytes) -> bytes:
        correlation_id = wire.I32.unpack_from(frame, 4)[0]
        answer = wire.build(wire.response_class(key, version), error_code=0, throttle_time=0)
        return wire.frame(key, version, correlation_id, answer)[4:]


@pytest.mark.parametrize(("version", "code"), [(0, 47), (1, 47), (2, 90), (3, 90), (4, 90)])
async def test_a_zombies_add_offsets_is_answered_as_the_transaction_coordinator_would(
    version: int, code: int
) -> None:
    from builders import make_runtime

    rt = make_runtime()
    await rt.start()
    try:
        await rt.create_topics([NewTopic(name="in", num_partitions=1)])
        partition = OffsetCommitPartition(partition_index=0, committed_offset=10)
        await rt.txn_offset_commit(
            TxnOffsetCommit(
                transactional_id="t",
                group_id="g",
                producer_id=PID,
                producer_epoch=5,
                topics=(OffsetCommitTopic(name="in", partitions=(partition,)),),
            )
        )
        await rt.end_transaction(EndTxn(producer_id=PID, producer_epoch=5, commit=True))
        bridge = TransactionBridge(rt, _Upstream())  # type: ignore[arg-type]

        async def add_offsets(epoch: int) -> int:
            req = wire.build(
                wire.request_class(ADD_OFFSETS_TO_TXN, version),
                transactional_id="t",
                producer_id=PID,
                producer_epoch=epoch,
                group_id="g",
            )
            out = await bridge._add_offsets(None, version, wire.request_frame(req, 7, "c"), req)
            pos = 8 + (1 if wire.response_header_flexible(ADD_OFFSETS_TO_TXN, version) else 0)
            answer: Any = wire.decode_response(ADD_OFFSETS_TO_TXN, version, out, pos)
            assert wire.I32.unpack_from(out, 4)[0] == 7
            return int(answer.error_code)

        assert await add_offsets(4) == code  # the zombie
        assert rt.transactions() == []  # the group did not join its transaction
        assert await add_offsets(5) == 0  # the producer's next transaction
        assert [(t.group_id, t.producer_epoch) for t in rt.transactions()] == [("g", 5)]
    finally:
        await rt.close()
