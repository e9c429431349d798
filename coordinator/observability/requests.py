"""Requests: latency by RPC/protocol/error code, RPC spans, committed partitions, audit lines.

:func:`instrument_methods` wraps the coordinator's method table (``/pkg.Service/Method`` ->
(parser, servicer method)). That table serves the coordinator process's own connections *and*
every call a front end forwards (``--grpc-processes``), so each call is observed exactly once,
in the coordinator process. A forwarded call carries the moment its front end received it
(``context.received``, ``time.monotonic()``: the same clock in every process of the machine),
so its latency and queue time start there.

What one call records:

* ``kip848_request_duration_seconds{rpc, protocol, error}``: the error is the response's
  top-level code, else the first non-NONE code of its entries (partitions, groups, topics,
  resources), else NONE; a call ended with a transport status (shutting down) is ``ABORTED``.
* OffsetCommit: every partition of the response in ``kip848_offset_commits_total{error}``;
  OffsetDelete: the deleted partitions in ``kip848_offset_deletions_total``.
* An RPC span (tracing on), with the request's group id, member id and epochs and the
  response's epochs.
* Administrative RPCs: an audit line per resource (``logs.audit``), whatever the metrics and
  tracing settings: topic create/delete/add-partitions, group config alter, offset reset (an
  OffsetCommit without a member) and delete, group delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

from . import tracing
from .logs import audit
from .metrics import ABORTED, CoordinatorMetrics, error_name

ARRIVAL: ContextVar[float | None] = ContextVar("kip848_request_arrival", default=None)
"""When the current request reached a process of ours (``time.monotonic()``); read by the
runtime observer for the queue time of the commands the request runs."""


Handler = tuple[Callable[[bytes], Any], Callable[[Any, Any], Any]]
ErrorPaths = tuple[tuple[str, ...], ...]

_MAX_DEPTH = 3


def error_paths(descriptor: Descriptor) -> ErrorPaths:
    """Paths to every ``error_code`` field of a response type, shallowest first:
    ``("error_code",)``, ``("topics", "partitions", "error_code")`` ... (repeated message
    fields followed to depth 3)."""
    out: list[tuple[str, ...]] = []

    def walk(d: Descriptor, prefix: tuple[str, ...], depth: int) -> None:
        for f in d.fields:
            if f.name == "error_code" and f.type == FieldDescriptor.TYPE_INT32:
                out.append((*prefix, f.name))
        if depth >= _MAX_DEPTH:
            return
        for f in d.fields:
            if f.message_type is not None and _is_repeated(f):
                walk(f.message_type, (*prefix, f.name), depth + 1)

    walk(descriptor, (), 0)
    return tuple(sorted(out, key=len))


def _is_repeated(f: FieldDescriptor) -> bool:
    repeated = getattr(f, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return f.label == FieldDescriptor.LABEL_REPEATED  # type: ignore[attr-defined]


def _codes(message: Any, path: tuple[str, ...]) -> Iterator[int]:
    if len(path) == 1:
        yield getattr(message, path[0])
        return
    for item in getattr(message, path[0]):
        yield from _codes(item, path[1:])


def response_error(message: Any, paths: ErrorPaths) -> int:
    """The request's error code: top-level, else the first non-NONE entry code."""
    for path in paths:
        for code in _codes(message, path):
            if code:
                return code
    return 0


# ---------------------------------------------------------------- audit


def _configs_text(configs: Any) -> str:
    parts = []
    for c in configs:
        if c.config_operation == 1:  # DELETE
            parts.append(f"{c.name}=<default>")
        else:
            parts.append(f"{c.name}={c.value if c.HasField('value') else ''}")
    return ",".join(parts)


def _partitions_text(topics: Any, field: str) -> str:
    return ",".join(
        f"{t.name or t.topic_id.hex()}:{'/'.join(str(p) for p in _indexes(t, field))}"
        for t in topics
    )


def _indexes(topic: Any, field: str) -> list[int]:
    items = getattr(topic, field)
    return [p if isinstance(p, int) else p.partition_index for p in items]


