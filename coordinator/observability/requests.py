"""Requests: latency by RPC/protocol/error code, RPC spans, committed partitions, audit lines.

Observed once per request, in the **service layer** (``coordinator/server/service.py``), which
every codec calls — gRPC (the coordinator process's own connections and every call a front end
forwards) and the Kafka protocol — so nothing is counted twice and both protocols are covered
by the same code:

* :func:`instrument_service` replaces the RPC methods of one ``CoordinatorService`` instance
  with observed ones (the class is untouched). Administrative RPCs are always wrapped (audit);
  the others only when metrics or tracing are on, so with both off a heartbeat runs exactly the
  code it ran before.
* What only the gRPC transport knows reaches the service layer in the ``Caller`` the gRPC codec
  builds (``coordinator/server/services.py``), with no wrapper around the codec's methods: when
  the call reached us (``Caller.received``: for a forwarded call, the front end's
  ``time.monotonic()`` — one clock for every process of the machine; else None, and the clock
  starts when the codec hands the request to the service layer) and, with tracing on, the
  caller's W3C trace context (``Caller.trace_metadata``: found in the same read of the call's
  metadata as the client id). :data:`ARRIVAL` carries the arrival on to the runtime (queue
  time). A Kafka request starts its clock when the listener hands it to the service layer.
* The sampling decision is made once per request, in the service layer's wrapper: a caller's
  trace context is followed (:func:`_traced` extracts it and its sampled flag decides), any
  other request is drawn at the ratio (one ``random()`` call, inlined: a request left out makes
  no further call, allocates nothing and touches no context variable for tracing).

What one request records:

* ``kip848_request_duration_seconds{rpc, protocol, route, error}``: ``rpc`` is the gRPC RPC's
  name, over the Kafka protocol the Kafka API's (:func:`kafka_rpc_names`: the same except
  ``Metadata``, served with ``list_topics``), ``protocol`` ``grpc`` or ``kafka`` (from
  ``Caller.api_version``), ``route`` ``served``, ``error`` the answer's top-level code, else the
  first non-NONE code of its entries (groups, topics, partitions, resources), else NONE;
  ``ABORTED`` for a call ended by the transport (gRPC UNAVAILABLE while shutting down).
  Requests the Kafka listener forwards to the upstream broker never reach the service layer:
  :func:`forwarded_timer` is the listener's hook for them (``route="forwarded"``).
* OffsetCommit: every partition of the answer in ``kip848_offset_commits_total{error}``;
  OffsetDelete: the deleted partitions in ``kip848_offset_deletions_total``.
* A SERVER span (tracing on) with the request's group id, member id and epoch and the answer's,
  current while the request runs on either listener (its shard command and assignor spans are
  its children).
* Administrative RPCs: one audit line per resource (``logs.audit``): topic create/delete/
  add-partitions, group config alter, offset reset (an OffsetCommit without a member) and
  delete, group delete.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from coordinator.core.errors import ErrorCode
from coordinator.server.api import Reply

from . import tracing
from .logs import audit
from .metrics import (
    ABORTED,
    FORWARDED,
    NOT_DECODED,
    CoordinatorMetrics,
    RequestSeries,
    error_name,
)

if TYPE_CHECKING:
    from coordinator.server.service import RpcBody

ARRIVAL: ContextVar[float | None] = ContextVar("kip848_request_arrival", default=None)
"""When the current request reached a process of ours (``time.monotonic()``); read by the
service layer's wrapper (latency) and the runtime observer (queue time)."""

log = logging.getLogger("kip848.metrics")

Handler = tuple[Callable[[bytes], Any], Callable[[Any, Any], Any]]

ADMIN_METHODS = frozenset(
    {
        "create_acls",
        "delete_acls",
        "alter_user_scram_credentials",
        "create_topics",
        "delete_topics",
        "create_partitions",
        "incremental_alter_configs",
        "delete_groups",
        "offset_commit",
        "offset_delete",
    }
)

_MAX_DEPTH = 6
_SEQUENCE_FIELDS: dict[type, tuple[str, ...]] = {}


def rpc_name(method: str) -> str:
    """``consumer_group_heartbeat`` -> ``ConsumerGroupHeartbeat`` (Kafka's API names)."""
    return "".join(part.capitalize() for part in method.split("_"))


