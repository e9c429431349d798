"""Loading a store group by group straight from the bytes (coordinator/core/group_load.py, used
by the runtime's loader) builds exactly the state that decoding and replaying every record one
by one builds — the path every load took before it, kept as the loader's fallback: the same
groups, members, targets, derived indexes, offsets, configs, classic groups and transactions,
with every dict in the same order, the same timers after the load, the same load statistics.
And the compacted view loads to the state a replay of the whole journal gives.

Histories: the checked-in golden logs, seeded simulations (classic members, upgrades and
downgrades, offsets, restarts), a generated many-group workload stopped at random points
(pending revocations, static members, racks, regexes, offsets, configs, classic and
transactional groups, deleted groups), and hand-made records in orders and encodings the
coordinator never writes. Stores: memory, SQLite and a real PostgreSQL. A corrupt record is
refused with the error the one-by-one replay gives."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pytest
from builders import classic_record

from assignors.range import RangeAssignor
from assignors.uniform import UniformAssignor
from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import IllegalStateError
from coordinator.core.group_load import load_group
from coordinator.core.timeline import UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.factory import Shard, new_cluster, new_shard
from coordinator.harness import Harness
from coordinator.routing import CLUSTER_LOG
from coordinator.runtime.loader import LoadStats, load_into, read_partition
from coordinator.runtime.store import (
    MemoryRecordStore,
    PostgresRecordStore,
    RecordStore,
    SqliteRecordStore,
    StoredRecord,
)
from coordinator.sim.simulator import SimParams, Simulation

P = 4
"""Partitions of the stores here: several groups share each."""
GOLDEN = sorted((Path(__file__).resolve().parents[1] / "golden" / "logs").glob("*.jsonl"))
History = list[StoredRecord]


# ------------------------------------------------------------------ the state, exactly


def deep(x: Any) -> Any:
    """Everything an object holds, order kept (dict order, frozenset iteration order), types
    named: two states are identical when their ``deep`` are equal."""
    if isinstance(x, UndoLog):
        return "<undo log>"
    if x is None or isinstance(x, (bool, int, float, str, bytes, Enum)):
        return (type(x).__name__, x)
    if isinstance(x, dict):
        return (type(x).__name__, [(deep(k), deep(v)) for k, v in x.items()])
    if isinstance(x, (list, tuple, frozenset, set)):
        return (type(x).__name__, [deep(e) for e in x])
    names = [s for c in type(x).__mro__ for s in getattr(c, "__slots__", ())]
    if not names:
        names = list(vars(x))
    return (type(x).__name__, [(n, deep(getattr(x, n))) for n in names if hasattr(x, n)])


def shard_state(shard: Shard) -> Any:
    """What replay determines in a shard: every component's state."""
    txn = shard.offsets.txn
    return deep(
        {
            "consumer groups": shard.groups._by_group,
            "offsets": shard.offsets._by_group,
            "pending offsets": txn._pending,
            "open": txn._open,
            "transactions": txn._txns,
            "groups of": txn._groups_of,
            "configs": shard.group_configs._by_group,
            "classic groups": shard.classic_groups._by_group,
        }
    )


# ------------------------------------------------------------------ loading three ways


def fresh(store: RecordStore) -> tuple[list[Shard], TopicRegistry]:
    ids = SequentialIds()
    shards = [
        new_shard(
            config=GroupCoordinatorConfig(),
            assignors=[UniformAssignor(), RangeAssignor()],
            ids=ids,
        )
        for _ in range(store.partitions)
    ]
    return shards, new_cluster(ids)[0]


def load_new(store: RecordStore) -> tuple[list[Shard], LoadStats]:
    shards, registry = fresh(store)
    return shards, load_into(store, shards, registry)


def load_one_by_one(store: RecordStore) -> list[Shard]:
    """Every group's records decoded and replayed one by one (the loader's fallback)."""
    shards, registry = fresh(store)
    load_into(store, shards, registry, at_once=False)
    return shards


def replay_journal(store: RecordStore) -> list[Shard]:
    """Every journal entry, tombstones included, in offset order."""
    shards, _registry = fresh(store)
    for partition, shard in enumerate(shards):
        shard.undo.enabled = False
        for entry in store.journal(partition):
            shard.replay(codec.decode(entry.key, entry.value))
        shard.undo.enabled = True
    return shards


