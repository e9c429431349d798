"""Every RPC of the service layer as its observers see it (:class:`~.rpc.RpcInfo`): the gRPC
service and row serving it (the row's ``audit`` flag), and the Kafka API served with it.

The two codecs own these facts (``services.py``'s tables, ``kafka/apis.py``); this module puts
them together for :func:`~.rpc.observe`, so the observability package learns them without
importing either codec.
"""

from __future__ import annotations

from typing import Any

from .kafka import apis, wire
from .rpc import RpcInfo, RpcObserver, observe
from .services import (
    AdminService,
    ClassicGroupService,
    ConsumerGroupService,
    GrpcServicer,
    OffsetService,
    TestingService,
    service_descriptors,
)

SERVICERS: tuple[type[GrpcServicer], ...] = (
    ConsumerGroupService,
    AdminService,
    OffsetService,
    ClassicGroupService,
    TestingService,
)


def rpc_name(method: str) -> str:
    """``consumer_group_heartbeat`` -> ``ConsumerGroupHeartbeat`` (Kafka's API names)."""
    return "".join(part.capitalize() for part in method.split("_"))


def kafka_api_name(api_key: int) -> str:
    """Kafka's name of an API (``Metadata``, ``Produce``, ``ConsumerGroupHeartbeat``), or
    ``Api<key>`` for a key kio does not know."""
    return rpc_name(wire.api_name(api_key))


def kafka_rpc_names() -> dict[str, str]:
    """Service method -> the Kafka API served with it over the Kafka protocol: the Kafka API's
    name, which is the gRPC RPC's name except where no RPC corresponds exactly (Metadata is
    served with ``list_topics``, the gRPC ListTopics)."""
    names = {row.method: kafka_api_name(key) for key, row in apis.SERVED.items()}
    names["list_topics"] = kafka_api_name(apis.METADATA)  # coordinator-only mode
    return names


def rpc_infos() -> dict[str, RpcInfo]:
    """Every RPC with a gRPC row or a Kafka API, by its service method."""
    services = {d.name: d.full_name for d in service_descriptors()}
    kafka_names = kafka_rpc_names()
    infos = {}
    for servicer in SERVICERS:
        for name, row in servicer.ROWS.items():
            infos[row.method] = RpcInfo(
                method=row.method,
                name=name,
                kafka_name=kafka_names.get(row.method, name),
                grpc_service=services[servicer.__name__],
                audited=row.audit,
            )
    for method, kafka_name in kafka_names.items():
        if method not in infos:
            infos[method] = RpcInfo(method=method, name=rpc_name(method), kafka_name=kafka_name)
    return infos


def observe_rpcs(service: Any, observer: RpcObserver) -> None:
    """Let ``observer`` observe every RPC of one service instance (:func:`~.rpc.observe`)."""
    observe(service, observer, rpc_infos())
