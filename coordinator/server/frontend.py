"""A front-end process of ``kip848 serve --grpc-processes N`` (see ``forwarding.py``).

Started by the coordinator process, never by hand: ``python -m coordinator.server.frontend
--fd FD --listen HOST:PORT ...``. It serves the coordinator's services on the shared port,
passes every call to the coordinator over the socket ``FD`` and answers with what comes back.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import signal
import socket
import time
from typing import Any

import grpc
from grpc_health.v1 import health

from coordinator.observability.logs import LOG_FORMATS, configure_logging

from .fairness import CallLimit, GroupKeys, limited, process_limit
from .forwarding import (
    CALL,
    CANCEL,
    HEALTH,
    ITEM,
    READY,
    RELOAD,
    REPLY,
    STATUS_BY_NUMBER,
    STOP,
    STOPPED,
    TLS_ENV,
    FrameConnection,
    set_parent_death_signal,
)
from .grpc_auth import certificate_subject
from .grpc_options import GrpcOptions
from .grpc_server import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    add_health_and_reflection,
    add_port,
    add_raw_handlers,
    new_grpc_server,
)
from .loop import LOOPS
from .loop import run as run_loop
from .services import service_descriptors
from .tls import ServerTls, TlsFiles

log = logging.getLogger("kip848.frontend")


class FrontEndServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.calls: dict[int, asyncio.Future[tuple[int, str, bytes]]] = {}
        self.streams: dict[int, asyncio.Queue[tuple[Any, ...]]] = {}
        self.ids = itertools.count(1)
        self.conn: FrameConnection | None = None
        self.stop_requested: asyncio.Future[float] | None = None
        self.stopping = False
        self.tasks: set[asyncio.Task[None]] = set()
        self.tls = _tls_from_environment()
        self.server = new_grpc_server(
            args.max_message_bytes,
            reuseport=True,
            max_concurrent_calls=process_limit(args.max_concurrent_calls),
            tls=self.tls,
            options=GrpcOptions.from_settings(dict(a.split("=", 1) for a in args.grpc_arg)),
        )
        self.health = health.aio.HealthServicer()
        wanted = set(args.services.split(",")) if args.services else set()
        served = [d for d in service_descriptors() if d.full_name in wanted]
        self.service_names = [d.full_name for d in served]
        self.streaming = {
            f"/{d.full_name}/{m.name}" for d in served for m in d.methods if m.server_streaming
        }
        keys, limit = GroupKeys(served), CallLimit(args.max_concurrent_calls)
        add_raw_handlers(
            self.server, served, lambda path: limited(path, self._forwarder(path), keys, limit)
        )
        add_health_and_reflection(  # within the limit, as calls naming no group (app.py)
            self.server,
            self.health,
            self.service_names,
            lambda path, run: limited(path, run, keys, limit),
        )

    async def _connection(self, context: grpc.aio.ServicerContext) -> FrameConnection:
        """The connection to the coordinator (the call ends UNAVAILABLE while it shuts down)."""
        conn = self.conn
        if conn is None or conn.closed:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "The coordinator is shutting down.")
        return conn

    def _forwarder(self, path: str) -> Any:
        if path in self.streaming:
            return self._stream_forwarder(path)

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            conn = await self._connection(context)
            call_id = next(self.ids)
            fut: asyncio.Future[tuple[int, str, bytes]] = asyncio.get_running_loop().create_future()
            self.calls[call_id] = fut
            received = time.monotonic()  # the coordinator's latency metrics start here
            conn.send(
                (CALL, call_id, path, request, *_caller(context), received, _subject(context))
            )
            try:
                status, details, payload = await fut
            finally:
                self.calls.pop(call_id, None)
            if status:
                await context.abort(STATUS_BY_NUMBER.get(status, grpc.StatusCode.UNKNOWN), details)
            return payload

        return forward

    def _stream_forwarder(self, path: str) -> Any:
        """A server-streaming call: ITEM frames become messages, the REPLY frame its status;
        a client that goes away is a CANCEL to the coordinator."""

        async def forward(request: bytes, context: grpc.aio.ServicerContext) -> Any:
            conn = await self._connection(context)
            call_id = next(self.ids)
            queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
            self.streams[call_id] = queue
            conn.send((CALL, call_id, path, request, *_caller(context), None, _subject(context)))
            finished = False
            try:
                while True:
                    frame = await queue.get()
                    if frame[0] == ITEM:
                        yield frame[2]
                        continue
                    finished = True
                    status, details = frame[2], frame[3]
                    if status:
                        await context.abort(
                            STATUS_BY_NUMBER.get(status, grpc.StatusCode.UNKNOWN), details
                        )
                    return
            finally:
                self.streams.pop(call_id, None)
                if not finished and self.conn is not None:
                    self.conn.send((CANCEL, call_id))

        return forward

    def on_frame(self, frame: tuple[Any, ...]) -> None:
        kind = frame[0]
        if kind in (ITEM, REPLY) and frame[1] in self.streams:
            self.streams[frame[1]].put_nowait(frame)
        elif kind == REPLY:
            fut = self.calls.get(frame[1])
            if fut is not None and not fut.done():
                fut.set_result((frame[2], frame[3], frame[4]))
        elif kind == HEALTH:
            for name, status in frame[1].items():
                task = asyncio.get_running_loop().create_task(self.health.set(name, status))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        elif kind == RELOAD and self.tls is not None:
            self.tls.reload()
        elif kind == STOP:
            self.stopping = True
            if self.stop_requested is not None and not self.stop_requested.done():
                self.stop_requested.set_result(float(frame[1]))

    def on_lost(self) -> None:
        if self.stopping:
            return
        # The coordinator is gone (killed, or crashed): nothing can be answered any more.
        log.error("Front end %d: lost the coordinator; exiting.", self.args.index)
        os._exit(3)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self.stop_requested = loop.create_future()
        sock = socket.socket(fileno=self.args.fd)
        _transport, conn = await loop.create_connection(
            lambda: FrameConnection(self.on_frame, self.on_lost), sock=sock
        )
        self.conn = conn
        port = add_port(self.server, self.args.listen, self.tls)
        await self.server.start()
        conn.send((READY, port))
        grace = await self.stop_requested
        await self.health.enter_graceful_shutdown()
        await self.server.stop(
            grace
        )  # stop accepting; in-flight calls are answered by the coordinator
        conn.send((STOPPED,))
        for _ in range(3):
            await asyncio.sleep(0)  # let the frame go out
        return 0


async def _serve(args: argparse.Namespace) -> int:
    return await FrontEndServer(args).run()  # built inside the loop: grpc.aio binds to it


def _caller(context: grpc.aio.ServicerContext) -> tuple[tuple[tuple[str, Any], ...], str]:
    """What a CALL frame carries of its caller: the call's metadata and the peer address."""
    metadata = tuple((k, v) for k, v in (context.invocation_metadata() or ()))
    return metadata, context.peer() or ""


