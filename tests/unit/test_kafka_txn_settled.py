"""The transaction bridge's reading of DescribeTransactions (coordinator/server/kafka/
transactions.py ``settled``): what settles a transaction the listener saw no outcome of, and
what leaves it to be asked about again — never a guess; and that an answer moves only the
transaction it was asked about."""

from __future__ import annotations

import pytest

from coordinator.core.records import TransactionState as S
from coordinator.core.transactions import GroupTransaction
from coordinator.server.kafka import wire
from coordinator.server.kafka.transactions import settled

PID, EPOCH = 1000, 3


def ours(state: S) -> GroupTransaction:
    return GroupTransaction(
        group_id="g",
        producer_id=PID,
        transactional_id="t",
        producer_epoch=EPOCH,
        state=state,
        updated_ms=0,
    )


def described(state: str, pid: int = PID, epoch: int = EPOCH, error: int = 0) -> object:
    cls = wire.response_class(65, 0)
    answer = wire.build(
        cls,
        transaction_states=[
            {
                "error_code": error,
                "transactional_id": "t",
                "transaction_state": state,
                "producer_id": pid,
                "producer_epoch": epoch,
            }
        ],
    )
    return answer.transaction_states[0]  # type: ignore[attr-defined]


ANY = (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)


@pytest.mark.parametrize(
    ("ours_in", "upstream", "outcome"),
    [
        # the upstream completed our transaction: its outcome, whatever we recorded
        *((s, described("CompleteCommit"), True) for s in ANY),
        *((s, described("CompleteAbort"), False) for s in ANY),
        # transaction version 2 bumps the epoch when the transaction ends
        *((s, described("CompleteCommit", epoch=EPOCH + 1), True) for s in ANY),
        *((s, described("CompleteAbort", epoch=EPOCH + 1), False) for s in ANY),
        # still running or ending at the upstream: asked again later
        *(
            (s, described(u), None)
            for s in ANY
            for u in ("Ongoing", "PrepareCommit", "PrepareAbort")
        ),
        # kept by an InitProducerId (KIP-939): described at its own epoch, ours the new one
        *(
            (s, described(u, epoch=EPOCH - 1), None)
            for s in ANY
            for u in ("Ongoing", "PrepareCommit")
        ),
        # over without an end through us: only an EndTxn commits, so an ongoing one was aborted
        (S.ONGOING, described("Ongoing", epoch=EPOCH + 1), False),  # timed out, fenced
        (S.ONGOING, described("Empty", epoch=EPOCH + 1), False),
        (S.ONGOING, described("Ongoing", pid=PID + 1, epoch=0), False),  # a new producer id
        (S.ONGOING, described("Dead", epoch=-1, pid=-1), False),
        (S.ONGOING, described("", pid=-1, epoch=-1, error=105), False),  # id not found
        # one whose end we forwarded: completed by that EndTxn sent again, not here
        (S.PREPARE_COMMIT, described("Ongoing", epoch=EPOCH + 1), None),
        (S.PREPARE_ABORT, described("Empty", pid=PID + 1, epoch=0), None),
        (S.PREPARE_COMMIT, described("", pid=-1, epoch=-1, error=105), None),
        # the upstream could not say
        (S.ONGOING, described("", error=15), None),  # COORDINATOR_NOT_AVAILABLE
        (S.ONGOING, described("", error=53), None),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ],
)
def test_settled(ours_in: S, upstream: object, outcome: bool | None) -> None:
    assert settled(ours(ours_in), upstream) is outcome


class _Upstream:
    """What the bridge reads of an upstream (only its offered versions here)."""

    versions = {65: (0, 0)}


async def test_a_late_answer_does_not_move_the_next_transaction_of_the_same_epoch() -> None:
    """The periodic check asks about a transaction that has not moved for a while; while the
    answer (CompleteCommit) is on its way, the producer ends it through the listener and
    begins its next one with the same epoch (transaction version 1). The answer is about the
    first: the second stays pending (before, it was committed with the first's outcome)."""
    from builders import START_MS, make_runtime

    from coordinator.core.offsets import (
        OffsetCommitPartition,
        OffsetCommitTopic,
        OffsetFetchGroup,
        OffsetFetchTopic,
        TxnOffsetCommit,
    )
    from coordinator.core.topics import NewTopic
    from coordinator.core.transactions import EndTxn
    from coordinator.server.kafka.transactions import TransactionBridge

    rt = make_runtime()
    await rt.start()
    await rt.create_topics([NewTopic(name="in", num_partitions=1)])

    def txn_commit(offset: int) -> TxnOffsetCommit:
        partition = OffsetCommitPartition(partition_index=0, committed_offset=offset)
        return TxnOffsetCommit(
            transactional_id="t",
            group_id="g",
            producer_id=PID,
            producer_epoch=EPOCH,
            topics=(OffsetCommitTopic(name="in", partitions=(partition,)),),
        )

    async def fetch(stable: bool) -> tuple[int, int]:
        (answer,) = await rt.offset_fetch(
            [
                OffsetFetchGroup(
                    group_id="g",
                    topics=(OffsetFetchTopic(name="in", partition_indexes=(0,)),),
                    require_stable=stable,
                )
            ]
        )
        (p,) = answer.topics[0].partitions
        return p.committed_offset, int(p.error_code)

    await rt.txn_offset_commit(txn_commit(10))
    await rt.advance_time(40_000)
    bridge = TransactionBridge(rt, _Upstream(), check_ms=30_000)  # type: ignore[arg-type]

    class _Client:
        async def call(self, _request: object) -> object:
            # Meanwhile, through the listener: the end of the first, then the second begins.
            for state in (S.PREPARE_COMMIT, None):
                await rt.end_transaction(
                    EndTxn(producer_id=PID, producer_epoch=EPOCH, commit=True, state=state)
                )
            await rt.txn_offset_commit(txn_commit(20))
            return wire.build(
                wire.response_class(65, 0),
                transaction_states=[
                    {
                        "error_code": 0,
                        "transactional_id": "t",
                        "transaction_state": "CompleteCommit",
                        "producer_id": PID,
                        "producer_epoch": EPOCH,
                    }
                ],
            )

    async def coordinator(_transactional_id: str) -> _Client:
        return _Client()

    bridge._coordinator = coordinator  # type: ignore[method-assign]
    await bridge.check(START_MS + 40_000)
    assert await fetch(False) == (10, 0)
    assert await fetch(True) == (-1, 88)  # the second still pending: UNSTABLE_OFFSET_COMMIT
    [t] = rt.transactions()
    assert (t.state, t.updated_ms) == (S.ONGOING, START_MS + 40_000)
    await rt.close()
