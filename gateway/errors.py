"""The one error vocabulary of the gateway.

Lua scripts return small integer codes; `ErrorCode` names them once, and every face maps an
`ErrorCode` to its own wire (Kafka error codes, native error enums). Retriability is data on the
code, so callers decide to retry from the type, never from a message.
"""

from __future__ import annotations

import logging
from enum import IntEnum


class ErrorCode(IntEnum):
    """Codes shared by the Lua scripts, the domain services and both faces."""

    OK = 0
    UNKNOWN = 1
    TOPIC_NOT_FOUND = 2
    PARTITION_NOT_FOUND = 3
    TOPIC_EXISTS = 4
    INVALID_REQUEST = 5
    CORRUPT_MESSAGE = 6
    MESSAGE_TOO_LARGE = 7
    OFFSET_OUT_OF_RANGE = 8
    DUPLICATE_SEQUENCE = 9
    OUT_OF_ORDER_SEQUENCE = 10
    INVALID_PRODUCER_EPOCH = 11
    UNKNOWN_PRODUCER_ID = 12
    NOT_ALLOWED = 13
    CONSUMER_BUSY = 14
    SUBSCRIPTION_NOT_FOUND = 15
    STORAGE_UNAVAILABLE = 16
    TIMEOUT = 17
    INVALID_CONFIG = 18
    UNSUPPORTED_VERSION = 19
    TRANSACTION_CONFLICT = 20
    EXPIRED_TRANSACTION = 21
    INVALID_TXN_STATE = 22
    PRODUCER_FENCED = 23
    CONCURRENT_TRANSACTIONS = 24
    TRANSACTION_NOT_FOUND = 25
    INVALID_PARTITIONS = 26
    GROUP_ERROR = 27
    AUTHENTICATION_FAILED = 28
    AUTHORIZATION_FAILED = 29
    NOT_ENOUGH_REPLICAS = 30
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 31
    INVALID_RECORD = 32
    INVALID_TIMESTAMP = 33
    STORAGE_FULL = 34

    @property
    def retriable(self) -> bool:
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.STORAGE_UNAVAILABLE,
        ErrorCode.STORAGE_FULL,
        ErrorCode.TIMEOUT,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.OUT_OF_ORDER_SEQUENCE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)


class GatewayError(Exception):
    """Root of every error the gateway raises on purpose; `code` says what went wrong."""

    code: ErrorCode = ErrorCode.UNKNOWN
    storage_failed: bool = False
    """Redis failed under the operation (it could not be reached, or a connection dropped after a
    write was sent, its outcome unknown) rather than answering or refusing it: Kafka's face closes a
    produce's connection on it, as a leader gone mid-request would (gateway/kafka/produce.py)."""

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(message or self.code.name.lower().replace("_", " "))

    @property
    def retriable(self) -> bool:
        return self.code.retriable


class TopicNotFound(GatewayError):
    """The topic does not exist."""

    code = ErrorCode.TOPIC_NOT_FOUND


class PartitionNotFound(GatewayError):
    """No such partition."""

    code = ErrorCode.PARTITION_NOT_FOUND


class TopicExists(GatewayError):
    """A topic of that name exists already."""

    code = ErrorCode.TOPIC_EXISTS


class InvalidRequest(GatewayError):
    """The request is malformed."""

    code = ErrorCode.INVALID_REQUEST


class CorruptMessage(GatewayError):
    """A record batch failed its checks."""

    code = ErrorCode.CORRUPT_MESSAGE


class MessageTooLarge(GatewayError):
    """Over max.message.bytes."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class OffsetOutOfRange(GatewayError):
    """Outside the log."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class OutOfOrderSequence(GatewayError):
    """An idempotent producer skipped a sequence."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE


class InvalidProducerEpoch(GatewayError):
    """The producer epoch is older than the current one."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class NotAllowed(GatewayError):
    """The operation is not allowed."""

    code = ErrorCode.NOT_ALLOWED


class ConsumerBusy(GatewayError):
    """The exclusive subscription has a consumer."""

    code = ErrorCode.CONSUMER_BUSY


class SubscriptionNotFound(GatewayError):
    """No such subscription."""

    code = ErrorCode.SUBSCRIPTION_NOT_FOUND


class StorageUnavailable(GatewayError):
    """Redis cannot be reached; retry later."""

    code = ErrorCode.STORAGE_UNAVAILABLE
    storage_failed = True


class StorageRefused(StorageUnavailable):
    """Redis is reachable but the gateway will not write to it (an evicting maxmemory-policy): a
    refusal, nothing sent, so unlike Redis gone mid-produce the client is answered and may retry."""

    storage_failed = False


