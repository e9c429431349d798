"""The pure core: KIP-848 consumer groups as a deterministic, record-driven state machine.

Rules
* No IO, no asyncio, no grpc, no wall clock, no randomness. Time arrives as ``now_ms``; fresh
  ids come from an injected ``IdSource``. A test enforces the imports.
* Records are the only way state changes. A handler validates (raising a typed
  ``CoordinatorError`` that carries a Kafka code, before changing anything), then emits records;
  each is replayed at once through ``replay`` — the same code that loads a store — and an error
  after that point rolls the shard back (``UndoLog``). The result carries the records, the
  response, keyed timer operations and the groups whose target assignment is to be computed
  outside the event loop (``offloads``: the core decides *when*, the runtime runs the assignor
  in a worker and hands the outcome back as a command, ``ConsumerGroups.apply_assignment``).
* Loading = replaying stored records in order; ``on_loaded`` re-arms timers.

* A shard is composed of components, each owning its state and its record types
  (``components``): consumer groups, offsets, group configs, and the classic groups that the
  legacy bridge plugs in through ``ClassicGroupSupport`` (the core never imports the bridge).
  The shard routes records by :class:`~.records.RecordType`, timers by kind, commands by
  component. Shards are built by ``coordinator.factory.new_shard`` only.
* The core does not log: handlers return ``LogEvent`` values (``events``) with their result,
  written by the runtime once the records are durable.

Reading order: ``model`` (values) → ``records`` / ``codec`` → ``group`` (state + replay) →
``reconciliation`` (member state machine) → ``target_assignment`` → ``context`` and
``components`` (the seams) → ``consumer_groups``, ``offsets``, ``group_configs`` (the components)
→ ``shard`` (composition and routing) → ``topics`` (topic registry) → ``events``, ``timers``,
``timeline``, ``staging``, ``config``, ``errors``.
"""
