"""OpenTelemetry tracing: one span per RPC, per shard command, per store batch, per assignor run.

Off by default. ``kip848 serve --otlp-endpoint URL`` (or :func:`configure` with an exporter, as
the tests do with the SDK's in-memory exporter) installs a tracer provider; until then
:data:`STATE.enabled` is False and every instrumentation point is a single attribute test that
skips all tracing work — no span objects, no context switches, no attribute dicts. A traced
request's spans are recorded on the loop (:class:`Recorded`) and built into the SDK's spans
later, in bulk (:func:`flush`: the ``kip848-spans`` thread every :data:`BUILD_INTERVAL_S`, or
as each ends when an exporter is given), with the ids drawn as they started.

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
``OTEL_TRACES_SAMPLER`` that is not parent-based is left to the SDK, whose sampler then decides
on a recorded span made for every request (:func:`rpc_span`).

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
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from random import getrandbits as _getrandbits
from random import random as _random
from typing import Any, cast

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

    __slots__ = ("_ratio", "budget", "draw", "enabled", "provider", "sync", "tracer")

    def __init__(self) -> None:
        self.enabled = False
        self.sync = False
        """Spans are built as they end (an exporter given: tests), not by the builder thread."""
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

ACTIVE: ContextVar[Any] = ContextVar("kip848_trace_active", default=False)
"""The current :class:`Recorded` span inside a recorded (sampled) RPC's, else False: only then
are command and assignor spans made (its children)."""


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
    provider = TracerProvider(
        resource=resource,
        sampler=DEFAULT_ON if ratio is not None else None,
        id_generator=cast(Any, _RecordedIds()),
    )
    STATE.sync = exporter is not None
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
    flush()  # what was recorded before goes out with the rest
    STATE.sync = False
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
#
# A traced request's spans are recorded on the loop as plain objects (:class:`Recorded`: name,
# ids, parent, times, attributes, links, the exception it ended with) and built into the SDK's
# spans later, in bulk (:func:`flush`): by a builder thread every :data:`BUILD_INTERVAL_S`
# (the endpoint's batching exporter), or as each span ends (an exporter given: tests). The ids
# are drawn when a span starts (as the SDK's RandomIdGenerator draws them) and the SDK builds
# the span with them (:class:`_RecordedIds`), so a child, a link or a log line names a span
# before it is built. A trace is rare (1% of requests, at most 10 a second by default): the
# SDK's code run once a trace went cold between two traces and cost several times what it
# costs warm, and evicted the requests' own; built in bulk it runs warm after the first.

BUILD_INTERVAL_S = 1.0
"""How often the builder thread builds the spans recorded since (they reach the exporter's
batching processor this much later at most)."""
BUILD_BATCH = 512
"""Spans recorded that wake the builder before its interval is over (the SDK's batching
processor exports this many at once by default and holds 2,048: a burst of traces, or every
request traced, reaches it in batches as it did span by span, not a second's worth at once)."""
BUILD_STEP = 128
"""Spans built before the builder leaves the exporter's thread a millisecond."""

_SAMPLED = 0x01  # TraceFlags.SAMPLED
_RANDOM = 0x02  # TraceFlags.RANDOM_TRACE_ID: the trace id's low 56 bits are random
_KINDS: dict[str, Any] = {}
_ORDER = itertools.count()


class Recorded:
    """One span as the loop records it: built into the SDK's span by :func:`flush`."""

    __slots__ = (
        "attributes",
        "end",
        "error",
        "flags",
        "kind",
        "links",
        "name",
        "parent",
        "remote",
        "span_id",
        "start",
        "status",
        "trace_id",
        "trace_state",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        attributes: dict[str, Any],
        parent: Recorded | None,
        remote: Any = None,
        links: Sequence[Recorded] = (),
        start: int | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.attributes = attributes
        self.parent = parent
        self.remote = remote  # the caller's SpanContext (a root whose caller sent one)
        self.links = links
        self.trace_id: int
        self.flags: int
        self.trace_state: Any
        if parent is not None:
            self.trace_id = parent.trace_id
            self.flags = parent.flags
            self.trace_state = parent.trace_state
        elif remote is not None:
            self.trace_id = remote.trace_id
            self.flags = _SAMPLED | (int(remote.trace_flags) & _RANDOM)
            self.trace_state = remote.trace_state
        else:
            self.trace_id = _getrandbits(128) or 1
            self.flags = _SAMPLED | _RANDOM
            self.trace_state = None
        self.span_id = _getrandbits(64) or 1
        self.start = time.time_ns() if start is None else start
        self.end = 0
        self.error: BaseException | None = None
        self.status: str | None = None  # an ERROR status's description

    def finish(
        self, error: BaseException | None = None, status: str | None = None, end: int | None = None
    ) -> None:
        """The span ends (now, or at ``end``), with ``error`` recorded (an exception event
        and an ERROR status: ``status``, else "Type: message", as the SDK's ``with`` block
        records an ``Exception``) if given; it is built with the others."""
        self.end = time.time_ns() if end is None else end
        if error is not None and (status is not None or isinstance(error, Exception)):
            self.error = error
            self.status = f"{type(error).__name__}: {error}" if status is None else status
        recorded = _RECORDED
        recorded.append(self)
        if STATE.sync:
            flush()
        elif _builder is None:
            _start_builder()
        elif not len(recorded) % BUILD_BATCH:
            _WAKE.set()

    def get_span_context(self) -> Any:
        """The span's OpenTelemetry ``SpanContext`` (as the SDK's span will have it)."""
        return _span_context(self)


class _Child:
    """A child of the current span, current while the ``with`` block runs (an exception
    leaving the block is recorded on it, as the SDK's ``with`` block records it)."""

    __slots__ = ("span", "token")

    def __init__(self, name: str, attributes: dict[str, Any] | None) -> None:
        parent = ACTIVE.get()
        self.span = Recorded(name, "INTERNAL", attributes or {}, parent or None)

    def __enter__(self) -> Recorded:
        self.token = ACTIVE.set(self.span)
        return self.span

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        ACTIVE.reset(self.token)
        self.span.finish(exc)


def rpc_span(
    service: str,
    method: str,
    *,
    system: str,
    client_id: str = "",
    client_address: str = "",
    parent: Any = None,
    request: Any = None,
) -> Recorded | None:
    """The server span of one RPC (the caller makes it current: :data:`ACTIVE`); its parent
    is the caller's context ``parent`` (:func:`extract`), else none (a root). ``request``: its
    :func:`request_attributes` are the span's from the start. None: the SDK's own sampler
    (``OTEL_TRACES_SAMPLER``, :data:`STATE.ratio` None) leaves the request out."""
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
    remote = None
    if parent is not None:
        from opentelemetry import trace

        ctx = trace.get_current_span(parent).get_span_context()
        if ctx.is_valid:
            remote = ctx
    span = Recorded(f"{service}/{method}", "SERVER", attributes, None, remote)
    if STATE.ratio is None and not _sdk_samples(span, parent):
        return None
    return span


def _sdk_samples(span: Recorded, parent: Any) -> bool:
    """The SDK's sampler's decision on a root (``OTEL_TRACES_SAMPLER``), made when it starts
    (its children are made only if it records), as the SDK makes it on its span."""
    from opentelemetry.trace import SpanKind

    provider = STATE.provider
    result = provider.sampler.should_sample(
        parent, span.trace_id, span.name, SpanKind.SERVER, span.attributes, None
    )
    if not result.decision.is_recording():
        return False
    if result.decision.is_sampled() is False:
        span.flags &= ~_SAMPLED
    span.trace_state = result.trace_state
    return True


def internal_span(name: str, attributes: dict[str, Any] | None = None) -> _Child:
    """An INTERNAL span, current while the ``with`` block runs (a child of the current span)."""
    return _Child(name, attributes)


def record_span(
    name: str,
    attributes: dict[str, Any],
    *,
    links: Sequence[Recorded] = (),
    start: int,
    end: int,
    error: BaseException | None = None,
) -> None:
    """A span not made current, from ``start`` to ``end`` (nanoseconds since the epoch): e.g.
    a store batch, written on another thread, linked to the commands it carries; ``error``: the
    write's (an exception event and an ERROR status saying ``str(error)``)."""
    span = Recorded(name, "INTERNAL", attributes, None, links=links, start=start)
    span.finish(error, None if error is None else str(error), end)


def recording() -> bool:
    """Whether the current request is traced (its RPC span records): children are made only
    then. One context-variable read."""
    return bool(ACTIVE.get())


def current_span_context() -> Any:
    """The current span (its ``trace_id`` and ``span_id``), or None outside a traced request."""
    return ACTIVE.get() or None


def current_attribute(name: str) -> Any:
    """An attribute of the current span (e.g. the group id an assignor run belongs to)."""
    return current_attributes().get(name)


# ---------------------------------------------------------------- building the SDK's spans

_RECORDED: deque[Recorded] = deque()
"""Spans ended and not built yet, in the order they ended (appended on the loop)."""
_BUILD_LOCK = threading.Lock()
_WAKE = threading.Event()
_builder: threading.Thread | None = None


class _RecordedIds:
    """The SDK's id generator (``TracerProvider(id_generator=...)``): the ids of the span being
    built (:func:`_build`), drawn when it was recorded; new random ones for any other span."""

    def __init__(self) -> None:
        self.trace_id: int | None = None
        self.span_id: int | None = None

    def generate_span_id(self) -> int:
        span_id = self.span_id
        if span_id is None:
            return _getrandbits(64) or 1
        self.span_id = None
        return span_id

    def generate_trace_id(self) -> int:
        trace_id = self.trace_id
        if trace_id is None:
            return _getrandbits(128) or 1
        self.trace_id = None
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True


def flush() -> None:
    """Build every span recorded since the last time into the SDK's spans, in the order they
    ended (handing them to the provider's span processors). Any thread; one at a time; a
    millisecond is left to the other threads (the exporter's, draining its queue) after every
    :data:`BUILD_STEP` spans."""
    with _BUILD_LOCK:
        recorded = _RECORDED
        built = 0
        while recorded:
            built += 1
            if not built % BUILD_STEP:
                time.sleep(0.001)
            span = recorded.popleft()
            if STATE.tracer is None:  # tracing was switched off meanwhile
                recorded.clear()
                return
            try:
                _build(span)
            except Exception:  # building one span never stops the others
                log.exception("Building the span %s failed", span.name)


def _span_context(span: Recorded) -> Any:
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(
        span.trace_id,
        span.span_id,
        is_remote=False,
        trace_flags=TraceFlags(span.flags),
        trace_state=span.trace_state,
    )


def _build(span: Recorded) -> None:
    from opentelemetry import context as context_api
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode

    kind = _KINDS.get(span.kind)
    if kind is None:
        kind = _KINDS[span.kind] = getattr(SpanKind, span.kind)
    parent = span.parent
    parent_ctx = _span_context(parent) if parent is not None else span.remote
    context = context_api.Context()
    if parent_ctx is not None:
        context = trace.set_span_in_context(NonRecordingSpan(parent_ctx), context)
    tracer = STATE.tracer
    ids = getattr(STATE.provider, "id_generator", None)
    if isinstance(ids, _RecordedIds):
        ids.trace_id, ids.span_id = span.trace_id, span.span_id
    try:
        built = tracer.start_span(
            span.name,
            context=context,
            kind=kind,
            attributes=span.attributes,
            links=[Link(_span_context(s)) for s in span.links] or None,
            start_time=span.start,
            record_exception=False,
            set_status_on_exception=False,
        )
    finally:
        if isinstance(ids, _RecordedIds):
            ids.trace_id = ids.span_id = None
    if span.error is not None and built.is_recording():
        built.record_exception(span.error, timestamp=span.end)
        built.set_status(Status(StatusCode.ERROR, span.status))
    built.end(end_time=span.end)


def _build_forever() -> None:
    while True:
        _WAKE.wait(BUILD_INTERVAL_S)
        _WAKE.clear()
        if _RECORDED:
            flush()


def _start_builder() -> None:
    """Build the recorded spans every :data:`BUILD_INTERVAL_S` from now on (one daemon thread
    for the process, started with the first span recorded)."""
    global _builder
    with _BUILD_LOCK:
        if _builder is None:
            _builder = threading.Thread(target=_build_forever, name="kip848-spans", daemon=True)
            _builder.start()


def _forget_builder() -> None:
    """In a forked child: the parent's builder thread is not there, its lock may be held."""
    global _builder, _BUILD_LOCK, _WAKE
    _builder = None
    _BUILD_LOCK = threading.Lock()
    _WAKE = threading.Event()
    _RECORDED.clear()


os.register_at_fork(after_in_child=_forget_builder)


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
    span = ACTIVE.get()
    return span.attributes if span else {}