class StorageFull(GatewayError):
    """Redis's memory, the log's disk, is at its limit (the gateway's high-water mark or Redis's
    maxmemory): nothing was written; retry once retention or deletions free memory."""

    code = ErrorCode.STORAGE_FULL


class Timeout(GatewayError):
    """The operation timed out."""

    code = ErrorCode.TIMEOUT


class ReplyLost(Timeout):
    """A write sent to Redis whose reply a dropped connection lost, or that no reply answered within
    its request's timeout: it may have been applied."""

    storage_failed = True


class ReplicationTimedOut(Timeout):
    """Appended, but its replicas did not confirm it within the produce's timeout: Kafka's leader
    answers REQUEST_TIMED_OUT when a DelayedProduce expires, with the offsets the append took
    (kafka.server.DelayedProduce); an idempotent retry is answered as the original."""

    def __init__(self, message: str, base_offset: int, log_start: int) -> None:
        super().__init__(message)
        self.base_offset = base_offset
        self.log_start = log_start


class InvalidPartitions(GatewayError):
    """A partition count a topic cannot have: below 1, above the limit, or not above its current count."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidConfig(GatewayError):
    """A configuration value is invalid."""

    code = ErrorCode.INVALID_CONFIG


class InvalidRecord(GatewayError):
    """A record the topic cannot take (a record without a key on a compacted topic): the batch is
    refused; `record_errors` names each bad record by its index in the batch, with why."""

    code = ErrorCode.INVALID_RECORD

    def __init__(self, message: str = "", record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class InvalidTimestamp(InvalidRecord):
    """A record's timestamp outside what the topic accepts (`message.timestamp.*.max.ms`)."""

    code = ErrorCode.INVALID_TIMESTAMP


class UnsupportedVersion(GatewayError):
    """Version not supported."""

    code = ErrorCode.UNSUPPORTED_VERSION


class TransactionConflict(GatewayError):
    """Another transaction holds the message."""

    code = ErrorCode.TRANSACTION_CONFLICT


class ExpiredTransactionError(GatewayError):
    """The transaction ended or was fenced."""

    code = ErrorCode.EXPIRED_TRANSACTION


class InvalidTxnState(GatewayError):
    """Not allowed in the transaction's state."""

    code = ErrorCode.INVALID_TXN_STATE


class ConcurrentTransactions(GatewayError):
    """The previous transaction of this producer or key is still open or ending; retry shortly."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS


class TransactionNotFound(GatewayError):
    """No transaction with that id (or it finished long ago)."""

    code = ErrorCode.TRANSACTION_NOT_FOUND


class AuthenticationFailed(GatewayError):
    """Unknown user, wrong password or token, or no credentials where they are required."""

    code = ErrorCode.AUTHENTICATION_FAILED


class AuthorizationFailed(GatewayError):
    """The principal has no ACL allowing this operation on this resource."""

    code = ErrorCode.AUTHORIZATION_FAILED


class ProducerFenced(GatewayError):
    """A newer producer epoch exists."""

    code = ErrorCode.PRODUCER_FENCED


class NotEnoughReplicas(GatewayError):
    """Fewer replicas are connected than the topic's min.insync.replicas needs: nothing was written."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppend(GatewayError):
    """Written, but not on enough replicas in time; an idempotent retry is answered as the original."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


AWAY = (StorageUnavailable, NotEnoughReplicas, NotEnoughReplicasAfterAppend)
"""Redis, or the replicas a write waits for, away for now: background work retries these quietly."""


def log_failure(log: logging.Logger, what: str, exc: BaseException, then: str) -> None:
    """A background step's failure: Redis or its replicas away is expected, one WARNING line naming
    it; anything else is a bug, logged with its traceback."""
    if isinstance(exc, AWAY):
        log.warning("%s: %s; %s", what, exc, then)
    else:
        log.error("%s failed; %s", what, then, exc_info=exc)


_BY_CODE: dict[ErrorCode, type[GatewayError]] = {
    cls.code: cls
    for cls in list(globals().values())
    # the class that declares a code stands for it, not a subclass that says more than a code can
    # (ReplyLost, ReplicationTimedOut, StorageRefused)
    if isinstance(cls, type) and issubclass(cls, GatewayError) and cls is not GatewayError and "code" in vars(cls)
}


def error_for(code: int, message: str = "") -> GatewayError:
    """The typed error for a code from a script or from the wire."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        ec = ErrorCode.UNKNOWN
    return _BY_CODE.get(ec, GatewayError)(message, ec)
