"""``kip848 analytics export``: a store's journal -> one Parquet file (schema: :mod:`.schema`).

The store is opened read-only (``read_only=True``, like ``kip848 dump``): the SQLite store of a
data directory, or a PostgreSQL store (``store=URI``, where several nodes keep their records).
No writer lock is taken, and each log is read in one snapshot (SQLite's WAL snapshot isolation;
a repeatable-read transaction on PostgreSQL), so exporting is safe while servers run on the
store. The cluster log, then each
partition's journal, is decoded (:mod:`.export_rows`) and written in row groups as it is read
(memory stays bounded), first into ``<out>.partial`` and renamed at the end: a failed export
leaves no half file. A big journal's partition logs are decoded by several processes side by
side, each into a temporary Arrow file that this process copies into the Parquet file in order.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from coordinator.core import codec
from coordinator.core import records as r

from .export_rows import Decoder, ExportError, LogExport, export_log
from .schema import SCHEMA, ExportInfo

__all__ = ["ExportError", "ExportResult", "export_journal", "parse_time"]

ROW_GROUP_ROWS = 131_072


@dataclass(frozen=True, slots=True)
class ExportResult:
    path: Path
    info: ExportInfo
    seconds: float


def parse_time(text: str) -> int:
    """``--since``/``--until``: epoch milliseconds, or an ISO-8601 date/time (UTC unless it
    names its zone). Returns epoch milliseconds."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (use epoch milliseconds or ISO 8601, e.g. 2026-11-23T10:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _fmt_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _package_version() -> str:
    try:
        return "kip848-coordinator " + importlib.metadata.version("kip848-coordinator")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "kip848-coordinator"


def _compacted_topic_names(store: Any) -> dict[str, str]:
    from coordinator.runtime.store import CLUSTER_LOG

    names: dict[str, str] = {}
    for rows in store.load_rows(CLUSTER_LOG):
        for _offset, key, value, group_id in rows:
            if group_id is None:
                rec = codec.decode(key, value)
                if isinstance(rec.key, r.TopicKey) and isinstance(rec.value, r.TopicValue):
                    names[rec.value.topic_id] = rec.key.name
    return names


