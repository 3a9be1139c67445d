# Generated from proto/gateway.proto; do not edit. Regenerate: proto/generate.sh
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Acks(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEADER: _ClassVar[Acks]
    ALL: _ClassVar[Acks]

class SubscriptionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXCLUSIVE: _ClassVar[SubscriptionMode]
    FAILOVER: _ClassVar[SubscriptionMode]
    SHARED: _ClassVar[SubscriptionMode]
    KEY_SHARED: _ClassVar[SubscriptionMode]

class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LATEST: _ClassVar[InitialPosition]
    EARLIEST: _ClassVar[InitialPosition]
LEADER: Acks
ALL: Acks
EXCLUSIVE: SubscriptionMode
FAILOVER: SubscriptionMode
SHARED: SubscriptionMode
KEY_SHARED: SubscriptionMode
LATEST: InitialPosition
EARLIEST: InitialPosition

class Request(_message.Message):
    __slots__ = ("request_id", "connect", "create_producer", "send", "close_producer", "subscribe", "flow", "ack", "nack", "seek", "close_consumer", "ping", "unsubscribe", "new_transaction", "end_transaction", "list_partitions", "read_range", "commit_transactions", "send_watermark", "get_watermark", "reconsume_later", "list_topics")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    CREATE_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    CLOSE_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    SEEK_FIELD_NUMBER: _ClassVar[int]
    CLOSE_CONSUMER_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    UNSUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    NEW_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    END_TRANSACTION_FIELD_NUMBER: _ClassVar[int]
    LIST_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    READ_RANGE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    SEND_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    GET_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_LATER_FIELD_NUMBER: _ClassVar[int]
    LIST_TOPICS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    connect: Connect
    create_producer: CreateProducer
    send: Send
    close_producer: CloseProducer
    subscribe: Subscribe
    flow: Flow
    ack: Ack
    nack: Nack
    seek: Seek
    close_consumer: CloseConsumer
    ping: Ping
    unsubscribe: Unsubscribe
    new_transaction: NewTransaction
    end_transaction: EndTransaction
    list_partitions: ListPartitions
    read_range: ReadRange
    commit_transactions: CommitTransactions
    send_watermark: SendWatermark
    get_watermark: GetWatermark
    reconsume_later: ReconsumeLater
    list_topics: ListTopics
    def __init__(self, request_id: _Optional[int] = ..., connect: _Optional[_Union[Connect, _Mapping]] = ..., create_producer: _Optional[_Union[CreateProducer, _Mapping]] = ..., send: _Optional[_Union[Send, _Mapping]] = ..., close_producer: _Optional[_Union[CloseProducer, _Mapping]] = ..., subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., flow: _Optional[_Union[Flow, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., nack: _Optional[_Union[Nack, _Mapping]] = ..., seek: _Optional[_Union[Seek, _Mapping]] = ..., close_consumer: _Optional[_Union[CloseConsumer, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., unsubscribe: _Optional[_Union[Unsubscribe, _Mapping]] = ..., new_transaction: _Optional[_Union[NewTransaction, _Mapping]] = ..., end_transaction: _Optional[_Union[EndTransaction, _Mapping]] = ..., list_partitions: _Optional[_Union[ListPartitions, _Mapping]] = ..., read_range: _Optional[_Union[ReadRange, _Mapping]] = ..., commit_transactions: _Optional[_Union[CommitTransactions, _Mapping]] = ..., send_watermark: _Optional[_Union[SendWatermark, _Mapping]] = ..., get_watermark: _Optional[_Union[GetWatermark, _Mapping]] = ..., reconsume_later: _Optional[_Union[ReconsumeLater, _Mapping]] = ..., list_topics: _Optional[_Union[ListTopics, _Mapping]] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("request_id", "error", "connected", "producer_created", "send_receipt", "subscribed", "success", "pong", "transaction_created", "partitions", "range_read", "transactions_committed", "watermark_receipt", "watermark", "messages", "consumer_reset", "watermark_update", "topics")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_CREATED_FIELD_NUMBER: _ClassVar[int]
    SEND_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_CREATED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    RANGE_READ_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_RESET_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_UPDATE_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: Error
    connected: Connected
    producer_created: ProducerCreated
    send_receipt: SendReceipt
    subscribed: Subscribed
    success: Success
    pong: Pong
    transaction_created: TransactionCreated
    partitions: Partitions
    range_read: RangeRead
    transactions_committed: TransactionsCommitted
    watermark_receipt: WatermarkReceipt
    watermark: WatermarkValue
    messages: Messages
    consumer_reset: ConsumerReset
    watermark_update: WatermarkUpdate
    topics: Topics
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., connected: _Optional[_Union[Connected, _Mapping]] = ..., producer_created: _Optional[_Union[ProducerCreated, _Mapping]] = ..., send_receipt: _Optional[_Union[SendReceipt, _Mapping]] = ..., subscribed: _Optional[_Union[Subscribed, _Mapping]] = ..., success: _Optional[_Union[Success, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., transaction_created: _Optional[_Union[TransactionCreated, _Mapping]] = ..., partitions: _Optional[_Union[Partitions, _Mapping]] = ..., range_read: _Optional[_Union[RangeRead, _Mapping]] = ..., transactions_committed: _Optional[_Union[TransactionsCommitted, _Mapping]] = ..., watermark_receipt: _Optional[_Union[WatermarkReceipt, _Mapping]] = ..., watermark: _Optional[_Union[WatermarkValue, _Mapping]] = ..., messages: _Optional[_Union[Messages, _Mapping]] = ..., consumer_reset: _Optional[_Union[ConsumerReset, _Mapping]] = ..., watermark_update: _Optional[_Union[WatermarkUpdate, _Mapping]] = ..., topics: _Optional[_Union[Topics, _Mapping]] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Connect(_message.Message):
    __slots__ = ("client_name", "protocol_version", "transaction_key", "epoch", "incarnation", "username", "password", "token")
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    client_name: str
    protocol_version: int
    transaction_key: str
    epoch: int
    incarnation: str
    username: str
    password: str
    token: str
    def __init__(self, client_name: _Optional[str] = ..., protocol_version: _Optional[int] = ..., transaction_key: _Optional[str] = ..., epoch: _Optional[int] = ..., incarnation: _Optional[str] = ..., username: _Optional[str] = ..., password: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class Connected(_message.Message):
    __slots__ = ("protocol_version", "max_frame_bytes", "epoch", "idle_timeout_ms", "principal")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_FRAME_BYTES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    max_frame_bytes: int
    epoch: int
    idle_timeout_ms: int
    principal: str
    def __init__(self, protocol_version: _Optional[int] = ..., max_frame_bytes: _Optional[int] = ..., epoch: _Optional[int] = ..., idle_timeout_ms: _Optional[int] = ..., principal: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Pong(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Success(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CreateProducer(_message.Message):
    __slots__ = ("topic", "producer_name", "resume_producer_id", "acks", "replica_timeout_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    RESUME_PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_name: str
    resume_producer_id: int
    acks: Acks
    replica_timeout_ms: int
    def __init__(self, topic: _Optional[str] = ..., producer_name: _Optional[str] = ..., resume_producer_id: _Optional[int] = ..., acks: _Optional[_Union[Acks, str]] = ..., replica_timeout_ms: _Optional[int] = ...) -> None: ...

class ProducerCreated(_message.Message):
    __slots__ = ("handle", "producer_id", "partitions", "producer_name", "max_message_bytes")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    handle: int
    producer_id: int
    partitions: int
    producer_name: str
    max_message_bytes: int
    def __init__(self, handle: _Optional[int] = ..., producer_id: _Optional[int] = ..., partitions: _Optional[int] = ..., producer_name: _Optional[str] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class Send(_message.Message):
    __slots__ = ("handle", "partition", "batch", "txn_id", "deliver_at_ms", "deliver_after_ms")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    handle: int
    partition: int
    batch: bytes
    txn_id: str
    deliver_at_ms: int
    deliver_after_ms: int
    def __init__(self, handle: _Optional[int] = ..., partition: _Optional[int] = ..., batch: _Optional[bytes] = ..., txn_id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., deliver_after_ms: _Optional[int] = ...) -> None: ...

class SendReceipt(_message.Message):
    __slots__ = ("base_offset", "duplicate", "delayed")
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    base_offset: int
    duplicate: bool
    delayed: bool
    def __init__(self, base_offset: _Optional[int] = ..., duplicate: _Optional[bool] = ..., delayed: _Optional[bool] = ...) -> None: ...

class NewTransaction(_message.Message):
    __slots__ = ("timeout_ms", "group_key", "group_commit_id")
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEY_FIELD_NUMBER: _ClassVar[int]
    GROUP_COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    timeout_ms: int
    group_key: str
    group_commit_id: int
    def __init__(self, timeout_ms: _Optional[int] = ..., group_key: _Optional[str] = ..., group_commit_id: _Optional[int] = ...) -> None: ...

class TransactionCreated(_message.Message):
    __slots__ = ("txn_id", "producer_id", "producer_epoch", "timeout_ms")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    txn_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    def __init__(self, txn_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class EndTransaction(_message.Message):
    __slots__ = ("txn_id", "commit")
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    txn_id: str
    commit: bool
    def __init__(self, txn_id: _Optional[str] = ..., commit: _Optional[bool] = ...) -> None: ...

class CloseProducer(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: int
    def __init__(self, handle: _Optional[int] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("topic", "subscription", "mode", "initial_position", "consumer_name", "ack_timeout_ms", "dead_letter", "sticky_ranges")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_FIELD_NUMBER: _ClassVar[int]
    STICKY_RANGES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    mode: SubscriptionMode
    initial_position: InitialPosition
    consumer_name: str
    ack_timeout_ms: int
    dead_letter: DeadLetterPolicy
    sticky_ranges: _containers.RepeatedCompositeFieldContainer[KeyHashRange]
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., mode: _Optional[_Union[SubscriptionMode, str]] = ..., initial_position: _Optional[_Union[InitialPosition, str]] = ..., consumer_name: _Optional[str] = ..., ack_timeout_ms: _Optional[int] = ..., dead_letter: _Optional[_Union[DeadLetterPolicy, _Mapping]] = ..., sticky_ranges: _Optional[_Iterable[_Union[KeyHashRange, _Mapping]]] = ...) -> None: ...

class DeadLetterPolicy(_message.Message):
    __slots__ = ("max_redeliver_count", "dead_letter_topic", "retry_letter_topic")
    MAX_REDELIVER_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    RETRY_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    max_redeliver_count: int
    dead_letter_topic: str
    retry_letter_topic: str
    def __init__(self, max_redeliver_count: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., retry_letter_topic: _Optional[str] = ...) -> None: ...

class ReconsumeLater(_message.Message):
    __slots__ = ("consumer_id", "partition", "offset", "delay_ms")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    partition: int
    offset: int
    delay_ms: int
    def __init__(self, consumer_id: _Optional[int] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delay_ms: _Optional[int] = ...) -> None: ...

class KeyHashRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class Subscribed(_message.Message):
    __slots__ = ("consumer_id", "partitions", "watermark_ms")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    partitions: int
    watermark_ms: int
    def __init__(self, consumer_id: _Optional[int] = ..., partitions: _Optional[int] = ..., watermark_ms: _Optional[int] = ...) -> None: ...

class Flow(_message.Message):
    __slots__ = ("consumer_id", "permits")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    permits: int
    def __init__(self, consumer_id: _Optional[int] = ..., permits: _Optional[int] = ...) -> None: ...

class PartitionOffsets(_message.Message):
    __slots__ = ("partition", "offsets")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, partition: _Optional[int] = ..., offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("consumer_id", "individual", "cumulative", "txn_id")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    INDIVIDUAL_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    individual: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    cumulative: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    txn_id: str
    def __init__(self, consumer_id: _Optional[int] = ..., individual: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ..., cumulative: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ..., txn_id: _Optional[str] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ("consumer_id", "offsets")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    offsets: _containers.RepeatedCompositeFieldContainer[PartitionOffsets]
    def __init__(self, consumer_id: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[PartitionOffsets, _Mapping]]] = ...) -> None: ...

class Seek(_message.Message):
    __slots__ = ("consumer_id", "offset", "timestamp_ms", "earliest", "latest", "all_partitions", "partition")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    EARLIEST_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    ALL_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    offset: int
    timestamp_ms: int
    earliest: bool
    latest: bool
    all_partitions: bool
    partition: int
    def __init__(self, consumer_id: _Optional[int] = ..., offset: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., earliest: _Optional[bool] = ..., latest: _Optional[bool] = ..., all_partitions: _Optional[bool] = ..., partition: _Optional[int] = ...) -> None: ...

class CloseConsumer(_message.Message):
    __slots__ = ("consumer_id",)
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    def __init__(self, consumer_id: _Optional[int] = ...) -> None: ...

class Unsubscribe(_message.Message):
    __slots__ = ("consumer_id",)
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    def __init__(self, consumer_id: _Optional[int] = ...) -> None: ...

class EntryBatch(_message.Message):
    __slots__ = ("partition", "base_offset", "batch", "skip", "redelivery_count")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    BASE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    partition: int
    base_offset: int
    batch: bytes
    skip: _containers.RepeatedScalarFieldContainer[int]
    redelivery_count: int
    def __init__(self, partition: _Optional[int] = ..., base_offset: _Optional[int] = ..., batch: _Optional[bytes] = ..., skip: _Optional[_Iterable[int]] = ..., redelivery_count: _Optional[int] = ...) -> None: ...

class Messages(_message.Message):
    __slots__ = ("consumer_id", "entries")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    entries: _containers.RepeatedCompositeFieldContainer[EntryBatch]
    def __init__(self, consumer_id: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[EntryBatch, _Mapping]]] = ...) -> None: ...

class ConsumerReset(_message.Message):
    __slots__ = ("consumer_id",)
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    def __init__(self, consumer_id: _Optional[int] = ...) -> None: ...

class ListPartitions(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("partition", "log_start", "high_watermark", "last_stable_offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LOG_START_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    log_start: int
    high_watermark: int
    last_stable_offset: int
    def __init__(self, partition: _Optional[int] = ..., log_start: _Optional[int] = ..., high_watermark: _Optional[int] = ..., last_stable_offset: _Optional[int] = ...) -> None: ...

class Partitions(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class ReadRange(_message.Message):
    __slots__ = ("topic", "partition", "start", "end", "max_bytes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    start: int
    end: int
    max_bytes: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class RangeRead(_message.Message):
    __slots__ = ("entries", "next_offset", "last_stable_offset")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_STABLE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryBatch]
    next_offset: int
    last_stable_offset: int
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryBatch, _Mapping]]] = ..., next_offset: _Optional[int] = ..., last_stable_offset: _Optional[int] = ...) -> None: ...

class SendWatermark(_message.Message):
    __slots__ = ("handle", "event_time_ms", "idle", "txn_id")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    IDLE_FIELD_NUMBER: _ClassVar[int]
    TXN_ID_FIELD_NUMBER: _ClassVar[int]
    handle: int
    event_time_ms: int
    idle: bool
    txn_id: str
    def __init__(self, handle: _Optional[int] = ..., event_time_ms: _Optional[int] = ..., idle: _Optional[bool] = ..., txn_id: _Optional[str] = ...) -> None: ...

class WatermarkReceipt(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, offsets: _Optional[_Iterable[int]] = ...) -> None: ...

class PartitionOffset(_message.Message):
    __slots__ = ("partition", "offset")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetWatermark(_message.Message):
    __slots__ = ("topic", "positions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    positions: _containers.RepeatedCompositeFieldContainer[PartitionOffset]
    def __init__(self, topic: _Optional[str] = ..., positions: _Optional[_Iterable[_Union[PartitionOffset, _Mapping]]] = ...) -> None: ...

class WatermarkValue(_message.Message):
    __slots__ = ("watermark_ms",)
    WATERMARK_MS_FIELD_NUMBER: _ClassVar[int]
    watermark_ms: int
    def __init__(self, watermark_ms: _Optional[int] = ...) -> None: ...

class WatermarkUpdate(_message.Message):
    __slots__ = ("consumer_id", "watermark_ms")
    CONSUMER_ID_FIELD_NUMBER: _ClassVar[int]
    WATERMARK_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_id: int
    watermark_ms: int
    def __init__(self, consumer_id: _Optional[int] = ..., watermark_ms: _Optional[int] = ...) -> None: ...

class CommitTransactions(_message.Message):
    __slots__ = ("txn_ids", "commit_id")
    TXN_IDS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    txn_ids: _containers.RepeatedScalarFieldContainer[str]
    commit_id: int
    def __init__(self, txn_ids: _Optional[_Iterable[str]] = ..., commit_id: _Optional[int] = ...) -> None: ...

class ListTopics(_message.Message):
    __slots__ = ("pattern",)
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    pattern: str
    def __init__(self, pattern: _Optional[str] = ...) -> None: ...

class Topics(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class TransactionsCommitted(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    def __init__(self, duplicate: _Optional[bool] = ...) -> None: ...