def _sequence_fields(cls: type) -> tuple[str, ...]:
    """The fields of a response dataclass that hold entries (tuples, lists), cached."""
    names = _SEQUENCE_FIELDS.get(cls)
    if names is None:
        names = ()
        if dataclasses.is_dataclass(cls):
            names = tuple(
                f.name
                for f in dataclasses.fields(cls)
                if any(k in str(f.type) for k in ("tuple[", "list[", "Sequence["))
            )
        _SEQUENCE_FIELDS[cls] = names
    return names


def first_error(answer: Any, depth: int = 0) -> int:
    """The error code of an answer: its top-level code, else the first non-NONE code of its
    entries (depth-first, at most 6 levels), else 0."""
    code = getattr(answer, "error_code", None)
    if code:
        return int(code)
    if depth >= _MAX_DEPTH or answer is None:
        return 0
    if isinstance(answer, (list, tuple)):
        if len(answer) == 3 and isinstance(answer[1], ErrorCode):  # (group id, code, message)
            return int(answer[1])
        for item in answer:
            found = first_error(item, depth + 1)
            if found:
                return found
        return 0
    value = getattr(answer, "value", None)  # a Reply
    if value is not None:
        return first_error(value, depth + 1)
    for name in _sequence_fields(type(answer)):
        found = first_error(getattr(answer, name), depth + 1)
        if found:
            return found
    return 0


def plain_value(answer: Any) -> type | None:
    """The type of ``answer``'s value when the answer is a :class:`Reply` whose value holds no
    entries and no error code of its own (a heartbeat's response): the answer's code is then
    the Reply's own ``error_code``, as :func:`first_error` would find it. None otherwise."""
    if type(answer) is not Reply:
        return None
    value = answer.value
    if (
        value is None
        or isinstance(value, (list, tuple))
        or hasattr(value, "value")
        or hasattr(value, "error_code")
        or _sequence_fields(type(value))
    ):
        return None
    return type(value)


def _safe_first_error(answer: Any) -> int:
    try:
        return first_error(answer)
    except Exception:  # an answer shape we do not know: counted, never failed
        log.exception("Reading the error code of %r failed", type(answer).__name__)
        return int(ErrorCode.UNKNOWN_SERVER_ERROR)


# ---------------------------------------------------------------- audit

AuditLine = tuple[str, dict[str, Any], int, str | None]


def _entries(answer: Any) -> Any:
    return getattr(answer, "value", None) or ()


