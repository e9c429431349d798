"""Every forwarded API that is not a data API, checked where the broker cannot check it
(docs/security.md 8.1), answered as Kafka's KafkaApis / ControllerApis answer it.

In front of a broker that cannot tell the clients apart (``topic_guard.guards``: ACLs exist, no
SASL pass-through) the broker sees the coordinator, so it would do for anyone what it does for
the coordinator. Each forwarded API therefore has a rule here (:data:`RULES`): a function of
the request that decides, before anything is sent, what is answered here, what goes to the
broker (the request as it came, or narrowed to what the client may do) and how the broker's
answer is amended (the refused parts merged in, filters applied). An API with no rule is never
forwarded while the guard is on: the connection is closed, as for a request the listener cannot
read (a new API the coordinator does not know cannot be checked).

* Topics: CreateTopics CREATE on the cluster or on each topic; DeleteTopics DELETE (the cluster
  or each topic, named or by id); CreatePartitions ALTER on each topic. Per topic, as the
  controller answers: only the allowed topics reach the broker, the refused ones are appended to
  its answer (a request with none allowed is answered here).
* Configs of the broker's resources (DescribeConfigs, IncrementalAlterConfigs: split with the
  GROUP resources served here, ``configs.py``; AlterConfigs): TOPIC resources DESCRIBE_CONFIGS
  / ALTER_CONFIGS on the topic, BROKER, BROKER_LOGGER and CLIENT_METRICS on the cluster, per
  resource.
* The cluster's administration (ElectLeaders, partition reassignments, log dirs, client quotas,
  features, the quorum and its voters, unregistering a broker, config resources, transaction
  markers): Kafka's operation on the cluster, or the whole request is answered
  CLUSTER_AUTHORIZATION_FAILED in the API's shape.
* Transactions (``txn_guard.py``): FindCoordinator for transactional ids, AddPartitionsToTxn,
  DescribeTransactions, ListTransactions; InitProducerId and EndTxn before the transaction
  bridge; transactional Produce in ``topic_guard.py``.
* DescribeCluster: open, as on a broker; its authorized operations are the client's.
* Never forwarded while guarded, answered as Kafka answers a request it does not allow: the
  delegation token APIs (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: a token would be the broker's for
  the coordinator's connection, not for the client), SaslHandshake/SaslAuthenticate on a
  listener without SASL (ILLEGAL_SASL_STATE), and the share and streams group APIs
  (UNSUPPORTED_VERSION, as a broker without those protocols: their group ACLs would be this
  coordinator's and their fetch sessions are not followed here).

APIs that only brokers and controllers send each other are never forwarded at all
(``apis.BETWEEN_BROKERS``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from coordinator.core.errors import ErrorCode
from coordinator.security.acls import CLUSTER_NAME, AclOperation

from ..api import Caller
from ..authorization import (
    ALTER,
    ALTER_CONFIGS,
    CLUSTER,
    CREATE,
    DELETE,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    GROUP,
    TOPIC,
)
from ..codec import AUTHORIZED_OPERATIONS_OMITTED
from . import wire
from .convert import topic_id_of
from .upstream.interfaces import ClientConnection

Values = dict[str, Any]

TOPIC_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
GROUP_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
CLUSTER_DENIED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)
UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)
ILLEGAL_SASL_STATE = int(ErrorCode.ILLEGAL_SASL_STATE)
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
CLUSTER_ACTION = int(AclOperation.CLUSTER_ACTION)
IDEMPOTENT_WRITE = int(AclOperation.IDEMPOTENT_WRITE)
MESSAGES = {
    TOPIC_DENIED: "Topic authorization failed.",
    GROUP_DENIED: "Group authorization failed.",
    CLUSTER_DENIED: "Cluster authorization failed.",
}
"""Kafka's default messages (``Errors``), which its refusals of these APIs carry."""
DUPLICATE = "Duplicate topic name."

# Kafka's ConfigResource types (numbers as on the wire).
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8
CONFIG_CLIENT_METRICS, CONFIG_GROUP = 16, 32


class GuardedConnection(ClientConnection, Protocol):
    """A client connection as the guards see it (``listener.KafkaConnection``)."""

    listener: Any
    """Its listener: ``service`` (the authorizer, the topic registry) and ``upstream``."""

    def caller(self, client_id: str | None, version: int) -> Caller:
        """Who sends a request on it."""

    def answer(self, data: bytes | None) -> None:
        """Answer the request just read, here."""

    def forward(
        self,
        key: int,
        version: int,
        frame: bytes,
        then: Callable[[bytes], bytes] | None = None,
        rewrite: bool | None = None,
    ) -> None:
        """Forward a request frame (without its size) to the upstream (``Forwarder.forward``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What becomes of a guarded request."""

    answer: Values | None = None
    """Answered here with these response values; nothing is forwarded."""
    request: Any = None
    """Forwarded narrowed to this request entity (None: as it came)."""
    then: Callable[[Values], None] | None = None
    """Changes the broker's answer (its values, in place) before the client gets it."""


