"""What the push stream (ConsumerGroupWatch) tells a member, and when — pure, so that the server
(``coordinator/server/push.py``) and the simulator (``coordinator/sim``) apply the same rule.

A member is told when it has something new to do: its target assignment changed (partitions to
revoke, or new ones to wait for), a partition of its target that it does not have was released
(nobody holds it any more), or the group epoch moved past the assignment epoch (the next
heartbeat of any member computes the new target, as in Kafka). The first message of a stream
always goes out. A message is a hint: the member heartbeats and the heartbeat does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from .group import ConsumerGroup
from .model import Assignment, TopicId


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberView:
    """One member as the coordinator sees it, for the push stream."""

    member_epoch: int
    group_epoch: int
    assignment_epoch: int
    assigned: Assignment
    target: Assignment
    released: Assignment
    """Partitions of the target the member does not have and nobody else holds."""

    @property
    def assignment_due(self) -> bool:
        return self.group_epoch > self.assignment_epoch


def member_view(group: ConsumerGroup, member_id: str) -> MemberView | None:
    """The view of ``member_id`` (None: not, or no longer, a member)."""
    member = group.members.get(member_id)
    if member is None or member.member_epoch < 0:
        return None
    target = group.target_of(member_id)
    assigned = member.assigned_partitions
    released: dict[TopicId, frozenset[int]] = {}
    for topic_id, parts in target.items():
        mine = assigned.get(topic_id, frozenset())
        free = frozenset(p for p in parts - mine if group.owner_of(topic_id, p) is None)
        if free:
            released[topic_id] = free
    return MemberView(
        member_epoch=member.member_epoch,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assigned=assigned,
        target=target,
        released=released,
    )


def push_due(view: MemberView, last: MemberView | None) -> bool:
    """Whether ``view`` must be pushed, ``last`` being the previous view pushed on the stream."""
    if last is None or view.target != last.target:
        return True
    if any(not parts <= last.released.get(t, frozenset()) for t, parts in view.released.items()):
        return True
    return view.assignment_due and view.group_epoch != last.group_epoch
