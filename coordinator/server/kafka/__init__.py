"""The Kafka binary protocol in front of the coordinator (``kip848 serve --kafka-listen``).

Real Kafka clients (librdkafka, the Java client, kafka-python, aiokafka) talk to the
coordinator here, over the same :class:`~coordinator.server.service.CoordinatorService` — the
same runtime, shards, store and state — as gRPC: a group joined over one protocol is visible and
usable over the other.

Rules:
* Group APIs are *served*, never forwarded (``apis.SERVED``): one coordinator per group id.
* With ``--kafka-upstream`` every other API the upstream broker offers is *forwarded*
  (``upstream/``): frames are copied as they are, except responses that name brokers, which
  are rewritten so that clients always come back through this listener.
* In front of a broker that cannot tell clients apart (no SASL pass-through), once ACLs exist
  the forwarded data requests are checked per partition against the topic ACLs here, as a
  broker checks them (``topic_guard.py``; fetch sessions: ``fetch_guard.py``), and every other
  forwarded API by its rule (``admin_guard.py``, ``txn_guard.py``, ``describe_partitions.py``):
  what the client may not have is answered here and never forwarded.
* With an upstream the topic registry follows the broker's metadata
  (``upstream/topic_feed.py``) and the topic RPCs go to the broker; without one
  (coordinator-only mode) Metadata comes from the topic registry and the data APIs are not
  offered.
* The operator tools' log offsets (``AdminService.ListOffsets``) are asked of the upstream's
  partition leaders (``upstream/log_offsets.py``), over connections of their own.
* ``wire.py`` is the only module that touches the codec library (kio); ``convert.py`` the only
  one that maps Kafka messages to the service layer's dataclasses; ``listener.py`` owns
  connections: framing, per-connection response order, limits and Kafka's answers to bad input;
  ``served.py`` the requests served here (what is served, in which versions, and how).
"""
