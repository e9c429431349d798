"""Fetch through the topic guard (``topic_guard.py``): READ on every partition of every fetch,
fetch sessions (KIP-227) included, answered per partition as Kafka's KafkaApis.handleFetch.

A broker checks a fetch against its whole fetch session, every time: an incremental fetch names
only the partitions that changed, but the broker walks all the session's partitions, authorizes
their topics again, and answers a refused partition TOPIC_AUTHORIZATION_FAILED in every
response (a partition with an error is always in an incremental response). The listener, in
front of an upstream that cannot tell its clients apart, does the same:

* Per connection it follows the session the client holds with the upstream
  (:class:`FetchSession`): its partitions in the client's order, each with the fetch state the
  client last sent (offset, epochs, max bytes), and which of them the upstream's session holds.
  A full fetch (epoch 0 or -1) starts it anew; an incremental one updates and forgets
  partitions as the broker's session does.
* Every fetch judges the session's topics again (the authorizer caches its decisions). The
  upstream's session holds only allowed partitions: one refused now is forgotten in the request
  that goes upstream; one allowed again (its ACL restored, a topic id the registry has learnt)
  is added back with the state the client last sent. So the upstream is never asked for a
  partition the client may not read, and an ACL removed takes effect on the very next fetch of
  an existing session, as on a broker.
* The answer gets the refused partitions appended after the upstream's (Kafka's order), first
  UNKNOWN_TOPIC_ID for topic ids the registry does not know (v13+), then
  TOPIC_AUTHORIZATION_FAILED. A fetch that leaves the upstream nothing to fetch goes with
  ``max_wait`` 0 (Kafka answers at once when nothing can be fetched); a sessionless one, or one
  that would create a session, is answered here instead (no session is created: the client
  fetches in full next time).
* A request the guard does not change goes as it came, and its answer too (an answer that
  creates a session is only peeked at, for its id).
* A follower's fetch (a replica id of 0 or more: ``replica_id``, from v15 ``replica_state``)
  needs CLUSTER_ACTION on the cluster and no topic READ, as Kafka's: a client without it gets
  TOPIC_AUTHORIZATION_FAILED on every partition it names, answered here — the upstream, which
  cannot tell the coordinator's connection from a broker's, would take it for a replica's
  (data past the high watermark, the partition's ISR and high watermark moved by it); with it,
  the fetch goes as it came.
* An incremental fetch of a session this connection did not see start (made while there were
  no ACLs, or on another connection) is answered FETCH_SESSION_ID_NOT_FOUND here: the client
  starts a new session, followed from its start. The upstream answering a top-level error (an
  evicted session, a wrong epoch) ends the session here too. Without the guard (no ACLs, or
  SASL pass-through) nothing is followed.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from coordinator.security.acls import CLUSTER_NAME, AclOperation

from ..authorization import CLUSTER
from . import admin_guard, apis, topic_guard, wire
from .topic_guard import GuardedConnection

Key = tuple[Any, int]
"""A session's partition: (topic name, or from v13 topic id; partition index)."""

SESSIONS_SINCE = 7
IDS_SINCE = 13
FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSION_TOPIC_ID_ERROR = 70, 106


class FetchSession:
    """What the client believes its fetch session holds (as the broker's cached partitions),
    and which of those partitions the upstream's session holds."""

    __slots__ = ("session_id", "by_id", "partitions", "upstream")

    def __init__(self, by_id: bool, partitions: dict[Key, Any]) -> None:
        self.session_id = 0
        """The upstream's id for it, once the answer that created it arrived (0 before)."""
        self.by_id = by_id
        """Topics named by id (v13+) or by name; a session is one or the other."""
        self.partitions = partitions
        """Key -> the request partition the client last sent for it, in the session's order."""
        self.upstream: set[Key] = set()