def check_loads_alike(store: RecordStore) -> LoadStats:
    new, stats = load_new(store)
    old = load_one_by_one(store)
    journal = replay_journal(store)
    for partition, (a, b, c) in enumerate(zip(new, old, journal, strict=True)):
        assert shard_state(a) == shard_state(b), f"partition {partition}"
        assert comparable(a.snapshot()) == comparable(c.snapshot()), f"partition {partition}"
        assert a.on_loaded(1_000_000) == b.on_loaded(1_000_000) == c.on_loaded(1_000_000)
        assert a.undo.enabled and not len(a.undo)
    return stats


def comparable(snapshot: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without the time of a group's last regex resolution: a resolution later
    tombstoned leaves it in a journal replay; the compacted view holds no trace of it."""
    for group in snapshot["groups"].values():
        group.pop("regex_refreshed_ms", None)
    return snapshot


def write(store: RecordStore, history: History, batch: int = 40) -> RecordStore:
    for start in range(0, len(history), batch):
        store.append(history[start : start + batch], 1_000 + start)
    return store


# ------------------------------------------------------------------ histories


def as_stored(records: Sequence[r.Record]) -> History:
    out = []
    for record in records:
        key, value = codec.encode(record)
        out.append(StoredRecord(key, value, record.group_id))
    return out


def golden(log: Path) -> History:
    out = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        key = entry["key"].encode()
        value = None if entry["value"] is None else entry["value"].encode()
        out.append(StoredRecord(key, value, codec.decode(key, value).group_id))
    return out


def renamed(record: r.Record, group_id: str) -> r.Record:
    key = record.key
    if getattr(key, "group_id", None) is None:
        return record
    return r.Record(replace(key, group_id=group_id), record.value)  # type: ignore[call-arg]


def simulated(seeds: Sequence[int]) -> History:
    """Seeded simulations of one group each (classic members, upgrades and downgrades,
    offsets, restarts and every fault), each group renamed so that they share partitions."""
    out: list[r.Record] = []
    for seed in seeds:
        sim = Simulation(SimParams(seed=seed, steps=150, members=4, classic=2 if seed % 2 else 0))
        sim.run()
        out += [renamed(codec.decode(k, v), f"sim-{seed}") for k, v in sim.store]
    return as_stored(out)


def workload(seed: int, groups: int = 48) -> History:
    """Many groups of every kind, each stopped at a random point of its life."""
    rng = random.Random(seed)
    h = Harness(assignors=[UniformAssignor(), RangeAssignor()])
    h.create_topic("foo", 8)
    h.create_topic("bar", 5)
    h.set_racks("bar", {p: [f"r{p % 3}", f"r{(p + 1) % 3}"] for p in range(5)})
    h.create_topic("baz", 3)
    for n in range(groups):
        gid = f"group-{seed}-{n}"
        kind = rng.choice(["consumer"] * 6 + ["classic", "simple", "regex", "deleted", "txn"])
        if kind == "classic":
            h.store_log.append(classic_record(group_id=gid))
            continue
        if kind == "simple":
            h.commit(gid, "", -1, {("foo", p): 10 * p for p in range(rng.randint(1, 8))})
            continue
        if kind == "txn":
            h.store_log += [
                r.group_transaction_record(
                    gid,
                    7,
                    r.GroupTransactionValue(
                        transactional_id="t",
                        producer_epoch=0,
                        state=r.TransactionState.ONGOING,
                        updated_ms=1,
                    ),
                ),
                r.txn_offset_commit_record(
                    gid,
                    "foo",
                    0,
                    7,
                    r.TxnOffsetCommitValue(
                        offset=5,
                        leader_epoch=-1,
                        metadata="",
                        commit_timestamp_ms=1,
                        producer_epoch=0,
                    ),
                ),
            ]
            continue
        members = _consumer_group(h, rng, gid, regex=kind == "regex")
        if kind == "deleted":
            for mid in members:
                h.heartbeat(group_id=gid, member_id=mid, member_epoch=-1)
            h.run(lambda s, gid=gid: s.delete_groups([gid]))
        if rng.random() < 0.3:
            value = str(rng.choice([45_000, 50_000]))
            if rng.random() < 0.5:  # in the cluster log
                h.alter_configs(gid, {"consumer.session.timeout.ms": value})
            else:  # in the group's partition, as an earlier version kept it
                h.store_log.append(r.group_config_record(gid, "consumer.session.timeout.ms", value))
    return as_stored(h.store_log)


def _consumer_group(h: Harness, rng: random.Random, gid: str, *, regex: bool) -> list[str]:
    """A group of 1-6 members (static, racked, naming an assignor or not) that joined and
    heartbeat 0-4 rounds; maybe an offset commit, maybe a member left. Its members' ids."""
    members: dict[str, tuple[int, Any]] = {}
    for m in range(rng.randint(1, 6)):
        mid = f"{gid}-m{m}"
        topics = rng.sample(["foo", "bar", "baz"], rng.randint(1, 3))
        extra: dict[str, Any] = {}
        if rng.random() < 0.3:
            extra["instance_id"] = f"{mid}-static"
        if rng.random() < 0.3:
            extra["rack_id"] = rng.choice(["r0", "r1", "r2"])
        if rng.random() < 0.3:
            extra["server_assignor"] = rng.choice(["uniform", "range"])
        res = h.join(
            mid,
            () if regex and m == 0 else topics,
            regex="ba.*" if regex and m == 0 else None,
            group_id=gid,
            **extra,
        )
        resp = res.response
        assert resp is not None
        members[mid] = (resp.member_epoch, resp.assignment.assigned if resp.assignment else {})
    if regex and h.regex_resolutions:
        h.resolve_regexes(gid)
    for _ in range(rng.randint(0, 4)):  # heartbeats acknowledging what each member was told
        for mid in list(members):
            epoch, owned = members[mid]
            resp = h.heartbeat(
                group_id=gid, member_id=mid, member_epoch=epoch, topic_partitions=owned
            )
            a = resp.assignment
            members[mid] = (resp.member_epoch, a.assigned if a is not None else owned)
    committer = next(iter(members))
    if rng.random() < 0.7:
        h.commit(
            gid,
            committer,
            members[committer][0],
            {("foo", p): rng.randint(0, 99) for p in range(rng.randint(1, 4))},
        )
    if len(members) > 1 and rng.random() < 0.3:  # one leaves
        leaving = list(members)[-1]
        h.heartbeat(group_id=gid, member_id=leaving, member_epoch=-1)
        del members[leaving]
    return list(members)


# ------------------------------------------------------------------ stores


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def new_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], RecordStore]]:
    """A factory of fresh stores of one kind (P partitions)."""
    opened: list[RecordStore] = []

    def make() -> RecordStore:
        kind = request.param
        store: RecordStore
        if kind == "memory":
            store = MemoryRecordStore(partitions=P)
        elif kind == "sqlite":
            store = SqliteRecordStore(tmp_path / f"s{len(opened)}", partitions=P)
        else:
            store = PostgresRecordStore(
                request.getfixturevalue("pg_server").fresh_store_dsn(), partitions=P
            )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


