"""Every Prometheus metric of the coordinator, defined once, in one registry.

Names follow Kafka's group-coordinator metrics (``group-coordinator-metrics``:
``GroupCoordinatorMetrics``, ``GroupCoordinatorRuntimeMetrics``) the Prometheus way: a
``kip848_`` prefix, snake case, base units (seconds), ``_total`` on counters, and labels where
Kafka has tags or one sensor per variant. docs/operations.md lists them with their Kafka names.

Hot-path rules (the target is at most 5% of steady heartbeat throughput for metrics and
tracing together, bench/observability.py):

* label children are bound once and kept (:class:`RequestSeries`, the per-shard lists):
  recording is a dict or list lookup plus ``observe``/``inc``, never ``labels(**dict)``; a
  request answered without error (nearly all) records its latency with no lookup at all
  (``RequestSeries.ok``);
* a histogram observation on the loop is one array append (:class:`LoopHistogram`); values are
  bucketed in bulk off the request path, in C-level passes, by a folder thread every second
  and by each scrape;
* values the coordinator already holds (group and member counts, offsets, load times, shard
  states) are read at scrape time by :class:`StateCollector`, on the event loop, never counted
  on every request;
* nothing here is imported on the request path when ``--metrics-listen`` is not given: the
  runtime and the service layer hold ``None`` instead of a :class:`CoordinatorMetrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Info,
    disable_created_metrics,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from coordinator.core.events import Cause

from .cluster_metrics import cluster_families
from .histograms import LoopHistogram, _LoopChild

log = logging.getLogger("kip848.metrics")

# No ``*_created`` series: they double the exposition and no dashboard or alert here uses them.
disable_created_metrics()

NAMESPACE = "kip848"

LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Seconds: 100 µs .. 10 s. A steady heartbeat takes well under a millisecond; a request
waiting on an fsync a few milliseconds."""

REBALANCE_BUCKETS = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
"""Seconds: a rebalance lasts at least one heartbeat interval per revoking member, and at most
about the rebalance timeout (default 5 minutes) before members are fenced."""

BATCH_RECORD_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

GROUP_SIZE_LABELS = ((10, "1-10"), (100, "11-100"), (1000, "101-1000"), (10000, "1001-10000"))
GROUP_SIZE_LARGEST = ">10000"


def group_size_label(members: int) -> str:
    """The ``group_size`` label of an assignment: a range, so the label set stays small."""
    for bound, label in GROUP_SIZE_LABELS:
        if members <= bound:
            return label
    return GROUP_SIZE_LARGEST


# Causes of a group epoch bump (label ``cause`` of kip848_consumer_group_rebalances_total): the
# core's own (coordinator.core.events.Cause), the primary one of each bump.
REBALANCE_CAUSES = tuple(c.value for c in Cause)

# Kinds of timers (label ``kind`` of kip848_timeouts_total): the core's and the bridge's timer
# kinds, with dashes made underscores.
TIMEOUT_KINDS = (
    "session",
    "rebalance",
    "classic_session",
    "classic_pending",
    "classic_join",
    "classic_initial_join",
    "classic_sync",
    "classic_member_join",
    "classic_member_sync",
)


@dataclass(slots=True, kw_only=True)
class StateCounts:
    """What the coordinator holds, counted on the event loop for one scrape."""

    groups: dict[tuple[str, str], int] = field(default_factory=dict)
    """(group type, state) -> groups."""
    members: dict[tuple[str, str], int] = field(default_factory=dict)
    """(group type, member type) -> members."""
    offsets: int = 0
    shards: dict[str, int] = field(default_factory=dict)
    """runtime state (loading, active, failed, closing) -> shards in it."""
    load_seconds: dict[int, float] = field(default_factory=dict)
    """shard -> seconds its load took (absent until loaded)."""
    load_records: dict[int, int] = field(default_factory=dict)
    frontends: dict[int, int] = field(default_factory=dict)
    """front-end index -> calls it forwarded (``--grpc-processes``)."""
    rack_local: dict[str, tuple[int, int]] = field(default_factory=dict)
    """group id -> (rack-local partitions, assigned partitions), for the groups where racks
    matter (:mod:`.racks`)."""
    partitions: dict[int, str] = field(default_factory=dict)
    """Among several nodes (docs/ha.md): coordinator partition -> its state on this node
    (``cluster_metrics.PARTITION_STATES``); empty for one node alone."""
    leader_epochs: dict[int, int] = field(default_factory=dict)
    """partition -> the leader epoch this node holds it at."""
    node: dict[str, Any] | None = None
    """Among several nodes: this node's ``reachable``, ``controller`` and counters
    (``heartbeats``, ``heartbeat_failures``, ``loads``, ``moves``, ``lost``), and
    ``expected_back_ms`` (node id -> how long its partitions still wait for it)."""


