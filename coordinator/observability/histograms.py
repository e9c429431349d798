"""Histograms observed on the event loop for the price of one array append (:class:`LoopHistogram`),
bucketed in bulk off the request path: by a folder thread every :data:`FOLD_INTERVAL_S` and by
every scrape (``metrics.py`` defines the coordinator's metrics with them)."""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import weakref
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import filterfalse
from operator import ge

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("kip848.metrics")


class _LoopChild:
    """One labelled series of a :class:`LoopHistogram`: ``observe`` appends to ``pending``
    (the only thing the event loop does); :meth:`fold` counts what is pending into the
    buckets.

    ``pending`` is an array of doubles: a value observed is stored as 8 bytes in place and its
    float object freed at once (back to the interpreter's free list), instead of a second's
    worth of float objects kept alive on the loop's heap until the next fold (three a
    heartbeat). A value that is not a number is refused where it is observed (TypeError):
    every value observed is a difference of two clock readings."""

    __slots__ = ("bounds", "counts", "observe", "pending", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: +Inf
        self.sum = 0.0
        self.pending = array("d")
        self.observe: Callable[[float], None] = self.pending.append
        """Record one value (on the thread that observes: the event loop)."""

    def fold(self) -> None:
        """Count the values observed so far into the buckets. Called under ``_FOLD_LOCK`` (one
        folder at a time) while the loop may append: the values taken are a prefix of
        ``pending`` (a copy and a deletion, each atomic under the GIL), later appends stay."""
        pending = self.pending
        n = len(pending)
        if not n:
            return
        taken = pending[:n]
        del pending[:n]
        bounds = self.bounds
        try:
            # Most values fall in the first bucket (a request's, a command's times:
            # microseconds): one C-level pass sets them apart (bisect_left's bucket 0 is
            # exactly ``v <= bounds[0]``) and only the others are bisected.
            rest = list(filterfalse(partial(ge, bounds[0]), taken)) if bounds else taken
            tally = collections.Counter(map(partial(bisect_left, bounds), rest))
            total = sum(taken)
        except Exception:  # neither the folder thread nor a scrape may die of it
            log.exception("Folding %d observations failed; they are dropped", n)
            return
        counts = self.counts
        counts[0] += n - len(rest)
        for index, times in tally.items():
            counts[index] += times
        self.sum += total


FOLD_INTERVAL_S = 1.0
"""How often the folder thread counts every histogram's pending values into its buckets: the
memory they take is at most about this many seconds of observations."""

_FOLD_LOCK = threading.Lock()
_LIVE: weakref.WeakSet[LoopHistogram] = weakref.WeakSet()
_folder: threading.Thread | None = None


def _fold_forever() -> None:
    while True:
        time.sleep(FOLD_INTERVAL_S)
        with _FOLD_LOCK:
            for histogram in list(_LIVE):
                histogram.fold()


def _track(histogram: LoopHistogram) -> None:
    """Fold ``histogram`` every :data:`FOLD_INTERVAL_S` from then on (one daemon thread for
    every histogram of the process, started with the first)."""
    global _folder
    with _FOLD_LOCK:
        _LIVE.add(histogram)
        if _folder is None:
            _folder = threading.Thread(
                target=_fold_forever, name="kip848-metrics-fold", daemon=True
            )
            _folder.start()


def _forget_folder() -> None:
    """In a forked child (our own workers are spawned; an embedding application may fork):
    the parent's folder thread is not there and its lock may have been held at the fork."""
    global _folder, _FOLD_LOCK
    _folder = None
    _FOLD_LOCK = threading.Lock()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_folder)


class LoopHistogram(Collector):
    """A histogram observed from one thread only (the event loop: every observation of the
    coordinator happens there) for the price of one array append: values are bucketed later,
    in bulk, by a background thread every :data:`FOLD_INTERVAL_S` and by every scrape before
    it reads the buckets (under one lock; the loop never takes it). Observations are on every
    request several times; bucketing them where they happen cost the loop several times more
    (``prometheus_client.Histogram`` adds a lock per observation). Exposed through the
    official client like any other family. A scrape sees every value observed before it
    began, and counts that never go down."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets)
        self._children: dict[tuple[str, ...], _LoopChild] = {}
        self._unlabelled = None if self.labelnames else self.labels()
        registry.register(self)
        _track(self)

    def labels(self, *values: str) -> _LoopChild:
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
            # setdefault: one atomic step, as the folder thread binds children too
            child = self._children.setdefault(key, _LoopChild(self.bounds))
        return child

    def observe(self, value: float) -> None:
        """Observe on the unlabelled series."""
        assert self._unlabelled is not None, f"{self.name} has labels"
        self._unlabelled.observe(value)

    def fold(self) -> None:
        """Bucket every child's pending values (the caller holds ``_FOLD_LOCK``)."""
        for child in list(self._children.values()):
            child.fold()

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [_le(b) for b in self.bounds] + ["+Inf"]
        with _FOLD_LOCK:
            self.fold()
            read = [(key, list(c.counts), c.sum) for key, c in list(self._children.items())]
        for key, counts, total in read:
            cumulative = []
            running = 0
            for le, n in zip(les, counts, strict=True):
                running += n
                cumulative.append((le, running))
            family.add_metric(list(key), cumulative, total)
        return [family]


def _le(bound: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(bound)
