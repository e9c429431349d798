"""Coordinator configuration: Kafka's names, Kafka's defaults, validated with clear messages.

:func:`parse_config` turns ``{name: text}`` (from ``--set`` / a config file) into a frozen
:class:`GroupCoordinatorConfig`, refusing unknown names and out-of-range values with
:class:`ConfigError`. Per-group dynamic overrides (``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``, ``consumer.assignment.interval.ms``) are validated by
:func:`check_group_config`.

Big groups (docs/operations.md "Big groups and join storms"): a group's target assignment is
computed at most once per ``group.consumer.assignment.interval.ms`` (Kafka 4.3; 0 computes it
in every heartbeat that changes the group, as before 4.3), bounded by the min/max interval
configs like Kafka's; groups of at least ``group.consumer.assignor.offload.min.members``
members have it computed outside the event loop (``group.consumer.assignor.offload.enable``,
Kafka's trunk name) by ``group.coordinator.background.threads`` worker processes — unless the
change is small and the assignor computes only what changes
(``group.consumer.assignor.offload.inline.max.changed.members``: shipping the inputs to a
worker costs far more than that computation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

INT_MAX = 2**31 - 1
KAFKA_STRING_MAX = 2**15 - 1
"""The longest string Kafka's protocol can carry (an INT16 length)."""


class ConfigError(ValueError):
    """A bad configuration; the message names the setting and the rule it breaks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupCoordinatorConfig:
    consumer_session_timeout_ms: int = 45_000
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    consumer_max_size: int = INT_MAX
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_migration_policy: str = "bidirectional"
    consumer_regex_refresh_interval_ms: int = 600_000
    consumer_assignment_interval_ms: int = 1_000
    consumer_min_assignment_interval_ms: int = 0
    consumer_max_assignment_interval_ms: int = 15_000
    consumer_assignor_offload_enable: bool = True
    consumer_assignor_offload_min_members: int = 100
    consumer_assignor_offload_inline_max_changed_members: int = 24
    """Not a Kafka setting: a computation for a group of ``offload.min.members`` or more is
    done inline all the same when its assignor computes only what changes (``assign_changes``)
    and at most this many members changed since the last one (0: always offloaded)."""
    background_threads: int = 1
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5_000
    """Kafka's ``offsets.commit.timeout.ms``: how long a request waits for its write (or for
    the write before it) to be durable before it is answered COORDINATOR_NOT_AVAILABLE (the
    write goes on; ``coordinator/runtime/driver.py``, "Write timeout")."""
    offset_metadata_max_bytes: int = 4_096
    producer_id_expiration_ms: int = 86_400_000
    """Kafka's ``producer.id.expiration.ms``: how long a group keeps a producer's fenced epochs
    (``core/transactions.py``) after the InitProducerId that fenced them or the end of the
    producer's transaction."""
    transactional_id_expiration_ms: int = 604_800_000
    """Kafka's ``transactional.id.expiration.ms``: among several nodes, a transactional id's
    mapping to its group (``core/transactional_ids.py``) is removed once the id has had no
    transaction API served for this long and holds no open transaction."""
    transactional_id_cleanup_interval_ms: int = 3_600_000
    """Kafka's ``transaction.remove.expired.transaction.cleanup.interval.ms``: how often the
    expired mappings are looked for, and the precision of their recorded activity."""
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    classic_initial_rebalance_delay_ms: int = 3_000
    classic_max_size: int = INT_MAX
    message_max_bytes: int = 1_048_588
    """Kafka's ``message.max.bytes`` (the offsets topic's ``max.message.bytes``): the largest
    record batch, which a classic group's GroupMetadata record must fit
    (``legacy_bridge/classic_group.py``); a larger one fails as Kafka's append fails with
    MESSAGE_TOO_LARGE, answered UNKNOWN_SERVER_ERROR."""
    offsets_topic_partitions: int = 50
    """Kafka's ``offsets.topic.num.partitions``: how many coordinator partitions groups are
    hashed onto (``coordinator/routing.py``), each its own log in the store and its own state
    machine (``group.coordinator.shards`` is another name for it). A store keeps the count it
    was created with."""
    num_partitions: int = 1
    """Kafka's ``num.partitions``: the partition count of a topic created with -1 (the default)."""
    # Bounded cost per request (docs/operations.md "Limits"; checked by the service layer,
    # coordinator/server/limits.py, before any work). Not Kafka settings: Kafka's own bound is
    # its wire format (strings of at most 32,767 bytes, requests of socket.request.max.bytes).
    identifier_max_bytes: int = 1_024
    consumer_regex_max_bytes: int = KAFKA_STRING_MAX
    consumer_max_subscribed_topics: int = 10_000
    request_max_partitions: int = 10_000
    request_max_groups: int = 10_000


# Kafka config name -> (field, parser, minimum, maximum)
def _int(text: str) -> int:
    return int(text.strip())