# ------------------------------------------------------------------ tests


def test_histories_load_to_the_one_by_one_state(new_store: Callable[[], RecordStore]) -> None:
    histories = [golden(log) for log in GOLDEN] + [workload(1), simulated([3, 4])]
    for history in histories:
        store = write(new_store(), history)
        stats = check_loads_alike(store)
        assert stats.records == sum(1 for _ in _compacted(store))


def test_more_workloads_and_simulations_load_alike() -> None:
    for seed in range(2, 6):
        check_loads_alike(write(MemoryRecordStore(partitions=P), workload(seed)))
    check_loads_alike(write(MemoryRecordStore(partitions=P), simulated([5, 6, 7, 8])))


def _compacted(store: RecordStore) -> Iterator[Any]:
    for log in [CLUSTER_LOG, *range(store.partitions)]:
        yield from store.load(log)


def test_the_groups_the_coordinator_writes_take_the_fast_path() -> None:
    """Every consumer, classic, simple and configured group loads from the bytes at once; a
    group with resolved regexes or transactions is replayed one by one."""
    store = write(MemoryRecordStore(partitions=P), workload(7, groups=80))
    taken: dict[bool, set[str]] = {True: set(), False: set()}
    shards, _registry = fresh(store)
    for partition, shard in enumerate(shards):
        shard.undo.enabled = False
        for gid, (_n, records) in read_partition(store, partition).groups.items():
            taken[load_group(shard, gid, orjson.loads(records))].add(gid)
    kinds = {
        gid: {
            codec.decode(rec.key, rec.value).key.TYPE
            for _o, rec in store.load(partition)
            if rec.group_id == gid
        }
        for partition in range(P)
        for gid in read_partition(store, partition).groups
    }
    slow = {
        gid
        for gid, types in kinds.items()
        if types
        & {
            r.RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION,
            r.RecordType.TXN_OFFSET_COMMIT,
            r.RecordType.GROUP_TRANSACTION,
        }
    }
    assert slow and taken[False] == slow
    assert len(taken[True]) > 50
    assert any(r.RecordType.GROUP_METADATA in kinds[g] for g in taken[True])
    assert any(r.RecordType.OFFSET_COMMIT in kinds[g] for g in taken[True])
    assert any(r.RecordType.GROUP_CONFIG in kinds[g] for g in taken[True])


