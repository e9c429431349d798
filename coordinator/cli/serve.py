"""``kip848 serve``: run the coordinator (Kafka config names and defaults; docs/operations.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from coordinator.cli.argtypes import INT32_MAX, INT64_MAX, int_in
from coordinator.cli.config import (
    DEFAULT_DATA_DIR,
    add_config_flags,
    core_config,
    gather_settings,
    is_server_setting,
)
from coordinator.cli.dump_replay import (
    add_accept_lost_wal,
    add_store_flag,
    open_store,
    store_location,
)
from coordinator.cli.errors import UsageError
from coordinator.cli.registry import Commands
from coordinator.cli.rpc import DEFAULT_LISTEN
from coordinator.observability.logs import LOG_FORMATS, configure_logging

if TYPE_CHECKING:
    from coordinator.core.config import GroupCoordinatorConfig

MAX_GRPC_PROCESSES = 64
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
DEFAULT_METADATA_MAX_AGE_MS = 10_000  # how often the topic registry follows the upstream
DEFAULT_TXN_CHECK_MS = 30_000  # how often open transactions are checked with the upstream
DEFAULT_UPSTREAM_REQUEST_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms
GRPC_LIMIT_FLAGS = (
    "--max-connections-per-ip",
    "--max-connections-per-ip-overrides",
    "--max-connections",
)
"""The gRPC listener's connection limits (Kafka's ``max.connections.per.ip``, its overrides,
``max.connections``), as flags like its other limits."""


def register(commands: Commands) -> None:
    p = commands.add("serve", cmd_serve, help="run the coordinator")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="bind address (port 0: any free port)",
    )
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help="where the record store lives"
    )
    add_store_flag(p)
    add_config_flags(p)
    add_accept_lost_wal(p)
    p.add_argument(
        "--clock",
        choices=("system", "manual"),
        default="system",
        help="manual: TestingService.AdvanceTime",
    )
    p.add_argument(
        "--max-message-bytes",
        type=int_in(1024, INT32_MAX),
        default=16 * 1024 * 1024,
        metavar="N",
        help="largest request or response (default 16 MiB)",
    )
    p.add_argument(
        "--max-concurrent-calls",
        type=int_in(0, INT32_MAX),
        default=10_000,
        metavar="N",
        help="calls one group runs at once in this process (the process: a tenth more, for the "
        "other groups); more are refused at once with RESOURCE_EXHAUSTED (not processed: "
        "retry); 0: no limit. Below it, bursts queue (default 10000)",
    )
    p.add_argument(
        "--max-connections-per-ip",
        default=None,
        metavar="N",
        help="gRPC connections from one IP address at once, at most; more are closed as they are "
        "accepted (Kafka's max.connections.per.ip, which the Kafka listeners take; default: no "
        "limit; 0: only the addresses of --max-connections-per-ip-overrides)",
    )
    p.add_argument(
        "--max-connections-per-ip-overrides",
        default=None,
        metavar="HOST:N,...",
        help="per-address exceptions to --max-connections-per-ip (Kafka's "
        "max.connections.per.ip.overrides; a host name: every address it resolves to at start)",
    )
    p.add_argument(
        "--max-connections",
        default=None,
        metavar="N",
        help="gRPC connections at once, at most; more are closed as they are accepted (Kafka's "
        "max.connections, which the Kafka listeners take; default: no limit)",
    )
    p.add_argument(
        "--journal-retention-ms",
        type=int_in(0, INT64_MAX),
        default=None,
        metavar="MS",
        help="journal retention (default: keep)",
    )
    p.add_argument(
        "--sync",
        choices=("full", "normal"),
        default="full",
        help="SQLite durability (full: fsync per batch)",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--grpc-processes",
        type=grpc_processes,
        default=1,
        metavar="N|auto",
        help="processes serving gRPC on the listen port (1: this one; N > 1 adds N-1 front ends "
        "that forward to it, for more cores; auto: one per usable CPU)",
    )
    p.add_argument(
        "--grpc-transport",
        choices=("h2", "grpcio"),
        default="h2",
        help="the gRPC server of this process: h2 (ours, on libnghttp2: about a tenth of the "
        "CPU per call, calls taken up as they arrive) or grpcio (grpc.aio); front ends "
        "(--grpc-processes) use grpcio",
    )
    p.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the server's event loop",
    )
    p.add_argument(
        "--node-id",
        type=int_in(0, INT32_MAX),
        default=None,
        metavar="N",
        help="with --store postgresql://...: this node's id among the nodes sharing the store "
        "(default 0; each node needs its own; docs/ha.md)",
    )
    p.add_argument(
        "--advertised-address",
        default=None,
        metavar="HOST:PORT",
        help="the address FindCoordinator answers (default: the listen address; a wildcard host "
        "becomes this machine's name)",
    )
    p.add_argument(
        "--metrics-listen",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (port 0: any free port; "
        "printed as 'metrics on HOST:PORT'); default: no metrics",
    )
    p.add_argument(
        "--metrics-deprecated-names",
        action="store_true",
        help="also export kip848_groups, _members, _offsets, _shards under their old names "
        "(kip848_group_count, ...; deprecated, removed in the next release)",
    )
    p.add_argument(
        "--otlp-endpoint",
        default=None,
        metavar="URL",
        help="export OpenTelemetry spans over OTLP/gRPC to URL (http://HOST:4317 or HOST:PORT: "
        "plaintext; https://: TLS); default: no tracing",
    )
    p.add_argument(
        "--otlp-sample-ratio",
        type=sample_ratio,
        default=None,
        metavar="R",
        help="share of requests traced, 0..1 (parent-based: a caller's traceparent is always "
        "followed); default: OTEL_TRACES_SAMPLER if set, else 0.01",
    )
    p.add_argument(
        "--otlp-max-traces-per-second",
        type=traces_per_second,
        default=None,
        metavar="N",
        help="trace at most N of the requests the ratio draws a second (a caller's sampled "
        "traceparent is always followed); 0: no limit; default: 10",
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="plain",
        help="plain lines, or json: one JSON object a line (structured fields as keys)",
    )
    p.add_argument(
        "--kafka-listen",
        default=None,
        metavar="HOST:PORT",
        help="also serve the Kafka protocol here (config: kafka.listen; docs/kafka.md)",
    )
    p.add_argument(
        "--kafka-upstream",
        default=None,
        metavar="HOST:PORT",
        help="the Kafka broker every non-group API is forwarded to (config: kafka.upstream)",
    )
    p.add_argument(
        "--kafka-advertised-address",
        default=None,
        metavar="HOST:PORT",
        help="the address the Kafka listener gives clients for itself (config: "
        "kafka.advertised.address; default: the bound address)",
    )
    p.add_argument(
        "--kafka-security-protocol",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        default=None,
        help="the --kafka-listen listener's security (Kafka's security.protocol; default "
        "PLAINTEXT). Several listeners: listeners= and listener.security.protocol.map= "
        "(docs/security.md)",
    )
    add_tls_flags(p)


def add_tls_flags(p: argparse.ArgumentParser) -> None:
    """TLS as flags (they stand for Kafka's ssl.* names, which they win over)."""
    p.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="PEM certificate chain, leaf first (may hold the key too): TLS on the gRPC "
        "listener and the metrics endpoint, and the default of SSL/SASL_SSL Kafka listeners "
        "(config: ssl.keystore.location)",
    )
    p.add_argument(
        "--tls-key",
        metavar="FILE",
        help="PEM private key, if not in --tls-cert (an encrypted one: ssl.key.password)",
    )
    p.add_argument(
        "--tls-ca",
        metavar="FILE",
        help="PEM CA certificates client certificates must chain to (config: "
        "ssl.truststore.location)",
    )
    p.add_argument(
        "--tls-client-auth",
        choices=("none", "requested", "required"),
        default=None,
        help="ask for client certificates (mutual TLS; config: ssl.client.auth; default none)",
    )