def export_journal(
    data_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    store_uri: str | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    session_timeout_ms: int = 45_000,
    assignors: tuple[str, ...] = ("uniform", "range"),
    progress: bool = False,
    warn: Callable[[str], None] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
    workers: int | None = None,
) -> ExportResult:
    """Write the journals of the store in ``data_dir`` (or of the PostgreSQL store at
    ``store_uri``) to the Parquet file ``out``: the cluster log's, then each partition's, each
    in offset order.

    Raises :class:`ExportError` for a missing, foreign or corrupt store (including a record
    that does not decode) and for bad arguments; ``warn`` gets a warning when retention has
    already trimmed a journal inside the range asked for. ``workers``: processes decoding the
    partitions' journals side by side (default: one per CPU, up to 4, for a journal of
    :data:`PARALLEL_FROM` entries or more; 1: all in this process)."""
    from coordinator.runtime.store import CLUSTER_LOG, StoreError, log_ids

    source = _Source(str(data_dir), store_uri)
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise ExportError("--until must be later than --since")
    started = time.perf_counter()
    out_path = Path(out)
    if out_path.is_dir():
        raise ExportError(f"{out_path} is a directory; --out names the Parquet file to write")
    store = source.open()
    warnings: list[str] = []
    with store:
        try:
            stats = store.stats()
            names = _compacted_topic_names(store)
        except StoreError as exc:
            raise ExportError(str(exc)) from exc
        except Exception as exc:
            raise ExportError(f"the store in {source.where} is corrupt: {exc}") from exc
        logs = stats["logs"]
        # Over every log, as one log's figures were: records ever written minus one, records
        # retention removed (the first offset a journal still holds).
        last_offset = sum(log["last_offset"] + 1 for log in logs.values()) - 1
        expired = sum(
            log["last_offset"] + 1
            if log["journal_first_offset"] is None
            else log["journal_first_offset"]
            for log in logs.values()
        )
        journal_first = None if stats["journal_entries"] == 0 else expired
        trimmed = expired > 0
        if stats["journal_entries"] == 0 and last_offset >= 0:
            warnings.append(
                f"journal retention already removed every record ({last_offset + 1} records);"
                " nothing to export"
            )
        for log_id in log_ids(store.partitions) if stats["journal_entries"] else ():
            log = logs[log_id]
            first = log["journal_first_offset"]
            if not first:  # None (empty) or 0 (untrimmed)
                continue
            first_ts = next(store.journal(log_id, from_offset=first, to_offset=first + 1))
            if since_ms is None or since_ms < first_ts.timestamp_ms:
                asked = "the range asked for" if since_ms is not None else "the journal"
                where = "the cluster log" if log_id == CLUSTER_LOG else f"partition {log_id}"
                warnings.append(
                    f"journal retention already trimmed {asked} of {where}: records at offsets "
                    f"0..{first - 1} are gone; its export starts at offset {first} "
                    f"({_fmt_ms(first_ts.timestamp_ms)}), so groups older than that are seen "
                    "mid-history"
                )
        for w in warnings:
            if warn is not None:
                warn(w)
        earliest = min(
            (
                next(store.journal(log_id)).timestamp_ms
                for log_id, log in logs.items()
                if log["journal_entries"]
            ),
            default=None,
        )
        cut_start = since_ms is not None and earliest is not None and since_ms > earliest
        complete = not trimmed and not cut_start
        partial = out_path.with_name(out_path.name + ".partial")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        decoder = Decoder(names)
        total = stats["journal_entries"]
        entries = {log_id: logs[log_id]["journal_entries"] for log_id in log_ids(store.partitions)}
        parts = [log_id for log_id, n in entries.items() if n and log_id != CLUSTER_LOG]
        n_workers = _workers(workers, total, len(parts))
        try:
            writer = _Writer(
                pq.ParquetWriter(
                    partial,
                    SCHEMA,
                    compression="zstd",
                    coerce_timestamps="us",
                    allow_truncated_timestamps=True,
                ),
                row_group_rows,
            )
        except OSError as exc:
            raise ExportError(f"cannot write {out_path}: {exc}") from exc
        done: list[LogExport] = []
        try:
            with _progress(progress, total) as advance, _no_cyclic_gc():

                def one(log_id: int) -> None:
                    done.append(
                        export_log(
                            store.journal_rows(log_id),
                            log_id,
                            None if log_id == CLUSTER_LOG else log_id,
                            decoder,
                            writer.write,
                            since_ms=since_ms,
                            until_ms=until_ms,
                            row_group_rows=row_group_rows,
                            where=source.where,
                            advance=advance,
                        )
                    )

                # The cluster log first: the topics every partition's records refer to.
                one(CLUSTER_LOG)
                if n_workers <= 1:
                    for log_id in parts:
                        one(log_id)
                else:
                    done += _export_in_processes(
                        source,
                        parts,
                        n_workers,
                        decoder,
                        writer,
                        partial,
                        advance=lambda log_id: advance(entries[log_id]),
                        since_ms=since_ms,
                        until_ms=until_ms,
                        row_group_rows=row_group_rows,
                    )
            exported = [d for d in done if d.rows]
            rows = sum(d.rows for d in exported)
            first_exported = exported[0].first_offset if exported else None
            last_exported = exported[-1].last_offset if exported else None
            info = ExportInfo(
                store=source.where if source.uri else str(store.path),
                exported_at_ms=int(time.time() * 1000),
                created_by=_package_version(),
                shards=store.partitions,
                session_timeout_ms=session_timeout_ms,
                assignors=tuple(assignors),
                since_ms=since_ms,
                until_ms=until_ms,
                first_offset=first_exported,
                last_offset=last_exported,
                rows=rows,
                store_last_offset=last_offset,
                journal_first_offset=journal_first,
                complete=complete,
                warnings=tuple(warnings),
            )
            writer.close(info.to_metadata())
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                writer.abort()
            partial.unlink(missing_ok=True)
            if isinstance(exc, StoreError):
                raise ExportError(str(exc)) from exc
            if isinstance(exc, OSError):
                raise ExportError(f"cannot write {out_path}: {exc}") from exc
            raise
    os.replace(partial, out_path)
    return ExportResult(out_path, info, time.perf_counter() - started)


class _Writer:
    """The Parquet file, written by a thread of its own: encoding and compressing a row group
    (pyarrow releases the GIL) overlaps with decoding the next one. One row group at most
    waits to be written."""

    def __init__(self, writer: pq.ParquetWriter, row_group_rows: int) -> None:
        self._writer = writer
        self._rows = row_group_rows
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kip848-export-writer")
        self._pending: Future[None] | None = None

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # a failed write raises here

    def write(self, table: pa.Table) -> None:
        self._wait()
        self._pending = self._thread.submit(
            self._writer.write_table, table, row_group_size=self._rows
        )

    def flush(self) -> None:
        """Until what was given is written (the tables it holds may be let go)."""
        self._wait()

    def close(self, metadata: dict[bytes, bytes]) -> None:
        self._wait()
        self._thread.shutdown()
        self._writer.add_key_value_metadata(metadata)
        self._writer.close()

    def abort(self) -> None:
        try:
            self._wait()
        finally:
            self._thread.shutdown()
            self._writer.close()


