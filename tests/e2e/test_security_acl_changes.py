"""ACLs and credentials changed while clients are connected, as Kafka's authorizer and SASL
server take them: an ACL created or deleted applies to the next request of every open
connection and session (gRPC calls, a Kafka connection, a ConsumerGroupWatch stream), and to
each message of a stream; a SCRAM credential is checked when a connection authenticates, so an
authenticated connection outlives its credential's deletion (until it re-authenticates) while a
new one is refused.

The server starts with no ACL at all (``allow.everyone.if.no.acl.found``: everything is open,
the authorizer decides without looking) and each test creates the first ACLs of its resources
while its clients are already connected: the open state a session began in is not kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import test_security_matrix as matrix
from jwks import TokenIssuer
from test_security_matrix import TIMEOUT, Coordinator, metadata

from coordinator.security.principal import user
from kip848.v1 import admin_pb2, admin_pb2_grpc, consumer_group_pb2, consumer_group_pb2_grpc

TOPIC, DESCRIBE, DENY, LITERAL = 2, 8, 2, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coordinator, grpc.Channel]]:
    issuer = TokenIssuer(Path(tmp_path_factory.mktemp("jwks")))
    for name in ("admin", "pat"):
        matrix.TOKENS[name] = issuer.token(sub=name)
    coordinator = Coordinator(issuer)
    channel = grpc.insecure_channel(coordinator.grpc_address)
    try:
        yield coordinator, channel
    finally:
        channel.close()
        coordinator.stop()


def _create_topic(channel: grpc.Channel, name: str, partitions: int) -> bytes:
    made = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions)
            ]
        ),
        metadata=metadata(user("admin")),
        timeout=TIMEOUT,
    )
    assert [t.error_code for t in made.topics] == [0]
    return bytes(made.topics[0].topic_id)


def _create_acls(channel: grpc.Channel, *bindings: admin_pb2.AclBinding) -> None:
    made = admin_pb2_grpc.AdminServiceStub(channel).CreateAcls(
        admin_pb2.CreateAclsRequest(creations=list(bindings)),
        metadata=metadata(user("admin")),
        timeout=TIMEOUT,
    )
    assert [r.error_code for r in made.results] == [0] * len(bindings)


def test_a_watch_stream_opened_while_everything_was_open_hides_a_topic_denied_since(
    server: tuple[Coordinator, grpc.Channel],
) -> None:
    """pat subscribes to "veiled" and watches her member while no ACL exists: the stream names
    the topic. Then a DENY of DESCRIBE on "veiled" for pat is created (the first ACL: the
    authorizer is no longer open). Her stream's next message (the super user joins: pat's
    target shrinks) carries the topic's id and an empty name, as her heartbeats do from then on
    (docs/security.md: over gRPC a topic the caller may not DESCRIBE is never named). Before,
    the stream decided how to name topics once, when it opened, and went on naming it."""
    _coordinator, channel = server
    groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
    veiled = _create_topic(channel, "veiled", 2)

    def join(who: str) -> Any:
        return groups.ConsumerGroupHeartbeat(
            matrix._join(None, "veiled-group", "veiled"),
            metadata=metadata(user(who)),
            timeout=TIMEOUT,
        )

    pat = join("pat")
    assert (
        pat.error_code,
        [(t.topic_id, t.topic_name) for t in pat.assignment.assigned_topic_partitions],
    ) == (
        0,
        [(veiled, "veiled")],
    )
    stream = groups.ConsumerGroupWatch(
        consumer_group_pb2.ConsumerGroupWatchRequest(
            group_id="veiled-group", member_id=pat.member_id
        ),
        metadata=metadata(user("pat")),
        timeout=TIMEOUT,
    )
    try:
        events = iter(stream)
        first = next(events)
        assert [
            (t.topic_id, t.topic_name, list(t.partitions)) for t in first.target_topic_partitions
        ] == [(veiled, "veiled", [0, 1])]
        _create_acls(
            channel,
            admin_pb2.AclBinding(
                resource_type=TOPIC,
                resource_name="veiled",
                pattern_type=LITERAL,
                principal="User:pat",
                host="*",
                operation=DESCRIBE,
                permission_type=DENY,
            ),
        )
        assert join("admin").error_code == 0  # pat's target shrinks: a message
        second = next(events)
        assert (
            second.error_code,
            [
                (t.topic_id, t.topic_name, list(t.partitions))
                for t in second.target_topic_partitions
            ],
        ) == (0, [(veiled, "", [0])])
    finally:
        stream.cancel()
