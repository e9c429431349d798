"""Topic ACLs on the data APIs the listener forwards, where the broker cannot check them
(docs/security.md "What each request needs"), answered per partition as Kafka's KafkaApis
answers them.

Unless the client authenticated to the broker itself (SASL pass-through), the broker sees the
coordinator, not the client: an open broker would let anyone read and write any topic through
us. So whenever ACLs exist (with none and ``allow.everyone.if.no.acl.found``, nothing is
decoded: the requests go as they are), the listener checks the topics of what it forwards,
each against the operation Kafka checks: Produce WRITE, Fetch READ (``fetch_guard.py``: fetch
sessions), ListOffsets DESCRIBE, OffsetForLeaderEpoch DESCRIBE (or CLUSTER_ACTION on the
cluster), DeleteRecords DELETE, DescribeProducers READ, Metadata DESCRIBE; a Produce with
transactional records first needs WRITE on its transactional id (``txn_guard.py``). Every other
forwarded API has its rule in ``admin_guard.py`` / ``txn_guard.py``.

* A request naming only topics the client may use goes as it came. One naming others too goes
  without them, and its answer gets theirs appended after the broker's, as Kafka merges them:
  every partition TOPIC_AUTHORIZATION_FAILED (a topic id the registry does not know:
  UNKNOWN_TOPIC_ID, after those). One naming none the client may use is answered here and
  reaches nothing.
* Produce with ``acks=0`` has no answer: the allowed topics' records go, the others' are dropped,
  and the connection is closed once the answers before it are out, as Kafka closes it when an
  ``acks=0`` produce fails anywhere (the client notices and refreshes its metadata).
* Metadata: a named topic the client may not describe is answered TOPIC_AUTHORIZATION_FAILED
  (without its id) and not forwarded, whether it exists or not, so the broker never creates it;
  one it may describe but not create (no CREATE on it or the cluster) that the registry does
  not know is answered TOPIC_AUTHORIZATION_FAILED too, as Kafka refuses its auto-creation. An
  "all topics" answer leaves out the topics the client may not describe, silently.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, Protocol

from coordinator.core.errors import ErrorCode
from coordinator.security.acls import CLUSTER_NAME, AclOperation

from ..authorization import CLUSTER, CREATE, DELETE, DESCRIBE, READ, TOPIC, WRITE, operations_of
from . import admin_guard, apis, txn_guard, wire
from .convert import topic_id_of
from .upstream import metadata_answers

log = logging.getLogger("kip848.kafka")


class GuardedConnection(admin_guard.GuardedConnection, Protocol):
    """A client connection as the topic and fetch guards see it (``listener.KafkaConnection``)."""

    sasl: Any
    """Its SASL session (``sasl.SaslSession``; None on a listener without SASL)."""

    fetch_session: Any
    """The fetch session the fetch guard follows on it (``fetch_guard.FetchSession``), if any."""

    @property
    def peer(self) -> str:
        """The client's address (for the log)."""

    def close_when_drained(self) -> None:
        """Close once the answers in its order are written."""


LIST_OFFSETS, DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_PRODUCERS = 2, 21, 23, 61
DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
TXN_DENIED = int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
CLUSTER_ACTION = int(AclOperation.CLUSTER_ACTION)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Guarded:
    """A forwarded API whose request names topics and their partitions, in Kafka's shape."""

    api: str
    """Kafka's name of the API (refusals are reported with it)."""
    operation: int
    """What the client needs on each topic."""
    topics: str
    """The request's topic list ..."""
    partitions: str
    """... a topic's partitions ..."""
    index: str
    """... and a partition's index field ("": the partitions are bare indexes)."""
    answers: str
    """The response's topic list ..."""
    name: str
    """... a topic's name field ..."""
    answer_partitions: str
    """... its partitions ..."""
    answer_index: str
    """... and a partition's index field."""
    refused: Mapping[str, Any]
    """A refused partition's other fields (Kafka's "unknown" values)."""
    cluster_action: bool = False
    """CLUSTER_ACTION on the cluster allows every topic (OffsetForLeaderEpoch: followers)."""


