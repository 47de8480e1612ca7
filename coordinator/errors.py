"""Kafka's error names as exception types, shared by the coordinator and its clients.

The server answers a failed request with ``{"error": <name>, "code": <Kafka code>,
"message": ...}``; the client raises the class of that name, so a caller can catch
``ProducerFencedError`` exactly as it would with a Kafka client. Codes are Kafka's
(``org.apache.kafka.common.protocol.Errors``) so logs and docs can be cross-referenced.
"""

from __future__ import annotations

from typing import ClassVar

from txnlog.log_format import layout
from txnlog.log_format.errors import InvalidTopicNameError, TxnlogError


class CoordinatorError(TxnlogError):
    """Base of every error the coordinator answers with."""

    name: ClassVar[str] = "UnknownServerError"
    code: ClassVar[int] = -1
    http_status: ClassVar[int] = 400
    # Retriable errors may succeed if the same request is sent again later.
    retriable: ClassVar[bool] = False

    def to_json(self) -> dict[str, object]:
        return {"error": self.name, "code": self.code, "message": str(self)}


class UnknownServerError(CoordinatorError):
    name, code, http_status = "UnknownServerError", -1, 500


class OffsetOutOfRangeError(CoordinatorError):
    """Kafka's OFFSET_OUT_OF_RANGE (DeleteRecords past the high watermark)."""

    name, code = "OffsetOutOfRange", 1


class UnknownTopicOrPartitionError(CoordinatorError):
    name, code = "UnknownTopicOrPartition", 3


class RequestTimedOutError(CoordinatorError):
    """Kafka's REQUEST_TIMED_OUT: the change is logged, its effect not yet published."""

    name, code, http_status, retriable = "RequestTimedOut", 7, 503, True


class PolicyViolationError(CoordinatorError):
    """Kafka's POLICY_VIOLATION (DeleteRecords on a topic whose cleanup.policy is compact)."""

    name, code = "PolicyViolation", 44


class CoordinatorLoadInProgressError(CoordinatorError):
    name, code, http_status, retriable = "CoordinatorLoadInProgress", 14, 503, True


class NotCoordinatorError(CoordinatorError):
    """This process lost its own log to another coordinator (it is fenced) or is stopping."""

    name, code, http_status, retriable = "NotCoordinator", 16, 503, True


class InvalidTopicError(CoordinatorError):
    """Kafka's INVALID_TOPIC_EXCEPTION, as answered to a client. (A bad name found by
    ``log_format`` is ``log_format.errors.InvalidTopicNameError``; ``validate_topic_name``
    turns one into the other.)"""

    name, code = "InvalidTopic", 17


class TopicAlreadyExistsError(CoordinatorError):
    name, code = "TopicAlreadyExists", 36


class InvalidPartitionsError(CoordinatorError):
    name, code = "InvalidPartitions", 37


class InvalidRequestError(CoordinatorError):
    name, code = "InvalidRequest", 42


class InvalidConfigError(CoordinatorError):
    """A topic config Kafka does not know, or a value it would refuse (INVALID_CONFIG)."""

    name, code = "InvalidConfig", 40


class AuthenticationFailedError(CoordinatorError):
    """The request carried no bearer token or the wrong one (Kafka's
    SASL_AUTHENTICATION_FAILED; HTTP 401). Never retried: the token will not change."""

    name, code, http_status = "AuthenticationFailed", 58, 401


class OutOfOrderSequenceError(CoordinatorError):
    name, code = "OutOfOrderSequence", 45


class DuplicateSequenceError(CoordinatorError):
    name, code = "DuplicateSequence", 46


class InvalidProducerEpochError(CoordinatorError):
    name, code = "InvalidProducerEpoch", 47


class InvalidTxnStateError(CoordinatorError):
    name, code = "InvalidTxnState", 48


class InvalidProducerIdMappingError(CoordinatorError):
    name, code = "InvalidProducerIdMapping", 49


class InvalidTransactionTimeoutError(CoordinatorError):
    name, code = "InvalidTransactionTimeout", 50


class ConcurrentTransactionsError(CoordinatorError):
    name, code, retriable = "ConcurrentTransactions", 51, True


class KafkaStorageError(CoordinatorError):
    """Storage failed after the storage layer's own retries."""

    name, code, http_status, retriable = "KafkaStorageError", 56, 503, True


class NonEmptyGroupError(CoordinatorError):
    """Kafka's NON_EMPTY_GROUP: a group with live members cannot be deleted."""

    name, code = "NonEmptyGroup", 68


class ProducerFencedError(CoordinatorError):
    name, code = "ProducerFenced", 90


class InvalidRecordError(CoordinatorError):
    """Kafka's INVALID_RECORD: e.g. a record without a key for a compacted topic."""

    name, code = "InvalidRecord", 87


class TopicAuthorizationFailedError(CoordinatorError):
    """The principal may not do this to the topic (Kafka's ACLs)."""

    name, code, http_status = "TopicAuthorizationFailed", 29, 403


class GroupAuthorizationFailedError(CoordinatorError):
    name, code, http_status = "GroupAuthorizationFailed", 30, 403


class ClusterAuthorizationFailedError(CoordinatorError):
    name, code, http_status = "ClusterAuthorizationFailed", 31, 403


class TransactionalIdAuthorizationFailedError(CoordinatorError):
    name, code, http_status = "TransactionalIdAuthorizationFailed", 53, 403


ERRORS: dict[str, type[CoordinatorError]] = {
    cls.name: cls for cls in (
        UnknownServerError, OffsetOutOfRangeError, UnknownTopicOrPartitionError,
        RequestTimedOutError, PolicyViolationError,
        CoordinatorLoadInProgressError,
        NotCoordinatorError, InvalidTopicError, TopicAlreadyExistsError,
        InvalidPartitionsError, InvalidRequestError, InvalidConfigError,
        AuthenticationFailedError, OutOfOrderSequenceError,
        DuplicateSequenceError, InvalidProducerEpochError, InvalidTxnStateError,
        InvalidProducerIdMappingError, InvalidTransactionTimeoutError,
        ConcurrentTransactionsError, KafkaStorageError, ProducerFencedError,
        InvalidRecordError, NonEmptyGroupError, TopicAuthorizationFailedError,
        GroupAuthorizationFailedError, ClusterAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError)
}


def error_from_json(body: dict[str, object]) -> CoordinatorError:
    """The exception a server error body names (UnknownServerError for unknown names)."""
    cls = ERRORS.get(str(body.get("error")), UnknownServerError)
    return cls(str(body.get("message", "")))


def validate_topic_name(name: object) -> str:
    """``layout.validate_topic`` for a request: a bad name is answered as InvalidTopic."""
    try:
        return layout.validate_topic(name)
    except InvalidTopicNameError as exc:
        raise InvalidTopicError(str(exc)) from None
