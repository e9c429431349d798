"""What an operator sees: Prometheus metrics, OpenTelemetry traces, structured logs, audit.

Rules:

* **Observation never changes behaviour.** Nothing here raises into a request or a command; a
  failing scrape or exporter is logged and ignored. The core stays pure: it *returns* what
  happened (log events with its results); the runtime and the service layer report it here,
  only once the change is durable.
* **Off costs nothing.** Without ``--metrics-listen`` the runtime and the service layer hold
  ``None`` (one ``is None`` test per hook); without ``--otlp-endpoint``,
  ``tracing.STATE.enabled`` is False and no span is created. On, the hot path binds label
  children once and only observes (bench/observability.py measures the cost of metrics and
  tracing at the default sampling against a 5% budget of a heartbeat's CPU).
* **Sampling is decided once per request, before any OpenTelemetry call.** Parent-based: a
  caller's ``traceparent`` is followed, anything else traced at ``--otlp-sample-ratio`` (else
  ``OTEL_TRACES_SAMPLER``, else 1%), at most ``--otlp-max-traces-per-second`` of those a second
  (default 10). A request left out makes no span, no context switch and no
  propagator call; a traced one records every span of its tree.
* **Counted once, in the coordinator process.** Every call, whichever process accepted it
  (``--grpc-processes``: front ends forward each call to the coordinator process), goes through
  the service layer of the coordinator process exactly once; that is where requests are timed
  and counted, so nothing is counted twice and no multiprocess aggregation is needed. A front
  end stamps when it received a call, so latency and queue time start there. The coordinator
  process alone serves ``/metrics``.
* **State is read at scrape time, on the event loop** (group, member and offset counts through
  each shard's public ``census()``, shard states, load times): the scrape thread hands the read
  to the loop and waits (bounded), so it never sees a half-done command.
* **Rebalances are what the core says.** Epoch bumps (by cause), completed classic rebalances
  and rebalance durations come from the log events the core returns with a command's result,
  fed to the tracker when the runtime writes them (once durable), so metrics and log agree.
* **Both listeners alike.** A Kafka request is labelled by its Kafka API name and has the same
  span tree as a gRPC call (RPC → shard command → assignor run); requests the Kafka listener
  forwards to the upstream broker are counted and timed with ``route="forwarded"``, without
  decoding their frames.

Modules: ``metrics`` (every metric, the registry, the HTTP endpoint), ``tracing`` (provider,
OTLP exporter, span helpers), ``logs`` (plain/JSON formats, structured fields, audit trail),
``requests`` (the service layer's request metrics, spans and audit; forwarded Kafka requests),
``observer`` (binding to a running coordinator: the runtime observer, state reads, timed
assignors), ``rebalances`` (epoch bumps and rebalance durations from the core's events).
docs/operations.md lists every metric, span and log field.
"""
