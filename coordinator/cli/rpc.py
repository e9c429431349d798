"""gRPC plumbing of the client sub-commands: the channel, one call with the CLI's deadline and
metadata, and a failed call reported with a hint.

A coordinator that has just started answers COORDINATOR_LOAD_IN_PROGRESS until its store is
loaded; ``call`` retries such an answer (back-off 50 ms doubling to 1 s) until ``--timeout``
runs out, as Kafka's admin client retries retriable errors within its timeout. Only an answer
in which nothing was done is retried: the top-level error, or every entry's error, is
COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

from coordinator.cli.argtypes import positive_seconds
from coordinator.cli.errors import UsageError

DEFAULT_LISTEN = "127.0.0.1:9094"
LOAD_IN_PROGRESS = 14
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0


def add_client_flags(p: argparse.ArgumentParser) -> None:
    """The flags every client action takes."""
    p.add_argument("--bootstrap-server", default=DEFAULT_LISTEN, metavar="HOST:PORT")
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties: security.protocol (SSL, SASL_SSL, ...), "
        "ssl.truststore.location, ssl.keystore.location (PEM), ssl.key.password, "
        "sasl.oauthbearer.token.endpoint.url=file:///path/token.jwt (docs/security.md)",
    )
    p.add_argument("--tls-ca", metavar="FILE", help="TLS: PEM CAs the server must chain to")
    p.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="mutual TLS: PEM client certificate (it may hold the key)",
    )
    p.add_argument("--tls-key", metavar="FILE", help="mutual TLS: PEM key, if not in --tls-cert")
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="send 'authorization: Bearer <JWT>' with the JWT in FILE (re-read for each call)",
    )
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up after this long, retrying while the coordinator loads (default 10)",
    )


def channel(args: argparse.Namespace, address: str | None = None) -> Any:
    """The channel to ``--bootstrap-server`` (or ``address``, another node of the same
    cluster): TLS and a bearer token as the flags and ``--command-config`` say
    (:func:`security_of`)."""
    import grpc

    security = security_of(args)
    # Take any answer the server sends (it bounds them by its --max-message-bytes); gRPC's
    # client default of 4 MiB would refuse a large ListGroups the server was willing to send.
    options = [("grpc.max_receive_message_length", -1)]
    if security.tls:
        from kip848.client import tls_credentials

        try:
            credentials = tls_credentials(security.ca, security.cert, security.key)
        except OSError as exc:
            raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
        except ValueError as exc:  # not PEM, an encrypted key, a key of another certificate
            raise UsageError(f"TLS: {exc}") from None
        ch = grpc.secure_channel(address or args.bootstrap_server, credentials, options=options)
    else:
        ch = grpc.insecure_channel(address or args.bootstrap_server, options=options)
    if security.token_file is None:
        return ch
    return grpc.intercept_channel(ch, _bearer_token(_token_source(security.token_file)))


def _token_source(path: str) -> Any:
    """The token file's reader (``kip848.client.token_file``), read once here: a file that
    cannot be read or holds no token is a clear usage error before any call, not a traceback
    or a call the server resets (an empty ``Bearer`` header is not a valid HTTP/2 field)."""
    from kip848.client import token_file

    source = token_file(path)
    try:
        first = source()
    except OSError as exc:
        raise UsageError(f"--token-file: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--token-file: {path} is not a text file (a JWT)") from None
    if not first:
        raise UsageError(f"--token-file: {path} is empty (it must hold a JWT)")
    return source


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    token_file: str | None = None


def security_of(args: argparse.Namespace) -> ClientSecurity:
    """TLS and token from ``--command-config`` (Kafka's client names), then the flags."""
    props: dict[str, str] = {}
    if getattr(args, "command_config", None):
        from coordinator.cli.config import read_properties

        props = read_properties(args.command_config)
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(f"{args.command_config}: security.protocol={protocol} is not known")
    for name in ("ssl.keystore.type", "ssl.truststore.type"):
        if props.get(name, "PEM").upper() != "PEM":
            raise UsageError(f"{args.command_config}: {name}: only PEM files are read")
    if props.get("sasl.mechanism", "OAUTHBEARER").upper() != "OAUTHBEARER":
        raise UsageError(
            f"{args.command_config}: sasl.mechanism={props['sasl.mechanism']}: over gRPC a client "
            "authenticates with a token (OAUTHBEARER) or a client certificate, never a password"
        )
    token = props.get("sasl.oauthbearer.token.endpoint.url")
    if token is not None:
        if not token.startswith("file://"):
            raise UsageError(
                f"{args.command_config}: sasl.oauthbearer.token.endpoint.url must be a "
                "file:///path URL of a token file"
            )
        token = token[len("file://") :]
    ca = getattr(args, "tls_ca", None) or props.get("ssl.truststore.location")
    cert = getattr(args, "tls_cert", None) or props.get("ssl.keystore.location")
    key = getattr(args, "tls_key", None)
    if props.get("ssl.key.password"):
        raise UsageError(
            f"{args.command_config}: ssl.key.password: give the client an unencrypted key file "
            "(grpc reads no encrypted keys)"
        )
    tls = protocol in ("SSL", "SASL_SSL") or bool(ca or cert)
    return ClientSecurity(
        tls=tls,
        ca=ca,
        cert=cert,
        key=key,
        token_file=getattr(args, "token_file", None) or token,
    )


def _bearer_token(token: Any) -> Any:
    """A client interceptor adding ``authorization: Bearer <token()>`` to every call."""
    import grpc

    def with_token(details: Any) -> Any:
        metadata = [*(details.metadata or ()), ("authorization", f"Bearer {token()}")]
        return details._replace(metadata=metadata)

    class BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(with_token(details), request)

        def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(with_token(details), request)

    return BearerToken()


def call(fn: Any, request: Any, args: argparse.Namespace) -> Any:
    """One RPC, retried while the coordinator is loading, within ``--timeout`` in all."""
    import grpc

    try:
        return retried(fn, request, args)
    except grpc.RpcError as exc:
        raise SystemExit(rpc_failed(args, exc)) from None


def retried(
    fn: Any, request: Any, args: argparse.Namespace, codes: tuple[int, ...] = (LOAD_IN_PROGRESS,)
) -> Any:
    """One RPC, asked again while its answer gives one of ``codes`` for the whole request (the
    coordinator loading, unless told otherwise), within ``--timeout`` in all: the last answer.
    A gRPC error is raised as it is."""
    deadline = time.monotonic() + args.timeout
    pause = RETRY_FIRST_S
    for _attempt in range(10_000):
        left = deadline - time.monotonic()
        response = fn(request, timeout=max(left, 0.001), metadata=(("client-id", "kip848-cli"),))
        left = deadline - time.monotonic()
        if not nothing_done(response, codes) or left <= pause:
            return response
        time.sleep(pause)
        pause = min(pause * 2, RETRY_MAX_S)
    return response


def nothing_done_while_loading(message: Any) -> bool:
    """The answer says COORDINATOR_LOAD_IN_PROGRESS for the whole request: the top-level error,
    or (recursively) every entry of its lists, e.g. each partition of an OffsetCommit."""
    return nothing_done(message, (LOAD_IN_PROGRESS,))


def nothing_done(message: Any, codes: tuple[int, ...]) -> bool:
    """The answer gives one of ``codes`` for the whole request (the top-level error, or every
    entry of its lists)."""
    fields = message.DESCRIPTOR.fields_by_name
    if "error_code" in fields and message.error_code in codes:
        return True
    if "error_code" in fields and message.error_code:
        return False
    entries = [
        entry
        for field in message.DESCRIPTOR.fields
        if field.message_type is not None and field.is_repeated
        for entry in getattr(message, field.name)
    ]
    return bool(entries) and all(nothing_done(e, codes) for e in entries)


def _unavailable_hint(args: argparse.Namespace, details: str) -> str:
    """What to check when no connection could be made, by what gRPC says went wrong."""
    where = args.bootstrap_server
    if "WRONG_VERSION_NUMBER" in details:
        return (
            f"the server at {where} does not speak TLS: leave out --tls-ca/--tls-cert "
            "(and security.protocol=SSL in --command-config) for a plaintext server"
        )
    if "CERTIFICATE_VERIFY_FAILED" in details or "handshake" in details.lower():
        return (
            f"the TLS handshake with {where} failed: --tls-ca (ssl.truststore.location) must "
            "hold the CA the server's certificate chains to, for the address you connect to; "
            "with --tls-cert, the server must trust its CA"
        )
    if "Socket closed" in details and not security_of(args).tls:
        return (
            f"{where} closed the connection: if it serves TLS, give --tls-ca (or "
            "security.protocol=SSL in --command-config); else is it a kip848 gRPC port?"
        )
    return f"is `kip848 serve` running and listening on {where}? (--bootstrap-server HOST:PORT)"


def rpc_failed(args: argparse.Namespace, exc: Any) -> int:
    import grpc

    print(f"kip848: {args.bootstrap_server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
    if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
        print(
            "  hint: the server wants a bearer token (--token-file, or "
            "sasl.oauthbearer.token.endpoint.url in --command-config) or a client certificate "
            "(--tls-cert)",
            file=sys.stderr,
        )
    elif exc.code() == grpc.StatusCode.UNAVAILABLE:
        print(f"  hint: {_unavailable_hint(args, exc.details() or '')}", file=sys.stderr)
    elif exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        print(
            f"  hint: no answer within {args.timeout} s; raise --timeout or check the server",
            file=sys.stderr,
        )
    return 1