def audit_lines(method: str, req: Any, answer: Any) -> list[AuditLine]:
    """(action, details, error code, error message) per resource an administrative RPC acted
    on; [] for other RPCs (and for a validate-only config change, a member's own commit)."""
    top = int(getattr(answer, "error_code", 0) or 0)
    top_message = getattr(answer, "error_message", None)
    lines: list[AuditLine]
    fallback: list[AuditLine]
    if method == "create_topics":
        asked = {t.name: t.num_partitions for t in req}
        lines = [
            (
                "create_topic",
                {"topic": t.name, "partitions": asked.get(t.name)},
                t.error_code,
                t.error_message,
            )
            for t in _entries(answer)
        ]
        fallback = [
            ("create_topic", {"topic": t.name, "partitions": t.num_partitions}, top, top_message)
            for t in req
        ]
    elif method == "delete_topics":
        lines = [
            ("delete_topic", {"topic": t.name}, t.error_code, t.error_message)
            for t in _entries(answer)
        ]
        fallback = [("delete_topic", {"topic": n}, top, top_message) for n in req]
    elif method == "create_partitions":
        asked = dict(req)
        lines = [
            (
                "add_partitions",
                {"topic": t.name, "partitions": asked.get(t.name)},
                t.error_code,
                t.error_message,
            )
            for t in _entries(answer)
        ]
        fallback = [
            ("add_partitions", {"topic": name, "partitions": count}, top, top_message)
            for name, count in req
        ]
    elif method == "incremental_alter_configs":
        if req.validate_only:
            return []
        asked = {(r.resource_type, r.resource_name): r.configs for r in req.resources}
        lines = [
            (
                "alter_group_config",
                {
                    "group_id": r.resource_name,
                    "configs": _configs_text(asked.get((r.resource_type, r.resource_name), ())),
                },
                r.error_code,
                r.error_message,
            )
            for r in _entries(answer)
        ]
        fallback = [
            (
                "alter_group_config",
                {"group_id": r.resource_name, "configs": _configs_text(r.configs)},
                top,
                top_message,
            )
            for r in req.resources
        ]
    elif method == "delete_groups":
        lines = [("delete_group", {"group_id": g}, c, m) for g, c, m in _entries(answer)]
        fallback = [("delete_group", {"group_id": g}, top, top_message) for g in req]
    elif method == "offset_commit":
        if req.member_id or req.generation_id_or_member_epoch >= 0:
            return []  # a member's own commit, not an administrative reset
        offsets = ",".join(
            f"{t.name or t.topic_id}:{p.partition_index}={p.committed_offset}"
            for t in req.topics
            for p in t.partitions
        )
        return [
            (
                "reset_offsets",
                {"group_id": req.group_id, "offsets": offsets},
                first_error(answer),
                top_message,
            )
        ]
    elif method == "create_acls":
        lines = [
            ("create_acl", _acl_details(spec), c.error_code, c.error_message)
            for spec, c in zip(req, _entries(answer), strict=False)
        ]
        fallback = [("create_acl", _acl_details(spec), top, top_message) for spec in req]
    elif method == "delete_acls":
        lines = [
            ("delete_acl", {"acl": str(b)}, 0, None) for d in _entries(answer) for b in d.deleted
        ] + [
            ("delete_acls", _acl_details(spec), d.error_code, d.error_message)
            for spec, d in zip(req, _entries(answer), strict=False)
            if d.error_code
        ]
        fallback = [("delete_acls", _acl_details(spec), top, top_message) for spec in req]
        if not top and not lines:
            return []
    elif method == "alter_user_scram_credentials":
        changes = {d.name: f"delete {_mechanism(d.mechanism)}" for d in req.deletions}
        changes.update(
            {
                u.name: f"upsert {_mechanism(u.mechanism)} iterations={u.iterations}"
                for u in req.upsertions
            }
        )
        lines = [
            (
                "alter_user",
                {"user": u.user, "change": changes.get(u.user, "")},
                u.error_code,
                u.error_message,
            )
            for u in _entries(answer)
        ]
        fallback = [
            ("alter_user", {"user": name, "change": changes.get(name, "")}, top, top_message)
            for name in req.users()
        ]
    elif method == "offset_delete":
        group_id, topics = req
        partitions = ",".join(f"{name}:{'/'.join(str(p) for p in ps)}" for name, ps in topics)
        return [
            (
                "delete_offsets",
                {"group_id": group_id, "partitions": partitions},
                first_error(answer),
                top_message,
            )
        ]
    else:
        return []
    return fallback if top or not lines else lines


def _acl_details(spec: Any) -> dict[str, Any]:
    """An ACL or filter of a request, for its audit line (Kafka's names where they are known)."""
    from coordinator.security.acls import AclOperation, AclPermissionType, PatternType, ResourceType

    def name(kind: Any, value: int) -> str:
        try:
            return str(kind(value).name)
        except ValueError:
            return str(value)

    return {
        "resource": f"{name(ResourceType, spec.resource_type)}:"
        f"{name(PatternType, spec.pattern_type)}:{spec.resource_name or '*'}",
        "acl_principal": spec.principal or "*",
        "acl_host": spec.host or "*",
        "acl_operation": name(AclOperation, spec.operation),
        "acl_permission": name(AclPermissionType, spec.permission_type),
    }


def _mechanism(number: int) -> str:
    from coordinator.security.scram import ScramMechanism

    try:
        return ScramMechanism(number).mechanism_name
    except ValueError:
        return f"mechanism {number}"