PASS = Decision()


@dataclass(frozen=True, slots=True)
class Guard:
    """One request's questions to the authorizer, with the API's Kafka name for refusals."""

    conn: GuardedConnection
    caller: Caller
    version: int
    api: str

    @property
    def service(self) -> Any:
        return self.conn.listener.service

    def may(self, operation: int, resource_type: int, name: str) -> bool:
        """Silent (a filter, or a check Kafka does not log)."""
        return bool(self.service.authz.may(self.caller, operation, resource_type, name))

    def allowed(self, operation: int, resource_type: int, name: str) -> bool:
        """Reported when refused (audit trail, metrics)."""
        authz = self.service.authz
        return bool(authz.allowed(self.caller, self.api, operation, resource_type, name))

    def cluster(self, operation: int) -> bool:
        return self.allowed(operation, CLUSTER, CLUSTER_NAME)


Rule = Callable[[Guard, Any], Decision]


def kafka_name(key: int) -> str:
    """Kafka's name of an API ("CreateTopics")."""
    return "".join(w.capitalize() for w in wire.api_name(key).split("_"))


def forward(
    conn: GuardedConnection,
    rule: Rule,
    key: int,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    frame: bytes,
    *,
    rewrite: bool | None = None,
    after: Callable[[bytes], bytes] | None = None,
) -> None:
    """Judge a guarded forwarded request (decoded as ``entity``) by its ``rule``, then answer
    it or forward it (``rewrite``: as ``Upstream.forward`` takes it; ``after``: a change of
    the answer, with its size, after the rule's own)."""
    decision = rule(guard(conn, key, version, client_id), entity)
    if decision.answer is not None:
        conn.answer(answer_frame(key, version, correlation_id, decision.answer))
        return
    if decision.request is not None:
        frame = wire.request_frame(decision.request, correlation_id, client_id)
    then: Callable[[bytes], bytes] | None = (
        None if decision.then is None else partial(amend, key, version, decision.then)
    )
    if after is not None:
        then = after if then is None else _chain(then, after)
    conn.forward(key, version, frame, then=then, rewrite=rewrite)


def _chain(
    first: Callable[[bytes], bytes], second: Callable[[bytes], bytes]
) -> Callable[[bytes], bytes]:
    return lambda out: second(first(out))


def guard(conn: GuardedConnection, key: int, version: int, client_id: str | None) -> Guard:
    return Guard(conn, conn.caller(client_id, version), version, kafka_name(key))


def answer_frame(key: int, version: int, correlation_id: int, values: Values) -> bytes:
    """A response of ours (with its size)."""
    body = wire.build(wire.response_class(key, version), {"throttle_time": 0, **values})
    return wire.frame(key, version, correlation_id, body)


def read_response(key: int, version: int, out: bytes) -> tuple[int, Any]:
    """A forwarded answer (the frame with its size): its correlation id and its body."""
    pos = 8  # after the size and the correlation id
    if wire.response_header_flexible(key, version):
        pos = wire.skip_tagged_fields(out, pos)
    return wire.I32.unpack_from(out, 4)[0], wire.decode_response(key, version, out[4:], pos - 4)


def amend(key: int, version: int, change: Callable[[Values], None], out: bytes) -> bytes:
    """The broker's answer (``out``, with its size) changed by ``change`` (its values, in
    place): an ``Upstream.forward`` ``then``."""
    correlation_id, resp = read_response(key, version, out)
    values = wire.as_values(resp)
    change(values)
    return wire.frame(key, version, correlation_id, wire.build(type(resp), values))


