"""Topic administration over the Kafka protocol in coordinator-only mode: CreateTopics (19),
DeleteTopics (20) and CreatePartitions (37) change the coordinator's topic registry through the
service's topic RPCs (``topic_admin.py``: authorization, limits), as ``kip848 topics`` and the
gRPC AdminService do, so that Kafka's own tools (``kafka-topics.sh``, every AdminClient) manage
the topics the listener's Metadata lists. With an upstream broker they are the broker's and
are forwarded (``admin_guard.py``), never served here.

Each is answered as Kafka's controller answers it (``ControllerApis`` and
``ReplicationControlManager``): a name given twice answered once, INVALID_REQUEST
(``Duplicate topic name.``), and not created; refused topics TOPIC_AUTHORIZATION_FAILED; the
rest per topic, in the order of Kafka's answers (CreateTopics: the topics created or failed,
then the duplicates, then the refused ones; CreatePartitions: the duplicates, the refused ones,
then the rest; DeleteTopics, which Kafka shuffles, in the request's order). ``validate_only``
answers each topic as it would be and changes nothing. What the registry cannot hold is refused
per topic with the reason (``core/topics.py``): a replication factor other than 1 (each
partition has one replica, the node answering Metadata), topic configs, manual assignments.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic, TopicResult
from coordinator.security.acls import CLUSTER_NAME

from ..api import Caller, Reply, TopicChanges
from ..authorization import CLUSTER, DELETE, DESCRIBE, DESCRIBE_CONFIGS, TOPIC
from ..service import CoordinatorService
from . import wire
from .admin_guard import DUPLICATE, INVALID_REQUEST, MESSAGES, refused_creation
from .convert import topic_id_of, uuid_of

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
KEYS: dict[int, tuple[int, int]] = {
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    CREATE_PARTITIONS: (0, 3),
}
"""The versions served (Kafka 4's: v0-1 of CreateTopics and v0 of DeleteTopics are gone)."""
METADATA_TOPIC = "__cluster_metadata"
"""KRaft's log: Kafka refuses to create a topic of that name."""
TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_UNKNOWN_ID = "This server does not host this topic ID."

Values = dict[str, Any]


async def serve(
    service: CoordinatorService, key: int, version: int, entity: Any, caller: Caller
) -> Values:
    """The response values of one request of :data:`KEYS`."""
    if key == CREATE_TOPICS:
        return await _create_topics(service, entity, caller)
    if key == CREATE_PARTITIONS:
        return await _create_partitions(service, entity, caller)
    return await _delete_topics(service, version, entity, caller)


def _once(names: Sequence[str]) -> tuple[list[str], set[str]]:
    """(the names given twice or more, each once in order of first appearance; those names)"""
    counts = Counter(names)
    twice = [n for n in dict.fromkeys(names) if counts[n] > 1]
    return twice, set(twice)


def _results(reply: Reply[list[TopicResult]], names: Sequence[str]) -> list[TopicResult]:
    """Each topic's result; a request that failed whole (the registry not readable, a write
    timed out) gives its error to every topic, as Kafka's getErrorResponse."""
    if reply.value is not None:
        return reply.value
    return [
        TopicResult(name=n, error_code=reply.error_code, error_message=reply.error_message)
        for n in names
    ]


# ---------------------------------------------------------------- CreateTopics


async def _create_topics(service: CoordinatorService, e: Any, caller: Caller) -> Values:
    twice, dup = _once([t.name for t in e.topics])
    sent = [t for t in e.topics if t.name not in dup and t.name != METADATA_TOPIC]
    reply = await service.create_topics(
        TopicChanges(
            entries=[
                NewTopic(
                    name=t.name,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs=tuple(c.name for c in t.configs),
                    assignments=len(t.assignments),
                )
                for t in sent
            ],
            timeout_ms=wire.to_ms(e.timeout),
            validate_only=e.validate_only,
        ),
        caller,
    )
    results = _results(reply, [t.name for t in sent])
    answered = [_created(service, caller, r) for r in results if r.error_code != TOPIC_DENIED]
    answered += [refused_creation(n, INVALID_REQUEST, DUPLICATE) for n in twice]
    if any(t.name == METADATA_TOPIC for t in e.topics) and METADATA_TOPIC not in dup:
        answered.append(
            refused_creation(
                METADATA_TOPIC,
                INVALID_REQUEST,
                f"Creation of internal topic {METADATA_TOPIC} is prohibited.",
            )
        )
    answered += [
        refused_creation(r.name, TOPIC_DENIED, "Authorization failed.")
        for r in results
        if r.error_code == TOPIC_DENIED
    ]
    return {"topics": answered}


def _created(service: CoordinatorService, caller: Caller, r: TopicResult) -> Values:
    if r.error_code:
        return refused_creation(r.name, int(r.error_code), r.error_message or "")
    values = refused_creation(r.name, 0, "")
    values["topic_id"] = uuid_of(r.topic_id)
    values["error_message"] = None
    # Kafka shows a created topic's partitions, replication and configs only to a client that
    # may DESCRIBE_CONFIGS it (silently checked); the registry keeps no configs.
    if service.authz.may(caller, DESCRIBE_CONFIGS, TOPIC, r.name):
        values["num_partitions"], values["replication_factor"] = r.num_partitions, 1
    else:
        values["topic_config_error_code"] = TOPIC_DENIED
    return values


# ---------------------------------------------------------------- CreatePartitions


async def _create_partitions(service: CoordinatorService, e: Any, caller: Caller) -> Values:
    twice, dup = _once([t.name for t in e.topics])
    sent = [t for t in e.topics if t.name not in dup]
    reply = await service.create_partitions(
        TopicChanges(
            entries=[(t.name, t.count) for t in sent],
            timeout_ms=wire.to_ms(e.timeout),
            validate_only=e.validate_only,
            assignments={t.name: len(t.assignments) for t in sent if t.assignments is not None},
        ),
        caller,
    )
    results = _results(reply, [t.name for t in sent])
    refused = [r for r in results if r.error_code == TOPIC_DENIED]
    return {
        "results": [
            *(
                {"name": n, "error_code": INVALID_REQUEST, "error_message": DUPLICATE}
                for n in twice
            ),
            *({"name": r.name, "error_code": TOPIC_DENIED, "error_message": None} for r in refused),
            *(
                {"name": r.name, "error_code": int(r.error_code), "error_message": r.error_message}
                for r in results
                if r.error_code != TOPIC_DENIED
            ),
        ]
    }


# ---------------------------------------------------------------- DeleteTopics


async def _delete_topics(
    service: CoordinatorService, version: int, e: Any, caller: Caller
) -> Values:
    """Kafka's ControllerApis.deleteTopics, by name (v1-5) or by name or id (v6)."""
    given: list[tuple[str | None, str | None]] = (
        [(t.name, None if t.topic_id is None else topic_id_of(t.topic_id)) for t in e.topics]
        if version >= 6
        else [(n, None) for n in e.topic_names]
    )
    names = Counter(n for n, i in given if i is None)
    ids = Counter(i for n, i in given if n is None)
    out: list[Values | None] = [None] * len(given)  # None: not answered (yet)
    told: set[str | None] = set()  # duplicates answered
    todo: list[tuple[int, str]] = []  # (entry, topic name) for the service
    of_id: dict[str, int] = {}  # the name of a topic given by id -> its entry
    for at, (name, topic_id) in enumerate(given):
        if name is None and topic_id is None:
            out[at] = _deleted(None, None, INVALID_REQUEST, _NEITHER)
        elif name is not None and topic_id is not None:
            out[at] = _deleted(name, topic_id, INVALID_REQUEST, _BOTH)
        elif topic_id is not None:
            resolved = service.topic_name(topic_id)
            if ids[topic_id] > 1:
                if topic_id not in told:
                    told.add(topic_id)
                    out[at] = _deleted(None, topic_id, INVALID_REQUEST, _DUP_ID)
            elif not resolved:
                out[at] = _deleted(None, topic_id, int(ErrorCode.UNKNOWN_TOPIC_ID), _UNKNOWN_ID)
            else:
                of_id[resolved] = at
                todo.append((at, resolved))
        elif names[name] > 1:
            if name not in told:
                told.add(name)
                out[at] = _deleted(name, None, INVALID_REQUEST, DUPLICATE)
        else:
            todo.append((at, str(name)))
    for at, name in list(todo):
        clash = of_id.get(name)
        if clash is not None and clash != at and _may_delete(service, caller, name):
            # Kafka: a name that maps to an id also given (told only to who may delete it):
            # the name answered INVALID_REQUEST, neither deleted, the id not answered.
            out[at] = _deleted(name, given[clash][1], INVALID_REQUEST, _MAPS_TO_ID)
            todo = [(a, n) for a, n in todo if a not in (at, clash)]
    sent = [n for _at, n in todo]
    reply = await service.delete_topics(
        TopicChanges(entries=sent, timeout_ms=wire.to_ms(e.timeout)), caller
    )
    for (at, name), r in zip(todo, _results(reply, sent), strict=True):
        topic_id, code = given[at][1], int(r.error_code)
        if topic_id is not None and code == TOPIC_DENIED:  # the name only to who may describe it
            shown = name if service.authz.may(caller, DESCRIBE, TOPIC, name) else None
            out[at] = _deleted(shown, topic_id, code)
        elif topic_id is not None and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            out[at] = _deleted(None, topic_id, int(ErrorCode.UNKNOWN_TOPIC_ID), _UNKNOWN_ID)
        else:  # deleted: its id too, as Kafka answers
            shown_id = topic_id or (r.topic_id if code == 0 else None)
            out[at] = _deleted(name, shown_id, code, r.error_message)
    return {"responses": [v for v in out if v is not None]}


def _may_delete(service: CoordinatorService, caller: Caller, name: str) -> bool:
    authz = service.authz
    return authz.may(caller, DESCRIBE, TOPIC, name) and (
        authz.may(caller, DELETE, CLUSTER, CLUSTER_NAME) or authz.may(caller, DELETE, TOPIC, name)
    )


_NEITHER = "Neither topic name nor id were specified."
_BOTH = "You may not specify both topic name and topic id."
_DUP_ID = "Duplicate topic id."
_MAPS_TO_ID = "The provided topic name maps to an ID that was already supplied."


def _deleted(
    name: str | None, topic_id: str | None, code: int, message: str | None = None
) -> Values:
    """One DeletableTopicResult (Kafka's default message for a refusal)."""
    return {
        "name": name,
        "topic_id": None if topic_id is None else uuid_of(topic_id),
        "error_code": code,
        "error_message": MESSAGES.get(code, message) if code else None,
    }