def authentication_observer(
    metrics: CoordinatorMetrics | None,
) -> Callable[[str, str, str, str], None]:
    """What the transports call with each refused client (listener, mechanism, peer, reason):
    one audit line (``authentication_failed``) and, metrics on,
    ``kip848_authentication_failures_total{listener, mechanism}``."""

    def failed(listener: str, mechanism: str, peer: str, reason: str) -> None:
        try:
            audit(
                "authentication_failed",
                client_id="",
                client_address=peer,
                protocol=listener,
                result="SASL_AUTHENTICATION_FAILED" if listener == "kafka" else "UNAUTHENTICATED",
                message=reason,
                mechanism=mechanism,
            )
            if metrics is not None:
                metrics.authentication_failures.labels(listener, mechanism).inc()
        except Exception:  # observing never fails the connection it observes
            log.exception("Observing an authentication failure failed")

    return failed


def refusal_observer(metrics: CoordinatorMetrics | None) -> Callable[[Any], None]:
    """What the authorizer calls with each refusal (``Authorizer.on_refused``): one audit line
    (``authorization_refused``: principal, host, client, API, operation, resource) and, metrics
    on, ``kip848_authorization_refusals_total{rpc, operation, resource_type}``."""

    def refused(r: Any) -> None:
        try:
            audit(
                "authorization_refused",
                client_id=r.client_id,
                client_address=r.host,
                protocol=r.protocol,
                result=error_name(_REFUSAL_CODES.get(r.resource_type.name, 0)),
                principal=str(r.principal),
                rpc=r.api,
                operation=r.operation.name,
                resource=f"{r.resource_type.name}:{r.resource_name}",
            )
            if metrics is not None:
                metrics.authorization_refusals.labels(
                    r.api, r.operation.name, r.resource_type.name
                ).inc()
        except Exception:  # observing never fails the request it observes
            log.exception("Observing a refusal failed")

    return refused


_REFUSAL_CODES = {
    "GROUP": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
    "TOPIC": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    "CLUSTER": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    "TRANSACTIONAL_ID": int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
}


def _configs_text(configs: Any) -> str:
    return ",".join(
        f"{c.name}=<default>" if c.value is None or c.operation == 1 else f"{c.name}={c.value}"
        for c in configs
    )


# ---------------------------------------------------------------- the service layer


def kafka_api_name(api_key: int) -> str:
    """Kafka's name of an API (``Metadata``, ``Produce``, ``ConsumerGroupHeartbeat``), or
    ``Api<key>`` for a key kio does not know."""
    from coordinator.server.kafka import wire

    return rpc_name(wire.api_name(api_key))


def kafka_rpc_names() -> dict[str, str]:
    """Service method -> the Kafka API served with it over the Kafka protocol: the ``rpc`` label
    of a Kafka request is the Kafka API's name, which is the gRPC RPC's name except where no RPC
    corresponds exactly (Metadata is served with ``list_topics``, the gRPC ListTopics)."""
    from coordinator.server.kafka import apis

    names = {row.method: kafka_api_name(key) for key, row in apis.SERVED.items()}
    names["list_topics"] = kafka_api_name(apis.METADATA)  # coordinator-only mode
    return names


def instrument_service(service: Any, metrics: CoordinatorMetrics | None) -> None:
    """Observe the RPCs of one ``CoordinatorService`` instance (its ``@rpc`` methods)."""
    enabled = metrics is not None or tracing.STATE.enabled
    kafka_names = kafka_rpc_names()
    for name, fn in vars(type(service)).items():
        if not hasattr(fn, "rpc_on_error") or name.startswith("_"):
            continue  # not an @rpc method
        if not enabled and name not in ADMIN_METHODS:
            continue
        observed = _observed(name, service, fn, metrics, kafka_names.get(name))
        setattr(service, name, observed)