PARALLEL_FROM = 500_000
"""Journal entries from which the export decodes partitions in several processes (a
process's start, about a second, is then a small part of the work)."""


def _workers(asked: int | None, entries: int, logs: int) -> int:
    if asked is not None:
        if asked < 1:
            raise ExportError(f"workers must be 1 or more, not {asked}")
        return min(asked, max(1, logs))
    if entries < PARALLEL_FROM:
        return 1
    return max(1, min(os.cpu_count() or 1, 4, logs))


def _export_in_processes(
    source: _Source,
    logs: list[int],
    workers: int,
    decoder: Decoder,
    writer: _Writer,
    partial: Path,
    *,
    advance: Callable[[int], None],
    since_ms: int | None,
    until_ms: int | None,
    row_group_rows: int,
) -> list[LogExport]:
    """The partitions' journals decoded by ``workers`` processes, a log each at a time, each
    into an Arrow file of its own next to the output (LZ4-compressed, deleted once copied);
    this process writes them to the Parquet file in log order as they are done."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    files = {log_id: partial.with_name(f"{partial.name}.log{log_id}.arrow") for log_id in logs}
    done: list[LogExport] = []
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = {
            log_id: pool.submit(
                _export_log_file,
                source,
                log_id,
                decoder.names,
                decoder.racks,
                str(files[log_id]),
                since_ms,
                until_ms,
                row_group_rows,
            )
            for log_id in logs
        }
        for log_id in logs:
            try:
                done.append(futures[log_id].result())
            except BrokenProcessPool as exc:
                raise ExportError(f"an export process died ({exc})") from exc
            with pa.memory_map(str(files[log_id])) as source:
                reader = pa.ipc.open_file(source)
                for k in range(reader.num_record_batches):
                    writer.write(pa.Table.from_batches([reader.get_batch(k)], schema=SCHEMA))
                writer.flush()  # nothing written may still point into the mapped file
            files[log_id].unlink()
            advance(log_id)
    finally:
        pool.shutdown(cancel_futures=True)
        for f in files.values():
            f.unlink(missing_ok=True)
    return done


def _export_log_file(
    source: _Source,
    log_id: int,
    names: dict[str, str],
    racks: dict[str, Mapping[int, frozenset[str]]],
    path: str,
    since_ms: int | None,
    until_ms: int | None,
    row_group_rows: int,
) -> LogExport:
    """In an export process: one log's journal into the Arrow file ``path``."""
    from coordinator.runtime.store import StoreError

    decoder = Decoder(names)
    decoder.racks.update(racks)
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    try:
        with (
            source.open() as store,
            pa.OSFile(path, "wb") as sink,
            pa.ipc.new_file(sink, SCHEMA, options=options) as out,
            _no_cyclic_gc(),
        ):
            return export_log(
                store.journal_rows(log_id),
                log_id,
                log_id,
                decoder,
                out.write_table,
                since_ms=since_ms,
                until_ms=until_ms,
                row_group_rows=row_group_rows,
                where=source.where,
            )
    except StoreError as exc:
        raise ExportError(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class _Source:
    """The store to export (picklable: each export process opens it again): the SQLite store
    of ``data_dir``, or the PostgreSQL store at ``uri`` when one is given."""

    data_dir: str
    uri: str | None

    @property
    def where(self) -> str:
        """What messages call it: the data directory, or the URI without its password."""
        if self.uri is None:
            return self.data_dir
        from coordinator.runtime.store.postgres_schema import dsn_for_log

        return dsn_for_log(self.uri)

    def open(self) -> Any:
        """The store, read-only; :class:`ExportError` when it cannot be opened."""
        from coordinator.runtime.store import PostgresRecordStore, SqliteRecordStore, StoreError

        try:
            if self.uri is None:
                return SqliteRecordStore(self.data_dir, read_only=True)
            return PostgresRecordStore(self.uri, read_only=True, application_name="kip848-export")
        except StoreError as exc:
            raise ExportError(str(exc)) from exc
        except ValueError as exc:  # not a postgresql:// URI
            raise ExportError(str(exc)) from exc


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the export's millions of short-lived tuples and
    lists hold no cycles (reference counting frees them), yet they would set it off every few
    hundred rows (about a tenth of the export's time, measured)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    if not enabled:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("exporting journal"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:
        task = bar.add_task("export", total=total)
        yield lambda n: bar.advance(task, n)
