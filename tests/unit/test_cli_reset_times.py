"""``kip848 groups reset-offsets --to-datetime`` / ``--by-duration``: Kafka's time formats."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from coordinator.cli.group_offsets import parse_datetime, parse_duration


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT30M", 1_800_000),
        ("P1DT2H", 93_600_000),
        ("P2D", 172_800_000),
        ("PT1.5S", 1_500),
        ("PT0.001S", 1),
        ("PT0,25S", 250),
        ("pt1h", 3_600_000),
        ("-PT6H3M", -21_780_000),  # the whole duration negated (Java's Duration.parse)
        ("PT-6H3M", -21_420_000),  # one part negative
        ("PT-1.5S", -1_500),
        (" PT1M ", 60_000),
    ],
)
def test_durations_as_java_reads_them(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "P1", "1H", "PT1.5", "P1H", "PT1D", "P1DT", "x"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected an ISO-8601 duration"):
        parse_duration(text)


def test_datetimes_in_kafkas_format() -> None:
    utc = dt.datetime(2026, 11, 23, 9, 30, tzinfo=dt.UTC)
    ms = int(utc.timestamp() * 1000)
    assert parse_datetime("2026-11-23T09:30:00.000Z") == ms
    assert parse_datetime("2026-11-23T09:30:00.123+01:00") == ms - 3_600_000 + 123
    assert parse_datetime("2026-11-23T09:30:00-0200") == ms + 7_200_000
    # No zone: local time, as Kafka's tool.
    local = dt.datetime(2026, 11, 23, 9, 30).astimezone()
    assert parse_datetime("2026-11-23T09:30:00.000") == int(local.timestamp() * 1000)
    assert parse_datetime("2026-11-23T09:30") == int(local.timestamp() * 1000)
    for bad in ("2026-11-23", "yesterday", "2026-13-01T00:00:00", "09:30:00"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected YYYY-MM-DDTHH:mm:SS.sss"):
            parse_datetime(bad)
