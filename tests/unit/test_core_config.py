"""Coordinator configuration (coordinator/core/config.py): Kafka's names and defaults, value and
cross-field validation, and per-group dynamic config validation (reference notes §2)."""

from __future__ import annotations

import dataclasses

import pytest

from coordinator.core.config import (
    ALIASES,
    CONFIG_SPECS,
    GROUP_CONFIGS,
    INT_MAX,
    ConfigError,
    GroupCoordinatorConfig,
    check_config,
    check_group_config,
    config_items,
    parse_config,
)

# Kafka 4.0's defaults, by Kafka config name (reference notes §2).
KAFKA_DEFAULTS = {
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.max.session.timeout.ms": "60000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
    "group.consumer.max.heartbeat.interval.ms": "15000",
    "group.consumer.max.size": str(2**31 - 1),
    "group.consumer.assignors": "uniform,range",
    "group.consumer.migration.policy": "bidirectional",
    "group.consumer.regex.refresh.interval.ms": "600000",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offset.metadata.max.bytes": "4096",
    "producer.id.expiration.ms": "86400000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.max.size": str(2**31 - 1),
    "message.max.bytes": "1048588",
}


def test_defaults_match_kafka() -> None:
    items = config_items(GroupCoordinatorConfig())
    for name, value in KAFKA_DEFAULTS.items():
        assert items[name] == value, name
    assert INT_MAX == 2**31 - 1


def test_every_field_has_a_kafka_name() -> None:
    names = {f.name for f in dataclasses.fields(GroupCoordinatorConfig)}
    assert {spec[0] for spec in CONFIG_SPECS.values()} == names
    assert set(config_items(GroupCoordinatorConfig())) == set(CONFIG_SPECS) - set(ALIASES)


def test_coordinator_partitions_have_kafkas_name_and_default_and_an_older_name() -> None:
    assert GroupCoordinatorConfig().offsets_topic_partitions == 50  # Kafka's default
    by_kafka = parse_config({"offsets.topic.num.partitions": "8"})
    assert by_kafka == parse_config({"group.coordinator.shards": "8"})
    assert by_kafka.offsets_topic_partitions == 8
    assert parse_config({"offsets.topic.num.partitions": "8", "group.coordinator.shards": "8"})
    with pytest.raises(ConfigError) as info:
        parse_config({"offsets.topic.num.partitions": "8", "group.coordinator.shards": "4"})
    assert str(info.value) == (
        "'offsets.topic.num.partitions' and 'group.coordinator.shards' name the same setting "
        "and were given different values (8 and 4)"
    )
    assert config_items(by_kafka)["offsets.topic.num.partitions"] == "8"
    assert "group.coordinator.shards" not in config_items(by_kafka)


def test_empty_settings_give_the_defaults() -> None:
    assert parse_config({}) == GroupCoordinatorConfig()
    check_config(GroupCoordinatorConfig())


def test_config_items_round_trip() -> None:
    c = parse_config(
        {
            "group.consumer.assignors": "range, uniform",
            "group.consumer.max.size": "10",
            "group.consumer.migration.policy": "UPGRADE",
            "group.coordinator.shards": "7",
        }
    )
    assert c.consumer_assignors == ("range", "uniform")
    assert c.consumer_migration_policy == "upgrade"
    assert parse_config(config_items(c)) == c


def test_parsing_trims_whitespace_and_values_may_be_any_text() -> None:
    c = parse_config(
        {
            "group.consumer.session.timeout.ms": " 50000 ",
            "group.consumer.assignors": " uniform , ,range ",
        }
    )
    assert c.consumer_session_timeout_ms == 50_000
    assert c.consumer_assignors == ("uniform", "range")
    assert parse_config({"group.consumer.max.size": 3}).consumer_max_size == 3  # type: ignore[dict-item]


def test_config_is_frozen() -> None:
    c = GroupCoordinatorConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.consumer_max_size = 3  # type: ignore[misc]


