"""The client: one connection to a gateway, from which producers and consumers are made."""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from gateway.client.connection import Connection
from gateway.client.consumer import Consumer
from gateway.client.producer import Producer
from gateway.errors import GatewayError
from gateway.pb import gateway_pb2 as pb
from gateway.records import Compression

_MODES = {"exclusive": pb.EXCLUSIVE, "failover": pb.FAILOVER, "shared": pb.SHARED}
_POSITIONS = {"earliest": pb.EARLIEST, "latest": pb.LATEST}
DEFAULT_PORT = 6650


def parse_url(url: str) -> tuple[str, int]:
    """`gateway://host:port` (the port defaults to 6650)."""
    parts = urlsplit(url if "://" in url else f"gateway://{url}")
    if parts.scheme != "gateway" or not parts.hostname:
        raise ValueError(f"expected gateway://host:port, not {url!r}")
    return parts.hostname, parts.port or DEFAULT_PORT


class Client:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._children: set[Producer | Consumer] = set()

    @classmethod
    async def connect(cls, url: str, *, operation_timeout: float = 30.0, client_name: str = "") -> Client:
        """Open a connection; `operation_timeout` bounds every request's wait for its answer."""
        host, port = parse_url(url)
        return cls(await Connection.open(host, port, timeout=operation_timeout, client_name=client_name))

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        *,
        batching: bool = True,
        linger_ms: float = 5.0,
        batch_max_messages: int = 1000,
        batch_max_bytes: int = 512 * 1024,
        compression: Compression | str | None = None,
        send_timeout: float = 30.0,
    ) -> Producer:
        """A producer on `topic` (created when the gateway auto-creates topics, else TopicNotFound).

        Messages wait up to `linger_ms` to share a batch; `batching=False` sends each alone.
        """
        resp = await self._conn.request(
            pb.Request(create_producer=pb.CreateProducer(topic=topic, producer_name=producer_name or ""))
        )
        created = resp.producer_created
        producer = Producer(
            self,
            topic,
            handle=created.handle,
            producer_id=created.producer_id,
            partitions=created.partitions,
            name=created.producer_name,
            batching=batching,
            linger_ms=linger_ms,
            batch_max_messages=batch_max_messages,
            batch_max_bytes=batch_max_bytes,
            compression=Compression.parse(compression),
            send_timeout=send_timeout,
        )
        self._children.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str,
        subscription: str,
        mode: str = "exclusive",
        initial_position: str = "latest",
        *,
        consumer_name: str | None = None,
        receiver_queue_size: int = 1000,
        ack_timeout: float | None = None,
        negative_ack_delay: float = 1.0,
    ) -> Consumer:
        """A consumer of every partition of `topic` on `subscription`.

        `mode`: exclusive (a second consumer gets ConsumerBusy), failover or shared.
        `initial_position` (earliest or latest) counts only when the subscription is created.
        `ack_timeout` (seconds): unacknowledged messages are delivered again after it.
        `negative_ack_delay` (seconds): how long a negatively acknowledged message waits.
        """
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        if initial_position not in _POSITIONS:
            raise ValueError("initial_position must be 'earliest' or 'latest'")
        resp = await self._conn.request(
            pb.Request(
                subscribe=pb.Subscribe(
                    topic=topic,
                    subscription=subscription,
                    mode=_MODES[mode],
                    initial_position=_POSITIONS[initial_position],
                    consumer_name=consumer_name or "",
                    ack_timeout_ms=int((ack_timeout or 0) * 1000),
                )
            )
        )
        consumer = Consumer(
            self,
            topic,
            subscription,
            consumer_id=resp.subscribed.consumer_id,
            partitions=resp.subscribed.partitions,
            mode=mode,
            receiver_queue_size=max(1, receiver_queue_size),
            negative_ack_delay=negative_ack_delay,
        )
        consumer.start()
        self._children.add(consumer)
        return consumer

    def _forget(self, child: Producer | Consumer) -> None:
        self._children.discard(child)

    async def close(self) -> None:
        """Flush producers, close consumers, then the connection."""
        for child in list(self._children):
            with contextlib.suppress(GatewayError):
                await child.close()
        await self._conn.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