# ------------------------------------------------------------------ hand-made records


def _rec(key: Any, value: Any, group_id: str | None = "g") -> StoredRecord:
    return StoredRecord(
        json.dumps(key, separators=(",", ":")).encode(),
        None if value is None else json.dumps(value, separators=(",", ":")).encode(),
        group_id,
    )


T = "AAAAAAAAAAAAAAAAAAAAAQ"
U = "AAAAAAAAAAAAAAAAAAAAAg"


def _mm(
    m: str,
    names: list[str],
    *,
    instance: str | None = None,
    assignor: str | None = None,
    group: str = "g",
    classic: Any = None,
) -> StoredRecord:
    return _rec(
        [5, group, m], [0, instance, None, "c", "h", names, None, 30000, assignor, classic], group
    )


def _tm(m: str, assignment: list[Any], group: str = "g") -> StoredRecord:
    return _rec([7, group, m], [0, assignment], group)


def _ca(
    m: str,
    epoch: int,
    assigned: list[Any],
    pending: list[Any] | None = None,
    epochs: list[Any] | None = None,
    *,
    state: int = 0,
    group: str = "g",
) -> StoredRecord:
    value: list[Any] = [0, epoch, epoch - 1, state, assigned, pending or []]
    if epochs is not None:
        value.append(epochs)
    return _rec([8, group, m], value, group)


def _group(epoch: int = 3, group: str = "g") -> list[StoredRecord]:
    return [
        _rec([4, group], [0, [[T, "foo", 6], [U, "bar", 2]]], group),
        _rec([3, group], [0, epoch, "cgp_1"], group),
        _rec([6, group], [0, epoch], group),
    ]