def undescribed_topic(name: str | None) -> Values:
    """A topic answered TOPIC_AUTHORIZATION_FAILED without its id (Metadata and
    DescribeTopicPartitions: the same fields)."""
    return {
        "error_code": TOPIC_DENIED,
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def merged(field: str, refused: list[Values]) -> Callable[[Values], None]:
    """Appends ``refused`` to the broker's answer list ``field`` (Kafka's order: the refused
    after the rest)."""

    def then(values: Values) -> None:
        values[field] = [*values[field], *refused]

    return then


def in_order(
    field: str, refused: dict[int, Values], count: int, then: Callable[[Values], None] | None = None
) -> Callable[[Values], None]:
    """Puts the broker's answers (to the forwarded items, in their order) and ``refused``
    (request position -> answer) back in the request's order."""

    def change(values: Values) -> None:
        answered = iter(values[field])
        out = []
        for i in range(count):
            item = refused.get(i)
            if item is None:
                item = next(answered, None)
            if item is not None:
                out.append(item)
        values[field] = out
        if then is not None:
            then(values)

    return change


def duplicates(names: Iterable[str]) -> set[str]:
    return {n for n, c in Counter(names).items() if c > 1}


# ---------------------------------------------------------------- topics


def judged(
    topics: Iterable[Any], allowed: Callable[[str], bool]
) -> tuple[list[Any], list[tuple[str, bool]]]:
    """(the topics allowed — a name given twice included, for the broker to answer
    INVALID_REQUEST as Kafka does —, the names refused once each with whether they were given
    twice), in the request's order."""
    topics = list(topics)
    twice = duplicates(t.name for t in topics)
    kept, refused, seen = [], [], set()
    for t in topics:
        if t.name in seen:
            continue
        seen.add(t.name)
        if allowed(t.name):
            kept += [x for x in topics if x.name == t.name]
        else:
            refused.append((t.name, t.name in twice))
    return kept, refused


def create_topics(g: Guard, e: Any) -> Decision:
    """CREATE on the cluster, or on each topic (ControllerApis.createTopics); the configs
    of a created topic are shown only to a client that may DESCRIBE_CONFIGS it."""
    everything = g.may(CREATE, CLUSTER, CLUSTER_NAME)
    kept, names = judged(e.topics, lambda n: everything or g.allowed(CREATE, TOPIC, n))
    refused = [
        refused_creation(n, INVALID_REQUEST, DUPLICATE)
        if twice
        else refused_creation(n, TOPIC_DENIED, "Authorization failed.")
        for n, twice in names
    ]

    def then(values: Values) -> None:
        for t in values["topics"]:  # v5+ answers carry the created topic's configs
            created = "configs" in t and not int(t["error_code"])
            if created and not g.may(DESCRIBE_CONFIGS, TOPIC, t["name"]):
                t["configs"], t["topic_config_error_code"] = [], TOPIC_DENIED
        values["topics"] = [*values["topics"], *refused]

    return narrowed(e, "topics", kept, {"topics": refused}, then)


def refused_creation(name: str, code: int, message: str) -> Values:
    return {
        "name": name,
        "topic_id": None,
        "error_code": code,
        "error_message": message,
        "num_partitions": -1,
        "replication_factor": -1,
        "topic_config_error_code": 0,
        "configs": [],
    }


def narrowed(
    e: Any, field: str, kept: list[Any], refusal: Values, then: Callable[[Values], None] | None
) -> Decision:
    """Forward ``e`` with ``field`` narrowed to ``kept`` (as it came when nothing was taken
    out), its answer amended by ``then``; with nothing kept, answered here with ``refusal``."""
    if not kept:
        return Decision(answer=refusal)
    if len(kept) == len(getattr(e, field)):
        return Decision(then=then)
    return Decision(request=dataclasses.replace(e, **{field: tuple(kept)}), then=then)


def create_partitions(g: Guard, e: Any) -> Decision:
    """ALTER on each topic (ControllerApis.createPartitions)."""
    kept, names = judged(e.topics, lambda n: g.allowed(ALTER, TOPIC, n))
    refused: list[Values] = [
        {"name": n, "error_code": INVALID_REQUEST, "error_message": DUPLICATE}
        if twice
        else {"name": n, "error_code": TOPIC_DENIED, "error_message": None}
        for n, twice in names
    ]
    return narrowed(e, "topics", kept, {"results": refused}, merged("results", refused))


def delete_topics(g: Guard, e: Any) -> Decision:
    """DELETE on the cluster or on each topic (ControllerApis.deleteTopics). By name: refused
    TOPIC_AUTHORIZATION_FAILED, or UNKNOWN_TOPIC_OR_PARTITION when the client may describe it
    and it does not exist. By id (v6): an id the registry does not know UNKNOWN_TOPIC_ID; a
    refused one TOPIC_AUTHORIZATION_FAILED, with its name only if the client may describe it."""
    by_id = g.version >= 6
    items = (
        [(t.name, t.topic_id) for t in e.topics] if by_id else [(n, None) for n in e.topic_names]
    )
    everything = g.may(DELETE, CLUSTER, CLUSTER_NAME)
    twice = duplicates(n for n, _i in items if n)
    service = g.service
    kept, refused = [], []
    for item, (name, topic_id) in zip(e.topics if by_id else e.topic_names, items, strict=True):
        resolved = name or (service.topic_name(topic_id_of(topic_id)) if topic_id else "")
        if not resolved:
            refused.append(_deleted(None, topic_id, UNKNOWN_TOPIC_ID))
        elif everything or g.allowed(DELETE, TOPIC, resolved):
            kept.append(item)
        elif name and name in twice:
            if not any(r["name"] == name for r in refused):
                refused.append(_deleted(name, None, INVALID_REQUEST, DUPLICATE))
        elif name:
            missing = g.may(DESCRIBE, TOPIC, name) and not service.topic_exists(name)
            refused.append(
                _deleted(name, None, UNKNOWN_TOPIC_OR_PARTITION if missing else TOPIC_DENIED)
            )
        else:
            shown = resolved if g.may(DESCRIBE, TOPIC, resolved) else None
            refused.append(_deleted(shown, topic_id, TOPIC_DENIED))
    field = "topics" if by_id else "topic_names"
    return narrowed(e, field, kept, {"responses": refused}, merged("responses", refused))


def _deleted(name: str | None, topic_id: Any, code: int, message: str | None = None) -> Values:
    default = "This server does not host this topic ID." if code == UNKNOWN_TOPIC_ID else None
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": code,
        "error_message": message or MESSAGES.get(code, default),
    }


