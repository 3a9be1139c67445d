"""The native asyncio client, with Pulsar's names.

    async with await Client.connect("gateway://127.0.0.1:6650") as client:
        producer = await client.create_producer("orders")
        await producer.send(b"hello", key=b"k1")
        consumer = await client.subscribe("orders", "billing", mode="shared", initial_position="earliest")
        msg = await consumer.receive()
        await consumer.acknowledge(msg)
"""

from gateway.client.client import Client
from gateway.client.consumer import Consumer
from gateway.client.errors import ClientClosed, ConnectionLost
from gateway.client.message import EVENT_TIME_HEADER, Message, MessageId
from gateway.client.producer import Producer
from gateway.errors import (
    ConsumerBusy,
    GatewayError,
    NotAllowed,
    StorageUnavailable,
    SubscriptionNotFound,
    Timeout,
    TopicNotFound,
)
from gateway.records import Compression

__all__ = [
    "EVENT_TIME_HEADER",
    "Client",
    "ClientClosed",
    "Compression",
    "ConnectionLost",
    "Consumer",
    "ConsumerBusy",
    "GatewayError",
    "Message",
    "MessageId",
    "NotAllowed",
    "Producer",
    "StorageUnavailable",
    "SubscriptionNotFound",
    "Timeout",
    "TopicNotFound",
]
