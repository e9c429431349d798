"""The gRPC server pieces every process and both transports share: the method table (one
generic handler taking and returning bytes, no registered method), grpc.aio server
construction (``--grpc-transport grpcio``, the front ends), its port and TLS credentials,
health and reflection, and running a handler for the process's own connections.

Our h2 server (``h2grpc.py``) takes the same handler objects (``add_generic_rpc_handlers``);
the front-end forwarding (``forwarding.py``) builds on this module, never the other way round.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol, cast

import grpc
from google.protobuf import message as pb_message
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from .grpc_options import GrpcOptions
from .tls import ServerTls, TlsConfigError, key_and_chain, read_pem

log = logging.getLogger("kip848.server")


class AbortCall(Exception):
    """Raised by ``ForwardedContext.abort``: the call ends with a non-OK gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


Handler = tuple[Callable[[bytes], pb_message.Message], Callable[[Any, Any], Any]]


def method_table(services: Iterable[tuple[ServiceDescriptor, object]]) -> dict[str, Handler]:
    """``/package.Service/Method`` -> (request parser, servicer method) for every method (a
    server-streaming method is an async generator function)."""
    table: dict[str, Handler] = {}
    for descriptor, servicer in services:
        for method in descriptor.methods:
            request_class = message_factory.GetMessageClass(method.input_type)
            table[f"/{descriptor.full_name}/{method.name}"] = (
                request_class.FromString,
                getattr(servicer, method.name),
            )
    return table


class _PathHandler(grpc.GenericRpcHandler):
    """One generic handler for many methods: a dict lookup by ``/package.Service/Method``."""

    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers = handlers

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        return self.handlers.get(handler_call_details.method)


class RpcServer(Protocol):
    """What the coordinator registers handlers on: a ``grpc.aio.Server`` or our
    ``h2grpc.H2GrpcServer``."""

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None: ...


Within = Callable[[str, Callable[..., Any]], Callable[..., Any]]
"""A method's behaviour (its path, the function) made to run within a limit
(``fairness.limited``)."""


class _Within(grpc.GenericRpcHandler):
    """Another generic handler's methods, each run ``within`` (made once per method)."""

    def __init__(self, inner: grpc.GenericRpcHandler, within: Within) -> None:
        self._inner = inner
        self._within = within
        self._made: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        path: str = details.method
        made = self._made.get(path)
        if made is not None:
            return made
        handler: Any = self._inner.service(details)
        if handler is None:
            return None
        kind = next(
            kind
            for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream")
            if getattr(handler, kind) is not None
        )
        made = handler._replace(**{kind: self._within(path, getattr(handler, kind))})
        self._made[path] = made
        return made


class GenericOnly:
    """Wraps a grpc.aio server for ``add_*Servicer_to_server`` functions (health, reflection) so
    that they register generic handlers only.

    grpc.aio's accept loop keeps one pending future per *registered* method and runs
    ``asyncio.wait`` over all of them for every call it accepts; with the thirty-odd methods of
    our services that was, after gRPC's own work, the largest per-call cost (bench/service.py).
    Generic handlers share one pending future."""

    def __init__(self, server: RpcServer, within: Within | None = None) -> None:
        self._server = server
        self._within = within

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        within = self._within
        self._server.add_generic_rpc_handlers(
            handlers if within is None else [_Within(handler, within) for handler in handlers]
        )

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        """Deliberately nothing: the same handlers came through ``add_generic_rpc_handlers``."""


