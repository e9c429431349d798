"""Front-end processes: more cores for gRPC, one coordinator.

Python runs one thread of Python code per process, and on a small machine most of a unary
call's CPU is gRPC's own machinery (HTTP/2, the call object, the event loop), not the
coordinator's. ``kip848 serve --grpc-processes N`` therefore starts N-1 *front-end* processes
next to the coordinator process, the way Kafka separates network threads from request handler
threads:

* Every process binds the same ``--listen`` address (``SO_REUSEPORT``); the kernel spreads
  incoming connections over them. The coordinator process serves its connections itself.
* A front end owns no state. It terminates gRPC and passes each call, still encoded, to the
  coordinator process over a Unix socket pair: ``(call id, method path, request bytes,
  metadata, peer)``. The coordinator decodes it, runs the very same servicer method as for
  its own connections, and sends back ``(call id, status code, details, response bytes)``.
  Responses are therefore identical, and released only once their records are durable.
* Health follows the coordinator: it pushes every health change to the front ends. Reflection
  is served locally.
* Frames are length-prefixed ``marshal`` tuples (both ends are the same program); frames
  produced in one event-loop turn go out in one write.
* Server-streaming calls (ConsumerGroupWatch, the push stream) are forwarded the same way: the
  coordinator answers ``(ITEM, call id, message bytes)`` per message and one REPLY at the end;
  a front end whose client went away sends ``(CANCEL, call id)`` and the coordinator stops
  the call. Client-streaming RPCs are refused (there are none).
* Lifecycle: the coordinator prints ``listening on`` only once every front end is serving. On
  shutdown it tells the front ends to stop (they stop accepting and finish their in-flight
  calls, which the coordinator still answers), waits for them, then stops itself. A front end
  whose coordinator disappears (``kill -9``) exits at once: it never answers for state it
  does not have. Front ends ignore SIGINT/SIGTERM; the coordinator process is the one to signal.
  A front end that dies while serving is restarted after a back-off (``FrontEndPool``).

This module holds the framing and the coordinator's side; ``frontend.py`` is the front end;
``grpc_server.py`` the gRPC server pieces both processes (and both transports) use.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import marshal
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any

import grpc
from google.protobuf import message as pb_message

from .grpc_options import GrpcOptions
from .grpc_server import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    AbortCall,
    Handler,
    undecodable,
)
from .tls import ServerTls

log = logging.getLogger("kip848.server")

# Frame kinds (first element of every frame tuple).
CALL = 1  # front end -> coordinator: (CALL, call_id, path, request, metadata, peer, received,
#            TLS client certificate subject or None)
REPLY = 2  # coordinator -> front end: (REPLY, call_id, status, details, response)
HEALTH = 3  # coordinator -> front end: (HEALTH, {service: status})
STOP = 4  # coordinator -> front end: (STOP, grace_seconds)
READY = 5  # front end -> coordinator: (READY, port)
STOPPED = 6  # front end -> coordinator: (STOPPED,)
ITEM = 7  # coordinator -> front end: (ITEM, call_id, response) - one message of a stream
CANCEL = 8  # front end -> coordinator: (CANCEL, call_id) - the stream's client went away
RELOAD = 9  # coordinator -> front end: (RELOAD,) - re-read the TLS certificates (SIGHUP)
TLS_ENV = "KIP848_FRONTEND_TLS"
"""The front ends' TLS files (JSON), passed in their environment, not on a command line."""

_HEADER = 4
STATUS_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}
FRONTEND_START_TIMEOUT_S = 30.0
RESTART_MAX_DELAY_S = 30.0


class FrameConnection(asyncio.Protocol):
    """Length-prefixed marshal frames over a stream; ``send`` coalesces the frames of one loop
    turn into one write."""

    def __init__(
        self, on_frame: Callable[[tuple[Any, ...]], None], on_lost: Callable[[], None]
    ) -> None:
        self._on_frame = on_frame
        self._on_lost = on_lost
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        pos, end = 0, len(buf)
        on_frame = self._on_frame
        while end - pos >= _HEADER:
            size = int.from_bytes(buf[pos : pos + _HEADER], "little")
            if end - pos - _HEADER < size:
                break
            start = pos + _HEADER
            frame = marshal.loads(bytes(buf[start : start + size]))
            pos = start + size
            on_frame(frame)
        if pos:
            del buf[:pos]

    def send(self, frame: tuple[Any, ...]) -> None:
        if self.closed:
            return
        data = marshal.dumps(frame)
        self._out.append(len(data).to_bytes(_HEADER, "little"))
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._on_lost()


