"""gRPC plumbing of the client sub-commands: the channel, one call with the CLI's deadline and
metadata, and a failed call reported with a hint.

A coordinator that has just started answers COORDINATOR_LOAD_IN_PROGRESS until its store is
loaded; ``call`` retries such an answer (back-off 50 ms doubling to 1 s) until ``--timeout``
runs out, as Kafka's admin client retries retriable errors within its timeout. Only an answer
in which nothing was done is retried: the top-level error, or every entry's error, is
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from coordinator.cli.argtypes import positive_seconds

DEFAULT_LISTEN = "127.0.0.1:9094"
LOAD_IN_PROGRESS = 14
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0


def add_client_flags(p: argparse.ArgumentParser) -> None:
    """The flags every client action takes."""
    p.add_argument("--bootstrap-server", default=DEFAULT_LISTEN, metavar="HOST:PORT")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up after this long, retrying while the coordinator loads (default 10)",
    )


def channel(args: argparse.Namespace) -> Any:
    import grpc

    # Take any answer the server sends (it bounds them by its --max-message-bytes); gRPC's
    # client default of 4 MiB would refuse a large ListGroups the server was willing to send.
    return grpc.insecure_channel(
        args.bootstrap_server, options=[("grpc.max_receive_message_length", -1)]
    )


def call(fn: Any, request: Any, args: argparse.Namespace) -> Any:
    """One RPC, retried while the coordinator is loading, within ``--timeout`` in all."""
    import grpc

    deadline = time.monotonic() + args.timeout
    pause = RETRY_FIRST_S
    for _attempt in range(10_000):
        left = deadline - time.monotonic()
        try:
            response = fn(
                request, timeout=max(left, 0.001), metadata=(("client-id", "kip848-cli"),)
            )
        except grpc.RpcError as exc:
            raise SystemExit(rpc_failed(args, exc)) from None
        left = deadline - time.monotonic()
        if not nothing_done_while_loading(response) or left <= pause:
            return response
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)
    return response


def nothing_done_while_loading(message: Any) -> bool:
    """The answer says COORDINATOR_LOAD_IN_PROGRESS for the whole request: the top-level error,
    or (recursively) every entry of its lists, e.g. each partition of an OffsetCommit."""
    fields = message.DESCRIPTOR.fields_by_name
    if "error_code" in fields and message.error_code == LOAD_IN_PROGRESS:
        return True
    if "error_code" in fields and message.error_code:
        return False
    entries = [
        entry
        for field in message.DESCRIPTOR.fields
        if field.message_type is not None and field.is_repeated
        for entry in getattr(message, field.name)
    ]
    return bool(entries) and all(nothing_done_while_loading(e) for e in entries)


def rpc_failed(args: argparse.Namespace, exc: Any) -> int:
    import grpc

    print(f"kip848: {args.bootstrap_server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        print(
            f"  hint: is `kip848 serve` running and listening on {args.bootstrap_server}? "
            "(--bootstrap-server HOST:PORT)",
            file=sys.stderr,
        )
    elif exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        print(
            f"  hint: no answer within {args.timeout} s; raise --timeout or check the server",
            file=sys.stderr,
        )
    return 1
