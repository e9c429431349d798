"""The transaction APIs the listener forwards, checked where the broker cannot check them
(``admin_guard.py``: the same guard, the same decisions), as Kafka's KafkaApis checks them.
Transactional ids are judged against this coordinator's TRANSACTIONAL_ID ACLs.

* Produce with transactional records: WRITE on its transactional id, else every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (``topic_guard.py`` asks :func:`refuses_produce` first).
* InitProducerId: WRITE on its transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without
  one (an idempotent producer) IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka
  3.0+, ``Authorizer.authorizeByResourceType``), else CLUSTER_AUTHORIZATION_FAILED.
  EndTxn: WRITE on its transactional id. Both are checked before the transaction bridge
  (``transactions.py``) does anything.
* AddPartitionsToTxn v0-3 (clients): WRITE on the transactional id, else every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then WRITE on each topic (internal topics never): if
  any is refused nothing is added — its partitions TOPIC_AUTHORIZATION_FAILED, those of topics
  the registry does not know UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED.
  v4+ (brokers verifying a transaction): CLUSTER_ACTION on the cluster.
* FindCoordinator for transactional ids: DESCRIBE on each id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  per key); for share coordinators CLUSTER_ACTION on the cluster.
* DescribeTransactions: DESCRIBE on each id, and a transaction's topics only those the client
  may describe; ListTransactions lists only the ids the client may describe (silently).
"""

from __future__ import annotations

import struct
from typing import Any

from coordinator.core.errors import ErrorCode
from coordinator.security.acls import CLUSTER_NAME

from ..authorization import CLUSTER, DESCRIBE, TOPIC, TRANSACTIONAL_ID, WRITE
from .admin_guard import (
    CLUSTER_ACTION,
    CLUSTER_DENIED,
    IDEMPOTENT_WRITE,
    MESSAGES,
    PASS,
    TOPIC_DENIED,
    UNKNOWN_TOPIC_OR_PARTITION,
    Decision,
    Guard,
    Rule,
    Values,
    in_order,
    narrowed,
)

TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
TXN_MESSAGE = "Transactional Id authorization failed."
OPERATION_NOT_ATTEMPTED = 55
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's internal topics (``Topic.isInternal``): never added to a transaction by a client."""
TRANSACTION, SHARE = 1, 2
"""FindCoordinator key types."""
BATCH_HEADER = 61
TRANSACTIONAL_BIT = 0x10


def transactional(records: bytes | None) -> bool:
    """Whether a partition's records start with a transactional batch (magic 2, attributes bit
    4), as Kafka's ``RequestUtils.hasTransactionalRecords`` looks at the first batch (Produce
    v3+ carries exactly one)."""
    if not records or len(records) < BATCH_HEADER or records[16] != 2:
        return False
    return bool(struct.unpack_from(">h", records, 21)[0] & TRANSACTIONAL_BIT)