def sample_ratio(text: str) -> float:
    """``--otlp-sample-ratio``: a number in 0..1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in 0..1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in 0..1, got {text!r}")
    return value


def traces_per_second(text: str) -> float:
    """``--otlp-max-traces-per-second``: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def grpc_processes(text: str) -> int:
    """``--grpc-processes``: a number, or ``auto`` (the CPUs this process may run on)."""
    if text == "auto":
        return max(1, min(MAX_GRPC_PROCESSES, len(os.sched_getaffinity(0))))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def adopt_store_partitions(
    config: GroupCoordinatorConfig, partitions: int
) -> GroupCoordinatorConfig:
    """A store keeps the partition count it was created with (as Kafka's __consumer_offsets
    keeps its partitions whatever ``offsets.topic.num.partitions`` says later): the config
    follows the store, with a warning when they differ."""
    if partitions == config.offsets_topic_partitions:
        return config
    logging.getLogger("kip848.serve").warning(
        "offsets.topic.num.partitions is %d, but the store was created with %d coordinator "
        "partitions: using %d (a store's partition count is fixed when it is created).",
        config.offsets_topic_partitions,
        partitions,
        partitions,
    )
    return dataclasses.replace(config, offsets_topic_partitions=partitions)


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import StoreError
    from coordinator.server.app import ServeOptions, make_runtime, serve, split_listen
    from coordinator.server.loop import run as run_loop

    configure_logging(args.log_level, args.log_format)
    settings = gather_settings(args.config_file, args.set, args.server_properties)
    server_settings = {k: s.value for k, s in settings.items() if is_server_setting(k)}
    config = core_config(settings)
    kafka_listen = args.kafka_listen or server_settings.get("kafka.listen")
    kafka_upstream = args.kafka_upstream or server_settings.get("kafka.upstream")
    kafka_advertised = args.kafka_advertised_address or server_settings.get(
        "kafka.advertised.address"
    )
    try:
        max_request_bytes = int(
            server_settings.get("socket.request.max.bytes", DEFAULT_MAX_REQUEST_BYTES)
        )
        idle_ms = int(server_settings.get("connections.max.idle.ms", DEFAULT_IDLE_MS))
        max_age_ms = int(
            server_settings.get("kafka.upstream.metadata.max.age.ms", DEFAULT_METADATA_MAX_AGE_MS)
        )
        txn_check_ms = int(
            server_settings.get(
                "kafka.upstream.transaction.check.interval.ms", DEFAULT_TXN_CHECK_MS
            )
        )
        upstream_timeout_ms = int(
            server_settings.get(
                "kafka.upstream.request.timeout.ms", DEFAULT_UPSTREAM_REQUEST_TIMEOUT_MS
            )
        )
    except ValueError as exc:
        raise UsageError(
            "socket.request.max.bytes / connections.max.idle.ms / "
            "kafka.upstream.metadata.max.age.ms / kafka.upstream.transaction.check.interval.ms / "
            f"kafka.upstream.request.timeout.ms: {exc}"
        ) from None
    if upstream_timeout_ms < 1:
        raise UsageError("kafka.upstream.request.timeout.ms must be >= 1")
    if max_request_bytes < 1024 or idle_ms < 1:
        raise UsageError(
            "socket.request.max.bytes must be >= 1024 and connections.max.idle.ms >= 1"
        )
    if max_age_ms < 100:
        raise UsageError("kafka.upstream.metadata.max.age.ms must be >= 100")
    cluster = cluster_settings(args, server_settings)
    if txn_check_ms < 100:
        raise UsageError("kafka.upstream.transaction.check.interval.ms must be >= 100")
    from coordinator.security.authorizer import AuthorizerConfig
    from coordinator.server.conn_limits import ConnectionLimits
    from coordinator.server.grpc_options import GrpcOptions
    from coordinator.server.kafka.listener import KafkaFlow

    try:
        kafka_flow = KafkaFlow.from_settings(server_settings)
        kafka_limits = ConnectionLimits.from_settings(server_settings)
        grpc_limits = ConnectionLimits.from_settings(
            {
                GRPC_LIMIT_FLAGS[0]: args.max_connections_per_ip,
                GRPC_LIMIT_FLAGS[1]: args.max_connections_per_ip_overrides,
                GRPC_LIMIT_FLAGS[2]: args.max_connections,
            },
            GRPC_LIMIT_FLAGS,
        )
        authorizer = AuthorizerConfig.parse(
            server_settings.get("super.users", ""),
            server_settings.get("allow.everyone.if.no.acl.found", "true"),
        )
        grpc_options = GrpcOptions.from_settings(server_settings)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        if kafka_listen is not None:
            split_listen(kafka_listen, "--kafka-listen")
        if kafka_upstream is not None:
            _host, port = split_listen(kafka_upstream, "--kafka-upstream")
            if port == 0:
                raise ValueError("--kafka-upstream needs a real port, not 0")
        if kafka_advertised is not None:
            _host, port = split_listen(kafka_advertised, "--kafka-advertised-address")
            if port == 0:
                raise ValueError("--kafka-advertised-address needs a real port, not 0")
        split_listen(args.listen)
        if args.advertised_address is not None:
            _host, port = split_listen(args.advertised_address, "--advertised-address")
            if port == 0:
                raise ValueError("--advertised-address needs a real port, not 0")
        if args.metrics_listen is not None:
            split_listen(args.metrics_listen, "--metrics-listen")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from coordinator.server.security_config import Flags, SecurityConfigError, parse_security

    try:
        security = parse_security(
            server_settings,
            Flags(
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
                tls_ca=args.tls_ca,
                tls_client_auth=args.tls_client_auth,
                kafka_listen=kafka_listen,
                kafka_protocol=args.kafka_security_protocol,
                kafka_advertised=kafka_advertised,
                metrics=args.metrics_listen is not None,
            ),
            upstream=kafka_upstream is not None,
        )
    except SecurityConfigError as exc:
        raise UsageError(str(exc)) from None
    if kafka_upstream is not None and not security.kafka:
        raise UsageError("--kafka-upstream needs --kafka-listen (or listeners=)")
    if not 1 <= args.grpc_processes <= MAX_GRPC_PROCESSES:
        raise UsageError(
            f"--grpc-processes must be 1..{MAX_GRPC_PROCESSES}, got {args.grpc_processes}"
        )
    try:
        store = open_store(
            args,
            read_only=False,
            partitions=config.offsets_topic_partitions,
            journal_retention_ms=args.journal_retention_ms,
            sync=args.sync,
            accept_lost_wal=args.accept_lost_wal,
        )
    except StoreError as exc:
        print(
            f"kip848 serve: cannot open the store in {store_location(args)}: {exc}",
            file=sys.stderr,
        )
        return 1
    config = adopt_store_partitions(config, store.partitions)
    from coordinator.observability.observer import make_observer
    from coordinator.observability.serving import ServeObservability

    try:
        observer = make_observer(
            metrics=args.metrics_listen is not None,
            otlp_endpoint=args.otlp_endpoint,
            sample_ratio=args.otlp_sample_ratio,
            max_traces_per_second=args.otlp_max_traces_per_second,
            deprecated_metric_names=args.metrics_deprecated_names,
        )
    except Exception as exc:  # noqa: BLE001 - a bad endpoint is a usage error, not a crash
        raise UsageError(f"--otlp-endpoint {args.otlp_endpoint}: {exc}") from None
    runtime = make_runtime(config, store, args.clock, observer)
    options = ServeOptions(
        listen=args.listen,
        clock=args.clock,
        max_message_bytes=args.max_message_bytes,
        max_concurrent_calls=args.max_concurrent_calls,
        grpc_options=grpc_options,
        grpc_processes=args.grpc_processes,
        grpc_transport=args.grpc_transport,
        event_loop=args.event_loop,
        log_level=args.log_level,
        advertised=args.advertised_address,
        metrics_listen=args.metrics_listen,
        log_format=args.log_format,
        kafka_listen=kafka_listen,
        kafka_upstream=kafka_upstream,
        kafka_advertised=kafka_advertised,
        kafka_max_request_bytes=max_request_bytes,
        kafka_idle_ms=idle_ms,
        kafka_flow=kafka_flow,
        kafka_limits=kafka_limits,
        grpc_limits=grpc_limits,
        kafka_metadata_max_age_ms=max_age_ms,
        kafka_txn_check_ms=txn_check_ms,
        kafka_upstream_request_timeout_ms=upstream_timeout_ms,
        authorizer=authorizer,
        security=security,
        cluster=cluster,
    )
    # The server's observers (requests, refusals, the metrics endpoint) over the runtime's metrics.
    observers = ServeObservability(getattr(observer, "metrics", None))
    return run_loop(serve(runtime, options, observers), args.event_loop)


