"""Requests: latency by RPC/protocol/error code, RPC spans, committed partitions, audit lines.

Observed once per request, in the **service layer** (``coordinator/server/service.py``), which
every codec calls — gRPC (the coordinator process's own connections and every call a front end
forwards) and the Kafka protocol — so nothing is counted twice and both protocols are covered
by the same code. The server defines the hook (``coordinator/server/rpc.py``: ``RpcObserver``,
``RpcHook``, ``RpcInfo``) and runs it in its one ``@rpc`` wrapper; this module implements it and
imports nothing from the server:

* :class:`RequestObserver` gives each RPC of a ``CoordinatorService`` a hook (``begin`` before
  its body, ``end`` with its answer: :func:`request_hook`). Administrative RPCs (the ``audit``
  flag of their rows) always get one (audit); the others only when metrics or tracing are on,
  so with both off a heartbeat runs the wrapper without a hook.
* What only the gRPC transport knows reaches the service layer in the ``Caller`` the gRPC codec
  builds (``coordinator/server/services.py``), with no wrapper around the codec's methods: when
  the call reached us (``Caller.received``: for a forwarded call, the front end's
  ``time.monotonic()`` — one clock for every process of the machine; else None, and the clock
  starts when the codec hands the request to the service layer) and, with tracing on, the
  caller's W3C trace context (``Caller.trace_metadata``: a look for ``traceparent`` in the
  call's metadata; the client id and address, when nothing else needs them, are read only for
  a request that is traced, ``Caller.identity()``). :data:`ARRIVAL` carries the arrival on
  to the runtime (queue time). A Kafka request starts its clock when the listener hands it to the service layer.
* The sampling decision is made once per request, in the service layer's wrapper: a caller's
  trace context is followed (:func:`_open_span` extracts it and its sampled flag decides), any
  other request is drawn at the ratio (``tracing.STATE.draw()``, the next decision of a schedule
  drawn in blocks: a request left out makes no further call, allocates nothing and touches no
  context variable for tracing).

What one request records:

* ``kip848_request_duration_seconds{rpc, protocol, route, error}``: ``rpc`` is the gRPC RPC's
  name, over the Kafka protocol the Kafka API's (``RpcInfo.kafka_name``: the same except
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

import logging
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from coordinator.core.errors import ErrorCode

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

ARRIVAL: ContextVar[list[float | None] | None] = ContextVar("kip848_request_arrival", default=None)
"""The current request's ``[arrival]``: when it reached a process of ours (``time.monotonic()``),
``[None]`` once it was answered (its context may outlive it: a command run there later has no
request's queue time); read by the runtime observer (queue time)."""

log = logging.getLogger("kip848.metrics")

# ---------------------------------------------------------------- audit

AuditLine = tuple[str, dict[str, Any], int, str | None]


def _entries(answer: Any) -> Any:
    return getattr(answer, "value", None) or ()


def audit_lines(
    method: str, req: Any, answer: Any, error_code: Callable[[Any], int]
) -> list[AuditLine]:
    """(action, details, error code, error message) per resource an administrative RPC acted
    on; [] for other RPCs (and for a validate-only request — a topic or config change that
    changes nothing —, a member's own commit). ``error_code``: the answer's code (the
    server's ``RpcInfo.error_code``)."""
    if getattr(req, "validate_only", False):
        return []
    top = int(getattr(answer, "error_code", 0) or 0)
    top_message = getattr(answer, "error_message", None)
    lines: list[AuditLine]
    fallback: list[AuditLine]
    if method == "create_topics":
        asked = {t.name: t.num_partitions for t in req.entries}
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
            for t in req.entries
        ]
    elif method == "delete_topics":
        lines = [
            ("delete_topic", {"topic": t.name}, t.error_code, t.error_message)
            for t in _entries(answer)
        ]
        fallback = [("delete_topic", {"topic": n}, top, top_message) for n in req.entries]
    elif method == "create_partitions":
        asked = dict(req.entries)
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
            for name, count in req.entries
        ]
    elif method == "incremental_alter_configs":
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
                error_code(answer),
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
                error_code(answer),
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


