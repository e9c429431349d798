"""OpenTelemetry tracing: one span per RPC, per shard command, per store batch, per assignor run.

Off by default. ``kip848 serve --otlp-endpoint URL`` (or :func:`configure` with an exporter, as
the tests do with the SDK's in-memory exporter) installs a tracer provider; until then
:data:`STATE.enabled` is False and every instrumentation point is a single attribute test that
skips all tracing work — no span objects, no context switches, no attribute dicts.

Span names and attributes (OpenTelemetry semantic conventions where one applies):

* RPC (kind SERVER): ``{service}/{method}`` (``kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat``
  or ``kafka/ConsumerGroupHeartbeat``); ``rpc.system`` (``grpc`` or ``kafka``), ``rpc.service``,
  ``rpc.method``, ``client.address``, ``messaging.client.id``, and the request's group id,
  member id and epochs (below); ``kip848.error_code`` (the response's error name). The parent is
  the caller's W3C ``traceparent``/``tracestate`` (gRPC metadata), when it sends one.
* Shard command (INTERNAL): ``shard.{command}`` with ``kip848.shard``; the group id, member id
  and epochs the command carries.
* Store batch (INTERNAL): ``store.append`` with ``kip848.batch.records`` and
  ``kip848.batch.commands``, linked to the spans of the commands whose records it carries.
* Assignor run (INTERNAL): ``assignor.{name}`` with ``kip848.assignor``, ``kip848.group.size``
  and the group id of the command that ran it.

Group and member attributes: ``messaging.consumer.group.name`` (group id, as OpenTelemetry's
Kafka conventions name it), ``kip848.member.id``, ``kip848.member.epoch``,
``kip848.group.epoch``, ``kip848.assignment.epoch``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

log = logging.getLogger("kip848.tracing")

SERVICE_NAME = "kip848-coordinator"

GROUP_ID = "messaging.consumer.group.name"
MEMBER_ID = "kip848.member.id"
MEMBER_EPOCH = "kip848.member.epoch"
GROUP_EPOCH = "kip848.group.epoch"
ASSIGNMENT_EPOCH = "kip848.assignment.epoch"
SHARD = "kip848.shard"
ERROR_CODE = "kip848.error_code"
CLIENT_ID = "messaging.client.id"
CLIENT_ADDRESS = "client.address"


class _State:
    """Module state: read on the hot path as ``STATE.enabled`` (one attribute load)."""

    __slots__ = ("enabled", "provider", "ratio", "tracer")

    def __init__(self) -> None:
        self.enabled = False
        self.provider: Any = None
        self.tracer: Any = None
        self.ratio: float | None = None  # --otlp-sample-ratio (None: the SDK's sampler decides)


STATE = _State()

ACTIVE: ContextVar[bool] = ContextVar("kip848_trace_active", default=False)
"""True inside a recorded (sampled) RPC span: only then are command and assignor spans made."""
REMOTE_PARENT: ContextVar[bool] = ContextVar("kip848_trace_remote_parent", default=False)
"""True when the caller sent a W3C trace context (set by the gRPC edge)."""


def normalize_endpoint(endpoint: str) -> str:
    """``HOST:PORT`` -> ``http://HOST:PORT`` (plaintext, as a local collector listens);
    ``http://`` / ``https://`` URLs are kept."""
    if "://" in endpoint:
        return endpoint
    return f"http://{endpoint}"


def configure(
    endpoint: str | None = None,
    *,
    exporter: Any = None,
    sample_ratio: float | None = None,
    service_name: str = SERVICE_NAME,
    process: str = "coordinator",
) -> bool:
    """Install a tracer provider exporting to ``endpoint`` (OTLP over gRPC, batched) or to
    ``exporter`` (synchronously: tests). Neither: tracing stays off. Returns whether it is on.

    ``sample_ratio`` (0..1): the share of traces recorded (``ParentBased(TraceIdRatioBased)``:
    a caller's sampled ``traceparent`` is always followed). None: OpenTelemetry's default, or
    ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG``. A request not sampled creates no span
    below its (non-recording) RPC span."""
    if endpoint is None and exporter is None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create({"service.name": service_name, "kip848.process": process})
    sampler = None
    if sample_ratio is not None:
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        sampler = ParentBased(TraceIdRatioBased(sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        url = normalize_endpoint(endpoint or "")
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=url, insecure=url.startswith("http:")))
        )
    STATE.provider = provider
    STATE.tracer = provider.get_tracer("kip848.coordinator")
    STATE.ratio = sample_ratio
    # Our own provider, not the global one: an embedding application keeps its own, and tests
    # can configure and shut down repeatedly. The propagator is the global (W3C) one.
    STATE.enabled = True
    log.info("Tracing on: exporting spans to %s.", endpoint or type(exporter).__name__)
    return True


