"""The transaction bridge's reading of DescribeTransactions (coordinator/server/kafka/
transactions.py ``settled``): what settles a transaction the listener saw no outcome of, and
what leaves it to be asked about again — never a guess."""

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
