"""Kafka error codes and the typed errors the core raises.

One base class, :class:`CoordinatorError`; each subclass carries its Kafka code and a default
message. Handlers raise them *before* changing anything (or the shard rolls back what the
handler had applied). :func:`to_error_code` is the one table from errors to in-band codes.
Anything that is not a ``CoordinatorError`` is a bug and must fail loudly.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Kafka's error numbers (org.apache.kafka.common.protocol.Errors)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    INVALID_CONFIG = 40
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128


class CoordinatorError(Exception):
    """Base of every in-band protocol error. ``code`` is the Kafka error code."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR
    default_message: str = "The server experienced an unexpected error."

    def __init__(self, message: str | None = None) -> None:
        self.message = message if message is not None else self.default_message
        super().__init__(self.message)


def _error(name: str, code: ErrorCode, default: str) -> type[CoordinatorError]:
    return type(name, (CoordinatorError,), {"code": code, "default_message": default})


UnknownServerError = _error(
    "UnknownServerError",
    ErrorCode.UNKNOWN_SERVER_ERROR,
    "The server experienced an unexpected error.",
)
UnknownTopicOrPartitionError = _error(
    "UnknownTopicOrPartitionError",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "This server does not host this topic-partition.",
)
OffsetMetadataTooLargeError = _error(
    "OffsetMetadataTooLargeError",
    ErrorCode.OFFSET_METADATA_TOO_LARGE,
    "The metadata field of the offset request was too large.",
)
CoordinatorLoadInProgressError = _error(
    "CoordinatorLoadInProgressError",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    "The coordinator is loading and hence can't process requests.",
)
CoordinatorNotAvailableError = _error(
    "CoordinatorNotAvailableError",
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    "The coordinator is not available.",
)
NotCoordinatorError = _error(
    "NotCoordinatorError", ErrorCode.NOT_COORDINATOR, "This is not the correct coordinator."
)
InvalidTopicError = _error(
    "InvalidTopicError",
    ErrorCode.INVALID_TOPIC_EXCEPTION,
    "The request attempted to perform an operation on an invalid topic.",
)
IllegalGenerationError = _error(
    "IllegalGenerationError",
    ErrorCode.ILLEGAL_GENERATION,
    "Specified group generation id is not valid.",
)
InconsistentGroupProtocolError = _error(
    "InconsistentGroupProtocolError",
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
    "The group member's supported protocols are incompatible with those of existing members.",
)
InvalidGroupIdError = _error(
    "InvalidGroupIdError", ErrorCode.INVALID_GROUP_ID, "The configured groupId is invalid."
)
UnknownMemberIdError = _error(
    "UnknownMemberIdError",
    ErrorCode.UNKNOWN_MEMBER_ID,
    "The coordinator is not aware of this member.",
)
InvalidSessionTimeoutError = _error(
    "InvalidSessionTimeoutError",
    ErrorCode.INVALID_SESSION_TIMEOUT,
    "The session timeout is not within the range allowed by the broker.",
)
RebalanceInProgressError = _error(
    "RebalanceInProgressError",
    ErrorCode.REBALANCE_IN_PROGRESS,
    "The group is rebalancing, so a rejoin is needed.",
)
GroupAuthorizationFailedError = _error(
    "GroupAuthorizationFailedError",
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    "Group authorization failed.",
)
UnsupportedVersionError = _error(
    "UnsupportedVersionError", ErrorCode.UNSUPPORTED_VERSION, "The version of API is not supported."
)
TopicAlreadyExistsError = _error(
    "TopicAlreadyExistsError",
    ErrorCode.TOPIC_ALREADY_EXISTS,
    "Topic with this name already exists.",
)
InvalidPartitionsError = _error(
    "InvalidPartitionsError", ErrorCode.INVALID_PARTITIONS, "Number of partitions is below 1."
)
InvalidConfigError = _error(
    "InvalidConfigError", ErrorCode.INVALID_CONFIG, "Configuration is invalid."
)
InvalidRequestError = _error(
    "InvalidRequestError",
    ErrorCode.INVALID_REQUEST,
    "This most likely occurs because of a request being malformed by the client library.",
)
NonEmptyGroupError = _error(
    "NonEmptyGroupError", ErrorCode.NON_EMPTY_GROUP, "The group is not empty."
)
GroupIdNotFoundError = _error(
    "GroupIdNotFoundError", ErrorCode.GROUP_ID_NOT_FOUND, "The group id does not exist."
)
MemberIdRequiredError = _error(
    "MemberIdRequiredError",
    ErrorCode.MEMBER_ID_REQUIRED,
    "The group member needs to have a valid member id before actually entering a consumer group.",
)
GroupMaxSizeReachedError = _error(
    "GroupMaxSizeReachedError",
    ErrorCode.GROUP_MAX_SIZE_REACHED,
    "The consumer group has already reached its max size.",
)
FencedInstanceIdError = _error(
    "FencedInstanceIdError",
    ErrorCode.FENCED_INSTANCE_ID,
    "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
)
GroupSubscribedToTopicError = _error(
    "GroupSubscribedToTopicError",
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
    "The consumer group is actively subscribed to the topic.",
)
UnknownTopicIdError = _error(
    "UnknownTopicIdError", ErrorCode.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."
)
FencedMemberEpochError = _error(
    "FencedMemberEpochError",
    ErrorCode.FENCED_MEMBER_EPOCH,
    "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
)
UnreleasedInstanceIdError = _error(
    "UnreleasedInstanceIdError",
    ErrorCode.UNRELEASED_INSTANCE_ID,
    "The instance ID is still used by another member in the consumer group. That member must leave first.",
)
UnsupportedAssignorError = _error(
    "UnsupportedAssignorError",
    ErrorCode.UNSUPPORTED_ASSIGNOR,
    "The assignor or its version range is not supported by the consumer group.",
)
StaleMemberEpochError = _error(
    "StaleMemberEpochError",
    ErrorCode.STALE_MEMBER_EPOCH,
    "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
)
InvalidRegularExpressionError = _error(
    "InvalidRegularExpressionError",
    ErrorCode.INVALID_REGULAR_EXPRESSION,
    "The regular expression is not valid.",
)