GUARDED: dict[int, Guarded] = {
    apis.PRODUCE: Guarded(
        api="Produce",
        operation=WRITE,
        topics="topic_data",
        partitions="partition_data",
        index="index",
        answers="responses",
        name="name",
        answer_partitions="partition_responses",
        answer_index="index",
        refused={"base_offset": -1, "log_append_time": None, "log_start_offset": -1},
    ),
    apis.FETCH: Guarded(  # fetch_guard.py: only its refusal's reporting and messages from here
        api="Fetch",
        operation=READ,
        topics="topics",
        partitions="partitions",
        index="partition",
        answers="responses",
        name="topic",
        answer_partitions="partitions",
        answer_index="partition_index",
        refused={"high_watermark": -1, "records": b""},
    ),
    LIST_OFFSETS: Guarded(
        api="ListOffsets",
        operation=DESCRIBE,
        topics="topics",
        partitions="partitions",
        index="partition_index",
        answers="topics",
        name="name",
        answer_partitions="partitions",
        answer_index="partition_index",
        refused={"timestamp": -1, "offset": -1, "leader_epoch": -1},
    ),
    DELETE_RECORDS: Guarded(
        api="DeleteRecords",
        operation=DELETE,
        topics="topics",
        partitions="partitions",
        index="partition_index",
        answers="topics",
        name="name",
        answer_partitions="partitions",
        answer_index="partition_index",
        refused={"low_watermark": -1},
    ),
    OFFSET_FOR_LEADER_EPOCH: Guarded(
        api="OffsetForLeaderEpoch",
        operation=DESCRIBE,
        topics="topics",
        partitions="partitions",
        index="partition",
        answers="topics",
        name="topic",
        answer_partitions="partitions",
        answer_index="partition",
        refused={"leader_epoch": -1, "end_offset": -1},
        cluster_action=True,
    ),
    DESCRIBE_PRODUCERS: Guarded(
        api="DescribeProducers",
        operation=READ,
        topics="topics",
        partitions="partition_indexes",
        index="",
        answers="topics",
        name="name",
        answer_partitions="partitions",
        answer_index="partition_index",
        refused={"active_producers": []},
    ),
}
"""API key -> how its topics are checked and its refusals answered."""


def guards(conn: GuardedConnection) -> bool:
    """True when this connection's forwarded data requests are checked here: ACLs exist and
    the client did not authenticate to the broker itself."""
    listener = conn.listener
    if listener.upstream is None or listener.service.authorizer.open:
        return False
    sasl = conn.sasl
    return not (sasl is not None and sasl.authenticator.passthrough)


def topic_name(conn: GuardedConnection, topic: Any) -> str:
    """A request topic's name (by id from Fetch v13, Produce v13, Metadata v12: the registry's
    name, "" if it does not know the id)."""
    name = getattr(topic, "name", None) or getattr(topic, "topic", None)
    return str(name) if name else id_name(conn, getattr(topic, "topic_id", None))


def id_name(conn: GuardedConnection, topic_id: uuid.UUID | None) -> str:
    """The registry's name of a topic id ("" if it does not know it, or for no id)."""
    return conn.listener.service.topic_name(topic_id_of(topic_id)) if topic_id else ""