def connection_refusal_observer(
    metrics: CoordinatorMetrics | None,
) -> Callable[[str, str, str], None]:
    """What the listeners call with each connection closed as it was accepted, over a
    connection limit (listener, the limit's setting, the client's address): metrics on,
    ``kip848_connections_refused_total{listener, limit}`` (the listener logs it)."""

    def refused(listener: str, limit: str, _address: str) -> None:
        if metrics is not None:
            metrics.connections_refused.labels(listener, limit).inc()

    return refused


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


class RequestObserver:
    """The service layer's observer (the server's ``RpcObserver``): a hook per RPC that times
    it (metrics on), traces it when sampled (tracing on), audits it (administrative RPCs,
    always) and counts committed and deleted offsets. With metrics and tracing off only the
    administrative RPCs get a hook, so any other request runs exactly the unobserved wrapper."""

    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self.metrics = metrics

    def wants_trace_context(self) -> bool:
        return tracing.STATE.enabled

    def hook(self, rpc: Any) -> RequestHook | None:
        if self.metrics is None and not tracing.STATE.enabled and not rpc.audited:
            return None
        return request_hook(rpc, self.metrics)


@dataclass(frozen=True, slots=True)
class RequestHook:
    """``begin``/``end`` of one RPC (the server's ``RpcHook``): closures, for speed."""

    begin: Callable[[Any, Any], Any]
    end: Callable[[Any, Any, Any, Any], None]


def request_hook(rpc: Any, metrics: CoordinatorMetrics | None) -> RequestHook:
    """The observation of one RPC (``rpc``: the server's ``RpcInfo``). ``begin`` starts the
    clock and the sampled span, ``end`` stops them, records the request and writes the audit
    lines. On the way of a steady heartbeat with metrics on: two clock reads, :data:`ARRIVAL`
    set (a one-item list, emptied at the end: no reset) and one append of its latency to its
    series (``RequestSeries.ok``, answered without error); tracing on, the sampling decision
    (``STATE.draw()``: one C call) — nothing else."""
    name = rpc.method
    counts_offsets = metrics is not None and name in ("offset_commit", "offset_delete")
    after = rpc.audited or counts_offsets
    is_commit = name == "offset_commit"
    error_code = rpc.error_code
    state = tracing.STATE

    def observe_after(req: Any, caller: Any, answer: Any) -> None:
        try:
            if rpc.audited:
                protocol = "grpc" if caller.api_version is None else "kafka"
                _audit(name, req, answer, protocol, caller, error_code)
            if counts_offsets:
                _count_offsets(metrics, answer, is_commit)  # type: ignore[arg-type]
        except Exception:  # observing never fails the request it observes
            log.exception("Observing %s failed", rpc.name)

    if metrics is None:  # tracing and the audit only

        def begin_untimed(req: Any, caller: Any) -> Any:
            # The sampling decision, once per request (tracing.sampled): a caller's trace
            # context is followed (_open_span decides), anything else drawn at the ratio.
            if state.enabled and (
                caller.trace_metadata is not None or (state.draw() and state.admit())
            ):
                return _open_span(rpc, req, caller)
            return None

        def end_untimed(began: Any, req: Any, caller: Any, answer: Any) -> None:
            if began is not None:
                _close_span(began, answer, error_code)
            if after and answer is not None:
                observe_after(req, caller, answer)

        return RequestHook(begin_untimed, end_untimed)

    grpc_series = metrics.request_series(rpc.name, "grpc")
    kafka_series = metrics.request_series(rpc.kafka_name, "kafka")
    monotonic = time.monotonic
    set_arrival = ARRIVAL.set
    # [answer type, value type] of the answers that carry their code themselves, once the
    # reader has learned them (a heartbeat's Reply): read here without calling the reader.
    plain = getattr(error_code, "plain", None) or [_Never, _Never]

    def begin(req: Any, caller: Any) -> Any:
        # A forwarded call's clock started in its front end; any other request's starts here,
        # when its codec hands it to the service layer. ARRIVAL: the runtime's queue time.
        received = caller.received
        request = [monotonic() if received is None else received]
        set_arrival(request)
        if state.enabled and (
            caller.trace_metadata is not None or (state.draw() and state.admit())
        ):
            span = _open_span(rpc, req, caller)
            if span is not None:
                return request, span
        return request

    def end(began: Any, req: Any, caller: Any, answer: Any) -> None:
        if type(began) is tuple:  # traced
            began, span = began
            _close_span(span, answer, error_code)
        arrival = began[0]
        began[0] = None  # answered: a command run in its context from now on is no request's
        series = grpc_series if caller.api_version is None else kafka_series
        if answer is None:
            series.observe(ABORTED, monotonic() - arrival)
            return
        if type(answer) is plain[0] and type(answer.value) is plain[1]:
            code = answer.error_code  # what error_code(answer) reads, without the call
        else:
            code = error_code(answer)
        if code:
            series.observe(code, monotonic() - arrival)
        else:
            series.ok(monotonic() - arrival)
        if after:
            observe_after(req, caller, answer)

    return RequestHook(begin, end)