def _subject(context: grpc.aio.ServicerContext) -> str | None:
    """The verified client certificate's subject, if any, written as the coordinator process
    writes its own clients' (``grpc_auth.certificate_subject``)."""
    return certificate_subject(context.auth_context() or {})


def _tls_from_environment() -> ServerTls | None:
    """The coordinator's TLS files for the gRPC listener (``forwarding.TLS_ENV``)."""
    text = os.environ.get(TLS_ENV)
    if not text:
        return None
    import json

    values = json.loads(text)
    values["protocols"] = tuple(values["protocols"])
    return ServerTls("gRPC", TlsFiles(**values), alpn=("h2",))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kip848-frontend")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--listen", required=True)
    ap.add_argument("--max-message-bytes", type=int, required=True)
    ap.add_argument("--max-concurrent-calls", type=int, default=DEFAULT_MAX_CONCURRENT_CALLS)
    ap.add_argument("--grpc-arg", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--log-format", choices=LOG_FORMATS, default="plain")
    ap.add_argument("--index", type=int, default=1)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--services", default="")
    ap.add_argument("--event-loop", choices=LOOPS, default="uvloop")
    args = ap.parse_args(argv)
    set_parent_death_signal(args.parent)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # the coordinator process decides when we stop
    configure_logging(args.log_level, args.log_format, process=f"frontend-{args.index}")
    return run_loop(_serve(args), args.event_loop)


if __name__ == "__main__":
    raise SystemExit(main())