def cluster_settings(args: argparse.Namespace, server_settings: dict[str, str]) -> Any:
    """With ``--store postgresql://...`` the node shares the store with the other nodes
    (docs/ha.md): its id, its lease and heartbeat. None for SQLite (one node)."""
    from coordinator.cluster.node import DEFAULT_HEARTBEAT_MS, DEFAULT_LEASE_MS
    from coordinator.server.cluster import ClusterSettings

    if not getattr(args, "store", None):
        if args.node_id is not None:
            raise UsageError(
                "--node-id needs --store postgresql://... (nodes share a PostgreSQL store)"
            )
        return None
    try:
        lease_ms = int(server_settings.get("coordinator.lease.ms", DEFAULT_LEASE_MS))
        heartbeat_ms = int(
            server_settings.get("coordinator.heartbeat.interval.ms", DEFAULT_HEARTBEAT_MS)
        )
        grace = server_settings.get("coordinator.startup.grace.ms")
        grace_ms = None if grace is None else int(grace)
    except ValueError as exc:
        raise UsageError(
            "coordinator.lease.ms / coordinator.heartbeat.interval.ms / "
            f"coordinator.startup.grace.ms: {exc}"
        ) from None
    settings = ClusterSettings(
        node_id=0 if args.node_id is None else args.node_id,
        dsn=args.store,
        lease_ms=lease_ms,
        heartbeat_ms=heartbeat_ms,
        startup_grace_ms=grace_ms,
    )
    try:
        settings.config("", None).check()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return settings