def refuses_produce(g: Guard, produce: Any) -> bool:
    """Whether a Produce with transactional records may not write for its transactional id
    (then every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    if not any(transactional(p.records) for t in produce.topic_data for p in t.partition_data):
        return False
    tid = produce.transactional_id
    return tid is None or not g.allowed(WRITE, TRANSACTIONAL_ID, tid)


def init_producer_id(g: Guard, e: Any) -> Decision:
    tid = e.transactional_id
    if tid is not None:
        if g.allowed(WRITE, TRANSACTIONAL_ID, tid):
            return PASS
        code = TXN_DENIED
    elif g.may(IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or g.service.authz.may_any(
        g.caller, WRITE, TOPIC
    ):
        return PASS
    else:
        g.cluster(IDEMPOTENT_WRITE)  # reported
        code = CLUSTER_DENIED
    return Decision(answer={"error_code": code, "producer_id": -1, "producer_epoch": -1})


def end_txn(g: Guard, e: Any) -> Decision:
    if g.allowed(WRITE, TRANSACTIONAL_ID, e.transactional_id):
        return PASS
    return Decision(answer={"error_code": TXN_DENIED, "producer_id": -1, "producer_epoch": -1})


def add_partitions_to_txn(g: Guard, e: Any) -> Decision:
    if g.version >= 4:
        if g.cluster(CLUSTER_ACTION):
            return PASS
        return Decision(answer={"error_code": CLUSTER_DENIED, "results_by_transaction": []})
    topics = e.v3_and_below_topics
    if not g.allowed(WRITE, TRANSACTIONAL_ID, e.v3_and_below_transactional_id):
        return Decision(answer=_added(topics, lambda _name: TXN_DENIED))
    names = [t.name for t in topics]
    denied = {n for n in names if n in INTERNAL_TOPICS}
    denied |= set(g.service.authz.denied_topics(g.caller, g.api, WRITE, names))
    if not denied:
        return PASS
    exists = g.service.topic_exists

    def code(name: str) -> int:
        if name in denied:
            return TOPIC_DENIED
        return OPERATION_NOT_ATTEMPTED if exists(name) else UNKNOWN_TOPIC_OR_PARTITION

    return Decision(answer=_added(topics, code))


def _added(topics: Any, code: Any) -> Values:
    return {
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": code(t.name)}
                    for p in t.partitions
                ],
            }
            for t in topics
        ]
    }


def find_coordinator(g: Guard, e: Any) -> Decision:
    """A FindCoordinator for transaction (or share) coordinators, forwarded with the keys the
    client may describe; v4+ answers per key, in the request's order."""
    batched = g.version >= 4
    keys = list(e.coordinator_keys) if batched else [e.key]
    if e.key_type == SHARE:
        if g.cluster(CLUSTER_ACTION):
            return PASS
        message = MESSAGES[CLUSTER_DENIED]
        refused = {i: _coordinator(k, CLUSTER_DENIED, message) for i, k in enumerate(keys)}
    elif e.key_type == TRANSACTION:
        refused = {
            i: _coordinator(k, TXN_DENIED, TXN_MESSAGE)
            for i, k in enumerate(keys)
            if not g.allowed(DESCRIBE, TRANSACTIONAL_ID, k)
        }
    else:
        return PASS  # the broker answers INVALID_REQUEST
    if not refused:
        return PASS
    if not batched:
        return Decision(answer=refused[0])
    for answer in refused.values():
        answer["error_message"] = None  # v4+: the code only, as Kafka answers each key
    kept = [k for i, k in enumerate(keys) if i not in refused]
    then = in_order("coordinators", refused, len(keys))
    return narrowed(e, "coordinator_keys", kept, {"coordinators": list(refused.values())}, then)


def _coordinator(key: str, code: int, message: str) -> Values:
    return {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": code,
        "error_message": message,
    }


def describe_transactions(g: Guard, e: Any) -> Decision:
    ids = list(e.transactional_ids)
    refused = {
        i: {"transactional_id": tid, "error_code": TXN_DENIED}
        for i, tid in enumerate(ids)
        if not g.allowed(DESCRIBE, TRANSACTIONAL_ID, tid)
    }
    kept = [tid for i, tid in enumerate(ids) if i not in refused]

    def topics(values: Values) -> None:
        for state in values["transaction_states"]:
            state["topics"] = [
                t for t in state.get("topics") or () if g.may(DESCRIBE, TOPIC, t["topic"])
            ]

    then = in_order("transaction_states", refused, len(ids), topics)
    return narrowed(
        e, "transactional_ids", kept, {"transaction_states": list(refused.values())}, then
    )


def list_transactions(g: Guard, _e: Any) -> Decision:
    def then(values: Values) -> None:
        values["transaction_states"] = [
            s
            for s in values["transaction_states"]
            if g.may(DESCRIBE, TRANSACTIONAL_ID, s["transactional_id"])
        ]

    return Decision(then=then)


RULES: dict[int, Rule] = {
    10: find_coordinator,
    22: init_producer_id,
    24: add_partitions_to_txn,
    26: end_txn,
    65: describe_transactions,
    66: list_transactions,
}
