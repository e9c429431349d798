"""Which coordinator partitions this runtime serves, at which leader epoch, until when.

One node (SQLite, memory) serves every partition, always. Among nodes sharing a PostgreSQL
store (docs/ha.md) a partition is this node's only while it holds the partition's lease: it is
*loading* from the moment the lease is taken until its state is replayed
(COORDINATOR_LOAD_IN_PROGRESS), *serving* once loaded, *unloading* while it is handed over
(its writes finish; new requests get NOT_COORDINATOR), and *not led* otherwise
(NOT_COORDINATOR). While serving, a partition is still refused after the *deadline*: the
moment the node's leases could have expired (``coordinator/cluster/node.py``), checked on
every command with the host's monotonic clock. While the node is *joining* (from its start
until it has loaded its first share) every request, the topic registry's included, gets
COORDINATOR_LOAD_IN_PROGRESS, as a single node's do while it loads its store. While the node
applies other nodes' appends to the cluster log in several steps of the loop
(``Partitions``' catch-up), the topic registry is *held*: a command of it is refused with
:class:`ClusterLogMovedError` (run again once the node has caught up), so none decides on, or
writes between, a catch-up's steps. Sans-IO: the clock is given.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from coordinator.core.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from coordinator.routing import CLUSTER_LOG

from .store.api import Fence, StoreFencedError

__all__ = ["ClusterLogMovedError", "Leadership", "PartitionState", "taken_over"]


class ClusterLogMovedError(CoordinatorNotAvailableError):
    """A batch was refused because another node appended to the cluster log since this node
    last applied it (nothing was written; the node catches up), or a command of the cluster
    log came while this node applies such appends (nothing was run). The cluster log's own
    commands are run again once it has caught up (``Engine.cluster_log_command``): decided on
    the newer state, as Kafka's controller decides every metadata change on the latest one."""


class PartitionState(Enum):
    SERVING = "serving"
    LOADING = "loading"
    UNLOADING = "unloading"
    NOT_LED = "not-led"


SERVING = PartitionState.SERVING


class Leadership:
    """The partitions' states (see the module docstring). ``node_id`` None: one node, every
    partition served for good (no fence, no deadline)."""

    def __init__(
        self,
        partitions: int,
        *,
        node_id: int | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.partitions = partitions
        self.node_id = node_id
        self.shared = node_id is not None
        self.states: list[PartitionState] = [
            PartitionState.NOT_LED if self.shared else SERVING
        ] * partitions
        self.epochs: dict[int, int] = {}
        self.joining = self.shared
        """Until the node has loaded its first share: everything is loading."""
        self.cluster_held = False
        """The node is applying other nodes' appends to the cluster log in several steps:
        no command of the topic registry runs meanwhile."""
        self.deadline: float | None = None
        """No command runs after this ``monotonic()`` reading (None: no deadline)."""
        self.monotonic = monotonic
        self._fence: Fence | None = None
        self.check: Callable[[int], None] = self._check if self.shared else _serve_all
        """Raise unless state machine ``index`` (a partition; ``partitions``: the topic
        registry) serves here now (on every command: nothing to check for one node)."""

    def _check(self, index: int) -> None:
        if self.joining:
            raise CoordinatorLoadInProgressError(
                "This coordinator node is joining the cluster and loading its partitions."
            )
        if index >= self.partitions:
            if self.cluster_held:
                raise ClusterLogMovedError(
                    "This node is applying other nodes' writes to the cluster log: run again "
                    "once applied."
                )
            return
        state = self.states[index]
        if state is SERVING:
            deadline = self.deadline
            if deadline is None or self.monotonic is None or self.monotonic() < deadline:
                return
            raise NotCoordinatorError(
                f"This node's lease of coordinator partition {index} may have expired (it "
                "could not renew it in time): ask FindCoordinator again."
            )
        if state is PartitionState.LOADING:
            raise CoordinatorLoadInProgressError(
                f"Coordinator partition {index} is loading on this node."
            )
        raise NotCoordinatorError(
            f"This node does not lead coordinator partition {index} (of the group): ask "
            "FindCoordinator again."
        )

    def serving(self, index: int) -> bool:
        return self.states[index] is SERVING

    def served(self) -> list[int]:
        return [i for i, s in enumerate(self.states) if s is SERVING]

    def set(self, index: int, state: PartitionState, epoch: int | None = None) -> None:
        self.states[index] = state
        if state is PartitionState.NOT_LED:
            self.epochs.pop(index, None)
        elif epoch is not None:
            self.epochs[index] = epoch
        self._fence = None

    def fence(self) -> Fence | None:
        """What this node's appends are fenced by (None: one node)."""
        if not self.shared:
            return None
        if self._fence is None:
            assert self.node_id is not None
            self._fence = Fence(self.node_id, dict(self.epochs))
        return self._fence


def _serve_all(_index: int) -> None:
    pass


def taken_over(exc: BaseException) -> dict[int, NotCoordinatorError]:
    """The coordinator partitions an append was fenced off from (another node took their
    leases over), each with what its requests in the failed batches are answered:
    NOT_COORDINATOR, as Kafka's coordinator answers a write that failed because its partition's
    leadership moved (NOT_LEADER_OR_FOLLOWER becomes NOT_COORDINATOR), so the client finds the
    new leader at once. Requests of the other partitions of those batches keep the retriable
    COORDINATOR_NOT_AVAILABLE: this node still leads them."""
    if not isinstance(exc, StoreFencedError):
        return {}
    return {
        p: NotCoordinatorError(
            f"This node's lease of coordinator partition {p} was taken over by another node "
            "before the write landed (nothing of it was written): ask FindCoordinator again."
        )
        for p in exc.partitions
        if p != CLUSTER_LOG
    }
