"""The write timeout (``offsets.commit.timeout.ms``; the driver's module docstring, "Write
timeout"): a request whose answer waits for a batch that is not durable in time is answered
:class:`WriteTimeoutError` (COORDINATOR_NOT_AVAILABLE, as Kafka's group coordinator answers a
timed-out write), or — a command of the cluster log — :class:`ClusterLogTimeoutError`
(REQUEST_TIMED_OUT, as Kafka's controller), bounded from its arrival by the request's own
timeout when it has one. A part of the driver (:class:`WriteTimeouts`), sans-IO as it is: time
and timers are its host's.
"""

from __future__ import annotations

import logging
from bisect import insort
from functools import partial
from operator import itemgetter
from typing import Any

from coordinator.core.commands import WriteWatch
from coordinator.core.errors import CoordinatorNotAvailableError, RequestTimedOutError

log = logging.getLogger("kip848.runtime")


class WriteTimeoutError(CoordinatorNotAvailableError):
    """The batch a request's answer waits for was not durable within
    ``offsets.commit.timeout.ms`` (Kafka's write timeout: its REQUEST_TIMED_OUT, which the
    group coordinator answers as COORDINATOR_NOT_AVAILABLE; OffsetFetch as NOT_COORDINATOR).
    The write's outcome is unknown to the caller: it may still land."""


class ClusterLogTimeoutError(RequestTimedOutError):
    """The batch a cluster-log command's answer waits for was not durable within its bound
    (the request's timeout, else ``offsets.commit.timeout.ms``): REQUEST_TIMED_OUT, as Kafka's
    controller (and a broker forwarding to it) answers a metadata write not committed in time.
    The write's outcome is unknown to the caller: it may still land."""


class Watched:
    """A :class:`~coordinator.core.commands.WriteWatch` of state machine ``index``, kept with
    the batch holding its command's records (``Batch.watches``) and timed with its waits: at
    its timeout, and if the batch fails, the driver tells the core
    (``OwnCommands.write_errors``; the driver's module docstring, "Write timeout")."""

    __slots__ = ("index", "watch")

    def __init__(self, index: int, watch: WriteWatch) -> None:
        self.index = index
        self.watch = watch


ClusterBound = tuple[float, tuple[int, str]]
"""A cluster-log command's answer's bound: when it times out (``host.perf()``), and (its
milliseconds, what set them) for the answer's message (:meth:`WriteTimeouts.cluster_bound`)."""

_DUE = itemgetter(0)


def _cluster_timeout_message(ms: int, what: str) -> str:
    return (
        f"The cluster log write this request waits for did not complete within {what} "
        f"({ms} ms); its outcome is unknown: the write goes on, and stands if it lands (if it "
        "fails, nothing of it is applied). Check before retrying."
    )


