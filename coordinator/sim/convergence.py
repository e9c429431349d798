"""When a simulation has converged (invariant I5): every fault's follow-up done, the group
Stable with nothing parked, every client a member at the group's epoch (classic clients at its
generation), and every subscribed partition owned by exactly one member."""

from __future__ import annotations

from typing import Any

from coordinator.core.group import GroupState
from legacy_bridge.protocol import decode_assignment

from . import invariants as inv
from .classic_client import ClassicClient
from .client import MEMBER


def why_not_converged(sim: Any) -> str:
    """Why the run has not converged yet (I5; "" once it has): no fault follow-up pending, and
    in every group: the group Stable with nothing parked, every client a member at the group's
    epoch, and every subscribed partition owned by exactly one member."""
    pending = sorted(
        {kind for _t, _s, kind, _p in sim.queue if kind in ("start", "recreate", "resume")}
        | {
            f"the coordinator's {pl[1]}"
            for _t, _s, kind, pl in sim.queue
            if kind == "coordinator" and pl[0] == sim.coord.gen and pl[1] == "worker"
        }
        | (
            {"a coordinator partition's move"}
            if sim.coord.moves is not None and sim.coord.moves.under_way()
            else set()
        )
        | {
            "delayed or stale request"
            for at, _s, kind, pl in sim.queue
            if kind == "deliver"
            and (sim.clients[pl[0]].inflight != pl[1] or at > sim.now + 2 * sim.p.max_latency_ms)
        }
    )
    if pending:
        return f"fault follow-ups still pending: {pending}"
    for g in sim.groups:
        why = group_not_converged(sim, g)
        if why:
            return sim._in(g, why)
    return ""


def group_not_converged(sim: Any, g: Any) -> str:
    """Why group g has not converged yet ("" once it has)."""
    group = sim.consumer_group(g)
    classic = sim.classic_of(g)
    if group is None and classic is None:
        return "no group"
    if group is not None and group.waiting:
        return f"joins of {sorted(group.waiting)} are still parked"
    if group is None:
        if classic.state.value != "Stable":
            return f"classic group is {classic.state.value}"
    elif group.state() is not GroupState.STABLE:
        return f"group is {group.state().value}"
    known = known_topics(sim, g, group, classic)
    # A classic group's clients are judged by topic name, as its protocol names topics: a
    # partition of a topic re-created meanwhile is the same one to a classic consumer (a leader
    # that skipped the assignment keeps the names of the assignment it computed before), so
    # it counts as the one of the topic id expected under that name.
    ids = {n: tid for n, (tid, _count) in known.items()}
    names = sim.id_name

    def named(t: str) -> str:
        return ids.get(names.get(t, ""), t) if group is None else t

    owners: dict[tuple[str, int], list[str]] = {}
    clients = sim.clients_of(g)
    for c in clients:
        if c.phase != MEMBER:
            return f"c{c.index} is {c.phase}"
        if isinstance(c, ClassicClient):
            if c.metadata_changed(sim.meta()):
                # The leader rejoins at its next metadata check: a topic change (a fault) is
                # still being followed up (eager 622: t0 re-created just before the faults
                # stopped; the group looked converged until its leader noticed).
                return f"c{c.index} (leader) has yet to rejoin for a metadata change"
            why = _classic_not_converged(c, group, classic)
            if why:
                return why
            for t, ps in c.owned.items():
                for part in ps:
                    owners.setdefault((named(t), part), []).append(c.member_id)
            continue
        if group is None:
            return f"c{c.index} is a KIP-848 client but the group is classic"
        if c.member_id not in group.members:
            return f"c{c.index} ({c.member_id}) is not a member"
        if not _assignor_converged(c, group.members[c.member_id].server_assignor_name):
            return (
                f"c{c.index}'s server assignor {c.server_assignor} has not reached the coordinator"
            )
        if c.revoking or c.inflight is not None and c.epoch != group.group_epoch:
            return f"c{c.index} is still reconciling"
        if c.epoch != group.group_epoch:
            return f"c{c.index} at epoch {c.epoch}, group at {group.group_epoch}"
        for t, ps in c.owned.items():
            for part in ps:
                owners.setdefault((t, part), []).append(c.member_id)
    known_partitions = set()
    expected = set()
    subscribed = set()
    for c in clients:
        subscribed |= set(c.topics)
    live = {n: t.num_partitions for n, t in sim.coord.registry.topics.items()}
    for name in subscribed:
        topic = known.get(name)
        if topic is None:
            continue
        topic_id, count = topic
        known_partitions |= {(topic_id, part) for part in range(count)}
        # A classic group's clients name topics: a partition the metadata it converges to has
        # but the cluster no longer has (its topic re-created with fewer partitions, or not yet
        # re-created) is consumed by nobody, in Kafka too. Its owner may still list it (Java's
        # assignFromSubscribed keeps every assigned partition of a subscribed topic); it is
        # neither expected nor judged.
        exists = count if group is not None else min(count, live.get(name, 0))
        expected |= {(topic_id, part) for part in range(exists)}
    if group is None:
        expected -= orphaned_withheld(g, classic, known)
    doubles = sorted(k for k, v in owners.items() if len(v) > 1)
    if doubles:
        return f"partitions owned twice {doubles[:6]}"
    missing = sorted(expected - set(owners))
    if missing:
        return f"unowned partitions {missing[:6]}"
    extra = sorted(set(owners) - known_partitions)
    if extra:
        return f"owned partitions of no subscribed topic {extra[:6]}"
    return ""


