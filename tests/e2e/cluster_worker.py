"""Consumers of many groups in one process, committing without pause, for the tests of several
coordinator nodes (tests/e2e/test_cluster_failover.py).

    python tests/e2e/cluster_worker.py '{"kind": ..., "groups": [...], "topic": ..., ...}'

``kind``: ``kip848`` (``kip848.client.GroupMember`` over gRPC; ``target`` is a gRPC target
naming every node, ``ipv4:HOST:PORT,HOST:PORT,...``), ``librdkafka`` (confluent-kafka,
``group.protocol=consumer``: KIP-848), ``kafka-python`` or ``aiokafka`` (classic) over the Kafka listeners
(``bootstrap``: every node's). One member per group, or ``members`` (``kip848``,
``librdkafka`` and ``kafka-python``): the group's partitions are shared among them, each event names its member
(``member``: ``GROUP#i``). Each member owns the partitions of
``topic`` assigned to it (the coordinators serve no records: the partitions are paused), and commits them,
one synchronous commit after another, with offsets that only grow: ``time.monotonic_ns() //
1000`` when the commit is sent (one clock for every process of the machine).

Events on stdout, one JSON object per line, ``t`` = ``time.monotonic()``: ``started``;
``assign`` / ``revoke`` / ``lost`` (``group``, ``partitions``); ``ack`` (``group``,
``offset``, ``partitions``: every owned partition committed at ``offset``, acknowledged;
a ``kip848`` member's also ``epoch``: its member epoch then); ``sent``
(``group``, ``offset``: a commit about to be sent — it may be applied though not
acknowledged); ``commit-error`` (``group``, ``error``, ``took``: seconds since it was sent);
``request-timeout`` (``message``: kafka-python gave up waiting for the answer to a request,
``request_timeout_ms``, and closed the connection); ``closed``; ``error`` then exit 1.
``stop`` on stdin: close every member (leave the group) and exit 0.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
import traceback
from typing import Any

_out = threading.Lock()
PAUSE_S = 0.05  # between one member's commits


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"t": time.monotonic(), "event": event, **fields})
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def offset_now() -> int:
    return time.monotonic_ns() // 1000


def stop_requested() -> threading.Event:
    stop = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    return stop


# ---------------------------------------------------------------------------- kip848.client


async def run_kip848(spec: dict[str, Any], stop: threading.Event) -> None:
    from kip848.client import CommitFailedError, GroupMember

    members = []
    for group, name in member_names(spec):

        def callback(kind: str, group: str = group, name: str = name) -> Any:
            return lambda parts: emit(
                kind,
                group=group,
                member=name,
                partitions=sorted([tp.topic, tp.partition] for tp in parts),
            )

        members.append(
            GroupMember(
                spec["target"],
                group,
                topics=[spec["topic"]],
                on_assigned=callback("assign"),
                on_revoked=callback("revoke"),
                on_lost=callback("lost"),
                client_id=f"worker-{name}",
                retry_backoff_max_ms=500,
                request_timeout_ms=5_000,
                # Lookups spread over every node named: one that hangs (SIGSTOP) holds up a
                # lookup for one request timeout, not every lookup.
                channel_options=[("grpc.lb_policy_name", "round_robin")],
            )
        )
    for m in members:
        await m.start()
        logging.info("group %s: member %s", m.group_id, m.member_id)
    emit("started")

    async def commits(member: GroupMember, name: str) -> None:
        while not stop.is_set():
            owned = member.assignment
            if not owned:
                await asyncio.sleep(PAUSE_S)
                continue
            offset = offset_now()
            emit("sent", group=member.group_id, member=name, offset=offset)
            try:
                await member.commit(dict.fromkeys(owned, offset), timeout=10)
            except CommitFailedError as exc:
                emit("commit-error", group=member.group_id, member=name, error=str(exc))
            else:
                emit(
                    "ack",
                    group=member.group_id,
                    member=name,
                    offset=offset,
                    epoch=member.member_epoch,
                    partitions=sorted([tp.topic, tp.partition] for tp in owned),
                )
            await asyncio.sleep(PAUSE_S)

    names = [name for _, name in member_names(spec)]
    await asyncio.gather(*(commits(m, n) for m, n in zip(members, names, strict=True)))
    await asyncio.gather(*(m.close() for m in members))


def member_names(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(group, member name) of every member: ``spec["members"]`` per group (default 1), named
    ``GROUP#i``."""
    count = int(spec.get("members", 1))
    return [(group, f"{group}#{i}") for group in spec["groups"] for i in range(count)]


