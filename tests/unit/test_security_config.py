"""Listener security from Kafka's configuration names (``security_config.parse_security``)."""

from __future__ import annotations

import ssl

import pytest

from coordinator.server.security_config import (
    Flags,
    KafkaEndpoint,
    OAuthSettings,
    SecurityConfigError,
    UpstreamSecurity,
    is_security_config,
    parse_security,
)
from coordinator.server.tls import TlsFiles, cipher_suites, openssl_suite, set_versions


def parse(settings: dict[str, str], flags: Flags | None = None, upstream: bool = False):  # type: ignore[no-untyped-def]
    return parse_security(settings, flags or Flags(), upstream=upstream)


def test_no_settings_is_everything_plaintext() -> None:
    security = parse({})
    assert (security.grpc_protocol, security.grpc_tls, security.kafka) == ("PLAINTEXT", None, ())
    assert security.upstream == UpstreamSecurity()


def test_a_keystore_turns_tls_on_for_grpc_and_metrics_unless_the_map_says_plaintext() -> None:
    flags = Flags(tls_cert="server.pem", tls_ca="ca.pem", tls_client_auth="required", metrics=True)
    security = parse({}, flags)
    expected = TlsFiles(certificate="server.pem", ca="ca.pem", client_auth="required")
    assert (security.grpc_protocol, security.grpc_tls, security.metrics_tls) == (
        "SSL",
        expected,
        expected,
    )
    plain = parse({"listener.security.protocol.map": "GRPC:PLAINTEXT,METRICS:PLAINTEXT"}, flags)
    assert (plain.grpc_protocol, plain.grpc_tls, plain.metrics_tls) == ("PLAINTEXT", None, None)
    required = parse({"listener.security.protocol.map": "GRPC:SASL_SSL"}, flags)
    assert required.grpc_requires_auth and required.grpc_tls == expected


def test_kafka_listeners_with_the_protocol_map_and_listener_prefixes() -> None:
    settings = {
        "listeners": "INTERNAL://127.0.0.1:9092,CLIENTS://0.0.0.0:9093, MTLS://[::1]:0",
        "advertised.listeners": "CLIENTS://kafka.example:443",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CLIENTS:SASL_SSL,MTLS:SSL",
        "ssl.keystore.location": "server.pem",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.truststore.location": "clients-ca.pem",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L",
        "listener.name.clients.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.clients.connections.max.reauth.ms": "60000",
    }
    assert all(is_security_config(name) for name in settings)
    security = parse(settings)
    assert security.kafka == (
        KafkaEndpoint(name="INTERNAL", host="127.0.0.1", port=9092, protocol="PLAINTEXT"),
        KafkaEndpoint(
            name="CLIENTS",
            host="0.0.0.0",
            port=9093,
            protocol="SASL_SSL",
            advertised=("kafka.example", 443),
            tls=TlsFiles(certificate="server.pem"),
            mechanisms=("SCRAM-SHA-512", "PLAIN"),
            reauth_ms=60000,
        ),
        KafkaEndpoint(
            name="MTLS",
            host="::1",
            port=0,
            protocol="SSL",
            tls=TlsFiles(certificate="server.pem", ca="clients-ca.pem", client_auth="required"),
            mapping_rules="RULE:^CN=(.*?),.*$/$1/L",
        ),
    )


def test_kafka_listen_flag_names_its_listener_after_its_protocol() -> None:
    security = parse(
        {"ssl.keystore.location": "s.pem"},
        Flags(kafka_listen="127.0.0.1:0", kafka_protocol="SASL_SSL", kafka_advertised="h:1"),
    )
    assert security.kafka == (
        KafkaEndpoint(
            name="SASL_SSL",
            host="127.0.0.1",
            port=0,
            protocol="SASL_SSL",
            advertised=("h", 1),
            tls=TlsFiles(certificate="s.pem"),
        ),
    )


