"""The cyclic garbage collector of a server process, run by its event loop between callbacks.

CPython collects whenever a thread has allocated 700 more container objects than it freed:
in the middle of whatever runs — a command, a connection's read — and, every tenth and
hundredth time, the older generations too. A coordinator holds millions of long-lived objects
(members, assignments, partitions) and a join storm builds hundreds of thousands more within
seconds, almost none of them garbage. Measured in a 10,000-member storm (docs/benchmarks.md,
"Join storms under overload"): about 3,000 collections, each one inside whichever callback
crossed the threshold, 0.7 s of the loop's CPU in all, the full ones 10-50 ms each; a single
command that installs a 10,000-member target ran 245 of them.

Here the automatic collector is off (``gc.disable``) and the loop runs it itself, every
:data:`TICK_S`, between callbacks, where a pause holds nobody's command half-done:

* the young generations are collected (``gc.collect(1)``; what survives is old) when at least
  :data:`YOUNG` container objects were allocated (net) since the last collection, and at
  least every :data:`YOUNG_TICKS` ticks whatever the count says: the count is allocations minus
  deallocations of *any* objects, so old objects dying (the answered calls of a storm) hide as
  many new ones, and CPython's own threshold then lets the young generation grow for seconds
  (measured: a young collection of 12,000 by the count took 72 ms);
* every :data:`FULL_EVERY` young collections, the next one is a full collection instead, and
  what survives it is frozen (``gc.freeze``): later collections skip it.

A collection scans what was allocated since the last one, tens to hundreds of nanoseconds an
object: well under a millisecond in steady traffic, ten or twenty in a join storm. Frozen
objects are still freed by reference counting when the state drops them; only a reference
cycle that was alive at a full collection and becomes garbage later is kept (as with CPython's
own collector and ``gc.freeze``, the price of not rescanning the state). One such drop is
large: a node of a cluster that loses or hands over a coordinator partition drops that
partition's whole state machine, a web of cycles (the shard and its context, the components
and their undo log) holding every group of the partition, some 30-70 objects a group. It used
to be left to one full collection of everything unfrozen, a scan of the node's whole state on
the loop (docs/benchmarks.md, "Dropping a coordinator partition": 3.0-3.1 s for 5 million
frozen objects, 6.5-7.3 s for 9-10 million). Now the state machine cuts its own cycles
(``GroupCoordinatorShard.close``/``free``) and :func:`free_dropped` frees it by reference
counting, its groups a slice of :data:`SLICE_S` per loop iteration (freeing costs too: 100,000
five-member groups went in 1.4 s of slices), and no collection runs for it: the loop's longest
stall was 13-24 ms. The safety net: an
object every part of the dropped state refers to (its undo log) must die with it; alive a loop
iteration after the last slice (a cycle the state machine does not know to cut), it is logged
and :func:`collect_dropped` has the next tick unfreeze everything and run one full collection
(then freeze what survives), as every drop did before. Freed, the state's memory is back in
the allocators, not all of it with the system: Python unmaps its arenas once empty, but glibc
keeps the free chunks of its heap. So once the state is gone (or after the full collection),
:func:`give_back_memory` runs glibc's ``malloc_trim(0)`` on a thread of its own, off the loop
(a no-op where the C library has none): after 100,000 groups it took 41-47 ms and handed back
211 MiB more, the loop's longest stall meanwhile 5-6 ms (docs/benchmarks.md, "Dropping a
coordinator partition").

:func:`no_collections` holds the ticks back (loading a store builds the whole state in one go:
it is frozen at the end instead, ``loader.py``). A command known to build a lot of long-lived
state at once — installing a big group's new target — is run between :func:`collect_all` (a
full collection, its survivors frozen, in a step of its own) and :func:`freeze_new`: what it
allocated is frozen at once instead of being scanned by the next young and full collections
(twice, tens of milliseconds each for a 10,000-member target). Without a running
:class:`Collector` (tests, tools) both do nothing.

The assignor worker processes (``offload.py``) follow the same discipline without a loop: the
automatic collector off, their start frozen, and the young generation collected once each
job's answer is sent (a full collection every hundred jobs), never in the middle of a job.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

TICK_S = 0.01
"""How often the loop looks at what was allocated."""
YOUNG = 10_000
"""Allocated container objects (net) that make a tick collect the young generations."""
YOUNG_TICKS = 10
"""Ticks after which the young generations are collected whatever the count."""
FULL_EVERY = 4
"""Young collections between two full ones."""
SLICE_S = 0.002
"""The loop's time a dropped state machine is freed for at a go (:func:`free_dropped`)."""
FREE_BUDGET = 256
"""What a dropped state machine frees per call (the slice's clock is read in between): groups,
each counting 1 plus its members or offsets (``GroupCoordinatorShard.free``)."""
FREE_SLICE = 500
"""Items of a list :func:`free_gradually` frees at a go (a Metadata answer's topic of 3
partitions, its entry and entity: some 30 objects, 0.5 µs each)."""