def add_raw_handlers(
    server: RpcServer,
    services: Iterable[ServiceDescriptor],
    make: Callable[[str], Callable[..., Any]],
) -> None:
    """Serve every method of ``services`` with ``make(path)``, a handler taking and returning
    encoded messages (bytes; for a server-streaming method, an async generator of them):
    decoding is the handler's, so an undecodable request gets INVALID_ARGUMENT (docs/proto.md), the
    same in every process. One generic handler, no registered methods (see ``GenericOnly``).
    A client-streaming method is refused (``ValueError``): a call carries one request."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for descriptor in services:
        for method in descriptor.methods:
            path = f"/{descriptor.full_name}/{method.name}"
            if method.client_streaming:
                raise ValueError(
                    f"{path} is a client-streaming RPC: only unary and server-streaming RPCs "
                    "are served and forwarded"
                )
            if method.server_streaming:
                handlers[path] = grpc.unary_stream_rpc_method_handler(make(path))
            else:
                handlers[path] = grpc.unary_unary_rpc_method_handler(make(path))
    server.add_generic_rpc_handlers((_PathHandler(handlers),))


DEFAULT_MAX_CONCURRENT_CALLS = 10_000
"""Calls one process runs at once before it sheds more with RESOURCE_EXHAUSTED
(``--max-concurrent-calls``)."""
PENDING_CALLS_LIMIT = 1_000_000
"""Calls grpc-core holds before the application picks them up (see new_grpc_server)."""


def new_grpc_server(
    max_message_bytes: int,
    *,
    reuseport: bool,
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
    tls: ServerTls | None = None,
    options: GrpcOptions | None = None,
) -> grpc.aio.Server:
    """The grpc.aio server of every process: message size limits, ``SO_REUSEPORT`` only when
    front ends share the port, and overload handling that never drops a call silently:

    * grpc-core keeps the calls that arrived but that the application has not picked up yet
      in a *pending* queue. By default it cancels them (status CANCELLED, indistinguishable
      from a processed call whose answer was lost) once that queue holds 1,000 calls (randomly,
      all of them from 3,000: ``grpc.server.max_pending_requests`` and its hard limit) or a
      call waited 30 s (``grpc.server_max_unrequested_time_in_server``). A burst of a few
      thousand calls hits that. We raise both so that a burst *queues*: the calls are taken up
      in order as fast as the loop can, and a client that gives up sees its own deadline.
    * Past ``max_concurrent_calls`` calls running at once in this process (0: no limit), a new
      call is refused at once, before any work, with RESOURCE_EXHAUSTED "Concurrent RPC limit
      exceeded!" (grpc.aio's ``maximum_concurrent_rpcs``): explicitly not processed; retry.
    * ``options``: grpc-core's options, the same our own server takes (``grpc_options.py``).

    ``tls``: its handshake timeout bounds grpc-core's (a client that never completes a
    handshake is dropped then); bind with :func:`add_port`.
    """
    handshake = (
        []
        if tls is None
        else [("grpc.server_handshake_timeout_ms", tls.files.handshake_timeout_ms)]
    )
    return grpc.aio.server(
        options=[
            *handshake,
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1 if reuseport else 0),
            ("grpc.server.max_pending_requests", PENDING_CALLS_LIMIT),
            ("grpc.server.max_pending_requests_hard_limit", PENDING_CALLS_LIMIT),
            ("grpc.server_max_unrequested_time_in_server", 24 * 3600),
            *(options or GrpcOptions()).grpc_aio_options(),
        ],
        maximum_concurrent_rpcs=max_concurrent_calls or None,
    )


def add_port(server: Any, address: str, tls: ServerTls | None) -> int:
    """Bind ``address`` on a grpc.aio server: plaintext, or TLS with ``tls``'s files
    (:func:`grpc_credentials`). Returns the port."""
    if tls is None:
        return int(server.add_insecure_port(address))
    return int(server.add_secure_port(address, grpc_credentials(tls)))


def grpc_credentials(tls: ServerTls) -> grpc.ServerCredentials:
    """grpc-core's TLS from a listener's files, following its reloads: grpc-core asks for the
    certificates at each new handshake and gets the reloaded ones once (connections made
    before keep theirs). grpc-core can only require a client certificate or not ask for one:
    ``ssl.client.auth=requested`` is refused (:class:`TlsConfigError`)."""
    if tls.client_auth == "requested":
        raise TlsConfigError(
            "ssl.client.auth=requested cannot be served by grpc.aio (--grpc-transport grpcio, "
            "and the front ends of --grpc-processes): it requires a client certificate or "
            "does not ask for one. Use required or none, or the default h2 server"
        )

    def configuration() -> Any:
        key, chain = key_and_chain(tls.files)
        ca = read_pem(tls.files.ca, "CA certificates") if tls.files.ca else None
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=ca)

    current = [configuration()]
    changed = [False]

    def reloaded() -> None:
        try:
            current[0] = configuration()
        except TlsConfigError as exc:
            log.error("Reloading the gRPC listener's certificates for grpc-core failed: %s", exc)
            return
        changed[0] = True

    def fetch() -> Any:
        if not changed[0]:
            return None  # grpc-core keeps what it has
        changed[0] = False
        return current[0]

    tls.on_reload.append(reloaded)
    return grpc.dynamic_ssl_server_credentials(
        current[0], fetch, require_client_authentication=tls.client_auth == "required"
    )


def add_health_and_reflection(
    server: RpcServer, servicer: Any, service_names: Sequence[str], within: Within | None = None
) -> None:
    """Standard health checking and server reflection for ``service_names`` (generic handlers),
    each method run ``within`` if given (the concurrency limit: as calls naming no group)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

    # GenericOnly stands in for the server (duck-typed: the two calls it takes).
    generic_only = cast(grpc.aio.Server, GenericOnly(server, within))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, generic_only)
    # The asyncio servicer on every server (enable_server_reflection would pick the blocking
    # one for anything that is not a grpc.aio.Server).
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection.aio.ReflectionServicer(
            [
                *service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ]
        ),
        generic_only,
    )


def undecodable(exc: Exception) -> str:
    return f"Undecodable request: {exc}"


def local_handler(entry: Handler) -> Callable[..., Any]:
    """The coordinator process's own handler for one method: decode, run, encode."""
    parse, method = entry
    if inspect.isasyncgenfunction(method):
        return _local_stream_handler(parse, method)

    async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            message = parse(request)
        except pb_message.DecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, undecodable(exc))
        return (await method(message, context)).SerializeToString()

    return handle


def _local_stream_handler(
    parse: Callable[[bytes], pb_message.Message], method: Callable[..., Any]
) -> Callable[..., AsyncIterator[bytes]]:
    async def handle(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        try:
            message = parse(request)
        except pb_message.DecodeError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, undecodable(exc))
        async for item in method(message, context):
            yield item.SerializeToString()

    return handle
