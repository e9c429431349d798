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

Classic clients (:mod:`.classic_client`) are judged the same way. Inside a consumer group a
classic member is a member like any other, fenced by its generation (its member epoch): its
claim is live at its member's epoch, or while its last JoinGroup was sent from the generation
it holds (the answer is on its way); a classic client behind its member otherwise (a static
member a classic rebalance kept without its rejoin, carried into the consumer group by an
upgrade) is a zombie (:func:`member_claim_live`). In a *classic* group (legacy bridge) a claim
is live while the member id is in the group and the client is at the group's generation, or one
behind when its last JoinGroup (subscription ``generation_id``) was sent from that generation —
its join response is on the way. A client further behind (a static member that missed the rebalance, a
member the coordinator already removed) is a zombie: the classic protocol fences it by generation
(its Heartbeat, SyncGroup and offset commits get ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID). In a
classic group the coordinator *attributes* to a member its last assignment plus the partitions it
reported as owned in its subscription (cooperative). Partitions of deleted or re-created topics
are ignored for classic clients (the classic protocol names topics, not ids).

A classic client may also carry *stale* claims while its member is live. Kafka's
``classicGroupJoinToConsumerGroup`` creates a member for a JoinGroup whose (non-empty) member id
the consumer group does not know — a classic member removed while its requests were lost, that
never heard of it — and only hands the owned partitions of its subscription to reconciliation,
never attributes them. What the client believes it owns when the coordinator (re)creates its
member id comes from before: like a zombie's claims, those are counted, not failed, until its
next SyncGroup answer (it revokes what it is not assigned; what it is assigned is attributed) or
until it learns it was removed (:func:`note_recreated` notes them, :func:`live_owned` is the
rest). I1, I1b and I6 (a commit of a stale claim: Kafka checks only a classic member's
generation) judge them that way; I5 waits until none is left.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from coordinator.core.errors import ErrorCode
from coordinator.core.group import ConsumerGroup
from legacy_bridge.protocol import ProtocolError, decode_assignment, decode_subscription

from .client import DOWN, Owned, SimClient, minus

if TYPE_CHECKING:
    from .classic_client import ClassicClient

NO_DOUBLE_OWNERSHIP = "I1-no-partition-owned-twice"
OWNED_KNOWN_TO_COORDINATOR = "I1b-owned-is-attributed-by-coordinator"
EPOCHS_BOUNDED = "I2-epochs-bounded-by-group-epoch"
TARGET_VALID = "I3-target-assigns-each-partition-once-to-a-subscriber"
REPLAY_EQUALS_LIVE = "I4-replay-yields-live-state"
LIVENESS = "I5-liveness-stable-after-faults-stop"
CORE_ILLEGAL_STATE = "core-illegal-state"
CLIENT_MODEL = "client-got-an-impossible-answer"
OFFSETS_FENCED = "I6-commits-only-from-owner-and-monotonic"
"""An accepted offset commit is for a partition the coordinator attributes to the committing
member (assigned or pending revocation; in a classic group: its assignment or reported claims) —
never one owned by another member or by nobody, whatever epoch it carried (KIP-1251 accepts an
older epoch only for partitions the member owns since then) — and never moves a committed
offset back. Checked by the driver on every accepted commit (:func:`check_accepted_commit`).
One exception, Kafka's own (4.2+, KAFKA-19974): a consumer-protocol member keeps its epoch while
it revokes, also after letting some partitions go when a newer target makes it revoke more, and
Kafka checks the partitions of a commit only when its epoch is older than the member's; so a
commit at the member's current epoch of a partition it let go of at that epoch (a late or
replayed commit from before it let go) is accepted, and is not judged
(:func:`released_at_its_epoch`); the offset history of such a partition starts over from it."""
PARKED_ANSWERED_ONCE = "I7-parked-request-answered-exactly-once"
"""A parked request — a join waiting for its group's first target
(``ConsumerGroups.parks_joins``), a classic JoinGroup or SyncGroup at its barrier — is answered
once, to the request that waits for it, unless the coordinator restarts (the callers are gone):
every token the core holds has a caller waiting in the driver, every caller the driver holds
has a token the core holds (or an answer on its way in a batch not yet durable), nothing is
answered for no one, and joins parked before a first target have something on its way to
answer them. Checked on the runtime's driver (:func:`check_parked`) by the simulator and the
explorer, whose callers never go away."""

