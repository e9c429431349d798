"""Listener security from Kafka's configuration names (docs/security.md, sections 4 and 5).

Every listener has a *security protocol*, Kafka's: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``
or ``SASL_SSL``. The Kafka listeners are Kafka's own: ``listeners=NAME://HOST:PORT,...`` with
``listener.security.protocol.map=NAME:PROTOCOL,...`` (or ``--kafka-listen`` with
``--kafka-security-protocol``); ``advertised.listeners`` the addresses they answer as. The gRPC
listener (``--listen``) and the metrics endpoint (``--metrics-listen``) are the listeners
``GRPC`` and ``METRICS`` of the same map: TLS (``SSL``) when a keystore is configured for
them, else ``PLAINTEXT``, unless the map names them. On gRPC, ``SASL_SSL``/``SASL_PLAINTEXT``
mean that every call must authenticate (a bearer token or a client certificate).

TLS settings are Kafka's ``ssl.*`` names, globally or for one listener with Kafka's prefix
``listener.name.<name lower-case>.ssl.*`` (which wins); ``--tls-cert``, ``--tls-key``,
``--tls-ca``, ``--tls-client-auth`` are the global ones as flags. SASL settings likewise
(``sasl.enabled.mechanisms``, ``connections.max.reauth.ms``, ``sasl.oauthbearer.*``).

:func:`parse_security` turns the settings into a :class:`Security` or raises
:class:`SecurityConfigError` naming the setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .tls import DEFAULT_HANDSHAKE_TIMEOUT_MS, DEFAULT_PROTOCOLS, TlsConfigError, TlsFiles

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
DEFAULT_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
GRPC = "GRPC"
METRICS = "METRICS"
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}
"""Kafka's default ``listener.security.protocol.map``."""

# The ssl.* and sasl.* names a listener takes (globally or with listener.name.<name>.).
SSL_NAMES = frozenset(
    {
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "ssl.handshake.timeout.ms",
        "ssl.principal.mapping.rules",
    }
)
SASL_NAMES = frozenset(
    {
        "sasl.enabled.mechanisms",
        "connections.max.reauth.ms",
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.clock.skew.seconds",
    }
)
UPSTREAM_NAMES = frozenset(
    {
        "kafka.upstream.security.protocol",
        "kafka.upstream.ssl.keystore.location",
        "kafka.upstream.ssl.keystore.type",
        "kafka.upstream.ssl.key.password",
        "kafka.upstream.ssl.truststore.location",
        "kafka.upstream.ssl.truststore.type",
        "kafka.upstream.ssl.enabled.protocols",
        "kafka.upstream.ssl.cipher.suites",
        "kafka.upstream.ssl.endpoint.identification.algorithm",
        "kafka.upstream.sasl.mechanism",
        "kafka.upstream.sasl.jaas.config",
        "kafka.upstream.sasl.passthrough",
    }
)
SECURITY_CONFIGS = (
    frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})
    | SSL_NAMES
    | SASL_NAMES
    | UPSTREAM_NAMES
)
"""Every security setting ``kip848 serve`` takes (plus ``listener.name.*`` prefixed ones)."""
_PREFIXED = re.compile(r"^listener\.name\.([a-z0-9_\-]+)\.(.+)$")


def is_security_config(name: str) -> bool:
    """A name :func:`parse_security` takes: one of ``SECURITY_CONFIGS``, or one of the ssl.*
    / sasl.* names behind Kafka's ``listener.name.<name>.`` prefix."""
    if name in SECURITY_CONFIGS:
        return True
    match = _PREFIXED.match(name)
    return match is not None and (match.group(2) in SSL_NAMES or match.group(2) in SASL_NAMES)


