"""The Kafka listener: a TCP server whose connections speak the Kafka protocol."""

from __future__ import annotations

import asyncio

from gateway.domain.services import Services
from gateway.kafka.connection import KafkaConnection
from gateway.kafka.dispatch import load_handlers
from gateway.net import FrameReader, TcpListener, server_ssl_context


class KafkaServer:
    """The listener plus its live connections, so shutdown can close idle ones without waiting."""

    def __init__(self, services: Services) -> None:
        self.services = services
        cfg = services.config
        self.listener = TcpListener("kafka", self._serve, max_connections=cfg.max_connections,
                                    keepalive=cfg.tcp_keepalive, reader=FrameReader)
        self.connections: set[KafkaConnection] = set()
        self.closing = False

    @property
    def port(self) -> int:
        return self.listener.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.closing or await self._held(writer):
            return
        conn = KafkaConnection(self.services, reader, writer)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)

    async def _held(self, writer: asyncio.StreamWriter) -> bool:
        """Whether this connection is over its ip's connection_creation_rate (KIP-612): if so it is
        held unread for its throttle time and then closed, as Kafka's acceptor does with a connection
        ConnectionQuotas throttles (its DelayedCloseSocket), so a client reconnecting in a loop is
        slowed to the rate rather than refused at once."""
        peer = writer.get_extra_info("peername")
        if not peer or not (held := await self.services.quotas.connect(str(peer[0]))):
            return False
        await asyncio.sleep(held / 1000)
        writer.close()
        return True

    async def close(self, grace: float = 5.0) -> None:
        """Stop accepting, close idle connections now, give busy ones `grace` to answer."""
        self.closing = True
        for conn in list(self.connections):
            conn.shutdown()
        await self.listener.close(grace)


async def start_kafka_server(services: Services, host: str, port: int) -> KafkaServer:
    """Listen for Kafka clients; every API module registers itself before the first connection."""
    load_handlers()
    server = KafkaServer(services)
    cfg = services.config
    await server.listener.start(host, port, server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file))
    return server
