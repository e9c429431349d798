"""``kip848 serve``'s observers: the server's ``ServeObservers`` (``server/observers.py``,
whose shape this module follows without importing it), wired in by the CLI. Each hook is this
package's: request metrics, spans and audit lines (``requests.py``), the metrics endpoint
(``observer.py``), tracing's flush at the end (``tracing.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import tracing
from .metrics import CoordinatorMetrics
from .observer import start_metrics_endpoint
from .requests import (
    ForwardDone,
    RequestObserver,
    authentication_observer,
    connection_refusal_observer,
    forwarded_timer,
    refusal_observer,
)


class ServeObservability:
    """The observers of one server over ``metrics`` (the runtime observer's; None: metrics
    off — audit lines and, when tracing is on, spans all the same)."""

    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self.metrics = metrics

    def rpcs(self) -> RequestObserver:
        return RequestObserver(self.metrics)

    def authentication_failed(self) -> Callable[[str, str, str, str], None]:
        return authentication_observer(self.metrics)

    def connection_refused(self) -> Callable[[str, str, str], None]:
        return connection_refusal_observer(self.metrics)

    def authorization_refused(self) -> Callable[[Any], None]:
        return refusal_observer(self.metrics)

    def forwarded(self, api_name: Callable[[int], str]) -> Callable[[int], ForwardDone] | None:
        return forwarded_timer(self.metrics, api_name)

    start_metrics_endpoint = staticmethod(start_metrics_endpoint)

    def close(self) -> None:
        tracing.shutdown()
