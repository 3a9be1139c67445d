"""The native listener: a TCP server whose connections speak the native protocol, plus the
subscription and producer services they share (the subscriptions built and closed by the wiring)."""

from __future__ import annotations

import asyncio

from gateway.domain.producers import ProducerService
from gateway.domain.services import Services
from gateway.native.connection import Connection
from gateway.native.dispatch import load_handlers
from gateway.net import TcpListener, server_ssl_context


class NativeServer(TcpListener):
    """The listener plus the services its connections share."""

    def __init__(self, services: Services) -> None:
        cfg = services.config
        super().__init__("native", self._connection, max_connections=cfg.max_connections, keepalive=cfg.tcp_keepalive)
        self.services = services
        self.subscriptions = services.subscriptions
        self.producers = ProducerService(services.log)
        self._live: set[Connection] = set()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        self._live.add(conn)
        try:
            await conn.serve()
        finally:
            self._live.discard(conn)

    async def close(self, grace: float = 5.0) -> None:
        """Connections stop reading, answer what they have, then close; `grace` bounds the wait."""
        for conn in list(self._live):
            conn.reader.feed_eof()
        await super().close(grace)


async def start_native_server(services: Services, host: str, port: int) -> NativeServer:
    """Listen for native clients; every request module registers itself before the first connection."""
    load_handlers()
    server = NativeServer(services)
    cfg = services.config
    await server.start(host, port, server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file))
    return server
