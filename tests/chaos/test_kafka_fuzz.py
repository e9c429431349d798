"""CI run of the Kafka-listener fuzz (kafka_fuzz.py): 25,000 frames — mutations of real clients'
requests (kafka_corpus.txt: every one of them) and of codec-built requests of every API and
version the listener serves, each on a connection after a few intact ones —
beside four connections that pipeline 5,000 requests each and never read, and a KIP-848 member
of another group heartbeating and committing every 20 ms. The server lives and stops cleanly,
logs nothing above WARNING (one warning per bad connection at most), the member is answered
every time within a second, and the server's RSS stays within 96 MiB of its start."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator.server.kafka import wire

from . import kafka_corpus, kafka_fuzz, kafka_samples

FRAMES = 25_000
SEED = int(os.environ.get("KIP848_FUZZ_SEED", "848"))


@pytest.mark.slow
def test_kafka_listener_fuzz(tmp_path: Path) -> None:
    report = kafka_fuzz.run(FRAMES, SEED, tmp_path / "data")
    assert report.failures == [], report.failures[:20]
    assert report.frames >= FRAMES
    assert set(report.mutations) == set(kafka_fuzz.MUTATIONS)
    corpus = kafka_corpus.load()
    assert set(report.real_mutated) == {(e.key, e.version) for e in corpus}
    assert sum(report.real_mutated.values()) >= len(corpus)  # each real request at least once
    # Both kinds of answer happened: connections closed for bad input, and served requests.
    assert report.closed > FRAMES // 5 and report.answered > FRAMES // 3, report
    assert len(report.witness["latencies"]) > 50  # the witness ran throughout
    assert report.seconds < 90, report.seconds


def test_the_corpus_holds_real_clients_requests_of_served_api_versions() -> None:
    """kafka_corpus.txt is what it says: each line a whole request of a served API version
    (its header names it, the codec decodes it), from each of the three clients, covering most
    served API versions (the rest no client sends: the codec's frames stand in for them)."""
    corpus = kafka_corpus.load()
    served = set(kafka_samples.served_requests())
    for e in corpus:
        key, version, _correlation, client_id, pos = wire.parse_header(e.frame)
        assert (key, version) == (e.key, e.version) and (key, version) in served
        assert client_id == f"corpus/{e.client}"
        wire.decode(key, version, e.frame, wire.body_offset(e.frame, key, version, pos))
    clients = {e.client.split("-")[0] for e in corpus}
    assert clients == {"librdkafka", "kafka", "aiokafka"}  # kafka-python-<pin>
    assert len({(e.key, e.version) for e in corpus}) >= 0.8 * len(served)