def test_oauthbearer_settings() -> None:
    security = parse(
        {
            "listeners": "C://127.0.0.1:0",
            "listener.security.protocol.map": "C:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.jwks.endpoint.url": "file:///etc/kip848/jwks.json",
            "sasl.oauthbearer.expected.audience": "kip848, kafka",
            "sasl.oauthbearer.expected.issuer": "https://issuer",
            "sasl.oauthbearer.sub.claim.name": "preferred_username",
            "sasl.oauthbearer.clock.skew.seconds": "5",
        }
    )
    assert security.oauth == OAuthSettings(
        jwks_file="/etc/kip848/jwks.json",
        audience=("kip848", "kafka"),
        issuer="https://issuer",
        sub_claim="preferred_username",
        clock_skew_s=5,
    )


def test_upstream_security_and_passthrough() -> None:
    settings = {
        "listeners": "C://127.0.0.1:0",
        "listener.security.protocol.map": "C:SASL_PLAINTEXT",
        "kafka.upstream.security.protocol": "SASL_SSL",
        "kafka.upstream.ssl.truststore.location": "broker-ca.pem",
        "kafka.upstream.ssl.endpoint.identification.algorithm": "",
        "kafka.upstream.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.upstream.sasl.jaas.config": "org.apache.kafka.common.security.scram."
        'ScramLoginModule required username="coordinator" password="s3cr\\"et";',
        "kafka.upstream.sasl.passthrough": "true",
    }
    upstream = parse(settings, upstream=True).upstream
    assert upstream == UpstreamSecurity(
        protocol="SASL_SSL",
        tls=TlsFiles(ca="broker-ca.pem", check_hostname=False),
        mechanism="SCRAM-SHA-512",
        username="coordinator",
        password='s3cr\\"et',
        passthrough=True,
    )


