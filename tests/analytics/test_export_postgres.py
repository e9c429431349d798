"""``kip848 analytics export --store postgresql://...``: the journal of the PostgreSQL store
several nodes share, as Parquet — the same file, row for row, as the same journal in SQLite."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from builders import stored_journal

from coordinator.analytics.export import ExportError, export_journal
from coordinator.analytics.schema import ExportInfo
from coordinator.runtime.store import PostgresRecordStore, SqliteRecordStore, StoredRecord
from coordinator.runtime.store.postgres_schema import dsn_for_log

KIP = [sys.executable, "-m", "coordinator.cli"]


@pytest.fixture(scope="module")
def pg_workload(workload: dict[str, Any], pg_server: Any) -> dict[str, Any]:
    """The generated workload's journal copied into a new PostgreSQL store, batch for batch
    (each log's entries of one time appended together at that time): the same offsets, times,
    keys, values and groups, in a store of the same coordinator partitions."""
    dsn = pg_server.fresh_store_dsn()
    with SqliteRecordStore(workload["store"], read_only=True) as sqlite:
        entries = stored_journal(sqlite)
        partitions = sqlite.partitions
    with PostgresRecordStore(dsn, partitions=partitions) as pg:
        for (_log, ts), batch in itertools.groupby(
            entries, key=lambda e: (e.partition, e.timestamp_ms)
        ):
            pg.append([StoredRecord(e.key, e.value, e.group_id) for e in batch], ts)
    return {"dsn": dsn, "entries": entries}


def _info(path: Path) -> dict[str, Any]:
    meta = pq.read_metadata(path).metadata
    return dict(json.loads(meta[b"kip848.export"]))


def test_a_postgresql_store_exports_the_rows_of_the_same_journal_in_sqlite(
    workload: dict[str, Any], pg_workload: dict[str, Any], tmp_path: Path
) -> None:
    dsn = pg_workload["dsn"]
    with PostgresRecordStore(dsn, read_only=True) as pg:
        copied = stored_journal(pg)
    strip = [(e.partition, e.offset, e.timestamp_ms, e.key, e.value, e.group_id) for e in copied]
    assert strip == [
        (e.partition, e.offset, e.timestamp_ms, e.key, e.value, e.group_id)
        for e in pg_workload["entries"]
    ]
    out = tmp_path / "pg.parquet"
    result = export_journal("unused-data-dir", out, store_uri=dsn)
    assert pq.read_table(out).to_pylist() == pq.read_table(workload["parquet"]).to_pylist()
    got, want = _info(out), _info(workload["parquet"])
    assert got.pop("store") == dsn_for_log(dsn) == result.info.store
    assert "kip848-secret" not in got.values() and "kip848-secret" not in dsn_for_log(dsn)
    del want["store"]
    got.pop("exported_at_ms")
    want.pop("exported_at_ms")
    assert got == want
    assert result.info.rows == len(copied) and result.info.complete


def test_a_postgresql_store_decoded_in_several_processes_gives_the_same_file(
    workload: dict[str, Any], pg_workload: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "pg2.parquet"
    export_journal("unused-data-dir", out, store_uri=pg_workload["dsn"], workers=2)
    assert pq.read_table(out).to_pylist() == pq.read_table(workload["parquet"]).to_pylist()
    assert not list(tmp_path.glob("*.arrow")) and not list(tmp_path.glob("*.partial"))


def test_postgresql_stores_that_cannot_be_read_give_clear_errors(
    pg_server: Any, tmp_path: Path
) -> None:
    empty = pg_server.fresh_store_dsn()
    with pytest.raises(ExportError, match="no record store in the PostgreSQL database") as info:
        export_journal("unused", tmp_path / "x.parquet", store_uri=empty)
    assert "kip848-secret" not in str(info.value)
    down = "postgresql://kip848:kip848-secret@127.0.0.1:1/none"
    with pytest.raises(ExportError, match="cannot connect to the PostgreSQL store") as info:
        export_journal("unused", tmp_path / "x.parquet", store_uri=down)
    assert "kip848-secret" not in str(info.value)
    assert not list(tmp_path.iterdir())


def test_cli_export_from_a_postgresql_store(
    workload: dict[str, Any], pg_workload: dict[str, Any], pg_server: Any, tmp_path: Path
) -> None:
    dsn = pg_workload["dsn"]
    out = tmp_path / "cli.parquet"
    p = subprocess.run(
        [*KIP, "analytics", "export", "--store", dsn, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    rows = workload["info"].rows
    assert p.stdout.startswith(f"Exported {rows} records (offsets ")
    assert pq.read_table(out).to_pylist() == pq.read_table(workload["parquet"]).to_pylist()
    assert ExportInfo.from_metadata(pq.read_metadata(out).metadata).store == dsn_for_log(dsn)
    p = subprocess.run(
        [*KIP, "analytics", "export", "--store", "sqlite:///tmp/x", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (2, "")
    assert "--store takes a postgresql:// URI, got 'sqlite:///tmp/x'" in p.stderr
    empty = pg_server.fresh_store_dsn()
    p = subprocess.run(
        [*KIP, "analytics", "export", "--store", empty, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (p.returncode, p.stdout) == (1, "")
    assert p.stderr.startswith("kip848 analytics: no record store in the PostgreSQL database ")
    assert len(p.stderr.splitlines()) == 1 and "kip848-secret" not in p.stderr
