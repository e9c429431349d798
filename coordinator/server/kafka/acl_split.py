"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) in front of a broker: one request, two
owners (docs/security.md "Set-up for each mode"). ACLs of GROUP resources are this
coordinator's (it serves the groups); every other resource type (TOPIC, CLUSTER,
TRANSACTIONAL_ID ...) is the broker's. As ``configs.py`` splits DescribeConfigs:

* CreateAcls: the creations on GROUP resources are served here, the others re-encoded into a
  request of the same version for the upstream; the results are merged back in request order.
* DeleteAcls: a filter of resource type GROUP is ours, ANY is both owners' (its matching ACLs
  are the union, its error the first), any other type the broker's.
* DescribeAcls (one filter): the same rule; with both, the resources of both answers.

A request that is only the broker's is forwarded as it is; one that is only ours is served.
A broker that does not offer the request's version answers nothing: its part gets
UNSUPPORTED_VERSION with a message saying so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.core.errors import ErrorCode
from coordinator.security.acls import CLUSTER_NAME

from ..api import Caller
from ..authorization import ALTER, CLUSTER, DESCRIBE
from . import wire
from .upstream.interfaces import ClientConnection, Forwarder

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
SPLIT = (DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS)
GROUP, ANY = 3, 1

ServeOurs = Callable[[Any, Caller], Awaitable[dict[str, Any]]]


def permitted(key: int, caller: Caller, authz: Any) -> bool:
    """Whether the client may have the broker's part of an ACL request forwarded, in front of
    a broker the listener authorizes for: Kafka's DESCRIBE (DescribeAcls) or ALTER on the
    cluster. If not, the whole request is served here, refused as the service refuses it."""
    operation = DESCRIBE if key == DESCRIBE_ACLS else ALTER
    return bool(authz.may(caller, operation, CLUSTER, CLUSTER_NAME))


def owners_of(resource_type: int) -> tuple[bool, bool]:
    """(ours, the broker's) for a resource type (of an ACL or a filter)."""
    return resource_type in (GROUP, ANY), resource_type != GROUP


def _items(key: int, entity: Any) -> list[Any]:
    if key == DESCRIBE_ACLS:
        return [entity]
    return list(entity.creations if key == CREATE_ACLS else entity.filters)


def _type_of(key: int, item: Any) -> int:
    return int(item.resource_type if key == CREATE_ACLS else item.resource_type_filter)


def owners(key: int, entity: Any) -> tuple[bool, bool]:
    """(anything is ours, anything is the broker's)."""
    flags = [owners_of(_type_of(key, i)) for i in _items(key, entity)]
    return any(o for o, _t in flags), any(t for _o, t in flags)


def _sub(key: int, entity: Any, items: list[Any]) -> Any:
    if key == DESCRIBE_ACLS:
        return entity
    field = "creations" if key == CREATE_ACLS else "filters"
    return dataclasses.replace(entity, **{field: tuple(items)})


async def serve_split(
    upstream: Forwarder,
    conn: ClientConnection,
    key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    caller: Caller,
    serve_ours: ServeOurs,
) -> bytes:
    """The merged response frame of a request with parts of both owners."""
    items = _items(key, entity)
    flags = [owners_of(_type_of(key, i)) for i in items]
    mine = [i for i, (o, _t) in zip(items, flags, strict=True) if o]
    theirs = [i for i, (_o, t) in zip(items, flags, strict=True) if t]
    pending = None
    if theirs and upstream.offers(key, version):
        pending = upstream.forward_future(
            conn,
            key,
            version,
            wire.request_frame(_sub(key, entity, theirs), correlation_id, client_id),
        )
    ours_values = await serve_ours(_sub(key, entity, mine), caller) if mine else None
    theirs_values: dict[str, Any] | None = None
    throttle = 0
    if pending is not None:
        frame = await pending
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        resp = wire.decode_response(key, version, frame, pos)
        theirs_values = wire.as_values(resp)
        throttle = wire.to_ms(resp.throttle_time)
    elif theirs:
        theirs_values = _unsupported(key, version, len(theirs))
    values = _merge(key, flags, ours_values, theirs_values)
    values["throttle_time"] = throttle
    return wire.frame(
        key, version, correlation_id, wire.build(wire.response_class(key, version), values)
    )


def _unsupported(key: int, version: int, n: int) -> dict[str, Any]:
    """The broker's part when it does not offer the version: UNSUPPORTED_VERSION."""
    error = {
        "error_code": ErrorCode.UNSUPPORTED_VERSION,
        "error_message": f"The upstream broker does not offer {wire.api_name(key)} v{version}.",
    }
    if key == DESCRIBE_ACLS:
        return {**error, "resources": []}
    if key == CREATE_ACLS:
        return {"results": [dict(error) for _ in range(n)]}
    return {"filter_results": [{**error, "matching_acls": []} for _ in range(n)]}


def _first_error(*answers: dict[str, Any] | None) -> dict[str, Any]:
    for a in answers:
        if a is not None and int(a.get("error_code") or 0):
            return {"error_code": a["error_code"], "error_message": a.get("error_message")}
    return {"error_code": 0, "error_message": None}


def _merge(
    key: int,
    flags: list[tuple[bool, bool]],
    ours: dict[str, Any] | None,
    theirs: dict[str, Any] | None,
) -> dict[str, Any]:
    if key == DESCRIBE_ACLS:
        return {
            **_first_error(ours, theirs),
            "resources": [*(ours or {}).get("resources", []), *(theirs or {}).get("resources", [])],
        }
    field = "results" if key == CREATE_ACLS else "filter_results"
    served = iter((ours or {}).get(field, []))
    answered = iter((theirs or {}).get(field, []))
    merged = []
    for mine, broker in flags:
        a = next(served) if mine else None
        b = next(answered) if broker else None
        if key == CREATE_ACLS or a is None or b is None:
            merged.append(a if a is not None else b)
            continue
        merged.append(
            {**_first_error(a, b), "matching_acls": [*a["matching_acls"], *b["matching_acls"]]}
        )
    return {field: merged}