def test_unknown_name() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"group.consumer.sesion.timeout.ms": "1"})
    message = str(info.value)
    assert message.startswith("unknown configuration 'group.consumer.sesion.timeout.ms' (known: ")
    assert "group.consumer.session.timeout.ms" in message


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("group.consumer.max.size", "abc", "invalid value 'abc' for 'group.consumer.max.size': "),
        ("group.consumer.max.size", "1.5", "invalid value '1.5' for 'group.consumer.max.size': "),
        ("group.consumer.max.size", "", "invalid value '' for 'group.consumer.max.size': "),
        (
            "group.consumer.max.size",
            "0",
            "invalid value 0 for 'group.consumer.max.size': must be >= 1",
        ),
        (
            "group.consumer.max.size",
            str(2**31),
            f"invalid value {2**31} for 'group.consumer.max.size': must be <= {2**31 - 1}",
        ),
        ("group.max.size", "0", "invalid value 0 for 'group.max.size': must be >= 1"),
        (
            "group.consumer.session.timeout.ms",
            "0",
            "invalid value 0 for 'group.consumer.session.timeout.ms': must be >= 1",
        ),
        (
            "group.consumer.heartbeat.interval.ms",
            "-1",
            "invalid value -1 for 'group.consumer.heartbeat.interval.ms': must be >= 1",
        ),
        (
            "group.consumer.regex.refresh.interval.ms",
            "9999",
            "invalid value 9999 for 'group.consumer.regex.refresh.interval.ms': must be >= 10000",
        ),
        (
            "offset.metadata.max.bytes",
            "-1",
            "invalid value -1 for 'offset.metadata.max.bytes': must be >= 0",
        ),
        (
            "offsets.retention.minutes",
            "0",
            "invalid value 0 for 'offsets.retention.minutes': must be >= 1",
        ),
        (
            "group.coordinator.shards",
            "0",
            "invalid value 0 for 'group.coordinator.shards': must be >= 1",
        ),
        (
            "group.coordinator.shards",
            "1025",
            "invalid value 1025 for 'group.coordinator.shards': must be <= 1024",
        ),
        (
            "group.consumer.assignors",
            "",
            "invalid value '' for 'group.consumer.assignors': must list at least one value",
        ),
        (
            "group.consumer.assignors",
            " , ",
            "invalid value ' , ' for 'group.consumer.assignors': must list at least one value",
        ),
        (
            "group.consumer.migration.policy",
            "sideways",
            "invalid value 'sideways' for 'group.consumer.migration.policy': must be one of bidirectional, upgrade, downgrade, disabled",
        ),
    ],
)
def test_bad_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({name: value})
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "policy", ["bidirectional", "upgrade", "downgrade", "disabled", "Disabled", " UPGRADE "]
)
def test_migration_policies(policy: str) -> None:
    assert (
        parse_config({"group.consumer.migration.policy": policy}).consumer_migration_policy
        == policy.strip().lower()
    )


def test_bounds_are_inclusive() -> None:
    c = parse_config(
        {
            "group.consumer.max.size": str(2**31 - 1),
            "group.coordinator.shards": "1024",
            "group.consumer.regex.refresh.interval.ms": "10000",
            "offset.metadata.max.bytes": "0",
            "group.consumer.session.timeout.ms": "45000",
            "group.consumer.heartbeat.interval.ms": "15000",
        }
    )
    assert (
        c.consumer_max_size,
        c.offsets_topic_partitions,
        c.consumer_regex_refresh_interval_ms,
        c.offset_metadata_max_bytes,
    ) == (2**31 - 1, 1024, 10_000, 0)


