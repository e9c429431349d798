"""OpenTelemetry tracing: one span per RPC, per shard command, per store batch, per assignor run.

Off by default. ``kip848 serve --otlp-endpoint URL`` (or :func:`configure` with an exporter, as
the tests do with the SDK's in-memory exporter) installs a tracer provider; until then
:data:`STATE.enabled` is False and every instrumentation point is a single attribute test that
skips all tracing work — no span objects, no context switches, no attribute dicts.

Sampling is decided once per request, before any OpenTelemetry call (:func:`sampled`): a
caller's valid ``traceparent`` is followed (parent-based: its sampled flag decides), any other
request is traced with probability ``--otlp-sample-ratio`` (default: ``OTEL_TRACES_SAMPLER`` if
set, else :data:`DEFAULT_SAMPLE_RATIO`, 1%), and at most ``--otlp-max-traces-per-second`` such
roots are traced a second (:class:`TraceBudget`, default
:data:`DEFAULT_MAX_TRACES_PER_SECOND`; a caller's sampled context is always followed). A
request left out costs one random draw (and,
over gRPC, a look for ``traceparent`` in the call's metadata; its client id and address are read
only for a traced request):
no context attach, no span object, no propagator, no context variable. Only a sampled request makes
spans, and all its spans record (the SDK's sampler is ``ParentBased(ALWAYS_ON)``); only an
``OTEL_TRACES_SAMPLER`` that is not parent-based is left to the SDK, which then makes a
(non-recording) span for every request.

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

import itertools
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from random import random as _random
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


DEFAULT_SAMPLE_RATIO = 0.01
"""The share of requests traced when neither ``--otlp-sample-ratio`` nor
``OTEL_TRACES_SAMPLER`` says otherwise (parent-based: a caller's sampled ``traceparent`` is
always followed). A recorded request costs about as much CPU again as the request itself in
the Python SDK; 1% keeps that near 1% of the coordinator's CPU at any request rate while still
giving hundreds of traces a minute at thousands of requests a second."""

# OTEL_TRACES_SAMPLER values decided here (same semantics as the SDK's samplers of these names,
# without a span object per request left out): parent-based, with this root ratio.
_PARENT_BASED = {"parentbased_always_on": 1.0, "parentbased_always_off": 0.0}
_PARENT_BASED_RATIO = "parentbased_traceidratio"


DEFAULT_MAX_TRACES_PER_SECOND = 10.0
"""Root traces a process starts a second at most (``--otlp-max-traces-per-second``; 0: no
limit) when the sampling is decided here. The ratio alone makes tracing cost a fixed share of
the CPU (1% of requests traced: about 10% of a busy server's CPU end to end with the default
gRPC server, 1.5-2% with grpc.aio); the limit
bounds it in absolute terms where that share matters, on a busy coordinator — 10 traces a
second are 600 a minute — and leaves a quiet one (under 1,000 requests a second at 1%)
sampled at the ratio alone, the way AWS X-Ray's reservoir or Jaeger's rate-limiting sampler
bound theirs."""


class TraceBudget:
    """A token bucket of root traces: ``rate`` a second on average, at most one second's worth
    (and at least one) at once. ``take`` is called only for a request the ratio drew."""

    __slots__ = ("capacity", "clock", "last", "rate", "tokens")

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.clock = clock
        self.last = clock()

    def take(self) -> bool:
        """Whether one more root trace fits (and count it)."""
        now = self.clock()
        tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return True
        self.tokens = tokens
        return False


def trace_budget(max_traces_per_second: float | None) -> TraceBudget | None:
    """The budget of ``--otlp-max-traces-per-second``: None (not given) is
    :data:`DEFAULT_MAX_TRACES_PER_SECOND`, 0 no limit (None returned)."""
    limit = (
        DEFAULT_MAX_TRACES_PER_SECOND if max_traces_per_second is None else max_traces_per_second
    )
    return TraceBudget(limit) if limit > 0 else None


ROOT_BLOCK = 4096
"""Requests whose root decisions :func:`root_schedule` draws at once."""


def root_schedule(
    ratio: float | None, draw: Callable[[], float] | None = None, block: int = ROOT_BLOCK
) -> Iterator[bool]:
    """The root sampling decisions, one per request: each True with probability ``ratio``,
    independently (None: always True, the SDK's sampler decides on a span). Drawn a block of
    ``block`` decisions at a time, lazily: the gaps between two Trues are geometric (the
    inverse transform of one ``draw()`` in [0, 1) per True), the law of one ``draw() <
    ratio`` per request, for about one draw per traced request instead of one per request.
    ``draw``: ``random.random`` unless given (tests)."""
    if ratio is None or ratio >= 1.0:
        return itertools.repeat(True)
    if ratio <= 0.0:
        return itertools.repeat(False)
    return itertools.chain.from_iterable(_root_blocks(ratio, draw or _random, block))


def _root_blocks(ratio: float, draw: Callable[[], float], size: int) -> Iterator[list[bool]]:
    log_q = math.log1p(-ratio)

    def gap() -> int:  # requests left out before the next traced one: geometric(ratio)
        return int(math.log(1.0 - draw()) / log_q)

    at = gap()
    while True:
        decisions = [False] * size
        while at < size:
            decisions[at] = True
            at += 1 + gap()
        at -= size
        yield decisions


class _State:
    """Module state: read on the hot path as ``STATE.enabled`` (one attribute load)."""

    __slots__ = ("_ratio", "budget", "draw", "enabled", "provider", "tracer")

    def __init__(self) -> None:
        self.enabled = False
        self.provider: Any = None
        self.tracer: Any = None
        self._ratio: float | None = None
        self.draw: Callable[[], bool] = root_schedule(None).__next__
        """The next root sampling decision (:func:`root_schedule` at :attr:`ratio`): one C
        call per request."""
        self.budget: TraceBudget | None = None
        """The limit on root traces a second (None: none): asked only for a request the
        ratio drew (:meth:`admit`)."""

    @property
    def ratio(self) -> float | None:
        """The root sampling ratio, decided per request by :func:`sampled` before any
        OpenTelemetry call; None: the SDK's sampler (``OTEL_TRACES_SAMPLER``) decides on a
        span made for every request. Setting it draws a new :attr:`draw` schedule."""
        return self._ratio

    @ratio.setter
    def ratio(self, ratio: float | None) -> None:
        self._ratio = ratio
        self.draw = root_schedule(ratio).__next__

    def admit(self) -> bool:
        """Whether a root the ratio drew is traced: the budget has room (always, without)."""
        budget = self.budget
        return budget is None or budget.take()


STATE = _State()

ACTIVE: ContextVar[bool] = ContextVar("kip848_trace_active", default=False)
"""True inside a recorded (sampled) RPC span: only then are command and assignor spans made."""


def normalize_endpoint(endpoint: str) -> str:
    """``HOST:PORT`` -> ``http://HOST:PORT`` (plaintext, as a local collector listens);
    ``http://`` / ``https://`` URLs are kept."""
    if "://" in endpoint:
        return endpoint
    return f"http://{endpoint}"


def sampling(
    sample_ratio: float | None, environ: Mapping[str, str] | None = None
) -> tuple[float | None, str]:
    """The root ratio decided here (None: the SDK's sampler from ``OTEL_TRACES_SAMPLER``) and a
    description for the log. ``--otlp-sample-ratio`` wins, then ``OTEL_TRACES_SAMPLER``, then
    :data:`DEFAULT_SAMPLE_RATIO`; all parent-based except an environment sampler that is not."""
    if sample_ratio is not None:
        return sample_ratio, f"parent-based, ratio {sample_ratio:g} (--otlp-sample-ratio)"
    env = os.environ if environ is None else environ
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return DEFAULT_SAMPLE_RATIO, f"parent-based, ratio {DEFAULT_SAMPLE_RATIO:g} (default)"
    ratio = _PARENT_BASED.get(name)
    if ratio is None and name == _PARENT_BASED_RATIO:
        try:
            arg = float(env.get("OTEL_TRACES_SAMPLER_ARG", ""))
        except ValueError:
            arg = -1.0  # the SDK's own handling (and warning) of a bad argument
        if 0.0 <= arg <= 1.0:
            ratio = arg
    if ratio is None:
        return None, f"OTEL_TRACES_SAMPLER={name} (the SDK's sampler)"
    return ratio, f"parent-based, ratio {ratio:g} (OTEL_TRACES_SAMPLER={name})"


def configure(
    endpoint: str | None = None,
    *,
    exporter: Any = None,
    sample_ratio: float | None = None,
    max_traces_per_second: float | None = None,
    service_name: str = SERVICE_NAME,
    process: str = "coordinator",
) -> bool:
    """Install a tracer provider exporting to ``endpoint`` (OTLP over gRPC, batched) or to
    ``exporter`` (synchronously: tests). Neither: tracing stays off. Returns whether it is on.

    ``sample_ratio`` (0..1): the share of requests without a caller's trace context that are
    traced; a caller's ``traceparent`` is always followed (parent-based). None:
    ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` when set, else
    :data:`DEFAULT_SAMPLE_RATIO` (:func:`sampling`). ``max_traces_per_second``: at most that
    many of those roots a second (:class:`TraceBudget`; None:
    :data:`DEFAULT_MAX_TRACES_PER_SECOND`, 0: no limit), when the ratio is decided here. A
    request left out creates no span and makes no OpenTelemetry call at all."""
    if endpoint is None and exporter is None:
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON

    ratio, described = sampling(sample_ratio)
    resource = Resource.create({"service.name": service_name, "kip848.process": process})
    # Decided here (ratio not None): every span started is one to record — a root we drew, or
    # a child of a sampled caller — so the SDK's sampler is ParentBased(ALWAYS_ON). Else None:
    # the SDK builds the sampler OTEL_TRACES_SAMPLER names.
    provider = TracerProvider(resource=resource, sampler=DEFAULT_ON if ratio is not None else None)
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
    STATE.ratio = ratio
    STATE.budget = trace_budget(max_traces_per_second) if ratio is not None else None
    if STATE.budget is not None:
        described += f", at most {STATE.budget.rate:g} root traces a second"
    # Our own provider, not the global one: an embedding application keeps its own, and tests
    # can configure and shut down repeatedly. The propagator is the global (W3C) one.
    STATE.enabled = True
    log.info(
        "Tracing on: exporting spans to %s; sampling %s.",
        endpoint or type(exporter).__name__,
        described,
    )
    return True


def shutdown() -> None:
    """Flush and stop exporting (at server shutdown); tracing is off afterwards."""
    provider = STATE.provider
    STATE.enabled = False
    STATE.tracer = None
    STATE.provider = None
    STATE.ratio = None
    STATE.budget = None
    if provider is not None:
        provider.shutdown()


# ---------------------------------------------------------------- the sampling decision


def sampled(parent: Any = None) -> bool:
    """Whether to trace a request whose caller sent ``parent`` (an OpenTelemetry context from
    :func:`extract`, or None), decided before any span exists: a caller's valid context is
    followed (its sampled flag), a root is drawn at the ratio. True with the SDK's own sampler
    (``STATE.ratio`` None): the span is made and the SDK decides whether it records."""
    ratio = STATE.ratio
    if ratio is None:
        return True
    if parent is not None:
        from opentelemetry import trace

        ctx = trace.get_current_span(parent).get_span_context()
        if ctx.is_valid:
            return bool(ctx.trace_flags.sampled)
    return STATE.draw() and STATE.admit()


def extract(metadata: Any) -> Any:
    """The caller's W3C trace context (``traceparent``/``tracestate``) from gRPC metadata, as
    an OpenTelemetry context (the global propagator's reading)."""
    from opentelemetry import propagate

    carrier = {k: (v if isinstance(v, str) else v.decode("latin-1")) for k, v in metadata}
    return propagate.extract(carrier)


# ---------------------------------------------------------------- spans (call only when enabled)


def rpc_span(
    service: str,
    method: str,
    *,
    system: str,
    client_id: str = "",
    client_address: str = "",
    parent: Any = None,
    request: Any = None,
) -> AbstractContextManager[Any]:
    """The server span of one RPC, current while the ``with`` block runs; its parent is the
    caller's context ``parent`` (:func:`extract`), else none (a root). ``request``: its
    :func:`request_attributes` are the span's from the start. (The SDK's own context manager:
    no layer of ours around it.)"""
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
    if request is not None:
        request_attributes(request, attributes)
    span: AbstractContextManager[Any] = STATE.tracer.start_as_current_span(
        f"{service}/{method}", context=parent, kind=SpanKind.SERVER, attributes=attributes
    )
    return span


def internal_span(
    name: str, attributes: dict[str, Any] | None = None
) -> AbstractContextManager[Any]:
    """An INTERNAL span, current while the ``with`` block runs (a child of the current span)."""
    span: AbstractContextManager[Any] = STATE.tracer.start_as_current_span(
        name, attributes=attributes
    )
    return span


def start_span(name: str, attributes: dict[str, Any] | None = None, links: Any = None) -> Any:
    """A span that is not made current (the caller ends it): e.g. a store batch, written on
    another thread, linked to the commands it carries."""
    return STATE.tracer.start_span(name, attributes=attributes, links=links)


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
    return current_attributes().get(name)


def request_attributes(request: Any, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Group id, member id and epochs of a request or command dataclass, when it has them
    (added to ``into``, which is returned)."""
    attributes = {} if into is None else into
    group_id = getattr(request, "group_id", None)
    if isinstance(group_id, str):
        attributes[GROUP_ID] = group_id
    member_id = getattr(request, "member_id", None)
    if isinstance(member_id, str) and member_id:
        attributes[MEMBER_ID] = member_id
    epoch = getattr(request, "member_epoch", None)
    if epoch is None:
        epoch = getattr(request, "generation_id_or_member_epoch", None)
    if isinstance(epoch, int):
        attributes[MEMBER_EPOCH] = epoch
    return attributes


def response_attributes(response: Any, into: dict[str, Any] | None = None) -> dict[str, Any]:
    """Epochs a response carries (heartbeat: the member epoch it was given), and the member id
    (added to ``into``, which is returned)."""
    attributes = {} if into is None else into
    epoch = getattr(response, "member_epoch", None)
    if isinstance(epoch, int):
        attributes[MEMBER_EPOCH] = epoch
    member_id = getattr(response, "member_id", None)
    if isinstance(member_id, str) and member_id:
        attributes[MEMBER_ID] = member_id
    for attr, name in (("group_epoch", GROUP_EPOCH), ("assignment_epoch", ASSIGNMENT_EPOCH)):
        value = getattr(response, attr, None)
        if isinstance(value, int):
            attributes[name] = value
    return attributes


def current_attributes() -> Mapping[str, Any]:
    """The attributes of the current span (empty without one)."""
    from opentelemetry import trace

    return getattr(trace.get_current_span(), "attributes", None) or {}


def set_request_attributes(span: Any, request: Any) -> None:
    """:func:`request_attributes` on ``span`` (one call into the SDK)."""
    attributes = request_attributes(request)
    if attributes:
        span.set_attributes(attributes)


def set_response_attributes(span: Any, response: Any) -> None:
    """:func:`response_attributes` on ``span`` (one call into the SDK)."""
    attributes = response_attributes(response)
    if attributes:
        span.set_attributes(attributes)