UNUSUAL: dict[str, History] = {
    # current assignments before metadata, a target after its member's current assignment
    "orders": [
        _ca("b", 3, [[T, [2, 3]]], epochs=[[3, [[T, [2, 3]]]]]),
        _tm("a", [[T, [0, 1]]]),
        *_group(),
        _mm("b", ["foo"]),
        _ca("a", 3, [[T, [0, 1]]], epochs=[[2, [[T, [0, 1]]]]]),
        _mm("a", ["foo", "bar"], instance="ia"),
        _tm("b", [[T, [2, 3]], [U, [0]]]),
        _mm("c", ["bar"], assignor="range"),
        _mm("k", ["foo"], classic=[45000, [["range", "AAE="]]]),
    ],
    # members with only a current assignment or only metadata; targets that overlap (the
    # later record owns the partition in the index); pending revocations; several epochs
    "partial": [
        *_group(5),
        _ca("x", 5, [[T, [0]]], [[T, [1]]], [[4, [[T, [0]]]], [5, [[T, [1]]]]], state=1),
        _mm("y", ["foo"], instance="i"),
        _mm("z", ["foo"], instance="i"),
        _tm("x", [[T, [0, 1, 2]]]),
        _tm("y", [[T, [2, 3]], [U, []]]),
        _ca("y", 5, [[T, [2]]], epochs=[[5, [[T, [2]]]], [9, [[U, [1]]]]]),
        _ca("z", 4, [[U, [0, 1]]], epochs=[[1, [[U, [0, 1]]]]], state=2),
        _ca("w", 2, [], []),
        _ca("v", 2, [[T, [5]]]),  # written before assignment epochs
    ],
    # the same key written twice with different bytes
    "same metadata twice": [
        *_group(),
        _mm("a", ["foo"], instance="i"),
        _mm("b", ["foo"]),
        StoredRecord(b'[5, "g", "a"]', b'[0,"j",null,"c2","h",["bar"],null,1,null,null]', "g"),
    ],
    "same current assignment twice": [
        *_group(),
        _ca("a", 3, [[T, [0]]], epochs=[[3, [[T, [0]]]]]),
        StoredRecord(b'[8, "g", "a"]', b'[0,3,2,0,[["%s",[1]]],[]]' % T.encode(), "g"),
    ],
    "same target twice": [
        *_group(),
        _tm("a", [[T, [0, 1]]]),
        _tm("b", [[T, [1, 2]]]),
        StoredRecord(b'[7, "g", "a"]', b'[0,[["%s",[2,3]]]]' % T.encode(), "g"),
    ],
    # a member's record under another group's key
    "foreign key": [
        *_group(),
        _mm("a", ["foo"]),
        _rec([5, "other", "m"], [0, None, None, "c", "h", ["foo"], None, 1, None, None], "g"),
    ],
    # a member that left (epoch -1) written before assignment epochs; a classic member
    "epochs": [
        *_group(),
        _ca("u", -1, [[T, [4]]]),
        _ca("t", 0, [[T, [3]]], epochs=[]),
        _mm("k", ["foo"], classic=[45000, [["range", "AAE="]]]),
    ],
    # a classic group record before consumer group records of the same id (replay keeps both)
    "classic first": [*as_stored([classic_record(group_id="c")]), *_group(group="c")],
    # offsets, a config and a classic group beside each other
    "others": [
        _rec([1, "s", "foo", 0], [0, 5, -1, "", 1, -1], "s"),
        _rec([1014 + 2, "s", "consumer.session.timeout.ms"], [0, "50000"], "s"),
        _rec([1, "s", "foo", 1], [0, 6, 2, "m", 2, 99], "s"),
        _rec([1, "s", "foo", 0], [0, 7, -1, "", 3, -1, "extra"], "s"),
        *as_stored([classic_record(group_id="c")]),
        _rec([1, "c", "foo", 0], [0, 1, -1, "", 1, -1], "c"),
    ],
}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_unusual_records_load_alike(name: str) -> None:
    store = write(MemoryRecordStore(partitions=P), UNUSUAL[name], batch=3)
    new, _stats = load_new(store)
    old = load_one_by_one(store)
    assert [shard_state(s) for s in new] == [shard_state(s) for s in old]
    assert [s.on_loaded(0) for s in new] == [s.on_loaded(0) for s in old]


CORRUPT: dict[str, list[StoredRecord]] = {
    "value not json": [*_group(), StoredRecord(b'[8,"g","a"]', b"[0,3,2,0,[[", "g")],
    "value too short": [*_group(), _rec([5, "g", "a"], [0, None, None], "g")],
    "value not a list": [*_group(), _rec([7, "g", "a"], {"a": 1}, "g")],
    "key of a float type": [*_group(), StoredRecord(b'[5.0,"g","a"]', b"[0]", "g")],
    "key of a bool field": [*_group(), _rec([1, "g", "foo", True], [0, 1, 1, "", 1, 1], "g")],
    "partition owned twice": [
        *_group(),
        _ca("a", 3, [[T, [0, 1]]], epochs=[[3, [[T, [0, 1]]]]]),
        _ca("b", 3, [[T, [1, 2]]], epochs=[[3, [[T, [1, 2]]]]]),
    ],
    "classic group beside a consumer group": [
        *_group(group="c"),
        *as_stored([classic_record(group_id="c")]),
    ],
    "unknown record type": [*_group(), _rec([99, "g"], [0], "g")],
    # a value of two JSON values: the group's joined records count one more
    "value of two json values": [*_group(), StoredRecord(b'[7,"g","a"]', b"[0,[]],[1]", "g")],
    "epoch not a number": [
        *_group(),
        _rec([8, "g", "a"], [0, "3", 2, 0, [[T, [0]]], [], [[3, [[T, [0]]]]]], "g"),
    ],
}


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_a_corrupt_record_is_refused_as_one_by_one(name: str) -> None:
    store = write(MemoryRecordStore(partitions=P), CORRUPT[name], batch=1)
    with pytest.raises(Exception) as one_by_one:
        load_one_by_one(store)
    with pytest.raises(Exception) as loaded:
        load_new(store)
    if name != "epoch not a number":  # replay's own TypeError, as before
        assert isinstance(one_by_one.value, IllegalStateError)
    assert (type(loaded.value), str(loaded.value)) == (
        type(one_by_one.value),
        str(one_by_one.value),
    )
