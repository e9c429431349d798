"""Chaos: fuzzing and crash loops against real ``kip848 serve`` processes (#13).

Rules and theory of operation:

* ``fuzz.py`` drives a real server with seeded random requests to every RPC (generated from the
  protobuf descriptors, with field-aware pools of good, bad and borderline values, and member
  ids/epochs harvested from earlier answers so that deep paths are reached), plus undecodable
  bytes. Every answer must be a gRPC OK carrying only error codes that the RPC documents in
  its ``.proto`` comment (never UNKNOWN_SERVER_ERROR), or INVALID_ARGUMENT for undecodable
  bytes; every call must finish within its deadline; the server must not log a bug; and after
  a clean stop ``kip848 replay`` must accept the store.
* ``killloop.py`` runs a workload with acknowledged writes (offset commits with increasing
  offsets, topic creations) and SIGKILLs the server at a random moment, many times over the
  same store; after each restart everything acknowledged must be there (0 acknowledged writes
  lost) and the store must replay.
* ``server.py`` starts the servers: plain subprocesses, or — to make hundreds of restarts cheap
  — children forked from a *fork server* that imported everything once (the child runs the
  same ``kip848 serve`` entry point, so it is the real server; only the interpreter start-up
  and imports are skipped).
* CI runs both at a bounded size (``tests/chaos/test_*.py``); ``bash scripts/soak`` runs them
  longer (``python -m chaos.killloop --help``, ``python -m chaos.fuzz --help`` from ``tests/``).
"""
