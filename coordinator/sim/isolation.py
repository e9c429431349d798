"""Invariant I8 of a simulation: groups and coordinator partitions isolated from each other's
failed writes (``I8-groups-isolated-from-failed-writes``).

The runtime batches the records of several partitions, and of several groups of a partition,
into one append (``driver.py``). When that append fails it rolls back exactly the state
machines with records in the failed batches (``Batch.start_marks``); reads answer from each
group's committed state (``reads.py``); answers are released only once what they say is
durable. :class:`Isolation` judges that, on the runtime's own driver:

* **Rollback.** At every failed write, each partition without records in the failed batches
  keeps exactly the state it had (every group of it, every offset), and each partition with
  records in them is back at its durable state (its I4 replica), unless the core was told of
  a watched write failing there (a classic leader's SyncGroup: its reaction is a command of its
  own, judged by I4 once the coordinator is idle).
* **Answers carry durable state only.** An accepted offset commit's answer names only offsets
  a durable record holds; a ConsumerGroupHeartbeat answered with a member epoch names one a
  durable record gave that member; a stable OffsetFetch waits for a batch with a change of its
  own group and answers only durable offsets; a read of a group's committed state
  (OffsetFetch, ConsumerGroupDescribe) equals the same read of the partition's durable state;
  and only a request of a partition with records in a failed write is answered its failure.
* **Acknowledged writes survive.** After every failed write and every coordinator restart, each
  offset a group's commit was answered with still stands (unless its topic is gone since).

Everything durable is seen through the I4 replicas' feed (:meth:`durable`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coordinator.core import records as r
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.errors import CoordinatorError, CoordinatorNotAvailableError
from coordinator.core.offsets import OffsetCommit

from . import invariants as inv
from .report import diff

Snapshot = dict[str, Any]
WRITE_FAILED = "The write to the record store failed"
"""How the driver's answer to a request behind a failed write begins (``Driver.write_failed``)."""


def group_part(snapshot: Snapshot, group_id: str) -> dict[str, Any]:
    """One group's part of a shard's snapshot (consumer group, classic group, offsets)."""
    return {
        k: v[group_id]
        for k in ("groups", "classic_groups", "offsets")
        if isinstance(v := snapshot.get(k), dict) and group_id in v
    }


def in_memory(shard: Any) -> dict[str, Any]:
    """What a shard holds besides its records (a snapshot has only what replay determines): the
    classic groups' rebalance state (Kafka keeps it in memory) and the joins parked in consumer
    groups."""
    return {
        "classic": {
            gid: (g.state.value, int(g.generation), g.leader_id, g.protocol_name, sorted(g.members))
            for gid, g in sorted(shard.classic_groups.items())
        },
        "parked": {g.group_id: sorted(g.waiting) for g in shard.groups.values() if g.waiting},
    }


