"""The native asyncio client, with Pulsar's names.

    async with await Client.connect("gateway://127.0.0.1:6650") as client:
        producer = await client.create_producer("orders")
        await producer.send(b"hello", key=b"k1")
        consumer = await client.subscribe("orders", "billing", mode="shared", initial_position="earliest")
        msg = await consumer.receive()
        await consumer.acknowledge(msg)

        txn = await client.new_transaction(timeout=30)   # consume-transform-produce, exactly once
        await producer.send(b"result", txn=txn)
        await consumer.acknowledge(msg, txn=txn)
        await txn.commit()

        async for msg in client.read_range("orders", partition=0, start=100, end=200):
            ...                                          # READ_COMMITTED, no position on the gateway

`gateway.client.blocking.Client` is the same client for scripts and notebooks, each call blocking.
Producers and consumers typed by a schema of the Schema Registry (`schema=AvroSchema(...)`,
`JsonSchema`, `ProtobufSchema`) write and read Confluent's wire format: `gateway.client.schema`.
"""

from gateway.client.batch import BatchReceivePolicy
from gateway.client.client import Client
from gateway.client.consumer import Consumer
from gateway.client.errors import (
    ClientClosed,
    ConnectionLost,
    IncompatibleSchema,
    SchemaError,
    SchemaRegistryError,
)
from gateway.client.letters import DeadLetterPolicy
from gateway.client.message import EVENT_TIME_HEADER, Message, MessageId
from gateway.client.pattern import PatternConsumer
from gateway.client.producer import Producer
from gateway.client.reader import PartitionInfo, StoredBatch
from gateway.client.schema import AvroSchema, JsonSchema, ProtobufSchema
from gateway.client.transaction import Transaction
from gateway.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    ConcurrentTransactions,
    ConsumerBusy,
    ExpiredTransactionError,
    GatewayError,
    InvalidConfig,
    InvalidRequest,
    MessageTooLarge,
    NotAllowed,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    OffsetOutOfRange,
    PartitionNotFound,
    StorageFull,
    StorageUnavailable,
    SubscriptionNotFound,
    Timeout,
    TopicNotFound,
    TransactionConflict,
)
from gateway.formats.records import Compression

__all__ = [
    "EVENT_TIME_HEADER",
    "AuthenticationFailed",
    "AuthorizationFailed",
    "AvroSchema",
    "BatchReceivePolicy",
    "Client",
    "ClientClosed",
    "Compression",
    "ConcurrentTransactions",
    "ConnectionLost",
    "Consumer",
    "ConsumerBusy",
    "DeadLetterPolicy",
    "ExpiredTransactionError",
    "GatewayError",
    "IncompatibleSchema",
    "InvalidConfig",
    "InvalidRequest",
    "JsonSchema",
    "Message",
    "MessageId",
    "MessageTooLarge",
    "NotAllowed",
    "NotEnoughReplicas",
    "NotEnoughReplicasAfterAppend",
    "OffsetOutOfRange",
    "PartitionInfo",
    "PartitionNotFound",
    "PatternConsumer",
    "Producer",
    "ProtobufSchema",
    "SchemaError",
    "SchemaRegistryError",
    "StorageFull",
    "StorageUnavailable",
    "StoredBatch",
    "SubscriptionNotFound",
    "Timeout",
    "TopicNotFound",
    "Transaction",
    "TransactionConflict",
]
