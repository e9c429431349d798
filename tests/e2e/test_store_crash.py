"""Crash test of the SQLite store: SIGKILL a process that appends batches, then check that every
acknowledged batch is there whole and that no partial batch exists.

A child process appends batches of 50-250 records (``sync="full"``) in a loop and prints
``ack <batch> <last offsets>`` (flushed) after each ``append`` returns. A batch spans several
logs (three groups' partitions and the cluster log), so a batch is whole in all or none. The test reads some
acknowledgements, SIGKILLs the child at a random moment (often inside a transaction) and reopens
the store. Several rounds run over the same store, so recovery after a crash is itself crashed.
SIGKILL leaves the OS page cache intact: this proves atomicity and crash recovery, not the power
loss case (that rests on fsync, see the store's docstring).
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.runtime.store import (
    CLUSTER_LOG,
    JournalEntry,
    SqliteRecordStore,
    StoredRecord,
    log_ids,
    log_of,
)

REPO = Path(__file__).resolve().parents[2]

# Shared by the child and the checker, so both agree on what batch b holds.
BATCH_SOURCE = r"""
def batch(b):
    n = 50 + (b * 37) % 200
    recs = [
        StoredRecord(key=b"k/%d/%d" % (b, i), value=b"%d:%d:" % (b, i) + b"x" * (i % 97),
                     group_id="group-%d" % (i % 3))
        for i in range(n - 2)
    ]
    recs.append(StoredRecord(key=b"k/%d/0" % (b - 1), value=None, group_id="group-0"))
    recs.append(StoredRecord(key=b"counter", value=b"%d" % b, group_id=None))
    return recs
"""

CHILD = r"""
import sys, time
from coordinator.runtime.store import SqliteRecordStore, StoredRecord
exec(sys.argv[3])
store = SqliteRecordStore(sys.argv[1], partitions=5)
counter = dict((rec.key, rec.value) for _, rec in store.load(-1)).get(b"counter", b"-1")
first = int(counter) + 1
print("start %d -" % first, flush=True)
deadline = time.monotonic() + 30  # never outlive a broken test
for b in range(first, first + int(sys.argv[2])):
    last = store.append(batch(b), b)
    print("ack %d %s" % (b, ",".join("%d:%d" % kv for kv in sorted(last.items()))), flush=True)
    if time.monotonic() > deadline:
        break
"""

namespace: dict[str, Any] = {"StoredRecord": StoredRecord}
exec(BATCH_SOURCE, namespace)
batch = namespace["batch"]


Acks = list[tuple[int, dict[int, int]]]
"""(batch, the last offset it got in each log it wrote)"""


def run_and_kill(directory: Path, min_acks: int, rng: random.Random) -> Acks:
    """Run the child until it acknowledged ``min_acks`` batches, SIGKILL it, return the acks
    read (the child may have acknowledged more that were still in the pipe)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), "100000", BATCH_SOURCE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    acks: Acks = []
    buf = b""
    deadline = time.monotonic() + 20
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while len(acks) < min_acks:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"child too slow: {len(acks)} acks in 20 s"
                if not sel.select(timeout=remaining):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    assert proc.stderr is not None
                    pytest.fail(f"child exited early: {proc.stderr.read().decode()}")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    kind, b, last = line.split()
                    if kind == b"ack":
                        pairs = (p.split(b":") for p in last.split(b","))
                        acks.append((int(b), {int(k): int(v) for k, v in pairs}))
        time.sleep(rng.uniform(0, 0.004))  # land anywhere: between batches or inside one
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == -signal.SIGKILL
    return acks


def check_store(directory: Path, acks: Acks) -> int:
    """Every acknowledged batch whole at its offsets in every log, no partial batch, no gap;
    each log's compacted view equals the replay of its journal. Returns the number of batches in
    the store."""
    with SqliteRecordStore(directory) as store:
        store.check_integrity()
        logs = log_ids(store.partitions)
        entries = {log: list(store.journal(log)) for log in logs}
        views = {log: list(store.load(log)) for log in logs}
        last_offsets = {log: store.last_offset(log) for log in logs}
    for log in logs:
        assert [e.offset for e in entries[log]] == list(range(len(entries[log])))
        assert last_offsets[log] == len(entries[log]) - 1
    b, pos, last_of = 0, dict.fromkeys(logs, 0), {}
    while pos[CLUSTER_LOG] < len(entries[CLUSTER_LOG]):  # every batch writes the cluster log
        last: dict[int, int] = {}
        for r in batch(b):
            log = log_of(r.group_id, len(logs) - 1)
            expected = JournalEntry(pos[log], b, r.group_id, r.key, r.value, log)
            got = entries[log][pos[log]] if pos[log] < len(entries[log]) else None
            assert got == expected, f"batch {b} is not whole in log {log}"
            last[log] = pos[log]
            pos[log] += 1
        last_of[b] = last
        b += 1
    assert pos == {log: len(entries[log]) for log in logs}, "records of no batch"
    for acked, last in acks:
        assert last_of.get(acked) == last, f"acknowledged batch {acked} lost"
    for log in logs:
        model: dict[bytes, tuple[int, StoredRecord]] = {}
        for e in entries[log]:
            model.pop(e.key, None)
            if e.value is not None:
                model[e.key] = (e.offset, StoredRecord(e.key, e.value, e.group_id))
        assert views[log] == list(model.values())
    return b


@pytest.mark.timeout(120)
def test_acknowledged_batches_survive_sigkill(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    directory = tmp_path / "data"
    all_acks: list[tuple[int, int]] = []
    batches = 0
    for round_ in range(4):
        acks = run_and_kill(directory, min_acks=rng.randint(5, 25), rng=rng)
        assert acks, f"seed {seed}, round {round_}: no acknowledgement"
        assert acks[0][0] == batches, f"seed {seed}: the child resumed at the wrong batch"
        all_acks += acks
        batches = check_store(directory, all_acks)
        assert batches >= acks[-1][0] + 1, f"seed {seed}"
