"""Members' offset commits in a simulation, and invariant I6 (commits only from the owner, and
monotonic).

A member commits the progress of every partition it owns (revoking ones included) with its
member epoch (a classic member: its generation) on each heartbeat tick and right before a
revocation completes (Kafka's auto-commit on revoke). A partition it newly owns resumes from the
committed offset; progress is forgotten whenever ownership ends. Commits travel on their own
connection, can be lost (``lose-request``), and go through the coordinator like any request,
answered once durable. ``stale-commit``: a KIP-848 member's application commits what it owned
at one of its recent commits, with the epoch it had then (KIP-1251: accepted only for
partitions it owns since that epoch). Not for classic members: Kafka checks only their
generation, so a late commit of the current generation is accepted whatever it names. I6 judges an accepted commit against whom the coordinator attributed each
partition to when the commit ran (:func:`~.invariants.check_accepted_commit`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from coordinator.core.errors import ErrorCode
from coordinator.core.offsets import (
    OffsetCommit,
    OffsetCommitPartition,
    OffsetCommitTopic,
    OffsetFetchGroup,
    OffsetFetchTopic,
)

from . import invariants as inv
from .classic_client import ClassicClient
from .client import MEMBER
from .isolation import offset_held, topic_names

STALE_COMMIT_VIEWS = 4
"""A stale commit replays one of a client's last commits (member id, epoch, partitions)."""
STALE_COMMIT_RATE = 0.2
"""Chance that a commit is a stale one, when the fault is on."""


