"""The runtime: the only IO of the coordinator.

Rules: one asyncio event loop; the core runs synchronously on it; records become durable in the
record store (``store/``) before any response that depends on them is released; time comes from
a clock object (``clock.py``), ids from ``ids.py``. Every decision about the state machines is
the sans-IO driver's (``driver.py``: its docstring is the theory of operation — shards, turns,
group commit, parked requests, first targets, offloads, rollback, timers); ``engine.py`` runs it
on asyncio with the store and the workers (the only IO); ``runtime.py`` is the typed API the
server calls. ``loader.py`` holds the stable group -> shard hash and the replay of a store at
start-up; the group -> partition hash is Kafka's (``coordinator/routing.py``).
"""

from .clock import ManualClock, SystemClock
from .driver import REGISTRY, RuntimeState
from .ids import RandomIds
from .loader import LoadStats, load_into
from .runtime import CoordinatorRuntime

__all__ = [
    "REGISTRY",
    "CoordinatorRuntime",
    "LoadStats",
    "ManualClock",
    "RandomIds",
    "RuntimeState",
    "SystemClock",
    "load_into",
]