# ---------------------------------------------------------------- configs


def config_refusal(g: Guard, resource: Any, alter: bool) -> Values | None:
    """The answer refusing one of the broker's config resources (Kafka's ConfigHelper /
    ControllerApis rules), or None when the client may describe (alter) it."""
    rtype, name = int(resource.resource_type), resource.resource_name
    op = ALTER_CONFIGS if alter else DESCRIBE_CONFIGS
    if rtype == CONFIG_TOPIC:
        ok, code = g.allowed(op, TOPIC, name), TOPIC_DENIED
    elif rtype in (CONFIG_BROKER, CONFIG_BROKER_LOGGER, CONFIG_CLIENT_METRICS):
        ok, code = g.cluster(op), CLUSTER_DENIED
    elif rtype == CONFIG_GROUP:
        ok, code = g.allowed(op, GROUP, name), GROUP_DENIED
    else:
        return {
            "error_code": INVALID_REQUEST,
            "error_message": f"Unexpected resource type {rtype} for resource {name}",
            "resource_type": rtype,
            "resource_name": name,
            "configs": [],
        }
    if ok:
        return None
    return {
        "error_code": code,
        "error_message": None if alter else MESSAGES[code],
        "resource_type": rtype,
        "resource_name": name,
        "configs": [],
    }


def alter_configs(g: Guard, e: Any) -> Decision:
    """AlterConfigs (legacy, forwarded whole): each resource judged as Kafka judges it."""
    refused, kept = [], []
    for r in e.resources:
        answer = config_refusal(g, r, alter=True)
        if answer is None:
            kept.append(r)
        else:
            refused.append(answer)
    # Kafka's answers come in no particular order (clients match them by resource).
    return narrowed(e, "resources", kept, {"responses": refused}, merged("responses", refused))


# ---------------------------------------------------------------- the cluster


def cluster(operation: int, refusal: Callable[[Any, int, str], Values], *silently: int) -> Rule:
    """A request that needs ``operation`` on the cluster (or, unreported, one of
    ``silently``), else answered with ``refusal`` (Kafka's error response of the API)."""

    def rule(g: Guard, e: Any) -> Decision:
        if any(g.may(op, CLUSTER, CLUSTER_NAME) for op in silently) or g.cluster(operation):
            return PASS
        return Decision(answer=refusal(e, CLUSTER_DENIED, MESSAGES[CLUSTER_DENIED]))

    return rule


def top_level(_e: Any, code: int, message: str) -> Values:
    return {"error_code": code, "error_message": message}


def _log_dirs(_e: Any, code: int, _message: str) -> Values:
    return {"error_code": code, "results": []}


def _quotas(_e: Any, code: int, message: str) -> Values:
    return {"error_code": code, "error_message": message, "entries": None}


def _altered_quotas(e: Any, code: int, message: str) -> Values:
    return {
        "entries": [
            {
                "error_code": code,
                "error_message": message,
                "entity": [
                    {"entity_type": x.entity_type, "entity_name": x.entity_name} for x in en.entity
                ],
            }
            for en in e.entries
        ]
    }