def _list(text: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise ValueError("must list at least one value")
    return items


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError("must be true or false")
    return value == "true"


def _policy(text: str) -> str:
    value = text.strip().lower()
    if value not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ValueError("must be one of bidirectional, upgrade, downgrade, disabled")
    return value


_Spec = tuple[str, Callable[[str], Any], int | None, int | None]

CONFIG_SPECS: dict[str, _Spec] = {
    "group.consumer.session.timeout.ms": ("consumer_session_timeout_ms", _int, 1, None),
    "group.consumer.min.session.timeout.ms": ("consumer_min_session_timeout_ms", _int, 1, None),
    "group.consumer.max.session.timeout.ms": ("consumer_max_session_timeout_ms", _int, 1, None),
    "group.consumer.heartbeat.interval.ms": ("consumer_heartbeat_interval_ms", _int, 1, None),
    "group.consumer.min.heartbeat.interval.ms": (
        "consumer_min_heartbeat_interval_ms",
        _int,
        1,
        None,
    ),
    "group.consumer.max.heartbeat.interval.ms": (
        "consumer_max_heartbeat_interval_ms",
        _int,
        1,
        None,
    ),
    "group.consumer.max.size": ("consumer_max_size", _int, 1, INT_MAX),
    "group.consumer.assignors": ("consumer_assignors", _list, None, None),
    "group.consumer.migration.policy": ("consumer_migration_policy", _policy, None, None),
    "group.consumer.regex.refresh.interval.ms": (
        "consumer_regex_refresh_interval_ms",
        _int,
        10_000,
        None,
    ),
    "group.consumer.assignment.interval.ms": ("consumer_assignment_interval_ms", _int, 0, None),
    "group.consumer.min.assignment.interval.ms": (
        "consumer_min_assignment_interval_ms",
        _int,
        0,
        None,
    ),
    "group.consumer.max.assignment.interval.ms": (
        "consumer_max_assignment_interval_ms",
        _int,
        0,
        None,
    ),
    "group.consumer.assignor.offload.enable": (
        "consumer_assignor_offload_enable",
        _bool,
        None,
        None,
    ),
    "group.consumer.assignor.offload.min.members": (
        "consumer_assignor_offload_min_members",
        _int,
        1,
        None,
    ),
    "group.consumer.assignor.offload.inline.max.changed.members": (
        "consumer_assignor_offload_inline_max_changed_members",
        _int,
        0,
        None,
    ),
    "group.coordinator.background.threads": ("background_threads", _int, 1, 64),
    "offsets.retention.minutes": ("offsets_retention_minutes", _int, 1, None),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", _int, 1, None),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _int, 1, INT_MAX),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _int, 0, None),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", _int, 1, INT_MAX),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", _int, 1, INT_MAX),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transactional_id_cleanup_interval_ms",
        _int,
        1,
        INT_MAX,
    ),
    "group.min.session.timeout.ms": ("classic_min_session_timeout_ms", _int, 0, None),
    "group.max.session.timeout.ms": ("classic_max_session_timeout_ms", _int, 0, None),
    "group.initial.rebalance.delay.ms": ("classic_initial_rebalance_delay_ms", _int, 0, None),
    "group.max.size": ("classic_max_size", _int, 1, INT_MAX),
    "message.max.bytes": ("message_max_bytes", _int, 1, INT_MAX),
    "offsets.topic.num.partitions": ("offsets_topic_partitions", _int, 1, 1024),
    "group.coordinator.shards": ("offsets_topic_partitions", _int, 1, 1024),
    "num.partitions": ("num_partitions", _int, 1, 1_000_000),
    "group.coordinator.identifier.max.bytes": (
        "identifier_max_bytes",
        _int,
        1,
        KAFKA_STRING_MAX,
    ),
    "group.consumer.regex.max.bytes": ("consumer_regex_max_bytes", _int, 1, KAFKA_STRING_MAX),
    "group.consumer.max.subscribed.topics": ("consumer_max_subscribed_topics", _int, 1, INT_MAX),
    "group.coordinator.request.max.partitions": ("request_max_partitions", _int, 1, INT_MAX),
    "group.coordinator.request.max.groups": ("request_max_groups", _int, 1, INT_MAX),
}
ALIASES = {"group.coordinator.shards": "offsets.topic.num.partitions"}
"""Other names of a setting: ``group.coordinator.shards`` (how many independent state machines
groups are hashed onto) predates coordinator partitions, which are those state machines."""
NAME_OF_FIELD = {spec[0]: name for name, spec in CONFIG_SPECS.items() if name not in ALIASES}

GROUP_CONFIGS = (
    "consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms",
    "consumer.assignment.interval.ms",
)


