"""Which node serves a transactional id among several coordinator nodes (docs/kafka.md,
"Transactions"; docs/ha.md).

A transaction's group state (its pending offsets, the record that its end is on its way, its
outcome) is kept by the node leading its group's coordinator partition, and only the node that
forwards the transaction's EndTxn learns how it ended. So a transactional id's transaction APIs
are served by the node leading the group its transactions commit offsets to: the cluster log
maps the id to that group (``core/transactional_ids.py``, written when the group is first
named to a node), and every node routes by it:

* **FindCoordinator** for a transactional id mapped to a group names the node leading that
  group, this one included, as FindCoordinator for the group names it: by an id of its own in
  front of the upstream, at its listener, which Metadata lists too (librdkafka takes a
  transaction coordinator only among the brokers Metadata listed, at the address Metadata
  gave: the upstream's broker ids would be at the ports of whichever node answered the
  client's last Metadata, a node that may be gone). An id not mapped: the upstream's answer,
  rewritten to this node's ports, as with one node.
* **AddOffsetsToTxn** (transaction version 1) for group G at a node serving the id (not
  mapped, or mapped to a group it leads): the id is mapped to G (durable) unless it already
  is; when G's leader is another node the answer is NOT_COORDINATOR, nothing forwarded — the
  client looks its transaction coordinator up again, which is now G's leader, and sends it
  there. At a node not serving the id: NOT_COORDINATOR.
* **One group per transaction.** Partitions move between nodes independently, so a
  transaction's offsets must stay in the one group its id is mapped to: an id moves to
  another group only between transactions; while this node holds an open or ending
  transaction of it, another group is refused INVALID_TXN_STATE.
* **InitProducerId and EndTxn** of a mapped id at a node not leading its group:
  NOT_COORDINATOR, nothing forwarded; while the group's partition is still loading here (a
  fail-over), CONCURRENT_TRANSACTIONS (retried): an EndTxn forwarded before the transaction
  is known here would never reach the group. The mapping is read after catching up with the
  cluster log's end in the store, so one written by another node a moment ago (a commit of
  transaction version 2) is seen.
* **TxnOffsetCommit v5+** (transaction version 2, no AddOffsetsToTxn) at the group's leader
  maps the id to the group first (durable before the commit is answered); an id mapped to a
  group another node leads is refused INVALID_TXN_STATE (that node may hold its open
  transaction, and cannot be asked), as is a second group of an open transaction.

**Expiry** (``transactional.id.expiration.ms``): each of the transaction APIs above served
for a mapped id is its activity, written to its record at most once per
``transaction.remove.expired.transaction.cleanup.interval.ms``; every such interval the node
names the ids of the groups it serves that hold no open transaction here to the core
(``core/transactional_ids.py``), which removes the mappings inactive for the expiration.

FindCoordinator answers from the cluster log as this node has applied it (at most a
heartbeat behind another node's write); a client sent to the wrong node is answered
NOT_COORDINATOR there and asks again.

Librdkafka and Kafka's Java client both look the transaction coordinator up again on
NOT_COORDINATOR (AddOffsetsToTxn, EndTxn, InitProducerId, AddPartitionsToTxn) and retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    ErrorCode,
    InvalidTxnStateError,
    NotCoordinatorError,
)
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime

from ..api import Caller, Node
from . import wire
from .admin_guard import read_response
from .apis import FIND_COORDINATOR

log = logging.getLogger("kip848.kafka")

NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
INVALID_TXN_STATE = int(ErrorCode.INVALID_TXN_STATE)
CONCURRENT_TRANSACTIONS = int(ErrorCode.CONCURRENT_TRANSACTIONS)


class TxnRouting:
    """The routing of transactional ids (module doc), for one node of several."""

    def __init__(self, runtime: CoordinatorRuntime, routing: Any) -> None:
        self.runtime = runtime
        self.routing = routing  # server/cluster.py: ClusterRouting

    def leads(self, group_id: str) -> bool:
        """Whether this node leads ``group_id``'s coordinator partition (loading or serving)."""
        node = self.routing.node
        return bool(
            node.leader_of(partition_for(group_id, self.routing.partitions)) == node.node_id
        )

    # ------------------------------------------------------------ FindCoordinator

    def coordinator(self, transactional_id: str, caller: Caller) -> Node | CoordinatorError | None:
        """The node to name for ``transactional_id`` — the leader of its group, this node
        included — or why none can be named now; None when it is not mapped (the upstream's
        answer, rewritten to this node's ports, as with one node)."""
        try:
            group = self.runtime.transactional_id_group(transactional_id)
        except CoordinatorError:
            return None  # the cluster log cannot be read now: as with one node
        if group is None:
            return None
        found: Node | CoordinatorError = self.routing.coordinator(group, caller)
        return found

    # ------------------------------------------------------------ the transaction APIs

    async def add_offsets(self, transactional_id: str, group_id: str) -> int | None:
        """AddOffsetsToTxn: None to serve it here, else the error code to answer."""
        mapped = await self.runtime.latest_transactional_id_group(transactional_id)
        if mapped is not None and not self.leads(mapped):
            return NOT_COORDINATOR  # another node serves the id
        if mapped == group_id:
            await self.runtime.map_transactional_id(transactional_id, group_id)  # its activity
            return None
        if mapped is not None:  # moving to another group: only between transactions
            if not self.loaded(mapped):
                return CONCURRENT_TRANSACTIONS  # its transactions are not known yet: retried
            held = self.held(transactional_id)
            if held:
                log.warning(
                    "AddOffsetsToTxn of transactional id %s for group %s while its transaction "
                    "holds offsets of %s: refused (INVALID_TXN_STATE) — among several "
                    "coordinator nodes a transaction commits offsets to one group "
                    "(docs/kafka.md, Transactions).",
                    transactional_id,
                    group_id,
                    ", ".join(held),
                )
                return INVALID_TXN_STATE
        await self.runtime.map_transactional_id(transactional_id, group_id)
        return None if self.leads(group_id) else NOT_COORDINATOR

    async def serves(self, transactional_id: str) -> int | None:
        """InitProducerId, EndTxn: None when this node serves ``transactional_id`` now (not
        mapped, or mapped to a group it leads and has loaded), as of the cluster log's end in
        the store; else the error code to answer (NOT_COORDINATOR: another node's;
        CONCURRENT_TRANSACTIONS while the group's partition loads, retried: an EndTxn
        forwarded before its transaction is known here would never reach the group)."""
        mapped = await self.runtime.latest_transactional_id_group(transactional_id)
        if mapped is None:
            return None
        if not self.leads(mapped):
            return NOT_COORDINATOR
        if not self.loaded(mapped):
            return CONCURRENT_TRANSACTIONS
        await self.runtime.map_transactional_id(transactional_id, mapped)  # its activity
        return None

    async def txn_offset_commit(
        self, transactional_id: str, group_id: str
    ) -> CoordinatorError | None:
        """TxnOffsetCommit v5+: None when the commit may go on (the id is mapped to the group,
        durably), else the error that refuses it."""
        if not self.leads(group_id):
            return NotCoordinatorError(f"This node does not lead group {group_id}.")
        mapped = await self.runtime.latest_transactional_id_group(transactional_id)
        if mapped is not None and mapped != group_id:
            if not self.leads(mapped):
                return InvalidTxnStateError(
                    f"Transactional id {transactional_id} commits offsets to group {mapped}, "
                    f"which another coordinator node leads: its transactions' offsets in group "
                    f"{group_id} are not served while it may hold an open transaction there."
                )
            if not self.loaded(mapped):
                return CoordinatorLoadInProgressError(f"Group {mapped} is loading.")
            held = self.held(transactional_id)
            if held:
                return InvalidTxnStateError(
                    f"Transactional id {transactional_id} has an open transaction holding "
                    f"offsets of {', '.join(held)}: among several coordinator nodes a "
                    "transaction commits offsets to one group."
                )
        await self.runtime.map_transactional_id(transactional_id, group_id)
        return None

    async def expire(self) -> list[str]:
        """Expiry (``transactional.id.expiration.ms``, ``core/transactional_ids.py``): the ids
        mapped to a group this node serves, holding no open or ending transaction here, are
        named to the core, which removes those inactive for the expiration; the ids removed,
        once durable. A transaction begun meanwhile maps its id again first (its
        AddOffsetsToTxn or TxnOffsetCommit v5+), after the removal in the cluster log."""
        held = {t.transactional_id for t in self.runtime.transactions()}
        named = [
            tid
            for tid, group in self.runtime.committed.transactional_ids.mapped()
            if tid not in held and self.leads(group) and self.loaded(group)
        ]
        return await self.runtime.expire_transactional_ids(named) if named else []

    def loaded(self, group_id: str) -> bool:
        """Whether this node serves ``group_id``'s partition (led and loaded)."""
        return self.runtime.driver.lead.serving(self.runtime.shard_index(group_id))

    def held(self, transactional_id: str) -> list[str]:
        """The groups holding an open or ending transaction of ``transactional_id`` here."""
        return sorted(
            {
                t.group_id
                for t in self.runtime.transactions()
                if t.transactional_id == transactional_id
            }
        )


