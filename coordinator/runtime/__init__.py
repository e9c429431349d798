"""The runtime: the only IO of the coordinator.

Rules: one asyncio event loop; the core runs synchronously on it; records become durable in the
record store (``store/``) before any response that depends on them is released; time comes from
a clock object (``clock.py``), ids from ``ids.py``. Read ``runtime.py`` first: it explains
shards, group commit, rollback on write failure and timers. ``loader.py`` replays a store's logs at start-up;
the group -> partition hash is Kafka's (``coordinator/routing.py``).
"""

from .clock import ManualClock, SystemClock
from .ids import RandomIds
from .loader import LoadStats, load_into
from .runtime import REGISTRY, CoordinatorRuntime, RuntimeState

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