class SecurityConfigError(ValueError):
    """A security setting that cannot be used; the message names it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OAuthSettings:
    """How OAUTHBEARER tokens (and gRPC bearer tokens) are checked: signed by a key of the
    local JWKS file, not expired (``exp``, with ``clock_skew_s``), for ``audience`` and from
    ``issuer`` when set; the principal is the ``sub_claim`` claim."""

    jwks_file: str
    audience: tuple[str, ...] = ()
    issuer: str | None = None
    sub_claim: str = "sub"
    clock_skew_s: int = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaEndpoint:
    """One Kafka listener."""

    name: str
    host: str
    port: int
    protocol: str
    advertised: tuple[str, int] | None = None
    tls: TlsFiles | None = None
    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    reauth_ms: int = 0
    mapping_rules: str = "DEFAULT"

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamSecurity:
    """How the coordinator reaches the upstream broker (Kafka's client names with the
    ``kafka.upstream.`` prefix). ``passthrough``: SASL listeners relay each client's SASL
    exchange to the broker on that client's own upstream connection (docs/security.md)."""

    protocol: str = "PLAINTEXT"
    tls: TlsFiles | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    passthrough: bool = False

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Security:
    grpc_protocol: str = "PLAINTEXT"
    grpc_tls: TlsFiles | None = None
    grpc_mapping_rules: str = "DEFAULT"
    metrics_tls: TlsFiles | None = None
    kafka: tuple[KafkaEndpoint, ...] = ()
    oauth: OAuthSettings | None = None
    upstream: UpstreamSecurity = field(default_factory=UpstreamSecurity)

    @property
    def grpc_requires_auth(self) -> bool:
        return self.grpc_protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Flags:
    """The command-line flags that stand for settings (they win over the files)."""

    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_client_auth: str | None = None
    kafka_listen: str | None = None
    kafka_protocol: str | None = None
    kafka_advertised: str | None = None
    metrics: bool = False


