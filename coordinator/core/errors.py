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
    LEADER_NOT_AVAILABLE = 5
    REQUEST_TIMED_OUT = 7
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
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    INVALID_CONFIG = 40
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
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


class UnknownServerError(CoordinatorError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR
    default_message = "The server experienced an unexpected error."


class UnknownTopicOrPartitionError(CoordinatorError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    default_message = "This server does not host this topic-partition."


class LeaderNotAvailableError(CoordinatorError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    default_message = (
        "There is no leader for this topic-partition as we are in the middle of a leadership "
        "election."
    )


class RequestTimedOutError(CoordinatorError):
    code = ErrorCode.REQUEST_TIMED_OUT
    default_message = "The request timed out."


class OffsetMetadataTooLargeError(CoordinatorError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
    default_message = "The metadata field of the offset request was too large."


class CoordinatorLoadInProgressError(CoordinatorError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    default_message = "The coordinator is loading and hence can't process requests."


class CoordinatorNotAvailableError(CoordinatorError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    default_message = "The coordinator is not available."


class NotCoordinatorError(CoordinatorError):
    code = ErrorCode.NOT_COORDINATOR
    default_message = "This is not the correct coordinator."


class InvalidTopicError(CoordinatorError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION
    default_message = "The request attempted to perform an operation on an invalid topic."


class IllegalGenerationError(CoordinatorError):
    code = ErrorCode.ILLEGAL_GENERATION
    default_message = "Specified group generation id is not valid."


class InconsistentGroupProtocolError(CoordinatorError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    default_message = (
        "The group member's supported protocols are incompatible with those of existing members."
    )


class InvalidGroupIdError(CoordinatorError):
    code = ErrorCode.INVALID_GROUP_ID
    default_message = "The configured groupId is invalid."


class UnknownMemberIdError(CoordinatorError):
    code = ErrorCode.UNKNOWN_MEMBER_ID
    default_message = "The coordinator is not aware of this member."


class InvalidSessionTimeoutError(CoordinatorError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT
    default_message = "The session timeout is not within the range allowed by the broker."


class RebalanceInProgressError(CoordinatorError):
    code = ErrorCode.REBALANCE_IN_PROGRESS
    default_message = "The group is rebalancing, so a rejoin is needed."


class TopicAuthorizationFailedError(CoordinatorError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    default_message = "Topic authorization failed."


class GroupAuthorizationFailedError(CoordinatorError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    default_message = "Group authorization failed."


class ClusterAuthorizationFailedError(CoordinatorError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    default_message = "Cluster authorization failed."


class UnsupportedSaslMechanismError(CoordinatorError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    default_message = "The broker does not support the requested SASL mechanism."


class IllegalSaslStateError(CoordinatorError):
    code = ErrorCode.ILLEGAL_SASL_STATE
    default_message = "Request is not valid given the current SASL state."


class UnsupportedVersionError(CoordinatorError):
    code = ErrorCode.UNSUPPORTED_VERSION
    default_message = "The version of API is not supported."


class TopicAlreadyExistsError(CoordinatorError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS
    default_message = "Topic with this name already exists."


class InvalidPartitionsError(CoordinatorError):
    code = ErrorCode.INVALID_PARTITIONS
    default_message = "Number of partitions is below 1."


class InvalidReplicationFactorError(CoordinatorError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR
    default_message = (
        "Replication factor is below 1 or larger than the number of available brokers."
    )


class InvalidReplicaAssignmentError(CoordinatorError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    default_message = "Replica assignment is invalid."


class InvalidConfigError(CoordinatorError):
    code = ErrorCode.INVALID_CONFIG
    default_message = "Configuration is invalid."


class InvalidRequestError(CoordinatorError):
    code = ErrorCode.INVALID_REQUEST
    default_message = (
        "This most likely occurs because of a request being malformed by the client library."
    )


class InvalidProducerEpochError(CoordinatorError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH
    default_message = "Producer attempted to produce with an old epoch."


class InvalidTxnStateError(CoordinatorError):
    code = ErrorCode.INVALID_TXN_STATE
    default_message = "The producer attempted a transactional operation in an invalid state."


class ConcurrentTransactionsError(CoordinatorError):
    code = ErrorCode.CONCURRENT_TRANSACTIONS
    default_message = (
        "The producer attempted to update a transaction while another concurrent operation on "
        "the same transaction was ongoing."
    )


class UnstableOffsetCommitError(CoordinatorError):
    code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    default_message = "There are unstable offsets that need to be cleared."


class TransactionalIdAuthorizationFailedError(CoordinatorError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    default_message = "Transactional Id authorization failed."


class SecurityDisabledError(CoordinatorError):
    code = ErrorCode.SECURITY_DISABLED
    default_message = "Security features are disabled."


class SaslAuthenticationFailedError(CoordinatorError):
    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    default_message = "SASL Authentication failed."


class NonEmptyGroupError(CoordinatorError):
    code = ErrorCode.NON_EMPTY_GROUP
    default_message = "The group is not empty."


class GroupIdNotFoundError(CoordinatorError):
    code = ErrorCode.GROUP_ID_NOT_FOUND
    default_message = "The group id does not exist."


class MemberIdRequiredError(CoordinatorError):
    code = ErrorCode.MEMBER_ID_REQUIRED
    default_message = "The group member needs to have a valid member id before actually entering a consumer group."


class GroupMaxSizeReachedError(CoordinatorError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED
    default_message = "The consumer group has already reached its max size."


class FencedInstanceIdError(CoordinatorError):
    code = ErrorCode.FENCED_INSTANCE_ID
    default_message = "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."


class GroupSubscribedToTopicError(CoordinatorError):
    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    default_message = "The consumer group is actively subscribed to the topic."


class ResourceNotFoundError(CoordinatorError):
    code = ErrorCode.RESOURCE_NOT_FOUND
    default_message = "A request illegally referred to a resource that does not exist."


class DuplicateResourceError(CoordinatorError):
    code = ErrorCode.DUPLICATE_RESOURCE
    default_message = "A request illegally referred to the same resource twice."


class UnacceptableCredentialError(CoordinatorError):
    code = ErrorCode.UNACCEPTABLE_CREDENTIAL
    default_message = "Requested credential would not meet criteria for acceptability."


class UnknownTopicIdError(CoordinatorError):
    code = ErrorCode.UNKNOWN_TOPIC_ID
    default_message = "This server does not host this topic ID."


class FencedMemberEpochError(CoordinatorError):
    code = ErrorCode.FENCED_MEMBER_EPOCH
    default_message = "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."


class UnreleasedInstanceIdError(CoordinatorError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID
    default_message = "The instance ID is still used by another member in the consumer group. That member must leave first."


class UnsupportedAssignorError(CoordinatorError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR
    default_message = "The assignor or its version range is not supported by the consumer group."


class StaleMemberEpochError(CoordinatorError):
    code = ErrorCode.STALE_MEMBER_EPOCH
    default_message = "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."


class InvalidRegularExpressionError(CoordinatorError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION
    default_message = "The regular expression is not valid."


ERRORS_BY_CODE: dict[ErrorCode, type[CoordinatorError]] = {
    cls.code: cls
    for cls in (
        UnknownServerError,
        UnknownTopicOrPartitionError,
        LeaderNotAvailableError,
        RequestTimedOutError,
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
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        ClusterAuthorizationFailedError,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        UnsupportedVersionError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidReplicaAssignmentError,
        InvalidConfigError,
        InvalidRequestError,
        InvalidProducerEpochError,
        InvalidTxnStateError,
        ConcurrentTransactionsError,
        UnstableOffsetCommitError,
        TransactionalIdAuthorizationFailedError,
        SecurityDisabledError,
        SaslAuthenticationFailedError,
        NonEmptyGroupError,
        GroupIdNotFoundError,
        MemberIdRequiredError,
        GroupMaxSizeReachedError,
        FencedInstanceIdError,
        GroupSubscribedToTopicError,
        ResourceNotFoundError,
        DuplicateResourceError,
        UnacceptableCredentialError,
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
