"""The gRPC server's options, by grpc-core's channel-argument names, for both our servers.

One set of options configures the default server (``h2grpc.py``) and grpc.aio (``--grpc-transport
grpcio`` and the front ends of ``--grpc-processes``), so that a client is treated the same
whichever process the kernel gives its connection to. They are configuration names
(``--set grpc.keepalive_time_ms=60000``, a ``--config-file``), grpc-core's own; grpc.aio gets
them as its channel arguments (:meth:`GrpcOptions.grpc_aio_options`), our server reads them.

Defaults are grpc-core's server defaults except where a reason is given here (and in
docs/operations.md, "gRPC server options"):

* ``grpc.http2.lookahead_bytes`` 64 KiB with ``grpc.http2.bdp_probe`` 0 (grpc-core: 4 MiB
  windows grown by bandwidth probes): a stream may hold 64 KiB its handler has not read;
* ``grpc.max_metadata_size`` 16 KiB, the hard limit (grpc-core: 8 KiB, above which it refuses a
  random share): a call under the announced limit is never refused;
* ``grpc.keepalive_timeout_ms`` bounds how long a PING may wait for its acknowledgement in both
  servers (grpc-core 1.85's server waits ``grpc.http2.ping_timeout_ms``, 60 s, and does not use
  it): the smaller of the two applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

INFINITE_MS = (1 << 31) - 1
"""grpc-core's "never" for a duration in milliseconds (INT_MAX)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GrpcOptions:
    """grpc-core's server options (docs/operations.md has the table of what each does)."""

    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: int = 0
    http2_ping_timeout_ms: int = 60_000
    http2_min_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_idle_ms: int = INFINITE_MS
    max_connection_age_ms: int = INFINITE_MS
    max_connection_age_grace_ms: int = INFINITE_MS
    max_concurrent_streams: int = INFINITE_MS  # no limit, as grpc-core (see docs/operations.md)
    http2_lookahead_bytes: int = 65_535
    max_metadata_size: int = 16_384
    absolute_max_metadata_size: int = 16_384
    compression_enabled_algorithms_bitset: int = 0b111

    @property
    def ping_ack_timeout_ms(self) -> int:
        """How long a PING the server sent may wait for its acknowledgement."""
        return min(self.keepalive_timeout_ms, self.http2_ping_timeout_ms)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> GrpcOptions:
        """The options named in ``settings`` (grpc-core's names), the rest their defaults.
        ``ValueError`` with the name and its range for a bad value."""
        values: dict[str, int] = {}
        for name, value in settings.items():
            attr = ARG_NAMES.get(name)
            if attr is None:
                continue
            low, high = RANGES.get(attr, (0, INFINITE_MS))
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {value!r}") from None
            if not low <= number <= high:
                raise ValueError(f"{name} must be {low}..{high}, got {number}")
            values[attr] = number
        options = cls(**values)
        if options.max_metadata_size > options.absolute_max_metadata_size:
            raise ValueError(
                "grpc.max_metadata_size must not exceed grpc.absolute_max_metadata_size"
            )
        return options

    def grpc_args(self) -> dict[str, int]:
        """Every option by its grpc-core name (what ``from_settings`` reads back)."""
        return {ARG_OF[f.name]: getattr(self, f.name) for f in fields(self)}

    def grpc_aio_options(self) -> list[tuple[str, Any]]:
        """The same options as grpc.aio's channel arguments."""
        args: dict[str, Any] = dict(self.grpc_args())
        if self.max_concurrent_streams == INFINITE_MS:
            del args["grpc.max_concurrent_streams"]  # grpc-core announces no limit then
        # grpc-core's server waits this long for a PING's acknowledgement (see the module)
        args["grpc.http2.ping_timeout_ms"] = self.ping_ack_timeout_ms
        args["grpc.http2.bdp_probe"] = 0  # fixed windows (see the module)
        return list(args.items())


ARG_OF = {
    "keepalive_time_ms": "grpc.keepalive_time_ms",
    "keepalive_timeout_ms": "grpc.keepalive_timeout_ms",
    "keepalive_permit_without_calls": "grpc.keepalive_permit_without_calls",
    "http2_ping_timeout_ms": "grpc.http2.ping_timeout_ms",
    "http2_min_ping_interval_without_data_ms": "grpc.http2.min_ping_interval_without_data_ms",
    "http2_max_ping_strikes": "grpc.http2.max_ping_strikes",
    "max_connection_idle_ms": "grpc.max_connection_idle_ms",
    "max_connection_age_ms": "grpc.max_connection_age_ms",
    "max_connection_age_grace_ms": "grpc.max_connection_age_grace_ms",
    "max_concurrent_streams": "grpc.max_concurrent_streams",
    "http2_lookahead_bytes": "grpc.http2.lookahead_bytes",
    "max_metadata_size": "grpc.max_metadata_size",
    "absolute_max_metadata_size": "grpc.absolute_max_metadata_size",
    "compression_enabled_algorithms_bitset": "grpc.compression_enabled_algorithms_bitset",
}
"""Each option's grpc-core channel-argument name."""
ARG_NAMES = {arg: attr for attr, arg in ARG_OF.items()}
RANGES = {
    "keepalive_time_ms": (1, INFINITE_MS),
    "keepalive_permit_without_calls": (0, 1),
    "max_connection_idle_ms": (1, INFINITE_MS),
    "max_connection_age_ms": (1, INFINITE_MS),
    "max_concurrent_streams": (1, INFINITE_MS),
    "http2_lookahead_bytes": (1_024, INFINITE_MS),
    "max_metadata_size": (1_024, 1 << 20),  # a header list libnghttp2 keeps whole
    "absolute_max_metadata_size": (1_024, 1 << 20),
    "compression_enabled_algorithms_bitset": (0, 7),
}
"""Accepted values where grpc-core's (0..INT_MAX) are not ours."""