def shutdown() -> None:
    """Flush and stop exporting (at server shutdown); tracing is off afterwards."""
    provider = STATE.provider
    STATE.enabled = False
    STATE.tracer = None
    STATE.provider = None
    STATE.ratio = None
    if provider is not None:
        provider.shutdown()


# ---------------------------------------------------------------- spans (call only when enabled)


@contextmanager
def rpc_span(
    service: str,
    method: str,
    *,
    system: str,
    client_id: str = "",
    client_address: str = "",
) -> Iterator[Any]:
    """The server span of one RPC, current while the body runs; its parent is the current
    context (the gRPC edge attaches the caller's ``traceparent`` there)."""
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "rpc.system": system,
        "rpc.service": service,
        "rpc.method": method,
    }
    if client_id:
        attributes[CLIENT_ID] = client_id
    if client_address:
        attributes[CLIENT_ADDRESS] = client_address
    with STATE.tracer.start_as_current_span(
        f"{service}/{method}", kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


@contextmanager
def internal_span(name: str, attributes: dict[str, Any] | None = None) -> Iterator[Any]:
    """An INTERNAL span, current while the block runs (a child of the current span)."""
    with STATE.tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span


def start_span(name: str, attributes: dict[str, Any] | None = None, links: Any = None) -> Any:
    """A span that is not made current (the caller ends it): e.g. a store batch, written on
    another thread, linked to the commands it carries."""
    return STATE.tracer.start_span(name, attributes=attributes, links=links)


def skip_root() -> bool:
    """A request without a caller's trace context that the sample ratio leaves out: decided
    here with one random draw, so that it creates no span object at all (the SDK's
    ``TraceIdRatioBased`` would decide the same way from a random trace id, at the cost of a
    non-recording span and a context switch per request)."""
    ratio = STATE.ratio
    if ratio is None or ratio >= 1.0 or REMOTE_PARENT.get():
        return False  # a caller's context: ParentBased follows its sampled flag
    return random.random() >= ratio


def recording() -> bool:
    """Whether the current request is traced (its RPC span records): children are made only
    then. One context-variable read."""
    return ACTIVE.get()


def current_span_context() -> Any:
    """The current span's context (for links), or None when there is no recording span."""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return ctx if ctx.is_valid else None


def link(contexts: Sequence[Any]) -> list[Any]:
    from opentelemetry.trace import Link

    return [Link(c) for c in contexts]


def current_attribute(name: str) -> Any:
    """An attribute of the current span (e.g. the group id an assignor run belongs to)."""
    from opentelemetry import trace

    attributes = getattr(trace.get_current_span(), "attributes", None)
    return None if attributes is None else attributes.get(name)


def set_request_attributes(span: Any, request: Any) -> None:
    """Group id, member id and epochs of a request or command dataclass, when it has them."""
    group_id = getattr(request, "group_id", None)
    if isinstance(group_id, str):
        span.set_attribute(GROUP_ID, group_id)
    member_id = getattr(request, "member_id", None)
    if isinstance(member_id, str) and member_id:
        span.set_attribute(MEMBER_ID, member_id)
    epoch = getattr(request, "member_epoch", None)
    if epoch is None:
        epoch = getattr(request, "generation_id_or_member_epoch", None)
    if isinstance(epoch, int):
        span.set_attribute(MEMBER_EPOCH, epoch)


def set_response_attributes(span: Any, response: Any) -> None:
    """Epochs a response carries (heartbeat: the member epoch it was given)."""
    epoch = getattr(response, "member_epoch", None)
    if isinstance(epoch, int):
        span.set_attribute(MEMBER_EPOCH, epoch)
    member_id = getattr(response, "member_id", None)
    if isinstance(member_id, str) and member_id:
        span.set_attribute(MEMBER_ID, member_id)
    for attr, name in (("group_epoch", GROUP_EPOCH), ("assignment_epoch", ASSIGNMENT_EPOCH)):
        value = getattr(response, attr, None)
        if isinstance(value, int):
            span.set_attribute(name, value)
