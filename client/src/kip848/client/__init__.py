"""kip848.client: a KIP-848 consumer group member for gRPC consumers (docs/client.md).

Theory of operation
-------------------
* :mod:`.member` is the protocol, sans-IO: a state machine that takes events (heartbeat
  answers, callback completions, pushes, time) and returns actions (send this heartbeat, look
  the coordinator up, run this callback). It holds every rule of the member side of KIP-848 —
  full vs incremental heartbeats, revoke-before-assign reconciliation, acknowledgement,
  fencing and rejoin, the rebalance timeout, back-off, leaving — and nothing else. The
  simulator's client model (``coordinator/sim``) drives this same class, so the seeded
  simulations and the exhaustive explorer check what users run.
* :mod:`.aio` (:class:`GroupMember`) drives it over gRPC on asyncio: FindCoordinator, the
  heartbeat RPC, callbacks, offset commits (sync, async, auto-commit). :mod:`.blocking`
  (:class:`BlockingGroupMember`) runs that on a background loop for threaded programs.
* :mod:`._wire` is the only module that knows protobuf.

The callback contract (Kafka's ``ConsumerRebalanceListener``, for KIP-848)
-----------------------------------------------------------------------------
* ``on_assigned(partitions)`` — the member owns ``partitions`` from the moment it is invoked
  (called only with partitions newly added, never with an empty set).
* ``on_revoked(partitions)`` — the coordinator wants them back: finish with them (commit)
  before returning; the member owns them until it returns and acknowledges right after. If it
  runs longer than the rebalance timeout, the partitions are lost instead (the coordinator
  has fenced the member and may give them away); when it returns, the member rejoins.
* ``on_lost(partitions)`` — the member was fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
  rebalance timeout) or failed: the partitions are no longer its own and may already be
  another member's; do not commit. The member rejoins with epoch 0 after it returns.
* Every owned partition ends with exactly one of on_revoked / on_lost. Callbacks never run
  concurrently. For one partition moving from member A to member B, A's on_revoked has
  returned before B's on_assigned is invoked (unless A was fenced: then on_lost). An
  exception raised by a callback is logged; for the protocol the callback has returned.

Layout
------
This package ships in the ``kip848-client`` distribution (the repository's ``client/`` folder:
its own pyproject, README, tests and version) together with the generated ``kip848.v1``. It
depends only on grpcio and protobuf — never on the coordinator, which depends on this
distribution for the stubs.
"""

from .aio import GroupMember, new_member_id
from .blocking import BlockingGroupMember
from .credentials import tls_credentials, token_file
from .member import CallbackKind, Member, MemberState, Subscription
from .types import (
    ClientError,
    CommitFailedError,
    ErrorCode,
    KafkaError,
    MemberFailedError,
    TopicPartition,
)

__version__ = "0.1.0"

__all__ = [
    "BlockingGroupMember",
    "CallbackKind",
    "ClientError",
    "CommitFailedError",
    "ErrorCode",
    "GroupMember",
    "KafkaError",
    "Member",
    "MemberFailedError",
    "MemberState",
    "Subscription",
    "TopicPartition",
    "__version__",
    "new_member_id",
    "tls_credentials",
    "token_file",
]