class Isolation:
    """I8 over one simulated coordinator (see the module doc)."""

    def __init__(self, coord: Any) -> None:
        self.coord = coord
        self.epochs: set[tuple[str, str, int]] = set()  # (group, member, epoch) ever durable
        self.offsets: set[tuple[str, str, int, int]] = set()  # (group, topic, p, offset) ditto
        self.rolled: set[int] = set()  # the partitions the last failed write rolled back

    @property
    def sim(self) -> Any:
        return self.coord.sim

    def _fail(self, message: str) -> None:
        self.sim._fail(inv.GROUPS_ISOLATED, message)

    # ------------------------------------------------------------------ what is durable

    def durable(self, record: r.Record) -> None:
        key, value = record.key, record.value
        if value is None:
            return
        if isinstance(key, r.OffsetCommitKey):
            self.offsets.add((key.group_id, key.topic, key.partition, value.offset))  # type: ignore[attr-defined]
        elif isinstance(key, r.ConsumerGroupCurrentMemberAssignmentKey):
            self.epochs.add((key.group_id, key.member_id, value.member_epoch))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ answers

    def answered(self, req: Any, response: Any) -> None:
        """A request of a group answered ``response`` (ok): it names durable state only."""
        if isinstance(req, ConsumerGroupHeartbeat):
            epoch = response.member_epoch
            if epoch > 0 and (req.group_id, req.member_id, epoch) not in self.epochs:
                self._fail(
                    f"{req.member_id} of group {req.group_id} was answered member epoch {epoch}, "
                    "which no durable record gave it (state of a write that was not made "
                    "durable, or failed)"
                )
        elif isinstance(req, OffsetCommit):
            sent = {
                (t.topic_id, p.partition_index): p.committed_offset
                for t in req.topics
                for p in t.partitions
            }
            names = self.sim.id_name
            for t in response.topics:
                for p in t.partitions:
                    offset = sent.get((t.topic_id, p.partition_index))
                    if p.error_code or offset is None:
                        continue
                    key = (req.group_id, names.get(t.topic_id, ""), p.partition_index, offset)
                    if key not in self.offsets:
                        self._fail(
                            f"a commit of group {req.group_id} was answered accepted for "
                            f"{key[1]}-{key[2]} at offset {offset}, which no durable record "
                            "holds"
                        )

    def stable_read(self, group_id: str, response: Any, batch: Any) -> Callable[[], None]:
        """A stable OffsetFetch answered once ``batch`` is durable: a batch with a change of its
        own group (not merely its partition's last one), and the check of its answer, to run
        once it is released."""
        index = self.coord.partition_of(group_id)
        marked = batch.groups.get(index, ())
        if group_id not in marked and None not in marked:
            self._fail(
                f"a stable OffsetFetch of group {group_id} waits for a batch without any change "
                f"of it (the batch marked {sorted(map(str, marked))} of partition {index})"
            )

        def check() -> None:
            for t in response.topics:
                for p in t.partitions:
                    got = p.committed_offset
                    if got >= 0 and (group_id, t.name, p.partition_index, got) not in self.offsets:
                        self._fail(
                            f"a stable OffsetFetch of group {group_id} was answered offset {got} "
                            f"for {t.name}-{p.partition_index}, which no durable record holds"
                        )

        return check

    def refused(self, group_id: str, error: BaseException | None) -> None:
        """A request of ``group_id`` failed: when with the failure of a write, its partition had
        records in the failed batches (a command of a partition without any was answered at
        once, and keeps its answer)."""
        if not (
            isinstance(error, CoordinatorNotAvailableError)
            and error.message.startswith(WRITE_FAILED)
        ):
            return
        index = self.coord.partition_of(group_id)
        if index not in self.rolled:
            self._fail(
                f"a request of group {group_id} (partition {index}) was answered with the "
                f"failure of a write with records of partitions {sorted(self.rolled)} only: "
                f"{error.message}"
            )

    def committed_read(self, group_id: str, what: str, fn: Callable[[Any], Any]) -> Any:
        """A read of ``group_id``'s committed state, as the server runs it (``Reads.read``),
        judged against the same read of its partition's durable state (the I4 replica)."""
        coord = self.coord
        index = coord.partition_of(group_id)
        got = _outcome(lambda: coord.driver.reads.read(index, fn, (group_id,))[0])
        want = _outcome(lambda: fn(coord.replicas[index]))
        # partition-move: away, it answers NOT_COORDINATOR; a batch that landed, its answer not
        # back yet, puts the store ahead of what the node knows to be durable
        if got != want and coord.serves(index) and not (coord.moves and coord.moves.behind()):
            self._fail(
                f"{what} of group {group_id} answered from its committed state differs from its "
                f"durable state:\n  answered: {got!r}\n  durable:  {want!r}"
            )
        return got

    # ------------------------------------------------------------------ failures

    def write_failed(self, fail: Callable[[], list[Any]]) -> None:
        """Run the driver's ``write_failed`` (``fail``) and judge its rollback."""
        coord = self.coord
        before = [(shard.snapshot(), in_memory(shard)) for shard in coord.shards]
        failed = fail()
        # the partitions with records in the failed batches, from the records themselves (not
        # from the driver's own bookkeeping, which is what is judged)
        rolled = {coord.partition_of(r.group_id) for b in failed for r in b.records if r.group_id}
        self.rolled = rolled
        watched = {w.index for b in failed for w in b.watches}
        if self.sim.p.multi:
            events = self.sim.summary.events
            events["failed-write-partitions-rolled-back"] += len(rolled)
            events["failed-write-partitions-kept"] += coord.partitions - len(rolled)
            groups = {r.group_id for b in failed for r in b.records if r.group_id is not None}
            events["failed-write-of-several-groups"] += len(groups) > 1
        for index, shard in enumerate(coord.shards):
            if not coord.serves(index):
                continue  # moved away meanwhile (partition-move): judged when loaded again
            after = shard.snapshot()
            if index not in rolled:
                want, what = before[index][0], "kept its state"
                memory = in_memory(shard)
                if memory != before[index][1]:
                    self._fail(
                        f"a failed write with records of partitions {sorted(rolled)} changed "
                        f"what partition {index} holds in memory (it had no records in it):\n"
                        + diff(before[index][1], memory)
                    )
            elif index not in watched:
                want, what = coord.replicas[index].snapshot(), "gone back to its durable state"
            else:
                continue
            if after != want:
                names = sorted(
                    {g for s in (after, want) for k in ("groups", "offsets") for g in s.get(k, {})}
                )
                changed = [g for g in names if group_part(after, g) != group_part(want, g)]
                self._fail(
                    f"a failed write with records of partitions {sorted(rolled)} left partition "
                    f"{index} not as it should be ({what}); groups changed: {changed}\n"
                    + diff(want, after)
                )
        self.acknowledged_survive(f"a failed write of partitions {sorted(rolled)}")

    def acknowledged_survive(self, when: str) -> None:
        """Every offset a group's commit was answered with still stands (its topic alive)."""
        coord = self.coord
        live = topic_names(coord)
        offsets: dict[int, Any] = {}
        for g in self.sim.groups:
            index = coord.partition_of(g.gid)
            if not coord.serves(index):
                continue  # moved away (partition-move): judged when loaded again
            if index not in offsets:
                offsets[index] = coord.shards[index].snapshot().get("offsets", {})
            stored = offsets[index].get(g.gid, {})
            for key, offset in sorted(g.committed.items()):
                if key[0] not in live:
                    continue
                held = offset_held(stored, live, key)
                if held != offset:
                    self._fail(
                        f"after {when}, group {g.gid}'s offset of {live[key[0]]}-{key[1]} is "
                        f"{held}, but a commit of it was answered accepted at {offset}"
                    )


def topic_names(coord: Any) -> dict[str, str]:
    """Topic id -> name, of the simulated coordinator's topics alive."""
    return {t.topic_id: n for n, t in coord.registry.topics.items()}


def offset_held(stored: Mapping[str, Any], names: Mapping[str, str], key: tuple[str, int]) -> Any:
    """The offset a group's ``stored`` offsets (as a shard's snapshot keeps them, by
    ``name-partition``) hold for ``key`` (topic id, partition), its topic named by ``names``;
    None when they hold none or the topic is not among ``names``."""
    name = names.get(key[0])
    value = None if name is None else stored.get(f"{name}-{key[1]}")
    return None if value is None else value.offset


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except CoordinatorError as exc:
        return ("error", int(exc.code))
