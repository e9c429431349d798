"""The runtime's side: what ``CoordinatorRuntime`` reports, state read at scrape time, timed
assignors.

``CoordinatorRuntime(observer=RuntimeObserver(metrics))`` calls, all on the event loop thread:

* :meth:`RuntimeObserver.run_command` to run one command on a shard (timed: queue and
  processing time; a ``shard.<command>`` span when tracing is on), or, for a command the
  runtime times itself, :meth:`RuntimeObserver.run_timed` (the span only) and the callable
  :meth:`RuntimeObserver.command_timer` gave it, once the runtime has acted on the command's
  result: the runtime's turn accounting reads the clock around each command anyway, and the
  processing time then covers the whole command, as Kafka's does;
* :meth:`RuntimeObserver.ran` right after, with the records and events the command left and
  the batch its response waits for (its purgatory time is observed when the batch resolves),
  or None when it waits for none (its events were written at once);
* :meth:`RuntimeObserver.batch_written` / :meth:`RuntimeObserver.batch_failed` once a batch is
  durable or failed (flush and fsync time, size; a ``store.append`` span linked to the
  commands' spans);
* :meth:`RuntimeObserver.timer_fired` and :meth:`RuntimeObserver.offsets_expired`.

The log events a command returns (and the state it left a rebalancing group in) go to the
:class:`~.rebalances.RebalanceTracker` when they are written: once the batch is durable.

None of these raise into the runtime: they only observe numbers and end spans.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.core.target_assignment import incremental_method

from . import tracing
from .metrics import CoordinatorMetrics, StateCounts
from .racks import RackLocality
from .rebalances import RebalanceTracker
from .requests import ARRIVAL

log = logging.getLogger("kip848.metrics")
monotonic = time.monotonic
_TRACING = tracing.STATE
_ACTIVE = tracing.ACTIVE
_ARRIVAL_GET = ARRIVAL.get

SCRAPE_READ_TIMEOUT_S = 5.0
_OWN: Any = object()


def same_clock(perf: Callable[[], float]) -> bool:
    """Whether ``perf`` reads the clock requests' arrivals are read with (``time.monotonic``,
    :data:`~.requests.ARRIVAL`): itself, or ``time.perf_counter`` where it is the same clock
    (Linux, macOS)."""
    if perf is time.monotonic:
        return True
    if perf is not time.perf_counter:
        return False
    counter, clock = time.get_clock_info("perf_counter"), time.get_clock_info("monotonic")
    return counter.implementation == clock.implementation and counter.resolution == clock.resolution


def command_name(fn: Callable[..., Any]) -> str:
    """The runtime method a command comes from (``heartbeat``, ``offset_commit``, ``timer``),
    from the qualified name of the lambda the runtime passes (tracing only; cached)."""
    qualname = getattr(fn, "__qualname__", "") or ""
    name = _COMMAND_NAMES.get(qualname)
    if name is None:
        head = qualname.partition(".<locals>")[0]
        name = head.rpartition(".")[2].lstrip("_") or "command"
        name = _COMMAND_NAMES[qualname] = "timer" if name == "fire" else name
    return name


_COMMAND_NAMES: dict[str, str] = {}


class RuntimeObserver:
    __slots__ = (
        "_batch_events",
        "_batch_spans",
        "_processing",
        "_queue",
        "_waits",
        "metrics",
        "rebalances",
        "span",
    )

    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self.metrics = metrics
        self.rebalances = RebalanceTracker(metrics)
        self._waits: dict[Any, list[tuple[int, float]]] = {}  # batch -> (shard, since)
        self._batch_spans: dict[Any, list[Any]] = {}  # batch -> its traced commands' spans
        # batch -> what the rebalance tracker kept of its commands (their events, group states)
        self._batch_events: dict[Any, list[Any]] = {}
        self.span: Any = None
        """The last traced command's span (tracing on), until :meth:`ran` takes it.
        The runtime calls :meth:`ran` for a command that left no records and no events and
        waits for no batch only while this is set: there is nothing else to do for it."""
        # per state machine, bound by attach() (metrics on): its queue-time and processing-time
        # series' observe
        self._queue: list[Callable[[float], None]] = []
        self._processing: list[Callable[[float], None]] = []

    # ------------------------------------------------------------------ commands

    def run_command(self, shard: int, fn: Callable[[Any], Any], machine: Any) -> Any:
        if _TRACING.enabled and _ACTIVE.get():
            return self._traced_command(shard, fn, machine)
        processing = self._processing
        if not processing:  # tracing on, metrics off: nothing to measure
            return fn(machine)
        start = monotonic()
        try:
            return fn(machine)
        finally:
            # On every command: its processing time and, run for a request (ARRIVAL: the
            # request's, while it runs), its queue time, one append each.
            processing[shard](monotonic() - start)
            request = _ARRIVAL_GET()
            if request is not None:
                arrival = request[0]
                if arrival is not None:
                    self._queue[shard](start - arrival if start > arrival else 0.0)

    def command_timer(
        self, perf: Callable[[], float]
    ) -> Callable[[int, float, float], None] | None:
        """What the runtime calls with each command it times itself — (state machine, start,
        seconds), read with ``perf``, its own clock (the engine's turn accounting) — once it
        has run the command and acted on its result (then it runs the command with
        :meth:`run_timed`): the command's processing time and, run for a request, its queue
        time. None (the runtime runs :meth:`run_command`, timed here): metrics off, or ``perf``
        is not the clock requests' arrivals are read with (``time.monotonic``)."""
        if self.metrics is None or not same_clock(perf):
            return None
        return self._timed

    def _timed(self, shard: int, start: float, seconds: float) -> None:
        self._processing[shard](seconds)
        request = _ARRIVAL_GET()
        if request is not None:
            arrival = request[0]
            if arrival is not None:
                self._queue[shard](start - arrival if start > arrival else 0.0)

    def run_timed(self, shard: int, fn: Callable[[Any], Any], machine: Any) -> Any:
        """:meth:`run_command` for a command the runtime times (:meth:`command_timer`): its
        span, when traced."""
        if _TRACING.enabled and _ACTIVE.get():
            return self._traced_command(shard, fn, machine, None)
        return fn(machine)

    def _traced_command(
        self, shard: int, fn: Callable[[Any], Any], machine: Any, metrics: Any = _OWN
    ) -> Any:
        """A traced command, timed here unless ``metrics`` is None (the runtime times it)."""
        if metrics is _OWN:
            metrics = self.metrics
        self.span = None
        attributes: dict[str, Any] = {tracing.SHARD: shard}
        rpc = _ACTIVE.get().attributes  # the RPC span's
        group_id = rpc.get(tracing.GROUP_ID)
        if group_id is not None:
            attributes[tracing.GROUP_ID] = group_id
        member_id = rpc.get(tracing.MEMBER_ID)
        if member_id is not None:
            attributes[tracing.MEMBER_ID] = member_id
        with tracing.internal_span(f"shard.{command_name(fn)}", attributes) as span:
            start = time.monotonic()
            try:
                out = fn(machine)
            finally:
                if metrics is not None:
                    request = ARRIVAL.get()
                    arrival = None if request is None else request[0]
                    metrics.command(
                        shard,
                        None if arrival is None else start - arrival,
                        time.monotonic() - start,
                    )
            tracing.response_attributes(getattr(out, "response", out), attributes)
            records = getattr(out, "records", None)
            if records:
                attributes["kip848.records"] = len(records)
            self.span = span
        return out

    def ran(
        self,
        shard: int,
        machine: Any,
        records: Sequence[Any],
        events: Sequence[Any],
        batch: Any,
    ) -> None:
        """The command just run on ``machine`` left ``records`` and ``events`` (a read: none),
        and its response waits for ``batch`` (its own records, or the shard's last outstanding
        batch), or for nothing (None: the runtime wrote its events at once). Not called for a
        command that left none and waits for none while :attr:`span` is None (a steady
        heartbeat): it would do nothing."""
        kept = (
            self.rebalances.after_command(machine, records, events)
            if (records or events) and self.metrics is not None
            else None
        )  # rebalances are tracked for their metrics only
        if batch is not None:
            waits = self._waits.get(batch)
            if waits is None:
                waits = self._waits[batch] = []
            waits.append((shard, time.monotonic()))
            if kept is not None:
                self._batch_events.setdefault(batch, []).append(kept)
            ctx = self.span
            if ctx is not None:
                self.span = None
                self._batch_spans.setdefault(batch, []).append(ctx)
            return
        self.span = None  # a traced command that waits for nothing: no batch span
        if kept is not None:
            self._rebalances_durable(kept)

    def _rebalances_durable(self, kept: Any) -> None:
        try:
            self.rebalances.durable(kept)
        except Exception:  # observation never fails a command or a batch
            log.exception("Tracking rebalances failed")

    # ------------------------------------------------------------------ batches

    def batch_written(
        self,
        batch: Any,
        records: int,
        commands: int,
        flush_s: float,
        fsync_s: float | None,
    ) -> None:
        now = time.monotonic()
        metrics = self.metrics
        waits = self._waits.pop(batch, ())
        for kept in self._batch_events.pop(batch, ()):
            self._rebalances_durable(kept)
        if metrics is not None:
            metrics.batch(records, commands, flush_s, fsync_s)
            for shard, since in waits:
                metrics.purgatory(shard, now - since)
        self._end_batch_span(batch, records, commands, flush_s, None)

    def batch_failed(self, batch: Any, records: int, error: BaseException) -> None:
        self._waits.pop(batch, None)
        for kept in self._batch_events.pop(batch, ()):  # rolled back: nothing of it happened
            self.rebalances.dropped(kept)
        if self.metrics is not None:
            self.metrics.batch_failures.inc()
        self._end_batch_span(batch, records, 0, None, error)

    def _end_batch_span(
        self,
        batch: Any,
        records: int,
        commands: int,
        flush_s: float | None,
        error: BaseException | None,
    ) -> None:
        commands_spans = self._batch_spans.pop(batch, None)
        if not tracing.STATE.enabled or not commands_spans:
            return  # no traced (sampled) command in this batch
        end = time.time_ns()
        tracing.record_span(
            "store.append",
            {"kip848.batch.records": records, "kip848.batch.commands": commands},
            links=commands_spans,
            start=end - int((flush_s or 0.0) * 1e9),
            end=end,
            error=error,
        )

    # ------------------------------------------------------------------ timers and expiry

    def timer_fired(self, kind: str, shard: int, late_s: float) -> None:
        metrics = self.metrics
        if metrics is not None:
            metrics.timeout(kind.replace("-", "_"))
            metrics.queued(shard, late_s)

    def offsets_expired(self, count: int) -> None:
        if self.metrics is not None and count:
            self.metrics.offset_expirations.inc(count)

    # ------------------------------------------------------------------ assignors

    def attach(self, shard_count: int, assignors: Sequence[Any]) -> list[Any]:
        """Called by the runtime when it is built: binds the per-shard series (state machine
        ``shard_count`` is the topic registry) and returns the assignors to use (timed)."""
        if self.metrics is not None:
            self.metrics.bind_shards(shard_count)
            self._queue, self._processing = self.metrics.command_observers()
        return [
            (TimedIncrementalAssignor if incremental_method(a) else TimedAssignor)(a, self.metrics)
            for a in assignors
        ]


class TimedAssignor:
    """An assignor that times every run (``kip848_assignment_duration_seconds``) and traces it
    (``assignor.<name>``). The core sees the same ``name`` and ``assign``."""

    def __init__(self, inner: Any, metrics: CoordinatorMetrics | None) -> None:
        self.inner = inner
        self.name = inner.name
        self._metrics = metrics

    def __getattr__(self, attr: str) -> Any:  # anything else an assignor offers
        return getattr(self.inner, attr)

    def assign(self, group_spec: Any, topics: Mapping[Any, Any]) -> Any:
        return self._run(self.inner.assign, group_spec, topics)

    def _run(self, call: Callable[[Any, Any], Any], group_spec: Any, topics: Any) -> Any:
        """``call(group_spec, topics)``, timed and traced; a declined incremental computation
        (None) is not counted as a run."""
        members = len(group_spec.members)
        metrics = self._metrics
        start = time.monotonic()
        ok = False
        result = None
        try:
            if tracing.ACTIVE.get():
                attributes: dict[str, Any] = {
                    "kip848.assignor": self.name,
                    "kip848.group.size": members,
                    "kip848.topics": len(topics),
                }
                group_id = tracing.current_attribute(tracing.GROUP_ID)
                if group_id is not None:
                    attributes[tracing.GROUP_ID] = group_id
                with tracing.internal_span(f"assignor.{self.name}", attributes):
                    result = call(group_spec, topics)
            else:
                result = call(group_spec, topics)
            ok = True
            return result
        finally:
            if metrics is not None:
                if not ok:
                    metrics.assignment_failures.labels(self.name).inc()
                elif result is not None:
                    metrics.assignment(self.name, members, time.monotonic() - start)


class TimedIncrementalAssignor(TimedAssignor):
    """The wrapper of an assignor with the SPI's optional ``assign_changes``: defines it too
    (timed and traced like ``assign``), so the core takes the incremental path through it
    (``coordinator.core.target_assignment.incremental_method`` looks on the class)."""

    def assign_changes(self, group_spec: Any, topics: Mapping[Any, Any]) -> Any:
        return self._run(self.inner.assign_changes, group_spec, topics)


# ---------------------------------------------------------------- state at scrape time


def count_state(
    runtime: Any,
    frontends: Callable[[], Mapping[int, int]] | None = None,
    racks: RackLocality | None = None,
    cluster: Callable[[], dict[str, Any] | None] | None = None,
) -> StateCounts:
    """Groups, members and offsets of every shard (each shard's public
    :meth:`~coordinator.core.shard.GroupCoordinatorShard.census`), shard states and load times,
    and the groups' rack locality (``racks``: its cache, kept between scrapes). Runs on the
    event loop (a census iterates the shard's groups)."""
    counts = StateCounts()
    groups = counts.groups
    members = counts.members
    for shard in runtime.shards:
        census = shard.census()
        for key, n in census.groups.items():
            groups[key] = groups.get(key, 0) + n
        for key, n in census.members.items():
            members[key] = members.get(key, 0) + n
        counts.offsets += census.offsets
    counts.shards = {runtime.state.value: runtime.shard_count}
    for p, s in runtime.partition_loads.items():
        counts.load_seconds[p] = s.seconds
        counts.load_records[p] = s.records
    if frontends is not None:
        counts.frontends = dict(frontends())
    if racks is not None:
        counts.rack_local = racks.read(runtime.shards)
    if cluster is not None:
        node = cluster()
        if node is not None:
            lead = runtime.driver.lead
            counts.partitions = {p: s.value for p, s in enumerate(lead.states)}
            counts.leader_epochs = dict(lead.epochs)
            counts.node = node
    return counts


def loop_reader(
    loop: asyncio.AbstractEventLoop, read: Callable[[], StateCounts]
) -> Callable[[], StateCounts | None]:
    """A reader for the scrape thread: runs ``read`` on ``loop`` and waits (bounded)."""

    def from_scrape_thread() -> StateCounts | None:
        if loop.is_closed():
            return None
        fut: concurrent.futures.Future[StateCounts] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(read())
            except BaseException as exc:  # noqa: BLE001 - handed to the scrape thread
                fut.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop closed meanwhile
            return None
        try:
            return fut.result(timeout=SCRAPE_READ_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            log.warning(
                "The event loop did not answer a scrape within %.0f s; state gauges omitted.",
                SCRAPE_READ_TIMEOUT_S,
            )
            return None

    return from_scrape_thread


# ---------------------------------------------------------------- serve wiring


def make_observer(
    *,
    metrics: bool,
    otlp_endpoint: str | None,
    sample_ratio: float | None = None,
    max_traces_per_second: float | None = None,
    deprecated_metric_names: bool = False,
) -> RuntimeObserver | None:
    """``kip848 serve``'s observer: metrics when ``--metrics-listen`` is given, tracing when
    ``--otlp-endpoint`` is (``--otlp-sample-ratio``, ``--otlp-max-traces-per-second``); None
    (nothing observed) when neither is. ``deprecated_metric_names``: the state gauges under
    their old names too (``--metrics-deprecated-names``)."""
    tracing.configure(
        otlp_endpoint, sample_ratio=sample_ratio, max_traces_per_second=max_traces_per_second
    )
    if not metrics and not tracing.STATE.enabled:
        return None
    return RuntimeObserver(
        CoordinatorMetrics(deprecated_names=deprecated_metric_names) if metrics else None
    )


def start_metrics_endpoint(
    runtime: Any,
    host: str,
    port: int,
    *,
    frontends: Callable[[], Mapping[int, int]] | None = None,
    tls: Any = None,
    cluster: Callable[[], dict[str, Any] | None] | None = None,
) -> Any:
    """Serve the runtime's metrics on ``http://host:port/metrics`` (call on the event loop:
    the state gauges are read on it). Returns the server (``.port``, ``.close()``)."""
    from .endpoint import serve_metrics

    metrics: CoordinatorMetrics = runtime.observer.metrics
    loop = asyncio.get_running_loop()
    racks = RackLocality()
    metrics.set_state_reader(
        loop_reader(loop, lambda: count_state(runtime, frontends, racks, cluster))
    )
    return serve_metrics(metrics.registry, host, port, tls)
