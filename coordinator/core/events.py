"""What happened, for the log: events returned with a handler's result.

The core does no logging. A handler that changes state says what it did as :class:`LogEvent`
values in its :class:`~coordinator.core.commands.Result`; the runtime writes them once the
records are durable, so a change that is rolled back leaves no log line. An event is structured
— a name from :class:`Event` plus fields (the group, the member, the cause) — so that metrics or
JSON logs can be built on it; :meth:`LogEvent.message` renders the human line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Event(Enum):
    """Event names (the value is the stable name a log consumer keys on)."""

    GROUP_EPOCH_BUMPED = "group_epoch_bumped"
    """Fields: ``group_epoch``, ``causes`` (tuple of :class:`Cause` values), ``member_ids``, and
    ``reason`` (free text) when a member was fenced."""
    STATIC_MEMBER_LEFT_TEMPORARILY = "static_member_left_temporarily"
    STATIC_MEMBER_REPLACED = "static_member_replaced"
    GROUP_CONFIG_ALTERED = "group_config_altered"
    GROUP_DELETED = "group_deleted"
    OFFSETS_EXPIRED = "offsets_expired"
    CLASSIC_REBALANCE_PREPARED = "classic_rebalance_prepared"
    CLASSIC_GENERATION_STABILIZED = "classic_generation_stabilized"
    CLASSIC_GROUP_EMPTIED = "classic_group_emptied"
    GROUP_UPGRADED = "group_upgraded"
    GROUP_DOWNGRADED = "group_downgraded"
    TARGET_ASSIGNMENT_DISCARDED = "target_assignment_discarded"
    """An offloaded computation came back too late to apply. Fields: ``epoch``, ``reason``."""
    TARGET_ASSIGNMENT_FAILED = "target_assignment_failed"
    """An offloaded computation failed (the group keeps its target). Fields: ``error``."""
    TRANSACTION_ENDED = "transaction_ended"
    """A producer's transaction holding offsets of the group ended. Fields:
    ``transactional_id``, ``producer_id``, ``producer_epoch``, ``outcome``."""


class Cause(Enum):
    """Why a consumer group's epoch moved (KIP-848 "Group Epoch")."""

    MEMBER_JOINED = "member_joined"
    MEMBER_LEFT = "member_left"
    MEMBER_FENCED_SESSION_TIMEOUT = "member_fenced_session_timeout"
    MEMBER_FENCED_REBALANCE_TIMEOUT = "member_fenced_rebalance_timeout"
    CLASSIC_MEMBER_FENCED_JOIN_TIMEOUT = "classic_member_fenced_join_timeout"
    CLASSIC_MEMBER_FENCED_SYNC_TIMEOUT = "classic_member_fenced_sync_timeout"
    SUBSCRIPTION_CHANGED = "subscription_changed"
    REGEX_CHANGED = "regex_changed"
    ASSIGNOR_CHANGED = "assignor_changed"
    RACK_CHANGED = "rack_changed"
    """A member's rack changed (KAFKA-20909): rack-aware assignors place partitions by it."""
    TOPIC_METADATA_CHANGED = "topic_metadata_changed"
    REGEX_RESOLVED = "regex_resolved"
    """A regex subscription was resolved (off the heartbeat path) to other topics than before."""


_TEMPLATES: dict[Event, str] = {
    Event.GROUP_EPOCH_BUMPED: "Bumped group epoch to {group_epoch}: {causes} (members {member_ids})",
    Event.STATIC_MEMBER_LEFT_TEMPORARILY: "Static member {member_id} with instance id "
    "{instance_id} temporarily left",
    Event.STATIC_MEMBER_REPLACED: "Static member with instance id {instance_id} re-joins as "
    "{member_id}, replacing {replaced_member_id}",
    Event.GROUP_CONFIG_ALTERED: "Group configs altered: {changes}",
    Event.GROUP_DELETED: "Group deleted ({reason})",
    Event.OFFSETS_EXPIRED: "Expired {count} offsets",
    Event.CLASSIC_REBALANCE_PREPARED: "Preparing to rebalance (generation {generation}): {reason}",
    Event.CLASSIC_GENERATION_STABILIZED: "Stabilized generation {generation} with {members} "
    "members (leader {leader_id}, protocol {protocol})",
    Event.CLASSIC_GROUP_EMPTIED: "Generation {generation} is empty",
    Event.GROUP_UPGRADED: "Upgraded classic group (generation {generation}, {members} members) "
    "to a consumer group",
    Event.GROUP_DOWNGRADED: "Downgraded consumer group (epoch {group_epoch}) to a classic group",
    Event.TARGET_ASSIGNMENT_DISCARDED: "Discarded the target assignment computed for epoch "
    "{epoch}: {reason}",
    Event.TARGET_ASSIGNMENT_FAILED: "{error}",
    Event.TRANSACTION_ENDED: "Transaction {transactional_id} (producer {producer_id} epoch "
    "{producer_epoch}) {outcome}",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEvent:
    event: Event
    group_id: str
    fields: dict[str, Any] = field(default_factory=dict)
    """Values are str, int, None or tuples of those (JSON-friendly)."""

    @property
    def name(self) -> str:
        return self.event.value

    def message(self) -> str:
        """The human line, e.g. ``[GroupId g] Bumped group epoch to 3: member_joined (members A)``."""
        values = {
            k: ", ".join(map(str, v)) if isinstance(v, tuple) else v for k, v in self.fields.items()
        }
        text = _TEMPLATES[self.event].format(**values)
        if self.event is Event.GROUP_EPOCH_BUMPED and "reason" in values:
            text += f": {values['reason']}"
        return f"[GroupId {self.group_id}] {text}."


def epoch_bumped(
    group_id: str,
    group_epoch: int,
    causes: tuple[Cause, ...],
    member_ids: tuple[str, ...],
    reason: str | None = None,
) -> LogEvent:
    fields: dict[str, Any] = {
        "group_epoch": group_epoch,
        "causes": tuple(c.value for c in causes),
        "member_ids": member_ids,
    }
    if reason is not None:
        fields["reason"] = reason
    return LogEvent(event=Event.GROUP_EPOCH_BUMPED, group_id=group_id, fields=fields)
