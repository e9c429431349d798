"""A large Metadata answer of the upstream broker, forwarded to a client, is decoded, filtered
and encoded off the loop (``upstream/metadata_answers.py``): only its brokers are rewritten on
the loop. The same bytes as rewritten (and filtered by the topic guard) on the loop. Counted by
thread, not timed."""

from __future__ import annotations

import asyncio
import collections
import threading
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_runtime
from test_server_authorization import ADMIN, ALICE, OP, acl, grant

from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime
from coordinator.security.acls import SUPPORTED_OPERATIONS, ResourceType
from coordinator.security.authorizer import Authorizer, AuthorizerConfig
from coordinator.server.api import TopicChanges
from coordinator.server.kafka import topic_guard, wire
from coordinator.server.kafka.convert import topic_id_of
from coordinator.server.kafka.upstream import metadata_answers
from coordinator.server.kafka.upstream.broker import Upstream, UpstreamConnection
from coordinator.server.service import CoordinatorService

NAMES = ("pay-eu", "pay-us", "public", "secret")


def metadata_answer(names: tuple[str, ...], correlation_id: int = 9) -> bytes:
    """A Metadata v12 answer's frame (without its size) listing ``names`` (2 partitions each,
    ids 1...) on broker 0, and one topic the broker does not know."""
    partitions = [
        {"partition_index": p, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
        for p in range(2)
    ]
    topics: list[dict[str, Any]] = [
        {
            "name": n,
            "topic_id": uuid.UUID(int=i + 1),
            "partitions": partitions,
            "topic_authorized_operations": 0,
        }
        for i, n in enumerate(names)
    ]
    topics.append({"error_code": 3, "name": "gone", "partitions": []})
    answer = wire.build(
        wire.response_class(3, 12),
        brokers=[{"node_id": 0, "host": "broker", "port": 9092, "rack": "r0"}],
        cluster_id="c",
        controller_id=0,
        topics=topics,
    )
    return wire.I32.pack(correlation_id) + b"\0" + wire.encode_body(answer)


async def guarded_service() -> tuple[CoordinatorRuntime, CoordinatorService]:
    """A started runtime and its service with ACLs on (``User:admin`` a super user): the
    topics of NAMES, two partitions each; alice may READ ``pay-eu`` and DESCRIBE ``pay-*``,
    another user may READ ``secret``, and no ACL names ``public``."""
    rt = make_runtime()
    await rt.start()
    service = CoordinatorService(
        rt, authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))
    )
    await service.create_topics(
        TopicChanges(entries=[NewTopic(name=n, num_partitions=2) for n in NAMES]), ADMIN
    )
    await grant(
        service,
        acl(2, "pay-eu", OP.READ),
        acl(2, "pay-", OP.DESCRIBE, pattern=4),
        acl(2, "secret", OP.READ, principal="User:other"),
    )
    return rt, service


def watch_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What decodes, builds or decides about a Metadata answer on the loop's thread."""
    on_loop: list[str] = []
    loop_thread = threading.get_ident()
    decode, build, authorize = wire.decode_response, wire.build, Authorizer.authorize
    metadata = wire.response_class(3, 12)

    def watched_decode(key: int, *args: Any) -> Any:
        if key == 3 and threading.get_ident() == loop_thread:
            on_loop.append("decoded")
        return decode(key, *args)

    def watched_build(cls: Any, *args: Any, **kw: Any) -> Any:
        if cls is metadata and threading.get_ident() == loop_thread:
            on_loop.append("built")
        return build(cls, *args, **kw)

    def watched_authorize(self: Authorizer, *question: Any) -> bool:
        if threading.get_ident() == loop_thread:
            on_loop.append(f"decided {question[-1]}")
        return authorize(self, *question)

    monkeypatch.setattr(wire, "decode_response", watched_decode)
    monkeypatch.setattr(wire, "build", watched_build)
    monkeypatch.setattr(Authorizer, "authorize", watched_authorize)
    return on_loop


class Client:
    """The client connection of an upstream connection: what it was answered."""

    security = None

    def __init__(self) -> None:
        self.answers: list[tuple[object, bytes]] = []
        self.answered = asyncio.Event()

    def complete(self, slot: object, data: bytes) -> None:
        self.answers.append((slot, data))
        self.answered.set()

    def fail(self, why: str) -> None:
        raise AssertionError(why)


