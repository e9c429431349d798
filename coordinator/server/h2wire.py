"""gRPC on HTTP/2, what the bytes say, for our server (``h2grpc.py``): a request's headers read
once (its path, deadline, encoding, metadata and the header list's size), the refusals in
grpc-core's words (metadata over its limits, encodings it does not take, messages that do not
inflate), the answer's headers, and the small encodings of the gRPC over HTTP/2 spec. Pure: no
I/O, no connection state; the connection (``h2conn.py``) decides what to do with it."""

from __future__ import annotations

import base64
import math
import random
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from ngh2 import Configuration

OK = b"0"
TRAILERS_ONLY = ((b":status", b"200"), (b"content-type", b"application/grpc"))
ENCODINGS = ("identity", "deflate", "gzip")
"""grpc-core's compression algorithms, in the order of their bits in
``grpc.compression_enabled_algorithms_bitset``."""
WBITS = {"deflate": zlib.MAX_WBITS, "gzip": zlib.MAX_WBITS | 16}  # zlib, gzip framing
_KNOWN_ENCODINGS = frozenset(name.encode() for name in ENCODINGS)
CANCELLED_AT_STOP = "Cancelling all calls"  # grpc-core's words for calls past the stop's grace
RESERVED = frozenset(
    {
        "content-type",
        "te",
        "grpc-timeout",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-message-type",
        "grpc-previous-rpc-attempts",
    }
)
"""Headers that are the protocol's, not metadata the handler sees."""
MAX_TIMEOUT_VALUE = 1_000_000_000
"""grpc-core takes ``grpc-timeout`` values up to this (the spec: 8 digits); larger: no deadline."""
MAX_TIMEOUT_DIGITS = len(str(MAX_TIMEOUT_VALUE))
_TIMEOUT_UNITS = {b"H": 3600.0, b"M": 60.0, b"S": 1.0, b"m": 1e-3, b"u": 1e-6, b"n": 1e-9}
_GRPC_CORE_KEY_ORDER = {
    key: rank
    for rank, key in enumerate(
        (
            b":path",
            b":authority",
            b":method",
            b":status",
            b":scheme",
            b"content-type",
            b"te",
            b"grpc-encoding",
            b"grpc-internal-encoding-request",
            b"grpc-accept-encoding",
            b"grpc-status",
            b"grpc-timeout",
            b"grpc-previous-rpc-attempts",
            b"grpc-retry-pushback-ms",
            b"user-agent",
            b"grpc-message",
            b"host",
        )
    )
}
"""The keys grpc-core's metadata batch knows, in its order; the others follow as they came."""


# libnghttp2's configuration of the server's connections (``h2conn.py``).
HEADER_LIST_CAP = 1 << 20
"""Past this a header list ends its connection (libnghttp2 keeps no more of it); below it, one
over the announced limit ends only its call. libnghttp2 also caps one field at 64 KiB."""
MAX_CONTINUATIONS = 64  # CONTINUATION frames after a HEADERS frame: 1 MiB in 16 KiB frames
U64_MAX = (1 << 64) - 1
SERVER_CONFIG = Configuration(
    # nghttp2's defences against floods stay on but for its limit on the client's RST_STREAMs
    # (GOAWAY past 1,000 at once): grpc-core has none, and a client whose calls all pass their
    # deadline together sends as many; what a read starts is bounded (h2conn.READ_BUDGET)
    # instead. A connection may carry many calls at once.
    peer_max_concurrent_streams=1 << 16,
    auto_window_update=False,  # windows are given back as handlers consume (h2flow.py)
    max_inbound_header_list_size=HEADER_LIST_CAP,
    max_inbound_header_count=HEADER_LIST_CAP // 32,  # every field counts 32 bytes more
    max_continuations=MAX_CONTINUATIONS,
    stream_reset_rate_limit=(U64_MAX, U64_MAX),  # none (docs/operations.md)
)
"""libnghttp2's configuration of each server connection."""


class Refused(Exception):
    """The call is answered with this status now (grpc-core's code and words)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


@dataclass(slots=True)
class RequestHeaders:
    """What a request's header list says."""

    path: str = ""
    method: bytes = b""
    te: bytes | None = None
    content_type: bytes = b""
    timeout: float | None = None  # seconds (math.inf: no deadline)
    encoding: bytes | None = None
    metadata: list[tuple[str, Any]] = field(default_factory=list)
    unparsable: str = ""
    """grpc-core's words for the first field it cannot parse, in their order: a ``grpc-timeout``,
    a ``grpc-encoding`` it does not know, a ``-bin`` value that is not base64 ("": none)."""
    size: int = 0  # RFC 9113's size of the header list
    too_large: str = ""  # why it is over grpc-core's hard metadata limit ("" if it is not)


GRPC_CONTENT_TYPE = b"application/grpc"


