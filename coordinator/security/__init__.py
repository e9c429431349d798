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
* ``CoordinatorService.scram_credential(user, mechanism)`` — the stored credential the SASL
  servers check against (:meth:`.metadata.SecurityMetadata.scram_credential`).

The model and the decisions:

* :mod:`.acls` — Kafka's ACL model: resource types, pattern types, operations, permissions
  (Kafka's numbers), bindings and filters, validation with Kafka's messages.
* :mod:`.metadata` — ACLs and SCRAM credentials as records (``AccessControlEntry``,
  ``UserScramCredential``): replay, Kafka's handlers for CreateAcls/DeleteAcls/DescribeAcls and
  Alter/DescribeUserScramCredentials; a component of the cluster-level state machine (the
  topic registry's undo log and load: ``coordinator.factory.new_cluster``).
* :mod:`.authorizer` — Kafka's StandardAuthorizer rules (``super.users``,
  ``allow.everyone.if.no.acl.found``, DENY wins, implied DESCRIBE), decisions cached per
  principal and resource until the ACLs change; refusals reported through ``on_refused``.
* :mod:`.acl_index` — the ACLs' index the authorizer decides over: built whole once where
  the ACLs are loaded, then kept in step as ACL records are replayed (copy on write: an index
  handed out is never changed).
* :mod:`.ssl_principal` — ``ssl.principal.mapping.rules`` for certificate subjects.

Which request needs what is the server's (``coordinator/server/authorization.py``).
"""