# The label values every set gauge exports, at 0 when nothing is in them, so that an alert on
# `== 0` can fire: the states of KIP-848 consumer groups (Kafka's ConsumerGroupState) and of
# classic groups (Kafka's ClassicGroupState), the member types by group type, the runtime's.
GROUP_STATES: dict[str, tuple[str, ...]] = {
    "consumer": ("Empty", "Assigning", "Reconciling", "Stable", "Dead"),
    "classic": ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"),
}
MEMBER_TYPES = (("consumer", "consumer"), ("consumer", "classic"), ("classic", "classic"))
SHARD_STATES = ("initial", "loading", "active", "closing", "closed", "failed")
DEPRECATED_NAMES = {
    f"{NAMESPACE}_groups": f"{NAMESPACE}_group_count",
    f"{NAMESPACE}_members": f"{NAMESPACE}_member_count",
    f"{NAMESPACE}_offsets": f"{NAMESPACE}_offset_count",
    f"{NAMESPACE}_shards": f"{NAMESPACE}_shard_count",
}
"""The gauges' names before this release (their ``_count`` suffix is reserved for histograms
and summaries): exported beside the new ones only with ``--metrics-deprecated-names``, for one
release (docs/operations.md, "Metrics")."""


def _known(counts: dict[Any, int], keys: Iterable[Any]) -> dict[Any, int]:
    """``counts`` with every known key present (0 when absent), known keys first."""
    return {**dict.fromkeys(keys, 0), **counts}


