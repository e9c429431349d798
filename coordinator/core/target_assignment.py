"""Computing a new target assignment (Kafka's ``TargetAssignmentBuilder``).

Builds the assignor's read-only inputs from the group (each member's subscribed topic *ids*
resolved through the group's subscription metadata, its current target, rack and instance id),
runs the assignor, validates the result, and diffs it against the current target: one
``ConsumerGroupTargetAssignmentMember`` record per member whose target changed, then always the
``ConsumerGroupTargetAssignmentMetadata`` record with the new assignment epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    TopicMetadata,
)
from assignors.validation import check_assignment

from . import records as r
from .errors import UnknownServerError
from .group import ConsumerGroup
from .model import EMPTY_ASSIGNMENT


def build_group_spec(group: ConsumerGroup) -> tuple[GroupSpec, Mapping[str, TopicMetadata]]:
    metadata = group.subscription_metadata
    by_name_id = {name: t.topic_id for name, t in metadata.items()}
    members = {}
    for member_id, m in group.members.items():
        names = group.effective_topics(m)
        ids = frozenset(by_name_id[n] for n in names if n in by_name_id)
        members[member_id] = MemberSubscription(
            rack_id=m.rack_id,
            instance_id=m.instance_id,
            subscribed_topic_ids=ids,
            assignment=group.target.get(member_id, EMPTY_ASSIGNMENT),
        )
    spec = GroupSpec(
        members=members,
        subscription_type=group.subscription_type(),
        partition_owners=group.target_owners,
    )
    topics = {t.topic_id: t for t in metadata.values()}
    return spec, topics


def compute_target_assignment(
    group: ConsumerGroup, group_epoch: int, assignor: PartitionAssignor
) -> list[r.Record]:
    """Records installing the new target assignment at ``group_epoch``. Raises
    UnknownServerError (nothing changed) if the assignor fails or returns an invalid result."""
    spec, topics = build_group_spec(group)
    try:
        result: GroupAssignment = assignor.assign(spec, topics)
        check_assignment(spec, topics, result)
    except PartitionAssignorError as exc:
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: {exc}"
        ) from exc
    except Exception as exc:  # a plugin bug must not corrupt the group: same treatment
        raise UnknownServerError(
            f"Failed to compute a new target assignment for epoch {group_epoch}: assignor "
            f"'{assignor.name}' raised {type(exc).__name__}: {exc}"
        ) from exc
    records = []
    group_id = group.group_id
    new_members = result.members
    for member_id in sorted(new_members):
        new = {t: ps for t, ps in new_members[member_id].items() if ps}
        if group.target.get(member_id, EMPTY_ASSIGNMENT) != new:
            records.append(r.target_assignment_record(group_id, member_id, new))
    records.append(r.target_assignment_epoch_record(group_id, group_epoch))
    return records