ERRORS_BY_CODE: dict[ErrorCode, type[CoordinatorError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        UnknownTopicOrPartitionError,
        OffsetMetadataTooLargeError,
        CoordinatorLoadInProgressError,
        CoordinatorNotAvailableError,
        NotCoordinatorError,
        InvalidTopicError,
        IllegalGenerationError,
        InconsistentGroupProtocolError,
        InvalidGroupIdError,
        UnknownMemberIdError,
        InvalidSessionTimeoutError,
        RebalanceInProgressError,
        GroupAuthorizationFailedError,
        UnsupportedVersionError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidConfigError,
        InvalidRequestError,
        NonEmptyGroupError,
        GroupIdNotFoundError,
        MemberIdRequiredError,
        GroupMaxSizeReachedError,
        FencedInstanceIdError,
        GroupSubscribedToTopicError,
        UnknownTopicIdError,
        FencedMemberEpochError,
        UnreleasedInstanceIdError,
        UnsupportedAssignorError,
        StaleMemberEpochError,
        InvalidRegularExpressionError,
    )
}


def to_error_code(error: BaseException) -> tuple[ErrorCode, str | None]:
    """Map any exception to the in-band (code, message) pair of a response.

    Protocol errors keep their code and message. Anything else is a bug: it becomes
    UNKNOWN_SERVER_ERROR with no message (as Kafka does), and the caller must log it.
    """
    if isinstance(error, CoordinatorError):
        return error.code, error.message
    return ErrorCode.UNKNOWN_SERVER_ERROR, None


class IllegalStateError(AssertionError):
    """An invariant of the state machine is broken (a bug or a corrupt record stream).
    Never mapped to a protocol error: it must fail loudly."""