def _observed(
    name: str,
    service: Any,
    fn: RpcBody,
    metrics: CoordinatorMetrics | None,
    kafka_name: str | None = None,
) -> Callable[[Any, Any], Any]:
    """The ``@rpc`` method ``fn`` of ``service``, observed: timed (metrics on), traced when
    sampled (tracing on), audited and counted (``after``). It stands in for ``@rpc``'s wrapper
    (the same answers while shutting down and on errors: ``closed_answer``, ``failed_answer``)
    and awaits the body itself, so the observation adds no coroutine frame; on the way of a
    steady heartbeat it reads the clock twice, sets :data:`ARRIVAL` once and counts one
    sample, and with tracing on draws one random number — nothing else."""
    from coordinator.server.service import CLOSED_STATES, closed_answer, failed_answer

    rpc = rpc_name(name)
    kafka_rpc = kafka_name or rpc
    counts_offsets = metrics is not None and name in ("offset_commit", "offset_delete")
    after = name in ADMIN_METHODS or counts_offsets
    is_commit = name == "offset_commit"
    state = tracing.STATE
    random = tracing.draw
    runtime = service.runtime
    body = fn.__wrapped__
    on_error = fn.rpc_on_error
    wrapped = getattr(service, name)  # @rpc's wrapper, bound: what a traced request runs

    def observe_after(req: Any, caller: Any, answer: Any) -> None:
        try:
            if name in ADMIN_METHODS:
                _audit(name, req, answer, "grpc" if caller.api_version is None else "kafka", caller)
            if counts_offsets:
                _count_offsets(metrics, answer, is_commit)  # type: ignore[arg-type]
        except Exception:  # observing never fails the request it observes
            log.exception("Observing %s failed", rpc)

    timed = metrics is not None  # metrics on: every request timed, counted by its code
    grpc_series: Any = None
    kafka_series: Any = None
    if metrics is not None:
        grpc_series = metrics.request_series(rpc, "grpc")
        kafka_series = metrics.request_series(kafka_rpc, "kafka")
    # error code -> the ``observe`` of its series (RequestSeries.child's, bound once here)
    grpc_observe: dict[int, Callable[[float], None]] = {}
    kafka_observe: dict[int, Callable[[float], None]] = {}
    monotonic = time.monotonic
    set_arrival = ARRIVAL.set
    reset_arrival = ARRIVAL.reset

    plain: type | None = None  # this RPC's value type whose code is the Reply's (plain_value)

    async def observed(req: Any, caller: Any) -> Any:
        nonlocal plain
        if timed:
            # A forwarded call's clock started in its front end; any other request's starts
            # here, when its codec hands it to the service layer. ARRIVAL: the runtime's
            # queue time.
            arrival = caller.received
            if arrival is None:
                arrival = monotonic()
            token = set_arrival(arrival)
        answer = None
        try:
            # The sampling decision, once per request (tracing.sampled): a caller's trace
            # context is followed (_traced decides), anything else drawn at the ratio.
            if state.enabled and (
                caller.trace_metadata is not None
                or (ratio := state.ratio) is None
                or (random() < ratio and state.admit())
            ):
                answer = await _traced(rpc, kafka_rpc, wrapped, req, caller)
            elif runtime.state in CLOSED_STATES:
                answer = closed_answer(on_error, req, caller)
            else:
                try:
                    answer = await body(service, req, caller)
                except Exception as exc:  # noqa: BLE001 (failed_answer logs a bug)
                    answer = failed_answer(on_error, req, exc, name)
        finally:
            if timed:
                reset_arrival(token)
                # RequestSeries.observe, inlined: this runs on every request.
                seconds = monotonic() - arrival
                if answer is None:
                    code = ABORTED
                elif type(answer) is Reply and type(answer.value) is plain:
                    code = answer.error_code  # first_error's answer, without the walk
                else:
                    code = _safe_first_error(answer)
                    if plain is None:
                        plain = plain_value(answer)
                if caller.api_version is None:
                    observe = grpc_observe.get(code)
                    if observe is None:
                        observe = grpc_observe[code] = grpc_series.child(code).observe
                else:
                    observe = kafka_observe.get(code)
                    if observe is None:
                        observe = kafka_observe[code] = kafka_series.child(code).observe
                observe(seconds)
        if after:
            observe_after(req, caller, answer)
        return answer

    observed.__name__ = name
    observed.__qualname__ = f"observed.{name}"
    return observed


_GRPC_SERVICES: dict[str, str] = {}
"""gRPC method name -> its service's full name (``kip848.v1.ConsumerGroupService``), from the
paths :func:`instrument_methods` saw: the RPC span's name. Method names are unique across our
services, and each is the ``rpc_name`` of the service-layer method it calls."""