def connection(upstream: Upstream, client: Client, slot: object) -> UpstreamConnection:
    """An upstream connection (no socket) with one Metadata v12 request pending."""
    conn = UpstreamConnection.__new__(UpstreamConnection)
    conn.upstream, conn.client = upstream, client  # type: ignore[assignment]
    conn.pending = collections.deque([(slot, 3, 12, True, None)])
    conn.due = collections.deque([0.0])
    conn.buffer = bytearray()
    conn.rewriting = set()
    return conn


async def test_a_large_forwarded_metadata_answer_is_rewritten_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Metadata answer of 4 topics forwarded to a client, longer than the answer rewritten
    on the loop may be (100 bytes): nothing of it decoded or built on the loop's thread; the
    client gets the bytes rewritten on the loop, and the topic feed the same named topics
    (those without error). Before, it was decoded and encoded on the loop whatever its size
    (seconds at 100,000 topics)."""
    frame = metadata_answer(NAMES)
    sized = wire.I32.pack(len(frame)) + frame
    upstream = Upstream("127.0.0.1:9")
    named: list[Any] = []
    upstream.on_topics_named = lambda topics, deliver: (named.append(list(topics)), deliver())
    inline = Client()
    connection(upstream, inline, "slot").data_received(sized)
    on_loop = watch_the_loop(monkeypatch)
    monkeypatch.setattr(metadata_answers, "INLINE_BYTES", 100)
    client = Client()
    conn = connection(upstream, client, "slot")
    on_loop.clear()
    conn.data_received(sized)
    assert client.answers == [] and not conn.pending and conn.rewriting
    await asyncio.wait_for(client.answered.wait(), 5)
    assert on_loop == []
    assert client.answers == inline.answers
    ((_slot, out),) = client.answers
    assert out == upstream.rewrite(3, 12, frame)
    assert (
        named[0]
        == named[1]
        == [(n, topic_id_of(uuid.UUID(int=i + 1))) for i, n in enumerate(NAMES)]
    )
    await asyncio.sleep(0)
    assert not conn.rewriting


async def test_a_large_guarded_metadata_answer_of_every_topic_is_filtered_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ACLs on, in front of the broker: Metadata of every topic asking for each topic's
    authorized operations, its answer longer than the answer filtered on the loop may be: the
    same frame as filtered on the loop (secret left out, each other topic with alice's
    operations), and nothing of it decoded, built or decided on the loop's thread. Before,
    on the loop whatever its size."""
    rt, service = await guarded_service()
    frame = metadata_answer(NAMES)

    class Broker(Upstream):
        def forward_future(self, *_args: Any) -> asyncio.Future[bytes]:
            answered = asyncio.get_running_loop().create_future()
            answered.set_result(frame)
            return answered

    alice = replace(ALICE, api_version=12)
    conn = SimpleNamespace(
        listener=SimpleNamespace(service=service, upstream=Broker("127.0.0.1:9")),
        caller=lambda _client_id, _version: alice,
        security=None,
    )
    asked = wire.build(
        wire.request_class(3, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    request = wire.request_frame(asked, 9, "app")

    async def metadata() -> bytes:
        return await topic_guard.metadata(conn, 12, 9, "app", asked, request)  # type: ignore[arg-type]

    inline = await metadata()
    on_loop = watch_the_loop(monkeypatch)
    monkeypatch.setattr(metadata_answers, "INLINE_BYTES", 100)
    off_loop = await metadata()
    assert on_loop == []
    assert off_loop == inline
    answer = wire.decode_response(3, 12, off_loop[4:], 5)
    read_describe = (1 << OP.READ) | (1 << OP.DESCRIBE)
    every = sum(1 << int(op) for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    assert [(t.name, t.topic_authorized_operations) for t in answer.topics] == [
        ("pay-eu", read_describe),
        ("pay-us", 1 << OP.DESCRIBE),
        ("public", every),
        ("gone", every),  # no ACL names it: described, its error as the broker gave it
    ]
    await rt.close()
