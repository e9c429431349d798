"""Server-side assignors: who gets which partitions (KIP-848 "Assignment Process").

Rules
-----
* One call: ``assign(group_spec, topics) -> GroupAssignment`` (:mod:`assignors.api`). Inputs are
  read-only; the call is pure (no IO, clock or randomness) and deterministic - the same input
  values give the same result whatever the ``hash()`` seed or mapping order.
* Failure is :class:`~assignors.api.PartitionAssignorError` (e.g. a subscription to a topic
  missing from ``topics``). The coordinator answers UNKNOWN_SERVER_ERROR and changes nothing.
* Optional extra: ``assign_changes(group_spec, topics)`` (:class:`~assignors.api.
  IncrementalPartitionAssignor`) returns only the members whose assignment changes, from the
  spec's :class:`~assignors.api.TargetSummary`, or None to be called through ``assign``. The
  coordinator calls it first; it must agree with ``assign`` (the kit checks it).
* The coordinator installs nothing it has not checked with
  :func:`assignors.validation.check_assignment`: every member present and no stranger, each
  partition at most once, only to subscribers, only existing partitions, ``frozenset`` sets.

Theory
------
``uniform`` (:mod:`assignors.uniform`, the default) is balanced first, then sticky. Members with
equal subscriptions form a class; a homogeneous group is one class, where sizes differ by at
most one and extra partitions go to members that already hold them. Between classes, topic
shares are water-filled and re-split until no partition - nor chain of partitions across topics
- can move to a member two or more partitions lighter. Only then are partitions handed out,
keeping every member's current partitions up to its quota and moving the rest in contiguous
runs. In a homogeneous group its ``assign_changes`` finds the members above and below their new
quota by binary search in the summary's load buckets and visits only those: a join costs what
moves. ``range`` (:mod:`assignors.range`) gives contiguous per-topic ranges recomputed from
scratch, static members first by instance id, as Kafka 4.0 does. Both are rack-aware
(:mod:`assignors.racks`): once balance has fixed how many partitions each member gets, they
are placed for the most partitions read in the member's own rack (an exact plan on counts of
partitions by rack), then for stickiness; with no rack information the result is exactly
Kafka's.

Where things are
----------------
``api`` the SPI (owned by the core); ``uniform``, ``range`` the built-ins, with ``balance``
(uniform's class-level split), ``racks`` (rack-aware placement) and ``plan`` (its exact
plan on counts); ``validation`` the
coordinator's gate; ``summary`` computes a TargetSummary from scratch (the reference the
coordinator's is tested against, and what the kit gives ``assign_changes``); ``registry``
resolves ``group.consumer.assignors`` (built-in names, entry points of group
``kip848.assignors``, ``module:Class``); ``cli`` is ``kip848 assignors``;
``conformance`` is the kit plugin authors run (``python -m assignors.conformance NAME``, or the
``assignor_conformance`` pytest fixture). docs/assignors.md is the plugin author's guide.

Importing this package imports nothing else (the pytest plugin and the CLI rely on that).
"""
