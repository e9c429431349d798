"""What a thread builds or reads off the loop in bulk it frees a slice at a time
(``collector.free_gradually``), never in one go: freeing a large structure is one cascade of
deallocations in C during which the thread keeps the interpreter's lock, and the loop waits
for it (docs/benchmarks.md, "The loop's longest step": 45-55 ms for a 100,000-topic Metadata
answer, 45-140 ms for the keys of a 200,000-record cluster log's reload). Counted with
``freeing.most_freed_at_once`` (the most tracked objects freed within one instruction), not
timed; a slice of 5 here, :data:`~coordinator.runtime.collector.FREE_SLICE` in the node."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_runtime
from freeing import Tracked, TrackedUUID, most_freed_at_once

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.records import Record
from coordinator.core.topics import NewTopic
from coordinator.runtime import collector, loader
from coordinator.server.api import Caller, Node
from coordinator.server.kafka import convert, served, wire
from coordinator.server.kafka.served import KafkaApis
from coordinator.server.kafka.upstream import topic_feed
from coordinator.server.service import CoordinatorService

SLICE = 5
N = 60


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector, "FREE_SLICE", SLICE)


def test_a_reload_frees_the_view_it_read_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``loader.cluster_changes`` over a view of 60 topics (each key decoded tracked, each
    row carrying a tracked object) against a copy holding the first 40 and one gone: the
    changes are the tombstone, then the 20 new topics; the rows and keys read are freed at
    most 5 at once. Before, the keys went in one go when it returned (60), the rows too."""
    topic = [r.topic_record(f"t-{i:03d}", f"id-{i:03d}", 1) for i in range(N)]
    decode = codec.decode

    def tracked_decode(key: bytes, value: bytes) -> Record:
        record = decode(key, value)
        return Record(Tracked(record.key), record.value)

    monkeypatch.setattr(codec, "decode", tracked_decode)
    rows = [(o, *codec.encode(rec), Tracked(o)) for o, rec in enumerate(topic)]
    chunks = iter([rows])
    store = SimpleNamespace(load_snapshot=lambda _log: (N - 1, chunks))
    gone = r.topic_record("gone", "id-gone", 1)
    live: dict[Any, Any] = {Tracked(rec.key): rec.value for rec in topic[:40]}
    live[Tracked(gone.key)] = gone.value
    del rows
    with most_freed_at_once() as freed:
        end, changes = loader.cluster_changes(store, live)  # type: ignore[arg-type]
    assert end == N - 1
    assert [(c.key.value, c.value) for c in changes] == [(gone.key, None)] + [
        (rec.key, rec.value) for rec in topic[40:]
    ]
    assert freed.freed == N + 40  # the rows' objects, the keys of the 40 unchanged topics
    assert freed.most <= SLICE


async def test_a_metadata_answer_of_many_topics_is_freed_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Kafka listener's Metadata of every topic (60, built and encoded on a thread past
    two): the same frame as built on the loop; the entries and entities it built (each
    topic's tracked id) freed at most 5 at once. Before, all 60 went in one go when the
    thread's encoding returned."""
    rt = make_runtime()
    await rt.start()
    await rt.create_topics([NewTopic(name=f"t-{i:03d}", num_partitions=2) for i in range(N)])
    apis = KafkaApis(SimpleNamespace(service=CoordinatorService(rt), upstream=None, txn=None))  # type: ignore[arg-type]
    caller = Caller(node=Node(node_id=7, host="h", port=9092), api_version=12)
    every_topic = wire.build(
        wire.request_class(3, 12),
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    inline = await apis.metadata_frame(every_topic, 12, 1, caller)
    uuid_of = convert.uuid_of

    def tracked_uuid_of(topic_id: str) -> uuid.UUID | None:
        plain = uuid_of(topic_id)
        return None if plain is None else TrackedUUID(int=plain.int)

    monkeypatch.setattr(convert, "uuid_of", tracked_uuid_of)
    monkeypatch.setattr(served, "ENCODE_INLINE", 2)
    with most_freed_at_once(asyncio.get_running_loop()) as freed:
        frame = await apis.metadata_frame(every_topic, 12, 1, caller)
    assert frame == inline
    assert freed.freed == N
    assert freed.most <= SLICE
    await rt.close()


async def test_an_upstream_refresh_frees_its_answer_and_snapshot_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refresh of the topic feed from an upstream answering the 60 topics the registry has
    (each decoded topic's entity and each topic of the snapshot tracked): nothing changes;
    the answer and the snapshot are freed on the thread at most 5 at once. Before, each went
    in one go (60)."""
    rt = make_runtime()
    await rt.start()
    feed = topic_feed.TopicFeed(rt, _Upstream(_metadata_frame(N)))  # type: ignore[arg-type]
    await feed._refresh_once()  # the 60 topics created
    image = rt.registry.image()
    decode_response = wire.decode_response

    def tracked_decode(*args: Any) -> Any:
        meta = decode_response(*args)
        topics = tuple(
            dataclasses.replace(t, topic_authorized_operations=Tracked()) for t in meta.topics
        )
        return dataclasses.replace(meta, topics=topics)

    snapshot_of = topic_feed.snapshot_of

    def tracked_snapshot_of(meta: Any) -> tuple[list[NewTopic], list[str]]:
        topics, keep = snapshot_of(meta)
        return [dataclasses.replace(t, configs=(Tracked(),)) for t in topics], keep

    monkeypatch.setattr(topic_feed.wire, "decode_response", tracked_decode)
    monkeypatch.setattr(topic_feed, "snapshot_of", tracked_snapshot_of)
    with most_freed_at_once(asyncio.get_running_loop()) as freed:
        await feed._refresh_once()
    assert rt.registry.image() is image
    assert sorted(image.by_name) == [f"t-{i:03d}" for i in range(N)]
    assert freed.freed == 2 * N
    assert freed.most <= SLICE
    await rt.close()


def _metadata_frame(n: int) -> bytes:
    """A Metadata v12 answer's frame listing ``t-000``... (2 partitions each, on broker 0)."""
    partitions = [
        {"partition_index": p, "leader_id": 0, "replica_nodes": [0], "isr_nodes": [0]}
        for p in range(2)
    ]
    answer = wire.build(
        wire.response_class(3, 12),
        brokers=[{"node_id": 0, "host": "h", "port": 9092}],
        cluster_id="c",
        topics=[
            {"name": f"t-{i:03d}", "topic_id": uuid.UUID(int=i + 1), "partitions": partitions}
            for i in range(n)
        ],
    )
    return b"\0\0\0\1\0" + wire.encode_body(answer)


class _Upstream:
    """A stand-in upstream for the topic feed: its client answers every call with ``frame``."""

    def __init__(self, frame: bytes) -> None:
        self.on_topics_changed = self.on_topics_named = None

        class Client:
            async def call(self, _entity: Any, *, decode: bool = True) -> Any:
                return wire.decode_response(3, 12, frame, 5) if decode else (frame, 5)

        self.client = Client()

    def version_for(self, key: int, cap: int | None = None) -> int:
        return 12

    def update_brokers(self, meta: Any) -> None:
        pass
