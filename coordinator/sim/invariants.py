"""Named safety invariants over (coordinator state, what each client believes).

Each check returns a list of violation messages (empty = holds). They are shared by the
simulator (checked after every step) and the exhaustive explorer (checked in every state).

Ownership is judged *from the members' point of view* (KIP-848 "Reconciliation of the group": a
partition is given to a new member only once its previous owner has revoked it):

* a client's *claim* is the set of partitions it believes it owns (revoking ones included, a
  client that missed a response still owns what it owned before);
* a claim is *live* while the coordinator still has that member id in the group. A member the
  coordinator has removed (session or rebalance timeout) but that has not heard about it yet is a
  *zombie*: Kafka fences zombies by member epoch (its offset commits and its next heartbeat are
  rejected), so its stale belief does not count as ownership. Zombie claims are counted, not
  failed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from coordinator.core.group import ConsumerGroup

from .client import DOWN, SimClient

NO_DOUBLE_OWNERSHIP = "I1-no-partition-owned-twice"
OWNED_KNOWN_TO_COORDINATOR = "I1b-owned-is-attributed-by-coordinator"
EPOCHS_BOUNDED = "I2-epochs-bounded-by-group-epoch"
TARGET_VALID = "I3-target-assigns-each-partition-once-to-a-subscriber"
REPLAY_EQUALS_LIVE = "I4-replay-yields-live-state"
LIVENESS = "I5-liveness-stable-after-faults-stop"
CORE_ILLEGAL_STATE = "core-illegal-state"
OFFSETS_FENCED = "I6-commits-only-from-owner-and-monotonic"

SAFETY = (NO_DOUBLE_OWNERSHIP, OWNED_KNOWN_TO_COORDINATOR, EPOCHS_BOUNDED, TARGET_VALID, OFFSETS_FENCED)


def live_claims(group: ConsumerGroup | None, clients: Iterable[SimClient]) -> tuple[list[SimClient], list[SimClient]]:
    """(live claimants, zombie claimants) among clients that believe they own something."""
    live, zombies = [], []
    for c in clients:
        if c.phase == DOWN or not c.owned:
            continue
        if group is not None and c.member_id in group.members:
            live.append(c)
        else:
            zombies.append(c)
    return live, zombies


def check_no_double_ownership(group: ConsumerGroup | None, clients: Sequence[SimClient]) -> list[str]:
    live, _z = live_claims(group, clients)
    seen: dict[tuple[str, int], str] = {}
    out = []
    for c in live:
        for t in sorted(c.owned):
            for p in sorted(c.owned[t]):
                other = seen.get((t, p))
                if other is not None:
                    out.append(f"partition {t}-{p} is owned by {other} and {c.member_id} at the same time")
                else:
                    seen[(t, p)] = c.member_id
    return out


def check_owned_known(group: ConsumerGroup | None, clients: Sequence[SimClient]) -> list[str]:
    """A live client owns only partitions the coordinator attributes to it (assigned or pending
    revocation): the coordinator's view of ownership must never lag behind a member's belief."""
    if group is None:
        return []
    live, _z = live_claims(group, clients)
    out = []
    for c in live:
        m = group.members[c.member_id]
        for t in sorted(c.owned):
            known = m.assigned_partitions.get(t, frozenset()) | m.partitions_pending_revocation.get(t, frozenset())
            extra = c.owned[t] - known
            if extra:
                out.append(
                    f"{c.member_id} owns {t}-{sorted(extra)} but the coordinator attributes to it only "
                    f"assigned={sorted(m.assigned_partitions.get(t, ()))} "
                    f"pending_revocation={sorted(m.partitions_pending_revocation.get(t, ()))}"
                )
    return out


def check_epochs(group: ConsumerGroup | None, clients: Sequence[SimClient]) -> list[str]:
    if group is None:
        return []
    out = []
    ge = group.group_epoch
    if group.assignment_epoch > ge:
        out.append(f"assignment epoch {group.assignment_epoch} > group epoch {ge}")
    for mid in sorted(group.members):
        m = group.members[mid]
        if m.member_epoch > ge:
            out.append(f"member {mid} epoch {m.member_epoch} > group epoch {ge}")
        if m.member_epoch > group.assignment_epoch:
            out.append(f"member {mid} epoch {m.member_epoch} > assignment epoch {group.assignment_epoch}")
    for c in clients:
        if c.phase != DOWN and c.epoch > ge:
            out.append(f"client {c.member_id} believes epoch {c.epoch} > group epoch {ge}")
    return out


def check_target(group: ConsumerGroup | None) -> list[str]:
    """Each partition at most once, only to members, and — while the target is current
    (assignment epoch == group epoch) — only partitions that exist in the subscription metadata,
    to members subscribed to their topic. While the group is Assigning (a member was removed, so
    the metadata was recomputed against the current topics but the new target is computed only on
    the next heartbeat, as in Kafka) the old target may still name a topic that was deleted
    meanwhile; only the first two rules apply then."""
    if group is None:
        return []
    out = []
    current = group.assignment_epoch == group.group_epoch
    by_id = {t.topic_id: t for t in group.subscription_metadata.values()}
    seen: dict[tuple[str, int], str] = {}
    for mid in sorted(group.target):
        member = group.members.get(mid)
        if member is None:
            out.append(f"target assigns to {mid}, which is not a member")
            continue
        topics = group.effective_topics(member)
        assignment = group.target[mid]
        for t in sorted(assignment):
            meta = by_id.get(t)
            for p in sorted(assignment[t]):
                other = seen.get((t, p))
                if other is not None:
                    out.append(f"target gives {t}-{p} to both {other} and {mid}")
                seen[(t, p)] = mid
            if not current:
                continue
            if meta is None:
                out.append(f"target gives {mid} partitions of topic id {t}, not in the subscription metadata")
            elif meta.name not in topics:
                out.append(f"target gives {mid} partitions of {meta.name}, which it does not subscribe to")
            elif max(assignment[t]) >= meta.num_partitions:
                out.append(f"target gives {mid} {meta.name}-{max(assignment[t])} but it has {meta.num_partitions} partitions")
    return out


def check_safety(
    group: ConsumerGroup | None, clients: Sequence[SimClient], names: Collection[str] = SAFETY
) -> list[tuple[str, str]]:
    """The selected safety invariants (default: all); [(name, message)] for those that fail."""
    out: list[tuple[str, str]] = []
    if NO_DOUBLE_OWNERSHIP in names:
        out += [(NO_DOUBLE_OWNERSHIP, m) for m in check_no_double_ownership(group, clients)]
    if OWNED_KNOWN_TO_COORDINATOR in names:
        out += [(OWNED_KNOWN_TO_COORDINATOR, m) for m in check_owned_known(group, clients)]
    if EPOCHS_BOUNDED in names:
        out += [(EPOCHS_BOUNDED, m) for m in check_epochs(group, clients)]
    if TARGET_VALID in names:
        out += [(TARGET_VALID, m) for m in check_target(group)]
    return out