@pytest.mark.parametrize(
    ("settings", "flags", "upstream", "message"),
    [
        ({"listeners": "A://h:1"}, Flags(), False, "listener A has no security protocol"),
        ({"listeners": "A://h:1,A://h:2"}, Flags(), False, "given twice"),
        ({"listeners": "A:h:1"}, Flags(), False, "expected NAME://HOST:PORT"),
        ({"listeners": "GRPC://h:1"}, Flags(), False, "name of a non-Kafka listener"),
        ({"listeners": "SSL://h:1"}, Flags(), False, "TLS needs a certificate"),
        (
            {"listeners": "SSL://h:1"},
            Flags(kafka_listen="h:2"),
            False,
            "--kafka-listen (with --kafka-security-protocol) or listeners",
        ),
        (
            {"listener.security.protocol.map": "A:TLS"},
            Flags(),
            False,
            "PROTOCOL one of",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "GSSAPI"},
            Flags(),
            False,
            "GSSAPI is not supported",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://h:1", "sasl.enabled.mechanisms": "OAUTHBEARER"},
            Flags(),
            False,
            "sasl.oauthbearer.jwks.endpoint.url",
        ),
        (
            {"sasl.oauthbearer.jwks.endpoint.url": "https://idp/jwks"},
            Flags(),
            False,
            "only a local JWKS file",
        ),
        (
            {"ssl.principal.mapping.rules": "RULE:x"},
            Flags(),
            False,
            "ssl.principal.mapping.rules (listener GRPC): Invalid rule",
        ),
        (  # one JWKS for every listener and gRPC: a listener's own would be ignored
            {
                "listeners": "CLIENTS://127.0.0.1:0",
                "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT",
                "listener.name.clients.sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.clients.sasl.oauthbearer.jwks.endpoint.url": "file:///j.json",
            },
            Flags(),
            False,
            "listener.name.clients.sasl.oauthbearer.jwks.endpoint.url: the sasl.oauthbearer.* "
            "settings are one for every listener and for gRPC's bearer tokens: give "
            "sasl.oauthbearer.jwks.endpoint.url without the listener.name.clients. prefix",
        ),
        ({"kafka.upstream.security.protocol": "SSL"}, Flags(), False, "no --kafka-upstream"),
        (
            {"kafka.upstream.security.protocol": "SASL_PLAINTEXT"},
            Flags(),
            True,
            "needs the coordinator's own credentials",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://h:1",
                "kafka.upstream.security.protocol": "SASL_PLAINTEXT",
                "kafka.upstream.sasl.jaas.config": 'x required username="a" password="b";',
            },
            Flags(),
            True,
            "kafka.upstream.sasl.passthrough=true",
        ),
        (
            {"kafka.upstream.sasl.passthrough": "true"},
            Flags(),
            True,
            "needs kafka.upstream.security.protocol=SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            {"listener.security.protocol.map": "GRPC:SASL_PLAINTEXT"},
            Flags(),
            False,
            "there is no way to",
        ),
        (
            {"listener.security.protocol.map": "METRICS:SASL_SSL"},
            Flags(),
            False,
            "METRICS is PLAINTEXT or SSL",
        ),
        (
            {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,HIGH"},
            Flags(tls_cert="s.pem"),
            False,
            "listener GRPC: ssl.cipher.suites: 'HIGH' is not a cipher suite",
        ),
        (
            {"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA999"},
            Flags(tls_cert="s.pem"),
            False,
            "'TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA999' is not a cipher suite",
        ),
        (
            {"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"},
            Flags(tls_cert="s.pem"),
            False,
            "TLS 1.3 suites cannot be chosen one by one",
        ),
        (
            {
                "ssl.cipher.suites": "ECDHE-RSA-AES128-GCM-SHA256",
                "ssl.enabled.protocols": "TLSv1.3",
            },
            Flags(tls_cert="s.pem"),
            False,
            "ssl.cipher.suites names no suite of the enabled protocols (TLSv1.3)",
        ),
        (
            {
                "kafka.upstream.security.protocol": "SSL",
                "kafka.upstream.ssl.cipher.suites": "NOPE",
            },
            Flags(),
            True,
            "kafka.upstream: ssl.cipher.suites: 'NOPE'",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(
    settings: dict[str, str], flags: Flags, upstream: bool, message: str
) -> None:
    with pytest.raises(SecurityConfigError) as refused:
        parse(settings, flags, upstream)
    assert message in str(refused.value)


TLS13 = "TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256,TLS_AES_128_GCM_SHA256"


def test_cipher_suites_by_kafkas_names_or_openssls() -> None:
    """``ssl.cipher.suites`` (per listener too): Kafka's (IANA) names become OpenSSL's; TLS 1.2
    gets exactly the suites listed; TLS 1.3 is on only when its suites are listed (all of them:
    Python's ssl cannot choose among them)."""
    settings = {
        "listeners": "A://h:1,B://h:2",
        "listener.security.protocol.map": "A:SSL,B:SSL",
        "ssl.keystore.location": "s.pem",
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, ECDHE-RSA-AES128-GCM-SHA256",
        "listener.name.b.ssl.cipher.suites": f"{TLS13},TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    }
    a, b = (e.tls for e in parse(settings).kafka)
    assert a is not None and b is not None
    assert a.cipher_suites == (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-RSA-AES128-GCM-SHA256",
    )
    context = server_context_of(a)
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES128-GCM-SHA256",
    ]
    assert (context.minimum_version, context.maximum_version) == (
        ssl.TLSVersion.TLSv1_2,
        ssl.TLSVersion.TLSv1_2,
    )
    context = server_context_of(b)
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-RSA-CHACHA20-POLY1305"
    ]
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    only13 = TlsFiles(certificate="s.pem", cipher_suites=tuple(TLS13.split(",")))
    assert only13.versions() == (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3, None)


@pytest.mark.parametrize(
    ("kafka", "openssl"),
    [
        ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"),
        ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
        ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"),
        ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"),
        ("TLS_ECDHE_RSA_WITH_ARIA_128_GCM_SHA256", "ECDHE-ARIA128-GCM-SHA256"),
        ("TLS_DHE_RSA_WITH_CAMELLIA_256_CBC_SHA256", "DHE-RSA-CAMELLIA256-SHA256"),
        ("ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
    ],
)
def test_kafka_suite_names_are_openssls(kafka: str, openssl: str) -> None:
    assert openssl_suite(kafka) == openssl
    assert cipher_suites([kafka]) == ([openssl], [])  # and OpenSSL has it


def server_context_of(files: TlsFiles) -> ssl.SSLContext:
    """The context a listener would build from ``files`` (without reading its files)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    set_versions(context, files)
    return context