@pytest.mark.parametrize(
    "settings,message",
    [
        (
            {"group.consumer.session.timeout.ms": "44999"},
            "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and "
            "group.consumer.max.session.timeout.ms (45000..60000), got 44999",
        ),
        (
            {"group.consumer.session.timeout.ms": "60001"},
            "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and "
            "group.consumer.max.session.timeout.ms (45000..60000), got 60001",
        ),
        (
            {"group.consumer.min.session.timeout.ms": "50000"},
            "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and "
            "group.consumer.max.session.timeout.ms (50000..60000), got 45000",
        ),
        (
            {"group.consumer.max.session.timeout.ms": "40000"},
            "group.consumer.session.timeout.ms must be between group.consumer.min.session.timeout.ms and "
            "group.consumer.max.session.timeout.ms (45000..40000), got 45000",
        ),
        (
            {"group.consumer.heartbeat.interval.ms": "4999"},
            "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms and "
            "group.consumer.max.heartbeat.interval.ms (5000..15000), got 4999",
        ),
        (
            {"group.consumer.heartbeat.interval.ms": "15001"},
            "group.consumer.heartbeat.interval.ms must be between group.consumer.min.heartbeat.interval.ms and "
            "group.consumer.max.heartbeat.interval.ms (5000..15000), got 15001",
        ),
        (
            {
                "group.consumer.min.session.timeout.ms": "1000",
                "group.consumer.session.timeout.ms": "5000",
                "group.consumer.min.heartbeat.interval.ms": "1000",
            },
            "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms",
        ),
        (
            {
                "group.consumer.min.session.timeout.ms": "5000",
                "group.consumer.session.timeout.ms": "20000",
                "group.consumer.heartbeat.interval.ms": "5000",
            },
            "group.consumer.min.heartbeat.interval.ms must be less than group.consumer.min.session.timeout.ms",
        ),
        (
            {"group.min.session.timeout.ms": "7000", "group.max.session.timeout.ms": "6999"},
            "group.min.session.timeout.ms must be <= group.max.session.timeout.ms",
        ),
        (
            {"group.consumer.assignors": "uniform,range,uniform"},
            "group.consumer.assignors lists a name twice",
        ),
    ],
    ids=[
        "session_below_min",
        "session_above_max",
        "min_session_above_session",
        "max_session_below_session",
        "heartbeat_below_min",
        "heartbeat_above_max",
        "heartbeat_not_below_session",
        "min_heartbeat_not_below_min_session",
        "classic_min_above_max",
        "duplicate_assignor",
    ],
)
def test_cross_field_rules(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(settings)
    assert str(info.value) == message


def test_check_config_applies_to_directly_built_configs() -> None:
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms must be between"):
        check_config(GroupCoordinatorConfig(consumer_heartbeat_interval_ms=1))


def test_a_consistent_custom_config() -> None:
    c = parse_config(
        {
            "group.consumer.min.session.timeout.ms": "6000",
            "group.consumer.session.timeout.ms": "10000",
            "group.consumer.min.heartbeat.interval.ms": "1000",
            "group.consumer.heartbeat.interval.ms": "2000",
            "group.min.session.timeout.ms": "0",
            "group.max.session.timeout.ms": "0",
        }
    )
    assert (c.consumer_session_timeout_ms, c.consumer_heartbeat_interval_ms) == (10_000, 2_000)


# ------------------------------------------------------------------------ per-group configs


def test_group_config_names() -> None:
    assert GROUP_CONFIGS == (
        "consumer.session.timeout.ms",
        "consumer.heartbeat.interval.ms",
        "consumer.assignment.interval.ms",
    )


@pytest.mark.parametrize(
    "name,value,expected",
    [
        ("consumer.session.timeout.ms", "45000", 45_000),
        ("consumer.session.timeout.ms", "60000", 60_000),
        ("consumer.session.timeout.ms", " 50000", 50_000),
        ("consumer.heartbeat.interval.ms", "5000", 5_000),
        ("consumer.heartbeat.interval.ms", "15000", 15_000),
    ],
)
def test_group_config_accepts_values_within_the_broker_bounds(
    name: str, value: str, expected: int
) -> None:
    assert check_group_config(GroupCoordinatorConfig(), name, value) == expected


@pytest.mark.parametrize(
    "name,value,message",
    [
        (
            "consumer.session.timeout.ms",
            "44999",
            "invalid value 44999 for 'consumer.session.timeout.ms': must be between 45000 and 60000",
        ),
        (
            "consumer.session.timeout.ms",
            "60001",
            "invalid value 60001 for 'consumer.session.timeout.ms': must be between 45000 and 60000",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "4999",
            "invalid value 4999 for 'consumer.heartbeat.interval.ms': must be between 5000 and 15000",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "15001",
            "invalid value 15001 for 'consumer.heartbeat.interval.ms': must be between 5000 and 15000",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "abc",
            "invalid value 'abc' for 'consumer.heartbeat.interval.ms': not an integer",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "5e3",
            "invalid value '5e3' for 'consumer.heartbeat.interval.ms': not an integer",
        ),
        (
            "consumer.session.timeout.ms",
            "",
            "invalid value '' for 'consumer.session.timeout.ms': not an integer",
        ),
        (
            "consumer.rebalance.timeout.ms",
            "1",
            "unknown group config 'consumer.rebalance.timeout.ms' (supported: "
            "consumer.session.timeout.ms, consumer.heartbeat.interval.ms, "
            "consumer.assignment.interval.ms)",
        ),
        (
            "group.consumer.session.timeout.ms",
            "50000",
            "unknown group config 'group.consumer.session.timeout.ms' (supported: "
            "consumer.session.timeout.ms, consumer.heartbeat.interval.ms, "
            "consumer.assignment.interval.ms)",
        ),
    ],
)
def test_group_config_rejections(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_group_config(GroupCoordinatorConfig(), name, value)
    assert str(info.value) == message


def test_group_config_bounds_follow_the_broker_config() -> None:
    c = parse_config(
        {
            "group.consumer.min.session.timeout.ms": "10000",
            "group.consumer.max.heartbeat.interval.ms": "20000",
        }
    )
    assert check_group_config(c, "consumer.session.timeout.ms", "10000") == 10_000
    assert check_group_config(c, "consumer.heartbeat.interval.ms", "20000") == 20_000
    with pytest.raises(ConfigError, match="must be between 10000 and 60000"):
        check_group_config(c, "consumer.session.timeout.ms", "9999")
