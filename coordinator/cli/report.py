"""Errors answered by the coordinator, reported on stderr: the Kafka error name, its message and
a hint for the operator."""

from __future__ import annotations

import sys
from collections.abc import Sequence

HINTS: dict[str, str] = {
    "GROUP_ID_NOT_FOUND": "see the groups the coordinator knows with `kip848 groups list`",
    "NON_EMPTY_GROUP": "the group still has members; stop its consumers (they leave, or their session times out) and retry",
    "UNKNOWN_MEMBER_ID": "the group has active members; offsets can be changed by hand only while it is empty",
    "STALE_MEMBER_EPOCH": "the member's epoch moved on; a consumer retries with its current epoch",
    "ILLEGAL_GENERATION": "the classic member's generation moved on; it must rejoin",
    "GROUP_SUBSCRIBED_TO_TOPIC": "members still subscribe to this topic; only offsets of topics the group no longer "
    "subscribes to can be deleted",
    "UNKNOWN_TOPIC_OR_PARTITION": "see the registered topics and their partition counts with `kip848 topics list`",
    "UNKNOWN_TOPIC_ID": "see the registered topics and their ids with `kip848 topics list`",
    "INVALID_GROUP_ID": "a group id must not be empty",
    "INVALID_CONFIG": "group configs: consumer.session.timeout.ms and consumer.heartbeat.interval.ms, within the "
    "server's group.consumer.min/max.* bounds, heartbeat interval below the session timeout",
    "INVALID_REGULAR_EXPRESSION": "patterns use RE2 syntax (like Java's, without backreferences or lookaround) and "
    "must match the whole topic name",
    "OFFSET_METADATA_TOO_LARGE": "metadata longer than offset.metadata.max.bytes is refused",
    "COORDINATOR_LOAD_IN_PROGRESS": "the coordinator is still loading its store; retry in a moment",
    "COORDINATOR_NOT_AVAILABLE": "the coordinator could not write its store or is stopping; check its log and retry",
    "REQUEST_TIMED_OUT": "the change was not written to the store in time and may still land; check (list) "
    "before retrying, and see the coordinator's log",
    "INVALID_REQUEST": "the request was refused as malformed; see the message",
    "GROUP_AUTHORIZATION_FAILED": "the principal may not do this to the group; see its ACLs with "
    "`kip848 acls list --group GROUP` (docs/security.md)",
    "TOPIC_AUTHORIZATION_FAILED": "the principal may not do this to the topic; see its ACLs with "
    "`kip848 acls list --topic TOPIC` (docs/security.md)",
    "CLUSTER_AUTHORIZATION_FAILED": "administration needs DESCRIBE or ALTER on the cluster (or a "
    "super user); see `kip848 acls list --cluster` (docs/security.md)",
    "UNACCEPTABLE_CREDENTIAL": "a user name must not be empty; iterations are 4096..16384",
    "RESOURCE_NOT_FOUND": "see the users with `kip848 users list`",
}


def error_name(code: int) -> str:
    from coordinator.core.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def error_text(code: int, message: str | None = None) -> str:
    """``NAME`` or ``NAME: message``."""
    name = error_name(code)
    return name if not message else f"{name}: {message}"


def report(subject: str, code: int, message: str | None = None, *, hint: bool = True) -> None:
    """One error on stderr: the Kafka error name, its message, and a hint when there is one."""
    name = error_name(code)
    print(f"kip848: {subject}: {name}" + (f": {message}" if message else ""), file=sys.stderr)
    if hint:
        print_hints([code])


def failed(code: int, message: str | None) -> int:
    """A request refused as a whole: the error and its hint on stderr; exit code 1."""
    print(f"kip848: {error_text(code, message)}", file=sys.stderr)
    print_hints([code])
    return 1


def print_hints(codes: Sequence[int]) -> None:
    """The hints of these errors, each once."""
    for name in dict.fromkeys(error_name(c) for c in codes):
        if name in HINTS:
            print(f"  hint: {HINTS[name]}", file=sys.stderr)