# ---------------------------------------------------------------- the coordinator's side


class ForwardedContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use, for a forwarded call."""

    __slots__ = ("_metadata", "_peer", "received", "subject")

    def __init__(
        self,
        metadata: Sequence[tuple[str, Any]],
        peer: str,
        received: float | None = None,
        subject: str | None = None,
    ) -> None:
        self._metadata = metadata
        self._peer = peer
        self.received = received  # time.monotonic() when the front end got the call (metrics)
        self.subject = subject  # the verified TLS client certificate's subject (front end's)

    def peer_subject(self) -> str | None:
        return self.subject

    def invocation_metadata(self) -> Sequence[tuple[str, Any]]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise AbortCall(code, details)


class Dispatcher:
    """Runs forwarded calls on the coordinator's servicers and answers them."""

    def __init__(self, table: dict[str, Handler]) -> None:
        self.table = table
        self._tasks: set[asyncio.Task[None]] = set()
        self._streams: dict[tuple[int, int], asyncio.Task[None]] = {}  # (conn, call) -> task

    def call(self, conn: FrameConnection, frame: tuple[Any, ...]) -> None:
        task = asyncio.get_running_loop().create_task(self._run(conn, frame))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        entry = self.table.get(frame[2])
        if entry is not None and inspect.isasyncgenfunction(entry[1]):
            key = (id(conn), frame[1])
            self._streams[key] = task
            task.add_done_callback(lambda _t: self._streams.pop(key, None))

    def cancel(self, conn: FrameConnection, call_id: int) -> None:
        """The front end's client of a stream went away: stop producing it."""
        task = self._streams.pop((id(conn), call_id), None)
        if task is not None:
            task.cancel()

    async def _run(self, conn: FrameConnection, frame: tuple[Any, ...]) -> None:
        _kind, call_id, path, payload, metadata, peer = frame[:6]
        received = frame[6] if len(frame) > 6 else None
        subject = frame[7] if len(frame) > 7 else None
        entry = self.table.get(path)
        if entry is None:
            conn.send(
                (
                    REPLY,
                    call_id,
                    grpc.StatusCode.UNIMPLEMENTED.value[0],
                    f"Method not found: {path}",
                    b"",
                )
            )
            return
        parse, method = entry
        try:
            request = parse(payload)
        except pb_message.DecodeError as exc:
            conn.send(
                (REPLY, call_id, grpc.StatusCode.INVALID_ARGUMENT.value[0], undecodable(exc), b"")
            )
            return
        if inspect.isasyncgenfunction(method):
            await self._stream(
                conn,
                call_id,
                path,
                method(request, ForwardedContext(metadata, peer, None, subject)),
            )
            return

        async def call() -> bytes:
            response = await method(request, ForwardedContext(metadata, peer, received, subject))
            return response.SerializeToString()

        await _answer(conn, call_id, f"call {path}", call())

    async def _stream(
        self, conn: FrameConnection, call_id: int, path: str, items: AsyncIterator[Any]
    ) -> None:
        async def stream() -> bytes:
            async for item in items:
                conn.send((ITEM, call_id, item.SerializeToString()))
            return b""

        try:
            await _answer(conn, call_id, f"stream {path}", stream())
        except asyncio.CancelledError:
            return  # cancelled by the front end: its client is gone, nobody to answer

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


