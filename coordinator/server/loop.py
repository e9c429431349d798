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

The cyclic garbage collector runs between the loop's callbacks, never inside one
(:class:`coordinator.runtime.collector.Collector`): a coordinator's state is millions of
long-lived objects, and CPython's own collector, triggered by allocations, ran inside commands
and connections' reads, rescanning that state (docs/benchmarks.md, join storms).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from coordinator.runtime.collector import Collector

T = TypeVar("T")
LOOPS = ("uvloop", "asyncio")
SWITCH_INTERVAL_S = 0.0005
"""The GIL switch interval of a server process (CPython's default: 0.005)."""


def run(main: Coroutine[Any, Any, T], kind: str = "uvloop") -> T:
    """Run ``main`` to completion on a new loop of ``kind``, with the server's GIL switch
    interval and the garbage collector run by the loop."""
    if kind not in LOOPS:
        raise ValueError(f"unknown event loop {kind!r} (one of {', '.join(LOOPS)})")
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if kind == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner, Collector(runner.get_loop()):
        return runner.run(main)
