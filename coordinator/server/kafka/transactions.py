"""Transactions through the Kafka listener (docs/kafka.md, "Transactions"): the group's offsets
are this coordinator's, the transaction coordinator stays upstream.

The listener serves four APIs around the upstream's transaction coordinator:

* **AddOffsetsToTxn (25)** — checked here as Kafka checks it (TRANSACTIONAL_ID WRITE, GROUP
  READ: the group's ACLs are this coordinator's), then forwarded as it is to the node of the
  port it came through (the transaction coordinator the client found through the rewritten
  FindCoordinator): the upstream adds its own offsets partition of the group to the
  transaction, which is what a broker's transaction coordinator does for its group
  coordinator — the transaction then has offsets to complete, so EndTxn is accepted. Once it
  answered, the group joins the producer's transaction here (``Offsets.add_offsets``) —
  unless its epoch is older than one the group has seen of the producer id (a zombie the
  upstream did not fence): then refused as Kafka's transaction coordinator refuses it,
  PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).
* **TxnOffsetCommit (28)** v0–6 (v6, KIP-1319: topics by id) — served
  (``CoordinatorService.txn_offset_commit``): the offsets are pending for the producer. A v5+
  request (transaction version 2: producers no longer send AddOffsetsToTxn) is authorized,
  then preceded by an AddOffsetsToTxn to the upstream's transaction coordinator on the
  producer's behalf; its refusal refuses the commit (PRODUCER_FENCED as INVALID_PRODUCER_EPOCH,
  as Kafka's transaction verification answers its group coordinator).
* **EndTxn (26)** — forwarded, in two steps around it: first the groups holding the producer's
  transaction record that its end is on its way (PREPARE_COMMIT/PREPARE_ABORT, durable), then
  the upstream's answer decides: NONE commits or aborts the pending offsets (records); a fenced
  producer (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED) means the transaction was aborted by
  whoever fenced it (unless it answers an abort sent after a commit was forwarded); any other
  error leaves it prepared (the client retries EndTxn). If the
  outcome cannot be recorded, the client gets CONCURRENT_TRANSACTIONS and retries: it never
  hears of a commit the offsets do not have yet.
* **InitProducerId (22)** for a transactional id — the transaction coordinator aborts an
  ongoing transaction of that id. Before forwarding it, a transaction whose end was forwarded
  but not confirmed (a restart in between) is completed with the EndTxn it was sent: the
  outcome the client asked for, not a guess. Once answered, ongoing transactions of an older
  epoch (never ended through us) are recorded as aborted.

At start (before any transactional request is served) the prepared transactions are
completed the same way. A transaction that ends without passing through here — aborted by the
upstream on timeout, its producer gone, ended while the listener was down — is resolved with
the upstream's DescribeTransactions (KIP-664) when it offers it: every open transaction once
at start, then every ``kafka.upstream.transaction.check.interval.ms`` those that have not
changed for as long: a state that settles it (completed, or
moved on to another epoch or producer id: aborted, since no end of it was forwarded) is applied;
anything else is asked again later. An upstream without DescribeTransactions (Tansu) leaves such
a transaction open — its offsets stay pending, UNSTABLE_OFFSET_COMMIT to stable fetches — until
its producer's next InitProducerId or transaction, which settles it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from coordinator.core.errors import CoordinatorError, CoordinatorNotAvailableError, ErrorCode
from coordinator.core.offsets import commit_error_response
from coordinator.core.records import TransactionState
from coordinator.core.transactions import (
    AddOffsetsToTxn,
    EndTxn,
    GroupTransaction,
    ProducerInitialized,
)
from coordinator.runtime import CoordinatorRuntime

from ..api import Caller, Reply
from . import wire
from .apis import ADD_OFFSETS_TO_TXN, END_TXN, FIND_COORDINATOR, INIT_PRODUCER_ID, TXN_OFFSET_COMMIT
from .convert import txn_offset_commit_in
from .txn_routing import NOT_COORDINATOR, TxnRouting, routed_answer
from .upstream import Upstream, UpstreamClient, UpstreamError

log = logging.getLogger("kip848.kafka")

DESCRIBE_TRANSACTIONS = 65
TXN_OFFSET_COMMIT_RANGE = (0, 6)
ADD_OFFSETS_ON_BEHALF_SINCE = 5
"""TxnOffsetCommit v5+ (transaction version 2): the coordinator adds the offsets."""

INVALID_PRODUCER_EPOCH, PRODUCER_FENCED = 47, 90
FENCED = frozenset({INVALID_PRODUCER_EPOCH, PRODUCER_FENCED})

START_TIMEOUT_S = 10.0


class TransactionBridge:
    """The listener's side of transactions (module doc)."""

    def __init__(
        self, runtime: CoordinatorRuntime, upstream: Upstream, check_ms: int = 30_000
    ) -> None:
        self.runtime = runtime
        self.upstream = upstream
        self.check_ms = check_ms
        self.ready = asyncio.Event()
        self._clients: dict[tuple[str, int], UpstreamClient] = {}
        self._task: asyncio.Task[None] | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._routing: TxnRouting | None = None

    # ------------------------------------------------------------ versions

    def versions(self) -> dict[int, tuple[int, int]]:
        """What the listener offers: the upstream's ranges of the three transaction
        coordinator APIs, and TxnOffsetCommit when the upstream takes AddOffsetsToTxn."""
        offered = self.upstream.versions
        out = {
            k: offered[k] for k in (INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN) if k in offered
        }
        known = wire.kio_versions(TXN_OFFSET_COMMIT)
        if ADD_OFFSETS_TO_TXN in offered and known is not None:
            out[TXN_OFFSET_COMMIT] = (
                max(TXN_OFFSET_COMMIT_RANGE[0], known[0]),
                min(TXN_OFFSET_COMMIT_RANGE[1], known[1]),
            )
        return out

    # ------------------------------------------------------------ lifecycle

    async def start(self, service: Any = None) -> None:
        """Complete the transactions left prepared by the last run (bounded), then serve;
        the periodic check runs from here on, and among several nodes (``service`` routes)
        the expiry of transactional ids (``txn_routing.py``)."""
        try:
            await asyncio.wait_for(self._complete_prepared(None), START_TIMEOUT_S)
        except (UpstreamError, CoordinatorError, TimeoutError) as exc:
            log.warning("Prepared transactions not all completed at start: %s", exc)
        finally:
            self.ready.set()
        loop = asyncio.get_running_loop()
        if DESCRIBE_TRANSACTIONS in self.upstream.versions:
            self._task = loop.create_task(self._check_loop())
        routing = None if service is None else self._routing_of(service)
        if routing is not None:
            self._expiry = loop.create_task(self._expiry_loop(routing))

    async def close(self) -> None:
        for task in (self._task, self._expiry):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    # ------------------------------------------------------------ serving

    async def serve(
        self,
        conn: Any,
        key: int,
        version: int,
        frame: bytes,
        entity: Any,
        caller: Caller,
        service: Any,
    ) -> bytes | Any:
        """The answer frame (with its size) of a transaction API, or — TxnOffsetCommit — the
        service's reply for the listener to encode."""
        await self.ready.wait()
        routing = self._routing_of(service)
        if key == TXN_OFFSET_COMMIT:
            if version >= ADD_OFFSETS_ON_BEHALF_SINCE:
                try:  # authorized before the offsets join the transaction upstream
                    service.check_transaction(
                        caller, "TxnOffsetCommit", entity.transactional_id, entity.group_id
                    )
                    if routing is not None:  # the id mapped to the group, durably, first
                        refusal = await routing.txn_offset_commit(
                            entity.transactional_id, entity.group_id
                        )
                        if refusal is not None:
                            raise refusal
                except (CoordinatorError, TimeoutError) as exc:
                    return Reply(
                        value=commit_error_response(
                            txn_offset_commit_in(entity, None), _coordinator_error(exc)
                        )
                    )
                refused = await self._add_offsets_on_behalf(entity)
                if refused is not None:
                    return refused
            return await service.txn_offset_commit(txn_offset_commit_in(entity, caller), caller)
        if key == ADD_OFFSETS_TO_TXN:
            try:  # the group's ACLs are this coordinator's
                service.check_transaction(
                    caller, "AddOffsetsToTxn", entity.transactional_id, entity.group_id
                )
                code = (
                    None
                    if routing is None
                    else await routing.add_offsets(entity.transactional_id, entity.group_id)
                )
            except (CoordinatorError, TimeoutError) as exc:
                return self._answer(
                    ADD_OFFSETS_TO_TXN, version, frame, _client_code(_coordinator_error(exc))
                )
            if code is not None:
                return self._answer(ADD_OFFSETS_TO_TXN, version, frame, code)
            return await self._add_offsets(conn, version, frame, entity)
        if routing is not None and entity.transactional_id:
            try:
                code = await routing.serves(entity.transactional_id)
            except (CoordinatorError, TimeoutError) as exc:
                code = _client_code(_coordinator_error(exc))
            if code is not None:
                return self._answer(key, version, frame, code)
        if key == END_TXN:
            return await self._end_txn(conn, version, frame, entity)
        return await self._init_producer_id(conn, version, frame, entity)

    def found(
        self, version: int, request: Any, caller: Caller, service: Any
    ) -> Callable[[bytes], bytes] | None:
        """FindCoordinator for transactional ids among several nodes: what changes the
        upstream's answer to name the node serving each (``txn_routing.routed_answer``);
        None with one node, or when every id is served here."""
        routing = self._routing_of(service)
        return None if routing is None else routed_answer(routing, version, request, caller)

    def _routing_of(self, service: Any) -> TxnRouting | None:
        """Among several nodes, the routing of transactional ids (``txn_routing.py``)."""
        routing = getattr(service, "routing", None)
        if routing is None:
            return None
        if self._routing is None or self._routing.routing is not routing:
            self._routing = TxnRouting(self.runtime, routing)
        return self._routing

    async def _forward(self, conn: Any, key: int, version: int, frame: bytes) -> tuple[bytes, Any]:
        """Forward the client's frame on its upstream connection: (answer frame with its size,
        the decoded answer)."""
        answer = await self.upstream.forward_future(conn, key, version, frame)
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        return wire.I32.pack(len(answer)) + answer, wire.decode_response(key, version, answer, pos)

    @staticmethod
    def _answer(key: int, version: int, frame: bytes, code: int) -> bytes:
        """An answer of ours to the client's request (``frame``): ``code``, nothing else."""
        correlation_id = wire.I32.unpack_from(frame, 4)[0]
        cls = wire.response_class(key, version)
        extra = {"producer_id": -1, "producer_epoch": -1} if key == INIT_PRODUCER_ID else {}
        return wire.frame(
            key, version, correlation_id, wire.build(cls, error_code=code, throttle_time=0, **extra)
        )

    async def _add_offsets(self, conn: Any, version: int, frame: bytes, req: Any) -> bytes:
        out, answer = await self._forward(conn, ADD_OFFSETS_TO_TXN, version, frame)
        if int(answer.error_code) != 0:
            return out
        cmd = AddOffsetsToTxn(
            group_id=req.group_id,
            transactional_id=req.transactional_id,
            producer_id=int(req.producer_id),
            producer_epoch=int(req.producer_epoch),
        )
        try:
            await self.runtime.add_offsets_to_txn(cmd)
        except CoordinatorError as exc:
            if exc.code is ErrorCode.NOT_COORDINATOR and self._routing is not None:
                # the group moved meanwhile: the client finds the id's node again
                return self._answer(ADD_OFFSETS_TO_TXN, version, frame, NOT_COORDINATOR)
            if exc.code is ErrorCode.INVALID_PRODUCER_EPOCH:
                # An epoch older than one the group has seen of the producer id (a zombie):
                # answered as Kafka's transaction coordinator answers a stale epoch.
                log.info(
                    "AddOffsetsToTxn v%d of %s refused: %s",
                    version,
                    req.transactional_id,
                    exc.message,
                )
                return self._answer(ADD_OFFSETS_TO_TXN, version, frame, fenced_code(version))
            return self._answer(ADD_OFFSETS_TO_TXN, version, frame, _client_code(exc))
        return out

    async def _end_txn(self, conn: Any, version: int, frame: bytes, req: Any) -> bytes:
        pid, epoch, commit = int(req.producer_id), int(req.producer_epoch), bool(req.committed)
        prepare = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        known = self._knows(pid)
        if known:
            try:
                await self.runtime.end_transaction(
                    EndTxn(producer_id=pid, producer_epoch=epoch, commit=commit, state=prepare)
                )
            except CoordinatorError as exc:
                return self._answer(END_TXN, version, frame, _client_code(exc))
        # An abort forwarded after a commit, answered fenced, does not say that the commit did
        # not happen (transaction version 2 bumps the epoch as it commits): left prepared, the
        # commit sent again decides.
        after_commit = known and not commit and self._committing(pid, epoch)
        out, answer = await self._forward(conn, END_TXN, version, frame)
        code = int(answer.error_code)
        if not known or (code != 0 and (code not in FENCED or after_commit)):
            return out  # not ours, or left prepared: the client retries, a restart completes it
        try:
            await self.runtime.end_transaction(
                EndTxn(producer_id=pid, producer_epoch=epoch, commit=commit and code == 0)
            )
        except CoordinatorError as exc:
            if code == 0:
                return self._answer(END_TXN, version, frame, _client_code(exc))
        return out

    async def _init_producer_id(self, conn: Any, version: int, frame: bytes, req: Any) -> bytes:
        transactional_id = req.transactional_id
        if transactional_id:
            await self._complete_prepared(transactional_id)
        out, answer = await self._forward(conn, INIT_PRODUCER_ID, version, frame)
        if transactional_id and int(answer.error_code) == 0:
            kept = None  # KIP-939: the ongoing transaction goes on under the new epoch
            if getattr(req, "keep_prepared_txn", False):
                ongoing = int(getattr(answer, "ongoing_txn_producer_id", -1))
                if ongoing >= 0:
                    kept = (ongoing, int(answer.ongoing_txn_producer_epoch))
            try:
                await self.runtime.producer_initialized(
                    ProducerInitialized(
                        transactional_id=transactional_id,
                        producer_id=int(answer.producer_id),
                        producer_epoch=int(answer.producer_epoch),
                        kept=kept,
                    )
                )
            except CoordinatorError as exc:
                log.warning(
                    "Transactions of %s not settled after its InitProducerId: %s",
                    transactional_id,
                    exc.message,
                )
        return out

    def _knows(self, producer_id: int) -> bool:
        return any(t.producer_id == producer_id for t in self.runtime.transactions())

    def _committing(self, producer_id: int, producer_epoch: int) -> bool:
        """Was a commit of this transaction forwarded (PREPARE_COMMIT recorded)?"""
        return any(
            t.producer_id == producer_id
            and t.producer_epoch == producer_epoch
            and t.state is TransactionState.PREPARE_COMMIT
            for t in self.runtime.transactions()
        )

    # ------------------------------------------------------------ completing and checking

    async def _complete_prepared(self, transactional_id: str | None) -> None:
        """Send the EndTxn of every transaction whose end was forwarded but not confirmed (of
        ``transactional_id``, or all) to its transaction coordinator again, and record the
        answer: NONE completes it as asked; a fenced producer aborted it."""
        seen: set[tuple[int, int]] = set()
        for t in self.runtime.transactions():
            if t.state is TransactionState.ONGOING or (t.producer_id, t.producer_epoch) in seen:
                continue
            if transactional_id is not None and t.transactional_id != transactional_id:
                continue
            seen.add((t.producer_id, t.producer_epoch))
            commit = t.state is TransactionState.PREPARE_COMMIT
            code = await self._send_end(t, commit)
            if code == 0 or code in FENCED:
                await self.runtime.end_transaction(
                    EndTxn(
                        producer_id=t.producer_id,
                        producer_epoch=t.producer_epoch,
                        commit=commit and code == 0,
                        seen=(t.state, t.updated_ms),
                    )
                )
                log.info(
                    "Transaction %s (producer %d epoch %d) completed: %s.",
                    t.transactional_id,
                    t.producer_id,
                    t.producer_epoch,
                    "committed" if commit and code == 0 else "aborted",
                )
            else:
                log.warning(
                    "Transaction %s (producer %d epoch %d) still prepared: EndTxn answered %s.",
                    t.transactional_id,
                    t.producer_id,
                    t.producer_epoch,
                    _name(code),
                )

    async def _send_end(self, t: GroupTransaction, commit: bool) -> int:
        client = await self._coordinator(t.transactional_id)
        version = self._version(END_TXN)
        answer = await client.call(
            wire.build(
                wire.request_class(END_TXN, version),
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                producer_epoch=t.producer_epoch,
                committed=commit,
            )
        )
        return int(answer.error_code)

    async def _add_offsets_on_behalf(self, req: Any) -> Any:
        """Transaction version 2: add the group's offsets to the producer's transaction at its
        transaction coordinator (what Kafka's group coordinator does for TxnOffsetCommit v5+);
        None when it worked, else the reply that refuses the commit."""
        try:
            client = await self._coordinator(req.transactional_id)
            answer = await client.call(
                wire.build(
                    wire.request_class(ADD_OFFSETS_TO_TXN, self._version(ADD_OFFSETS_TO_TXN)),
                    transactional_id=req.transactional_id,
                    producer_id=req.producer_id,
                    producer_epoch=req.producer_epoch,
                    group_id=req.group_id,
                )
            )
            code = int(answer.error_code)
        except UpstreamError as exc:
            log.warning("AddOffsetsToTxn for %s failed: %s", req.transactional_id, exc)
            code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if code == 0:
            return None
        if code == PRODUCER_FENCED:  # Kafka's verification answers its group coordinator so
            code = INVALID_PRODUCER_EPOCH
        failed = _Failed(code, f"The transaction coordinator answered {_name(code)}.")
        return Reply(value=commit_error_response(txn_offset_commit_in(req, None), failed))

    async def _coordinator(self, transactional_id: str) -> UpstreamClient:
        """A client of the upstream node that coordinates ``transactional_id``."""
        version = min(self._version(FIND_COORDINATOR), 3)
        found = await self.upstream.client.call(
            wire.build(
                wire.request_class(FIND_COORDINATOR, version),
                key=transactional_id,
                key_type=1,
            )
        )
        if int(found.error_code) != 0:
            raise UpstreamError(
                f"FindCoordinator for {transactional_id}: {_name(found.error_code)}"
            )
        address = self.upstream.brokers.get(int(found.node_id), (found.host, int(found.port)))
        client = self._clients.get(address)
        if client is None:
            client = self._clients[address] = self.upstream.new_client(address)
        return client

    def _version(self, key: int) -> int:
        lo, hi = self.upstream.versions[key]
        known = wire.kio_versions(key)
        return min(hi, known[1]) if known is not None else hi

    async def _check_loop(self) -> None:
        """Every open transaction at load (the listener may have missed how it ended while it
        was down), then every check interval those that have not moved for as long."""
        min_age_ms = 0
        while True:
            try:
                await self.check(self.runtime.clock.now_ms(), min_age_ms)
            except (UpstreamError, CoordinatorError) as exc:
                log.warning("Checking open transactions with the upstream failed: %s", exc)
            min_age_ms = self.check_ms
            await asyncio.sleep(self.check_ms / 1000)

    async def _expiry_loop(self, routing: TxnRouting) -> None:
        """Every ``transaction.remove.expired.transaction.cleanup.interval.ms`` (the first one
        after an interval, as Kafka schedules it) the inactive transactional ids' mappings
        are removed (``TxnRouting.expire``)."""
        interval_s = self.runtime.config.transactional_id_cleanup_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                expired = await routing.expire()
            except (CoordinatorError, TimeoutError) as exc:
                log.warning("Expiring transactional ids failed (tried again later): %s", exc)
                continue
            if expired:
                log.info(
                    "Transactional ids expired (transactional.id.expiration.ms): %s",
                    ", ".join(expired),
                )

    async def check(self, now_ms: int, min_age_ms: int | None = None) -> None:
        """Ask the upstream's DescribeTransactions about the transactions that have not moved
        for ``min_age_ms`` (default: a check interval) and apply what settles them (module
        doc)."""
        if min_age_ms is None:
            min_age_ms = self.check_ms
        for t in self.runtime.transactions():
            if now_ms - t.updated_ms < min_age_ms:
                continue
            client = await self._coordinator(t.transactional_id)
            answer = await client.call(
                wire.build(
                    wire.request_class(DESCRIBE_TRANSACTIONS, 0),
                    transactional_ids=[t.transactional_id],
                )
            )
            (state,) = answer.transaction_states
            outcome = settled(t, state)
            if outcome is None:
                continue
            await self.runtime.end_transaction(
                EndTxn(
                    producer_id=t.producer_id,
                    producer_epoch=t.producer_epoch,
                    commit=outcome,
                    seen=(t.state, t.updated_ms),
                )
            )
            log.info(
                "Transaction %s (producer %d epoch %d) %s upstream.",
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                "committed" if outcome else "aborted",
            )


