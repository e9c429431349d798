"""The event loop the server runs on: uvloop (libuv; the default, a dependency) or asyncio's own.

grpc.aio runs on either. uvloop's faster callbacks and transports matter here because every
unary call is several loop callbacks; the service benchmark measures both (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
LOOPS = ("uvloop", "asyncio")


def run(main: Coroutine[Any, Any, T], kind: str = "uvloop") -> T:
    """Run ``main`` to completion on a new loop of ``kind``."""
    if kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    if kind != "asyncio":
        raise ValueError(f"unknown event loop {kind!r} (one of {', '.join(LOOPS)})")
    return asyncio.run(main)