def forward(
    conn: GuardedConnection,
    key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    frame: bytes,
) -> None:
    """Forward a Fetch (``key``; decoded as ``entity``) as the module doc says, or answer it
    (``topic_guard.forward``'s signature)."""
    by_id = version >= IDS_SINCE
    epoch = entity.session_epoch if version >= SESSIONS_SINCE else -1
    requested = _keyed(entity.topics, by_id, lambda t: ((p.partition, p) for p in t.partitions))
    if replica_id(entity) >= 0:
        caller = conn.caller(client_id, version)
        authz = conn.listener.service.authz
        if authz.allowed(caller, "Fetch", int(AclOperation.CLUSTER_ACTION), CLUSTER, CLUSTER_NAME):
            conn.forward(apis.FETCH, version, frame)  # a replica's fetch: the broker's to judge
            return
        values = {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": _refused([(k, topic_guard.DENIED) for k in requested], by_id),
        }
        body = wire.build(wire.response_class(apis.FETCH, version), values)
        conn.answer(wire.frame(apis.FETCH, version, correlation_id, body))
        return
    forgotten = list(_keyed(getattr(entity, "forgotten_topics_data", None) or (), by_id, _bare))
    full = epoch in (0, -1)
    if full:
        session = FetchSession(by_id, dict(requested))
        conn.fetch_session = session if epoch == 0 else None
    else:
        found = conn.fetch_session
        if found is None or found.session_id != entity.session_id or not entity.session_id:
            conn.answer(_error(version, correlation_id, FETCH_SESSION_ID_NOT_FOUND))
            return
        if found.by_id != by_id:
            conn.fetch_session = None
            conn.answer(_error(version, correlation_id, FETCH_SESSION_TOPIC_ID_ERROR))
            return
        session = found
        session.partitions.update(requested)  # as the broker: changes first, then forgets
        for gone in forgotten:
            session.partitions.pop(gone, None)

    # Judge every partition of the session, as the broker does on every fetch.
    names = {
        topic: topic_guard.id_name(conn, topic) if by_id else topic
        for topic in {k[0]: None for k in session.partitions}
    }
    shape = topic_guard.GUARDED[apis.FETCH]
    denied = topic_guard.denied_names(conn, conn.caller(client_id, version), shape, names.values())
    allowed = [k for k in session.partitions if names[k[0]] and names[k[0]] not in denied]
    erroneous = [(k, topic_guard.UNKNOWN_TOPIC_ID) for k in session.partitions if not names[k[0]]]
    erroneous += [(k, topic_guard.DENIED) for k in session.partitions if names[k[0]] in denied]

    if full:
        send, forget = allowed, []
        unchanged = not erroneous
    else:
        before, now = session.upstream, set(allowed)
        send = [k for k in allowed if k in requested or k not in before]
        forget = [k for k in forgotten if k in before]
        forget += [k for k in session.partitions if k in before and k not in now]
        unchanged = set(send) == requested.keys() and set(forget) == set(forgotten) and bool(now)
    session.upstream = set(allowed)

    refused = _refused(erroneous, by_id)
    if full and not allowed:  # nothing for the upstream: answered here, no session made
        conn.fetch_session = None
        values = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": refused}
        body = wire.build(wire.response_class(apis.FETCH, version), values)
        conn.answer(wire.frame(apis.FETCH, version, correlation_id, body))
        return
    if not unchanged:
        values = {f: getattr(entity, f) for f in entity.__dataclass_fields__}
        field = "topic_id" if by_id else "topic"
        values["topics"] = [
            {field: topic, "partitions": [session.partitions[k] for k in keys]}
            for topic, keys in _runs(send)
        ]
        if "forgotten_topics_data" in values:
            values["forgotten_topics_data"] = [
                {field: topic, "partitions": [k[1] for k in keys]} for topic, keys in _runs(forget)
            ]
        if not allowed:
            values["max_wait"] = 0
        frame = wire.request_frame(wire.build(type(entity), values), correlation_id, client_id)
    if epoch == -1 and not refused:
        conn.forward(apis.FETCH, version, frame)
        return
    conn.forward(
        apis.FETCH, version, frame, then=partial(_answered, conn, session, version, refused)
    )


def _answered(
    conn: GuardedConnection, session: FetchSession, version: int, refused: list[Any], out: bytes
) -> bytes:
    """The upstream's answer (with its size): the session's id or end read, the refused
    partitions appended."""
    if version >= SESSIONS_SINCE:
        pos = 8  # after the size and the correlation id: the header's tags, then the body
        if wire.response_header_flexible(apis.FETCH, version):
            pos = wire.skip_tagged_fields(out, pos)
        code = int.from_bytes(out[pos + 4 : pos + 6], "big", signed=True)
        session_id = int.from_bytes(out[pos + 6 : pos + 10], "big", signed=True)
        if code:  # the session is over: the client starts a new one
            if conn.fetch_session is session:
                conn.fetch_session = None
            return out
        if not session.session_id and conn.fetch_session is session:
            session.session_id = session_id
            if session_id <= 0:  # none was created
                conn.fetch_session = None
    if not refused:
        return out
    return admin_guard.amend(apis.FETCH, version, admin_guard.merged("responses", refused), out)


def _refused(erroneous: list[tuple[Key, int]], by_id: bool) -> list[dict[str, Any]]:
    """Response topics answering ``erroneous`` partitions (consecutive ones of a topic
    together, as Kafka's FetchResponse groups them)."""
    refused = topic_guard.GUARDED[apis.FETCH].refused
    codes = dict(erroneous)
    return [
        {
            "topic": None if by_id else topic,
            "topic_id": topic if by_id else None,
            "partitions": [
                {"partition_index": k[1], "error_code": codes[k], **refused} for k in keys
            ],
        }
        for topic, keys in _runs([k for k, _ in erroneous])
    ]


def replica_id(entity: Any) -> int:
    """The fetching replica's id (Kafka's FetchRequest.replicaId): ``replica_id`` before v15,
    ``replica_state.replica_id`` from v15; -1 for a consumer."""
    state = getattr(entity, "replica_state", None)
    found = getattr(state, "replica_id", None) if state is not None else None
    if found is None:
        found = getattr(entity, "replica_id", None)
    return -1 if found is None else int(found)


def _error(version: int, correlation_id: int, code: int) -> bytes:
    values = {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": []}
    body = wire.build(wire.response_class(apis.FETCH, version), values)
    return wire.frame(apis.FETCH, version, correlation_id, body)


def _bare(topic: Any) -> Iterable[tuple[int, None]]:
    return ((p, None) for p in topic.partitions)


def _keyed(topics: Iterable[Any], by_id: bool, parts: Any) -> dict[Key, Any]:
    """Request topics -> {(topic name or id, partition): what ``parts`` gives for it}."""
    out = {}
    for t in topics:
        topic = t.topic_id if by_id else t.topic
        for index, value in parts(t):
            out[topic, index] = value
    return out


def _runs(keys: list[Key]) -> list[tuple[Any, list[Key]]]:
    """Keys grouped by topic, consecutive ones together, in order."""
    out: list[tuple[Any, list[Key]]] = []
    for k in keys:
        if out and out[-1][0] == k[0]:
            out[-1][1].append(k)
        else:
            out.append((k[0], [k]))
    return out
