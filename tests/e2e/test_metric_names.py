"""Metric names follow Prometheus' rules: a real scrape of ``kip848 serve --metrics-listen``
passes ``promtool check metrics`` (Debian's prometheus package) with no warning; the gauges that
describe a set export every known label value at 0; ``--metrics-deprecated-names`` adds the
old ``_count`` names for one release, with the same values (docs/operations.md, "Metrics")."""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

from conftest import ServerProcess

from coordinator.observability.metrics import (
    DEPRECATED_NAMES,
    GROUP_STATES,
    MEMBER_TYPES,
    SHARD_STATES,
)
from kip848.v1 import common_pb2

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(f"http://{server.metrics_address}/metrics", timeout=10) as r:
        return r.read().decode()


def promtool(text: str) -> tuple[int, str]:
    out = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    return out.returncode, (out.stdout + out.stderr).strip()


def samples(text: str, name: str) -> dict[str, float]:
    """``labels text -> value`` of every sample of ``name``."""
    found = {}
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(\{{.*\}})? (\S+)", line)
        if m:
            found[m.group(1) or ""] = float(m.group(2))
    return found


def one_stable_group(server: ServerProcess) -> None:
    server.create_topic("names", 2)
    joined = server.heartbeat(
        group_id="names-g",
        member_id="m1",
        member_epoch=0,
        rebalance_timeout_ms=5000,
        subscribed_topic_names=common_pb2.TopicNames(names=["names"]),
        topic_partitions=common_pb2.TopicPartitionsList(),
    )
    assert joined.error_code == 0, joined


def test_a_scrape_passes_promtool_and_sets_export_every_known_value(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--metrics-listen", "127.0.0.1:0")
    try:
        one_stable_group(server)
        text = scrape(server)
    finally:
        assert server.stop() == 0, server.stderr_text()
    assert promtool(text) == (0, "")
    groups = samples(text, "kip848_groups")
    assert set(groups) == {
        f'{{group_type="{t}",state="{s}"}}' for t, states in GROUP_STATES.items() for s in states
    }
    assert sum(groups.values()) == 1  # the one consumer group; every other value is there at 0
    assert groups['{group_type="classic",state="PreparingRebalance"}'] == 0
    members = samples(text, "kip848_members")
    assert set(members) == {f'{{group_type="{g}",member_type="{m}"}}' for g, m in MEMBER_TYPES}
    assert members['{group_type="consumer",member_type="consumer"}'] == 1
    shards = samples(text, "kip848_shards")
    assert set(shards) == {f'{{state="{s}"}}' for s in SHARD_STATES}
    assert shards['{state="active"}'] == 50 and shards['{state="failed"}'] == 0
    assert samples(text, "kip848_offsets") == {"": 0}
    for old in DEPRECATED_NAMES.values():
        assert not samples(text, old), f"{old} without --metrics-deprecated-names"
    # docs/operations.md's table lists exactly what a single node exports (the kip848_node_*
    # and kip848_partition_* series are a node's among several: tests/e2e/test_cluster_*).
    exported = set(re.findall(r"^# TYPE (kip848_\w+) ", text, re.M))
    assert documented_metrics() - exported == set()
    assert exported - documented_metrics() == set()


def documented_metrics() -> set[str]:
    """The metrics of docs/operations.md's table that a single node exports."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    table = doc.split("| metric | type | labels | meaning | Kafka |", 1)[1].split("\n\n", 1)[0]
    names = {
        name
        for row in table.splitlines()
        for name in re.findall(r"`(kip848_\w+)`", row.split(" | ")[0])
    }
    return {n for n in names if not n.startswith(("kip848_node_", "kip848_partition_"))}


def test_the_deprecated_names_are_aliases_for_one_release(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", "--metrics-listen", "127.0.0.1:0", "--metrics-deprecated-names"
    )
    try:
        one_stable_group(server)
        text = scrape(server)
    finally:
        assert server.stop() == 0, server.stderr_text()
    for new, old in DEPRECATED_NAMES.items():
        assert samples(text, old) == samples(text, new), old
        assert re.search(rf"# HELP {old} .*Deprecated name .*use {new}\.", text), old
    code, warnings = promtool(text)
    assert code != 0
    assert sorted(warnings.splitlines()) == sorted(
        f'{old} non-histogram and non-summary metrics should not have "_count" suffix'
        for old in DEPRECATED_NAMES.values()
    )
