"""gRPC plumbing of the client sub-commands: the channel, one call with the CLI's deadline and
metadata, and a failed call reported with a hint."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:9094"


def add_client_flags(p: argparse.ArgumentParser) -> None:
    """The flags every client action takes."""
    p.add_argument("--bootstrap-server", default=DEFAULT_LISTEN, metavar="HOST:PORT")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")


def channel(args: argparse.Namespace) -> Any:
    import grpc

    return grpc.insecure_channel(args.bootstrap_server)


def call(fn: Any, request: Any, args: argparse.Namespace) -> Any:
    import grpc

    try:
        return fn(request, timeout=args.timeout, metadata=(("client-id", "kip848-cli"),))
    except grpc.RpcError as exc:
        raise SystemExit(rpc_failed(args, exc)) from None


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
