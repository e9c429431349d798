"""Fair under overload: the concurrency limit and the order calls start in, per group.

A join storm is one group's members all calling at once: 10,000 members joining one group hold
10,000 calls at the same time (each waits for the group's first target). A process-wide limit
refuses whoever comes after that — another group's heartbeat as readily as the storm's own
calls — and a queue in arrival order puts that heartbeat behind the whole storm. Kafka has no
such limit; where we must shed, we shed the group that floods:

* ``GroupKeys``: which group a call is for, read from its encoded request (the request's
  ``group_id``, the first of its ``group_ids``, or the first entry's of a list of groups) without
  decoding it; None for calls that name no group (health, reflection, topics).
* ``CallLimit``: ``--max-concurrent-calls`` is what one group may run at once in a process; the
  process runs at most a tenth more in all, so that tenth is always left to the other groups.
  A storm of one group is refused past its own limit (RESOURCE_EXHAUSTED, "Concurrent RPC limit
  exceeded!", not processed); the other groups' calls still start. (Two groups flooding at
  once share the tenth; calls naming no group count as one group.)

Both servers apply the limit in the handlers (``grpc_server.local_handler``, the front ends'
forwarders, health's and reflection's: ``add_health_and_reflection``); our own server also starts calls fairly between groups (``admission.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Hashable, Iterable
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

_TAGS = {number: bytes([number << 3 | 2]) for number in range(1, 16)}  # length-delimited
LIMIT_EXCEEDED = "Concurrent RPC limit exceeded!"  # grpc.aio's words for maximum_concurrent_rpcs
NOT_READ = object()
"""A call whose group was not read yet (our gRPC server reads it once, for the admission, and
its contexts carry it: ``H2Context.group``)."""
RESERVE_SHARE = 10
"""The process runs at most 1/RESERVE_SHARE more than one group's limit, for the others."""


class GroupKeys:
    """The group of each call, from its method and encoded request."""

    __slots__ = ("_paths",)

    def __init__(self, services: Iterable[ServiceDescriptor]) -> None:
        # path -> the field numbers leading to the group id (one, or a list's then its entry's)
        self._paths: dict[str, tuple[int, ...]] = {}
        for service in services:
            for method in service.methods:
                route = _group_field(method.input_type)
                if route:
                    self._paths[f"/{service.full_name}/{method.name}"] = route

    def key(self, path: str, request: bytes) -> str | None:
        """The group ``request`` (encoded) is for; None if its method names none, or it names
        none (or is malformed: the handler will say so)."""
        route = self._paths.get(path)
        if route is None:
            return None
        if len(route) == 1 and request[:1] == _TAGS.get(route[0]) and b"" < request[1:2] < b"\x80":
            data: bytes | None = request[2 : 2 + request[1]]  # the usual: first, short
        else:
            data = request
            for number in route:
                data = _first_field(data, number) if data is not None else None
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None


def _group_field(message: Descriptor) -> tuple[int, ...]:
    """Where ``message`` names its (first) group: ``group_id``, ``group_ids``, or a repeated
    message field whose entries have a ``group_id``."""
    for field in message.fields:
        if field.name in ("group_id", "group_ids") and field.type == FieldDescriptor.TYPE_STRING:
            return (field.number,)
    for field in message.fields:
        entry = field.message_type
        if entry is not None and field.is_repeated:
            inner = entry.fields_by_name.get("group_id")
            if inner is not None and inner.type == FieldDescriptor.TYPE_STRING:
                return (field.number, inner.number)
    return ()


def _first_field(data: bytes, number: int) -> bytes | None:
    """The first length-delimited field ``number`` of an encoded message (top level)."""
    pos, end = 0, len(data)
    try:
        while pos < end:
            tag, pos = _varint(data, pos)
            kind = tag & 7
            if kind == 2:
                length, pos = _varint(data, pos)
                if tag >> 3 == number:
                    return data[pos : pos + length] if pos + length <= end else None
                pos += length
            elif kind == 0:
                _, pos = _varint(data, pos)
            elif kind == 1:
                pos += 8
            elif kind == 5:
                pos += 4
            else:
                return None
    except IndexError:
        return None
    return None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def process_limit(limit: int) -> int:
    """What a process runs at most when one group may run ``limit`` (0: no limit)."""
    return limit + limit // RESERVE_SHARE


class CallLimit:
    """Calls running at once in one process, per group (see the module). ``limit`` 0: none."""

    __slots__ = ("_process", "_running", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._process = process_limit(limit)
        self._running: dict[Hashable, int] = {}
        self.total = 0

    def acquire(self, key: Hashable) -> bool:
        """One more call of group ``key``, unless that is over the group's limit or the
        process's (then False: refuse the call)."""
        if not self.limit:
            return True
        running = self._running.get(key, 0)
        if running >= self.limit or self.total >= self._process:
            return False
        self._running[key] = running + 1
        self.total += 1
        return True

    def release(self, key: Hashable) -> None:
        if not self.limit:
            return
        running = self._running[key] - 1
        if running:
            self._running[key] = running
        else:
            del self._running[key]
        self.total -= 1

    def running(self, key: Hashable) -> int:
        return self._running.get(key, 0)


def limited(
    path: str, handler: Callable[..., Any], keys: GroupKeys, limit: CallLimit
) -> Callable[..., Any]:
    """``handler`` (raw bytes in; a coroutine, or an async generator for a server stream) run
    within its group's share of ``limit``: refused RESOURCE_EXHAUSTED before any work past it."""
    if not limit.limit:
        return handler
    if inspect.isasyncgenfunction(handler):

        async def stream(request: bytes, context: Any) -> AsyncIterator[Any]:
            key = getattr(context, "group", NOT_READ)
            if key is NOT_READ:
                key = keys.key(path, request)
            if not limit.acquire(key):
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, LIMIT_EXCEEDED)
            try:
                async for item in handler(request, context):
                    yield item
            finally:
                limit.release(key)

        return stream

    async def unary(request: bytes, context: Any) -> Any:
        key = getattr(context, "group", NOT_READ)
        if key is NOT_READ:
            key = keys.key(path, request)
        if not limit.acquire(key):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, LIMIT_EXCEEDED)
        try:
            return await handler(request, context)
        finally:
            limit.release(key)

    return unary