def settled(t: GroupTransaction, described: Any) -> bool | None:
    """What the upstream's DescribeTransactions says of transaction ``t``: True committed,
    False aborted, None not settled (asked again later).

    * the same producer id, at its epoch (or the next: transaction version 2 bumps it at the
      end) in CompleteCommit: committed; in CompleteAbort: aborted;
    * the same producer id and epoch, Ongoing or preparing: still running (None) — for one we
      never forwarded an end of, Ongoing is itself; PrepareCommit/PrepareAbort finish soon;
      likewise at an older epoch than ours: a transaction an InitProducerId with
      KeepPreparedTxn kept (KIP-939) is described at its own epoch, ours being the new one;
    * anything else (another producer id, a later epoch, Empty, Dead, an unknown id): the
      transaction we know is over. One with no end forwarded (ONGOING) was aborted — only an
      EndTxn commits, and they pass through the listener; one whose end was forwarded stays
      unsettled (completed by the producer's next InitProducerId or the next start)."""
    if (
        int(described.error_code) != 0 and int(described.error_code) != 105
    ):  # TRANSACTIONAL_ID_NOT_FOUND
        return None
    state = described.transaction_state
    same = int(described.producer_id) == t.producer_id
    epoch = int(described.producer_epoch)
    if same and epoch in (t.producer_epoch, t.producer_epoch + 1):
        if state == "CompleteCommit":
            return True
        if state == "CompleteAbort":
            return False
    if same and epoch <= t.producer_epoch and state in ("Ongoing", "PrepareCommit", "PrepareAbort"):
        return None  # an older epoch: the transaction an InitProducerId kept (KIP-939)
    if t.state is TransactionState.ONGOING:
        return False
    return None


def fenced_code(version: int) -> int:
    """What Kafka's transaction coordinator answers a stale producer epoch in AddOffsetsToTxn
    (and EndTxn, AddPartitionsToTxn): PRODUCER_FENCED from v2 (KIP-588), INVALID_PRODUCER_EPOCH
    to older clients, which do not know it."""
    return PRODUCER_FENCED if version >= 2 else INVALID_PRODUCER_EPOCH


class _Failed(CoordinatorError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code  # type: ignore[assignment]


def _client_code(exc: CoordinatorError) -> int:
    """Our error as the transaction APIs' clients take it: a failed write is retried as a
    concurrent transaction (retriable for every client), a protocol error is what it is."""
    if exc.code in (
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    ):
        return int(ErrorCode.CONCURRENT_TRANSACTIONS)
    return int(exc.code)


def _coordinator_error(exc: CoordinatorError | TimeoutError) -> CoordinatorError:
    """A routing step that did not finish in time (the cluster log not caught up) as the
    coordinator error it answers."""
    if isinstance(exc, CoordinatorError):
        return exc
    return CoordinatorNotAvailableError(
        "This node has not caught up with the cluster log in time: ask again."
    )


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
