"""The one place gateway errors become Kafka error codes.

Handlers catch per-item exceptions and put `kafka_error(exc)` into the response; nothing else on
the Kafka face decides an error code for a gateway error.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode as KafkaError

from gateway.domain.log import validate_topic_name
from gateway.errors import ErrorCode, GatewayError, InvalidRequest

log = logging.getLogger(__name__)


class MalformedRequest(InvalidRequest):
    """The bytes are not a request we can read; the connection that sent them is closed."""


_BY_CODE: dict[ErrorCode, KafkaError] = {
    ErrorCode.OK: KafkaError.none,
    ErrorCode.UNKNOWN: KafkaError.unknown_server_error,
    ErrorCode.TOPIC_NOT_FOUND: KafkaError.unknown_topic_or_partition,
    ErrorCode.PARTITION_NOT_FOUND: KafkaError.unknown_topic_or_partition,
    ErrorCode.TOPIC_EXISTS: KafkaError.topic_already_exists,
    ErrorCode.INVALID_REQUEST: KafkaError.invalid_request,
    ErrorCode.CORRUPT_MESSAGE: KafkaError.corrupt_message,
    ErrorCode.MESSAGE_TOO_LARGE: KafkaError.message_too_large,
    ErrorCode.OFFSET_OUT_OF_RANGE: KafkaError.offset_out_of_range,
    ErrorCode.DUPLICATE_SEQUENCE: KafkaError.duplicate_sequence_number,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: KafkaError.out_of_order_sequence_number,
    ErrorCode.INVALID_PRODUCER_EPOCH: KafkaError.invalid_producer_epoch,
    ErrorCode.UNKNOWN_PRODUCER_ID: KafkaError.unknown_producer_id,
    ErrorCode.NOT_ALLOWED: KafkaError.policy_violation,
    ErrorCode.STORAGE_UNAVAILABLE: KafkaError.kafka_storage_error,
    # a broker whose log dir fails (a full disk among its causes) answers a produce so, and clients
    # retry it (Kafka 4.4: KafkaStorageException, retriable; ReplicaManager.appendToLocalLog)
    ErrorCode.STORAGE_FULL: KafkaError.kafka_storage_error,
    ErrorCode.TIMEOUT: KafkaError.request_timed_out,
    ErrorCode.INVALID_CONFIG: KafkaError.invalid_config,
    ErrorCode.UNSUPPORTED_VERSION: KafkaError.unsupported_version,
    ErrorCode.TRANSACTION_CONFLICT: KafkaError.concurrent_transactions,
    ErrorCode.EXPIRED_TRANSACTION: KafkaError.invalid_txn_state,
    ErrorCode.INVALID_TXN_STATE: KafkaError.invalid_txn_state,
    ErrorCode.PRODUCER_FENCED: KafkaError.producer_fenced,
    ErrorCode.CONCURRENT_TRANSACTIONS: KafkaError.concurrent_transactions,
    ErrorCode.TRANSACTION_NOT_FOUND: KafkaError.transactional_id_not_found,
    ErrorCode.INVALID_PARTITIONS: KafkaError.invalid_partitions,
    ErrorCode.AUTHENTICATION_FAILED: KafkaError.sasl_authentication_failed,
    ErrorCode.AUTHORIZATION_FAILED: KafkaError.topic_authorization_failed,  # other resources map their own
    ErrorCode.NOT_ENOUGH_REPLICAS: KafkaError.not_enough_replicas,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: KafkaError.not_enough_replicas_after_append,
    ErrorCode.INVALID_RECORD: KafkaError.invalid_record,
    ErrorCode.INVALID_TIMESTAMP: KafkaError.invalid_timestamp,
}


REPLICAS_SHORT = frozenset({ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})
"""A coordinator's state change that its replicas did not take: Kafka's coordinators answer it with
COORDINATOR_NOT_AVAILABLE, which clients retry (Kafka 4.2: GroupCoordinatorService's
handleOperationException for offset commits, TransactionStateManager.appendTransactionToLog's
transform of the log append error for InitProducerId, EndTxn and the other transaction requests)."""


def kafka_error(exc: BaseException | ErrorCode | None) -> KafkaError:
    """The Kafka error code for a gateway error (or code); anything unexpected is UNKNOWN_SERVER_ERROR."""
    if exc is None:
        return KafkaError.none
    if isinstance(exc, ErrorCode):
        return _BY_CODE.get(exc, KafkaError.unknown_server_error)
    if isinstance(exc, GatewayError):
        return _BY_CODE.get(exc.code, KafkaError.unknown_server_error)
    log.error("answering UNKNOWN_SERVER_ERROR for an unexpected error", exc_info=exc)
    return KafkaError.unknown_server_error


def error_message(exc: BaseException | None) -> str | None:
    """The text for a response's error_message field: ours, never a stack trace."""
    if exc is None:
        return None
    return str(exc) if isinstance(exc, GatewayError) else "internal error"


def topic_name_message(name: str) -> str:
    """What Kafka's Topic.validate says of a name it refuses (INVALID_TOPIC_EXCEPTION's message)."""
    if not name:
        return "Topic name is invalid: the empty string is not allowed"
    if name in (".", ".."):
        return f"Topic name is invalid: '{name}' is not allowed"
    if len(name) > 249:
        return f"Topic name is invalid: the length of '{name}' is longer than the max allowed length 249"
    return (f"Topic name is invalid: '{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'")


def topic_name_error(name: str) -> KafkaError | None:
    """INVALID_TOPIC_EXCEPTION for a name Kafka would refuse, before anything touches storage."""
    try:
        validate_topic_name(name)
    except GatewayError:
        return KafkaError.invalid_topic_exception
    return None
