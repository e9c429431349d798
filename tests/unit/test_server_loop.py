"""The server's event loop: both kinds run a coroutine, with the server's GIL switch interval
and the cyclic garbage collector run between its callbacks (coordinator/runtime/collector.py)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time
import weakref
from collections import Counter

import pytest
from builders import LoopSteps

from coordinator.runtime import collector
from coordinator.server.loop import LOOPS, SWITCH_INTERVAL_S, run


@pytest.mark.parametrize("kind", LOOPS)
def test_a_server_loop_runs_with_the_short_switch_interval(kind: str) -> None:
    before = sys.getswitchinterval()

    async def seen() -> float:
        return sys.getswitchinterval()

    try:
        assert run(seen(), kind) == pytest.approx(SWITCH_INTERVAL_S)
    finally:
        sys.setswitchinterval(before)
    assert SWITCH_INTERVAL_S < 0.005  # shorter than CPython's default


def test_an_unknown_loop_is_refused() -> None:
    async def nothing() -> None:
        return None

    coro = nothing()
    with pytest.raises(ValueError, match="unknown event loop 'tokio'"):
        run(coro, "tokio")
    coro.close()


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: tracked by the collector, freed only by it


def test_a_server_loop_collects_between_callbacks_never_inside_one() -> None:
    """The cyclic collector runs on the loop's ticks: a callback that allocates a great many
    objects is not interrupted by a collection (CPython's own collector would run hundreds of
    times inside it), and the garbage cycles it left are collected by a later tick."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    async def scenario() -> tuple[bool, int, int, bool]:
        enabled = gc.isenabled()
        seen.clear()
        garbage = weakref.WeakSet(Node() for _ in range(200_000))  # cycles, garbage at once
        during = len(seen)
        for _ in range(200):  # bounded: 2 s of ticks
            if not garbage:
                break
            await asyncio.sleep(0.01)
        return enabled, during, len(seen), not garbage

    gc.callbacks.append(record)
    try:
        enabled, during, after, collected = run(scenario(), "asyncio")
    finally:
        gc.callbacks.remove(record)
    assert not enabled  # CPython's automatic collector is off inside
    assert during == 0  # nothing collected while the callback ran
    assert after >= 1 and collected  # ... a tick collected its garbage
    assert gc.isenabled()  # and it is back on outside


def test_what_survives_a_full_collection_is_frozen_and_a_big_state_change_frozen_at_once() -> None:
    """What survives the loop's full collections is frozen (later collections skip it); state
    built in bulk between ``collect_all`` and ``freeze_new`` is frozen without being scanned;
    without a server loop both do nothing."""

    async def scenario() -> tuple[int, int]:
        kept = [Node() for _ in range(1_000)]
        base = gc.get_freeze_count()
        for _ in range(300):  # bounded: 3 s of ticks, enough for a full collection
            if gc.get_freeze_count() >= base + 1_000:
                break
            await asyncio.sleep(0.01)
        survived = gc.get_freeze_count() - base
        collector.collect_all()
        state = [Node() for _ in range(5_000)]
        before = gc.get_freeze_count()
        collector.freeze_new()
        bulk = gc.get_freeze_count() - before
        assert all(n.me is n for n in kept + state)  # alive and untouched
        return survived, bulk

    gc.unfreeze()
    try:
        survived, bulk = run(scenario(), "asyncio")
        assert survived >= 1_000
        assert bulk >= 5_000
        frozen = gc.get_freeze_count()
        outside = [Node() for _ in range(1_000)]
        collector.collect_all()
        collector.freeze_new()
        gc.collect(2)  # outside a server loop: nothing is frozen
        # (frozen objects that die meanwhile leave the count: it may only shrink)
        assert gc.get_freeze_count() <= frozen
        assert all(n.me is n for n in outside)
    finally:
        gc.unfreeze()


def test_no_collections_while_a_store_loads() -> None:
    """``no_collections`` (the loader's, in its own thread) holds the loop's ticks back."""
    seen: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    async def scenario() -> tuple[int, int]:
        with collector.no_collections():
            garbage = [Node() for _ in range(50_000)]
            del garbage
            await asyncio.sleep(0.3)  # thirty ticks
            during = len(seen)
        await asyncio.sleep(0.3)
        return during, len(seen)

    gc.callbacks.append(record)
    try:
        during, after = run(scenario(), "asyncio")
    finally:
        gc.callbacks.remove(record)
    assert during == 0
    assert after >= 1


class Witness:
    """No cycle: dies with its last reference."""


