"""A call's context on our gRPC server (``h2conn.py``): what our servicers, health and reflection
use of ``grpc.aio.ServicerContext``, and a handler's (de)serialization of its messages."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Sequence
from typing import Any, Protocol

import grpc
from google.protobuf import message as pb_message

from .grpc_server import AbortCall, undecodable


class ContextCall(Protocol):
    """What a context reads of its call (``h2conn._Call``) and its connection."""

    conn: Any  # h2conn.H2Connection: peer, client_host, tls_subject, server.tls, write_message
    handler: grpc.RpcMethodHandler
    metadata: tuple[tuple[str, Any], ...]
    group: Hashable | None | object
    deadline: float | None


class H2Context:
    """The part of ``grpc.aio.ServicerContext`` our servicers, health and reflection use."""

    __slots__ = ("_call",)

    def __init__(self, call: ContextCall) -> None:
        self._call = call

    def invocation_metadata(self) -> Sequence[tuple[str, Any]]:
        return self._call.metadata

    @property
    def group(self) -> Hashable | None | object:
        """The group the call's request names, as read for its admission
        (``fairness.NOT_READ`` if it was not)."""
        return self._call.group

    def peer(self) -> str:
        return self._call.conn.peer

    def client_host(self) -> str:
        """The peer as Kafka shows a ClientHost (``/127.0.0.1``), known since the connection
        was made: every call's :class:`~.api.Caller` carries it (host ACLs)."""
        return self._call.conn.client_host

    def peer_subject(self) -> str | None:
        """The verified client certificate's subject (TLS with a client certificate)."""
        return self._call.conn.tls_subject

    def auth_context(self) -> dict[str, list[bytes]]:
        """What grpc.aio's ``auth_context()`` answers of the connection's TLS."""
        conn = self._call.conn
        if conn.server.tls is None:
            return {}
        out = {"transport_security_type": [b"ssl"]}
        if conn.tls_subject is not None:
            out["x509_subject"] = [conn.tls_subject.encode()]
        return out

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise AbortCall(code, details)

    async def write(self, message: Any) -> None:
        call = self._call
        await call.conn.write_message(call, serialize(call.handler, message))

    def time_remaining(self) -> float | None:
        deadline = self._call.deadline
        if deadline is None:
            return None
        return max(0.0, deadline - asyncio.get_running_loop().time())


def serialize(handler: grpc.RpcMethodHandler, message: Any) -> bytes:
    serializer = handler.response_serializer
    return message if serializer is None else serializer(message)


def deserialize(handler: grpc.RpcMethodHandler, data: bytes) -> Any:
    """The request message as the handler takes it; one its deserializer cannot read (health's
    or reflection's: our services read their own) ends the call INVALID_ARGUMENT with the
    reason, as our services answer, not as an unexpected error with a traceback."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return data
    try:
        return deserializer(data)
    except pb_message.DecodeError as exc:
        raise AbortCall(grpc.StatusCode.INVALID_ARGUMENT, undecodable(exc)) from None