class FrontEnd:
    """One front-end process as the coordinator sees it."""

    def __init__(self, index: int, proc: subprocess.Popen[bytes], conn: FrameConnection) -> None:
        self.index = index
        self.proc = proc
        self.conn = conn
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.calls = 0  # calls it forwarded
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class FrontEndPool:
    """Starts, feeds, supervises and stops the front-end processes of one coordinator.

    A front end that dies while serving (killed, out of memory) is logged and started again
    after a back-off (1 s, doubling up to ``RESTART_MAX_DELAY_S``); the other processes keep
    serving meanwhile and its clients reconnect to them."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        listen: str,
        max_message_bytes: int,
        log_level: str,
        event_loop: str,
        log_format: str = "plain",
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        tls: ServerTls | None = None,
        grpc_options: GrpcOptions | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.tls = tls
        if tls is not None:
            tls.on_reload.append(self._reload)
        self.grpc_options = grpc_options or GrpcOptions()
        self.log_format = log_format
        self.event_loop = event_loop
        self.listen = listen
        self.max_message_bytes = max_message_bytes
        self.max_concurrent_calls = max_concurrent_calls
        self.log_level = log_level
        self.frontends: list[FrontEnd] = []
        self._health: dict[str, int] = {}
        self._stopping = False
        self._port = 0
        self._services: Sequence[str] = ()
        self._restarts: dict[int, int] = {}  # index -> consecutive restarts
        self._restart_tasks: set[asyncio.Task[None]] = set()

    async def start(self, count: int, port: int, services: Sequence[str]) -> None:
        """Start ``count`` front ends on ``port``; returns once all of them serve."""
        self._port, self._services = port, services
        started = [await self._spawn(index + 1) for index in range(count)]
        for frontend in started:
            await self._until_ready(frontend)

    async def _spawn(self, index: int) -> FrontEnd:
        loop = asyncio.get_running_loop()
        host = self.listen.rpartition(":")[0]
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(  # noqa: ASYNC220 - fork/exec, at start-up and on a rare restart
                [
                    sys.executable,
                    "-m",
                    "coordinator.server.frontend",
                    "--fd",
                    str(theirs.fileno()),
                    "--listen",
                    f"{host}:{self._port}",
                    "--max-message-bytes",
                    str(self.max_message_bytes),
                    "--max-concurrent-calls",
                    str(self.max_concurrent_calls),
                    *(
                        f"--grpc-arg={name}={value}"
                        for name, value in self.grpc_options.grpc_args().items()
                    ),
                    "--log-level",
                    self.log_level,
                    "--log-format",
                    self.log_format,
                    "--index",
                    str(index),
                    "--parent",
                    str(os.getpid()),
                    "--event-loop",
                    self.event_loop,
                    "--services",
                    ",".join(self._services),
                ],
                pass_fds=[theirs.fileno()],
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        holder: list[FrontEnd] = []
        _transport, conn = await loop.create_connection(
            lambda: FrameConnection(
                lambda f: self._on_frame(holder[0], f), lambda: self._on_lost(holder[0])
            ),
            sock=mine,
        )
        frontend = FrontEnd(index, proc, conn)
        holder.append(frontend)
        self.frontends = [f for f in self.frontends if f.index != index] + [frontend]
        self.frontends.sort(key=lambda f: f.index)
        if self._health:
            conn.send((HEALTH, dict(self._health)))
        return frontend

    def _environment(self) -> dict[str, str] | None:
        """The front end's environment: ours, plus its TLS files (``TLS_ENV``)."""
        if self.tls is None:
            return None
        import dataclasses
        import json

        return {**os.environ, TLS_ENV: json.dumps(dataclasses.asdict(self.tls.files))}

    def _reload(self) -> None:
        for frontend in self.frontends:
            frontend.conn.send((RELOAD,))

    async def _until_ready(self, frontend: FrontEnd) -> None:
        waits: list[asyncio.Future[Any]] = [frontend.ready, frontend.lost]
        done, _ = await asyncio.wait(
            waits,
            timeout=FRONTEND_START_TIMEOUT_S,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if frontend.ready not in done or frontend.ready.exception() is not None:
            raise RuntimeError(
                f"front end {frontend.index} did not start (exit code {frontend.proc.poll()})"
            )
        log.info(
            "Front end %d (pid %d) serving on port %d.",
            frontend.index,
            frontend.proc.pid,
            frontend.ready.result(),
        )

    def _on_frame(self, frontend: FrontEnd, frame: tuple[Any, ...]) -> None:
        kind = frame[0]
        if kind == CALL:
            frontend.calls += 1
            self.dispatcher.call(frontend.conn, frame)
        elif kind == CANCEL:
            self.dispatcher.cancel(frontend.conn, frame[1])
        elif kind == READY:
            if not frontend.ready.done():
                frontend.ready.set_result(frame[1])
        elif kind == STOPPED:
            if not frontend.stopped.done():
                frontend.stopped.set_result(None)
        else:
            log.warning("Front end %d sent an unknown frame kind %r.", frontend.index, kind)

    def _on_lost(self, frontend: FrontEnd) -> None:
        serving = frontend.ready.done() and not frontend.stopped.done()
        for fut in (frontend.lost, frontend.stopped):
            if not fut.done():
                fut.set_result(None)
        if not frontend.ready.done():
            frontend.ready.set_exception(
                RuntimeError(f"front end {frontend.index} exited while starting")
            )
            frontend.ready.exception()
        if serving and not self._stopping:
            task = asyncio.get_running_loop().create_task(self._restart(frontend))
            self._restart_tasks.add(task)
            task.add_done_callback(self._restart_tasks.discard)

    async def _restart(self, dead: FrontEnd) -> None:
        code = await asyncio.to_thread(_reap, dead.proc)
        attempt = self._restarts.get(dead.index, 0)
        delay = min(RESTART_MAX_DELAY_S, 2.0**attempt)
        log.error(
            "Front end %d (pid %d) exited unexpectedly (exit code %s) after forwarding %d calls; "
            "the other processes keep serving; restarting it in %.0f s.",
            dead.index,
            dead.proc.pid,
            code,
            dead.calls,
            delay,
        )
        await asyncio.sleep(delay)
        if self._stopping:
            return
        self._restarts[dead.index] = attempt + 1
        frontend = await self._spawn(dead.index)
        try:
            await self._until_ready(frontend)
        except RuntimeError as exc:
            log.error("Restarting front end %d failed: %s", dead.index, exc)
            return  # its _on_lost schedules the next attempt, with a longer back-off
        log.info("Front end %d restarted (pid %d).", frontend.index, frontend.proc.pid)
        await asyncio.sleep(RESTART_MAX_DELAY_S)  # up this long: the back-off starts over
        if frontend.lost.done():
            return
        self._restarts[dead.index] = 0

    def set_health(self, statuses: dict[str, int]) -> None:
        self._health.update(statuses)
        for frontend in self.frontends:
            frontend.conn.send((HEALTH, dict(statuses)))

    async def stop(self, grace_s: float) -> None:
        """Front ends stop accepting and finish their calls (answered by us); then they exit."""
        self._stopping = True
        for task in list(self._restart_tasks):
            task.cancel()
        for frontend in self.frontends:
            frontend.conn.send((STOP, grace_s))
        for frontend in self.frontends:
            try:
                await asyncio.wait_for(asyncio.shield(frontend.stopped), grace_s + 5.0)
            except TimeoutError:
                log.warning("Front end %d did not stop in time; killing it.", frontend.index)
        await self.dispatcher.drain()
        for frontend in self.frontends:
            await asyncio.to_thread(_reap, frontend.proc)
            log.info(
                "Front end %d stopped (exit code %s) after forwarding %d calls.",
                frontend.index,
                frontend.proc.returncode,
                frontend.calls,
            )
            if frontend.conn.transport is not None:
                frontend.conn.transport.close()


def _reap(proc: subprocess.Popen[bytes]) -> int | None:
    try:
        return proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10.0)


def set_parent_death_signal(parent_pid: int) -> None:
    """Linux: the kernel kills this process when its parent dies (belt and braces next to
    the socket EOF check)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, 9, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - best effort
        pass
    if os.getppid() != parent_pid:  # the parent is already gone
        os._exit(1)


async def _answer(
    conn: FrameConnection, call_id: int, what: str, run: Coroutine[Any, Any, bytes]
) -> None:
    """Runs a forwarded call and sends its REPLY frame: OK with what ``run`` returns, the
    status it aborted with, or UNKNOWN for a bug (logged with its traceback)."""
    try:
        payload = await run
    except AbortCall as exc:
        conn.send((REPLY, call_id, exc.code.value[0], exc.details, b""))
    except Exception:
        log.exception("Unexpected error in forwarded %s", what)
        conn.send(
            (REPLY, call_id, grpc.StatusCode.UNKNOWN.value[0], "Unexpected server error.", b"")
        )
    else:
        conn.send((REPLY, call_id, 0, "", payload))