class StateCollector(Collector):
    """Gauges read from the coordinator's state at scrape time. ``read`` returns
    :class:`StateCounts` (or None when the coordinator cannot answer, e.g. while stopping).
    ``deprecated_names``: also export the gauges under their old names
    (:data:`DEPRECATED_NAMES`)."""

    def __init__(
        self, read: Callable[[], StateCounts | None], deprecated_names: bool = False
    ) -> None:
        self._read = read
        self._deprecated_names = deprecated_names

    def describe(self) -> Iterable[Metric]:
        return self._families(StateCounts())

    def collect(self) -> Iterable[Metric]:
        try:
            counts = self._read()
        except Exception:  # a scrape must never take the coordinator down
            log.exception("Reading the coordinator's state for a scrape failed")
            counts = None
        return self._families(counts if counts is not None else StateCounts())

    def _families(self, c: StateCounts) -> list[Metric]:
        sets = self._sets(
            c,
            f"{NAMESPACE}_groups",
            f"{NAMESPACE}_members",
            f"{NAMESPACE}_offsets",
            f"{NAMESPACE}_shards",
        )
        if self._deprecated_names:
            sets += self._sets(c, *DEPRECATED_NAMES.values(), deprecated=True)
        return sets + self._details(c)

    @staticmethod
    def _sets(
        c: StateCounts,
        groups_name: str,
        members_name: str,
        offsets_name: str,
        shards_name: str,
        *,
        deprecated: bool = False,
    ) -> list[Metric]:
        """The gauges of what the coordinator holds, every known label value present."""
        note = " Deprecated name (removed in the next release): use {}." if deprecated else ""
        groups = GaugeMetricFamily(
            groups_name,
            "Groups by type (consumer, classic) and state. Kafka: group-count{protocol}, "
            "consumer-group-count{state}, classic-group-count{state}."
            + note.format(f"{NAMESPACE}_groups"),
            labels=["group_type", "state"],
        )
        known = [(t, state) for t, states in GROUP_STATES.items() for state in states]
        for (group_type, state), n in _known(c.groups, sorted(known)).items():
            groups.add_metric([group_type, state], n)
        members = GaugeMetricFamily(
            members_name,
            "Members by the type of their group and their own type (consumer: KIP-848 "
            "protocol, classic: JoinGroup/SyncGroup)." + note.format(f"{NAMESPACE}_members"),
            labels=["group_type", "member_type"],
        )
        for (group_type, member_type), n in _known(c.members, MEMBER_TYPES).items():
            members.add_metric([group_type, member_type], n)
        offsets = GaugeMetricFamily(
            offsets_name,
            "Committed offsets currently retained (partitions). Kafka: offset-count."
            + note.format(f"{NAMESPACE}_offsets"),
            value=c.offsets,
        )
        shards = GaugeMetricFamily(
            shards_name,
            "Shards by the runtime's state (initial, loading, active, closing, closed, "
            "failed). Kafka: num-partitions{state}." + note.format(f"{NAMESPACE}_shards"),
            labels=["state"],
        )
        for state, n in _known(c.shards, SHARD_STATES).items():
            shards.add_metric([state], n)
        return [groups, members, offsets, shards]

    @staticmethod
    def _details(c: StateCounts) -> list[Metric]:
        load = GaugeMetricFamily(
            f"{NAMESPACE}_shard_load_time_seconds",
            "How long loading each shard's records from the store took: at start-up, or "
            "among several nodes when this node took the partition (the partitions it serves). "
            "Kafka: partition-load-time.",
            labels=["shard"],
        )
        for shard, seconds in sorted(c.load_seconds.items()):
            load.add_metric([str(shard)], seconds)
        loaded = GaugeMetricFamily(
            f"{NAMESPACE}_shard_loaded_records",
            "Records replayed into each shard when it was loaded (as "
            f"{NAMESPACE}_shard_load_time_seconds).",
            labels=["shard"],
        )
        for shard, n in sorted(c.load_records.items()):
            loaded.add_metric([str(shard)], n)
        forwarded = CounterMetricFamily(
            f"{NAMESPACE}_frontend_forwarded_calls",
            "Calls each front-end process (--grpc-processes) forwarded to the coordinator "
            "process (from 0 again when a front end is restarted).",
            labels=["frontend"],
        )
        for index, n in sorted(c.frontends.items()):
            forwarded.add_metric([str(index)], n)
        rack_local = GaugeMetricFamily(
            f"{NAMESPACE}_consumer_group_rack_local_ratio",
            "Share of a consumer group's assigned partitions that their member reads from a "
            "replica in its own rack (0 to 1; 1 when nothing is assigned), for the groups with "
            "a member in a rack and partition racks for a subscribed topic.",
            labels=["group"],
        )
        for group, (local, assigned) in sorted(c.rack_local.items()):
            rack_local.add_metric([group], local / assigned if assigned else 1.0)
        return [
            load,
            loaded,
            forwarded,
            rack_local,
            *cluster_families(c.partitions, c.leader_epochs, c.node),
        ]


SERVED = "served"
FORWARDED = "forwarded"
"""Values of the ``route`` label of kip848_request_duration_seconds: answered by the
coordinator, or forwarded to the upstream broker (``--kafka-upstream``) and passed back."""


class RequestSeries:
    """The latency series of one RPC on one protocol, children bound per error code on first
    use. The service layer's wrapper records each request's latency with :meth:`ok` (answered
    without error: the NONE child's append, no lookup) or :meth:`observe` (any other code, and
    forwarded Kafka requests)."""

    __slots__ = ("_histogram", "_protocol", "_route", "_rpc", "children", "ok")

    def __init__(
        self, histogram: LoopHistogram, rpc: str, protocol: str, route: str = SERVED
    ) -> None:
        self._histogram = histogram
        self._rpc = rpc
        self._protocol = protocol
        self._route = route
        self.children: dict[int, _LoopChild] = {}
        self.ok: Callable[[float], None] = self._first_ok
        """Record the latency of a request answered without error (error="NONE")."""

    def _first_ok(self, seconds: float) -> None:
        """:attr:`ok` until the NONE child is bound (on the first such answer: a series is
        exported once it has a sample), then that child's ``observe`` itself."""
        child = self.child(0)
        self.ok = child.observe
        child.observe(seconds)

    def child(self, error_code: int) -> _LoopChild:
        """The series of answers with ``error_code`` (bound on first use)."""
        child = self.children.get(error_code)
        if child is None:
            child = self.children.setdefault(
                error_code,
                self._histogram.labels(
                    self._rpc, self._protocol, self._route, error_name(error_code)
                ),
            )
        return child

    def observe(self, error_code: int, seconds: float) -> None:
        child = self.children.get(error_code)
        if child is None:
            child = self.child(error_code)
        child.observe(seconds)