async def _traced(
    rpc: str,
    kafka_rpc: str,
    method: Callable[[Any, Any], Any],
    req: Any,
    caller: Any,
) -> Any:
    """A request the sampling decision did not leave out: a root drawn at the ratio, or one
    whose caller sent a trace context (followed here: its sampled flag decides). The RPC's
    SERVER span, current while the request runs, so the shard command and assignor spans are
    its children on both listeners. (The Kafka listener runs a request that waits in a task of
    the very context its first step ran in, so the span's context is entered and left in one
    context.)"""
    parent = None
    if caller.trace_metadata is not None:
        parent = tracing.extract(caller.trace_metadata)
        if not tracing.sampled(parent):
            return await method(req, caller)
    kafka = caller.api_version is not None
    if kafka:
        rpc = kafka_rpc
    service = "kafka" if kafka else _GRPC_SERVICES.get(rpc, "grpc")
    with tracing.rpc_span(
        service,
        rpc,
        system="kafka" if kafka else "grpc",
        client_id=caller.client_id,
        client_address=caller.client_host,
        parent=parent,
        request=req,
    ) as span:
        if not span.is_recording():  # only when the SDK's own sampler decides
            return await method(req, caller)
        token = tracing.ACTIVE.set(True)
        try:
            answer = await method(req, caller)
        finally:
            tracing.ACTIVE.reset(token)
        attributes = tracing.response_attributes(getattr(answer, "value", None) or answer)
        attributes[tracing.ERROR_CODE] = error_name(_safe_first_error(answer))
        span.set_attributes(attributes)
        return answer


def _audit(name: str, req: Any, answer: Any, protocol: str, caller: Any) -> None:
    for action, details, code, message in audit_lines(name, req, answer):
        audit(
            action,
            client_id=caller.client_id,
            client_address=caller.client_host,
            protocol=protocol,
            result=error_name(int(code)),
            message=message,
            principal=str(caller.principal),
            **details,
        )


def _count_offsets(metrics: CoordinatorMetrics, answer: Any, commit: bool) -> None:
    response = getattr(answer, "value", None)
    top = int(getattr(answer, "error_code", 0) or 0)
    counts: dict[int, int] = {}
    for topic in getattr(response, "topics", ()):
        for p in topic.partitions:
            code = top or int(p.error_code)
            counts[code] = counts.get(code, 0) + 1
    if commit:
        for code, n in counts.items():
            metrics.offset_commit_partitions(code, n)
    elif counts.get(0):
        metrics.offset_deletions.inc(counts[0])


# ---------------------------------------------------------------- forwarded Kafka requests


ForwardDone = Callable[[bool], None]


def forwarded_timer(metrics: CoordinatorMetrics | None) -> Callable[[int], ForwardDone] | None:
    """The Kafka listener's hook for the requests it forwards to the upstream broker (Produce,
    Fetch, ListOffsets, Metadata ...): called with the API key as a request is sent, it returns
    what the request's slot calls once the answer is back (True) or the client's connection
    closed first (False). Each is one sample of ``kip848_request_duration_seconds{rpc=<Kafka
    API>, protocol="kafka", route="forwarded"}`` with ``error=""`` (the answer is passed back
    undecoded) or ``error="ABORTED"``. None (no hook) without metrics."""
    if metrics is None:
        return None
    by_key: dict[int, RequestSeries] = {}
    monotonic = time.monotonic

    def start(api_key: int) -> ForwardDone:
        series = by_key.get(api_key)
        if series is None:
            series = by_key[api_key] = metrics.request_series(
                kafka_api_name(api_key), "kafka", FORWARDED
            )
        since = monotonic()

        def done(answered: bool) -> None:
            series.observe(NOT_DECODED if answered else ABORTED, monotonic() - since)

        return done

    return start


# ---------------------------------------------------------------- the gRPC codec


def instrument_methods(
    table: Mapping[str, Handler], *, metrics: CoordinatorMetrics | None
) -> dict[str, Handler]:
    """The gRPC codec's method table, as it is: what only the transport knows (a forwarded
    call's receive time, a caller's trace context) reaches the service layer in the
    :class:`~coordinator.server.api.Caller` the codec builds, so no wrapper is needed around its
    methods. Remembers each method's service for the RPC span's name."""
    del metrics  # the same table whether metrics are on or off
    for path in table:
        service, _, name = path.strip("/").rpartition("/")
        _GRPC_SERVICES[name] = service
    return dict(table)
