"""Regenerate the Kafka listener fuzz's corpus of real clients' requests
(``tests/chaos/kafka_corpus.txt``):

    cd tests/e2e && ../../.venv/bin/python kafka_corpus_capture.py

A Tansu broker with ``kip848 serve --kafka-listen ... --kafka-upstream <tansu>`` in front of it
(``kafka_support.KafkaStack``), the listener's every request frame recorded as read
(``kafka_corpus_recorder.py``), while real clients do what their users do through it:

* confluent-kafka (librdkafka): a KIP-848 consumer and a classic one (cooperative-sticky) that
  consume and commit, and the AdminClient's group, offset, config, ACL and SCRAM calls;
* kafka-python, once negotiating its versions and once pinned to each of several older broker
  versions (``api_version``), so that older request versions are sent too: a classic consumer
  that consumes and commits, and the KafkaAdminClient's group, offset, config, ACL and SCRAM
  calls;
* aiokafka: a classic consumer and the AIOKafkaAdminClient's group, offset and config calls.

Each client has a client id of its own (``corpus/<client>``). Kept: the requests of every API
and version the listener serves in coordinator-only mode (what the fuzz runs against), at most
:data:`PER_VERSION` distinct frames per client, API and version. A call that a client or the
server refuses is fine (its request was sent); every wait is bounded. The corpus lists, per
API and version, which clients sent it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: chaos.kafka_corpus, chaos.kafka_samples

from chaos import kafka_corpus, kafka_samples  # noqa: E402
from kafka_support import KafkaStack, create_topics  # noqa: E402

from coordinator.server.kafka import wire  # noqa: E402

TOPIC = "corpus"
PARTITIONS = 3
PER_VERSION = 2
CALL_TIMEOUT_S = 10.0
LINGER_S = 2.0
KAFKA_PYTHON_VERSIONS: tuple[tuple[int, ...] | None, ...] = (
    None,
    (0, 9),
    (0, 10, 0),
    (0, 10, 1),
    (0, 10, 2),
    (0, 11),
    (1, 0),
    (1, 1),
    (2, 0),
    (2, 1),
    (2, 2),
    (2, 3),
    (2, 4),
    (2, 5),
    (2, 6),
    (2, 7),
    (2, 8),
    (3, 0),
    (3, 3),
    (3, 5),
    (3, 7),
    (4, 0),
)
"""kafka-python's ``api_version`` pins (None: negotiated): each picks other request versions."""

SITECUSTOMIZE = """
import os, sys
if "serve" in sys.argv and os.environ.get("KIP848_CORPUS_RECORD"):
    import kafka_corpus_recorder
    kafka_corpus_recorder.install(os.environ["KIP848_CORPUS_RECORD"])
"""


