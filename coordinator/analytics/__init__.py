"""Analytics over the record journal: Parquet export, Spark jobs, the HTML report, a workload
generator (``kip848 analytics``; docs/analytics.md).

Rules and theory of operation:

* **Read-only on stores.** The export opens a store with ``SqliteRecordStore(read_only=True)``
  (no writer lock, one WAL snapshot), so it is safe beside a running server. Records are decoded
  with the core's public codec (``codec.decode``) and record types are named after the key
  classes (Kafka's names); nothing here depends on the core's internals.
* **One schema, versioned.** :mod:`.schema` is the single definition of the Parquet columns (the
  export writes it, the docs list it, a test checks both agree). Timestamps are microseconds
  (Spark 4 refuses nanosecond Parquet timestamps).
* **Relational metrics, independent check.** :mod:`.metrics` computes every metric with the
  DataFrame API (window functions over each group's records in offset order, array set
  operations, joins) — consumer groups in :mod:`.consumer`, classic groups in :mod:`.classic`,
  migrations in :mod:`.migrations` — so it scales out and runs the same on ``local[*]`` and on
  a cluster; results never depend on partitioning (collected lists are sorted). The tests
  compare it with a separately written sequential Python calculation. Only the what-ifs run
  Python on the executors, one group at a time: the assignor what-if (:mod:`.whatif`, because
  assignors are Python) and the migration what-if (:mod:`.migration_whatif`, replaying a
  classic group's history through the real core: :mod:`.replay`).
* **Bounded driver.** Nothing large is collected: tables are written by the executors, and the
  HTML report (:mod:`.html`) brings back only bounded aggregates (a few thousand rows at most).
* **Loopback by default.** :mod:`.spark` sets ``SPARK_LOCAL_IP=127.0.0.1`` and binds the driver
  to loopback for local and loopback masters (this machine's hostname resolves to loopback but
  Spark would otherwise pick another interface).
* **Real runtime for workloads.** :mod:`.workload` drives ``CoordinatorRuntime`` on the SQLite
  store with a ``ManualClock``: records carry virtual time and a seed reproduces a store exactly.

Modules: :mod:`.schema`, :mod:`.export`, :mod:`.spark`, :mod:`.common`, :mod:`.consumer`,
:mod:`.classic`, :mod:`.migrations`, :mod:`.metrics`, :mod:`.whatif`, :mod:`.replay`,
:mod:`.migration_whatif`, :mod:`.report`, :mod:`.report_data`, :mod:`.plots`, :mod:`.html`,
:mod:`.clients`, :mod:`.workload`; the CLI is ``coordinator/cli/analytics.py``.
"""