class _Never:
    """The type of no answer (``plain`` of an error-code reader that has none)."""


def _open_span(rpc: Any, req: Any, caller: Any) -> tuple[Any, Any] | None:
    """The RPC's SERVER span of a request the sampling decision did not leave out (a root
    drawn at the ratio, or one whose caller sent a trace context: followed here, its sampled
    flag decides), current while the request runs (:data:`tracing.ACTIVE`), so the shard
    command and assignor spans are its children on both listeners; None: not traced. (The
    Kafka listener runs a request that waits in a task of the very context its first step ran
    in, so the span is made current and left in one context.)"""
    parent = None
    if caller.trace_metadata is not None:
        parent = tracing.extract(caller.trace_metadata)
        if not tracing.sampled(parent):
            return None
    kafka = caller.api_version is not None
    client_id, client_address = caller.identity()
    span = tracing.rpc_span(
        "kafka" if kafka else rpc.grpc_service,
        rpc.kafka_name if kafka else rpc.name,
        system="kafka" if kafka else "grpc",
        client_id=client_id,
        client_address=client_address,
        parent=parent,
        request=req,
    )
    if span is None:  # only when the SDK's own sampler decides
        return None
    return span, tracing.ACTIVE.set(span)


def _close_span(opened: tuple[Any, Any], answer: Any, error_code: Callable[[Any], int]) -> None:
    """End the span :func:`_open_span` made current, with the answer's attributes and the
    exception the request ends with, if any (as a ``with`` block would record it)."""
    span, active = opened
    tracing.ACTIVE.reset(active)
    if answer is not None:
        attributes = tracing.response_attributes(
            getattr(answer, "value", None) or answer, span.attributes
        )
        attributes[tracing.ERROR_CODE] = error_name(error_code(answer))
    span.finish(sys.exc_info()[1])


def _audit(
    name: str, req: Any, answer: Any, protocol: str, caller: Any, error_code: Callable[[Any], int]
) -> None:
    for action, details, code, message in audit_lines(name, req, answer, error_code):
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


ForwardDone = Callable[[bool, bool], None]
TIMED_OUT = int(ErrorCode.REQUEST_TIMED_OUT)


def forwarded_timer(
    metrics: CoordinatorMetrics | None, api_name: Callable[[int], str]
) -> Callable[[int], ForwardDone] | None:
    """The Kafka listener's hook for the requests it forwards to the upstream broker (Produce,
    Fetch, ListOffsets, Metadata ...; ``api_name``: Kafka's name of an API key, the server's):
    called with the API key as a request is sent, it returns
    what the request's slot calls with (answered, timed out): once the answer is back (True,
    False), the client's connection closed first (False, False), or the upstream did not answer
    within ``kafka.upstream.request.timeout.ms`` (False, True). Each is one sample of
    ``kip848_request_duration_seconds{rpc=<Kafka API>, protocol="kafka", route="forwarded"}``
    with ``error=""`` (the answer is passed back undecoded), ``error="ABORTED"`` or
    ``error="REQUEST_TIMED_OUT"``. None (no hook) without metrics."""
    if metrics is None:
        return None
    by_key: dict[int, RequestSeries] = {}
    monotonic = time.monotonic

    def start(api_key: int) -> ForwardDone:
        series = by_key.get(api_key)
        if series is None:
            series = by_key[api_key] = metrics.request_series(api_name(api_key), "kafka", FORWARDED)
        since = monotonic()

        def done(answered: bool, timed_out: bool) -> None:
            code = NOT_DECODED if answered else TIMED_OUT if timed_out else ABORTED
            series.observe(code, monotonic() - since)

        return done

    return start
