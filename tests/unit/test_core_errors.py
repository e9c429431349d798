"""One table maps errors to in-band codes; it covers every code of the wire contract."""

from __future__ import annotations

import pytest

from coordinator.core import errors as e

# docs/proto.md "Error codes (Kafka's numbers)" — binding.
API_CODES = {
    0: "NONE",
    -1: "UNKNOWN_SERVER_ERROR",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    12: "OFFSET_METADATA_TOO_LARGE",
    14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE",
    16: "NOT_COORDINATOR",
    17: "INVALID_TOPIC_EXCEPTION",
    22: "ILLEGAL_GENERATION",
    23: "INCONSISTENT_GROUP_PROTOCOL",
    24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID",
    26: "INVALID_SESSION_TIMEOUT",
    27: "REBALANCE_IN_PROGRESS",
    29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM",
    34: "ILLEGAL_SASL_STATE",
    35: "UNSUPPORTED_VERSION",
    36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS",
    42: "INVALID_REQUEST",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    54: "SECURITY_DISABLED",
    58: "SASL_AUTHENTICATION_FAILED",
    68: "NON_EMPTY_GROUP",
    69: "GROUP_ID_NOT_FOUND",
    79: "MEMBER_ID_REQUIRED",
    81: "GROUP_MAX_SIZE_REACHED",
    82: "FENCED_INSTANCE_ID",
    86: "GROUP_SUBSCRIBED_TO_TOPIC",
    91: "RESOURCE_NOT_FOUND",
    92: "DUPLICATE_RESOURCE",
    93: "UNACCEPTABLE_CREDENTIAL",
    100: "UNKNOWN_TOPIC_ID",
    110: "FENCED_MEMBER_EPOCH",
    111: "UNRELEASED_INSTANCE_ID",
    112: "UNSUPPORTED_ASSIGNOR",
    113: "STALE_MEMBER_EPOCH",
    128: "INVALID_REGULAR_EXPRESSION",
}


def test_error_codes_have_kafkas_numbers_and_names() -> None:
    for number, name in API_CODES.items():
        assert e.ErrorCode[name] == number


def test_every_error_code_but_none_has_an_error_class() -> None:
    missing = [
        c.name for c in e.ErrorCode if c is not e.ErrorCode.NONE and c not in e.ERRORS_BY_CODE
    ]
    assert missing == []


@pytest.mark.parametrize(
    "code", [c for c in e.ErrorCode if c is not e.ErrorCode.NONE], ids=lambda c: c.name
)
def test_table_maps_each_error_to_its_code_and_message(code: e.ErrorCode) -> None:
    cls = e.ERRORS_BY_CODE[code]
    assert issubclass(cls, e.CoordinatorError)
    assert e.to_error_code(cls()) == (code, cls.default_message)
    assert e.to_error_code(cls("custom")) == (code, "custom")


def test_non_protocol_exceptions_become_unknown_server_error_without_message() -> None:
    assert e.to_error_code(KeyError("x")) == (e.ErrorCode.UNKNOWN_SERVER_ERROR, None)
    assert e.to_error_code(e.IllegalStateError("broken")) == (
        e.ErrorCode.UNKNOWN_SERVER_ERROR,
        None,
    )