class WriteTimeouts:
    """The driver's write timeouts: each batch's timed waits (``Batch.timed``, in the order of
    their timeouts) and the host's timer that answers those that reach theirs."""

    def __init__(self, driver: Any) -> None:
        """``driver``: the :class:`~.driver.Driver` that composes it (its host, its parked
        requests, its ``write_timeout_ms``); each ``batch`` is one of its ``Batch``."""
        self.driver = driver
        self._warned = -1e9  # host.perf() of the last write-timeout warning

    def cluster_bound(self, timeout_ms: int | None) -> ClusterBound | None:
        """The bound of a cluster-log command arriving now: when its answer's wait times out
        (``host.perf()``) and what bounds it (the request's ``timeout_ms``, at least 0, else
        the write timeout). None: no write timeout (the virtual hosts)."""
        if self.driver.write_timeout_ms is None:
            return None
        if timeout_ms is None:
            bound = (self.driver.write_timeout_ms, "offsets.commit.timeout.ms")
        else:
            bound = (max(timeout_ms, 0), "the request's timeout_ms")
        return self.driver.host.perf() + bound[0] / 1000, bound

    def time(self, batch: Any, *waiting: Any, cluster: ClusterBound | None = None) -> None:
        """``waiting`` (callers' futures, or parked requests' (machine, token) whose
        completions ``batch`` holds) wait for ``batch``: answered :class:`WriteTimeoutError`
        if the batch is not durable within the write timeout from now — or, with ``cluster``
        (a cluster-log command's bound, :meth:`cluster_bound`),
        :class:`ClusterLogTimeoutError` if it is not durable by then."""
        now = self.driver.host.perf()
        if cluster is not None:
            due, bound = cluster
        else:
            assert self.driver.write_timeout_ms is not None
            due, bound = now + self.driver.write_timeout_ms / 1000, None
        timed = batch.timed
        if not timed or timed[-1][0] <= due:
            timed.extend((due, w, bound) for w in waiting)
        else:  # a shorter bound than a wait before it (a request's own timeout)
            for w in waiting:
                insort(timed, (due, w, bound), key=_DUE)
        first = timed[0][0]
        if batch.timeout is not None and batch.timeout_at > first:
            batch.timeout.cancel()
            batch.timeout = None
        if batch.timeout is None:
            batch.timeout_at = first
            batch.timeout = self.driver.host.call_later(
                max((first - now) * 1000, 0.0), partial(self._timed_out, batch)
            )

    def _timed_out(self, batch: Any) -> None:
        """The timeout of ``batch``'s first waits: answer those that reached it, look again at
        the next one's."""
        batch.timeout = None
        if batch.resolved:
            return
        assert self.driver.write_timeout_ms is not None
        now = self.driver.host.perf()
        timed = batch.timed
        parked = self.driver.parked
        error = WriteTimeoutError(
            f"The write of the records this answer waits for did not complete within "
            f"offsets.commit.timeout.ms ({self.driver.write_timeout_ms} ms); its outcome is "
            "unknown (it may still be applied): retry."
        )
        watched: list[Watched] = []
        n = answered = cluster = 0
        for due, waiting, bound in timed:
            if now < due:
                break
            n += 1
            if type(waiting) is Watched:
                watched.append(waiting)
                continue
            fut = parked.get(waiting) if type(waiting) is tuple else waiting
            if fut is None or fut.done():
                continue
            if bound is not None:
                fut.set_exception(ClusterLogTimeoutError(_cluster_timeout_message(*bound)))
                cluster += 1
                continue
            fut.set_exception(error)
            answered += 1
        del timed[:n]
        if answered or cluster:
            # Once a second at most: a write held up for long meets a steady flow of requests.
            loud = now - self._warned >= 1.0
            if loud:
                self._warned = now
            say = log.warning if loud else log.debug
            if answered:
                say(
                    "A write of %d records has not completed after %d ms "
                    "(offsets.commit.timeout.ms): %d waiting requests answered "
                    "COORDINATOR_NOT_AVAILABLE; the write goes on.",
                    len(batch.records),
                    self.driver.write_timeout_ms,
                    answered,
                )
            if cluster:
                say(
                    "A write of %d records has not completed within the timeout of %d waiting "
                    "requests of the cluster log: answered REQUEST_TIMED_OUT; the write goes on.",
                    len(batch.records),
                    cluster,
                )
        if timed:  # later waits: at their own timeout (at least 1 ms on: a timer may run early)
            batch.timeout_at = timed[0][0]
            delay_ms = max((batch.timeout_at - now) * 1000, 1.0)
            batch.timeout = self.driver.host.call_later(delay_ms, partial(self._timed_out, batch))
        if watched:  # the core hears of it now; the batch keeps them in case it fails
            self.driver.own.write_errors(watched, error)

    def settled(self, batch: Any) -> None:
        """``batch`` is resolved: no write timeout for it any more."""
        if batch.timeout is not None:
            batch.timeout.cancel()
            batch.timeout = None
        batch.timed.clear()