def commit_offsets(sim: Any, i: int) -> None:
    """Client i commits what it owns (see the module docstring)."""
    c = sim.clients[i]
    if not (c.can_commit if isinstance(c, ClassicClient) else c.phase == MEMBER):
        return
    owned = [(t, p) for t, ps in c.owned.items() for p in sorted(ps)]
    c.progress = {k: v for k, v in c.progress.items() if k in set(owned)}
    epoch = c.epoch
    views = [v for v in sim.commit_views.get(i, ()) if v[0] == c.member_id]
    sim.commit_views[i] = [*views[-(STALE_COMMIT_VIEWS - 1) :], (c.member_id, epoch, owned)]
    rng = sim.rng
    if (
        views
        and not isinstance(c, ClassicClient)  # KIP-1251: a consumer-protocol member's epochs
        and sim.faults_on
        and "stale-commit" in sim.p.faults
        and sim.stale_rng.random() < STALE_COMMIT_RATE
    ):
        # The application committed what it owned at one of its recent commits, with the
        # epoch it had then, racing the heartbeats that moved it on since. Its own random
        # stream, so the other faults of a seed stay where they were.
        sim.summary.faults["stale-commit"] += 1
        _member, epoch, owned = sim.stale_rng.choice(views)
        rng = sim.stale_rng
    if not owned:
        return
    image = sim.coord.registry.image()
    gid = c.group_id
    acknowledged = sim.group_of(i).committed
    for t, p in owned:
        if (t, p) not in c.progress:  # newly owned (or a stale commit's): resume from there
            name = image.by_id[t].name if t in image.by_id else None
            fetch = OffsetFetchGroup(
                group_id=gid,
                topics=(OffsetFetchTopic(name=name or "", topic_id=t, partition_indexes=(p,)),),
            )
            got = sim.coord.read(gid, partial(_fetch, fetch), lost=partial(_refetch, c, (t, p)))
            if got is None:  # its coordinator partition moved away (partition-move)
                return  # the consumer's fetch failed: it commits nothing this time
            committed = got.topics[0].partitions[0].committed_offset if got.topics else -1
            c.progress[(t, p)] = max(committed, 0)
        c.progress[(t, p)] += rng.randint(1, 10)
    if rng is sim.rng and sim.fault("lose-request"):
        sim.summary.faults["lose-request"] += 1
        return
    by_topic: dict[str, list[OffsetCommitPartition]] = {}
    for t, p in owned:
        by_topic.setdefault(t, []).append(
            OffsetCommitPartition(partition_index=p, committed_offset=c.progress[(t, p)])
        )
    req = OffsetCommit(
        group_id=gid,
        generation_id_or_member_epoch=epoch,
        member_id=c.member_id,
        topics=tuple(
            OffsetCommitTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )
    offsets = {key: c.progress[key] for key in owned}
    stale = {(t, p) for t, ps in inv.stale_owned(c).items() for p in ps} & set(offsets)
    member_id = c.member_id
    problems: list[str] = []
    # I2: a generation forgotten in a restart must be refused (invariants.check_forgotten_answer)
    forgotten = isinstance(c, ClassicClient) and inv.holds_forgotten_generation(c)
    refused: list[str] = []
    released: set[tuple[str, int]] = set()
    ran: list[bool] = []

    def judged(shard: Any, result: Any) -> None:
        """I6 as the commit runs: whom the coordinator attributes each accepted partition to
        (the committed offsets as durable so far)."""
        ran.append(True)
        accepted = [
            ((t.topic_id, part.partition_index), offsets[(t.topic_id, part.partition_index)])
            for t in result.response.topics
            for part in t.partitions
            if not part.error_code
        ]
        classic = shard.classic_groups.get(gid)
        group = shard.groups.get(gid)
        if classic is None:  # I6's exception: let go of at this very epoch (KAFKA-19974)
            released.update(
                key
                for key, _offset in accepted
                if inv.released_at_its_epoch(group, member_id, epoch, key)
            )
        if accepted and forgotten:
            refused.extend(
                inv.check_forgotten_answer(
                    shard, gid, member_id, epoch, "OffsetCommit", ErrorCode.NONE
                )
            )
        problems.extend(
            inv.check_accepted_commit(
                group,
                member_id,
                epoch,
                accepted,
                dict(acknowledged),
                classic=classic,
                topic_ids=sim._topic_ids() if classic is not None else None,
                stale=stale | released,
            )
        )

    label = f"commit of c{i} at epoch {epoch}"

    def reply(outcome: tuple) -> None:
        if outcome[0] == "error":
            sim.summary.events["commit-rejected"] += 1
            sim._log(f"c{i} {label} rejected: {ErrorCode(outcome[1]).name}")
            if outcome[1] == ErrorCode.NOT_COORDINATOR and ran:
                # Its partition moved away while its write was in flight (partition-move): the
                # write may land all the same (its outcome is unknown to the client, as in
                # Kafka), so the offsets it carried may be the committed ones from now on.
                sim.summary.events["commit-of-unknown-outcome"] += 1
                for key in offsets:
                    inv.stale_committed(acknowledged, key)
            if isinstance(c, ClassicClient) and sim.clients[i] is c:
                sim._after(i, c.on_commit_error(outcome[1]))
            return
        sim.summary.events["commit"] += 1
        if refused and inv.EPOCHS_BOUNDED in sim.p.invariants:
            sim._fail(inv.EPOCHS_BOUNDED, refused[0])
        if problems and inv.OFFSETS_FENCED in sim.p.invariants:
            sim._fail(inv.OFFSETS_FENCED, problems[0])
        for t in outcome[1].topics:  # durable: the offsets it accepted are the committed ones
            for part in t.partitions:
                if not part.error_code:
                    key = (t.topic_id, part.partition_index)
                    if key in stale:
                        sim.summary.events["commit-of-stale-claim"] += 1
                        inv.stale_committed(acknowledged, key)
                    elif key in released:
                        sim.summary.events["commit-released-at-its-epoch"] += 1
                        inv.stale_committed(acknowledged, key)
                    else:
                        acknowledged[key] = offsets[key]

    def unknown() -> None:
        """The coordinator restarted before answering: the client never learns the outcome.
        A write that landed with its acknowledgement late (``partition-move``) holds the
        offsets all the same: those are the committed ones from now on, as after a
        NOT_COORDINATOR once it ran. An offset the store does not hold stays judged."""
        if not ran:
            return
        durable = sim.coord.replica_of(gid).snapshot().get("offsets", {}).get(gid, {})
        names = topic_names(sim.coord)
        landed = [
            key for key, offset in offsets.items() if offset_held(durable, names, key) == offset
        ]
        if landed:
            sim.summary.events["commit-landed-unanswered-at-restart"] += 1
            sim._log(f"c{i} {label}: landed, unanswered (the coordinator restarted first)")
        for key in landed:
            inv.stale_committed(acknowledged, key)

    sim.when_running(lambda: sim.coord.request(req, reply, label, after=judged, unknown=unknown))


def _fetch(fetch: OffsetFetchGroup, shard: Any) -> Any:
    return shard.offset_fetch(fetch)


def _refetch(c: Any, key: tuple[str, int]) -> None:
    """The fetch a partition resumed from saw a write that was then lost (failed, or the
    coordinator restarted): the server never gave that answer, so the client fetches again
    before its next commit."""
    c.progress.pop(key, None)
