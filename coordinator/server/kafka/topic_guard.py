"""Topic ACLs on the data APIs the listener forwards, where the broker cannot check them
(docs/security.md "What each request needs").

The listener forwards Produce, Fetch, ListOffsets and Metadata to the upstream over its own
connection. Unless the client authenticated to the broker itself (SASL pass-through), the broker
sees the coordinator, not the client: an open broker would let anyone read and write any topic
through us. So the listener checks the topics of those requests against the ACLs here first,
as Kafka's KafkaApis does — Produce needs WRITE, Fetch READ, ListOffsets DESCRIBE, Metadata
DESCRIBE — whenever ACLs exist (with none and ``allow.everyone.if.no.acl.found``, nothing is
decoded: the requests go as they are).

* Produce, Fetch, ListOffsets: a request naming a topic the client may not use is answered
  here, every partition TOPIC_AUTHORIZATION_FAILED, and nothing is forwarded (Kafka answers the
  allowed partitions of such a mixed request; clients send one request per leader for the
  topics they use, so a client gets a mixed one only when it asks for what it may not have).
  A Fetch of a fetch session names only the partitions it changes: the session's partitions
  were checked when they were added.
* Metadata is forwarded and its answer filtered: a topic the client may not describe is left
  out of an "all topics" answer, and answered TOPIC_AUTHORIZATION_FAILED when named.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from coordinator.core.errors import ErrorCode

from ..authorization import DESCRIBE, READ, WRITE
from . import apis, wire
from .convert import topic_id_of
from .upstream import as_values

if TYPE_CHECKING:
    from .listener import KafkaConnection

LIST_OFFSETS = 2
GUARDED = {apis.PRODUCE: WRITE, apis.FETCH: READ, LIST_OFFSETS: DESCRIBE}
"""API key -> the topic operation it needs."""
API_NAMES = {apis.PRODUCE: "Produce", apis.FETCH: "Fetch", LIST_OFFSETS: "ListOffsets"}
DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def guards(conn: KafkaConnection) -> bool:
    """True when this connection's forwarded data requests are checked here: ACLs exist and
    the client did not authenticate to the broker itself."""
    listener = conn.listener
    if listener.upstream is None or listener.service.authorizer.open:
        return False
    sasl = conn.sasl
    return not (sasl is not None and sasl.authenticator.passthrough)


def _topics(key: int, entity: Any) -> list[Any]:
    return list(entity.topic_data if key == apis.PRODUCE else entity.topics)


def _name(conn: KafkaConnection, topic: Any) -> str:
    """A request topic's name (Fetch v13+ names topics by id: the registry's name, "" if it
    does not know the id)."""
    name = getattr(topic, "name", None) or getattr(topic, "topic", None)
    if name:
        return str(name)
    topic_id = getattr(topic, "topic_id", None)
    return conn.listener.service.topic_name(topic_id_of(topic_id)) if topic_id else ""


def refusal(
    conn: KafkaConnection, key: int, version: int, correlation_id: int, client_id: str | None,
    entity: Any,
) -> bytes | None:  # fmt: skip
    """None: every topic of the request is allowed (forward it). Otherwise the response frame
    refusing each of its partitions (the refusals are reported)."""
    caller = conn.caller(client_id, version)
    authz = conn.listener.service.authz
    topics = _topics(key, entity)
    names = [_name(conn, t) for t in topics]
    # A topic id the registry does not know cannot be judged: refused (the registry follows
    # the broker; a new topic's id is known within kafka.upstream.metadata.max.age.ms).
    denied = set(authz.denied_topics(caller, API_NAMES[key], GUARDED[key], (n for n in names if n)))
    if not denied and all(names):
        return None
    values = _refused_values(key, topics)
    return wire.frame(
        key, version, correlation_id, wire.build(wire.response_class(key, version), values)
    )


def _refused_values(key: int, topics: list[Any]) -> dict[str, Any]:
    message = "Not authorized to access topics of this request."
    if key == apis.PRODUCE:
        return {
            "responses": [
                {
                    "name": getattr(t, "name", None),
                    "topic_id": getattr(t, "topic_id", None),
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": DENIED,
                            "base_offset": -1,
                            "log_append_time": None,
                            "log_start_offset": -1,
                            "record_errors": [],
                            "error_message": message,
                        }
                        for p in t.partition_data
                    ],
                }
                for t in topics
            ],
            "throttle_time": 0,
        }
    if key == apis.FETCH:
        return {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": getattr(t, "topic", None),
                    "topic_id": getattr(t, "topic_id", None),
                    "partitions": [
                        {
                            "partition_index": p.partition,
                            "error_code": DENIED,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": None,
                        }
                        for p in t.partitions
                    ],
                }
                for t in topics
            ],
        }
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": DENIED,
                        "timestamp": -1,
                        "offset": -1,
                        "leader_epoch": -1,
                    }
                    for p in t.partitions
                ],
            }
            for t in topics
        ],
    }


def filter_metadata(
    conn: KafkaConnection, version: int, client_id: str | None, request: Any, frame: bytes
) -> bytes:
    """A Metadata response frame (size included) with the topics the client may not describe
    left out (all topics asked) or answered TOPIC_AUTHORIZATION_FAILED (named)."""
    key = apis.METADATA
    pos = 4 + 4 + (1 if wire.response_header_flexible(key, version) else 0)
    resp = wire.decode_response(key, version, frame[4:], pos - 4)
    values = as_values(resp)
    caller = conn.caller(client_id, version)
    authz = conn.listener.service.authz
    named = request.topics is not None and (version > 0 or request.topics)
    out = []
    for t in values["topics"]:
        name = t.get("name") or conn.listener.service.topic_name(
            topic_id_of(t.get("topic_id")) if isinstance(t.get("topic_id"), uuid.UUID) else ""
        )
        if name and authz.may(caller, DESCRIBE, 2, name):
            out.append(t)
        elif named:
            authz.allowed(caller, "Metadata", DESCRIBE, 2, name)  # reported
            out.append({**t, "error_code": DENIED, "partitions": [], "is_internal": False})
    values["topics"] = out
    body = wire.build(type(resp), values)
    return wire.frame(key, version, int.from_bytes(frame[4:8], "big", signed=True), body)
