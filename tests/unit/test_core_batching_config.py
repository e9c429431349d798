"""Configs of assignment batching and offloading (coordinator/core/config.py): Kafka's names,
defaults and bounds; the per-group interval."""

from __future__ import annotations

import pytest

from coordinator.core.config import (
    ConfigError,
    GroupCoordinatorConfig,
    check_group_config,
    config_items,
    parse_config,
)


def test_kafka_defaults() -> None:
    c = GroupCoordinatorConfig()
    items = config_items(c)
    assert {k: items[k] for k in sorted(items) if "assign" in k or "background" in k} == {
        "group.consumer.assignment.interval.ms": "1000",
        "group.consumer.assignor.offload.enable": "true",
        "group.consumer.assignor.offload.inline.max.changed.members": "24",
        "group.consumer.assignor.offload.min.members": "100",
        "group.consumer.assignors": "uniform,range",
        "group.consumer.max.assignment.interval.ms": "15000",
        "group.consumer.min.assignment.interval.ms": "0",
        "group.coordinator.background.threads": "1",
    }


def test_settings_are_parsed_and_bounded() -> None:
    c = parse_config(
        {
            "group.consumer.assignment.interval.ms": "0",
            "group.consumer.assignor.offload.enable": " FALSE ",
            "group.coordinator.background.threads": "2",
        }
    )
    assert (
        c.consumer_assignment_interval_ms,
        c.consumer_assignor_offload_enable,
        c.background_threads,
    ) == (0, False, 2)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"group.consumer.assignment.interval.ms": "20000"},
            "group.consumer.assignment.interval.ms must be between "
            "group.consumer.min.assignment.interval.ms and group.consumer.max.assignment.interval.ms "
            "(0..15000), got 20000",
        ),
        (
            {"group.consumer.min.assignment.interval.ms": "2000"},
            "group.consumer.assignment.interval.ms must be between "
            "group.consumer.min.assignment.interval.ms and group.consumer.max.assignment.interval.ms "
            "(2000..15000), got 1000",
        ),
        (
            {
                "group.consumer.min.assignment.interval.ms": "500",
                "group.consumer.max.assignment.interval.ms": "100",
            },
            "group.consumer.min.assignment.interval.ms must be <= "
            "group.consumer.max.assignment.interval.ms",
        ),
        (
            {"group.consumer.assignment.interval.ms": "-1"},
            "invalid value -1 for 'group.consumer.assignment.interval.ms': must be >= 0",
        ),
        (
            {"group.consumer.assignor.offload.enable": "yes"},
            "invalid value 'yes' for 'group.consumer.assignor.offload.enable': must be true or false",
        ),
        (
            {"group.coordinator.background.threads": "0"},
            "invalid value 0 for 'group.coordinator.background.threads': must be >= 1",
        ),
        (
            {"group.consumer.assignor.offload.min.members": "0"},
            "invalid value 0 for 'group.consumer.assignor.offload.min.members': must be >= 1",
        ),
        (
            {"group.consumer.assignor.offload.inline.max.changed.members": "-1"},
            "invalid value -1 for 'group.consumer.assignor.offload.inline.max.changed.members': "
            "must be >= 0",
        ),
    ],
)
def test_bad_settings_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(settings)
    assert str(info.value) == message


def test_the_group_interval_is_bounded_by_the_servers_min_and_max() -> None:
    c = parse_config({"group.consumer.max.assignment.interval.ms": "5000"})
    assert check_group_config(c, "consumer.assignment.interval.ms", "0") == 0
    assert check_group_config(c, "consumer.assignment.interval.ms", "5000") == 5000
    with pytest.raises(ConfigError) as info:
        check_group_config(c, "consumer.assignment.interval.ms", "5001")
    assert str(info.value) == (
        "invalid value 5001 for 'consumer.assignment.interval.ms': must be between 0 and 5000"
    )
