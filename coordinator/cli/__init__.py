"""The ``kip848`` command (operator guide: docs/operations.md).

* ``serve`` (``serve.py``): run the coordinator (the flags of docs/proto.md; Kafka config names
  and defaults, from ``--server-properties``, ``--config-file`` and ``--set``: ``config.py``).
* ``topics create|list|delete|add-partitions`` (``topics.py``), ``groups list|describe|delete|
  validate-regex`` (``groups.py``) and ``reset-offsets|delete-offsets`` (``group_offsets.py``),
  ``configs describe|alter`` (``configs.py``): gRPC clients of a running server
  (``--bootstrap-server``, human tables or ``--output json``: ``output.py``; calls: ``rpc.py``).
  Errors print the Kafka error name, its message and a hint on stderr (``report.py``); an
  answer of COORDINATOR_LOAD_IN_PROGRESS is retried within ``--timeout`` (``rpc.py``).
* ``dump`` / ``replay`` (``dump_replay.py``): offline on a store (``--data-dir``): records in
  readable form; load into fresh shards, check, summarise (non-zero exit on a corrupt store).
* ``assignors`` and ``simulate``: delegated to ``assignors.cli`` and ``simulation.py``.

Rules: a sub-command is one module with ``register(commands)`` plus one entry in
``commands.SUBCOMMANDS``; modules import grpc, protobuf and the coordinator lazily (inside the
command), so ``kip848 --help`` stays fast; bad flags raise ``UsageError`` (one line on stderr,
exit 2); every number the CLI sends is checked against its Kafka type's range first
(``argtypes.py``: INT32 partitions and counts, INT64 offsets); a failure already reported raises
``CommandFailed`` or returns 1.

Exit codes: 0 ok, 1 failure (server unreachable, error answered, corrupt store), 2 usage or
configuration error.
"""

from coordinator.cli.commands import main

__all__ = ["main"]