AuditLine = tuple[str, dict[str, Any], int, str | None]


def _per_item(
    action: str, items: Any, key: str, details: Callable[[Any], dict[str, Any]]
) -> list[AuditLine]:
    return [
        (
            action,
            {key: item.name if hasattr(item, "name") else item.group_id, **details(item)},
            item.error_code,
            item.error_message if item.HasField("error_message") else None,
        )
        for item in items
    ]


def audit_lines(path: str, request: Any, response: Any) -> list[AuditLine]:
    """(action, details, error code, error message) for each resource an administrative
    request acted on; [] for other requests."""
    method = path.rpartition("/")[2]
    top = response.error_code
    top_message = response.error_message if response.HasField("error_message") else None
    if method == "CreateTopics":
        asked = {t.name: t.num_partitions for t in request.topics}
        lines = _per_item(
            "create_topic", response.topics, "topic", lambda t: {"partitions": asked.get(t.name)}
        )
        fallback = [("create_topic", {"topic": t.name}, top, top_message) for t in request.topics]
    elif method == "DeleteTopics":
        lines = _per_item("delete_topic", response.results, "topic", lambda t: {})
        fallback = [("delete_topic", {"topic": n}, top, top_message) for n in request.names]
    elif method == "CreatePartitions":
        asked = {t.name: t.count for t in request.topics}
        lines = _per_item(
            "add_partitions", response.results, "topic", lambda t: {"partitions": asked.get(t.name)}
        )
        fallback = [
            ("add_partitions", {"topic": t.name, "partitions": t.count}, top, top_message)
            for t in request.topics
        ]
    elif method == "IncrementalAlterConfigs":
        if request.validate_only:
            return []
        asked = {(r.resource_type, r.resource_name): r.configs for r in request.resources}
        lines = [
            (
                "alter_group_config",
                {
                    "group_id": r.resource_name,
                    "configs": _configs_text(asked.get((r.resource_type, r.resource_name), ())),
                },
                r.error_code,
                r.error_message if r.HasField("error_message") else None,
            )
            for r in response.responses
        ]
        fallback = [
            (
                "alter_group_config",
                {"group_id": r.resource_name, "configs": _configs_text(r.configs)},
                top,
                top_message,
            )
            for r in request.resources
        ]
    elif method == "DeleteGroups":
        lines = [
            (
                "delete_group",
                {"group_id": r.group_id},
                r.error_code,
                r.error_message if r.HasField("error_message") else None,
            )
            for r in response.results
        ]
        fallback = [("delete_group", {"group_id": g}, top, top_message) for g in request.group_ids]
    elif method == "OffsetCommit":
        epoch = (
            request.generation_id_or_member_epoch
            if request.HasField("generation_id_or_member_epoch")
            else -1
        )
        if request.member_id or epoch >= 0:
            return []  # a member's own commit, not an administrative reset
        code = response_error(response, _OFFSET_COMMIT_PATHS)
        return [
            (
                "reset_offsets",
                {
                    "group_id": request.group_id,
                    "offsets": ",".join(
                        f"{t.name or t.topic_id.hex()}:{p.partition_index}={p.committed_offset}"
                        for t in request.topics
                        for p in t.partitions
                    ),
                },
                code,
                top_message,
            )
        ]
    elif method == "OffsetDelete":
        code = response_error(response, _OFFSET_DELETE_PATHS)
        return [
            (
                "delete_offsets",
                {
                    "group_id": request.group_id,
                    "partitions": _partitions_text(request.topics, "partition_indexes"),
                },
                code,
                top_message,
            )
        ]
    else:
        return []
    return fallback if top or not lines else lines


ADMIN_METHODS = frozenset(
    {
        "CreateTopics",
        "DeleteTopics",
        "CreatePartitions",
        "IncrementalAlterConfigs",
        "DeleteGroups",
        "OffsetCommit",
        "OffsetDelete",
    }
)


def _paths_of(name: str) -> ErrorPaths:
    from kip848.v1 import offsets_pb2

    return error_paths(offsets_pb2.DESCRIPTOR.message_types_by_name[name])