def parse_config(settings: Mapping[str, str]) -> GroupCoordinatorConfig:
    """Build a validated config from Kafka-named settings (unset names keep Kafka's defaults)."""
    values: dict[str, Any] = {}
    given: dict[str, tuple[str, Any]] = {}  # field -> (the name it was given by, its value)
    for name, text in settings.items():
        spec = CONFIG_SPECS.get(name)
        if spec is None:
            raise ConfigError(
                f"unknown configuration '{name}' (known: {', '.join(sorted(CONFIG_SPECS))})"
            )
        field_name, parser, lo, hi = spec
        try:
            value = parser(str(text))
        except ValueError as exc:
            raise ConfigError(f"invalid value {text!r} for '{name}': {exc}") from None
        if isinstance(value, int) and lo is not None and value < lo:
            raise ConfigError(f"invalid value {value} for '{name}': must be >= {lo}")
        if isinstance(value, int) and hi is not None and value > hi:
            raise ConfigError(f"invalid value {value} for '{name}': must be <= {hi}")
        if field_name in given and given[field_name][1] != value:
            other, before = given[field_name]
            raise ConfigError(
                f"'{other}' and '{name}' name the same setting and were given different values "
                f"({before} and {value})"
            )
        given[field_name] = (name, value)
        values[field_name] = value
    config = GroupCoordinatorConfig(**values)
    check_config(config)
    return config


def check_config(c: GroupCoordinatorConfig) -> None:
    """Cross-field rules, as Kafka's GroupCoordinatorConfig enforces them."""

    def need(cond: bool, message: str) -> None:
        if not cond:
            raise ConfigError(message)

    need(
        c.consumer_min_session_timeout_ms
        <= c.consumer_session_timeout_ms
        <= c.consumer_max_session_timeout_ms,
        "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms "
        f"and group.consumer.max.session.timeout.ms ({c.consumer_min_session_timeout_ms}.."
        f"{c.consumer_max_session_timeout_ms}), got {c.consumer_session_timeout_ms}",
    )
    need(
        c.consumer_min_heartbeat_interval_ms
        <= c.consumer_heartbeat_interval_ms
        <= c.consumer_max_heartbeat_interval_ms,
        "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms "
        f"and group.consumer.max.heartbeat.interval.ms ({c.consumer_min_heartbeat_interval_ms}.."
        f"{c.consumer_max_heartbeat_interval_ms}), got {c.consumer_heartbeat_interval_ms}",
    )
    need(
        c.consumer_heartbeat_interval_ms < c.consumer_session_timeout_ms,
        "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms",
    )
    need(
        c.consumer_min_heartbeat_interval_ms < c.consumer_min_session_timeout_ms,
        "group.consumer.min.heartbeat.interval.ms must be less than group.consumer.min.session.timeout.ms",
    )
    need(
        c.consumer_min_assignment_interval_ms <= c.consumer_max_assignment_interval_ms,
        "group.consumer.min.assignment.interval.ms must be <= "
        "group.consumer.max.assignment.interval.ms",
    )
    need(
        c.consumer_min_assignment_interval_ms
        <= c.consumer_assignment_interval_ms
        <= c.consumer_max_assignment_interval_ms,
        "group.consumer.assignment.interval.ms must be between "
        "group.consumer.min.assignment.interval.ms and group.consumer.max.assignment.interval.ms "
        f"({c.consumer_min_assignment_interval_ms}..{c.consumer_max_assignment_interval_ms}), "
        f"got {c.consumer_assignment_interval_ms}",
    )
    need(
        c.classic_min_session_timeout_ms <= c.classic_max_session_timeout_ms,
        "group.min.session.timeout.ms must be <= group.max.session.timeout.ms",
    )
    need(
        len(set(c.consumer_assignors)) == len(c.consumer_assignors),
        "group.consumer.assignors lists a name twice",
    )


def check_group_config(c: GroupCoordinatorConfig, name: str, value: str) -> int:
    """Validate one per-group dynamic config value; returns it parsed. Kafka's GroupConfig rules:
    within the broker's min/max bounds."""
    if name not in GROUP_CONFIGS:
        raise ConfigError(f"unknown group config '{name}' (supported: {', '.join(GROUP_CONFIGS)})")
    try:
        parsed = int(value)
    except ValueError:
        raise ConfigError(f"invalid value {value!r} for '{name}': not an integer") from None
    if name == "consumer.session.timeout.ms":
        lo, hi = c.consumer_min_session_timeout_ms, c.consumer_max_session_timeout_ms
    elif name == "consumer.assignment.interval.ms":
        lo, hi = c.consumer_min_assignment_interval_ms, c.consumer_max_assignment_interval_ms
    else:
        lo, hi = c.consumer_min_heartbeat_interval_ms, c.consumer_max_heartbeat_interval_ms
    if not lo <= parsed <= hi:
        raise ConfigError(f"invalid value {parsed} for '{name}': must be between {lo} and {hi}")
    return parsed


def config_items(c: GroupCoordinatorConfig) -> dict[str, str]:
    """The config as Kafka-named text values (for describe/dump)."""
    out = {}
    for f in fields(c):
        value = getattr(c, f.name)
        if isinstance(value, tuple):
            out[NAME_OF_FIELD[f.name]] = ",".join(value)
        elif isinstance(value, bool):
            out[NAME_OF_FIELD[f.name]] = "true" if value else "false"
        else:
            out[NAME_OF_FIELD[f.name]] = str(value)
    return out
