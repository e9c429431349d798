"""Loading the store, which is the fail-over time (issue 28: 100,000 groups, 3.3 M records, in
≤ 10 s on this machine).

    .venv/bin/python bench/load.py                            # ~20 min; writes docs/benchmarks.md
    .venv/bin/python bench/load.py --groups 10000 --no-doc    # a quick look

The store: canonical records of reconciled 10-member groups (33 each: built once by a real
shard, re-keyed per group; ``--offsets N`` adds N committed offsets per group), in 50
partitions, on SQLite (``sync="off"`` while it is built) and on PostgreSQL (a local server
started for the run, tests/pg.py, with its defaults). Each is loaded by the runtime's loader
(``load_into``: the cluster log, then every partition read a group at a time, each group's
records joined by the store, ``RecordStore.load_groups``, on a reader thread while the
previous partition is built, and each group built from its parsed records at once,
coordinator/core/group_load.py, into fresh shards) ``--repeat`` times, and once the way every
load went before group_load.py: each record read, decoded and replayed one by one
(``load_into(..., at_once=False)``, the same state), in the same run, on the same store. Wall time, CPU time of
this process and the load average are recorded: the 2 cores are shared with other work, so
wall times are rough and CPU time the steadier figure.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/pg.py: a PostgreSQL started for the run

from bench._report import command, machine, table, write_section  # noqa: E402
from coordinator.runtime.store import (  # noqa: E402
    PostgresRecordStore,
    RecordStore,
    SqliteRecordStore,
    StoredRecord,
)

MEMBERS = 10
TARGET_S = 10.0
TEMPLATE = b"GROUPTEMPLATE"
TEMPLATE_UID = b"cgp_00000000000000000000000001"


def template_records(
    offsets: int, members: int = MEMBERS
) -> tuple[list[tuple[bytes, bytes | None]], list[Any]]:
    """Canonical records of one reconciled group of ``members`` members (a real shard's
    ``records_of_state``) plus ``offsets`` offset commits, and the cluster log's topic record."""
    from assignors.uniform import UniformAssignor
    from coordinator.core import codec
    from coordinator.core import records as r
    from coordinator.core.commands import ConsumerGroupHeartbeat, SequentialIds
    from coordinator.core.config import GroupCoordinatorConfig
    from coordinator.core.topics import NewTopic, TopicRegistry
    from coordinator.factory import new_shard

    ids = SequentialIds()
    registry = TopicRegistry(ids)
    registry.create_topics(
        [NewTopic(name="topic", num_partitions=30, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")]
    )
    shard = new_shard(
        config=GroupCoordinatorConfig(),
        assignors=[UniformAssignor()],
        ids=ids,
        topics=registry.image(),
    )
    owned: dict[str, tuple[int, Any]] = {}
    for m in range(members):
        mid = f"member-{m:02d}-xxxxxxxxxxxx"
        joined = shard.consumer_group_heartbeat(
            ConsumerGroupHeartbeat(
                group_id=TEMPLATE.decode(),
                member_id=mid,
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=("topic",),
                topic_partitions={},
                client_id="bench",
                client_host="/127.0.0.1",
            ),
            0,
        ).response
        assert joined is not None and joined.assignment is not None, joined
        owned[mid] = (joined.member_epoch, joined.assignment.assigned)
    for _ in range(10):  # heartbeats until every member owns its target
        for mid, (epoch, assigned) in list(owned.items()):
            resp = shard.consumer_group_heartbeat(
                ConsumerGroupHeartbeat(
                    group_id=TEMPLATE.decode(),
                    member_id=mid,
                    member_epoch=epoch,
                    topic_partitions=assigned,
                    client_id="bench",
                    client_host="/127.0.0.1",
                ),
                0,
            ).response
            assert resp is not None
            a = resp.assignment
            owned[mid] = (resp.member_epoch, a.assigned if a is not None else assigned)
    records = [codec.encode(rec) for rec in shard.records_of_state()]
    records += [
        codec.encode(
            r.offset_commit_record(
                TEMPLATE.decode(),
                "topic",
                p,
                r.OffsetCommitValue(
                    offset=1_000_000 + p,
                    leader_epoch=-1,
                    metadata="",
                    commit_timestamp_ms=1_700_000_000_000,
                ),
            )
        )
        for p in range(offsets)
    ]
    topic = codec.encode(r.topic_record("topic", "AAAAAAAAAAAAAAAAAAAAAQ", 30))
    return records, [StoredRecord(topic[0], topic[1], None)]


def build(
    store: RecordStore,
    groups: int,
    offsets: int,
    batch: int,
    *,
    members: int = MEMBERS,
    group_ids: Iterable[str] | None = None,
) -> int:
    """Write the store: every group's records re-keyed from the template (``members``
    members; ``group_ids``: the ids of the ``groups`` groups, else ``group-0000000``, ...).
    Returns records."""
    records, topics = template_records(offsets, members)
    store.append(topics, 0)
    pending: list[StoredRecord] = []
    n = len(topics)
    ids = iter(group_ids) if group_ids is not None else (f"group-{g:07d}" for g in range(groups))
    for g, gid in zip(range(groups), ids, strict=False):
        gb = gid.encode()
        uid = f"cgp_{g:026d}".encode()
        for k, v in records:
            value = None if v is None else v.replace(TEMPLATE, gb).replace(TEMPLATE_UID, uid)
            pending.append(StoredRecord(k.replace(TEMPLATE, gb), value, gid))
        if len(pending) >= batch:
            store.append(pending, 1 + g)
            n += len(pending)
            pending = []
    store.append(pending, 1 + groups)
    return n + len(pending)


def load(store: RecordStore, *, at_once: bool) -> dict[str, Any]:
    """One load into fresh shards: wall and CPU seconds, groups, members."""
    from coordinator.core.commands import SequentialIds
    from coordinator.core.config import GroupCoordinatorConfig
    from coordinator.core.topics import TopicRegistry
    from coordinator.factory import new_shard
    from coordinator.runtime.assignors import make_assignors
    from coordinator.runtime.loader import load_into

    config = GroupCoordinatorConfig()
    ids = SequentialIds()
    assignors = make_assignors(config.consumer_assignors)
    shards = [
        new_shard(config=config, assignors=assignors, ids=ids) for _ in range(store.partitions)
    ]
    registry = TopicRegistry(ids)
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    stats = load_into(store, shards, registry, at_once=at_once)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    out = {
        "wall_s": wall,
        "cpu_s": cpu,
        "groups": stats.groups,
        "members": sum(len(g.members) for s in shards for g in s.groups.values()),
        "offsets": sum(len(o) for s in shards for o in s.offsets.values()),
        "records": stats.records,
    }
    del shards, registry, stats
    gc.unfreeze()  # the loader froze the loaded state: let this load's go
    gc.collect()
    return out


def bench_store(
    name: str, make: Callable[[], RecordStore], groups: int, offsets: int, repeat: int, batch: int
) -> list[list[object]]:
    """Build one store, then load it ``repeat`` times at once and once one by one."""
    store = make()
    t0 = time.perf_counter()
    build(store, groups, offsets, batch)
    built = time.perf_counter() - t0
    print(f"{name}: built in {built:.0f} s", flush=True)
    rows = []
    runs = [("at once", True, i + 1) for i in range(repeat)] + [("one by one", False, 1)]
    for path, at_once, run in runs:
        before = os.getloadavg()[0]
        r = load(store, at_once=at_once)
        after = os.getloadavg()[0]
        rows.append(
            [
                name,
                path,
                run,
                f"{r['groups']:,}",
                f"{r['members']:,}",
                f"{r['offsets']:,}",
                f"{r['records']:,}",
                f"{r['wall_s']:.1f}",
                f"{r['cpu_s']:.1f}",
                f"{r['records'] / r['wall_s']:,.0f}",
                f"{before:.1f}→{after:.1f}",
                f"≤ {TARGET_S:.0f} s" if at_once else "",
            ]
        )
        print(rows[-1], flush=True)
    store.close()
    return rows


def _median(rows: list[list[object]], name: str, column: int) -> float:
    values = sorted(float(str(r[column])) for r in rows if r[0] == name and r[1] == "at once")
    return values[len(values) // 2]


def _peer(rows: list[list[object]], name: str, column: int) -> float:
    return next(float(str(r[column])) for r in rows if r[0] == name and r[1] == "one by one")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--groups", type=int, default=100_000)
    ap.add_argument("--offsets", type=int, default=0, help="committed offsets per group")
    ap.add_argument("--repeat", type=int, default=3, help="loads at once per store")
    ap.add_argument("--no-postgresql", action="store_true")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kip848-bench-load-"))
    server = None
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    try:
        stores: list[tuple[str, Callable[[], RecordStore], int]] = [
            ("SQLite", lambda: SqliteRecordStore(work / "sqlite", sync="off"), 200_000)
        ]
        if not args.no_postgresql:
            from pg import PostgresServer

            server = PostgresServer(fsync=True).start()
            dsn = server.fresh_store_dsn()
            stores.append(("PostgreSQL", lambda: PostgresRecordStore(dsn), 20_000))
        rows: list[list[object]] = []
        for name, make, batch in stores:
            rows += bench_store(name, make, args.groups, args.offsets, args.repeat, batch)
            shutil.rmtree(work / "sqlite", ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    headers = [
        "store",
        "path",
        "run",
        "groups",
        "members",
        "offsets",
        "records",
        "wall s",
        "CPU s",
        "records/s (wall)",
        "load avg",
        "target",
    ]
    lines = []
    for name in dict.fromkeys(str(r[0]) for r in rows):
        wall, cpu = _median(rows, name, 7), _median(rows, name, 8)
        peer_wall, peer_cpu = _peer(rows, name, 7), _peer(rows, name, 8)
        lines.append(
            f"* **{name}: {wall:.1f} s wall, {cpu:.1f} s CPU** (median of {args.repeat}; target "
            f"≤ {TARGET_S:.0f} s: {'met' if wall <= TARGET_S else 'not met'} on the wall clock"
            f"{', met in CPU time' if wall > TARGET_S and cpu <= TARGET_S else ''}); one by one "
            f"in the same run: {peer_wall:.1f} s wall, {peer_cpu:.1f} s CPU "
            f"({peer_cpu / cpu:.1f}× the CPU)."
        )
    cmd = command(
        "bench/load.py",
        (
            ("--groups", args.groups, 100_000),
            ("--offsets", args.offsets, 0),
            ("--repeat", args.repeat, 3),
        ),
    )
    body = (
        f"## Loading the store: the fail-over time (`{cmd}`)\n\n"
        f"{machine()}; "
        + (
            f"PostgreSQL {server.bin.parent.name} started for the run on the same disk; "
            if server
            else ""
        )
        + f"load average {load_before:.1f} at the start, {load_after:.1f} at the end, "
        f"{time.perf_counter() - started:.0f} s in all (the 2 cores are shared with other work: "
        "wall times are rough, the CPU time of this process steadier: it counts both its "
        "threads, SQLite's work included, not PostgreSQL's, done in the server's processes)."
        "\n\n"
        f"A store of canonical records of reconciled {MEMBERS}-member groups (33 records each, "
        "built by a real shard and re-keyed per group"
        + (f", plus {args.offsets} committed offsets per group" if args.offsets else "")
        + ") in 50 partitions, loaded by the runtime's loader into fresh shards: each "
        "partition read a group at a time, its records joined by the store "
        "(`RecordStore.load_groups`: PostgreSQL's `string_agg` in the server, SQLite's "
        "`group_concat`) on a reader thread while the previous partition is built, each group "
        "built from its parsed records at once (`coordinator/core/group_load.py`), the cyclic "
        "GC off while loading; beside it, in the same run, the path loads took before "
        "`group_load.py`: every record read, decoded and replayed one by one "
        "(`load_into(..., at_once=False)`; the state is the same, "
        "`tests/unit/test_group_load.py`).\n\n"
        + "\n".join(lines)
        + "\n\n"
        + table(headers, rows)
        + "\n"
    )
    print(body)
    if not args.no_doc:
        write_section("load", body)


if __name__ == "__main__":
    main()
