"""A large Metadata answer of the upstream broker, rewritten for a client off the node's loop.

Every Metadata answer forwarded to a client names the brokers: they are rewritten to name the
listener's ports for them (``Upstream.rewrite``), which decodes and encodes the whole answer.
At 100,000 topics that is seconds of Python (the decoding, then the encoding of every topic
and partition), and so is the topic guard's filter of an answer of every topic
(``topic_guard.metadata``). An answer longer than :data:`INLINE_BYTES` is decoded on a thread,
its brokers rewritten on the loop (a few entries: the listener's ports, the brokers learnt, the
coordinator nodes), then its topics filtered (the guard's, as one state of the ACLs decides:
``RequestAuthorizer.pinned``) and the answer encoded on a thread, where what was decoded is
freed a slice at a time (``collector.free_gradually``). The topics' entities go through as
decoded: the answer's bytes are those the loop made of the same answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

from coordinator.runtime.collector import free_gradually, no_collections

from .. import apis, wire
from ..convert import topic_id_of

INLINE_BYTES = 65_536
"""A forwarded Metadata answer longer than this (some 600 topics of 3 partitions) is decoded
and encoded on a thread."""

Keep = Callable[[Any], Any]
"""A topic's entity as the answer keeps it (changed, or as it is), or None: left out."""


Brokers = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""The answer's brokers as the client is told them (``Upstream.metadata_brokers``)."""


async def rewritten(
    brokers_of: Brokers,
    version: int,
    frame: bytes,
    named: list[tuple[str, str]] | None = None,
    keep: Keep | None = None,
    cluster_operations: int | None = None,
) -> bytes:
    """``Upstream.rewrite`` of a Metadata answer (``frame``: without its size; the answer
    with its size), decoded and encoded on threads, its brokers given by ``brokers_of`` on the
    loop (the module doc). ``named``: as ``rewrite``'s; ``keep``: each topic of the answer as it is kept (on the thread);
    ``cluster_operations``: the answer's, given. Raises ``wire.WireError``."""
    loop = asyncio.get_running_loop()
    pos = 5 if wire.response_header_flexible(apis.METADATA, version) else 4
    box = await loop.run_in_executor(None, _decoded, version, frame, pos)
    brokers = brokers_of([wire.as_values(b) for b in box[0].brokers])
    correlation_id = wire.I32.unpack_from(frame, 0)[0]
    encode = partial(_encoded, box, correlation_id, brokers, named, keep, cluster_operations)
    return await loop.run_in_executor(None, encode)


def _decoded(version: int, frame: bytes, pos: int) -> list[Any]:
    with no_collections():  # freed on a thread, never scanned
        return [wire.decode_response(apis.METADATA, version, frame, pos)]


def _encoded(
    box: list[Any],
    correlation_id: int,
    brokers: list[dict[str, Any]],
    named: list[tuple[str, str]] | None,
    keep: Keep | None,
    cluster_operations: int | None,
) -> bytes:
    with no_collections():
        resp = box.pop()  # this thread's only: the loop no longer refers to it
        decoded = list(resp.topics)
        topics = decoded if keep is None else [t for t in map(keep, decoded) if t is not None]
        if named is not None:
            named += [(t.name or "", topic_id_of(t.topic_id)) for t in topics if not t.error_code]
        values = {name: getattr(resp, name) for name in resp.__dataclass_fields__}
        values["brokers"], values["topics"] = brokers, topics
        if cluster_operations is not None:
            values["cluster_authorized_operations"] = cluster_operations
        version = int(type(resp).__version__)
        answer = wire.build(type(resp), values)
        out = wire.frame(apis.METADATA, version, correlation_id, answer)
        del answer, values, resp
        free_gradually(topics, decoded)
        return out