ABORTED = -1000
"""Pseudo error code of a call that ended with a transport status (gRPC UNAVAILABLE while
shutting down) instead of a response, or of a forwarded request whose connection closed before
its answer came back: label ``error="ABORTED"``."""
NOT_DECODED = -1001
"""Pseudo error code of a forwarded request's answer, passed back as the upstream sent it
without being decoded: label ``error=""`` (no error code is known)."""


def error_name(code: int) -> str:
    from coordinator.core.errors import ErrorCode

    if code == ABORTED:
        return "ABORTED"
    if code == NOT_DECODED:
        return ""
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class CoordinatorMetrics:
    """All metrics of one coordinator process, registered in ``registry`` (a fresh one by
    default, so tests and benchmarks can have several)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        process_collectors: bool = True,
        deprecated_names: bool = False,
    ) -> None:
        self.deprecated_names = deprecated_names
        """Export the state gauges under their old names too (:data:`DEPRECATED_NAMES`)."""
        r = self.registry = registry if registry is not None else CollectorRegistry()
        if process_collectors:
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                try:
                    r.register(collector)
                except ValueError:  # already there (a shared registry)
                    pass
        Info(f"{NAMESPACE}_build", "The coordinator's version.", registry=r).info(
            {"version": _version()}
        )
        ns = NAMESPACE
        # ---- requests (Kafka: kafka.network RequestMetrics TotalTimeMs, ErrorsPerSec)
        self.request_duration = LoopHistogram(
            f"{ns}_request_duration_seconds",
            "Time from a request reaching any process of the coordinator until its response "
            "was ready (durable), by RPC (the Kafka API's name over the Kafka protocol), "
            "protocol (grpc, kafka), route (served; forwarded: sent to the upstream broker, "
            "until its answer came back) and the response's error code (its top-level code, "
            "else the first non-NONE code of its entries; empty for a forwarded answer).",
            ["rpc", "protocol", "route", "error"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._request_series: dict[tuple[str, str, str], RequestSeries] = {}
        # ---- runtime (Kafka: event-queue-time-ms, event-processing-time-ms,
        # event-purgatory-time-ms, batch-flush-time-ms)
        self.event_queue_time = LoopHistogram(
            f"{ns}_event_queue_time_seconds",
            "Time a command waited before running on its shard: from the request reaching a "
            "process of ours (front end or coordinator) until the command started; for a timer, "
            "how late it fired. Kafka: event-queue-time-ms.",
            ["shard"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.event_processing_time = LoopHistogram(
            f"{ns}_event_processing_time_seconds",
            "Time a command took on its shard: the core's handler and the runtime's handling "
            "of its result (its records added to the pending batch, its timers, the answers "
            "it releases), as Kafka's event-processing-time-ms covers the whole event; a read "
            "of committed state: the read. Kafka: event-processing-time-ms.",
            ["shard"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.event_purgatory_time = LoopHistogram(
            f"{ns}_event_purgatory_time_seconds",
            "Time a command's response waited for its batch (or the shard's last outstanding "
            "batch) to be durable. Kafka: event-purgatory-time-ms.",
            ["shard"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_flush_time = LoopHistogram(
            f"{ns}_batch_flush_time_seconds",
            "Time the record store took to write one batch, fsync included. Kafka: "
            "batch-flush-time-ms.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_fsync_time = LoopHistogram(
            f"{ns}_batch_fsync_time_seconds",
            "Time of the store's commit of one batch (where SQLite fsyncs its WAL with "
            "--sync full).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_records = LoopHistogram(
            f"{ns}_batch_records",
            "Records per store batch (group commit: the batch grows with the load).",
            buckets=BATCH_RECORD_BUCKETS,
            registry=r,
        )
        self.batch_commands = LoopHistogram(
            f"{ns}_batch_commands",
            "Commands whose records one store batch carried.",
            buckets=BATCH_RECORD_BUCKETS,
            registry=r,
        )
        self.batch_failures = Counter(
            f"{ns}_batch_failures_total",
            "Store batches that failed (their commands answered COORDINATOR_NOT_AVAILABLE, "
            "state rolled back).",
            registry=r,
        )
        # ---- group coordinator (Kafka: GroupCoordinatorMetrics)
        self.rebalances = Counter(
            f"{ns}_consumer_group_rebalances_total",
            "Group epoch bumps of consumer groups, by cause. Kafka: "
            "consumer-group-rebalance-count.",
            ["cause"],
            registry=r,
        )
        self.classic_rebalances = Counter(
            f"{ns}_classic_group_completed_rebalances_total",
            "Completed rebalances of classic groups (a new generation). Kafka: "
            "group-completed-rebalance-count.",
            registry=r,
        )
        self.rebalance_duration = LoopHistogram(
            f"{ns}_rebalance_duration_seconds",
            "Time from a group epoch bump until every member of the group reconciled to it "
            "(the group is Stable again); a bump during a rebalance extends it.",
            ["group_type"],
            buckets=REBALANCE_BUCKETS,
            registry=r,
        )
        self.offset_commits = Counter(
            f"{ns}_offset_commits_total",
            "Partitions in OffsetCommit requests, by their error code (NONE: committed). "
            "Kafka: offset-commit-count counts error=NONE.",
            ["error"],
            registry=r,
        )
        self.offset_expirations = Counter(
            f"{ns}_offset_expirations_total",
            "Committed offsets expired by the retention check. Kafka: offset-expiration-count.",
            registry=r,
        )
        self.authorization_refusals = Counter(
            f"{ns}_authorization_refusals_total",
            "Requests (or parts of them: a group, a topic) the authorizer refused, by the API, "
            "the operation and the resource type asked for. Kafka: the authorizer's denied "
            "requests.",
            ["rpc", "operation", "resource_type"],
            registry=r,
        )
        self.authentication_failures = Counter(
            f"{ns}_authentication_failures_total",
            "Clients refused before any request was read, by the listener (kafka, grpc, "
            "metrics) and how: a SASL mechanism, bearer, certificate, or tls (a failed TLS "
            "handshake). Kafka: failed-authentication-total.",
            ["listener", "mechanism"],
            registry=r,
        )
        self.connections_refused = Counter(
            f"{ns}_connections_refused_total",
            "Connections closed as they were accepted, before anything was read, because they "
            "were over a connection limit, by the listener (kafka, grpc) and the limit "
            "(max.connections.per.ip, its overrides included, or max.connections).",
            ["listener", "limit"],
            registry=r,
        )
        self.offset_deletions = Counter(
            f"{ns}_offset_deletions_total",
            "Committed offsets deleted by OffsetDelete. Kafka: offset-deletion-count.",
            registry=r,
        )
        self.timeouts = Counter(
            f"{ns}_timeouts_total",
            "Timers that fired, by kind: session (a member missed its heartbeats), rebalance "
            "(a member did not revoke in time), and the classic protocol's join/sync timers.",
            ["kind"],
            registry=r,
        )
        self.assignment_duration = LoopHistogram(
            f"{ns}_assignment_duration_seconds",
            "Time an assignor took to compute a target assignment, by assignor and group size "
            "(members, as a range).",
            ["assignor", "group_size"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.assignment_failures = Counter(
            f"{ns}_assignment_failures_total",
            "Assignor runs that raised (the heartbeat got UNKNOWN_SERVER_ERROR).",
            ["assignor"],
            registry=r,
        )
        # Pre-bound children.
        self._queue: list[_LoopChild] = []
        self._processing: list[_LoopChild] = []
        self._purgatory: list[_LoopChild] = []
        self._rebalance_children = {c: self.rebalances.labels(c) for c in REBALANCE_CAUSES}
        self._timeout_children = {k: self.timeouts.labels(k) for k in TIMEOUT_KINDS}
        self._commit_children: dict[int, Any] = {}
        self._assignment_children: dict[tuple[str, str], Any] = {}
        self._rebalance_duration_children: dict[str, Any] = {}
        self._state: StateCollector | None = None
        for error in ("NONE",):
            self.offset_commits.labels(error)  # present (at 0) before the first commit

    # ------------------------------------------------------------------ binding

    def bind_shards(self, count: int) -> None:
        """Create the per-shard children (at 0) for shards ``0..count-1`` and the topic
        registry, the runtime's state machine number ``count`` (label ``shard="registry"``)."""
        del self._queue[count:], self._processing[count:], self._purgatory[count:]
        for s in range(len(self._queue), count + 1):
            label = "registry" if s == count else str(s)
            self._queue.append(self.event_queue_time.labels(label))
            self._processing.append(self.event_processing_time.labels(label))
            self._purgatory.append(self.event_purgatory_time.labels(label))

    def command_observers(
        self,
    ) -> tuple[list[Callable[[float], None]], list[Callable[[float], None]]]:
        """Per state machine (bound by :meth:`bind_shards`): the ``observe`` of its queue-time
        and of its processing-time series (one append each per command)."""
        return [c.observe for c in self._queue], [c.observe for c in self._processing]

    def _grow(self, count: int) -> None:
        for s in range(len(self._queue), count):
            label = str(s)
            self._queue.append(self.event_queue_time.labels(label))
            self._processing.append(self.event_processing_time.labels(label))
            self._purgatory.append(self.event_purgatory_time.labels(label))

    def request_series(self, rpc: str, protocol: str, route: str = SERVED) -> RequestSeries:
        """The (cached) latency series of ``rpc`` over ``protocol``; hold on to it."""
        key = (rpc, protocol, route)
        series = self._request_series.get(key)
        if series is None:
            series = self._request_series[key] = RequestSeries(
                self.request_duration, rpc, protocol, route
            )
        return series

    def set_state_reader(self, read: Callable[[], StateCounts | None]) -> None:
        """Register the scrape-time gauges (once)."""
        if self._state is not None:
            self.registry.unregister(self._state)
        self._state = StateCollector(read, self.deprecated_names)
        self.registry.register(self._state)

    # ------------------------------------------------------------------ recording

    def command(self, shard: int, queued_s: float | None, processing_s: float) -> None:
        if shard >= len(self._processing):
            self._grow(shard + 1)
        if queued_s is not None:
            self._queue[shard].observe(queued_s if queued_s > 0.0 else 0.0)
        self._processing[shard].observe(processing_s)

    def queued(self, shard: int, seconds: float) -> None:
        """Queue time alone (a timer: how late it fired)."""
        if shard >= len(self._queue):
            self._grow(shard + 1)
        self._queue[shard].observe(seconds if seconds > 0.0 else 0.0)

    def purgatory(self, shard: int, seconds: float) -> None:
        if shard >= len(self._purgatory):
            self._grow(shard + 1)
        self._purgatory[shard].observe(seconds)

    def batch(self, records: int, commands: int, flush_s: float, fsync_s: float | None) -> None:
        self.batch_records.observe(records)
        self.batch_commands.observe(commands)
        self.batch_flush_time.observe(flush_s)
        if fsync_s is not None:
            self.batch_fsync_time.observe(fsync_s)

    def rebalance(self, cause: str) -> None:
        child = self._rebalance_children.get(cause)
        if child is None:
            child = self._rebalance_children[cause] = self.rebalances.labels(cause)
        child.inc()

    def rebalance_completed(self, group_type: str, seconds: float) -> None:
        child = self._rebalance_duration_children.get(group_type)
        if child is None:
            child = self._rebalance_duration_children[group_type] = self.rebalance_duration.labels(
                group_type
            )
        child.observe(seconds)

    def timeout(self, kind: str) -> None:
        child = self._timeout_children.get(kind)
        if child is None:
            child = self._timeout_children[kind] = self.timeouts.labels(kind)
        child.inc()

    def offset_commit_partitions(self, error_code: int, partitions: int) -> None:
        child = self._commit_children.get(error_code)
        if child is None:
            child = self._commit_children[error_code] = self.offset_commits.labels(
                error_name(error_code)
            )
        child.inc(partitions)

    def assignment(self, assignor: str, members: int, seconds: float) -> None:
        key = (assignor, group_size_label(members))
        child = self._assignment_children.get(key)
        if child is None:
            child = self._assignment_children[key] = self.assignment_duration.labels(*key)
        child.observe(seconds)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kip848-coordinator")
    except PackageNotFoundError:  # a source tree without the package installed
        return "unknown"


def metric_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name ``registry`` exposes (with ``_bucket``/``_count``/``_sum``/``_total``
    forms), e.g. to check a dashboard's queries against what we export."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "info": ("_info",),
        "gauge": ("",),
    }
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(sample.name for sample in family.samples)
    return names


def parse_families(text: str) -> Mapping[str, Sequence[Any]]:
    """Prometheus text -> {family name: samples}; for tests and the bench."""
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}
