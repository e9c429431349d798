"""The upstream side of the Kafka listener (``--kafka-upstream``): everything that talks to
the broker the listener stands in front of.

* ``broker.py``: the upstream broker(s) — the coordinator's own client connections (TLS, its
  SASL sign-in), the client connections' requests forwarded and the answers that name brokers
  rewritten, a listener port per upstream broker.
* ``topic_feed.py``: the topic registry fed from the broker's Metadata; the topic RPCs sent to
  the broker.
* ``log_offsets.py``: ``AdminService.ListOffsets`` asked of each partition's leader.
* ``sasl_client.py``: the coordinator's own SASL sign-in (PLAIN, SCRAM).
* ``interfaces.py``: what the listener and this package know of each other (the listener sees
  the upstream as a ``Forwarder``; this package sees a client connection and the listener
  through two small protocols of its own and imports nothing of the listener).
"""

from .broker import METADATA_VERSION_CAP, Upstream, UpstreamClient, UpstreamError
from .interfaces import ClientConnection, Forwarder, NodePorts
from .log_offsets import UpstreamLogOffsets
from .topic_feed import DEFAULT_MAX_AGE_MS, TopicFeed

__all__ = [
    "ClientConnection",
    "DEFAULT_MAX_AGE_MS",
    "Forwarder",
    "METADATA_VERSION_CAP",
    "NodePorts",
    "TopicFeed",
    "Upstream",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamLogOffsets",
]
