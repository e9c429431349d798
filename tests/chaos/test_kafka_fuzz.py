"""CI run of the Kafka-listener fuzz (kafka_fuzz.py): 25,000 frames — mutations of requests of
every API and version the listener serves, each on a connection after a few intact ones —
beside four connections that pipeline 5,000 requests each and never read, and a KIP-848 member
of another group heartbeating and committing every 20 ms. The server lives and stops cleanly,
logs nothing above WARNING (one warning per bad connection at most), the member is answered
every time within a second, and the server's RSS stays within 96 MiB of its start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from . import kafka_fuzz

FRAMES = 25_000
SEED = int(os.environ.get("KIP848_FUZZ_SEED", "848"))


@pytest.mark.slow
def test_kafka_listener_fuzz(tmp_path: Path) -> None:
    report = kafka_fuzz.run(FRAMES, SEED, tmp_path / "data")
    assert report.failures == [], report.failures[:20]
    assert report.frames >= FRAMES
    assert set(report.mutations) == set(kafka_fuzz.MUTATIONS)
    # Both kinds of answer happened: connections closed for bad input, and served requests.
    assert report.closed > FRAMES // 5 and report.answered > FRAMES // 3, report
    assert len(report.witness["latencies"]) > 50  # the witness ran throughout
    assert report.seconds < 90, report.seconds
