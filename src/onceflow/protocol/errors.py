"""Kafka's error codes, with Kafka's names and numbers (``org.apache.kafka.common.protocol.Errors``).

Every layer raises :class:`KafkaError` subclasses (or ``KafkaError(code)``); the broker's handlers turn
them into wire codes with :func:`error_code_for`, so no layer invents its own numbers.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICATION_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.NOT_CONTROLLER,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.LISTENER_NOT_FOUND,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.OFFSET_NOT_AVAILABLE,
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
        ErrorCode.ELECTION_NOT_NEEDED,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ErrorCode.THROTTLING_QUOTA_EXCEEDED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
    }
)

# The answers of a broker that is not (or no longer) the coordinator of a group or transactional id:
# a client finds the coordinator again (FindCoordinator) and resends. The one definition; clients add
# the transport failures they treat the same way (a lost connection, a timeout) where they use it.
COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


class KafkaError(Exception):
    """An error that has a Kafka wire code. Subclasses fix ``code``; plain use passes it."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = ErrorCode(code)
        super().__init__(message or self.code.name)

    @property
    def retriable(self) -> bool:
        return self.code.retriable


_CLASS_FOR_CODE: dict[ErrorCode, type[KafkaError]] = {}


def _error_class(name: str, code: ErrorCode) -> type[KafkaError]:
    cls = type(name, (KafkaError,), {"code": code, "__doc__": f"Kafka error {code.name} ({int(code)})."})
    _CLASS_FOR_CODE[code] = cls
    return cls


def kafka_error(code: int, message: str = "") -> KafkaError:
    """The error for a wire code: its own class where there is one (``TopicAlreadyExists``, ...), so
    callers can catch it by name, else a plain ``KafkaError`` carrying the code."""
    error = ErrorCode(code)
    cls = _CLASS_FOR_CODE.get(error)
    return cls(message) if cls is not None else KafkaError(message, error)


CorruptMessage = _error_class("CorruptMessage", ErrorCode.CORRUPT_MESSAGE)
OffsetOutOfRange = _error_class("OffsetOutOfRange", ErrorCode.OFFSET_OUT_OF_RANGE)
UnknownTopicOrPartition = _error_class("UnknownTopicOrPartition", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
MessageTooLarge = _error_class("MessageTooLarge", ErrorCode.MESSAGE_TOO_LARGE)
RecordListTooLarge = _error_class("RecordListTooLarge", ErrorCode.RECORD_LIST_TOO_LARGE)
InvalidTopic = _error_class("InvalidTopic", ErrorCode.INVALID_TOPIC_EXCEPTION)
TopicAuthorizationFailed = _error_class("TopicAuthorizationFailed", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
InvalidRecord = _error_class("InvalidRecord", ErrorCode.INVALID_RECORD)
InvalidTimestamp = _error_class("InvalidTimestamp", ErrorCode.INVALID_TIMESTAMP)
NotEnoughReplicas = _error_class("NotEnoughReplicas", ErrorCode.NOT_ENOUGH_REPLICAS)
NotEnoughReplicasAfterAppend = _error_class(
    "NotEnoughReplicasAfterAppend", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
)
NotLeaderOrFollower = _error_class("NotLeaderOrFollower", ErrorCode.NOT_LEADER_OR_FOLLOWER)
FencedLeaderEpoch = _error_class("FencedLeaderEpoch", ErrorCode.FENCED_LEADER_EPOCH)
UnknownLeaderEpoch = _error_class("UnknownLeaderEpoch", ErrorCode.UNKNOWN_LEADER_EPOCH)
RequestTimedOut = _error_class("RequestTimedOut", ErrorCode.REQUEST_TIMED_OUT)
UnsupportedForMessageFormat = _error_class(
    "UnsupportedForMessageFormat", ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
)
UnsupportedCompressionType = _error_class(
    "UnsupportedCompressionType", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
)
UnsupportedVersion = _error_class("UnsupportedVersion", ErrorCode.UNSUPPORTED_VERSION)
InvalidRequest = _error_class("InvalidRequest", ErrorCode.INVALID_REQUEST)
InvalidConfig = _error_class("InvalidConfig", ErrorCode.INVALID_CONFIG)
InvalidPartitions = _error_class("InvalidPartitions", ErrorCode.INVALID_PARTITIONS)
InvalidReplicationFactor = _error_class("InvalidReplicationFactor", ErrorCode.INVALID_REPLICATION_FACTOR)
TopicAlreadyExists = _error_class("TopicAlreadyExists", ErrorCode.TOPIC_ALREADY_EXISTS)
KafkaStorageError = _error_class("KafkaStorageError", ErrorCode.KAFKA_STORAGE_ERROR)
OutOfOrderSequence = _error_class("OutOfOrderSequence", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
DuplicateSequenceNumber = _error_class("DuplicateSequenceNumber", ErrorCode.DUPLICATE_SEQUENCE_NUMBER)
InvalidProducerEpoch = _error_class("InvalidProducerEpoch", ErrorCode.INVALID_PRODUCER_EPOCH)
UnknownProducerId = _error_class("UnknownProducerId", ErrorCode.UNKNOWN_PRODUCER_ID)
ProducerFenced = _error_class("ProducerFenced", ErrorCode.PRODUCER_FENCED)
InvalidTxnState = _error_class("InvalidTxnState", ErrorCode.INVALID_TXN_STATE)
InvalidProducerIdMapping = _error_class("InvalidProducerIdMapping", ErrorCode.INVALID_PRODUCER_ID_MAPPING)
ConcurrentTransactions = _error_class("ConcurrentTransactions", ErrorCode.CONCURRENT_TRANSACTIONS)
CoordinatorLoadInProgress = _error_class("CoordinatorLoadInProgress", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
NotCoordinator = _error_class("NotCoordinator", ErrorCode.NOT_COORDINATOR)
CoordinatorNotAvailable = _error_class("CoordinatorNotAvailable", ErrorCode.COORDINATOR_NOT_AVAILABLE)
InvalidTransactionTimeout = _error_class("InvalidTransactionTimeout", ErrorCode.INVALID_TRANSACTION_TIMEOUT)
TransactionalIdNotFound = _error_class("TransactionalIdNotFound", ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
TransactionAbortable = _error_class("TransactionAbortable", ErrorCode.TRANSACTION_ABORTABLE)


def error_code_for(exc: BaseException) -> ErrorCode:
    """The wire code for an exception: its own code if it has one, else UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, KafkaError):
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR
