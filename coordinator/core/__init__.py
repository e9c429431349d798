"""The pure core: KIP-848 consumer groups as a deterministic, record-driven state machine.

Rules
* No IO, no asyncio, no grpc, no wall clock, no randomness. Time arrives as ``now_ms``; fresh
  ids come from an injected ``IdSource``. A test enforces the imports.
* Records are the only way state changes. A handler validates (raising a typed
  ``CoordinatorError`` that carries a Kafka code, before changing anything), then emits records;
  each is replayed at once through ``replay`` — the same code that loads a store — and an error
  after that point rolls the shard back (``UndoLog``). The result carries the records, the
  response and keyed timer operations.
* Loading = replaying stored records in order; ``on_loaded`` re-arms timers.

Reading order: ``model`` (values) → ``records`` / ``codec`` → ``group`` (state + replay) →
``reconciliation`` (member state machine) → ``target_assignment`` → ``shard`` (handlers) →
``topics`` (topic registry) → ``timers``, ``timeline``, ``config``, ``errors``.
"""
