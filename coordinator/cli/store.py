"""``kip848 store migrate``: bring a store to this build's schema, offline. ``kip848 store
copy``: a SQLite store copied into a PostgreSQL store no node has used, offline — one node's
deployment moving to several nodes (docs/ha.md).

A store of schema version 1 (one log, before coordinator partitions) becomes partitioned logs:
every group's records go to its coordinator partition (``offsets.topic.num.partitions``, from
``--partitions`` or the configuration), in their order, and nothing is lost (the migration runs
in one transaction and checks that every record is still there before it commits). ``kip848
serve`` migrates such a store by itself when it starts; ``dump``, ``replay`` and ``analytics``
read only migrated stores and name this command.
"""

from __future__ import annotations

import argparse
import json
import sys

from coordinator.cli.argtypes import int_in
from coordinator.cli.config import DEFAULT_DATA_DIR, add_config_flags, build_config
from coordinator.cli.registry import Commands


def register(commands: Commands) -> None:
    p = commands.add("store", cmd_store, help="the record store, offline (migrate)")
    sub = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    m = sub.add_parser(
        "migrate", help="migrate a store to this build's schema (one log -> partitioned logs)"
    )
    m.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    m.add_argument(
        "--partitions",
        type=int_in(1, 1024),
        default=None,
        metavar="N",
        help="coordinator partitions of the migrated store (default: "
        "offsets.topic.num.partitions of the configuration, 50)",
    )
    add_config_flags(m)
    m.add_argument("--output", choices=("text", "json"), default="text")
    c = sub.add_parser(
        "copy",
        help="copy the SQLite store of --data-dir into a PostgreSQL store no node has used "
        "(--to sqlite: the PostgreSQL store of stopped nodes into a new SQLite store)",
    )
    c.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    c.add_argument(
        "--store",
        required=True,
        metavar="URI",
        help="the PostgreSQL store (postgresql://user:password@host:port/db)",
    )
    c.add_argument(
        "--to",
        choices=("postgresql", "sqlite"),
        default="postgresql",
        help="postgresql (default): the SQLite store of --data-dir into --store, a store no "
        "node has used (one node -> several); sqlite: --store, every node stopped, into a new "
        "SQLite store in --data-dir (several nodes -> one)",
    )
    add_config_flags(c)
    c.add_argument("--output", choices=("text", "json"), default="text")
    c.add_argument(
        "--accept-lost-wal",
        action="store_true",
        help="copy a store whose write-ahead log went missing after an unclean shutdown, as its "
        "main file holds it (the log's commits are lost; refused without this flag)",
    )


def cmd_store(args: argparse.Namespace) -> int:
    if args.store_command == "copy":
        return _copy(args)
    return _migrate(args)


def _copy(args: argparse.Namespace) -> int:
    from coordinator.cli.dump_replay import check_store_uri
    from coordinator.runtime.store import SqliteRecordStore, StoreError
    from coordinator.runtime.store.postgres_copy import copy_to_postgres
    from coordinator.runtime.store.postgres_schema import dsn_for_log
    from coordinator.runtime.store.sqlite_copy import copy_to_sqlite

    check_store_uri(args)
    back = args.to == "sqlite"
    if back and args.accept_lost_wal:
        print(
            "kip848 store copy: --accept-lost-wal is for a SQLite store copied from "
            "(--to postgresql)",
            file=sys.stderr,
        )
        return 2
    config = None if back else build_config(args.config_file, args.set, args.server_properties)
    try:
        if config is None:
            result = copy_to_sqlite(args.store, args.data_dir)
        else:
            # For writing: its lock keeps a server off the store while it is copied (one
            # running on it is refused), and a store of an older schema is migrated first, as
            # serve would.
            with SqliteRecordStore.in_data_dir(
                args.data_dir,
                partitions=config.offsets_topic_partitions,
                accept_lost_wal=args.accept_lost_wal,
            ) as store:
                result = copy_to_postgres(store, args.store)
    except StoreError as exc:
        print(f"kip848 store copy: {exc}", file=sys.stderr)
        return 1
    where = dsn_for_log(args.store)
    if args.output == "json":
        print(
            json.dumps(
                {
                    "data_dir": args.data_dir,
                    "store": where,
                    "to": args.to,
                    "partitions": result.partitions,
                    "journal_entries": result.journal_entries,
                    "compacted_records": result.compacted_records,
                }
            )
        )
        return 0
    what, then = (
        (
            f"the store at {where} into {args.data_dir}",
            "Start the one node with --data-dir; do not start nodes on the PostgreSQL store again.",
        )
        if back
        else (f"the store in {args.data_dir} into {where}", "Start the nodes with --store.")
    )
    print(
        f"Copied {what}: {result.partitions} partitions and the cluster log, "
        f"{result.compacted_records} compacted records and {result.journal_entries} journal "
        f"entries. {then}"
    )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import SqliteRecordStore, StoreError, StoreVersionError

    config = build_config(args.config_file, args.set, args.server_properties)
    partitions = args.partitions or config.offsets_topic_partitions
    try:
        with SqliteRecordStore.in_data_dir(args.data_dir, read_only=True) as store:
            before = store.stats()
        already = True
    except StoreVersionError as exc:
        if "upgrade kip848-coordinator" in str(exc):  # newer than this build
            print(f"kip848 store migrate: {exc}", file=sys.stderr)
            return 1
        already = False  # older: opening it for writing migrates it
    except StoreError as exc:  # missing, foreign, corrupt: never created or replaced here
        print(f"kip848 store migrate: {exc}", file=sys.stderr)
        return 1
    try:
        with SqliteRecordStore.in_data_dir(args.data_dir, partitions=partitions) as store:
            stats = store.stats()
    except StoreError as exc:
        print(f"kip848 store migrate: {exc}", file=sys.stderr)
        return 1
    summary = {
        "data_dir": args.data_dir,
        "migrated": not already,
        "schema_version": stats["schema_version"],
        "migrated_from_version": stats["migrated_from_version"],
        "partitions": stats["partitions"],
        "journal_entries": stats["journal_entries"],
        "compacted_records": stats["compacted_records"],
    }
    if args.output == "json":
        print(json.dumps(summary))
    elif already:
        print(
            f"The store in {args.data_dir} already has schema version {before['schema_version']} "
            f"({before['partitions']} partitions): nothing to migrate."
        )
    else:
        print(
            f"Migrated the store in {args.data_dir} to schema version {stats['schema_version']}:"
            f" {stats['partitions']} partitions and the cluster log, "
            f"{stats['compacted_records']} compacted records and {stats['journal_entries']} "
            "journal entries kept."
        )
    return 0
