"""``kip848 serve``: the gRPC server around the runtime (``h2grpc.py``, or grpc.aio with
``--grpc-transport grpcio``).

Start-up: open the store, bind ``--listen`` (port 0 picks a free port), start serving, print
``listening on HOST:PORT`` on stdout, then load the store in the background (requests meanwhile
get COORDINATOR_LOAD_IN_PROGRESS; health says NOT_SERVING until loading is done).
Shutdown on SIGTERM/SIGINT: health NOT_SERVING, stop accepting, let in-flight calls finish
(their writes become durable), flush, close the store, exit 0.

``--grpc-processes N`` (N > 1) adds N-1 front-end processes on the same port (``SO_REUSEPORT``)
that forward their calls to this process (``forwarding.py``): more cores for grpc.aio's
per-call work, one coordinator. ``listening on`` is printed once they all serve.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from grpc_health.v1 import health, health_pb2

from coordinator.cluster.node import NodeStartError
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.runtime import CoordinatorRuntime, ManualClock, RuntimeState, SystemClock
from coordinator.runtime.store import RecordStore
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.ssl_principal import SslPrincipalMapper

from .api import Node
from .catalog import kafka_api_name, observe_rpcs
from .cluster import ClusterMember, ClusterSettings
from .conn_limits import ConnectionLimits
from .fairness import CallLimit, GroupKeys, limited, process_limit
from .forwarding import Dispatcher, FrontEndPool
from .grpc_auth import GrpcAuthenticator
from .grpc_options import GrpcOptions
from .grpc_server import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    add_health_and_reflection,
    add_port,
    add_raw_handlers,
    local_handler,
    method_table,
    new_grpc_server,
)
from .h2grpc import H2GrpcServer
from .kafka.listener import (
    DEFAULT_IDLE_MS,
    DEFAULT_MAX_REQUEST_BYTES,
    KafkaFlow,
    KafkaListener,
    KafkaOptions,
)
from .kafka.sasl import Authenticator
from .kafka.security import ListenerSecurity
from .kafka.transactions import TransactionBridge
from .kafka.upstream import DEFAULT_MAX_AGE_MS as DEFAULT_METADATA_MAX_AGE_MS
from .kafka.upstream import TopicFeed, Upstream, UpstreamError, UpstreamLogOffsets
from .oauth import TokenValidator
from .observers import ServeObservers
from .security_config import Security
from .service import CoordinatorService
from .services import (
    AdminService,
    ClassicGroupService,
    ConsumerGroupService,
    OffsetService,
    TestingService,
    service_descriptors,
)
from .tls import ServerTls, TlsConfigError

log = logging.getLogger("kip848.server")

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SHUTDOWN_GRACE_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    listen: str = "127.0.0.1:9094"
    clock: str = "system"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS  # per process; 0: no limit
    grpc_options: GrpcOptions = GrpcOptions()  # grpc-core's options, for either server
    grpc_processes: int = 1
    grpc_transport: str = "h2"  # h2: ours on libnghttp2 (h2grpc.py) | grpcio: grpc.aio
    event_loop: str = "uvloop"
    log_level: str = "info"
    advertised: str | None = (
        None  # HOST:PORT answered by FindCoordinator (Kafka: advertised.listeners)
    )
    metrics_listen: str | None = None  # HOST:PORT of the Prometheus endpoint (/metrics)
    log_format: str = "plain"  # plain | json (front ends log the same way)
    kafka_listen: str | None = None  # HOST:PORT of the Kafka-protocol listener (none: off)
    kafka_upstream: str | None = None  # HOST:PORT of the broker everything else goes to
    kafka_advertised: str | None = None  # HOST:PORT the Kafka listener answers as itself
    kafka_max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    kafka_idle_ms: int = DEFAULT_IDLE_MS
    kafka_flow: KafkaFlow = KafkaFlow()  # per-connection limits of the Kafka listener
    kafka_limits: ConnectionLimits = ConnectionLimits()  # max.connections(.per.ip), Kafka's
    grpc_limits: ConnectionLimits = ConnectionLimits()  # --max-connections(-per-ip)
    kafka_metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS  # topic feed interval
    kafka_txn_check_ms: int = 30_000  # open transactions checked with the upstream
    kafka_upstream_request_timeout_ms: int = 30_000  # an upstream answer waited for, at most
    authorizer: AuthorizerConfig = AuthorizerConfig()  # super.users, allow.everyone.if.no.acl.found
    security: Security = field(default_factory=Security)  # TLS and authentication (none: open)
    cluster: ClusterSettings | None = None  # several nodes on a PostgreSQL store (none: one)


def split_listen(listen: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port). Raises ValueError with a clear message."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{flag} must be HOST:PORT, got {listen!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{flag} port must be a number, got {port!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{flag} port must be 0..65535, got {number}")
    return host, number


class CoordinatorServer:
    """The runtime plus its gRPC server. ``start()`` binds and serves; ``load()`` loads the
    store; ``stop()`` shuts down gracefully. ``observers``: what it reports to (requests,
    refusals, the metrics endpoint: ``observers.py``; the CLI gives observability's); None:
    nothing is observed."""

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        options: ServeOptions,
        observers: ServeObservers | None = None,
    ) -> None:
        self.runtime = runtime
        self.observers = observers
        self.options = options
        self.host, _ = split_listen(options.listen)
        self.port = 0
        self.advertised: tuple[str, int] = ("", 0)  # set by start()
        size = options.max_message_bytes
        security = options.security
        self.tls: list[ServerTls] = []  # every TLS listener (reloaded on SIGHUP)
        self.on_auth_failed = None if observers is None else observers.authentication_failed()
        self.grpc_tls = self._tls("gRPC", security.grpc_tls, alpn=("h2",))
        self.metrics_tls = self._tls("metrics", security.metrics_tls)
        if (
            self.grpc_tls is not None
            and self.grpc_tls.client_auth == "requested"
            and (options.grpc_transport != "h2" or options.grpc_processes > 1)
        ):
            raise TlsConfigError(
                "ssl.client.auth=requested on the gRPC listener needs the default h2 server "
                "without front ends: grpc.aio (--grpc-transport grpcio, --grpc-processes) "
                "either requires a client certificate or does not ask for one"
            )
        if (
            self.grpc_tls is not None
            and self.grpc_tls.files.cipher_suites
            and (options.grpc_transport != "h2" or options.grpc_processes > 1)
        ):
            raise TlsConfigError(
                "ssl.cipher.suites on the gRPC listener needs the default h2 server without "
                "front ends: grpc.aio (--grpc-transport grpcio, --grpc-processes) takes no "
                "cipher suites"
            )
        if options.grpc_limits.limited and (
            options.grpc_transport != "h2" or options.grpc_processes > 1
        ):
            raise ValueError(
                "--max-connections, --max-connections-per-ip and their overrides need the "
                "default h2 gRPC server without front ends: grpc.aio (--grpc-transport grpcio, "
                "--grpc-processes) has no connection limits"
            )
        # The port is shared with our own front ends only: start() checks that it is free.
        # --max-concurrent-calls is per group (fairness.py); the server refuses past the
        # process's limit before any work.
        self.call_limit = CallLimit(options.max_concurrent_calls)
        make_server: Any = (
            partial(H2GrpcServer, limits=options.grpc_limits)
            if options.grpc_transport == "h2"
            else new_grpc_server
        )
        self.server = make_server(
            size,
            reuseport=options.grpc_processes > 1,
            max_concurrent_calls=process_limit(options.max_concurrent_calls),
            options=options.grpc_options,
            tls=self.grpc_tls,
        )
        self.on_connection_refused = None if observers is None else observers.connection_refused()
        if isinstance(self.server, H2GrpcServer):
            self.server.quotas.on_refused = self.on_connection_refused
        self.health = health.aio.HealthServicer()
        self.service = CoordinatorService(runtime, authorizer=options.authorizer)
        if observers is not None:
            # Request metrics, spans, audit (every codec): hooks in the service layer's wrapper.
            observe_rpcs(self.service, observers.rpcs())
            self.service.authorizer.on_refused = observers.authorization_refused()
        servicers: list[object] = [
            ConsumerGroupService(self.service),
            AdminService(self.service, lambda: self.advertised),
            OffsetService(self.service),
            ClassicGroupService(self.service, lambda: self.advertised),
        ]
        if isinstance(runtime.clock, ManualClock):
            servicers.append(TestingService(self.service))
        for servicer in servicers:  # answers too large for gRPC are refused in-band
            servicer.max_response_bytes = size  # type: ignore[attr-defined]
        served = list(zip(service_descriptors(), servicers, strict=False))
        table = method_table(served)
        group_keys = GroupKeys(descriptor for descriptor, _ in served)
        if isinstance(self.server, H2GrpcServer):
            self.server.group_of = group_keys.key  # calls start fairly between groups
        add_raw_handlers(
            self.server,
            [descriptor for descriptor, _ in served],
            lambda path: limited(path, local_handler(table[path]), group_keys, self.call_limit),
        )
        self.service_names = [descriptor.full_name for descriptor, _ in served]
        self.tokens = TokenValidator(security.oauth) if security.oauth is not None else None
        self.grpc_auth = GrpcAuthenticator(
            required=security.grpc_requires_auth,
            tokens=self.tokens,
            mapper=SslPrincipalMapper(security.grpc_mapping_rules),
            certificates=self.grpc_tls is not None and self.grpc_tls.client_auth != "none",
        )
        self.grpc_auth.on_refused = self.on_auth_failed
        if self.grpc_auth.active:  # else every call is ANONYMOUS (the class's default)
            for servicer in servicers:
                servicer.principal_of = self.grpc_auth.principal_of  # type: ignore[attr-defined]
        self.grpc_authenticates = security.grpc_requires_auth or (
            self.grpc_tls is not None and self.grpc_tls.client_auth == "required"
        )
        """True when every gRPC client must authenticate (a required bearer token or client
        certificate): the start-up log does not call the listener open to anonymous clients."""
        self.metrics_address: str | None = None  # set by serve() once the endpoint is bound
        # health and reflection within the limit too, as calls naming no group: 11,000 health
        # Watch streams of one client took every slot of the process and refused everyone
        add_health_and_reflection(
            self.server,
            self.health,
            self.service_names,
            lambda path, run: limited(path, run, group_keys, self.call_limit),
        )
        self.kafka: KafkaListener | None = None
        self.kafka_address = ""
        self.kafka_addresses: list[tuple[str, str, str]] = []  # (name, protocol, address)
        self.topic_feed: TopicFeed | None = None
        self.kafka_upstream: Upstream | None = None
        self.kafka_txn: TransactionBridge | None = None
        self._health_tasks: set[asyncio.Task[None]] = set()
        self._health_lock = asyncio.Lock()
        runtime.add_health_listener(self._runtime_health)
        self.kafka_advertised: str | None = None  # the first Kafka listener's, once bound
        self.cluster = (  # several nodes on one store: joined by load()
            None if options.cluster is None else ClusterMember(runtime, options.cluster)
        )
        self.frontends = (
            FrontEndPool(
                Dispatcher(table),
                listen=options.listen,
                max_message_bytes=size,
                max_concurrent_calls=options.max_concurrent_calls,
                grpc_options=options.grpc_options,
                log_level=options.log_level,
                event_loop=options.event_loop,
                log_format=options.log_format,
                tls=self.grpc_tls,
            )
            if options.grpc_processes > 1
            else None
        )

    async def start(self) -> int:
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.frontends is not None:
            await _check_port_free(self.options.listen)
        if isinstance(self.server, H2GrpcServer):
            self.port = self.server.add_insecure_port(self.options.listen)  # TLS: the server's
        else:
            self.port = add_port(self.server, self.options.listen, self.grpc_tls)
        self.advertised = await asyncio.to_thread(self.advertised_address)
        await self.server.start()
        if self.options.security.kafka or self.options.kafka_listen:
            await self.start_kafka()
        if self.frontends is not None:
            await self.frontends.start(
                self.options.grpc_processes - 1, self.port, self.service_names
            )
        return self.port

    def _tls(self, name: str, files: Any, alpn: tuple[str, ...] = ()) -> ServerTls | None:
        """A listener's TLS from its files (read now: :class:`TlsConfigError` if they do not
        load), kept for SIGHUP."""
        if files is None:
            return None
        tls = ServerTls(name, files, alpn)
        tls.on_failed = self.on_auth_failed
        self.tls.append(tls)
        return tls

    def reload_tls(self) -> None:
        """SIGHUP: every TLS listener re-reads its certificates, and the JWKS is re-read;
        connections made from now on get them, the open ones keep theirs."""
        for tls in self.tls:
            tls.reload()
        if self.tokens is not None:
            self.tokens.reload()

    def kafka_endpoints(self) -> tuple[Any, ...]:
        """The Kafka listeners: ``security.kafka`` (``listeners``, or ``--kafka-listen``), or
        a PLAINTEXT one on ``kafka_listen`` when only that is given."""
        from .security_config import KafkaEndpoint

        options = self.options
        if options.security.kafka:
            return options.security.kafka
        assert options.kafka_listen is not None
        host, port = split_listen(options.kafka_listen, "--kafka-listen")
        advertised = None
        if options.kafka_advertised:
            advertised = split_listen(options.kafka_advertised, "--kafka-advertised-address")
        return (
            KafkaEndpoint(
                name="PLAINTEXT",
                host=host,
                port=port,
                protocol="PLAINTEXT",
                advertised=advertised,
            ),
        )

    async def start_kafka(self) -> None:
        """Bind the Kafka listeners (``--kafka-listen``, or ``listeners``); with
        ``--kafka-upstream``, connect to the upstream first and give each of its brokers a port
        of its own on every listener (``kafka/upstream/broker.py``)."""
        options = self.options
        kafka_options = KafkaOptions(
            max_request_bytes=options.kafka_max_request_bytes,
            idle_ms=options.kafka_idle_ms,
            flow=options.kafka_flow,
            limits=options.kafka_limits,
        )
        upstream = None
        if options.kafka_upstream:
            upstream = self.kafka_upstream = Upstream(
                options.kafka_upstream,
                options.security.upstream,
                request_timeout_ms=options.kafka_upstream_request_timeout_ms,
            )
            await upstream.connect()
        txn = (
            None
            if upstream is None
            else TransactionBridge(self.runtime, upstream, options.kafka_txn_check_ms)
        )
        self.kafka = KafkaListener(self.service, kafka_options, upstream, txn)
        self.kafka_txn = txn
        if self.observers is not None:
            self.kafka.on_forward = self.observers.forwarded(kafka_api_name)
        self.kafka.on_auth_failed = self.on_auth_failed
        self.kafka.quotas.on_refused = self.on_connection_refused
        for endpoint in self.kafka_endpoints():
            sec = options.security
            security = ListenerSecurity(
                name=endpoint.name,
                protocol=endpoint.protocol,
                tls=self._tls(f"Kafka {endpoint.name}", endpoint.tls),
                mapper=SslPrincipalMapper(endpoint.mapping_rules),
                mechanisms=endpoint.mechanisms,
                reauth_ms=endpoint.reauth_ms,
                authenticator=Authenticator(
                    mechanisms=endpoint.mechanisms,
                    lookup=self.service.scram_credential,
                    tokens=self.tokens,
                    reauth_ms=endpoint.reauth_ms,
                    passthrough=sec.upstream.passthrough and upstream is not None,
                    sub_claim=sec.oauth.sub_claim if sec.oauth is not None else "sub",
                )
                if endpoint.protocol.startswith("SASL_")
                else None,
            )
            bound = await self.kafka.listen(endpoint.host, endpoint.port, security)
            advertised = (
                None
                if endpoint.advertised is None
                else f"{endpoint.advertised[0]}:{endpoint.advertised[1]}"
            )
            adv_host, adv_port = await asyncio.to_thread(
                advertise, endpoint.host, bound, advertised, "advertised.listeners"
            )
            if self.kafka_advertised is None:
                self.kafka_advertised = f"{adv_host}:{adv_port}"
            if upstream is None:
                node_id = 0 if options.cluster is None else options.cluster.node_id
                self.kafka.set_node(bound, Node(node_id=node_id, host=adv_host, port=adv_port))
            else:
                upstream.bind_nodes(self.kafka, endpoint.host, bound, adv_host, adv_port, security)
            host = endpoint.host
            shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
            self.kafka_addresses.append((endpoint.name, endpoint.protocol, f"{shown}:{bound}"))
        self.kafka_address = self.kafka_addresses[0][2]
        self.kafka.authenticates = all(
            e.protocol.startswith("SASL_")
            or (e.tls is not None and e.tls.client_auth == "required")
            for e in self.kafka_endpoints()
        )
        if upstream is not None:
            # Topics follow the upstream; the topic RPCs go to it (started by load()).
            self.topic_feed = TopicFeed(self.runtime, upstream, options.kafka_metadata_max_age_ms)
            self.service.topics = self.topic_feed
            # The operator tools' log offsets (AdminService.ListOffsets) come from it too.
            self.service.log_offsets = UpstreamLogOffsets(upstream)

    def _runtime_health(self, _serving: bool) -> None:
        """The runtime can no longer write its store, or can again (storewatch.py): health
        follows (NOT_SERVING while it cannot write, or once it stopped serving)."""
        task = asyncio.get_running_loop().create_task(self._follow_runtime_health())
        self._health_tasks.add(task)
        task.add_done_callback(self._health_tasks.discard)

    async def _follow_runtime_health(self) -> None:
        async with self._health_lock:  # one at a time; each sets the status of its moment
            serving = self.runtime.serving and (self.cluster is None or self.cluster.healthy)
            if self.cluster is not None and self.runtime.state is RuntimeState.FAILED:
                # It stopped serving for good: its partitions go to the other nodes now.
                await self.cluster.leave()
            await self._set_health(
                health_pb2.HealthCheckResponse.SERVING
                if serving
                else health_pb2.HealthCheckResponse.NOT_SERVING
            )

    async def _set_health(self, status: int) -> None:
        for name in ("", *self.service_names):
            await self.health.set(name, status)
        if self.frontends is not None:
            self.frontends.set_health(dict.fromkeys(("", *self.service_names), status))

    def advertised_address(self) -> tuple[str, int]:
        """What FindCoordinator answers: ``--advertised-address``, else the bound address, with a
        wildcard host (``0.0.0.0``, ``::``) replaced by this machine's name, as Kafka does.
        Worked out once, in ``start()`` (a name may take a DNS query): ``self.advertised``."""
        return advertise(self.host, self.port, self.options.advertised, "--advertised-address")

    @property
    def address(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host.strip("[]") else self.host
        return f"{host}:{self.port}"

    async def load(self) -> None:
        await self.runtime.start()
        if self.cluster is not None:
            self.service.routing = await self.cluster.join(
                self.advertised,
                self.kafka_advertised,
                lambda: self._runtime_health(True),
                upstream=self.kafka_upstream is not None,
            )
            if self.kafka_upstream is not None:  # Metadata lists the coordinator nodes too
                self.kafka_upstream.coordinator_brokers = self.service.routing.coordinator_brokers
        warn_open_listeners(self)  # once the ACLs are loaded
        if self.topic_feed is not None:
            await self.topic_feed.start()  # the upstream's topics before SERVING (bounded)
        if self.kafka_txn is not None:
            await self.kafka_txn.start(self.service)  # prepared ones completed (bounded)
        if self.cluster is None:
            await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        else:
            self._runtime_health(True)

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        await self.health.enter_graceful_shutdown()
        self.runtime.release_parked()  # parked JoinGroup/SyncGroup answered, not left to the grace
        self.runtime.watchers.close()  # push streams end (UNAVAILABLE), not left to the grace
        if self.topic_feed is not None:
            await self.topic_feed.close()
        if self.kafka_txn is not None:
            await self.kafka_txn.close()
        if self.service.log_offsets is not None:
            self.service.log_offsets.close()
        if self.cluster is not None:
            await self.cluster.leave()
        if self.kafka is not None:
            await self.kafka.close()
        if self.frontends is not None:
            await self.frontends.stop(
                grace_s
            )  # they stop accepting; we answer their in-flight calls
        await self.server.stop(grace_s)  # stop accepting; in-flight calls finish
        await self.runtime.close()  # flush pending writes, close the store


def open_listeners(server: CoordinatorServer) -> list[str]:
    """The listeners a client may use without authenticating, as ``NAME HOST:PORT (PROTOCOL)``:
    a PLAINTEXT or SSL listener that does not require a client certificate (on gRPC: that does
    not require a bearer token or certificate either). Their clients are ``User:ANONYMOUS``."""
    security = server.options.security
    out = []
    if not server.grpc_authenticates:
        out.append(f"gRPC {server.address} ({security.grpc_protocol})")
    for name, protocol, address in server.kafka_addresses:
        tls = next((e.tls for e in security.kafka if e.name == name), None)
        if not protocol.startswith("SASL_") and not (
            tls is not None and tls.client_auth == "required"
        ):
            out.append(f"Kafka {name} {address} ({protocol})")
    if server.metrics_address is not None and not (
        server.metrics_tls is not None and server.metrics_tls.client_auth == "required"
    ):
        kind = "SSL" if server.metrics_tls else "PLAINTEXT"
        out.append(f"metrics {server.metrics_address} ({kind})")
    return out


def warn_open_listeners(server: CoordinatorServer) -> None:
    """The start-up warning of an open configuration (docs/security.md "Default
    configuration"): which listeners take anonymous clients, and whether ACLs restrict them."""
    listeners = open_listeners(server)
    if not listeners:
        return
    authz = server.service.authorizer
    if not authz.config.allow_everyone_if_no_acl_found:
        return  # anonymous clients get only what ACLs grant User:ANONYMOUS
    log.warning(
        "Listeners open to anonymous clients (no authentication: User:ANONYMOUS): %s. "
        "allow.everyone.if.no.acl.found=true: %s. See docs/security.md.",
        "; ".join(listeners),
        "no ACLs restrict them: every client may do everything"
        if authz.open
        else f"{authz.metadata.acl_count()} ACLs restrict the resources they name; every other "
        "resource is open to everyone",
    )


def advertise(host: str, port: int, advertised: str | None, flag: str) -> tuple[str, int]:
    """The address a listener answers as its own: ``advertised`` if given, else the bound one
    with a wildcard host replaced by this machine's name, as Kafka does."""
    if advertised:
        adv_host, adv_port = split_listen(advertised, flag)
        return adv_host.strip("[]"), adv_port
    host = host.strip("[]")
    if host in WILDCARD_HOSTS:
        host = socket.getfqdn()
    return host, port


PORT_FREE_WAIT_S = 3.0
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


async def _check_port_free(listen: str) -> None:
    """With ``SO_REUSEPORT`` a second server could silently share a busy port: refuse instead.

    The probe binds like gRPC does (``SO_REUSEADDR``: connections of a previous run in
    TIME_WAIT do not count) and waits up to ``PORT_FREE_WAIT_S`` for a listener to go away:
    the front ends of a coordinator killed a moment ago are still exiting."""
    host, port = split_listen(listen)
    if port == 0:
        return
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PORT_FREE_WAIT_S
    for _attempt in range(1000):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise RuntimeError(str(exc)) from None
        if loop.time() >= deadline:
            break
        await asyncio.sleep(0.05)
    raise RuntimeError(f"address {listen} is already in use")


def make_runtime(
    config: GroupCoordinatorConfig, store: RecordStore, clock: str, observer: Any = None
) -> CoordinatorRuntime:
    return CoordinatorRuntime(
        config=config,
        store=store,
        clock=ManualClock(SystemClock().now_ms()) if clock == "manual" else SystemClock(),
        observer=observer,
    )


async def serve(
    runtime: CoordinatorRuntime, options: ServeOptions, observers: ServeObservers | None = None
) -> int:
    """Run until SIGTERM/SIGINT (SIGHUP: TLS certificates re-read). Returns the process exit
    code. ``observers``: what the server reports to (:class:`CoordinatorServer`); the metrics
    endpoint (``--metrics-listen``) is theirs."""
    try:
        server = CoordinatorServer(runtime, options, observers)
    except (TlsConfigError, ValueError) as exc:  # certificates, keys, the JWKS file
        print(
            f"kip848 serve: {'TLS: ' if isinstance(exc, TlsConfigError) else ''}{exc}",
            file=sys.stderr,
        )
        await runtime.close()
        return 1
    try:
        await server.start()
    except (RuntimeError, OSError, TlsConfigError) as exc:
        if isinstance(exc, UpstreamError | TlsConfigError):
            print(f"kip848 serve: {exc}", file=sys.stderr)
        else:
            print(f"kip848 serve: cannot listen on {options.listen}: {exc}", file=sys.stderr)
        if server.kafka is not None:
            await server.kafka.close()
        if server.kafka_upstream is not None:
            server.kafka_upstream.client.close()
        if server.frontends is not None:
            await server.frontends.stop(0.0)
        await server.server.stop(None)
        await runtime.close()
        return 1
    metrics_server = None
    if (
        observers is not None
        and options.metrics_listen is not None
        and getattr(runtime.observer, "metrics", None)
    ):
        host, port = split_listen(options.metrics_listen, "--metrics-listen")
        pool = server.frontends
        try:
            metrics_server = observers.start_metrics_endpoint(
                runtime,
                host,
                port,
                frontends=None
                if pool is None
                else lambda: {f.index: f.calls for f in pool.frontends},
                tls=server.metrics_tls,
                cluster=None if server.cluster is None else server.cluster.metrics,
            )
        except OSError as exc:
            # Before `listening on`: a server that printed it is ready, and this one is not.
            print(
                f"kip848 serve: cannot serve metrics on {options.metrics_listen}: {exc}",
                file=sys.stderr,
            )
            await server.stop(0.0)
            return 1
        shown = f"[{host.strip('[]')}]" if ":" in host.strip("[]") else host
        metrics_at = f"{shown}:{metrics_server.port}"
    print(f"listening on {server.address}", flush=True)
    if server.kafka is not None:
        print(f"kafka listening on {server.kafka_address}", flush=True)
        for name, _protocol, address in server.kafka_addresses[1:]:
            print(f"kafka {name} listening on {address}", flush=True)
    if metrics_server is not None:
        server.metrics_address = metrics_at
        print(f"metrics on {metrics_at}", flush=True)
        scheme = "http" if server.metrics_tls is None else "https"
        log.info("Serving metrics on %s://%s/metrics.", scheme, metrics_at)
    log.info(
        "Listening on %s (clock %s, %d shards).", server.address, options.clock, runtime.shard_count
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, server.reload_tls)
    load_task = loop.create_task(server.load())
    stop_task = loop.create_task(stop.wait())
    # A node whose id another process took (docs/ha.md "Failure modes") exits.
    gone = [] if server.cluster is None else [loop.create_task(server.cluster.gone.wait())]
    code = 0
    await asyncio.wait([load_task, stop_task, *gone], return_when=asyncio.FIRST_COMPLETED)
    if load_task.done() and load_task.exception() is not None:
        failure = load_task.exception()
        if isinstance(failure, NodeStartError):
            print(f"kip848 serve: {failure}", file=sys.stderr)
            log.critical("%s", failure)
        else:
            log.critical("Loading the store failed: %r", failure, exc_info=failure)
        code = 1
    else:
        if not stop.is_set() and not any(t.done() for t in gone):
            await asyncio.wait([stop_task, *gone], return_when=asyncio.FIRST_COMPLETED)
        if server.cluster is not None and not stop.is_set() and server.cluster.gone.is_set():
            print(f"kip848 serve: {server.cluster.fenced}: exiting", file=sys.stderr)
            code = 1
    log.info("Shutting down.")
    if server.cluster is not None:
        server.cluster.bound_shutdown(SHUTDOWN_GRACE_S)
    if not load_task.done():
        load_task.cancel()
        try:
            await load_task
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - shutting down anyway
            log.debug("Loading interrupted by shutdown: %r", exc)
    stop_task.cancel()
    for task in gone:
        task.cancel()
    await server.stop()
    if metrics_server is not None:
        await asyncio.to_thread(metrics_server.close)
    if observers is not None:
        observers.close()  # the spans still queued go to the exporter
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.remove_signal_handler(sig)
    log.info("Stopped.")
    return code
