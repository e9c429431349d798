"""The SQLite store when the disk misbehaves under it (#13 items 6-7), on real file systems:

* a full disk (a real, small tmpfs): the append fails with nothing written and the store stays
  usable; once space is freed, writes succeed again and nothing acknowledged is missing;
* the store lost from under an open store (data directory deleted, unmounted, the file
  replaced or truncated, the write-ahead log deleted): detected, every later append refused,
  and the store rescued from the files still held open.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builders import stored, written

from coordinator.runtime.store import (
    DATA_FILE_NAME,
    SqliteRecordStore,
    StoredRecord,
    StoreLostError,
    StoreWriteError,
)


def batch(b: int, n: int = 20, size: int = 1000) -> list[StoredRecord]:
    return [StoredRecord(b"b%d/%d" % (b, i), b"x" * size, f"g{b}") for i in range(n)]


def keys(directory: Path) -> set[bytes]:
    with SqliteRecordStore(directory) as store:
        return {rec.key for rec in stored(store)}


def integrity_ok(path: Path) -> bool:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()


# -- disk full ----------------------------------------------------------------------------------


def fill_until_full(store: SqliteRecordStore, acked: set[bytes]) -> StoreWriteError:
    for b in range(10_000):  # bounded: a 1 MiB file system is full long before
        records = batch(b)
        try:
            store.append(records, b)
        except StoreWriteError as exc:
            return exc
        acked.update(r.key for r in records)
    raise AssertionError("the file system never filled up")


def test_disk_full_refuses_in_band_and_recovers_when_space_is_freed(
    tmpfs: Callable[..., Any],
) -> None:
    fs = tmpfs(size_kib=1024)
    data = fs.point / "data"
    store = SqliteRecordStore(data)
    acked: set[bytes] = set()
    exc = fill_until_full(store, acked)
    assert "no space left on the device" in str(exc)
    assert exc.outcome_unknown is False  # SQLite did not commit: nothing of it is visible
    assert not store.failed
    last = written(store)
    with pytest.raises(StoreWriteError, match="database or disk is full"):
        store.probe_write()
    with pytest.raises(StoreWriteError, match="no space left"):
        store.append(batch(50_000), 1)  # still full: refused again, nothing written
    assert written(store) == last

    fs.resize(8192)  # space freed
    store.probe_write()
    store.append(batch(60_000), 2)
    acked.update(r.key for r in batch(60_000))
    assert written(store) == last + 20
    store.close()
    assert keys(data) == acked  # every acknowledged record, none of the refused ones
    assert integrity_ok(data / DATA_FILE_NAME)


def test_crash_while_the_disk_is_full_loses_nothing_acknowledged(
    tmpfs: Callable[..., Any], tmp_path: Path
) -> None:
    """A process fills the disk, gets the in-band refusal, and is SIGKILLed: the restart (with
    space again) has every acknowledged batch and a store SQLite calls intact."""
    fs = tmpfs(size_kib=1024)
    data = fs.point / "data"
    child = (
        "import os, signal, sys\n"
        "from coordinator.runtime.store import SqliteRecordStore, StoredRecord, StoreWriteError\n"
        "s = SqliteRecordStore(sys.argv[1])\n"
        "for b in range(10000):\n"
        "    recs = [StoredRecord(b'b%d/%d' % (b, i), b'x' * 1000, 'g') for i in range(20)]\n"
        "    try:\n"
        "        s.append(recs, b)\n"
        "    except StoreWriteError as e:\n"
        "        print('refused', b, e.outcome_unknown, flush=True)\n"
        "        break\n"
        "    print('ack', b, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [os.sys.executable, "-c", child, str(data)],  # type: ignore[attr-defined]
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(repo)),
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert lines[-1].startswith("refused ") and lines[-1].endswith(" False"), proc.stdout[-500:]
    acked = {int(line.split()[1]) for line in lines if line.startswith("ack ")}
    assert len(acked) > 5
    fs.resize(8192)
    found = keys(data)
    for b in acked:
        assert {r.key for r in batch(b)} <= found, b
    assert integrity_ok(data / DATA_FILE_NAME)


# -- the store lost from under an open store -----------------------------------------------------


def open_with_data(directory: Path) -> SqliteRecordStore:
    store = SqliteRecordStore(directory)
    store.append(batch(0, n=5, size=10), 1)
    return store


def test_deleted_data_dir_is_detected_and_rescued_in_place(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_with_data(data)
    store.check_identity()  # all well
    shutil.rmtree(data)
    with pytest.raises(StoreLostError) as info:
        store.append(batch(1, n=5, size=10), 2)  # refused before anything is written
    assert str(info.value) == (
        f"the record store at {data / DATA_FILE_NAME} is no longer the one on disk: its data "
        f"directory {data} was deleted while the store was open. Writes to it would be lost at "
        "the next start, so none are acknowledged any more"
    )
    assert info.value.outcome_unknown is False
    assert store.lost == str(info.value)
    with pytest.raises(StoreLostError, match="no longer the one on disk"):
        store.append(batch(2, n=5, size=10), 3)
    with pytest.raises(StoreLostError):
        store.check_identity()
    with pytest.raises(StoreLostError):
        store.probe_write()
    assert store.rescue() == data / DATA_FILE_NAME
    store.close()
    # The restart comes up with everything the lost store acknowledged, not empty.
    assert keys(data) == {r.key for r in batch(0, n=5)}
    assert integrity_ok(data / DATA_FILE_NAME)


def test_replaced_store_file_is_detected_and_rescued_beside(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = open_with_data(data)
    os.rename(data / DATA_FILE_NAME, tmp_path / "moved.db")
    shutil.copy(tmp_path / "moved.db", data / DATA_FILE_NAME)  # e.g. a restore over it
    with pytest.raises(StoreLostError, match=r"coordinator.db was replaced by another file"):
        store.check_identity()
    rescued = store.rescue()
    assert rescued.parent == data and rescued.name.startswith("coordinator.db.rescued-")
    store.close()
    assert keys(rescued) == {r.key for r in batch(0, n=5)}
    assert not list(data.glob("*.partial"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", "coordinator.db was truncated to 0 bytes"),
        ("delete-file", "coordinator.db was deleted"),
        ("delete-wal", "its write-ahead log coordinator.db-wal was deleted"),
        ("replace-dir", "its data directory .* was replaced or unmounted"),
    ],
)
def test_other_losses_are_named(tmp_path: Path, damage: str, message: str) -> None:
    data = tmp_path / "data"
    store = open_with_data(data)
    path = data / DATA_FILE_NAME
    if damage == "truncate":
        os.truncate(path, 0)
    elif damage == "delete-file":
        path.unlink()
    elif damage == "delete-wal":
        (data / "coordinator.db-wal").unlink()
    else:
        os.rename(data, tmp_path / "old")
        data.mkdir()
    with pytest.raises(StoreLostError, match=message):
        store.append(batch(1, n=1, size=1), 2)
    store.close()


def test_unmounted_data_dir_is_detected(tmpfs: Callable[..., Any]) -> None:
    fs = tmpfs(size_kib=2048)
    store = open_with_data(fs.point)
    r = subprocess.run(["umount", "-l", str(fs.point)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    with pytest.raises(StoreLostError, match="was replaced or unmounted"):
        store.check_identity()
    assert store.rescue() == fs.point / DATA_FILE_NAME  # the mount point is free: saved there
    store.close()
    assert keys(fs.point) == {r.key for r in batch(0, n=5)}


def test_loss_during_an_append_is_noticed_after_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The data directory vanishes while a batch is being written: the batch lands in the
    deleted files, so it is not acknowledged (the rescue keeps it: a retriable refusal, like a
    timeout, never a lost acknowledgement)."""
    data = tmp_path / "data"
    store = open_with_data(data)
    real_commit = store._commit

    def commit_then_lose() -> None:
        real_commit()
        shutil.rmtree(data)

    monkeypatch.setattr(store, "_commit", commit_then_lose)
    with pytest.raises(StoreLostError, match="was deleted"):
        store.append(batch(1, n=2, size=1), 2)
    monkeypatch.undo()
    assert written(store) == 7  # the store's own count moved on; no ack was given
    store.rescue()
    store.close()
    assert keys(data) == {r.key for r in batch(0, n=5) + batch(1, n=2)}