def routed_answer(
    routing: TxnRouting, version: int, request: Any, caller: Caller
) -> Callable[[bytes], bytes] | None:
    """FindCoordinator for transactional ids (``request``): what changes the upstream's answer
    (rewritten to this node's ports, with its size) so that each id another node serves names
    that node (or the error why none can be named now); None when no id is routed elsewhere
    (the answer goes as it is). Keys the answer refused (authorization) stay refused."""
    keys = getattr(request, "coordinator_keys", None)
    if version < 4 or keys is None:
        keys = [request.key]
    routed = {}
    for k in keys:
        found = routing.coordinator(k, caller)
        if found is not None:
            routed[k] = found
    if not routed:
        return None

    def entry(values: dict[str, Any], key: str) -> None:
        found = routed.get(key)
        if found is None or values.get("error_code"):
            return
        if isinstance(found, CoordinatorError):
            values.update(
                error_code=int(found.code),
                error_message=found.message,
                node_id=-1,
                host="",
                port=-1,
            )
        else:
            values.update(node_id=found.node_id, host=found.host, port=found.port)

    def change(out: bytes) -> bytes:
        correlation_id, resp = read_response(FIND_COORDINATOR, version, out)
        values = wire.as_values(resp)
        if version >= 4:
            for c in values["coordinators"]:
                entry(c, c["key"])
        else:
            entry(values, request.key)
        body = wire.build(type(resp), values)
        return wire.frame(FIND_COORDINATOR, version, correlation_id, body)

    return change
