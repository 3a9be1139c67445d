"""The native listener: a TCP server whose connections speak the native protocol, plus the
subscription and producer services they share."""

from __future__ import annotations

import asyncio
import contextlib

from gateway.domain.producers import ProducerService
from gateway.domain.services import Services
from gateway.domain.subscriptions import SubscriptionService
from gateway.native.connection import Connection
from gateway.native.dispatch import load_handlers
from gateway.net import TcpListener, server_ssl_context


class NativeServer(TcpListener):
    """The listener plus the services its connections share."""

    def __init__(self, services: Services) -> None:
        cfg = services.config
        super().__init__("native", self._connection, max_connections=cfg.max_connections, keepalive=cfg.tcp_keepalive)
        self.services = services
        self.subscriptions = SubscriptionService.open(
            services.log, services.store, services.config.node_id, watermarks=services.watermark
        )
        self.producers = ProducerService(services.log, services.store)
        self.subscriptions.txn_state = self._txn_state
        services.txn.settlers.append(self.subscriptions.settle_txn)
        self._live: set[Connection] = set()

    async def _txn_state(self, txn_id: str) -> str | None:
        info = await self.services.txn.describe(txn_id)
        return info.state if info is not None else None

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
        await self.subscriptions.close()
        with contextlib.suppress(ValueError):
            self.services.txn.settlers.remove(self.subscriptions.settle_txn)


async def start_native_server(services: Services, host: str, port: int) -> NativeServer:
    """Listen for native clients; every request module registers itself before the first connection."""
    load_handlers()
    server = NativeServer(services)
    cfg = services.config
    await server.start(host, port, server_ssl_context(cfg.tls_cert_file, cfg.tls_key_file))
    return server
