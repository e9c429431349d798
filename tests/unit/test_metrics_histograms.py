"""LoopHistogram: one array append per observation on the event loop, bucketed later by the
folder thread and by every scrape; a scrape sees everything observed before it, with counts
that never go down while the loop keeps observing."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from coordinator.observability import histograms as m
from coordinator.observability.histograms import LoopHistogram
from coordinator.observability.metrics import parse_families


def histogram(registry: CollectorRegistry) -> LoopHistogram:
    return LoopHistogram(
        "t_seconds", "Test.", ["rpc"], buckets=(0.001, 0.01, 0.1), registry=registry
    )


def samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """(sample name, rpc, le) -> value, from the text exposition."""
    out = {}
    for s in parse_families(generate_latest(registry).decode())["t_seconds"]:
        out[(s.name, s.labels.get("rpc", ""), s.labels.get("le", ""))] = s.value
    return out


def test_a_scrape_buckets_every_value_observed_before_it() -> None:
    registry = CollectorRegistry()
    h = histogram(registry)
    for value in (0.0005, 0.001, 0.002, 0.05, 0.5, 7.0):
        h.labels("Heartbeat").observe(value)
    h.labels("Commit").observe(0.003)
    got = samples(registry)
    assert {k: v for k, v in got.items() if k[1] == "Heartbeat"} == {
        ("t_seconds_bucket", "Heartbeat", "0.001"): 2.0,  # le is inclusive
        ("t_seconds_bucket", "Heartbeat", "0.01"): 3.0,
        ("t_seconds_bucket", "Heartbeat", "0.1"): 4.0,
        ("t_seconds_bucket", "Heartbeat", "+Inf"): 6.0,
        ("t_seconds_count", "Heartbeat", ""): 6.0,
        ("t_seconds_sum", "Heartbeat", ""): 0.0005 + 0.001 + 0.002 + 0.05 + 0.5 + 7.0,
    }
    assert got[("t_seconds_count", "Commit", "")] == 1.0
    assert len(h.labels("Heartbeat").pending) == 0  # folded by the scrape

    h.labels("Heartbeat").observe(0.0001)  # after the scrape: in the next one
    assert samples(registry)[("t_seconds_bucket", "Heartbeat", "0.001")] == 3.0


def test_counts_never_go_down_while_the_loop_observes_during_scrapes() -> None:
    registry = CollectorRegistry()
    child = histogram(registry).labels("Heartbeat")
    total = 200_000
    seen: list[float] = []
    done = threading.Event()

    def scrape() -> None:
        while not done.is_set():
            seen.append(samples(registry)[("t_seconds_count", "Heartbeat", "")])

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        for i in range(total):
            child.observe(0.002 if i % 2 else 0.02)
    finally:
        done.set()
        scraper.join(timeout=30)
    assert not scraper.is_alive()
    final = samples(registry)
    assert len(seen) > 1
    assert seen == sorted(seen)  # never down
    assert final[("t_seconds_count", "Heartbeat", "")] == total  # none lost, none twice
    assert final[("t_seconds_bucket", "Heartbeat", "0.01")] == total / 2
    assert final[("t_seconds_sum", "Heartbeat", "")] == pytest.approx(total / 2 * 0.022, rel=1e-9)


def test_the_folder_thread_buckets_pending_values_without_a_scrape() -> None:
    registry = CollectorRegistry()
    child = histogram(registry).labels("Heartbeat")
    for _ in range(1000):
        child.observe(0.002)
    deadline = time.monotonic() + 10 * m.FOLD_INTERVAL_S
    while child.pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(child.pending) == 0
    assert child.counts == [0, 1000, 0, 0]
    assert m._folder is not None and m._folder.is_alive()


def test_a_fold_counts_every_value_in_the_bucket_bisect_gives_it() -> None:
    """The fold sets the first bucket's values apart in one pass before bisecting the others:
    the same buckets as ``bisect_left`` for every value (bounds, their neighbours, negative,
    infinite, NaN, ints), none lost, none twice."""
    import math
    import random
    from bisect import bisect_left

    rng = random.Random(848)
    bounds = (0.001, 0.01, 0.1)
    specials = [0.001, 0.01, 0.1, math.nextafter(0.001, 1), math.nextafter(0.001, 0), 0.0, -1.0]
    specials += [math.inf, math.nan, 0, 1, True]
    for n in (0, 1, 7, 1000):
        child = m._LoopChild(bounds)
        values = [
            rng.choice([rng.uniform(0, 0.002), rng.expovariate(10), *specials]) for _ in range(n)
        ]
        for value in values:
            child.observe(value)
        child.fold()
        expected = [0] * (len(bounds) + 1)
        for value in values:
            expected[bisect_left(bounds, value)] += 1
        assert child.counts == expected
        assert len(child.pending) == 0


def test_an_observed_value_is_stored_in_place_and_no_object_is_kept() -> None:
    """The loop's observation keeps no float object alive until the fold (a second's worth of
    them, three a heartbeat, on the loop's heap): the value is stored as a double."""
    import sys

    child = histogram(CollectorRegistry()).labels("Heartbeat")
    value = float("0.000123")  # a float object of its own
    before = sys.getrefcount(value)
    child.observe(value)
    assert sys.getrefcount(value) == before
    assert list(child.pending) == [0.000123]
    child.fold()
    assert child.counts == [1, 0, 0, 0] and child.sum == 0.000123
