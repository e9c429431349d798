"""Member reconciliation: move one member from its current assignment toward its target.

Pure function of (member, target epoch, target assignment, who owns each partition, what the
member reports it owns). Kafka's ``CurrentAssignmentBuilder`` semantics (KIP-848 "Member Epoch -
Reconciliation of the group"), with later Kafka refinements:

* a member keeps its epoch while it revokes, also when a newer target makes it revoke more,
  and moves to the target epoch once it has revoked everything it must (Kafka 4.2+,
  KAFKA-19974: no partition is ever held by two members at one epoch, one after the other);
* a partition held by the member itself (e.g. just acknowledged as revoked) is not treated as
  unreleased, so it can be handed straight back if the target gives it back;
* with the member's subscribed topic ids given (``subscribed``), a target that lags behind a
  subscription change (batching: the next target is up to an assignment interval away) never
  hands out partitions of topics the member no longer subscribes to, and a member at the
  target epoch whose subscription just dropped topics revokes their partitions at once, at the
  same epoch, also one still revoking what an earlier target took away (Kafka 4.3,
  KAFKA-19431: "revoke unsubscribed partitions since the target may lag").

States: STABLE (at its epoch, nothing pending), UNREVOKED_PARTITIONS (must revoke first; stays at
its old epoch), UNRELEASED_PARTITIONS (at the target epoch, waiting for partitions others still
hold), UNKNOWN (a state byte this build does not know: fenced unless it reports owning nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from assignors.api import TopicId

from .errors import FencedMemberEpochError
from .model import (
    Assignment,
    AssignmentEpochs,
    ConsumerGroupMember,
    MemberState,
    assignment_union,
    epochs_restricted,
)

OwnerOf = Callable[[TopicId, int], "str | None"]


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Does the member still report owning any of ``partitions``? Unknown (None) counts as yes."""
    if owned is None:
        return True
    for topic_id, ps in owned.items():
        pending = partitions.get(topic_id)
        if pending and not pending.isdisjoint(ps):
            return True
    return False


def compute_next_member(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owner_of: OwnerOf,
    owned: Assignment | None,
    subscribed: frozenset[TopicId] | None = None,
) -> ConsumerGroupMember:
    """The member's next state; returns ``member`` itself when nothing changes."""
    if subscribed is not None and not subscribed.issuperset(target):
        target = {t: ps for t, ps in target.items() if t in subscribed}
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            if subscribed is None or subscribed.issuperset(member.assigned_partitions):
                return member
            return _drop_unsubscribed(member, subscribed, owned)
        return _next(member, member.member_epoch, target_epoch, target, owner_of, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.partitions_pending_revocation):
            if subscribed is None or subscribed.issuperset(member.assigned_partitions):
                return member
            return _drop_unsubscribed(member, subscribed, owned)
        return _next(member, member.member_epoch, target_epoch, target, owner_of, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, owner_of, owned)
    # UNKNOWN
    if owned is None or owned:
        raise FencedMemberEpochError(
            "The consumer group member is in a unknown state. The member must abandon all its "
            "partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, owner_of, owned)


def _next(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_of: OwnerOf,
    owned: Assignment | None,
) -> ConsumerGroupMember:
    member_id = member.member_id
    assigned = member.assigned_partitions
    new_assigned: dict[TopicId, frozenset[int]] = {}
    revoke: dict[TopicId, frozenset[int]] = {}
    to_add: dict[TopicId, frozenset[int]] = {}
    unreleased = False
    # The target's topics in its order, then the assigned ones it dropped: never a set's order,
    # which follows the string hash and changes from one process to the next.
    for topic_id in [*target, *(t for t in assigned if t not in target)]:
        tgt = target.get(topic_id, frozenset())
        cur = assigned.get(topic_id, frozenset())
        keep = cur & tgt
        gone = cur - keep
        add = tgt - keep
        if add:
            free = frozenset(p for p in add if _is_free(owner_of(topic_id, p), member_id))
            if len(free) != len(add):
                unreleased = True
            add = free
        if keep:
            new_assigned[topic_id] = keep
        if gone:
            revoke[topic_id] = gone
        if add:
            to_add[topic_id] = add

    old_epochs = member.assignment_epochs
    if revoke and owns_any(owned, revoke):
        # Revoke first: stay at the (passed) epoch until the member acknowledges. The partitions
        # to revoke keep the epoch they were assigned at (KIP-1251): the member may still commit
        # them until it lets them go.
        return _changed(
            member,
            MemberState.UNREVOKED_PARTITIONS,
            epoch,
            new_assigned,
            revoke,
            epochs_restricted(old_epochs, assigned),
        )
    # Kept partitions keep their assignment epoch, new ones are assigned at the target epoch
    # (KIP-1251), also one that was pending revocation and is given back.
    epochs = epochs_restricted(old_epochs, new_assigned)
    if to_add:
        for topic_id, ps in to_add.items():
            prev = new_assigned.get(topic_id)
            new_assigned[topic_id] = ps if prev is None else prev | ps
        at_target = epochs.get(target_epoch)
        epochs[target_epoch] = to_add if at_target is None else assignment_union(at_target, to_add)
    new_state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _changed(member, new_state, target_epoch, new_assigned, {}, epochs)


def _drop_unsubscribed(
    member: ConsumerGroupMember, subscribed: frozenset[TopicId], owned: Assignment | None
) -> ConsumerGroupMember:
    """Assigned partitions of topics no longer subscribed, at the target epoch or while still
    revoking: they go at once, revoked first if the member may still own them (added to what
    it is revoking already); the epoch stays (Kafka 4.3's updateCurrentAssignment)."""
    assigned = member.assigned_partitions
    kept = {t: ps for t, ps in assigned.items() if t in subscribed}
    dropped = {t: ps for t, ps in assigned.items() if t not in subscribed}
    pending = member.partitions_pending_revocation
    revoke = assignment_union(pending, dropped) if pending else dropped
    epochs = member.assignment_epochs
    if owns_any(owned, revoke):
        return _changed(
            member,
            MemberState.UNREVOKED_PARTITIONS,
            member.member_epoch,
            kept,
            revoke,
            epochs_restricted(epochs, assignment_union(assigned, pending)),
        )
    return _changed(
        member, MemberState.STABLE, member.member_epoch, kept, {}, epochs_restricted(epochs, kept)
    )


def _is_free(owner: str | None, member_id: str) -> bool:
    return owner is None or owner == member_id


def _changed(
    member: ConsumerGroupMember,
    state: MemberState,
    epoch: int,
    assigned: Assignment,
    pending_revocation: Assignment,
    epochs: AssignmentEpochs,
) -> ConsumerGroupMember:
    if (
        member.state is state
        and member.member_epoch == epoch
        and member.assigned_partitions == assigned
        and member.partitions_pending_revocation == pending_revocation
        and member.assignment_epochs == epochs
    ):
        return member
    return replace(
        member,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        assigned_partitions=assigned,
        partitions_pending_revocation=pending_revocation,
        assignment_epochs=epochs,
    )