GROUPS_ISOLATED = "I8-groups-isolated-from-failed-writes"
"""Groups and coordinator partitions are isolated from each other's failed writes: a failed
write rolls back exactly the partitions with records in it, a request is answered with, and a
read sees, durable state only, and answered commits survive later failures and restarts
(``isolation.py``)."""

SAFETY = (
    NO_DOUBLE_OWNERSHIP,
    OWNED_KNOWN_TO_COORDINATOR,
    EPOCHS_BOUNDED,
    TARGET_VALID,
    OFFSETS_FENCED,
)


def is_classic(c: Any) -> TypeGuard[ClassicClient]:
    return bool(getattr(c, "classic", False))


def _wire_ids(tps: Any, topic_ids: dict[str, str]) -> set[tuple[str, int]]:
    return {(topic_ids[n], p) for n, ps in tps if n in topic_ids for p in ps}


def classic_assignment(member: Any, topic_ids: dict[str, str]) -> dict[str, frozenset[int]]:
    return _as_owned(
        _wire_ids(decode_assignment(member.assignment).assigned_partitions, topic_ids)
        if member.assignment
        else set()
    )


def classic_claims(member: Any, topic_ids: dict[str, str]) -> dict[str, frozenset[int]]:
    try:
        sub = decode_subscription(member.protocols[0][1])
    except (ProtocolError, IndexError):
        return {}
    return _as_owned(_wire_ids(sub.owned_partitions, topic_ids))


def classic_join_generation(member: Any) -> int:
    """The generation a classic member's last JoinGroup was sent from (its subscription's
    ``generation_id``): a classic group's member, or a classic member of a consumer group."""
    metadata = getattr(member, "classic_member_metadata", None)
    protocols = metadata.supported_protocols if metadata is not None else member.protocols
    try:
        return decode_subscription(protocols[0][1]).generation_id
    except (ProtocolError, IndexError):
        return -1


