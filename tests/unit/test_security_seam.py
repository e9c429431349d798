"""The principal seam: what the transports set is what the service layer's Caller carries."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from coordinator.security.principal import ANONYMOUS, KafkaPrincipal, user
from coordinator.server.api import Caller
from coordinator.server.forwarding import ForwardedContext
from coordinator.server.kafka.listener import KafkaConnection
from coordinator.server.services import AdminService, GrpcServicer


def test_a_caller_is_anonymous_unless_told() -> None:
    assert Caller().principal == ANONYMOUS


def test_a_kafka_connection_is_anonymous_until_it_authenticates() -> None:
    conn = KafkaConnection(listener=None)  # type: ignore[arg-type]
    assert conn.caller("c", 4).principal == ANONYMOUS
    conn.set_principal(user("alice"))
    assert conn.caller("c", 4).principal == user("alice")
    assert conn.caller("other", 3).principal == user("alice")
    conn.set_principal(user("bob"))  # re-authentication: later requests carry the new one
    assert conn.caller("c", 4).principal == user("bob")


def _principal_from_metadata(context: Any) -> KafkaPrincipal:
    for key, value in context.invocation_metadata():
        if key == "x-test-user":
            return user(value)
    return ANONYMOUS


def test_grpc_calls_are_anonymous_until_a_transport_installs_its_hook() -> None:
    servicer: GrpcServicer = object.__new__(AdminService)
    servicer.address = None
    servicer.service = SimpleNamespace(observer=None)  # type: ignore[assignment]  # unobserved
    context = ForwardedContext([("x-test-user", "carol")], "ipv4:127.0.0.1:5")
    assert servicer.caller(context, identity=False).principal == ANONYMOUS
    assert servicer.caller(context, identity=True).principal == ANONYMOUS
    servicer.principal_of = _principal_from_metadata  # type: ignore[method-assign]
    assert servicer.caller(context, identity=False).principal == user("carol")
    assert servicer.caller(context, identity=True).principal == user("carol")