def known_topics(sim: Any, g: Any, group: Any, classic: Any) -> dict[str, tuple[str, int]]:
    """The topics (name -> topic id, partitions) whose every partition I5 expects owned: the
    cluster's, except where Kafka's protocol has nothing that would bring the group to them.

    * A consumer group whose members all speak the classic protocol refreshes its subscription
      metadata only when a classic JoinGroup (or a ConsumerGroupHeartbeat) runs — Kafka's
      GroupMetadataManager checks ``hasMetadataExpired`` in consumerGroupHeartbeat and
      classicGroupJoinToConsumerGroup, never in a classic Heartbeat — and a classic client
      that is not its group's leader never rejoins for a metadata change (Java's
      ConsumerCoordinator: only the leader watches the metadata; in a consumer group nobody
      leads). Until such a request runs after the topics changed, the group's own subscription
      metadata is what it can converge to.
    * A static leader back in a Stable classic group skips the assignment (KIP-814: the group
      keeps the assignment its leader computed before) and watches the metadata from its
      rejoin on (Java's onLeaderElected takes the metadata it has then as its snapshot): a
      change between that assignment and the rejoin is seen by nobody until the next
      rebalance, so the group converges to the metadata that assignment was computed with.
    * A classic group made by a downgrade without a rebalance (a classic static member took
      the place of the last KIP-848 member, Kafka's KAFKA-17317) has a leader that does not
      know it leads: every client's last JoinGroup came from the consumer group, where nobody
      leads, so nobody watches the metadata until the next rebalance; the group converges to
      the consumer group's subscription metadata its assignments were made with."""
    topics = {n: (t.topic_id, t.num_partitions) for n, t in sim.coord.registry.topics.items()}
    if group is not None:
        if (
            group.members
            and all(x.classic_member_metadata is not None for x in group.members.values())
            and sim.coord.metadata_asked.get(g.gid, -1) != sim.coord.shard_of(g.gid).topics.version
        ):
            return {
                n: (t.topic_id, t.num_partitions) for n, t in group.subscription_metadata.items()
            }
        return topics
    leader = next((c for c in sim.clients_of(g) if c.member_id == classic.leader_id), None)
    converted = g.downgraded.get(classic.generation)
    if converted is not None and (
        not isinstance(leader, ClassicClient) or leader.assigned_snapshot is None
    ):
        return dict(converted)
    plan = g.classic_plans.get(classic.generation)
    if (
        isinstance(leader, ClassicClient)
        and leader.skipped_assignment == classic.generation
        and plan is not None
    ):
        return {n: v for n, v in plan if v is not None}
    return topics


def orphaned_withheld(
    g: Any, classic: Any, known: dict[str, tuple[str, int]]
) -> set[tuple[str, int]]:
    """The partitions a classic group's generation leaves to nobody for good: its leader's
    assignment held them back for their claimants' revocation (KIP-429: the owner revokes, then
    rejoins, and the next generation hands them out), but no claimant is a member any more,
    while the group is still at that generation — a static member back under a new member id
    took its place without a rebalance (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin:
    the group's protocol stays). The new incarnation owns nothing, so it revokes nothing and
    does not rejoin (Java's onJoinComplete rejoins only after revoking), and the leader sees
    no metadata change: nobody takes them until the next rebalance, in Kafka too (cooperative
    1687). Only partitions no member of the group is assigned now."""
    withheld = g.classic_withheld.get(classic.generation, {})
    if not withheld:
        return set()
    given = set()
    for x in classic.members.values():
        if x.assignment:
            for name, ps in decode_assignment(x.assignment).assigned_partitions:
                given |= {(name, p) for p in ps}
    return {
        (known[name][0], p)
        for (name, p), claimants in withheld.items()
        if name in known
        and (name, p) not in given
        and not any(mid in classic.members for mid in claimants)
    }


def _classic_not_converged(c: ClassicClient, group: Any, classic: Any) -> str:
    if c.revoking or c.rejoin_needed or (c.inflight is not None and c.inflight_kind != "heartbeat"):
        return f"c{c.index} is still rebalancing"
    if inv.stale_owned(c):
        return f"c{c.index} still claims partitions from before its member was re-created"
    if group is not None:
        member = group.members.get(c.member_id)
        if member is None or member.classic_member_metadata is None:
            return f"c{c.index} ({c.member_id}) is not a classic member of the consumer group"
        if not c.generation == member.member_epoch == group.group_epoch:
            return (
                f"c{c.index} at generation {c.generation}, member epoch {member.member_epoch}, "
                f"group epoch {group.group_epoch}"
            )
        if member.state.name != "STABLE":
            return f"c{c.index} is {member.state.name} at the coordinator"
        return ""
    if c.member_id not in classic.members:
        return f"c{c.index} ({c.member_id}) is not a member of the classic group"
    if c.generation != classic.generation:
        return f"c{c.index} at generation {c.generation}, classic group at {classic.generation}"
    return ""


def _assignor_converged(c: Any, at_coordinator: str | None) -> bool:
    """The server assignor the coordinator holds for a KIP-848 client's member is the client's.
    One exception, as Kafka: a static client that never named one (it sends none: null means
    "unchanged") whose member replaced its instance id's previous one inherits that member's
    (Kafka's static replacement copies the member, ``ConsumerGroupMember.Builder(old, newId)``,
    and a classic JoinGroup leaves the assignor as it is). Since a consumer-protocol member
    replaces a classic holder at once (KAFKA-17228), a static client that named one, came back
    as a classic client and then as a KIP-848 client without one keeps the first's assignor. A
    client that names an assignor the coordinator does not take is still caught."""
    if c.server_assignor is None and c.instance_id is not None:
        return True
    return c.server_assignor == at_coordinator