def log(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def consume(poll: Callable[[], int], commit: Callable[[], Any]) -> None:
    """Poll until a few records came (bounded), committing after each poll that got some, and
    poll on for ``LINGER_S`` more: the client's heartbeats go out meanwhile."""
    deadline, seen, linger = time.monotonic() + 30, 0, None
    while time.monotonic() < min(deadline, linger or deadline):
        got = poll()
        if got:
            seen += got
            commit()
        if seen and linger is None:
            linger = time.monotonic() + LINGER_S


def attempt(what: str, call: Callable[[], Any]) -> None:
    """Run one client call; its failure is logged (its request was sent all the same)."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - a refused call is fine here
        log(f"  {what}: {type(exc).__name__}: {str(exc)[:160]}")


# ---------------------------------------------------------------- librdkafka


def librdkafka(bootstrap: str) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "corpus/librdkafka"})
    for i in range(30):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS)
    producer.flush(CALL_TIMEOUT_S)
    for protocol, group in (("consumer", "corpus-848"), ("classic", "corpus-classic")):
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": "corpus/librdkafka",
            "group.protocol": protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
        if protocol == "classic":
            conf["partition.assignment.strategy"] = "cooperative-sticky"
            conf["session.timeout.ms"] = 6000
            conf["heartbeat.interval.ms"] = 500
        consumer = Consumer(conf)
        consumer.subscribe([TOPIC])

        def poll(c: Any = consumer) -> int:
            msg = c.poll(0.2)
            return 1 if msg is not None and msg.error() is None else 0

        consume(poll, lambda c=consumer: c.commit(asynchronous=False))
        attempt("committed", lambda c=consumer: c.committed([TopicPartition(TOPIC, 0)], 5))
        consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "corpus/librdkafka"})

    def wait(futures: Any) -> None:
        for future in futures.values() if isinstance(futures, dict) else [futures]:
            future.result(timeout=CALL_TIMEOUT_S)

    groups = ["corpus-848", "corpus-classic"]
    group_resource = ConfigResource(ResourceType.GROUP, "corpus-848")
    binding = AclBinding(
        ResourceType.GROUP,
        "corpus-acl",
        ResourcePatternType.LITERAL,
        "User:corpus",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    partitions = [TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)]
    scram = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("list groups", lambda: wait(admin.list_consumer_groups())),
        (
            "describe groups",
            lambda: wait(
                admin.describe_consumer_groups(groups, include_authorized_operations=True)
            ),
        ),
        (
            "list offsets",
            lambda: wait(
                admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("corpus-848")])
            ),
        ),
        (
            "alter offsets",
            lambda: wait(
                admin.alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions("corpus-classic", partitions)]
                )
            ),
        ),
        ("describe configs", lambda: wait(admin.describe_configs([group_resource]))),
        (
            "alter configs",
            lambda: wait(
                admin.incremental_alter_configs(
                    [
                        ConfigResource(
                            ResourceType.GROUP,
                            "corpus-848",
                            incremental_configs=[
                                ConfigEntry(
                                    "consumer.session.timeout.ms",
                                    "50000",
                                    incremental_operation=AlterConfigOpType.SET,
                                )
                            ],
                        )
                    ]
                )
            ),
        ),
        ("create acls", lambda: wait(admin.create_acls([binding]))),
        ("describe acls", lambda: admin.describe_acls(every).result(timeout=CALL_TIMEOUT_S)),
        ("delete acls", lambda: wait(admin.delete_acls([every]))),
        (
            "alter scram",
            lambda: wait(
                admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion("corpus", scram, b"secret", b"salt")]
                )
            ),
        ),
        ("describe scram", lambda: wait(admin.describe_user_scram_credentials(["corpus"]))),
        ("delete groups", lambda: wait(admin.delete_consumer_groups(groups))),
    ]
    for what, call in calls:
        attempt(f"librdkafka {what}", call)


# ---------------------------------------------------------------- kafka-python


def kafka_python(bootstrap: str, api_version: tuple[int, ...] | None) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        AlterConfigOp,
        ConfigResource,
        ConfigResourceType,
        MemberToRemove,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.admin import ACLResourcePatternType as PatternType
    from kafka.structs import OffsetAndMetadata

    name = "negotiated" if api_version is None else ".".join(map(str, api_version))
    client_id = f"corpus/kafka-python-{name}"
    group = f"corpus-kp-{name}"
    pinned = {} if api_version is None else {"api_version": api_version}
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        consumer_timeout_ms=int(CALL_TIMEOUT_S * 1000),
        **pinned,
    )
    consume(
        lambda: sum(map(len, consumer.poll(timeout_ms=200).values())),
        lambda: consumer.commit(),
    )
    attempt("kafka-python committed", lambda: consumer.committed(TopicPartition(TOPIC, 0)))
    consumer.close()
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        request_timeout_ms=int(CALL_TIMEOUT_S * 1000),
        **pinned,
    )
    pattern = ResourcePattern(ResourceType.GROUP, "corpus-acl", PatternType.LITERAL)
    acl = ACL("User:corpus", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
    every = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY),
    )
    offsets = {TopicPartition(TOPIC, p): OffsetAndMetadata(5, "", -1) for p in range(PARTITIONS)}
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("list groups", lambda: admin.list_groups()),
        ("describe groups", lambda: admin.describe_groups([group])),
        ("list offsets", lambda: admin.list_group_offsets({group: None})),
        ("alter offsets", lambda: admin.alter_group_offsets(group, offsets)),
        (
            "delete offsets",
            lambda: admin.delete_group_offsets(group, [TopicPartition(TOPIC, 0)]),
        ),
        (
            "describe configs",
            lambda: admin.describe_configs([ConfigResource(ConfigResourceType.GROUP, group)]),
        ),
        (
            "alter configs",
            lambda: admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResourceType.GROUP,
                        group,
                        {"consumer.session.timeout.ms": (AlterConfigOp.SET, "50000")},
                    )
                ],
                raise_on_unknown=False,
                incremental=True,
            ),
        ),
        (
            "remove members",
            lambda: admin.remove_group_members(group, [MemberToRemove(member_id="gone")]),
        ),
        ("create acls", lambda: admin.create_acls([acl])),
        ("describe acls", lambda: admin.describe_acls(every)),
        ("delete acls", lambda: admin.delete_acls([every])),
        ("describe scram", lambda: admin.describe_user_scram_credentials()),
        ("delete groups", lambda: admin.delete_groups([group])),
    ]
    for what, call in calls:
        attempt(f"kafka-python {name} {what}", call)
    admin.close()


# ---------------------------------------------------------------- aiokafka


async def aiokafka_clients(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    group = "corpus-aiokafka"
    consumer = AIOKafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="corpus/aiokafka",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=int(CALL_TIMEOUT_S * 1000))
        if batch:
            await consumer.commit()
        await asyncio.sleep(LINGER_S)  # its heartbeats go out meanwhile
        await consumer.committed(TopicPartition(TOPIC, 0))
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="corpus/aiokafka")
    await admin.start()
    try:
        calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("list groups", lambda: admin.list_consumer_groups()),
            ("describe groups", lambda: admin.describe_consumer_groups([group])),
            ("list offsets", lambda: admin.list_consumer_group_offsets(group)),
            (
                "describe configs",
                lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, TOPIC)]),
            ),
            ("find coordinator", lambda: admin.find_coordinator(group)),
        ]
        for what, call in calls:
            try:
                await asyncio.wait_for(call(), CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a refused call is fine here
                log(f"  aiokafka {what}: {type(exc).__name__}: {str(exc)[:160]}")
    finally:
        await admin.close()


# ---------------------------------------------------------------- the capture


@contextmanager
def recording_stack(root: Path, record: Path) -> Iterator[KafkaStack]:
    """A KafkaStack whose server records every request frame its listener reads."""
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "KIP848_CORPUS_RECORD")}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), str(HERE), saved["PYTHONPATH"]) if p
    )
    os.environ["KIP848_CORPUS_RECORD"] = str(record)
    try:
        stack = KafkaStack(root)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield stack
    finally:
        stack.stop()


def capture() -> list[kafka_corpus.Entry]:
    with tempfile.TemporaryDirectory(prefix="kip848-corpus-") as tmp:
        root = Path(tmp)
        record = root / "frames.jsonl"
        with recording_stack(root, record) as stack:
            create_topics(stack.broker(), **{TOPIC: PARTITIONS})
            bootstrap = stack.server.kafka_address
            log("librdkafka")
            librdkafka(bootstrap)
            for api_version in KAFKA_PYTHON_VERSIONS:
                log(f"kafka-python {api_version or 'negotiated'}")
                attempt("kafka-python", lambda v=api_version: kafka_python(bootstrap, v))
            log("aiokafka")
            attempt("aiokafka", lambda: asyncio.run(aiokafka_clients(bootstrap)))
        lines = record.read_text().splitlines()
    served = set(kafka_samples.served_requests())
    kept: dict[tuple[str, int, int], list[bytes]] = {}
    for line in lines:
        client_id, key, version, data = json.loads(line)
        if not (client_id or "").startswith("corpus/") or (key, version) not in served:
            continue
        frame = bytes.fromhex(data)
        same = kept.setdefault((client_id.removeprefix("corpus/"), key, version), [])
        body = frame[8:]  # without api key, version and correlation id
        if len(same) < PER_VERSION and all(f[8:] != body for f in same):
            same.append(frame)
    return [
        kafka_corpus.Entry(client=client, key=key, version=version, frame=frame)
        for (client, key, version), frames in sorted(kept.items())
        for frame in frames
    ]


def main() -> int:
    entries = capture()
    kafka_corpus.write(entries)
    pairs = {(e.key, e.version) for e in entries}
    log(
        f"{len(entries)} frames, {len(pairs)} of "
        f"{len(set(kafka_samples.served_requests()))} served API versions, in "
        f"{kafka_corpus.CORPUS.relative_to(HERE.parent.parent)}"
    )
    for key, version in sorted(pairs):
        clients = sorted({e.client for e in entries if (e.key, e.version) == (key, version)})
        log(f"  {wire.api_name(key)} v{version}: {', '.join(clients)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