def is_grpc(content_type: bytes) -> bool:
    """A gRPC request's ``content-type``: ``application/grpc``, alone or followed by ``+`` (a
    message format: ``+proto``, ``+json``) or ``;`` (parameters), as the gRPC over HTTP/2 spec
    writes it and grpc-go and grpc-java check it (case-sensitive, as they do). Anything else
    (``application/grpcx``, ``application/grpc-web``, ``text/plain``, none) is not gRPC."""
    n = len(GRPC_CONTENT_TYPE)
    return content_type.startswith(GRPC_CONTENT_TYPE) and content_type[n : n + 1] in (
        b"",
        b"+",
        b";",
    )


def read_headers(headers: Sequence[tuple[bytes, bytes]], hard_limit: int) -> RequestHeaders:
    """One pass over a request's header list (``hard_limit``: grpc-core's hard metadata limit,
    announced as SETTINGS_MAX_HEADER_LIST_SIZE)."""
    out = RequestHeaders()
    metadata = out.metadata
    size = 0
    for index, (name, value) in enumerate(headers):
        size += len(name) + len(value) + 32
        if size > hard_limit and not out.too_large:  # named at the field that passed it
            out.too_large = _over_hard_limit(size, headers, index, hard_limit)
        if name[:1] == b":":
            if name == b":path":
                out.path = value.decode("utf-8", "replace")
            elif name == b":method":
                out.method = value
            continue
        key = name.decode("latin-1")
        if key == "content-type":
            out.content_type = value
        elif key == "grpc-timeout":
            out.timeout = parse_timeout(value)
            if out.timeout is None and not out.unparsable:
                out.unparsable = "Error parsing 'grpc-timeout' metadata"
        elif key == "grpc-encoding":
            out.encoding = value
            if value not in _KNOWN_ENCODINGS and not out.unparsable:
                out.unparsable = "Error parsing 'grpc-encoding' metadata"
        elif key == "te":
            out.te = value
        elif key.endswith("-bin"):
            try:
                metadata.append((key, b64decode(value)))
            except ValueError:
                if not out.unparsable:
                    out.unparsable = f"Error parsing '{key}' metadata: illegal base64 encoding"
        elif key not in RESERVED:
            metadata.append((key, metadata_text(value)))
    out.size = size
    return out


def metadata_text(value: bytes) -> str:
    """A metadata value as grpc.aio hands it to a handler: UTF-8, or Latin-1 if it is not."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.decode("latin-1")


def malformed(request: RequestHeaders) -> bool:
    """Not a gRPC request as grpc-core's server takes one: a method other than POST, or no
    ``te: trailers`` (libnghttp2 already resets a ``te`` of anything else). grpc-core answers it
    with RST_STREAM INTERNAL_ERROR and no status."""
    return request.method != b"POST" or request.te != b"trailers"


def _over_hard_limit(
    size: int, headers: Sequence[tuple[bytes, bytes]], index: int, hard_limit: int
) -> str:
    """grpc-core's words for a header list that passes its hard limit at field ``index``
    (``size`` bytes so far): a value longer than the limit by itself, or the size so far and the
    fields that made it."""
    value = headers[index][1]
    if len(value) > hard_limit:
        return (
            f"received metadata size exceeds hard limit (value length {len(value)} vs. "
            f"{hard_limit})"
        )
    return f"received metadata size exceeds hard limit ({size} vs. {hard_limit});  " + _field_sizes(
        headers[: index + 1]
    )


def over_soft_limit(
    size: int, headers: Sequence[tuple[bytes, bytes]], soft_limit: int, hard_limit: int
) -> str:
    """Between grpc-core's soft and hard limits a share of calls, rising linearly from none at
    the soft limit to all at the hard one, is refused: why, or "" if this one is not."""
    if random.random() >= (size - soft_limit) / (hard_limit - soft_limit):
        return ""
    return f"received metadata size exceeds soft limit ({size} vs. {soft_limit});  " + (
        _field_sizes(headers)
    )


def unread_over(unread: int, limit: int) -> str:
    """Why a call is refused when its connection holds too much of requests no call has read
    (``h2flow.Windows``)."""
    return (
        "Request data this connection sent and no call has read is over the limit "
        f"({unread} vs. {limit})"
    )


def _field_sizes(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """``name:SIZEB`` for each field, in grpc-core's order (its list in metadata refusals)."""
    last = len(_GRPC_CORE_KEY_ORDER)
    ordered = sorted(headers, key=lambda f: _GRPC_CORE_KEY_ORDER.get(f[0], last))
    return " ".join(f"{n.decode('latin-1')}:{len(n) + len(v) + 32}B" for n, v in ordered)