_OFFSET_COMMIT_PATHS = _paths_of("OffsetCommitResponse")
_OFFSET_DELETE_PATHS = _paths_of("OffsetDeleteResponse")


# ---------------------------------------------------------------- wrapping


def instrument_methods(
    table: Mapping[str, Handler],
    services: Sequence[ServiceDescriptor],
    *,
    metrics: CoordinatorMetrics | None,
    protocol: str = "grpc",
    client_of: Callable[[Any], tuple[str, str]] | None = None,
) -> dict[str, Handler]:
    """A copy of ``table`` whose methods are observed. Administrative methods are always
    wrapped (audit); the others only when metrics or tracing are on, so that with everything
    off a heartbeat runs exactly the code it ran before.

    ``client_of(context)`` -> (client id, peer address) for audit lines and spans."""
    response_types = {
        f"/{service.full_name}/{m.name}": m.output_type
        for service in services
        for m in service.methods
    }
    out: dict[str, Handler] = {}
    who = client_of or _no_client
    for path, (parse, method) in table.items():
        name = path.rpartition("/")[2]
        if metrics is None and not tracing.STATE.enabled and name not in ADMIN_METHODS:
            out[path] = (parse, method)
            continue
        out[path] = (
            parse,
            _observed(path, method, error_paths(response_types[path]), metrics, protocol, who),
        )
    return out


def _no_client(context: Any) -> tuple[str, str]:
    return "", ""


def _observed(
    path: str,
    method: Callable[[Any, Any], Any],
    paths: ErrorPaths,
    metrics: CoordinatorMetrics | None,
    protocol: str,
    who: Callable[[Any], tuple[str, str]],
) -> Callable[[Any, Any], Any]:
    service, _, rpc = path.strip("/").rpartition("/")
    series = metrics.request_series(rpc, protocol) if metrics is not None else None
    is_admin = rpc in ADMIN_METHODS
    is_commit = rpc == "OffsetCommit"
    is_delete = rpc == "OffsetDelete"
    monotonic = time.monotonic
    state = tracing.STATE

    async def observed(request: Any, context: Any) -> Any:
        arrival = getattr(context, "received", None) or monotonic()
        token = ARRIVAL.set(arrival)
        response = None
        try:
            if state.enabled:
                client_id, address = who(context)
                with tracing.rpc_span(
                    service,
                    rpc,
                    system=protocol,
                    metadata=context.invocation_metadata(),
                    client_id=client_id,
                    client_address=address,
                ) as span:
                    tracing.set_request_attributes(span, request)
                    response = await method(request, context)
                    tracing.set_response_attributes(span, response)
                    span.set_attribute(
                        tracing.ERROR_CODE, error_name(response_error(response, paths))
                    )
            else:
                response = await method(request, context)
        finally:
            ARRIVAL.reset(token)
            if series is not None:
                code = ABORTED if response is None else response_error(response, paths)
                series.observe(code, monotonic() - arrival)
        if is_admin:
            _audit(path, request, response, protocol, who(context))
        if metrics is not None and (is_commit or is_delete):
            _count_offsets(metrics, response, is_commit)
        return response

    observed.__name__ = rpc
    observed.__qualname__ = f"observed.{rpc}"
    return observed


def _audit(path: str, request: Any, response: Any, protocol: str, client: tuple[str, str]) -> None:
    for action, details, code, message in audit_lines(path, request, response):
        audit(
            action,
            client_id=client[0],
            client_address=client[1],
            protocol=protocol,
            result=error_name(code),
            message=message,
            **details,
        )


def _count_offsets(metrics: CoordinatorMetrics, response: Any, commit: bool) -> None:
    counts: dict[int, int] = {}
    top = response.error_code
    for topic in response.topics:
        for p in topic.partitions:
            code = top or p.error_code
            counts[code] = counts.get(code, 0) + 1
    if commit:
        for code, n in counts.items():
            metrics.offset_commit_partitions(code, n)
    elif counts.get(0):
        metrics.offset_deletions.inc(counts[0])
