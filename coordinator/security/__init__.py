"""Security: who a request is from, and what that principal may do (docs/security.md).

Rules: pure, like the core — no IO, no clock, no randomness (a salt is always given); the
transports (TLS, SASL, mTLS, tokens) live in the server and only hand over a principal.

The seam between the transports and the service layer:

* :mod:`.principal` — :class:`~.principal.KafkaPrincipal` (``User:NAME``, Kafka's string
  form), :data:`~.principal.ANONYMOUS` (``User:ANONYMOUS``) for a client that did not
  authenticate, :func:`~.principal.user`.
* ``coordinator.server.api.Caller.principal`` — every request's principal, ANONYMOUS unless
  the transport set another. The Kafka listener takes it from its connection
  (``KafkaConnection.set_principal``, after a successful SASL exchange or from a client
  certificate); the gRPC servicers from ``GrpcServicer.principal_of(context)``, a hook that
  answers ANONYMOUS until a transport installs its own (mTLS subject, bearer token).
* :mod:`.scram` — SCRAM-SHA-256/512 as Kafka computes and stores it (salted password,
  StoredKey, ServerKey, proof checks, user-name escapes): the one module for SCRAM math.
"""
