"""The APIs the Kafka listener serves itself, with the versions it answers.

One row per API: the service method (``service.py``), the versions, the request -> service
request conversion and the service response -> response values conversion (``convert.py``).
Group APIs are always served here, never forwarded: two coordinators for one group id would be
split brain. The versions are those of Kafka 4.x that kio knows and real clients negotiate
(librdkafka, kafka-python, aiokafka, the Java client); OffsetCommit/OffsetFetch v10 (Kafka 4.2)
address topics by id only (``convert.TOPIC_IDS_VERSION``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..api import Caller
from . import convert as c

API_VERSIONS = 18
METADATA = 3
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
CONSUMER_GROUP_HEARTBEAT = 68
DESCRIBE_CONFIGS = 32
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
INCREMENTAL_ALTER_CONFIGS = 44
PRODUCE, FETCH, DESCRIBE_CLUSTER = 0, 1, 60
INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 22, 25, 26, 28
TRANSACTION_KEYS = frozenset({INIT_PRODUCER_ID, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT})
"""Served with an upstream by the transaction bridge (``transactions.py``): the group's offsets
are ours, the transaction coordinator is the upstream's."""

BETWEEN_BROKERS = frozenset({52, 53, 54, 56, 58, 59, 62, 63, 67, 70, 73, 82, 83, 84, 85, 86, 87})
"""What only brokers and controllers send each other (KRaft's Vote, BeginQuorumEpoch,
EndQuorumEpoch, FetchSnapshot, UpdateRaftVoter; AlterPartition, Envelope, BrokerRegistration,
BrokerHeartbeat, AllocateProducerIds, ControllerRegistration, AssignReplicasToDirs; the share
coordinator's state APIs): Kafka requires CLUSTER_ACTION on the cluster for them, and no client
has a use for them through a coordinator, which is neither."""

NOT_ADVERTISED = frozenset({25, 28, 71, 72}) | BETWEEN_BROKERS
"""Never forwarded: AddOffsetsToTxn and TxnOffsetCommit (the group's offsets are ours: they are
served by the transaction bridge, kafka/transactions.py, with an upstream),
GetTelemetrySubscriptions/PushTelemetry (nothing needs them; librdkafka calls them whenever
they are advertised), and the APIs between brokers (:data:`BETWEEN_BROKERS`)."""


@dataclass(frozen=True, slots=True)
class Served:
    min_version: int
    max_version: int
    method: str
    decode: Callable[[Any, Caller], Any]
    encode: Callable[[Any, int], dict[str, Any]]
    with_names: bool = False


SERVED: dict[int, Served] = {
    8: Served(2, 10, "offset_commit", c.offset_commit_in, c.offset_commit_out),
    9: Served(1, 10, "offset_fetch", c.offset_fetch_in, c.offset_fetch_out),
    10: Served(0, 6, "find_coordinator", c.find_coordinator_in, c.find_coordinator_out),
    11: Served(0, 9, "join_group", c.join_in, c.join_out),
    12: Served(0, 4, "heartbeat", c.classic_heartbeat_in, c.classic_heartbeat_out),
    13: Served(0, 5, "leave_group", c.leave_in, c.leave_out),
    14: Served(0, 5, "sync_group", c.sync_in, c.sync_out),
    15: Served(0, 6, "describe_groups", c.describe_groups_in, c.describe_groups_out),
    16: Served(0, 5, "list_groups", c.list_groups_in, c.list_groups_out),
    32: Served(1, 4, "describe_configs", c.describe_configs_in, c.describe_configs_out),
    42: Served(0, 2, "delete_groups", c.delete_groups_in, c.delete_groups_out),
    44: Served(0, 1, "incremental_alter_configs", c.alter_configs_in, c.alter_configs_out),
    47: Served(0, 0, "offset_delete", c.offset_delete_in, c.offset_delete_out),
    # ACLs and SCRAM credentials (docs/security.md); v0 of the ACL APIs is gone in Kafka 4.
    29: Served(1, 3, "describe_acls", c.describe_acls_in, c.describe_acls_out),
    30: Served(1, 3, "create_acls", c.create_acls_in, c.create_acls_out),
    31: Served(1, 3, "delete_acls", c.delete_acls_in, c.delete_acls_out),
    50: Served(0, 0, "describe_user_scram_credentials", c.describe_users_in, c.describe_users_out),
    51: Served(0, 0, "alter_user_scram_credentials", c.alter_users_in, c.alter_users_out),
    68: Served(
        0,
        1,
        "consumer_group_heartbeat",
        c.heartbeat_in,
        lambda _r, _v: {},  # built by convert.HeartbeatOut (the hot path)
    ),
    69: Served(
        0,
        1,
        "consumer_group_describe",
        c.consumer_group_describe_in,
        lambda _r, _v: {},  # needs topic names: convert.consumer_group_describe_out
        with_names=True,
    ),
}

API_VERSIONS_RANGE = (0, 4)
METADATA_RANGE = (0, 13)
"""Metadata in coordinator-only mode (from the topic registry); v10+ carries topic ids."""
