"""The groups of a simulation (``--groups G``, ``--coordinator-partitions P``): each with its own
clients, all on the same topics, hashed onto the coordinator partitions by the runtime's own
routing (``coordinator.routing.partition_for``), and the reads their clients make.

A one-group run has the one group ``grp`` (its seeds replay as they always did). With several
groups, group ``k`` is named so that Kafka's ``partitionFor`` puts it on partition ``k % P``
(``g<k>``, else the first ``g<k>-<j>`` that lands there): every partition leads a group, and
with ``G > P`` some lead several, so one batch holds records of several partitions and of
several groups of one partition.

Reads (``SimParams.multi``): on each heartbeat tick a client may read its group, from a random
stream of its own (the other choices of a seed stay where they were) — OffsetFetch and
ConsumerGroupDescribe answered from the group's committed state (judged against its durable
state, I8), or a stable OffsetFetch (``require_stable``) answered once the group's own write is
durable (judged then: only durable offsets).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from coordinator.core.offsets import OffsetFetchGroup
from coordinator.routing import partition_for

from .params import GROUP

READ_RATE = 0.3
"""Chance that a client's heartbeat tick also reads its group (with several groups)."""
READS = ("offset-fetch", "describe", "offset-fetch-stable")


@dataclass(slots=True)
class SimGroup:
    """One group of a simulation and what the simulation tracks of it."""

    gid: str
    number: int
    clients: list[int]  # the simulation's indexes of its clients
    # (topic id, partition) -> the last offset a commit of it was answered accepted with
    committed: dict[tuple[str, int], int] = field(default_factory=dict)
    # classic generation -> the metadata snapshot its leader's assignment was computed with
    # (the last SyncGroup sent with assignments for it; convergence.known_topics)
    classic_plans: dict[int, tuple] = field(default_factory=dict)
    # classic generation -> what its leader's assignment held back for claimants (KIP-429):
    # (topic name, partition) -> the member ids that claimed it (convergence.orphaned_withheld)
    classic_withheld: dict[int, dict[tuple[str, int], tuple[str, ...]]] = field(
        default_factory=dict
    )
    # classic generation -> the subscription metadata of the consumer group a downgrade made
    # it from (convergence.known_topics); the last consumer group's, until then
    downgraded: dict[int, tuple] = field(default_factory=dict)
    consumer_metadata: tuple | None = None


def group_names(groups: int, partitions: int) -> list[str]:
    """The groups' ids (see the module doc)."""
    if groups == 1:
        return [GROUP]
    names = []
    for k in range(groups):
        want = k % partitions
        for j in range(64 * partitions):  # bounded: a name lands on each partition ~1/P
            name = f"g{k}" if j == 0 else f"g{k}-{j}"
            if partition_for(name, partitions) == want:
                names.append(name)
                break
        else:  # pragma: no cover - Java's String.hashCode spreads these names
            raise ValueError(f"no group name lands on coordinator partition {want}")
    return names


def new_groups(groups: int, partitions: int, members: int) -> list[SimGroup]:
    return [
        SimGroup(gid=gid, number=k, clients=list(range(k * members, (k + 1) * members)))
        for k, gid in enumerate(group_names(groups, partitions))
    ]


class GroupReads:
    """The reads clients make of their groups (see the module doc)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.rng = random.Random(f"{sim.p.seed}-reads")

    def maybe_read(self, i: int) -> None:
        sim = self.sim
        if not sim.p.multi or self.rng.random() >= READ_RATE:
            return
        gid = sim.clients[i].group_id
        kind = self.rng.choice(READS)
        sim.summary.events[f"read-{kind}"] += 1
        coord = sim.coord
        if kind == "describe":
            coord.isolation.committed_read(gid, "ConsumerGroupDescribe", _describe(gid))
        elif kind == "offset-fetch":
            fetch = OffsetFetchGroup(group_id=gid)
            coord.isolation.committed_read(gid, "OffsetFetch", partial(_fetch, fetch))
        else:
            fetch = OffsetFetchGroup(group_id=gid, require_stable=True)
            coord.read(gid, partial(_fetch, fetch), lost=_nothing)


def _describe(gid: str) -> Any:
    return lambda shard: shard.describe_group(gid)


def _fetch(fetch: OffsetFetchGroup, shard: Any) -> Any:
    return shard.offset_fetch(fetch)


def _nothing() -> None:
    """A read whose answer is lost with its write: the client asks nothing more."""