log = logging.getLogger("kip848.runtime")

_paused = 0
_lock = threading.Lock()
_running: Collector | None = None


@contextmanager
def no_collections() -> Iterator[None]:
    """While inside (in any thread), the loop's ticks collect nothing."""
    global _paused
    with _lock:
        _paused += 1
    try:
        yield
    finally:
        with _lock:
            _paused -= 1


class Collector:
    """The loop's collector (module docstring). A context manager: inside, the automatic
    collector is off and ``loop`` ticks; on the way out the ticks stop and the automatic
    collector is as it was."""

    __slots__ = (
        "_collections",
        "_dropped",
        "_handle",
        "_loop",
        "_tick_s",
        "_ticks",
        "_was_enabled",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, *, tick_s: float = TICK_S) -> None:
        self._loop = loop
        self._tick_s = tick_s
        self._ticks = 0  # since the last collection
        self._collections = 0  # young ones since the last full one
        self._handle: asyncio.TimerHandle | None = None
        self._was_enabled = False
        self._dropped = False  # collect_dropped: unfreeze and collect everything

    def __enter__(self) -> Collector:
        global _running
        _running = self
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._handle = self._loop.call_later(self._tick_s, self._tick)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _running
        if _running is self:
            _running = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._was_enabled:
            gc.enable()

    def _tick(self) -> None:
        self._handle = self._loop.call_later(self._tick_s, self._tick)
        if _paused:
            return
        if self._dropped:
            self._dropped = False
            gc.unfreeze()
            self.collect_all()
            give_back_memory("the dropped state")
            return
        self._ticks += 1
        if self._ticks < YOUNG_TICKS and gc.get_count()[0] < YOUNG:
            return
        self._ticks = 0
        self._collections += 1
        if self._collections < FULL_EVERY:
            gc.collect(1)
        else:
            self.collect_all()

    def collect_all(self) -> None:
        self._ticks = self._collections = 0
        gc.collect(2)
        gc.freeze()


def collect_all() -> None:
    """A full collection now, what survives it frozen (the running :class:`Collector`'s; else
    nothing): what is allocated next is all that a later :func:`freeze_new` freezes."""
    if _running is not None and not _paused:
        _running.collect_all()


def collect_dropped() -> None:
    """State was dropped that may hold reference cycles frozen with it (a coordinator partition
    lost or handed over): the running :class:`Collector`'s next tick unfreezes everything and
    runs a full collection, freezing what survives (module docstring); else nothing."""
    if _running is not None:
        _running._dropped = True


def free_gradually(*owned: list[Any]) -> None:
    """Empty each list of ``owned`` (lists this thread made; their items may still be referred
    to elsewhere) :data:`FREE_SLICE` items at a time, from its end. For a thread that built a
    large answer or read a large log off the loop: freeing it in one go is one cascade of
    deallocations in C, during which the thread keeps the interpreter's lock — the loop waits
    for it, however short the switch interval (a 100,000-topic Metadata answer's entries and
    entities: 45-55 ms; the keys a cluster log's reload read: 45-140 ms). Between two slices
    the thread hands the lock over to the loop when it asks. Free a container that refers to
    the items before the list (only references to drop, 1-2 ms at 100,000)."""
    for items in owned:
        while items:
            del items[-FREE_SLICE:]


