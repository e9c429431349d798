"""The event loop the server runs on: uvloop (libuv; the default, a dependency) or asyncio's own.

grpc.aio runs on either. uvloop's faster callbacks and transports matter here because every
unary call is several loop callbacks; the service benchmark measures both (docs/benchmarks.md).

The GIL switch interval is lowered to :data:`SWITCH_INTERVAL_S`. Besides the loop thread, a
server runs the store's writer thread (encoding and binding each batch's rows in Python) and
gRPC's poller thread. Whenever the loop waits for I/O, another thread takes the GIL, and the
loop gets it back only when that thread blocks or the switch interval runs out. CPython's
default of 5 ms makes every loop iteration under load potentially 5 ms longer. That is what
kept a join storm's batches and an unrelated group's heartbeats waiting (docs/benchmarks.md,
join storms).

The cyclic garbage collector freezes what survives a full collection
(:func:`freeze_after_full_collections`). A coordinator's state is millions of long-lived objects
(members, assignments, partitions); CPython runs a full collection whenever the objects that
survived younger collections grow by a quarter, so while a join storm builds a big group's
state it rescanned all of it several times a second, each time holding the loop for 50-100 ms
(measured: a 5,000-member storm, docs/benchmarks.md). Frozen objects are skipped by later
collections; they are still freed by reference counting when the state drops them, so only a
reference cycle that was alive at a full collection and becomes garbage later is kept.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
LOOPS = ("uvloop", "asyncio")
SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval of a server process (CPython's default: 0.005)."""


def run(main: Coroutine[Any, Any, T], kind: str = "uvloop") -> T:
    """Run ``main`` to completion on a new loop of ``kind``, with the server's GIL switch
    interval, freezing what survives each full garbage collection."""
    if kind not in LOOPS:
        raise ValueError(f"unknown event loop {kind!r} (one of {', '.join(LOOPS)})")
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    with freeze_after_full_collections():
        if kind == "uvloop":
            import uvloop

            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
        return asyncio.run(main)


def _freeze_survivors(phase: str, info: dict[str, int]) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


@contextmanager
def freeze_after_full_collections() -> Iterator[None]:
    """While inside: after every full (generation 2) collection, move the survivors to the
    permanent generation (``gc.freeze``), so the next full collection scans only the objects
    that survived since. On the way out the hook is removed (the frozen stay frozen)."""
    hook: Callable[[str, dict[str, int]], None] = _freeze_survivors
    gc.callbacks.append(hook)
    try:
        yield
    finally:
        gc.callbacks.remove(hook)
