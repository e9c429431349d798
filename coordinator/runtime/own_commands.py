"""The driver's own commands: what it runs by itself after work elsewhere — a new group's
first target once its burst of joins is over, a target computed by a worker, a subscription's
regexes resolved off the heartbeat path (Kafka's CoordinatorExecutor and the group coordinator's
deferred work). A component of the driver (``driver.py``), sans-IO like it: the waits are the
host's ``call_soon``/``call_later``, the workers the host's ``run_job``, and each command an
ordinary one of the driver, answered after durability.

* **First targets.** The core asks (``Result.parked_joins``) for a new group's first target;
  the driver waits behind the joins queued on the shard and while joins to the group keep
  arriving (none in two waits of :data:`FIRST_TARGET_QUIET_MS` in a row), for at most
  ``group.initial.rebalance.delay.ms``, then calls ``first_target`` — again as long as its
  results ask for it, and again :data:`~.timing.TIMER_RETRY_MS` later when its write failed.
  Once the target is there, each call answers the next joins (64) and the next call follows
  in the shard's next turn, without waiting for the previous one's write: the answers become
  durable together, in whatever batches the writer makes (a storm's 10,000 parked joins were
  answered one write after another, 150-odd writes, 5-20 s on a busy disk, long enough for
  the last of them to reach the clients' request timeout).
* **Offloaded assignments.** ``Result.offloads`` asks for a group's target to be computed off
  the loop: once the asking command is durable the driver brings the inputs up to date
  (``prepare_assignment_job``, :data:`PREPARE_MEMBERS` members per turn of the shard), copies
  them (``assignment_job``), hands the job to the host's workers, and applies the outcome the
  host reports (:meth:`OwnCommands.job_done`) as an ordinary command. One computation per group at
  a time; one whose inputs or outcome were not written is started again.
* **Regex subscriptions**: a heartbeat asks (``Result.regex_resolutions``); once it is durable
  and answered, ``ConsumerGroups.resolve_regexes`` runs as a command, one at a time per group.
* With ``automatic`` off (the harness, the explorer) first targets and regex resolutions run
  when those say (:meth:`OwnCommands.run_first_target`, :meth:`OwnCommands.run_regex_resolution`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from coordinator.core.commands import Result, WriteWatch
from coordinator.core.errors import CoordinatorError, CoordinatorNotAvailableError, ErrorCode
from coordinator.core.target_assignment import AssignmentJob, AssignmentOutcome

from .timing import TIMER_RETRY_MS

log = logging.getLogger("kip848.runtime")

FIRST_TARGET_QUIET_MS = 10
"""A new group's first target waits until no join to it has arrived for this long, twice (at
most ``group.initial.rebalance.delay.ms``): a burst of joins gets one target covering it all."""
PREPARE_MEMBERS = 500
"""Members whose assignor inputs one command brings up to date before an offloaded job is
copied (about 2-3 ms; ``ConsumerGroups.prepare_assignment_job``)."""


class _FirstTarget:
    """A group whose parked joins wait for its first target (see :meth:`OwnCommands._first_wait`)."""

    __slots__ = (
        "again",
        "answering",
        "arrived",
        "calling",
        "calls",
        "first",
        "group_id",
        "index",
        "queued",
        "quiet",
        "retrying",
        "seen",
    )

    def __init__(self, index: int, group_id: str, first: bool) -> None:
        self.index = index
        self.group_id = group_id
        self.first = first
        self.again = False  # asked again while waiting or calling
        self.calling = False  # a call is queued or not yet durable
        self.queued = False  # a call is submitted and its command has not run yet
        self.calls = 0  # calls whose command ran and whose write is not resolved yet
        self.retrying = False  # a call again after a failed write is due
        self.answering = not first  # the target is there: the calls answer the parked joins
        self.arrived = 0  # joins to the group since it started waiting
        self.seen = -1  # joins seen at the last quiet wait
        self.quiet = 0


class OwnCommands:
    """The driver's own commands: a component of :class:`~.driver.Driver`, as its timers are
    (``timing.py``)."""

    def __init__(self, driver: Any) -> None:
        """``driver``: the :class:`~.driver.Driver` that composes them (its config, clock,
        host, turns and trace; each command runs through its ``submit`` or ``execute``)."""
        self._driver = driver
        self.first_targets: dict[str, _FirstTarget] = {}
        """Groups whose parked joins wait for their first target."""
        self.assigning: set[str] = set()
        """Groups whose target a worker computes."""
        self.resolving: dict[str, bool] = {}
        """Groups whose regex resolution was asked for (True: running)."""

    def forget(self, moved: Callable[[str], bool]) -> None:
        """Groups for which ``moved`` is true left this node (their coordinator partition went
        to another node, ``partitions.py``): their first targets, regex resolutions and
        offloaded computations are no longer this node's to finish (a computation still
        running is answered NOT_COORDINATOR when it applies)."""
        for table in (self.first_targets, self.resolving):
            for group_id in [g for g in table if moved(g)]:
                del table[group_id]
        self.assigning -= {g for g in self.assigning if moved(g)}

    def stop(self) -> None:
        """No more first targets or regex resolutions (the driver stops)."""
        self.first_targets.clear()
        self.resolving.clear()

    def join_arrived(self, group_id: str) -> None:
        """A join to ``group_id`` arrived: its first target waits while joins keep arriving."""
        ft = self.first_targets.get(group_id)
        if ft is not None:
            ft.arrived += 1

    # ------------------------------------------------------------------ first targets

    def answer_parked_joins(self, index: int, wanted: Sequence[tuple[str, bool]]) -> None:
        """These groups have parked joins (before their first target): call the core's
        ``first_target`` for each (one at a time per group; asked again, it goes on). ``True``:
        the first of them, the target waits for the burst (else: a target is there)."""
        if not self._driver.active:
            return
        for group_id, first in wanted:
            ft = self.first_targets.get(group_id)
            if ft is not None:
                if not first and self._driver.automatic and not ft.queued:
                    # A target is there: the next joins in the next turn, not after this
                    # call's write.
                    ft.queued = ft.calling = ft.answering = True
                    self._driver.host.call_soon(partial(self._first_next, ft))
                else:
                    ft.again = True
                continue
            ft = self.first_targets[group_id] = _FirstTarget(index, group_id, first)
            if self._driver.automatic:
                self._driver.host.call_soon(partial(self._first_wait, ft, self._driver.host.perf()))

    def _first_wait(self, ft: _FirstTarget, started: float) -> None:
        """Wait for the burst: take a turn behind the joins queued on the group's shard, and
        wait while joins to the group keep arriving (none in two waits of
        :data:`FIRST_TARGET_QUIET_MS` in a row: a loop held up by something else, during which
        arrivals are not taken up, is not mistaken for quiet), for at most
        ``group.initial.rebalance.delay.ms`` (Kafka's wait for more members to join a new
        group before its first rebalance)."""
        if self.first_targets.get(ft.group_id) is not ft or ft.calling:
            return  # run meanwhile (run_first_target), or stopped
        limit_s = self._driver.config.classic_initial_rebalance_delay_ms / 1000
        if ft.first and self._driver.host.perf() - started < limit_s:
            self._driver.turns.later(ft.index, partial(self._first_queued, ft, started), join=True)
        else:
            self._first_call(ft)

    def _first_queued(self, ft: _FirstTarget, started: float) -> None:
        if self.first_targets.get(ft.group_id) is not ft or ft.calling:
            return
        if self._driver.turns.joins_queued(ft.index):
            self._first_wait(ft, started)  # more joins queued behind this turn: behind them
            return
        ft.quiet = ft.quiet + 1 if ft.arrived == ft.seen else 0
        if ft.quiet == 2:
            self._first_call(ft)  # no join came while we waited, twice
            return
        ft.seen = ft.arrived
        self._driver.host.call_later(FIRST_TARGET_QUIET_MS, partial(self._first_wait, ft, started))

    def run_first_target(self, group_id: str) -> None:
        """Call ``first_target`` for ``group_id`` now, whatever the wait (the harness and the
        explorer decide when; with ``automatic`` the driver does)."""
        ft = self.first_targets[group_id]
        if not ft.calling:
            self._first_call(ft)

    def _first_call(self, ft: _FirstTarget) -> None:
        ft.queued = ft.calling = True
        ft.again = False
        now = self._driver.clock.now_ms()
        try:
            # The call that computes the target waits behind the joins queued on the shard
            # (the burst); the calls that answer them run with the members' heartbeats, ahead
            # of new joins (turns.py), not starved by a storm's steady heartbeats.
            _response, fut = self._driver.submit(
                ft.index,
                partial(self._first_target, ft, now),
                join=not ft.answering,
                group=ft.group_id,
            )
        except Exception as exc:  # noqa: BLE001 - not serving: the parked joins are answered
            ft.queued = False  # when their sessions expire or at shutdown
            self._first_called(ft, exc)
            return
        if fut is None:
            self._first_called(ft, None)
        else:
            ft.calls += 1
            fut.add_done_callback(partial(_first_done, self, ft))

    def _first_next(self, ft: _FirstTarget) -> None:
        """The next call of a group whose target is there (:meth:`answer_parked_joins`)."""
        if self.first_targets.get(ft.group_id) is ft and self._driver.active:
            self._first_call(ft)
        else:
            ft.queued = False
            ft.calling = ft.calls > 0

    def _first_called(self, ft: _FirstTarget, exc: BaseException | None) -> None:
        """A call of ``ft`` is resolved: durable (``exc`` None) or failed."""
        ft.calling = ft.queued or ft.calls > 0
        if self.first_targets.get(ft.group_id) is not ft:
            return
        if isinstance(exc, CoordinatorError) and self._driver.active:
            # Its write failed: the rollback made the joins parked again, and a parked join
            # sent again does not ask again. Call again, as a failed timer fires again (once
            # for every call of the failed writes).
            if not ft.retrying:
                ft.retrying = True
                log.warning(
                    "[GroupId %s] Parked joins not answered (%s); trying again in %d ms.",
                    ft.group_id,
                    exc,
                    TIMER_RETRY_MS,
                )
                if self._driver.automatic:
                    self._driver.host.call_later(TIMER_RETRY_MS, partial(self._first_retry, ft))
            return  # still asked for
        if isinstance(exc, CoordinatorError):
            log.warning("[GroupId %s] Parked joins not answered: %s", ft.group_id, exc)
        elif exc is None and (ft.again or ft.retrying):
            if self._driver.automatic and not ft.calling and not ft.retrying:
                self._first_call(ft)
            return  # still asked for
        elif ft.calling:
            return  # other calls are under way
        del self.first_targets[ft.group_id]

    def _first_retry(self, ft: _FirstTarget) -> None:
        ft.retrying = False
        if self.first_targets.get(ft.group_id) is ft and not ft.calling and self._driver.active:
            self._first_call(ft)

    def _first_target(self, ft: _FirstTarget, now_ms: int, shard: Any) -> Result[None]:
        ft.queued = False  # its command runs (what it asks for may call again at once)
        group_id = ft.group_id
        result: Result[None] = shard.groups.first_target(group_id, now_ms)
        if self._driver.trace is not None:
            self._driver.trace("first-target", {"group_id": group_id, "result": result})
        return result

    # ------------------------------------------------------------------ offloaded assignments

    def start_offloads(self, wanted: Sequence[tuple[int, str]]) -> None:
        """The core asked for these groups' targets to be computed off the loop (the asking
        command is durable): one computation per group at a time — a group already being
        computed is left alone (the outcome's command asks again if the group moved on)."""
        if not self._driver.workers or not self._driver.active:
            return
        for index, group_id in wanted:
            if group_id not in self.assigning:
                self.assigning.add(group_id)
                self._driver.host.call_soon(partial(self._offload, index, group_id))

    def _offload(self, index: int, group_id: str) -> None:
        """Copy the group's inputs (once the state they come from is durable) for a worker,
        brought up to date :data:`PREPARE_MEMBERS` members per turn of the shard first."""
        driver = self._driver
        try:
            ready, _batch = driver.execute(
                index,
                lambda s: s.groups.prepare_assignment_job(group_id, PREPARE_MEMBERS),
                read=True,
            )
            if not ready and driver.active:
                driver.turns.later(index, partial(self._offload, index, group_id))
                return
            job, batch = self._driver.execute(
                index, lambda s: s.groups.assignment_job(group_id), read=True
            )
        except Exception:  # noqa: BLE001 - logged by the driver
            self.assigning.discard(group_id)
            return
        if batch is None:
            self._offload_ready(index, group_id, job, None)
        else:
            batch.then.append(partial(self._offload_ready, index, group_id, job))

    def _offload_ready(
        self, index: int, group_id: str, job: AssignmentJob | None, error: BaseException | None
    ) -> None:
        if error is not None:  # the state the inputs came from was not written
            log.warning("[GroupId %s] Target assignment not started: %s", group_id, error)
            self._offload_again(index, group_id)
        if error is not None or job is None or not self._driver.active:
            self.assigning.discard(group_id)
            return
        if self._driver.trace is not None:
            self._driver.trace("offload-started", {"group_id": group_id, "job": job})
        self._driver.host.run_job(index, group_id, job)

    def job_done(self, index: int, group_id: str, outcome: AssignmentOutcome) -> None:
        """A worker's outcome: applied as a command (its records are the new target). A
        write that fails rolls it back (and computes again: :meth:`_offload_again`)."""
        self.assigning.discard(group_id)
        if self._driver.trace is not None and self._driver.active:
            self._driver.trace("offload-done", {"group_id": group_id, "outcome": outcome})
        self._own_command(
            index,
            group_id,
            lambda s, now: s.groups.apply_assignment(outcome, now),
            "Target assignment not applied",
            partial(self._applied, index, group_id),
        )

    def _own_command(
        self,
        index: int,
        group_id: str,
        fn: Callable[[Any, int], Result[Any]],
        failed: str,
        then: Callable[[BaseException | None], Any],
    ) -> None:
        """Run a command of the driver's own (an offloaded target, a regex resolution) on
        shard ``index`` at the current time; ``then(error)`` once it is durable or failed (a
        command that raised: logged, ``then`` with its error at once)."""
        if not self._driver.active:
            return
        now = self._driver.clock.now_ms()
        try:
            _response, batch = self._driver.execute(index, lambda s: fn(s, now), group=group_id)
        except CoordinatorError as exc:
            # NOT_COORDINATOR: the group's partition moved to another node meanwhile (HA),
            # which finishes what is left: expected, not a warning.
            moved = exc.code == ErrorCode.NOT_COORDINATOR
            log.log(
                logging.INFO if moved else logging.WARNING,
                "[GroupId %s] %s: %s",
                group_id,
                failed,
                exc.message,
            )
            then(exc)
            return
        except Exception as exc:  # noqa: BLE001 - logged by the driver
            then(exc)
            return
        if batch is None:
            then(None)
        else:
            batch.then.append(then)

    # ------------------------------------------------------------------ write watches

    def write_errors(self, watched: Sequence[Any], error: CoordinatorError) -> None:
        """Writes the core watches (``Result.write_watches``; ``driver.Watched``) failed or
        were not durable within the write timeout, their requests answered ``error``: the
        shard hears of each at once, as a command of its own (Kafka completes the append
        future on the partition's thread, before anything else runs on it)."""
        for w in watched:
            watch = w.watch
            self._own_command(
                w.index,
                watch.group_id,
                partial(_on_write_error, watch, error),
                "Write failure not handled",
                _ignored,
            )

    # ------------------------------------------------------------------ regex subscriptions

    def ask_regex_resolutions(self, asked: Sequence[tuple[int, str]]) -> None:
        """Heartbeats asked for their groups' regexes to be resolved (Kafka 4.x: off the
        heartbeat path), and they are durable and answered: one resolution per group at a time
        (the core asks again if a change comes in meanwhile)."""
        if not self._driver.active:
            return
        for index, group_id in asked:
            if group_id not in self.resolving:
                self.resolving[group_id] = False
                if self._driver.automatic:
                    self._driver.host.call_soon(partial(self._resolve, index, group_id))

    def run_regex_resolution(self, group_id: str) -> None:
        """Resolve ``group_id``'s regexes now (the harness and the explorer decide when)."""
        self._resolve(self._driver.shard_index(group_id), group_id)

    def _resolve(self, index: int, group_id: str) -> None:
        if self.resolving.get(group_id) is not False:
            return  # running, or stopped
        self.resolving[group_id] = True
        self._own_command(
            index,
            group_id,
            lambda s, now: s.groups.resolve_regexes(group_id, now),
            "Regex resolution not applied",
            lambda _error: self.resolving.pop(group_id, None),
        )

    def _applied(self, index: int, group_id: str, error: BaseException | None) -> None:
        if isinstance(error, CoordinatorNotAvailableError):  # its write failed
            log.warning("[GroupId %s] Target assignment not written: %s", group_id, error)
            self._offload_again(index, group_id)

    def _offload_again(self, index: int, group_id: str) -> None:
        """A computation whose inputs or outcome were not written is started again
        TIMER_RETRY_MS later: the group's heartbeats would ask again, but joins parked before
        its first target do not (one computation per group at a time, as ever)."""
        if self._driver.active:
            self._driver.host.call_later(
                TIMER_RETRY_MS, partial(self.start_offloads, [(index, group_id)])
            )


def _on_write_error(
    watch: WriteWatch, error: CoordinatorError, shard: Any, now_ms: int
) -> Result[None]:
    result: Result[None] = shard.on_write_error(watch, error, now_ms)
    return result


def _ignored(_error: BaseException | None) -> None:
    """The outcome of a command nothing waits for."""


def _first_done(own: OwnCommands, ft: _FirstTarget, fut: Any) -> None:
    ft.calls -= 1
    own._first_called(ft, None if fut.cancelled() else fut.exception())