# ---------------------------------------------------------------------------- Kafka clients


def in_threads(spec: dict[str, Any], stop: threading.Event, run: Any) -> None:
    """``run(group, stop)`` (or ``run(group, stop, member)`` when ``spec`` has ``members``)
    for every member, each in a thread of its own (a synchronous commit that waits for a
    fail-over holds up its own member only)."""
    if "members" in spec:
        threads = [
            threading.Thread(target=run, args=(group, stop, name), name=name)
            for group, name in member_names(spec)
        ]
    else:
        threads = [
            threading.Thread(target=run, args=(group, stop), name=group) for group in spec["groups"]
        ]
    for t in threads:
        t.start()
    emit("started")
    for t in threads:
        t.join()


def commit_loop(
    group: str, stop: threading.Event, poll: Any, owned: Any, commit: Any, member: str = ""
) -> None:
    """Poll, and commit every owned partition at a growing offset, until ``stop``."""
    who = {"member": member} if member else {}
    next_commit = 0.0
    while not stop.is_set():
        poll()
        if time.monotonic() < next_commit:
            continue
        parts = owned()
        if not parts:
            continue
        offset = offset_now()
        emit("sent", group=group, offset=offset, **who)
        sent = time.monotonic()
        try:
            commit(parts, offset)
        except Exception as exc:  # noqa: BLE001 - every client raises its own kind
            emit("commit-error", group=group, error=repr(exc), took=time.monotonic() - sent, **who)
            next_commit = time.monotonic() + 0.2
        else:
            partitions = sorted([p.topic, p.partition] for p in parts)
            emit("ack", group=group, offset=offset, partitions=partitions, **who)
            next_commit = time.monotonic() + PAUSE_S


class PartitionErrors(Exception):
    """Some partitions of a synchronous commit failed (librdkafka raises only when all did)."""


def checked(result: Any) -> Any:
    """``result`` of confluent-kafka's synchronous commit, or :class:`PartitionErrors` naming
    each partition that failed: librdkafka gives a request's error only when every partition
    failed, and the others' errors in the list it returns."""
    failed = [f"{p.topic}[{p.partition}]: {p.error!r}" for p in result or () if p.error]
    if failed:
        raise PartitionErrors("; ".join(failed))
    return result


