"""The Kafka listener's options (``listener.py``): its Kafka settings, parsed and checked at
start-up (``kip848 serve``: coordinator/cli/serve.py)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..conn_limits import ConnectionLimits

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
DEFAULT_QUEUED_MAX_REQUESTS = 500  # Kafka's queued.max.requests (per connection here)
DEFAULT_MAX_UNSENT_BYTES = 1024 * 1024  # kafka.connection.max.unsent.bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaFlow:
    """Per-connection limits (docs/kafka.md, "Per-connection limits"): while one is reached,
    the connection's reading is paused."""

    queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS
    """``queued.max.requests``: a connection's requests read and not yet answered, at most."""
    queued_max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """``queued.max.request.bytes``: a connection's requests read and waiting for their turn
    (behind a request being served), in bytes, at most (one is always read)."""
    max_unsent_bytes: int = DEFAULT_MAX_UNSENT_BYTES
    """``kafka.connection.max.unsent.bytes``: answers written and not yet taken by the client
    (or requests by the upstream) beyond which nothing more is read from the connection;
    reading resumes below a quarter of it."""

    NAMES = {
        "queued.max.requests": ("queued_max_requests", 1),
        "queued.max.request.bytes": ("queued_max_request_bytes", 1024),
        "kafka.connection.max.unsent.bytes": ("max_unsent_bytes", 1024),
    }
    """config name -> (field, least value)."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> KafkaFlow:
        """From the server's settings (config name -> value); ValueError naming the setting.
        ``queued.max.request.bytes=-1`` is Kafka's "no bound"."""
        values = {}
        for name, (field, least) in cls.NAMES.items():
            if name in settings:
                value = int(settings[name])
                if value == -1 and name == "queued.max.request.bytes":
                    value = sys.maxsize
                elif value < least:
                    raise ValueError(f"{name} must be at least {least}, got {value}")
                values[field] = value
        return cls(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaOptions:
    """The listener's options (docs/kafka.md: the table of its settings)."""

    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """``socket.request.max.bytes``."""
    idle_ms: int = DEFAULT_IDLE_MS
    """``connections.max.idle.ms``."""
    flow: KafkaFlow = KafkaFlow()
    limits: ConnectionLimits = ConnectionLimits()
    """``max.connections.per.ip``, its overrides, ``max.connections``: of every Kafka
    listener together, as of a broker's (``conn_limits.py``)."""