def _as_owned(tps: set[tuple[str, int]]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


def classic_attributed(
    classic: Any, member_id: str, topic_ids: dict[str, str]
) -> set[tuple[str, int]]:
    """What a classic group attributes to a member: its assignment and its reported claims."""
    member = classic.members.get(member_id)
    if member is None:
        return set()
    out = set()
    for a in (classic_assignment(member, topic_ids), classic_claims(member, topic_ids)):
        out |= {(t, p) for t, ps in a.items() for p in ps}
    return out


def classic_claim_live(classic: Any, c: Any) -> bool:
    """A claim in a classic group is live at the group's generation, or one behind while the
    answer to the client's JoinGroup from that generation is on its way. A JoinGroup from g that
    still waits at the barrier once the group is at g+1 came in after g+1 completed without it
    (a static member is kept, Kafka's completeClassicGroupJoin): it will be answered with g+2,
    never g+1, so its client stays behind its group, fenced by generation (its Heartbeat,
    SyncGroup and offset commits at g are refused) — a zombie until then (cooperative 175:
    c0's delayed JoinGroup from 6 arrives after generation 7 gave t0-4 to c1; its commits at 6
    get ILLEGAL_GENERATION)."""
    member = classic.members.get(c.member_id) if c.member_id else None
    if member is None:
        return False
    gen = c.generation
    return gen == classic.generation or (
        gen == classic.generation - 1
        and classic_join_generation(member) == gen
        and member.join_token is None
    )


def member_claim_live(group: ConsumerGroup, c: Any) -> bool:
    """A claim inside a consumer group is live while the coordinator has the member id; a
    classic client's only while it is also at its member's epoch (its generation), or its last
    JoinGroup was sent from the generation it holds (the answer is on its way). A classic client
    behind its member's epoch otherwise — a static member kept through a rebalance it did not
    rejoin, as Kafka's completeClassicGroupJoin keeps static members, then carried into a
    consumer group by an upgrade — is fenced by generation (its Heartbeat, SyncGroup and offset
    commits get ILLEGAL_GENERATION, as Kafka's validateMemberEpoch for classic members): a
    zombie."""
    member = group.members.get(c.member_id)
    if member is None:
        return False
    if not is_classic(c):
        return True
    gen = c.generation
    return gen == member.member_epoch or classic_join_generation(member) == gen


def note_recreated(
    group: ConsumerGroup | None, clients: Iterable[SimClient], classic: Any = None
) -> None:
    """Simulator bookkeeping, before every check: a classic client whose member id the
    coordinator holds now but did not hold at the previous check had that member (re)created by
    this step (a first join, or a JoinGroup with the id of a member the coordinator removed);
    whatever the client believes it owns now comes from before, so it is stale (see the module
    docstring). Members carried through an upgrade or a downgrade keep their ids: not
    re-created."""
    for c in clients:
        if not is_classic(c):
            continue
        mid = c.member_id
        in_group = group is not None and mid in group.members
        in_classic = classic is not None and mid in classic.members
        held = bool(mid) and (in_group or in_classic)
        if held and mid != c.seen_member:
            c.stale = dict(c.owned)
        c.seen_member = mid if held else ""


def stale_owned(c: Any) -> Owned:
    """The claims a classic client carries from before its member was (re)created."""
    stale = getattr(c, "stale", None)
    return minus(c.owned, minus(c.owned, stale)) if stale else {}


def live_owned(c: Any) -> Owned:
    """A client's claims but the stale ones (:func:`stale_owned`)."""
    stale = getattr(c, "stale", None)
    return minus(c.owned, stale) if stale else c.owned


def live_claims(
    group: ConsumerGroup | None, clients: Iterable[SimClient], classic: Any = None
) -> tuple[list[SimClient], list[SimClient]]:
    """(live claimants, zombie claimants) among clients that believe they own something. A
    live member's stale claims (:func:`stale_owned`) make it a zombie claimant too; a live
    claimant's live claims are :func:`live_owned`."""
    live, zombies = [], []
    for c in clients:
        if c.phase == DOWN or not c.owned:
            continue
        if (
            group is not None
            and member_claim_live(group, c)
            or group is None
            and classic is not None
            and is_classic(c)
            and classic_claim_live(classic, c)
        ):
            if live_owned(c):
                live.append(c)
            if stale_owned(c):
                zombies.append(c)
        else:
            zombies.append(c)
    return live, zombies


def check_no_double_ownership(
    group: ConsumerGroup | None, clients: Sequence[SimClient], classic: Any = None
) -> list[str]:
    live, _z = live_claims(group, clients, classic)
    seen: dict[tuple[str, int], str] = {}
    out = []
    for c in live:
        owned = live_owned(c)
        for t in sorted(owned):
            for p in sorted(owned[t]):
                other = seen.get((t, p))
                if other is not None:
                    out.append(
                        f"partition {t}-{p} is owned by {other} and {c.member_id} at the same time"
                    )
                else:
                    seen[(t, p)] = c.member_id
    return out


def check_owned_known(
    group: ConsumerGroup | None,
    clients: Sequence[SimClient],
    classic: Any = None,
    topic_ids: dict[str, str] | None = None,
) -> list[str]:
    """A live client owns only partitions the coordinator attributes to it (assigned or pending
    revocation; in a classic group: assignment or reported claims): the coordinator's view of
    ownership must never lag behind a member's belief."""
    live, _z = live_claims(group, clients, classic)
    current = set((topic_ids or {}).values())
    out = []
    if group is None:
        if classic is None:
            return []
        for c in live:
            known = classic_attributed(classic, c.member_id, topic_ids or {})
            extra = sorted(
                (t, p)
                for t, ps in live_owned(c).items()
                if t in current
                for p in ps
                if (t, p) not in known
            )
            if extra:
                out.append(
                    f"classic {c.member_id} owns {extra} but the classic group attributes to it only "
                    f"{sorted(known)}"
                )
        return out
    for c in live:
        m = group.members[c.member_id]
        owned = live_owned(c)
        for t in sorted(owned):
            if is_classic(c) and t not in current:
                continue
            known = m.assigned_partitions.get(t, frozenset()) | m.partitions_pending_revocation.get(
                t, frozenset()
            )
            extra = owned[t] - known
            if extra:
                out.append(
                    f"{c.member_id} owns {t}-{sorted(extra)} but the coordinator attributes to it only "
                    f"assigned={sorted(m.assigned_partitions.get(t, ()))} "
                    f"pending_revocation={sorted(m.partitions_pending_revocation.get(t, ()))}"
                )
    return out


def check_epochs(
    group: ConsumerGroup | None, clients: Sequence[SimClient], classic: Any = None
) -> list[str]:
    if group is None:
        if classic is None:
            return []
        return [
            f"classic client {c.member_id} believes generation {c.epoch} > generation {classic.generation}"
            for c in clients
            if c.phase != DOWN
            and is_classic(c)
            and not holds_forgotten_generation(c)
            and c.member_id in classic.members
            and c.epoch > classic.generation
        ]
    out = []
    ge = group.group_epoch
    if group.assignment_epoch > ge:
        out.append(f"assignment epoch {group.assignment_epoch} > group epoch {ge}")
    for mid in sorted(group.members):
        m = group.members[mid]
        if m.member_epoch > ge:
            out.append(f"member {mid} epoch {m.member_epoch} > group epoch {ge}")
        if m.member_epoch > group.assignment_epoch:
            out.append(
                f"member {mid} epoch {m.member_epoch} > assignment epoch {group.assignment_epoch}"
            )
    for c in clients:
        # Only members: a group deleted when empty and created again (bridge conversions) starts
        # over, and a zombie of the old group may remember a higher epoch.
        # A classic client may hold a generation the coordinator forgot in a restart (the join
        # and sync phases are not written, as in Kafka): see holds_forgotten_generation.
        if (
            c.phase != DOWN
            and c.member_id in group.members
            and c.epoch > ge
            and not holds_forgotten_generation(c)
        ):
            out.append(f"client {c.member_id} believes epoch {c.epoch} > group epoch {ge}")
    return out


def holds_forgotten_generation(c: Any) -> bool:
    """I2's one exception: a classic client still holding the generation it was handed before a
    coordinator restart that had not written it. Kafka writes a classic group only when it
    becomes empty and when the leader's SyncGroup assignment is stored (GroupMetadataManager
    completeClassicGroupJoin writes nothing for a non-empty group), and a failover loads the
    last GroupMetadata record: Stable at that generation. The join phase's generation is gone
    with the coordinator, while the members it answered hold it (:func:`note_restart` marks
    them). It ends with the client's next successful JoinGroup answer or the generation's reset;
    until then every request carrying it must be refused (:func:`check_forgotten_answer`)."""
    forgotten = getattr(c, "forgotten_generation", None)
    return forgotten is not None and forgotten == c.epoch


def persisted_generation(shard: Any, group_id: str) -> int:
    """The newest generation a store holds for a group (``shard``: one fed every durable
    record): a classic group's last GroupMetadata record, a consumer group's epoch, -1 for
    none."""
    classic = shard.classic_groups.get(group_id)
    if classic is not None:
        return int(classic.generation)
    group = shard.groups.get(group_id)
    return group.group_epoch if group is not None else -1


def note_restart(durable: Any, group_id: str, clients: Iterable[SimClient]) -> list[str]:
    """Simulator bookkeeping at a coordinator restart (``durable``: the shard of every durable
    record, the I4 replica): each classic client whose generation is newer than any the store
    holds was handed one that was never written; the reloaded coordinator does not know it.
    Returns their member ids."""
    limit = persisted_generation(durable, group_id)
    noted = []
    for c in clients:
        if is_classic(c) and c.phase != DOWN and c.epoch > limit:
            c.forgotten_generation = c.epoch
            noted.append(f"{c.member_id} (generation {c.epoch} > {limit})")
    return noted


FENCING_ERRORS = frozenset(
    {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID}
)


def check_forgotten_answer(
    shard: Any, group_id: str, member_id: str, generation: int, what: str, error: int
) -> list[str]:
    """The other half of :func:`holds_forgotten_generation`: a Heartbeat, SyncGroup or offset
    commit carrying a forgotten generation that the coordinator does not hold (its group is at
    an older one when the request runs: ``shard`` right after the command) is refused with a
    fencing error (Kafka: ILLEGAL_GENERATION; UNKNOWN_MEMBER_ID when the member is gone), never
    accepted or parked. (Once the group reaches that generation number again the request is
    judged as any other: the client can only be a member of it through a new JoinGroup.)"""
    classic = shard.classic_groups.get(group_id)
    if classic is not None:
        held = int(classic.generation)
    else:
        group = shard.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        held = member.member_epoch if member is not None else -1
    if generation <= held:
        return []
    if error in FENCING_ERRORS:
        return []
    return [
        f"{member_id}'s {what} carried generation {generation}, forgotten in a coordinator "
        f"restart (the group is at {held}), and was answered error {error} instead of "
        "ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID"
    ]


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
                out.append(
                    f"target gives {mid} partitions of topic id {t}, not in the subscription metadata"
                )
            elif meta.name not in topics:
                out.append(
                    f"target gives {mid} partitions of {meta.name}, which it does not subscribe to"
                )
            elif max(assignment[t]) >= meta.num_partitions:
                out.append(
                    f"target gives {mid} {meta.name}-{max(assignment[t])} but it has {meta.num_partitions} partitions"
                )
    return out


def check_classic_assignment(classic: Any, topic_ids: dict[str, str]) -> list[str]:
    """A Stable classic group gives each partition to at most one member."""
    if classic is None or classic.state.value != "Stable":
        return []
    seen: dict[tuple[str, int], str] = {}
    out = []
    for mid in sorted(classic.members):
        for t, ps in sorted(classic_assignment(classic.members[mid], topic_ids).items()):
            for p in sorted(ps):
                if (t, p) in seen:
                    out.append(
                        f"classic generation {classic.generation} gives {t}-{p} to {seen[(t, p)]} and {mid}"
                    )
                seen[(t, p)] = mid
    return out


def check_accepted_commit(
    group: ConsumerGroup | None,
    member_id: str,
    epoch: int,
    accepted: Sequence[tuple[tuple[str, int], int]],
    committed: dict[tuple[str, int], int],
    *,
    classic: Any = None,
    topic_ids: dict[str, str] | None = None,
    stale: Collection[tuple[str, int]] = (),
) -> list[str]:
    """I6 for one commit the coordinator accepted: ``accepted`` lists ((topic id, partition),
    offset) of the partitions it answered NONE for, judged against the coordinator's state when
    it answered; ``committed`` holds the last accepted offset of each partition and is brought up
    to date. ``stale``: the committing client's stale claims when it committed
    (:func:`stale_owned`) — Kafka checks only a classic member's generation, so a re-created
    member's commit of them is accepted: not judged, and the partition's offset history starts
    over from it (:func:`stale_committed`)."""
    out = []
    for key, offset in accepted:
        if key in stale:
            stale_committed(committed, key)
            continue
        owner: str | None
        if classic is not None:
            owner = (
                member_id
                if key in classic_attributed(classic, member_id, topic_ids or {})
                else "nobody (classic group)"
            )
        else:
            owner = None if group is None else group.owner_of(*key)
        if owner != member_id:
            out.append(
                f"commit of {key} by {member_id} (epoch {epoch}) accepted while the coordinator "
                f"attributes it to {owner}"
            )
        if offset < committed.get(key, -1):
            out.append(
                f"commit of {key} by {member_id} moved the offset back from {committed[key]} "
                f"to {offset}"
            )
        committed[key] = offset
    return out


def released_at_its_epoch(
    group: ConsumerGroup | None, member_id: str, epoch: int, key: tuple[str, int]
) -> bool:
    """Is ``key`` one the consumer-protocol member let go of at its current epoch ``epoch``,
    which its commit at that epoch names (I6's exception, :data:`OFFSETS_FENCED`)? Kafka
    accepts such a commit: the epoch is the member's, so no partition is checked."""
    member = None if group is None else group.members.get(member_id)
    return (
        member is not None
        and member.classic_member_metadata is None
        and member.member_epoch == epoch
        and group is not None
        and group.owner_of(*key) != member_id
    )


def stale_committed(committed: dict[tuple[str, int], int], key: tuple[str, int]) -> None:
    """A stale claim's commit was accepted: the partition's committed offset is that stale
    client's, so the owner's next commit is not judged against the offset history before it."""
    committed.pop(key, None)


def check_safety(
    group: ConsumerGroup | None,
    clients: Sequence[SimClient],
    names: Collection[str] = SAFETY,
    *,
    classic: Any = None,
    topic_ids: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The selected safety invariants (default: all); [(name, message)] for those that fail.
    ``classic``: the classic group of that id, if the legacy bridge holds one."""
    out: list[tuple[str, str]] = []
    if NO_DOUBLE_OWNERSHIP in names:
        out += [
            (NO_DOUBLE_OWNERSHIP, m) for m in check_no_double_ownership(group, clients, classic)
        ]
    if OWNED_KNOWN_TO_COORDINATOR in names:
        out += [
            (OWNED_KNOWN_TO_COORDINATOR, m)
            for m in check_owned_known(group, clients, classic, topic_ids)
        ]
    if EPOCHS_BOUNDED in names:
        out += [(EPOCHS_BOUNDED, m) for m in check_epochs(group, clients, classic)]
    if TARGET_VALID in names:
        out += [(TARGET_VALID, m) for m in check_target(group)]
        out += [(TARGET_VALID, m) for m in check_classic_assignment(classic, topic_ids or {})]
    return out


def _held_tokens(shard: Any, index: int) -> dict[tuple[int, int], str]:
    """(shard, token) -> whose, for every request the core holds parked."""
    out: dict[tuple[int, int], str] = {}
    for group in shard.groups.values():
        for member_id, tokens in group.waiting.items():
            for token in tokens:
                out[(index, token)] = f"the join of {member_id} to {group.group_id}"
    for group_id, group in shard.classic_groups.items():
        for member_id, member in group.members.items():
            if member.join_token is not None:
                out[(index, member.join_token)] = f"the JoinGroup of {member_id} to {group_id}"
            if member.sync_token is not None:
                out[(index, member.sync_token)] = f"the SyncGroup of {member_id} to {group_id}"
    return out


def check_parked(driver: Any) -> list[str]:
    """I7 over the runtime's driver (:data:`PARKED_ANSWERED_ONCE`); callers never go away."""
    held: dict[tuple[int, int], str] = {}
    for index, shard in enumerate(driver.shards):
        held.update(_held_tokens(shard, index))
    answering = {
        (index, token)
        for batch in (driver.pending, driver.inflight)
        if batch is not None
        for index, token, _response in batch.completions
    }
    waiting = {key for key, fut in driver.parked.items() if not fut.done()}
    out = []
    lost = sorted(held[k] for k in set(held) - waiting)
    if lost:
        out.append(f"the core holds parked {lost}, but no request waits for the answer")
    orphans = sorted(set(waiting) - set(held) - answering)
    if orphans:
        out.append(
            f"requests wait for answers to tokens {[t for _i, t in orphans]} that the core no "
            "longer holds and no batch carries: nothing will answer them"
        )
    computing = set(driver.own.assigning) | {
        group_id
        for batch in (driver.pending, driver.inflight)
        if batch is not None
        for _index, group_id in batch.offloads
    }
    for index, shard in enumerate(driver.shards):
        for group in shard.groups.values():
            gid = group.group_id
            if group.waiting and gid not in driver.own.first_targets and gid not in computing:
                out.append(
                    f"joins of {sorted(group.waiting)} are parked on shard {index}, but no first "
                    "target is asked for and no target is being computed: nothing will answer them"
                )
    return out
