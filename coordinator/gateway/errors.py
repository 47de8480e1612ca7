"""Kafka's error codes as the gateway answers them, and how txnlog's errors map onto them."""

from __future__ import annotations

from txnlog.log_format.errors import LogFormatError
from txnlog.log_format.storage import StorageError

from ..access import kafka_authz
from ..access.model import ResourceType as RT
from ..errors import CoordinatorError

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
MESSAGE_TOO_LARGE = 10
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
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105
MISMATCHED_ENDPOINT_TYPE = 114
UNKNOWN_SERVER_ERROR = -1

NOT_REQUESTED = kafka_authz.NOT_REQUESTED
_TYPES = {"cluster": RT.CLUSTER, "topic": RT.TOPIC, "group": RT.GROUP}


def authorized_operations(resource: str, requested: bool) -> int:
    """Kafka's authorized-operations bit field of a resource as a broker without an
    authorizer answers it (every operation the resource type supports; also a super
    user's answer), or NOT_REQUESTED when the request did not ask. With ACLs on, the
    access package's guard replaces it with the principal's own operations."""
    if not requested:
        return NOT_REQUESTED
    return sum(1 << int(op) for op in kafka_authz.SUPPORTED_OPERATIONS[_TYPES[resource]])


def fenced_as(code: int, version: int, first: int | None) -> int:
    """PRODUCER_FENCED as Kafka's KafkaApis answers it: to request versions from ``first``
    on (InitProducerId 4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn 2); older ones,
    whose clients do not know it, get INVALID_PRODUCER_EPOCH. A Produce always gets
    INVALID_PRODUCER_EPOCH (``first`` None): since Kafka 2.7 a fenced produce is not
    fatal for the producer, which aborts its transaction and goes on."""
    if code == PRODUCER_FENCED and (first is None or version < first):
        return INVALID_PRODUCER_EPOCH
    return code


def code_of(exc: BaseException) -> int:
    """The Kafka error code a failure is answered with."""
    if isinstance(exc, CoordinatorError):
        if exc.code == NOT_COORDINATOR or exc.name == "NotCoordinator":
            # the coordinator is unreachable or stopping: clients retry NotCoordinator
            return NOT_COORDINATOR
        return exc.code
    if isinstance(exc, StorageError | OSError):
        return KAFKA_STORAGE_ERROR
    if isinstance(exc, LogFormatError):
        return CORRUPT_MESSAGE
    return UNKNOWN_SERVER_ERROR
