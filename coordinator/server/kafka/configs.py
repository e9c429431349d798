"""DescribeConfigs (32) and IncrementalAlterConfigs (44) in front of a broker: one request, two
owners. GROUP resources (Kafka's ConfigResource type 32) are this coordinator's; every other
resource (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS — type 16 is CLIENT_METRICS in Kafka's
numbering, so over the Kafka protocol it goes upstream) is the broker's. A request naming both
is split: the broker's resources are re-encoded into a request of the same version sent to the
upstream (on the client connection's upstream connection: the node of the port it came
through — a BROKER resource reaches the broker the client chose), ours are served, and the
answers are merged back into one response in the order of the request. A request naming only
the broker's resources is forwarded as it is.

A broker that does not offer the request's version answers nothing: each of its resources gets
UNSUPPORTED_VERSION with a message saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from coordinator.core.errors import ErrorCode

from ..api import KAFKA_GROUP_RESOURCE, Caller
from . import apis, wire
from .admin_guard import config_refusal
from .upstream.interfaces import ClientConnection, Forwarder

SPLIT = {apis.DESCRIBE_CONFIGS: "results", apis.INCREMENTAL_ALTER_CONFIGS: "responses"}
"""The APIs split here, and the name of their answer list."""


def is_ours(resource: Any) -> bool:
    return int(resource.resource_type) == KAFKA_GROUP_RESOURCE


def refusals(guard: Any, key: int, entity: Any) -> dict[int, dict[str, Any]]:
    """In front of a broker the listener authorizes for: the answers of the broker's
    resources the client may not describe (alter), by request position (``guard``: an
    ``admin_guard.Guard``)."""
    out = {}
    for i, r in enumerate(entity.resources):
        if not is_ours(r):
            answer = config_refusal(guard, r, alter=key != apis.DESCRIBE_CONFIGS)
            if answer is not None:
                out[i] = answer
    return out


def owners(entity: Any) -> tuple[bool, bool]:
    """(any resource is ours, any is the broker's)."""
    flags = [is_ours(r) for r in entity.resources]
    return any(flags), not all(flags)


async def serve_split(
    upstream: Forwarder,
    conn: ClientConnection,
    key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    caller: Caller,
    serve_ours: Callable[[Any, Caller], Awaitable[dict[str, Any]]],
    refused: Mapping[int, dict[str, Any]] | None = None,
) -> bytes:
    """The merged response frame of a request naming GROUP and broker resources; ``refused``:
    the answers of the broker's resources the client may not use (request position ->
    answer: ``admin_guard.config_refusal``), which are not forwarded."""
    refused = refused or {}
    resources = entity.resources
    theirs = [r for i, r in enumerate(resources) if not is_ours(r) and i not in refused]
    ours = [r for r in resources if is_ours(r)]
    field = SPLIT[key]
    pending = None
    if theirs and upstream.offers(key, version):
        sub = dataclasses.replace(entity, resources=tuple(theirs))
        pending = upstream.forward_future(
            conn, key, version, wire.request_frame(sub, correlation_id, client_id)
        )
    values = await serve_ours(dataclasses.replace(entity, resources=tuple(ours)), caller)
    served = iter(values[field])
    answered: list[dict[str, Any]] = []
    throttle = 0
    if pending is not None:
        frame = await pending
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        resp = wire.decode_response(key, version, frame, pos)
        answered = wire.as_values(resp)[field]
        throttle = wire.to_ms(resp.throttle_time)
    merged = []
    for i, r in enumerate(resources):
        if i in refused:
            merged.append(refused[i])
            continue
        if is_ours(r):
            merged.append(next(served))
            continue
        merged.append(_theirs(answered, r, key, version, pending is not None))
    return wire.frame(
        key,
        version,
        correlation_id,
        wire.build(wire.response_class(key, version), {field: merged, "throttle_time": throttle}),
    )


def _theirs(
    answered: list[dict[str, Any]], r: Any, key: int, version: int, asked: bool
) -> dict[str, Any]:
    """The broker's answer for resource ``r`` (matched by type and name, each used once)."""
    for i, a in enumerate(answered):
        if a["resource_type"] == r.resource_type and a["resource_name"] == r.resource_name:
            return answered.pop(i)
    if asked:
        code, message = ErrorCode.UNKNOWN_SERVER_ERROR, "The upstream broker did not answer."
    else:
        code = ErrorCode.UNSUPPORTED_VERSION
        message = f"The upstream broker does not offer {wire.api_name(key)} v{version}."
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": r.resource_type,
        "resource_name": r.resource_name,
        "configs": [],
    }
