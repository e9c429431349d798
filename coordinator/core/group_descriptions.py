"""What a consumer group looks like from outside (reads: nothing changes): its
ConsumerGroupDescribe description, with each member's, and its ListGroups entry."""

from __future__ import annotations

from dataclasses import dataclass

from .commands import ListedGroup
from .group import ConsumerGroup
from .model import Assignment


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment
    member_type: int  # -1 unknown, 0 classic, 1 consumer
    state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    group_id: str
    group_uid: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[MemberDescription, ...]


def describe(group: ConsumerGroup, assignor_names: tuple[str, ...]) -> GroupDescription:
    """The group's description (members by id; ``assignor_names``: the server assignors, the
    first the default)."""
    group_id = group.group_id
    members = []
    for member_id in sorted(group.members):
        m = group.members[member_id]
        members.append(
            MemberDescription(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=m.assigned_partitions,
                target_assignment=group.target_of(member_id),
                member_type=0 if m.classic_member_metadata is not None else 1,
                state=m.state.name,
            )
        )
    return GroupDescription(
        group_id=group_id,
        group_uid=group.group_uid,
        group_state=group.state().value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(assignor_names),
        members=tuple(members),
    )


def listed(group_id: str, group: ConsumerGroup) -> ListedGroup:
    """The group's ListGroups entry."""
    return ListedGroup(
        group_id=group_id,
        protocol_type="consumer",
        group_state=group.state().value,
        group_type="consumer",
    )
