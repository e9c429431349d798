"""The servers: one service layer, two protocols.

Rules: no protocol logic in a codec. ``service.py`` defines every RPC once (request dataclass ->
runtime -> response dataclass, typed errors answered in each RPC's Kafka shape, rules that
depend on a Kafka API version keyed on ``Caller.api_version``). ``services.py`` + ``convert.py``
are the gRPC codec (``convert.py`` is the only place proto messages meet dataclasses);
``kafka/`` is the Kafka-protocol codec and listener (docs/kafka.md); ``codec.py`` maps once
what both codecs write (the proto messages mirror Kafka's field names). ``app.py`` wires both
around one runtime (health, reflection, message size, graceful shutdown) and is what
``kip848 serve`` runs; ``forwarding.py``/``frontend.py`` add gRPC front-end processes.
"""
