"""FindCoordinator (``CoordinatorService.find_coordinator``), for every codec: each key
authorized first (DESCRIBE on the group, or on the transactional id), as Kafka's
``KafkaApis.getCoordinator``, then answered with the node the request came through
(``caller.node``: every listener of this process is the coordinator) or, among several nodes,
the node leading the key's coordinator partition (``cluster.py``'s routing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from coordinator.core.errors import (
    CoordinatorError,
    CoordinatorNotAvailableError,
    InvalidRequestError,
)
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.security.authorizer import Authorizer

from .api import Caller, Coordinator, Reply
from .authorization import DESCRIBE, GROUP, TRANSACTIONAL_ID, RequestAuthorizer

if TYPE_CHECKING:
    from .cluster import ClusterRouting

__all__ = ["GROUP_KEY_TYPE", "find_coordinators"]

GROUP_KEY_TYPE = 0
_KEY_RESOURCES = {GROUP_KEY_TYPE: GROUP, 1: TRANSACTIONAL_ID}
"""FindCoordinator's key types and the resource a key names (Kafka: DESCRIBE on it)."""


class CoordinatorHost(Protocol):
    """What FindCoordinator needs of the service (``service.CoordinatorService``)."""

    runtime: CoordinatorRuntime
    authorizer: Authorizer
    authz: RequestAuthorizer
    routing: ClusterRouting | None


def find_coordinators(
    service: CoordinatorHost, req: tuple[int, Sequence[str]], caller: Caller
) -> Reply[list[Coordinator]]:
    """``req``: (key type, keys). Only GROUP keys are served here (a transactional id's
    coordinator stays the upstream's: the Kafka listener routes those itself)."""
    key_type, keys = req
    exc: CoordinatorError | None = None
    state = service.runtime.state
    if key_type != GROUP_KEY_TYPE:
        exc = InvalidRequestError(
            f"Key type {key_type} is not served: this coordinator serves only groups (key type 0)."
        )
    elif state is not RuntimeState.ACTIVE:
        exc = CoordinatorNotAvailableError(f"The coordinator is {state.value}.")
    elif caller.node is None:
        exc = CoordinatorNotAvailableError("The coordinator's address is not known yet.")
    # Kafka (KafkaApis.getCoordinator) authorizes each key first — DESCRIBE on the group, or
    # on the transactional id — and only then looks for its coordinator: a key the caller
    # may not describe is refused whatever the coordinator's state (before the ACLs are
    # loaded nothing can be decided: the state's error).
    resource = _KEY_RESOURCES.get(key_type)
    if exc is not None and (not keys or resource is None or not service.authorizer.ready):
        if not keys:
            return Reply(value=[], error_code=exc.code, error_message=exc.message)
        return Reply(value=[_coordinator_error(k, exc) for k in keys])
    assert resource is not None
    node = caller.node
    routing = service.routing
    answers = []
    for k in keys:
        try:
            service.authz.check(caller, "FindCoordinator", DESCRIBE, resource, k)
        except CoordinatorError as refused:
            answers.append(_coordinator_error(k, refused))
            continue
        if exc is not None:
            answers.append(_coordinator_error(k, exc))
            continue
        assert node is not None
        found = node if routing is None else routing.coordinator(k, caller)
        if isinstance(found, CoordinatorError):
            answers.append(_coordinator_error(k, found))
        else:
            answers.append(
                Coordinator(key=k, node_id=found.node_id, host=found.host, port=found.port)
            )
    return Reply(value=answers)


def _coordinator_error(key: str, exc: CoordinatorError) -> Coordinator:
    """A FindCoordinator key answered with an error (node id -1, as Kafka's)."""
    return Coordinator(
        key=key, node_id=-1, host="", port=-1, error_code=exc.code, error_message=exc.message
    )