def request_wbits(encoding: bytes | None, enabled: int) -> int | None:
    """The zlib framing of a request's ``grpc-encoding`` (None: not compressed); ``Refused`` as
    grpc-core refuses an encoding it does not know, or knows but was told not to take
    (``enabled``: ``grpc.compression_enabled_algorithms_bitset``)."""
    if encoding is None or encoding == b"identity":
        return None
    algorithm = encoding.decode("latin-1")
    if algorithm not in WBITS:
        raise Refused(grpc.StatusCode.INTERNAL, "Error parsing 'grpc-encoding' metadata")
    if not enabled & (1 << ENCODINGS.index(algorithm)):
        raise Refused(
            grpc.StatusCode.UNIMPLEMENTED, f"Compression algorithm '{algorithm}' is disabled."
        )
    return WBITS[algorithm]


def accept_encoding(enabled: int) -> bytes:
    """``grpc-accept-encoding`` for the algorithms ``enabled``."""
    return ", ".join(n for i, n in enumerate(ENCODINGS) if enabled & (1 << i)).encode()


def decompress(wbits: int, data: bytes, limit: int) -> bytes:
    """One gzip/deflate message, at most ``limit`` bytes of it (``Refused`` otherwise, with
    grpc-core's status and words)."""
    inflater = zlib.decompressobj(wbits)
    try:
        message = inflater.decompress(data, limit + 1)
    except zlib.error:
        raise Refused(grpc.StatusCode.INTERNAL, "Decompression failed due to zlib error") from None
    if len(message) > limit:
        raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max")
    if not inflater.eof or inflater.unused_data:
        raise Refused(grpc.StatusCode.INTERNAL, "Decompression failed due to zlib error")
    return message


def percent_encode(text: str) -> bytes:
    """``grpc-message``: UTF-8, bytes outside printable ASCII (and ``%``) as ``%XX``."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte != 0x25:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def status_trailers(code: grpc.StatusCode, details: str) -> tuple[tuple[bytes, bytes], ...]:
    status = OK if code is grpc.StatusCode.OK else str(code.value[0]).encode()
    return ((b"grpc-status", status), (b"grpc-message", percent_encode(details)))


def parse_timeout(value: bytes) -> float | None:
    """``grpc-timeout`` in seconds, read as grpc-core reads it; None if malformed. The spec's
    ``<1-8 digits><H|M|S|m|u|n>``, with grpc-core's leniency: spaces around the digits, values
    up to 1,000,000,000, and ``math.inf`` (no deadline) for larger ones, whatever follows
    (grpc-js sends ``100000000S`` for a deadline just under 10^8 seconds away)."""
    text = value.lstrip(b" ")
    end = 0
    while end < len(text) and 0x30 <= text[end] <= 0x39:
        end += 1
    if not end:
        return None
    digits = text[:end].lstrip(b"0")
    if len(digits) > MAX_TIMEOUT_DIGITS or int(digits or b"0") > MAX_TIMEOUT_VALUE:
        return math.inf
    unit = text[end:].strip(b" ")
    if unit not in _TIMEOUT_UNITS:
        return None
    return int(digits or b"0") * _TIMEOUT_UNITS[unit]


def format_peer(address: Any) -> str:
    """grpc's peer string: ``ipv4:HOST:PORT`` or ``ipv6:[HOST]:PORT``."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        if host.startswith("::ffff:") and "." in host:  # IPv4 on a dual-stack socket
            host = host[7:]
        if ":" in host:
            return f"ipv6:[{host}]:{port}"
        return f"ipv4:{host}:{port}"
    return f"unix:{address}" if address else ""


def client_host(address: Any) -> str:
    """The peer's address as Kafka shows a ClientHost and ACLs name hosts (``/127.0.0.1``,
    ``/::1``; an IPv4 client of a dual-stack socket is its IPv4 address, as Java sees it): what
    ``services.client_host_of`` reads of grpc's peer string (:func:`format_peer`), worked out
    once per connection."""
    if isinstance(address, tuple) and len(address) >= 2:
        host = str(address[0])
        if host.startswith("::ffff:") and "." in host:
            host = host[7:]
        return "/" + host
    return f"/unix:{address}" if address else ""


def b64decode(value: bytes) -> bytes:
    """A ``-bin`` metadata value (base64, padding optional)."""
    return base64.b64decode(value + b"=" * (-len(value) % 4), validate=True)


SETTINGS_FRAME = 0x4
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3


def with_stream_limit(out: bytes, limit: int) -> bytes:
    """A server connection's first bytes, its SETTINGS frame first, with
    SETTINGS_MAX_CONCURRENT_STREAMS ``limit`` added: announced to the client but kept from
    libnghttp2, which would end the connection on a stream over it, where grpc-core refuses that
    stream alone (``h2flow.StreamLimit``)."""
    length = int.from_bytes(out[:3], "big")
    if len(out) < 9 + length or out[3] != SETTINGS_FRAME or out[4] or any(out[5:9]):
        raise ValueError("not a SETTINGS frame")
    entry = SETTINGS_MAX_CONCURRENT_STREAMS.to_bytes(2, "big") + limit.to_bytes(4, "big")
    end = 9 + length
    return (length + 6).to_bytes(3, "big") + out[3:end] + entry + out[end:]