def denied_names(
    conn: GuardedConnection, caller: Any, shape: Guarded, names: Iterable[str]
) -> set[str]:
    """The names the client may not use as ``shape`` needs (each refusal reported)."""
    authz = conn.listener.service.authz
    if shape.cluster_action and authz.may(caller, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
        return set()
    return set(authz.denied_topics(caller, shape.api, shape.operation, (n for n in names if n)))


def refusal_message(code: int, name: str) -> str | None:
    if code == DENIED:
        return f"Not authorized to access topics: [{name}]"
    if code == UNKNOWN_TOPIC_ID:
        return "This server does not host this topic ID."
    return None  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Kafka sends the code alone


def refused_topic(shape: Guarded, topic: Any, code: int, name: str) -> dict[str, Any]:
    """A request topic answered here: each of its partitions ``code``."""
    indexes = [
        p if not shape.index else getattr(p, shape.index) for p in getattr(topic, shape.partitions)
    ]
    return {
        shape.name: name or None,
        "topic_id": getattr(topic, "topic_id", None),
        shape.answer_partitions: [
            {
                shape.answer_index: i,
                "error_code": code,
                "error_message": refusal_message(code, name),
                **shape.refused,
            }
            for i in indexes
        ],
    }


def forward(
    conn: GuardedConnection,
    key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    frame: bytes,
) -> None:
    """Forward a guarded request (decoded as ``entity``; not a Fetch: ``fetch_guard.py``) as
    the module doc says, or answer it."""
    shape = GUARDED[key]
    caller = conn.caller(client_id, version)
    topics = list(getattr(entity, shape.topics))
    names = [topic_name(conn, t) for t in topics]
    if key == apis.PRODUCE and txn_guard.refuses_produce(
        admin_guard.guard(conn, key, version, client_id), entity
    ):
        # Kafka checks the transactional id first: every partition refused, nothing written.
        refused = [
            refused_topic(shape, t, TXN_DENIED, n) for t, n in zip(topics, names, strict=True)
        ]
        why = f"its transactional id {entity.transactional_id!r} may not be written for"
        _finish(conn, key, version, correlation_id, entity, None, refused, why)
        return
    denied = denied_names(conn, caller, shape, names)
    if not denied and all(names):
        conn.forward(key, version, frame)
        return
    allowed = [t for t, n in zip(topics, names, strict=True) if n and n not in denied]
    refused = [
        refused_topic(shape, t, DENIED, n)
        for t, n in zip(topics, names, strict=True)
        if n in denied
    ]
    refused += [
        refused_topic(shape, t, UNKNOWN_TOPIC_ID, "")
        for t, n in zip(topics, names, strict=True)
        if not n
    ]
    narrowed = None
    if allowed:
        narrowed = wire.request_frame(
            dataclasses.replace(entity, **{shape.topics: tuple(allowed)}), correlation_id, client_id
        )
    why = (
        f"it named topics it may not write to ({', '.join(sorted(denied)) or 'unknown topic ids'})"
    )
    _finish(conn, key, version, correlation_id, entity, narrowed, refused, why)


def _finish(
    conn: GuardedConnection,
    key: int,
    version: int,
    correlation_id: int,
    entity: Any,
    narrowed: bytes | None,
    refused: list[dict[str, Any]],
    why: str,
) -> None:
    """Forward ``narrowed`` (the allowed part) with ``refused`` merged into its answer, or
    answer ``refused`` here; an acks=0 Produce has no answer: its allowed part goes, then the
    connection is closed (Kafka closes it when an acks=0 produce fails anywhere)."""
    shape = GUARDED[key]
    if key == apis.PRODUCE and entity.acks == 0:
        if narrowed is not None:
            conn.forward(key, version, narrowed)
        log.info(
            "Closing Kafka connection from %s: an acks=0 Produce (correlation id %d) was "
            "refused in part or whole: %s; the refused records were dropped.",
            conn.peer,
            correlation_id,
            why,
        )
        conn.close_when_drained()
        return
    if narrowed is None:
        conn.answer(
            admin_guard.answer_frame(key, version, correlation_id, {shape.answers: refused})
        )
        return
    then = partial(admin_guard.amend, key, version, admin_guard.merged(shape.answers, refused))
    conn.forward(key, version, narrowed, then=then)


# ---------------------------------------------------------------- Metadata


async def metadata(
    conn: GuardedConnection,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    frame: bytes,
) -> bytes:
    """A guarded Metadata: forwarded without the named topics the client may not have, its
    answer (naming our brokers) filtered (see the module doc)."""
    key = apis.METADATA
    upstream = conn.listener.upstream
    assert upstream is not None
    caller = conn.caller(client_id, version)
    service = conn.listener.service
    authz = service.authz
    wanted = entity.topics
    named = wanted is not None and (version > 0 or bool(wanted))
    refused: list[dict[str, Any]] = []  # not to be created, then not to be described (Kafka)
    undescribed: list[dict[str, Any]] = []
    asked: set[Any] = set()
    if named:
        auto = bool(getattr(entity, "allow_auto_topic_creation", True))
        creates_any = auto and authz.may(caller, CREATE, CLUSTER, CLUSTER_NAME)
        kept = []
        for t in wanted:
            name = t.name or ""
            if not name:  # by id: judged in the answer (Kafka: ids are not secret)
                kept.append(t)
            elif not authz.allowed(caller, "Metadata", DESCRIBE, TOPIC, name):
                undescribed.append(admin_guard.undescribed_topic(name))
            elif (
                auto
                and not creates_any
                and not service.topic_exists(name)
                and not authz.allowed(caller, "Metadata", CREATE, TOPIC, name)
            ):
                refused.append(
                    admin_guard.undescribed_topic(name)
                )  # not created: TOPIC_AUTHORIZATION_FAILED
            else:
                kept.append(t)
        if len(kept) < len(wanted):
            # (v0 reads an empty list as "all topics": then the answer's are all left out.)
            frame = wire.request_frame(
                dataclasses.replace(entity, topics=tuple(kept)), correlation_id, client_id
            )
        asked = {t.name or getattr(t, "topic_id", None) for t in kept}
    answer = await upstream.forward_future(conn, key, version, frame)
    with_ops = bool(getattr(entity, "include_topic_authorized_operations", False))
    if not named and len(answer) > metadata_answers.INLINE_BYTES:
        return await _every_topic_off_loop(conn, version, caller, entity, answer, with_ops)
    answer = upstream.rewrite(key, version, answer, conn.security)
    correlation_id, resp = admin_guard.read_response(key, version, answer)
    values = wire.as_values(resp)
    out = []
    for t in values["topics"]:
        topic_id = t.get("topic_id")
        if named and t.get("name") not in asked and topic_id not in asked:
            continue  # not asked for
        name = t.get("name") or (
            service.topic_name(topic_id_of(topic_id)) if isinstance(topic_id, uuid.UUID) else ""
        )
        if name and authz.may(caller, DESCRIBE, TOPIC, name):
            if with_ops:  # the client's, not the coordinator's the broker saw (Kafka)
                t["topic_authorized_operations"] = authz.authorized_operations(caller, TOPIC, name)
            out.append(t)
        elif not named:
            continue  # "all topics": left out, silently
        elif t["error_code"] and not name:
            out.append(t)  # an id the broker does not know: its answer tells nothing
        else:
            # Asked by id: refused with its id (Kafka: ids are not secret), reported.
            if name:
                authz.allowed(caller, "Metadata", DESCRIBE, TOPIC, name)
            out.append({**admin_guard.undescribed_topic(None), "topic_id": topic_id})
    values["topics"] = out + refused + undescribed
    if getattr(entity, "include_cluster_authorized_operations", False):
        values["cluster_authorized_operations"] = admin_guard.cluster_operations(
            admin_guard.Guard(conn, caller, version, "Metadata")
        )
    return wire.frame(key, version, correlation_id, wire.build(type(resp), values))


async def _every_topic_off_loop(
    conn: GuardedConnection,
    version: int,
    caller: Any,
    entity: Any,
    answer: bytes,
    with_ops: bool,
) -> bytes:
    """:func:`metadata`'s answer of every topic, a large one (``metadata_answers``): the
    broker's answer decoded, filtered and encoded on threads, the topics the client may
    describe kept (with its operations on them, asked for) as the ACLs were when the answer
    came (``RequestAuthorizer.pinned``), a topic given by id alone named by the registry's
    topics as they were then; the same answer as filtered on the loop."""
    service = conn.listener.service
    upstream = conn.listener.upstream
    assert upstream is not None
    may = service.authz.pinned(caller)
    by_id = service.runtime.registry.image().by_id  # immutable

    def keep(t: Any) -> Any:
        name = t.name
        if not name and isinstance(t.topic_id, uuid.UUID):
            found = by_id.get(topic_id_of(t.topic_id))
            name = "" if found is None else found.name
        if not (name and may(DESCRIBE, TOPIC, name)):
            return None  # "all topics": left out, silently
        if with_ops:  # the client's, not the coordinator's the broker saw (Kafka)
            ops = operations_of(may, TOPIC, name)
            return dataclasses.replace(t, topic_authorized_operations=ops)
        return t

    cluster_operations = None
    if getattr(entity, "include_cluster_authorized_operations", False):
        cluster_operations = admin_guard.cluster_operations(
            admin_guard.Guard(conn, caller, version, "Metadata")
        )
    brokers_of = partial(upstream.metadata_brokers, security=conn.security)
    return await metadata_answers.rewritten(
        brokers_of, version, answer, None, keep, cluster_operations
    )
