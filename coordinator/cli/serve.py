"""``kip848 serve``: run the coordinator (Kafka config names and defaults; docs/operations.md)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from coordinator.cli.config import DEFAULT_DATA_DIR, add_config_flags, build_config
from coordinator.cli.errors import UsageError
from coordinator.cli.registry import Commands
from coordinator.cli.rpc import DEFAULT_LISTEN

MAX_GRPC_PROCESSES = 64


def register(commands: Commands) -> None:
    p = commands.add("serve", cmd_serve, help="run the coordinator")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="bind address (port 0: any free port)",
    )
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help="where the record store lives"
    )
    add_config_flags(p)
    p.add_argument(
        "--clock",
        choices=("system", "manual"),
        default="system",
        help="manual: TestingService.AdvanceTime",
    )
    p.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024, metavar="N")
    p.add_argument(
        "--journal-retention-ms",
        type=int,
        default=None,
        metavar="MS",
        help="journal retention (default: keep)",
    )
    p.add_argument(
        "--sync",
        choices=("full", "normal"),
        default="full",
        help="SQLite durability (full: fsync per batch)",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--grpc-processes",
        type=grpc_processes,
        default=1,
        metavar="N|auto",
        help="processes serving gRPC on the listen port (1: this one; N > 1 adds N-1 front ends "
        "that forward to it, for more cores; auto: one per usable CPU)",
    )
    p.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the server's event loop",
    )
    p.add_argument(
        "--advertised-address",
        default=None,
        metavar="HOST:PORT",
        help="the address FindCoordinator answers (default: the listen address; a wildcard host "
        "becomes this machine's name)",
    )


def grpc_processes(text: str) -> int:
    """``--grpc-processes``: a number, or ``auto`` (the CPUs this process may run on)."""
    if text == "auto":
        return max(1, min(MAX_GRPC_PROCESSES, len(os.sched_getaffinity(0))))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import SqliteRecordStore, StoreError
    from coordinator.server.app import ServeOptions, make_runtime, serve, split_listen
    from coordinator.server.loop import run as run_loop

    config = build_config(args.config_file, args.set)
    try:
        split_listen(args.listen)
        if args.advertised_address is not None:
            _host, port = split_listen(args.advertised_address, "--advertised-address")
            if port == 0:
                raise ValueError("--advertised-address needs a real port, not 0")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.max_message_bytes < 1024:
        raise UsageError("--max-message-bytes must be >= 1024")
    if args.journal_retention_ms is not None and args.journal_retention_ms < 0:
        raise UsageError("--journal-retention-ms must be >= 0")
    if not 1 <= args.grpc_processes <= MAX_GRPC_PROCESSES:
        raise UsageError(
            f"--grpc-processes must be 1..{MAX_GRPC_PROCESSES}, got {args.grpc_processes}"
        )
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        Path(args.data_dir).mkdir(parents=True, exist_ok=True)
        store = SqliteRecordStore(
            args.data_dir, journal_retention_ms=args.journal_retention_ms, sync=args.sync
        )
    except (StoreError, OSError) as exc:
        print(f"kip848 serve: cannot open the store in {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    runtime = make_runtime(config, store, args.clock)
    options = ServeOptions(
        listen=args.listen,
        clock=args.clock,
        max_message_bytes=args.max_message_bytes,
        grpc_processes=args.grpc_processes,
        event_loop=args.event_loop,
        log_level=args.log_level,
        advertised=args.advertised_address,
    )
    return run_loop(serve(runtime, options), args.event_loop)