def free_dropped(free: Callable[[int], bool], witness: object, what: str) -> None:
    """Free a dropped state machine (a coordinator partition lost or handed over) by reference
    counting, in slices of the running loop, from its next iteration on (module docstring):
    ``free(budget)`` throws away ``budget``'s worth more of it and says whether it is all gone
    (``GroupCoordinatorShard.free``), called for :data:`SLICE_S` at a go. ``witness`` is an
    object every part of that state refers to (the shard's undo log: every dict of its state
    does); it must die with the last reference to ``free``. Still alive a loop iteration
    later, something of the state is kept: a reference cycle the state machine does not cut,
    or a reference held elsewhere; it is logged, and the running :class:`Collector` frees
    what is garbage of it as before (:func:`collect_dropped`)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop: a host on virtual time (the simulator) frees it at once
        while not free(FREE_BUDGET):
            pass
        return
    loop.call_soon(_Freeing(loop, free, weakref.ref(witness), what).slice)


class _Freeing:
    """One dropped state machine being freed (:func:`free_dropped`)."""

    __slots__ = ("_free", "_loop", "_what", "_witness")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        free: Callable[[int], bool],
        witness: weakref.ref[object],
        what: str,
    ) -> None:
        self._loop = loop
        self._free: Callable[[int], bool] | None = free
        self._witness = witness
        self._what = what

    def slice(self) -> None:
        free = self._free
        assert free is not None
        clock = time.perf_counter
        deadline = clock() + SLICE_S
        while not free(FREE_BUDGET):
            if clock() >= deadline:
                self._loop.call_soon(self.slice)
                return
        self._free = free = None  # the last reference: what is left goes now
        self._loop.call_soon(self._check)

    def _check(self) -> None:
        if self._witness() is not None:
            log.warning(
                "The state of %s was not freed when dropped (a reference cycle or a reference "
                "kept): left to a full collection.",
                self._what,
            )
            collect_dropped()
            return
        give_back_memory(self._what)


def freeze_new() -> None:
    """Freeze what was allocated since the last :func:`collect_all`: it is long-lived state
    (a running :class:`Collector` only; else nothing)."""
    if _running is not None and not _paused:
        gc.freeze()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` from the process's own C library; None where it has none
    (musl, macOS: there :func:`give_back_memory` does nothing)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_MALLOC_TRIM = _malloc_trim()


def trim_memory() -> float | None:
    """``malloc_trim(0)``: glibc hands the free pages of its heaps back to the system (a
    dropped state's memory otherwise stays the process's: Python gives it back to the C
    allocator, which keeps it). The seconds it took; None where the C library has none."""
    if _MALLOC_TRIM is None:
        return None
    started = time.perf_counter()
    _MALLOC_TRIM(0)
    return time.perf_counter() - started


def give_back_memory(what: str) -> None:
    """Once a dropped state is freed (:func:`free_dropped`): :func:`trim_memory` on a thread of
    its own, off the loop (ctypes lets go of the GIL for the call, which walks the heaps' free
    chunks: 41-47 ms after 100,000 groups, docs/benchmarks.md "Dropping a coordinator
    partition"). Drops while it runs are trimmed once more after it, by the same thread.
    Nothing where glibc has no ``malloc_trim``."""
    global _trimming
    if _MALLOC_TRIM is None:
        return
    with _trim_lock:
        _to_trim.append(what)
        if _trimming:
            return
        _trimming = True
    threading.Thread(target=_trim_waiting, name="kip848-malloc-trim", daemon=True).start()


_trim_lock = threading.Lock()
_to_trim: list[str] = []  # what was freed since the last trim began
_trimming = False  # a thread runs _trim_waiting


def _trim_waiting() -> None:
    global _trimming
    while True:
        with _trim_lock:
            if not _to_trim:
                _trimming = False
                return
            what = ", ".join(_to_trim)
            _to_trim.clear()
        took = trim_memory()
        log.info(
            "The memory %s left free went back to the system (malloc_trim: %.0f ms).",
            what,
            (took or 0.0) * 1e3,
        )