def _elections(e: Any, code: int, message: str) -> Values:
    return {
        "error_code": code,
        "replica_election_results": [
            {
                "topic": t.topic,
                "partition_result": [
                    {"partition_id": p, "error_code": code, "error_message": message}
                    for p in t.partitions
                ],
            }
            for t in e.topic_partitions or ()
        ],
    }


def _reassignments(e: Any, code: int, message: str) -> Values:
    return {
        "error_code": code,
        "error_message": message,
        "responses": [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p.partition_index,
                        "error_code": code,
                        "error_message": message,
                    }
                    for p in t.partitions
                ],
            }
            for t in e.topics
        ],
    }


def _listed_reassignments(e: Any, code: int, message: str) -> Values:
    return {
        "error_code": code,
        "error_message": message,
        "topics": [
            {"name": t.name, "partitions": [{"partition_index": i} for i in t.partition_indexes]}
            for t in e.topics or ()
        ],
    }


def _log_dir_moves(e: Any, code: int, _message: str) -> Values:
    return {
        "results": [
            {
                "topic_name": t.name,
                "partitions": [{"partition_index": p, "error_code": code} for p in t.partitions],
            }
            for d in e.dirs
            for t in d.topics
        ]
    }


def _markers(e: Any, code: int, _message: str) -> Values:
    return {
        "markers": [
            {
                "producer_id": m.producer_id,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": p, "error_code": code} for p in t.partition_indexes
                        ],
                    }
                    for t in m.topics
                ],
            }
            for m in e.markers
        ]
    }


def describe_cluster(g: Guard, e: Any) -> Decision:
    """Open, as on a broker; the cluster's authorized operations, when asked, are the
    client's: all it may do if it may DESCRIBE the cluster, else none."""
    if not e.include_cluster_authorized_operations:
        return PASS

    def then(values: Values) -> None:
        values["cluster_authorized_operations"] = cluster_operations(g)

    return Decision(then=then)


def cluster_operations(g: Guard) -> int:
    return int(g.service.authz.cluster_operations(g.caller))


# ---------------------------------------------------------------- never forwarded when guarded


def refused(values: Callable[[Guard, Any], Values]) -> Rule:
    return lambda g, e: Decision(answer=values(g, e))


def _token(g: Guard, _e: Any) -> Values:
    principal = g.caller.principal
    return {
        "error_code": DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
        "principal_type": principal.principal_type,
        "principal_name": principal.name,
        "token_requester_principal_type": principal.principal_type,
        "token_requester_principal_name": principal.name,
        "tokens": [],
    }


def _sasl(_g: Guard, _e: Any) -> Values:
    return {
        "error_code": ILLEGAL_SASL_STATE,
        "error_message": "SASL is not enabled on this listener.",
        "mechanisms": [],
    }


def _not_supported(g: Guard, e: Any) -> Values:
    """UNSUPPORTED_VERSION in the API's shape: top level, and per group for the describes."""
    message = f"{g.api} is not forwarded in front of a broker the coordinator authorizes for."
    error = {"error_code": UNSUPPORTED_VERSION, "error_message": message}
    groups = list(getattr(e, "group_ids", None) or ())
    groups += [x.group_id for x in getattr(e, "groups", None) or ()]
    return {**error, "groups": [{"group_id": x, "topics": [], **error} for x in groups]}


RULES: dict[int, Rule] = {
    19: create_topics,
    20: delete_topics,
    37: create_partitions,
    33: alter_configs,
    60: describe_cluster,
    27: cluster(CLUSTER_ACTION, _markers, ALTER),
    34: cluster(ALTER, _log_dir_moves),
    35: cluster(DESCRIBE, _log_dirs),
    43: cluster(ALTER, _elections),
    45: cluster(ALTER, _reassignments),
    46: cluster(DESCRIBE, _listed_reassignments),
    48: cluster(DESCRIBE_CONFIGS, _quotas),
    49: cluster(ALTER_CONFIGS, _altered_quotas),
    55: cluster(DESCRIBE, top_level),
    57: cluster(ALTER, top_level),
    64: cluster(ALTER, top_level),
    74: cluster(DESCRIBE_CONFIGS, top_level),
    80: cluster(ALTER, top_level),
    81: cluster(ALTER, top_level),
    17: refused(_sasl),
    36: refused(_sasl),
    **{k: refused(_token) for k in (38, 39, 40, 41)},
    **{k: refused(_not_supported) for k in (76, 77, 78, 79, 88, 89, 90, 91, 92)},
}
"""API key -> its rule while guarded (module doc; the transaction APIs': ``txn_guard.RULES``)."""
