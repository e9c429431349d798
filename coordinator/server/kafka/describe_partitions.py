"""DescribeTopicPartitions (KIP-966) in front of a broker the coordinator authorizes for
(``topic_guard.guards``), answered as Kafka's DescribeTopicPartitionsRequestHandler: DESCRIBE
on each topic, and pages whose cursor never names a topic the client may not describe.

* Named topics: those from the cursor's topic on (Kafka ignores the others) are judged; the
  ones the client may not describe are answered TOPIC_AUTHORIZATION_FAILED without their id,
  after the broker's topics, in every page (as Kafka adds them to each), and are never
  forwarded. The broker is asked only for the others; a cursor on a refused topic moves to the
  next allowed one (its first partition: Kafka goes on there too). None allowed: answered
  here, without a next cursor. A cursor not among the topics, or with a negative partition, is
  INVALID_REQUEST, as Kafka answers it.
* All topics: the page leaves out the topics the client may not describe, silently. The
  broker's next cursor may name one of them: then the listener reads on (pages from that
  cursor, as many as it takes) until it finds the first topic the client may describe, and
  answers that as the next cursor (its first partition); none left: no next cursor. So a
  client never learns the name of a topic it may not describe.
* Every topic answered gets the client's authorized operations, not the coordinator's.

Served in order on the client's connection (its answer needs the broker's), like the guarded
Metadata.
"""

from __future__ import annotations

from typing import Any

from ..api import Caller
from ..authorization import DESCRIBE, TOPIC
from . import wire
from .admin_guard import (
    INVALID_REQUEST,
    GuardedConnection,
    Values,
    answer_frame,
    read_response,
    undescribed_topic,
)

KEY = 75
API = "DescribeTopicPartitions"
MAX_PAGES = 100_000
"""Pages read past refused topics at most for one answer (each page moves on: a broker that
does not is not followed further)."""


async def serve(
    conn: GuardedConnection,
    version: int,
    correlation_id: int,
    client_id: str | None,
    entity: Any,
    frame: bytes,
) -> bytes:
    """The answer frame (with its size) of a guarded DescribeTopicPartitions."""
    caller = conn.caller(client_id, version)
    authz = conn.listener.service.authz
    cursor = entity.cursor
    start = cursor.topic_name if cursor is not None else ""
    ask = Ask(conn, version, correlation_id, client_id)
    if entity.topics:
        names = sorted({t.name for t in entity.topics if t.name >= start})
        if cursor is not None and (start not in names or cursor.partition_index < 0):
            invalid = [{"name": t.name, "error_code": INVALID_REQUEST} for t in entity.topics]
            return answer_frame(KEY, version, correlation_id, {"topics": invalid})
        allowed = [n for n in names if authz.allowed(caller, API, DESCRIBE, TOPIC, n)]
        refused = [undescribed_topic(n) for n in names if n not in allowed]
        if not allowed:
            return answer_frame(KEY, version, correlation_id, {"topics": refused})
        if cursor is not None and start not in allowed:
            cursor = {"topic_name": allowed[0], "partition_index": 0}
        values = await ask(
            {
                "topics": [{"name": n} for n in allowed],
                "response_partition_limit": entity.response_partition_limit,
                "cursor": cursor,
            }
        )
        values["topics"] = [*_with_ops(caller, authz, values["topics"]), *refused]
    else:
        values = await ask(None, frame)
        shown = [t for t in values["topics"] if authz.may(caller, DESCRIBE, TOPIC, t["name"])]
        values["topics"] = _with_ops(caller, authz, shown)
        values["next_cursor"] = await _next_describable(
            ask, caller, authz, entity.response_partition_limit, values["next_cursor"]
        )
    return answer_frame(KEY, version, correlation_id, values)


class Ask:
    """Asks the broker on the client's upstream connection; the answer's values."""

    def __init__(
        self, conn: GuardedConnection, version: int, correlation_id: int, client_id: str | None
    ) -> None:
        self.conn, self.version = conn, version
        self.correlation_id, self.client_id = correlation_id, client_id

    async def __call__(self, values: Values | None, frame: bytes | None = None) -> Values:
        if frame is None:
            request = wire.build(wire.request_class(KEY, self.version), values)
            frame = wire.request_frame(request, self.correlation_id, self.client_id)
        upstream = self.conn.listener.upstream
        answer = await upstream.forward_future(self.conn, KEY, self.version, frame)
        _cid, resp = read_response(KEY, self.version, wire.I32.pack(len(answer)) + answer)
        return wire.as_values(resp)


async def _next_describable(
    ask: Ask, caller: Caller, authz: Any, limit: int, cursor: Values | None
) -> Values | None:
    """The broker's next cursor, or — when it names a topic the client may not describe —
    the first topic after it the client may describe (read on from the broker)."""
    for _ in range(MAX_PAGES):
        if cursor is None or authz.may(caller, DESCRIBE, TOPIC, cursor["topic_name"]):
            return cursor
        values = await ask({"topics": [], "response_partition_limit": limit, "cursor": cursor})
        shown = next(
            (t["name"] for t in values["topics"] if authz.may(caller, DESCRIBE, TOPIC, t["name"])),
            None,
        )
        if shown is not None:
            return {"topic_name": shown, "partition_index": 0}
        following = values["next_cursor"]
        if following is not None and _position(following) <= _position(cursor):
            break  # a broker that does not move on is not followed
        cursor = following
    return None


def _position(cursor: Values) -> tuple[str, int]:
    return cursor["topic_name"], int(cursor["partition_index"])


def _with_ops(caller: Caller, authz: Any, topics: list[Values]) -> list[Values]:
    for t in topics:
        t["topic_authorized_operations"] = authz.authorized_operations(caller, TOPIC, t["name"])
    return topics