def _split(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SecurityConfigError(f"{what}: expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def _listeners(text: str, setting: str) -> list[tuple[str, str, int]]:
    """``NAME://HOST:PORT,...`` -> [(NAME, host, port)] (Kafka's ``listeners`` syntax)."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
            raise SecurityConfigError(f"{setting}: expected NAME://HOST:PORT, got {item!r}")
        host, port = _split(rest, setting)
        out.append((name.upper(), host, port))
    names = [n for n, _h, _p in out]
    if len(set(names)) != len(names):
        raise SecurityConfigError(f"{setting}: a listener name is given twice: {text!r}")
    return out


def _protocol_map(text: str | None) -> dict[str, str]:
    if text is None:
        return dict(DEFAULT_PROTOCOL_MAP)
    out = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in PROTOCOLS:
            raise SecurityConfigError(
                f"listener.security.protocol.map: expected NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(PROTOCOLS)}, got {item!r}"
            )
        out[name.strip().upper()] = protocol
    return out


class _Settings:
    """Lookup with Kafka's listener prefix (``listener.name.<name>.``) over the flags and the
    settings."""

    def __init__(self, settings: Mapping[str, str], flags: Flags) -> None:
        self.settings = dict(settings)
        for name, value in (
            ("ssl.keystore.location", flags.tls_cert),
            ("ssl.truststore.location", flags.tls_ca),
            ("ssl.client.auth", flags.tls_client_auth),
        ):
            if value is not None:
                self.settings[name] = value
        self.key_file = flags.tls_key

    def get(self, name: str, listener: str | None = None) -> str | None:
        if listener is not None:
            value = self.settings.get(f"listener.name.{listener.lower()}.{name}")
            if value is not None:
                return value
        return self.settings.get(name)

    def has_keystore(self, listener: str) -> bool:
        return bool(self.get("ssl.keystore.location", listener))

    def tls(self, listener: str, *, server: bool = True) -> TlsFiles:
        where = f"listener {listener}"
        store_type = (self.get("ssl.keystore.type", listener) or "PEM").upper()
        trust_type = (self.get("ssl.truststore.type", listener) or "PEM").upper()
        for setting, value in (("keystore", store_type), ("truststore", trust_type)):
            if value != "PEM":
                raise SecurityConfigError(
                    f"ssl.{setting}.type={value} ({where}): only PEM files are read (convert "
                    "a JKS or PKCS12 store with keytool/openssl)"
                )
        protocols = self.get("ssl.enabled.protocols", listener)
        timeout = self.get("ssl.handshake.timeout.ms", listener)
        files = TlsFiles(
            certificate=self.get("ssl.keystore.location", listener),
            key=self.key_file,
            key_password=self.get("ssl.key.password", listener),
            ca=self.get("ssl.truststore.location", listener),
            client_auth=(self.get("ssl.client.auth", listener) or "none").strip().lower(),
            protocols=tuple(p.strip() for p in protocols.split(",") if p.strip())
            if protocols is not None
            else DEFAULT_PROTOCOLS,
            handshake_timeout_ms=_int(timeout, "ssl.handshake.timeout.ms", 1)
            if timeout is not None
            else DEFAULT_HANDSHAKE_TIMEOUT_MS,
            cipher_suites=_names(self.get("ssl.cipher.suites", listener)),
        )
        try:
            files.check(server=server)
        except TlsConfigError as exc:
            raise SecurityConfigError(f"{where}: {exc}") from None
        return files


def _mapping_rules(text: str | None, listener: str) -> str:
    """``ssl.principal.mapping.rules``, checked now (they are applied per connection)."""
    from coordinator.security.ssl_principal import MappingRuleError, SslPrincipalMapper

    rules = text or "DEFAULT"
    try:
        SslPrincipalMapper(rules)
    except MappingRuleError as exc:
        raise SecurityConfigError(
            f"ssl.principal.mapping.rules (listener {listener}): {exc}"
        ) from None
    return rules


def _names(value: str | None) -> tuple[str, ...]:
    """A Kafka list setting (comma-separated; None or empty: none)."""
    return tuple(n.strip() for n in (value or "").split(",") if n.strip())


def _int(value: str, name: str, minimum: int) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise SecurityConfigError(f"{name}: expected an integer, got {value!r}") from None
    if number < minimum:
        raise SecurityConfigError(f"{name} must be >= {minimum}, got {number}")
    return number


def _mechanisms(text: str | None, listener: str) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_MECHANISMS
    chosen = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    for mechanism in chosen:
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(
                f"sasl.enabled.mechanisms (listener {listener}): {mechanism} is not supported "
                f"(supported: {', '.join(MECHANISMS)})"
            )
    if not chosen:
        raise SecurityConfigError(f"sasl.enabled.mechanisms (listener {listener}) is empty")
    return chosen


def _jaas_credentials(text: str) -> tuple[str, str]:
    """``username="..." password="..."`` of a Kafka JAAS line (PlainLoginModule,
    ScramLoginModule)."""
    found = dict(re.findall(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"', text))
    if "username" not in found or "password" not in found:
        raise SecurityConfigError(
            'kafka.upstream.sasl.jaas.config: expected a Kafka JAAS line with username="..." '
            'and password="..."'
        )
    return found["username"], found["password"]


def parse_security(settings: Mapping[str, str], flags: Flags, *, upstream: bool) -> Security:
    """The listeners' security (see the module doc). ``upstream``: a ``--kafka-upstream`` is
    configured."""
    for name in settings:
        prefixed = _PREFIXED.match(name)
        if prefixed is not None and prefixed.group(2).startswith("sasl.oauthbearer."):
            raise SecurityConfigError(
                f"{name}: the sasl.oauthbearer.* settings are one for every listener and for "
                f"gRPC's bearer tokens: give {prefixed.group(2)} without the "
                f"listener.name.{prefixed.group(1)}. prefix"
            )
    s = _Settings(settings, flags)
    protocol_map = _protocol_map(s.get("listener.security.protocol.map"))

    def listener_protocol(name: str) -> str:
        protocol = protocol_map.get(name)
        if protocol is None:
            return "SSL" if s.has_keystore(name) else "PLAINTEXT"
        return protocol

    grpc_protocol = listener_protocol(GRPC)
    grpc_tls = s.tls(GRPC) if grpc_protocol in ("SSL", "SASL_SSL") else None
    metrics_protocol = listener_protocol(METRICS)
    if metrics_protocol.startswith("SASL_"):
        raise SecurityConfigError(
            "listener.security.protocol.map: METRICS is PLAINTEXT or SSL (Prometheus scrapes "
            "over HTTP(S); require a client certificate with listener.name.metrics.ssl.client.auth)"
        )
    metrics_tls = s.tls(METRICS) if flags.metrics and metrics_protocol == "SSL" else None

    listeners_text = s.get("listeners")
    if listeners_text is not None and flags.kafka_listen is not None:
        raise SecurityConfigError(
            "give the Kafka listeners once: --kafka-listen (with --kafka-security-protocol) or "
            "listeners=NAME://HOST:PORT,... in the configuration, not both"
        )
    declared: list[tuple[str, str, int]] = []
    if listeners_text is not None:
        declared = _listeners(listeners_text, "listeners")
    elif flags.kafka_listen is not None:
        name = (flags.kafka_protocol or "PLAINTEXT").upper()
        if name not in PROTOCOLS:
            raise SecurityConfigError(
                f"--kafka-security-protocol must be one of {', '.join(PROTOCOLS)}, got {name!r}"
            )
        protocol_map.setdefault(name, name)
        protocol_map[name] = name
        host, port = _split(flags.kafka_listen, "--kafka-listen")
        declared = [(name, host, port)]
    advertised: dict[str, tuple[str, int]] = {}
    advertised_text = s.get("advertised.listeners")
    if advertised_text is not None:
        for name, host, port in _listeners(advertised_text, "advertised.listeners"):
            advertised[name] = (host, port)
    elif flags.kafka_advertised is not None and declared:
        advertised[declared[0][0]] = _split(flags.kafka_advertised, "--kafka-advertised-address")
    endpoints = []
    for name, host, port in declared:
        if name in (GRPC, METRICS):
            raise SecurityConfigError(f"listeners: {name} is the name of a non-Kafka listener")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise SecurityConfigError(
                f"listener {name} has no security protocol: add {name}:PLAINTEXT|SSL|"
                "SASL_PLAINTEXT|SASL_SSL to listener.security.protocol.map"
            )
        reauth = s.get("connections.max.reauth.ms", name)
        endpoints.append(
            KafkaEndpoint(
                name=name,
                host=host,
                port=port,
                protocol=protocol,
                advertised=advertised.get(name),
                tls=s.tls(name) if protocol in ("SSL", "SASL_SSL") else None,
                mechanisms=_mechanisms(s.get("sasl.enabled.mechanisms", name), name),
                reauth_ms=_int(reauth, "connections.max.reauth.ms", 0) if reauth else 0,
                mapping_rules=_mapping_rules(s.get("ssl.principal.mapping.rules", name), name),
            )
        )
    for name in advertised:
        if name not in {e.name for e in endpoints}:
            raise SecurityConfigError(
                f"advertised.listeners names {name}, which is not listened on"
            )

    oauth = None
    jwks = s.get("sasl.oauthbearer.jwks.endpoint.url")
    if jwks:
        path = jwks[len("file://") :] if jwks.startswith("file://") else jwks
        if re.match(r"^[a-z]+://", path):
            raise SecurityConfigError(
                "sasl.oauthbearer.jwks.endpoint.url: only a local JWKS file is read "
                f"(file:///path/jwks.json), got {jwks!r}"
            )
        skew = s.get("sasl.oauthbearer.clock.skew.seconds")
        audience = s.get("sasl.oauthbearer.expected.audience")
        oauth = OAuthSettings(
            jwks_file=path,
            audience=tuple(a.strip() for a in audience.split(",") if a.strip()) if audience else (),
            issuer=s.get("sasl.oauthbearer.expected.issuer") or None,
            sub_claim=s.get("sasl.oauthbearer.sub.claim.name") or "sub",
            clock_skew_s=_int(skew, "sasl.oauthbearer.clock.skew.seconds", 0) if skew else 30,
        )
    for endpoint in endpoints:
        if endpoint.sasl and "OAUTHBEARER" in endpoint.mechanisms and oauth is None:
            raise SecurityConfigError(
                f"listener {endpoint.name} enables OAUTHBEARER: set "
                "sasl.oauthbearer.jwks.endpoint.url to the JWKS file tokens are checked against"
            )

    if (
        grpc_protocol.startswith("SASL_")
        and oauth is None
        and (grpc_tls is None or grpc_tls.client_auth == "none")
    ):
        raise SecurityConfigError(
            f"GRPC:{grpc_protocol} requires every call to authenticate, but there is no way to: "
            "set sasl.oauthbearer.jwks.endpoint.url (bearer tokens) or ssl.client.auth "
            "(client certificates)"
        )
    upstream_security = _upstream(s, upstream)
    if upstream_security.passthrough:
        if not any(e.sasl for e in endpoints):
            raise SecurityConfigError(
                "kafka.upstream.sasl.passthrough=true needs a SASL_PLAINTEXT or SASL_SSL Kafka "
                "listener (its clients' SASL exchanges are relayed to the upstream)"
            )
    elif upstream_security.sasl and any(e.sasl for e in endpoints):
        raise SecurityConfigError(
            "the upstream broker authenticates its clients (kafka.upstream.security.protocol="
            f"{upstream_security.protocol}) and a Kafka listener authenticates clients itself: "
            "requests forwarded for them would reach the broker as nobody (or as the "
            "coordinator). Set kafka.upstream.sasl.passthrough=true to relay each client's own "
            "SASL exchange to the broker"
        )
    return Security(
        grpc_protocol=grpc_protocol,
        grpc_tls=grpc_tls,
        grpc_mapping_rules=_mapping_rules(s.get("ssl.principal.mapping.rules", GRPC), GRPC),
        metrics_tls=metrics_tls,
        kafka=tuple(endpoints),
        oauth=oauth,
        upstream=upstream_security,
    )


def _upstream(s: _Settings, upstream: bool) -> UpstreamSecurity:
    get = s.settings.get
    given = [name for name in UPSTREAM_NAMES if name in s.settings]
    if given and not upstream:
        raise SecurityConfigError(f"{sorted(given)[0]} is set but there is no --kafka-upstream")
    protocol = (get("kafka.upstream.security.protocol") or "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise SecurityConfigError(
            f"kafka.upstream.security.protocol must be one of {', '.join(PROTOCOLS)}, "
            f"got {protocol!r}"
        )
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        for setting in ("kafka.upstream.ssl.keystore.type", "kafka.upstream.ssl.truststore.type"):
            if (get(setting) or "PEM").upper() != "PEM":
                raise SecurityConfigError(f"{setting}: only PEM files are read")
        protocols = get("kafka.upstream.ssl.enabled.protocols")
        algorithm = get("kafka.upstream.ssl.endpoint.identification.algorithm", "https")
        tls = TlsFiles(
            certificate=get("kafka.upstream.ssl.keystore.location") or None,
            key_password=get("kafka.upstream.ssl.key.password"),
            ca=get("kafka.upstream.ssl.truststore.location") or None,
            protocols=tuple(p.strip() for p in protocols.split(",") if p.strip())
            if protocols
            else DEFAULT_PROTOCOLS,
            check_hostname=algorithm.strip().lower() == "https",
            cipher_suites=_names(get("kafka.upstream.ssl.cipher.suites")),
        )
        try:
            tls.check(server=False)
        except TlsConfigError as exc:
            raise SecurityConfigError(f"kafka.upstream: {exc}") from None
    passthrough = (get("kafka.upstream.sasl.passthrough") or "false").strip().lower()
    if passthrough not in ("true", "false"):
        raise SecurityConfigError(
            f"kafka.upstream.sasl.passthrough must be true or false, got {passthrough!r}"
        )
    mechanism = get("kafka.upstream.sasl.mechanism")
    username = password = None
    if protocol.startswith("SASL_"):
        mechanism = (mechanism or "PLAIN").strip().upper()
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise SecurityConfigError(
                "kafka.upstream.sasl.mechanism: the coordinator signs in to the upstream with "
                f"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not {mechanism}"
            )
        jaas = get("kafka.upstream.sasl.jaas.config")
        if not jaas:
            raise SecurityConfigError(
                f"kafka.upstream.security.protocol={protocol} needs the coordinator's own "
                "credentials for its connections (topic metadata, log offsets): "
                'kafka.upstream.sasl.jaas.config=... username="..." password="...";'
            )
        username, password = _jaas_credentials(jaas)
    elif passthrough == "true":
        raise SecurityConfigError(
            "kafka.upstream.sasl.passthrough=true needs kafka.upstream.security.protocol="
            "SASL_PLAINTEXT or SASL_SSL (the broker must authenticate its clients)"
        )
    return UpstreamSecurity(
        protocol=protocol,
        tls=tls,
        mechanism=mechanism if protocol.startswith("SASL_") else None,
        username=username,
        password=password,
        passthrough=passthrough == "true",
    )