def run_librdkafka(spec: dict[str, Any], stop: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition

    def run(group: str, stop: threading.Event, member: str = "") -> None:
        who = {"member": member} if member else {}
        c = Consumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": group,
                "group.protocol": "consumer",
                "enable.auto.commit": False,
                "client.id": f"worker-{member or group}",
                "log_level": 0,
                "reconnect.backoff.max.ms": 500,
                "socket.timeout.ms": 5_000,  # a node that hangs (SIGSTOP) is given up on
            }
        )

        def on_assign(c: Any, parts: list[Any]) -> None:
            c.pause(parts)  # no records to fetch from a coordinator-only listener
            emit("assign", group=group, partitions=[[p.topic, p.partition] for p in parts], **who)

        def on_revoke(_c: Any, parts: list[Any]) -> None:
            emit("revoke", group=group, partitions=[[p.topic, p.partition] for p in parts], **who)

        def on_lost(_c: Any, parts: list[Any]) -> None:
            emit("lost", group=group, partitions=[[p.topic, p.partition] for p in parts], **who)

        c.subscribe([spec["topic"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        commit_loop(
            group,
            stop,
            lambda: c.poll(0.02),
            c.assignment,
            lambda parts, offset: checked(
                c.commit(
                    offsets=[TopicPartition(p.topic, p.partition, offset) for p in parts],
                    asynchronous=False,
                )
            ),
            member,
        )
        c.close()

    in_threads(spec, stop, run)


class RequestTimeouts(logging.Handler):
    """kafka-python's account of a request left unanswered for ``request_timeout_ms`` (it
    logs it and closes the connection), as ``request-timeout`` events: a node that answered
    late is told apart from one that answered retriably (either can end a synchronous commit
    with KafkaTimeoutError)."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Request timed out" in message:
            emit("request-timeout", message=message)


def run_kafka_python(spec: dict[str, Any], stop: threading.Event) -> None:
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.structs import OffsetAndMetadata

    logging.getLogger("kafka").addHandler(RequestTimeouts())

    def run(group: str, stop: threading.Event, member: str = "") -> None:
        who = {"member": member} if member else {}
        c = KafkaConsumer(
            bootstrap_servers=spec["bootstrap"].split(","),
            group_id=group,
            client_id=f"worker-{member or group}",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            reconnect_backoff_max_ms=500,
            request_timeout_ms=5_000,
        )

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                if revoked:
                    emit("revoke", group=group, partitions=sorted(map(list, revoked)), **who)

            def on_partitions_assigned(self, assigned: Any) -> None:
                for tp in assigned:  # no offsets to look up nor records to fetch from a
                    c.seek(tp, 0)  # coordinator-only listener
                c.pause(*assigned)
                emit("assign", group=group, partitions=sorted(map(list, assigned)), **who)

            def on_partitions_lost(self, lost: Any) -> None:
                emit("lost", group=group, partitions=sorted(map(list, lost)), **who)

        c.subscribe([spec["topic"]], listener=Listener())
        commit_loop(
            group,
            stop,
            lambda: c.poll(timeout_ms=20),
            c.assignment,
            lambda parts, offset: c.commit({tp: OffsetAndMetadata(offset, "", -1) for tp in parts}),
            member,
        )
        c.close()

    in_threads(spec, stop, run)


async def run_aiokafka(spec: dict[str, Any], stop: threading.Event) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    async def run(group: str) -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=spec["bootstrap"].split(","),
            group_id=group,
            client_id=f"worker-{group}",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            request_timeout_ms=5_000,
            retry_backoff_ms=100,
        )

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                if revoked:
                    emit("revoke", group=group, partitions=sorted(map(list, revoked)))

            async def on_partitions_assigned(self, assigned: Any) -> None:
                for tp in assigned:  # no offsets to look up nor records to fetch from a
                    c.seek(tp, 0)  # coordinator-only listener
                c.pause(*assigned)
                emit("assign", group=group, partitions=sorted(map(list, assigned)))

        await c.start()
        c.subscribe([spec["topic"]], listener=Listener())
        next_commit = 0.0
        while not stop.is_set():
            await c.getmany(timeout_ms=20)
            owned = c.assignment()
            if time.monotonic() < next_commit or not owned:
                continue
            offset = offset_now()
            emit("sent", group=group, offset=offset)
            try:
                await c.commit(
                    {
                        TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(offset, "")
                        for tp in owned
                    }
                )
            except Exception as exc:  # noqa: BLE001 - the client raises its own kinds
                emit("commit-error", group=group, error=repr(exc))
                next_commit = time.monotonic() + 0.2
            else:
                emit("ack", group=group, offset=offset)
                next_commit = time.monotonic() + PAUSE_S
        await c.stop()

    tasks = [asyncio.ensure_future(run(g)) for g in spec["groups"]]
    emit("started")
    await asyncio.gather(*tasks)


def main() -> int:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(  # the clients' own account, on stderr (kept with the test's files)
        level=logging.INFO, format="%(relativeCreated)d %(name)s %(message)s"
    )
    stop = stop_requested()
    try:
        if spec["kind"] == "kip848":
            asyncio.run(run_kip848(spec, stop))
        elif spec["kind"] == "librdkafka":
            run_librdkafka(spec, stop)
        elif spec["kind"] == "aiokafka":
            asyncio.run(run_aiokafka(spec, stop))
        else:
            run_kafka_python(spec, stop)
    except Exception:  # noqa: BLE001 - reported to the test, which fails
        emit("error", error=traceback.format_exc())
        return 1
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
