"""A TCP listener with staged shutdown and connection limits, shared by the Kafka and native faces."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable

from gateway import telemetry

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def server_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext | None:
    """The TLS context of every listener (TLS 1.2 at least), or None when no certificate is set."""
    if not cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file or None)
    return context


def keepalive(sock: socket.socket, idle: float) -> None:
    """TCP keepalive: after `idle` seconds of silence the kernel probes the peer three times, a third
    of `idle` apart, and resets a connection whose peer vanished (a half-open connection)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, max(1, int(idle)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, int(idle / 3)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class TcpListener:
    """Runs `handler` per connection; `close` stops accepting, waits `grace`, then cancels.

    Beyond `max_connections` (0: no limit) a new connection is closed at once, so a flood of
    connections cannot take the memory the others need; `keepalive` (seconds, 0: off) lets the
    kernel find peers that vanished without closing.
    """

    def __init__(
        self, name: str, handler: Handler, *, limit: int = 1 << 20, max_connections: int = 0, keepalive: float = 0.0
    ) -> None:
        self.name = name
        self.handler = handler
        self.limit = limit
        self.max_connections = max_connections
        self.keepalive = keepalive
        self.refused = 0  # connections closed at once for being over the limit
        self.stats = telemetry.listener(name)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> TcpListener:
        self._server = await asyncio.start_server(self._serve, host, port, limit=self.limit, ssl=tls,
                                                  ssl_handshake_timeout=10.0 if tls else None)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def connections(self) -> int:
        return len(self._conns)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self.max_connections and len(self._conns) >= self.max_connections:
            self.refused += 1
            self.stats.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("%s: %d connections open, the limit; refused %d so far",
                            self.name, len(self._conns), self.refused)
            writer.transport.abort()
            return
        self._conns.add(task)
        self.stats.accepted += 1
        self.stats.open += 1
        sock = writer.get_extra_info("socket")
        if sock is not None:
            # responses go out as several writes (header, then record bytes): without this, Nagle
            # holds the last one back until the client's delayed ACK, ~40 ms per response
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.keepalive > 0:
                    keepalive(sock, self.keepalive)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s connection from %s failed", self.name, writer.get_extra_info("peername"))
        finally:
            self._conns.discard(task)
            self.stats.open -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def close(self, grace: float = 5.0) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._conns:
            _, pending = await asyncio.wait(set(self._conns), timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()
        self._server = None
