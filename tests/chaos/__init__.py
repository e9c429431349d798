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
* ``kafka_fuzz.py`` does the same to the Kafka listener: mutated frames of every served API and
  version (huge, negative and null lengths, flipped, inserted and deleted bytes, truncations,
  unknown versions and keys), connections that pipeline and never read, and a member of another
  group that must be answered throughout; nothing may be logged above WARNING and the RSS must
  stay bounded. ``fuzz_kafka_decoder.py`` (Atheris, coverage-guided) and ``decode_child.py``
  (every message class, every offset) fuzz the decoder itself, always in a child process: the
  native decoder aborts on what it cannot allocate, and an abort must be a failed test, not a
  lost run. ``kafka_samples.py`` builds their requests with the codec.
* ``server.py`` starts the servers: plain subprocesses, or — to make hundreds of restarts cheap
  — children forked from a *fork server* that imported everything once (the child runs the
  same ``kip848 serve`` entry point, so it is the real server; only the interpreter start-up
  and imports are skipped).
* CI runs both at a bounded size (``tests/chaos/test_*.py``); ``bash scripts/soak`` runs them
  longer (``python -m chaos.killloop --help``, ``python -m chaos.fuzz --help`` from ``tests/``).
"""