def record_trims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``collector.trim_memory`` (``malloc_trim``) still runs, each call recorded by the name
    of the thread it ran on."""
    trims: list[str] = []
    trim_memory = collector.trim_memory

    def recorded() -> float | None:
        trims.append(threading.current_thread().name)
        return trim_memory()

    monkeypatch.setattr(collector, "trim_memory", recorded)
    return trims


class Dropped:
    """A dropped state machine as ``collector.free_dropped`` sees it: ``groups`` items that
    refer to its witness, thrown away ``n`` at a time (each call taking 0.5 ms), recorded with
    the loop step it ran in."""

    def __init__(self, groups: int, steps: LoopSteps) -> None:
        self.witness = Witness()
        self.groups = [self.witness] * groups
        self.steps = steps
        self.calls: list[int] = []

    def free(self, n: int) -> bool:
        time.sleep(0.0005)
        self.calls.append(self.steps.now)
        del self.groups[:n]
        return not self.groups


@pytest.mark.parametrize("leak", [False, True])
def test_a_dropped_state_is_freed_in_slices_and_a_leak_left_to_a_full_collection(
    leak: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``free_dropped`` frees a dropped state a slice of about 2 ms per loop step, from the
    step after the drop, until it is all gone; then its witness must be dead. Kept alive (a
    cycle the state machine does not cut, a reference held elsewhere) it is logged and the
    collector's next tick runs the full collection that frees frozen cycles; otherwise
    none."""
    full: list[str] = []
    monkeypatch.setattr(collector, "collect_dropped", lambda: full.append("collect_dropped"))
    trims = record_trims(monkeypatch)

    async def scenario() -> tuple[list[int], int, bool, int]:
        with LoopSteps() as steps:
            dropped = Dropped(40 * collector.FREE_BUDGET, steps)
            witness = weakref.ref(dropped.witness)
            kept = dropped.witness if leak else None
            collector.free_dropped(dropped.free, dropped.witness, "partition 7")
            dropped_at = steps.now
            calls = dropped.calls
            del dropped
            for _ in range(200):  # bounded: 2 s
                if len(calls) == 40 and (full or (witness() is None and trims)):
                    break
                await asyncio.sleep(0.01)
            assert (kept is not None) == leak
            return [c - dropped_at for c in calls], len(full), witness() is None, steps.now

    with caplog.at_level(logging.WARNING, "kip848.runtime"):
        calls, collections, dead, _now = run(scenario(), "asyncio")
    assert len(calls) == 40 and calls[0] >= 1  # not in the dropping callback
    per_step = Counter(calls)
    assert len(per_step) >= 5 and max(per_step.values()) <= 8  # 2 ms of 0.5 ms calls a step
    assert dead is not leak
    assert collections == (1 if leak else 0)
    # Freed: its memory handed back to the system once, on a thread of its own (not the
    # loop's); kept: left to the full collection, which hands it back (below).
    assert trims == ([] if leak else ["kip848-malloc-trim"])
    warned = [r.getMessage() for r in caplog.records if "was not freed" in r.getMessage()]
    assert len(warned) == (1 if leak else 0)
    if leak:
        assert "The state of partition 7 was not freed when dropped" in warned[0]


def test_the_full_collection_of_a_leaked_drop_hands_its_memory_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``collect_dropped`` (a dropped state that was not freed): the collector's next tick
    runs the full collection, then hands the memory back to the system off the loop."""
    trims = record_trims(monkeypatch)
    given: list[str] = []
    give_back = collector.give_back_memory

    def recorded(what: str) -> None:
        given.append(what)
        give_back(what)

    monkeypatch.setattr(collector, "give_back_memory", recorded)

    async def scenario() -> None:
        collector.collect_dropped()
        for _ in range(200):  # bounded: 2 s
            if trims:
                return
            await asyncio.sleep(0.01)

    run(scenario(), "asyncio")
    assert (given, trims) == (["the dropped state"], ["kip848-malloc-trim"])


@pytest.mark.skipif(collector._MALLOC_TRIM is None, reason="glibc only")
def test_malloc_trim_hands_freed_heap_pages_back() -> None:
    """glibc's ``malloc_trim(0)``: freed memory in the middle of the heap (a dropped state's
    blocks) goes back to the system, which the C allocator alone would keep."""

    def rss_kib() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024

    # Buffers too small for mmap (below glibc's 128 KiB threshold), so on the heap; every
    # other one kept, so the heap's top cannot shrink by itself.
    blocks = [bytearray(64 * 1024) for _ in range(2_000)]
    for b in blocks:
        b[::4096] = b"x" * len(b[::4096])  # touched: resident
    kept = blocks[1::2]
    del blocks
    before = rss_kib()
    took = collector.trim_memory()
    after = rss_kib()
    assert took is not None and took >= 0
    assert before - after >= 32 * 1024  # most of the freed 62.5 MiB went back
    assert len(kept) == 1_000


def test_without_malloc_trim_nothing_is_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the C library has no ``malloc_trim`` (musl, macOS): no call, no thread."""
    monkeypatch.setattr(collector, "_MALLOC_TRIM", None)
    started = threading.active_count()
    assert collector.trim_memory() is None
    collector.give_back_memory("partition 7")
    assert threading.active_count() == started


def test_drops_while_a_trim_runs_are_trimmed_once_more_by_the_same_thread(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Several partitions dropped together: one trimming thread at a time, which trims once
    more for all that were freed while it ran."""
    go_on = threading.Event()
    threads: list[str] = []

    def held_trim() -> float:
        threads.append(threading.current_thread().name)
        assert go_on.wait(5)
        return 0.0

    monkeypatch.setattr(collector, "trim_memory", held_trim)
    running = threading.active_count()
    with caplog.at_level(logging.INFO, "kip848.runtime"):
        collector.give_back_memory("partition 1")
        for _ in range(500):  # bounded: 5 s, until the thread trims for partition 1
            if threads:
                break
            time.sleep(0.01)
        collector.give_back_memory("partition 2")
        collector.give_back_memory("partition 3")
        assert threading.active_count() == running + 1
        go_on.set()
        for _ in range(500):  # bounded: 5 s
            if not collector._trimming:
                break
            time.sleep(0.01)
    assert threads == ["kip848-malloc-trim"] * 2
    assert [r.getMessage().split(" left free")[0] for r in caplog.records] == [
        "The memory partition 1",
        "The memory partition 2, partition 3",
    ]
